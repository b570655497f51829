/* pull: the thread that serves pops and what workers do with the jobs they popped, parks the
 * pops that wait and wakes them when a job is announced ready; the sweeps are in sweep.c. The
 * contract is in include/pull/pull.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/apidata.h"
#include "core/apijson.h"
#include "lib/clock.h"
#include "core/envelope.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "kafka/letter.h"
#include "kafka/producer.h"
#include "pull/pull_link.h"
#include "redis/store.h"

#define LOG_MODULE "pull"
#define LISTEN_RETRY_MS 1000       /* a subscription that failed is tried again this late */

static void queue_req(struct pull *p, struct req *r)
{
    pthread_mutex_lock(&p->mu);
    r->next = NULL;
    *p->queue_tail = r;
    p->queue_tail = &r->next;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->mu);
}

void pull_pop(struct pull *p, const struct api_pop *pop, answer_fn done, answer_wanted_fn wanted,
              void *opaque)
{
    struct req *r = calloc(1, sizeof(*r));
    int64_t wait = pop->wait_ms < p->cfg->pull.max_wait_ms ? pop->wait_ms : p->cfg->pull.max_wait_ms;

    if (!r) {
        answer_send(done, opaque, 503, API_UNAVAILABLE, "pop failed: out of memory", NULL);
        return;
    }
    *r = (struct req){ .kind = K_POP, .pop = *pop, .done = done, .wanted = wanted,
                       .opaque = opaque, .deadline_ms = clock_mono_ms() + wait };
    queue_req(p, r);
}

void pull_op(struct pull *p, enum api_verb verb, const struct api_pull_op *op, answer_fn done,
             void *opaque)
{
    struct req *r = calloc(1, sizeof(*r));

    if (!r) {
        answer_send(done, opaque, 503, API_UNAVAILABLE, "out of memory", NULL);
        return;
    }
    *r = (struct req){ .kind = K_OP, .verb = verb, .op = *op, .done = done, .opaque = opaque };
    queue_req(p, r);
}

/* The answer to a pop that reserved jobs (or none): every job decoded from its record. */
static void answer_pop(struct req *r, struct pullq_pop *pp)
{
    struct api_popped out[PULLQ_POP_MAX];
    struct job jobs[PULLQ_POP_MAX];
    size_t n = 0;

    for (size_t i = 0; i < pp->n && n < PULLQ_POP_MAX; i++) {
        struct pullq_popped *j = &pp->jobs[i];
        struct job_record rec;
        char err[256];
        if (job_record_read(j->id, j->rec, j->rec_len, &jobs[n], &rec, err, sizeof(err)) < 0) {
            /* it stays reserved: after its ttr it is ready again, in the end a dead letter */
            log_error("pop of topic=%s: job=%s has a record that does not decode: %s",
                      pp->topic, j->id, err);
            job_release(&jobs[n]);
            continue;
        }
        out[n] = (struct api_popped){ &jobs[n], j->attempt, j->receipt, j->until_ms };
        if (j->attempt == 1)
            metrics_pop_lateness(clock_now_ms() - j->due_ms);
        n++;
    }
    metrics_inc(n ? M_PULL_POPS : M_PULL_EMPTY_POPS);
    metrics_add(M_PULL_POPPED, n);
    answer_send(r->done, r->opaque, 200, API_OK, "ok", api_pop_data(out, n));
    for (size_t i = 0; i < n; i++)
        job_release(&jobs[i]);
    free(r);
}

/* The records of n pull jobs that ended (finished, or handed out once) expire
 * job.retention_s from now: they lived as long as their jobs. One that Redis did not answer
 * for keeps its record, which stays until the job is removed by id. */
static void let_go(struct pull *p, size_t n, const char *const *ids)
{
    char err[256];

    if (n && store_keep_many(p->st, n, ids, p->cfg->job.retention_s * 1000, NULL, err,
                             sizeof(err)) < 0) {
        metrics_inc(M_REDIS_ERRORS);
        log_warn("the records of %zu ended pull jobs (job=%s first) were not given their "
                 "expiry; they stay until removed: %s", n, ids[0], err);
    }
}

/* 1 when topic is one of the n in woken. */
static int among(char (*woken)[TOPIC_NAME_MAX + 1], size_t n, const char *topic)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(woken[i], topic) == 0)
            return 1;
    return 0;
}

/* Pops for n requests in one pipeline per round: round r pops the r-th topic of each request
 * that has one and got no job yet. Those that got jobs (or may not wait) are answered, the
 * others parked in their order: after the pops parked already, or (again 1: pops that were
 * parked before) ahead of them. */
static void serve_pops(struct pull *p, struct req **reqs, size_t n, int may_wait, int again)
{
    struct pullq_pop pops[BATCH_MAX];
    struct req *left[BATCH_MAX];
    size_t at[BATCH_MAX], nleft = 0;

    for (int round = 0; n > 0; round++) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            if (round >= reqs[i]->pop.ntopics) {
                left[nleft++] = reqs[i];   /* none of its topics had a job */
                continue;
            }
            pops[k] = (struct pullq_pop){ .topic = reqs[i]->pop.topics[round],
                                          .max = reqs[i]->pop.max, .ttr_ms = reqs[i]->pop.ttr_ms };
            at[k++] = i;
        }
        pullq_pop_many(p->q, k, pops, clock_now_ms(), p->cfg->pull.ttr_s * 1000,
                       p->cfg->job.retention_s * 1000);
        n = 0;
        for (size_t j = 0; j < k; j++) {
            struct req *r = reqs[at[j]];
            if (pops[j].failed && !pops[j].n) {
                log_warn("pop of topic=%s failed: %s", pops[j].topic, pops[j].err);
                metrics_inc(M_REDIS_ERRORS);
                answer_send(r->done, r->opaque, 503, API_UNAVAILABLE, pops[j].err, NULL);
                free(r);
            } else if (pops[j].n) {
                const char *once[PULLQ_POP_MAX];
                size_t nonce = 0;
                for (size_t i = 0; i < pops[j].n; i++)
                    if (pops[j].jobs[i].receipt[0])   /* reserved: swept when it ends */
                        pull_sweep_by(p, pops[j].topic, pull_mono_of(pops[j].jobs[i].until_ms));
                    else   /* handed out once: it ended */
                        once[nonce++] = pops[j].jobs[i].id;
                let_go(p, nonce, once);
                if (pops[j].unconfirmed)
                    log_warn("pop of topic=%s: %zu jobs handed out though their reservation "
                             "is not confirmed by redis.wait_replicas replicas (a failover "
                             "now could hand them out again): %s", pops[j].topic, pops[j].n,
                             pops[j].err);
                answer_pop(r, &pops[j]);
            } else {
                reqs[n++] = r;   /* on to its next topic */
            }
            if (pops[j].buried)   /* bound for the dead letters: sent by a sweep */
                pull_sweep_by(p, pops[j].topic, clock_mono_ms());
            pullq_pop_release(&pops[j]);
        }
    }
    /* parked again: ahead of the pops that came after them, in their order */
    for (size_t j = 0; j < nleft; j++) {
        struct req *r = left[again ? nleft - 1 - j : j];
        struct pullq_pop none = { .topic = r->pop.topics[0] };
        if (!may_wait || clock_mono_ms() >= r->deadline_ms || parked_add(p, r, again) < 0) {
            answer_pop(r, &none);
            continue;
        }
        /* a first wait: when its topics' next job comes is looked up (one released with a
         * delay is announced before it is ready) */
        for (int t = 0; !again && t < r->pop.ntopics; t++) {
            if (p->nfresh == WOKEN_MAX)
                p->fresh_all = 1;
            else if (!among(p->fresh, p->nfresh, r->pop.topics[t]))
                snprintf(p->fresh[p->nfresh++], TOPIC_NAME_MAX + 1, "%s", r->pop.topics[t]);
        }
    }
}

static const enum pullq_verb verb_of[] = {
    [API_FINISH] = PULLQ_FINISH, [API_RELEASE] = PULLQ_RELEASE, [API_TOUCH] = PULLQ_TOUCH,
    [API_BURY] = PULLQ_BURY,
};
static const char *const verb_name[] = {
    [API_FINISH] = "finish", [API_RELEASE] = "release", [API_TOUCH] = "touch", [API_BURY] = "bury",
};

static void answer_op(struct req *r, const struct pullq_op *o)
{
    char msg[512];

    if (o->failed) {
        metrics_inc(M_REDIS_ERRORS);
        snprintf(msg, sizeof(msg), "%s failed: %s", verb_name[r->verb], o->err);
        answer_send(r->done, r->opaque, 503, API_UNAVAILABLE, msg, NULL);
    } else if (o->res == PULLQ_NO_JOB) {
        snprintf(msg, sizeof(msg), "no pull job %s in topic %s", o->id, o->topic);
        answer_send(r->done, r->opaque, 404, API_NOT_FOUND, msg, NULL);
    } else if (o->res != PULLQ_DONE) {
        snprintf(msg, sizeof(msg), "receipt is not the job's reservation now (the job is %s): "
                 "its time to run ran out and it was popped again, or it was finished, released "
                 "or buried", pullq_state_name(o->state));
        answer_send(r->done, r->opaque, 409, API_CONFLICT, msg, NULL);
    } else {
        if (r->verb == API_FINISH && !o->repeated)
            metrics_inc(M_PULL_FINISHES);
        else if (r->verb == API_RELEASE)
            metrics_inc(M_PULL_RELEASES);
        answer_send(r->done, r->opaque, 200, API_OK, "ok",
                    api_pull_op_data(o->id, pullq_state_name(o->state), o->until_ms));
    }
    free(r);
}

/* Runs n finishes, releases, touches and buries in one pipeline. */
static void serve_ops(struct pull *p, struct req **reqs, size_t n)
{
    struct pullq_op ops[BATCH_MAX];
    char topics[BATCH_MAX][TOPIC_NAME_MAX + 1];
    int64_t now = clock_now_ms();
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        struct api_pull_op *a = &reqs[i]->op;
        const char *t;
        size_t len;
        if (pullq_receipt_topic(a->receipt, &t, &len) < 0 || len > TOPIC_NAME_MAX) {
            answer_send(reqs[i]->done, reqs[i]->opaque, 400, API_BAD_REQUEST,
                        "receipt is not one a pop handed out", NULL);
            free(reqs[i]);
            continue;
        }
        snprintf(topics[k], sizeof(topics[k]), "%.*s", (int)len, t);
        reqs[k] = reqs[i];
        ops[k] = (struct pullq_op){ .verb = verb_of[reqs[i]->verb], .topic = topics[k],
                                    .id = a->id, .receipt = a->receipt,
                                    .reason = a->reason[0] ? a->reason : "buried by a worker" };
        if (reqs[i]->verb == API_RELEASE)
            ops[k].after_ms = a->delay_ms;
        else if (reqs[i]->verb == API_TOUCH)
            ops[k].after_ms = a->ttr_ms ? a->ttr_ms : -1;   /* -1: the job's own ttr */
        k++;
    }
    const char *ended[BATCH_MAX];
    size_t nended = 0;

    pullq_run_many(p->q, k, ops, now, p->cfg->job.retention_s * 1000);
    for (size_t i = 0; i < k; i++)
        if (!ops[i].failed && ops[i].res == PULLQ_DONE && ops[i].verb == PULLQ_FINISH &&
            !ops[i].repeated)
            ended[nended++] = ops[i].id;
    let_go(p, nended, ended);
    for (size_t i = 0; i < k; i++) {
        if (!ops[i].failed && ops[i].res == PULLQ_DONE && ops[i].verb == PULLQ_TOUCH)
            pull_sweep_by(p, ops[i].topic, pull_mono_of(ops[i].until_ms));   /* its new end */
        else if (!ops[i].failed && ops[i].res == PULLQ_DONE && ops[i].verb == PULLQ_BURY)
            pull_sweep_by(p, ops[i].topic, clock_mono_ms());   /* its dead letter: sent by a sweep */
        answer_op(reqs[i], &ops[i]);
    }
}

/* Serves the requests taken from the queue: operations first (a release may ready a job for
 * a pop of the same round), then pops. */
static void serve(struct pull *p, struct req *list, int may_wait)
{
    struct req *ops[BATCH_MAX], *pops[BATCH_MAX];
    size_t nops = 0, npops = 0;

    while (list) {
        struct req *r = list;
        list = r->next;
        if (r->kind == K_OP)
            ops[nops++] = r;
        else
            pops[npops++] = r;
        if (nops == BATCH_MAX || (!list && nops)) {
            serve_ops(p, ops, nops);
            nops = 0;
        }
        if (npops == BATCH_MAX || (!list && npops)) {
            serve_pops(p, pops, npops, may_wait, 0);
            npops = 0;
        }
    }
}

/* 0 when the asker of the parked pop r is gone: it is answered (with no jobs) and takes none. */
static int wanted(const struct req *r)
{
    return !r->wanted || r->wanted(r->opaque);
}

/* Answers the parked pops whose wait ended, with no jobs (all of them when all is 1), and,
 * when gone is 1, those whose asker is gone. */
static void expire_parked(struct pull *p, int all, int gone)
{
    int64_t now = clock_mono_ms();
    struct req *r, *next;

    for (r = p->parked; r; r = next) {
        int left = gone && !wanted(r);
        next = r->next;
        if (left)
            metrics_inc(M_PULL_POPS_LEFT);
        if (all || left || now >= r->deadline_ms) {
            struct pullq_pop none = { .topic = r->pop.topics[0] };
            parked_remove(p, r);
            answer_pop(r, &none);
        }
    }
}

/* Takes the oldest parked pops waiting on each of the n topics whose count is above 0 (each
 * pop taken lowers it by its max), BATCH_MAX at most, into take; a pop whose asker left is
 * answered with nothing instead. Returns how many were taken. */
static size_t take_parked(struct pull *p, const char **topics, int64_t *counts, size_t n,
                          struct req **take)
{
    size_t k = 0;
    struct req *r;

    for (size_t i = 0; i < n && k < BATCH_MAX; i++) {
        while (counts[i] > 0 && k < BATCH_MAX && (r = parked_first_of(p, topics[i]))) {
            parked_remove(p, r);
            if (!wanted(r)) {   /* its asker left: it takes nothing */
                struct pullq_pop none = { .topic = r->pop.topics[0] };
                metrics_inc(M_PULL_POPS_LEFT);
                answer_pop(r, &none);
                continue;
            }
            counts[i] -= r->pop.max;
            take[k++] = r;
        }
    }
    return k;
}

/* Looks for ready jobs of the topics parked pops wait on (with nwoken > 0, only of those in
 * woken); where there are, the oldest pops of such a topic (enough of them to take what is
 * ready) pop again. Returns in how many ms the first job of a topic looked at that has none
 * ready now may be popped (-1: none is known). */
static int64_t look_for_parked(struct pull *p, char (*woken)[TOPIC_NAME_MAX + 1], size_t nwoken)
{
    const char **topics = NULL;
    char (*names)[TOPIC_NAME_MAX + 1] = NULL;
    int64_t *counts = NULL, *waits = NULL, soonest = -1;
    struct req *take[BATCH_MAX];
    size_t nt = 0, n;

    if (nwoken) {   /* those of the woken topics that pops wait on */
        if (!(topics = malloc(nwoken * sizeof(*topics))))
            goto out;
        for (size_t i = 0; i < nwoken; i++)
            if (parked_first_of(p, woken[i]))
                topics[nt++] = woken[i];
    } else if (!(topics = parked_topics(p, &nt))) {
        goto out;
    }
    /* the topics' names outlive the pops that leave their queues while they are looked at */
    if (!nt || !(names = malloc(nt * sizeof(*names))) || !(counts = calloc(nt, sizeof(*counts))) ||
        !(waits = calloc(nt, sizeof(*waits))))
        goto out;
    for (size_t i = 0; i < nt; i++)
        topics[i] = memcpy(names[i], topics[i], strlen(topics[i]) + 1);
    for (size_t i = 0; i < nt; i += BATCH_MAX)
        pullq_ready_now(p->q, nt - i < BATCH_MAX ? nt - i : BATCH_MAX,
                        (const char *const *)(topics + i), counts + i, waits + i);
    for (size_t i = 0; i < nt; i++)
        if (waits[i] > 0 && (soonest < 0 || waits[i] < soonest))
            soonest = waits[i];
    do {
        if ((n = take_parked(p, topics, counts, nt, take)))
            serve_pops(p, take, n, 1, 1);
    } while (n == BATCH_MAX);
out:
    free(topics);
    free(names);
    free(counts);
    free(waits);
    return soonest;
}

/* When the thread must next wake by itself: the next sweep, or while pops wait the next look
 * at their topics or for their clients' leaving. */
static int64_t next_wake(const struct pull *p)
{
    int64_t at = p->next_sweep_ms;

    if (p->parked && p->next_look_ms < at)
        at = p->next_look_ms;
    if (p->parked && p->next_gone_ms < at)
        at = p->next_gone_ms;
    return at;
}

/* Notes an announcement (pullq_channel): one job of a topic ready now, a topic to look at
 * (PULLQ_PEEK), or, "", every topic. Under p->mu. */
static void announced(struct pull *p, const char *message)
{
    int peek = strncmp(message, PULLQ_PEEK, strlen(PULLQ_PEEK)) == 0;
    const char *topic = message + (peek ? strlen(PULLQ_PEEK) : 0);
    size_t i = 0;

    while (i < p->nwoken && strcmp(p->woken[i], topic) != 0)
        i++;
    if (!topic[0] || (i == p->nwoken && p->nwoken == WOKEN_MAX)) {
        p->woken_all = 1;
        return;
    }
    if (i == p->nwoken) {
        snprintf(p->woken[p->nwoken++], TOPIC_NAME_MAX + 1, "%s", topic);
        p->wjobs[i] = peek ? 0 : 1;
    } else if (peek || !p->wjobs[i]) {
        p->wjobs[i] = 0;   /* how many is not known: looked at */
    } else {
        p->wjobs[i]++;
    }
}

/* For the n topics announced with their jobs (jobs[i] > 0), the oldest pops waiting on them
 * (enough of them to take what was announced) pop again, with no look first. */
static void take_announced(struct pull *p, char (*topics)[TOPIC_NAME_MAX + 1], int *jobs,
                           size_t n)
{
    const char *names[WOKEN_MAX];
    int64_t counts[WOKEN_MAX];
    struct req *take[BATCH_MAX];
    size_t k;

    for (size_t i = 0; i < n && i < WOKEN_MAX; i++) {
        names[i] = topics[i];
        counts[i] = jobs[i];
    }
    if ((k = take_parked(p, names, counts, n < WOKEN_MAX ? n : WOKEN_MAX, take)))
        serve_pops(p, take, k, 1, 1);
}

/* Hears the announcements of jobs made ready (pullq_channel) on a connection of its own, and
 * wakes the pull thread with their topics. While it hears them, waiting pops need no polling;
 * when the subscription fails, the pull thread polls again until it is back. */
static void *listen_main(void *arg)
{
    struct pull *p = arg;
    struct pullq *q = pullq_new(p->cfg);
    char topic[TOPIC_NAME_MAX + 1], err[256];
    int64_t retry_ms = 0;

    if (!q) {
        log_error("cannot listen for jobs made ready (out of memory): waiting pops poll Redis");
        return NULL;
    }
    while (!atomic_load(&p->stop_listening)) {
        int rc;
        if (!atomic_load(&p->listening)) {
            if (clock_mono_ms() < retry_ms) {
                usleep(50 * 1000);
                continue;
            }
            if (pullq_listen(q, err, sizeof(err)) < 0) {
                log_warn("listening for jobs made ready failed (waiting pops poll Redis "
                         "meanwhile): %s", err);
                retry_ms = clock_mono_ms() + LISTEN_RETRY_MS;
                continue;
            }
            atomic_store(&p->listening, 1);
            topic[0] = '\0';   /* announcements may have been missed: look at every topic */
        } else if ((rc = pullq_heard(q, 250, topic, sizeof(topic), err, sizeof(err))) < 0) {
            log_warn("listening for jobs made ready: %s (waiting pops poll Redis meanwhile)", err);
            atomic_store(&p->listening, 0);
            retry_ms = clock_mono_ms() + 100;
            continue;
        } else if (rc == 0) {
            continue;
        }
        pthread_mutex_lock(&p->mu);
        announced(p, topic);
        pthread_cond_signal(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    pullq_free(q);
    return NULL;
}

/* The next look at the topics waited on, soonest ms from now (-1: none known to be due): at
 * once with nobody to announce jobs, else when the first known job comes, or after
 * PULL_LOOK_MS at the latest. */
static int64_t next_look(const struct pull *p, int64_t now, int64_t soonest)
{
    if (!atomic_load(&p->listening))
        return now + PULL_WAIT_POLL_MS;
    if (soonest >= 0 && soonest < PULL_LOOK_MS)
        return now + (soonest > PULL_WAIT_POLL_MS ? soonest : PULL_WAIT_POLL_MS);
    return now + PULL_LOOK_MS;
}

static void *pull_main(void *arg)
{
    struct pull *p = arg;

    for (;;) {
        struct req *list;
        int quit, may_wait, all;
        size_t nwoken;
        int64_t now;

        pthread_mutex_lock(&p->mu);
        while (!p->queue && !p->quit && !(p->no_waiting && p->parked) && !p->nwoken &&
               !p->woken_all && clock_mono_ms() < next_wake(p))
            (void)cond_wait_until(&p->wake, &p->mu, next_wake(p));
        list = p->queue;
        p->queue = NULL;
        p->queue_tail = &p->queue;
        quit = p->quit;
        may_wait = !p->no_waiting;
        all = p->woken_all;
        nwoken = p->nwoken;
        memcpy(p->looking, p->woken, nwoken * sizeof(*p->woken));
        memcpy(p->ljobs, p->wjobs, nwoken * sizeof(*p->wjobs));
        p->nwoken = 0;
        p->woken_all = 0;
        pthread_mutex_unlock(&p->mu);

        serve(p, list, may_wait);
        now = clock_mono_ms();
        if (!may_wait || quit)
            expire_parked(p, 1, 0);
        if (p->parked && !all && nwoken)
            take_announced(p, p->looking, p->ljobs, nwoken);
        {   /* the rest to look at: topics announced without a count, and new waits' topics */
            size_t k = 0;
            for (size_t i = 0; i < nwoken; i++)
                if (!p->ljobs[i])
                    memmove(p->looking[k++], p->looking[i], sizeof(p->looking[i]));
            nwoken = k;
        }
        for (size_t i = 0; i < p->nfresh && !all; i++) {
            if (nwoken == WOKEN_MAX)
                all = 1;
            else if (!among(p->looking, nwoken, p->fresh[i]))
                memcpy(p->looking[nwoken++], p->fresh[i], sizeof(p->fresh[i]));
        }
        all |= p->fresh_all;
        p->nfresh = 0;
        p->fresh_all = 0;
        if (p->parked && (all || now >= p->next_look_ms)) {
            p->next_look_ms = next_look(p, now, look_for_parked(p, NULL, 0));
        } else if (p->parked && nwoken) {
            int64_t soonest = look_for_parked(p, p->looking, nwoken);
            if (next_look(p, now, soonest) < p->next_look_ms)
                p->next_look_ms = next_look(p, now, soonest);
        }
        expire_parked(p, 0, now >= p->next_gone_ms);
        if (now >= p->next_gone_ms)
            p->next_gone_ms = now + PULL_GONE_POLL_MS;
        if (!quit)
            pull_sweep(p, now);
        pull_mark_sent(p);
        if (quit)
            break;
    }
    return NULL;
}

/* Frees p's connections and arrays, and p (NULL: nothing). */
static void release(struct pull *p)
{
    if (!p)
        return;
    pullq_free(p->q);
    store_free(p->st);
    free(p->due);
    free(p->woken);
    free(p->looking);
    free(p->wjobs);
    free(p->ljobs);
    free(p->fresh);
    parked_free(p);
    free(p);
}

struct pull *pull_new(const struct config *cfg, char *err, size_t errlen)
{
    struct pull *p = calloc(1, sizeof(*p));

    if (!p || !(p->q = pullq_new(cfg)) || !(p->st = store_new(cfg)) ||
        !(p->woken = calloc(WOKEN_MAX, sizeof(*p->woken))) ||
        !(p->looking = calloc(WOKEN_MAX, sizeof(*p->looking))) ||
        !(p->wjobs = calloc(WOKEN_MAX, sizeof(*p->wjobs))) ||
        !(p->ljobs = calloc(WOKEN_MAX, sizeof(*p->ljobs))) ||
        !(p->fresh = calloc(WOKEN_MAX, sizeof(*p->fresh)))) {
        snprintf(err, errlen, "out of memory");
        release(p);
        return NULL;
    }
    p->cfg = cfg;
    p->queue_tail = &p->queue;
    if (!(p->rk = producer_new(cfg, "pull", DEAD_TIMEOUT_MS, 5, pull_dr_cb, p, err, errlen))) {
        release(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    cond_init_monotonic(&p->wake);
    if (pthread_create(&p->thread, NULL, pull_main, p) != 0) {
        snprintf(err, errlen, "cannot start the pull thread");
        rd_kafka_destroy(p->rk);
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->wake);
        release(p);
        return NULL;
    }
    /* without it waiting pops poll Redis, as while its subscription fails */
    p->listener_started = pthread_create(&p->listener, NULL, listen_main, p) == 0;
    return p;
}

void pull_stop_waiting(struct pull *p)
{
    pthread_mutex_lock(&p->mu);
    p->no_waiting = 1;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->mu);
}

void pull_free(struct pull *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    p->no_waiting = 1;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    atomic_store(&p->stop_listening, 1);
    if (p->listener_started)
        pthread_join(p->listener, NULL);
    rd_kafka_flush(p->rk, 2000);
    pull_mark_sent(p);
    rd_kafka_destroy(p->rk);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    release(p);
}

void pull_counts_wanted(struct pull *p)
{
    pthread_mutex_lock(&p->mu);
    p->counts_wanted_ms = clock_mono_ms();
    pthread_mutex_unlock(&p->mu);
}


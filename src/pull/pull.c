/* pull: the thread that serves pops and what workers do with the jobs they popped, parks the
 * pops that wait, and sweeps the pull topics. The contract is in include/pull/pull.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/apidata.h"
#include "core/apijson.h"
#include "lib/clock.h"
#include "core/envelope.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "kafka/letter.h"
#include "kafka/producer.h"
#include "pull/pull.h"
#include "pull/pullq.h"
#include "redis/store.h"

#define LOG_MODULE "pull"
#define DEAD_RESEND_MS 30000       /* a dead letter Kafka did not acknowledge is sent again then */
#define DEAD_TIMEOUT_MS 10000      /* a dead letter gives up on Kafka after this (sent again) */
#define BATCH_MAX 256              /* requests served in one pipeline at most */

enum kind { K_POP, K_OP };

struct req {
    enum kind kind;
    struct api_pop pop;
    enum api_verb verb;
    struct api_pull_op op;
    answer_fn done;
    answer_wanted_fn wanted;       /* a pop's; NULL: always wanted */
    void *opaque;
    int64_t deadline_ms;           /* monotonic: when a parked pop's wait ends */
    struct req *next;
};

/* A dead letter on its way to Kafka: what to mark once acknowledged, and what to send again
 * without the body should the dead-letter topic refuse it for good. */
struct pull_letter {
    char topic[TOPIC_NAME_MAX + 1];
    char id[JOB_ID_MAX + 1];
    char *key;                     /* owned */
    rd_kafka_headers_t *hdrs;      /* owned: a copy of the letter's headers; NULL once bare */
    int64_t due_ms;                /* epoch ms: the due time the job was made ready with */
    char why[256];                 /* why it was dead-lettered */
    struct pull_letter *next;
};

struct pull {
    const struct config *cfg;
    struct pullq *q;
    struct store *st;                  /* job records: a dead-lettered job's is marked failed */
    rd_kafka_t *rk;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    struct req *queue, **queue_tail;   /* new requests (mu) */
    int no_waiting;                    /* pull_stop_waiting was called (mu) */
    int quit;                          /* (mu) */
    struct pull_count *counts;         /* at the last sweep (mu) */
    size_t ncounts;
    /* the thread's own: */
    struct req *parked;                /* pops waiting for a job, oldest first */
    int64_t next_sweep_ms, next_look_ms, next_gone_ms;   /* monotonic */
    struct pull_letter *sent;               /* dead letters acknowledged, to mark */
};

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

/* Pops for n requests in one pipeline per round: round r pops the r-th topic of each request
 * that has one and got no job yet. Those that got jobs (or may not wait) are answered, the
 * others parked in their order: after the pops parked already, or (parked, a list head the
 * caller gives) before them, for pops that were parked before. */
static void serve_pops(struct pull *p, struct req **reqs, size_t n, int may_wait,
                       struct req **parked)
{
    struct pullq_pop pops[BATCH_MAX];
    struct req *left[BATCH_MAX], **tail = parked ? parked : &p->parked;
    size_t at[BATCH_MAX], nleft = 0;

    if (parked)
        *parked = NULL;
    while (*tail)
        tail = &(*tail)->next;
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
                if (pops[j].unconfirmed)
                    log_warn("pop of topic=%s: %zu jobs handed out though their reservation "
                             "is not confirmed by redis.wait_replicas replicas (a failover "
                             "now could hand them out again): %s", pops[j].topic, pops[j].n,
                             pops[j].err);
                answer_pop(r, &pops[j]);
            } else {
                reqs[n++] = r;   /* on to its next topic */
            }
            pullq_pop_release(&pops[j]);
        }
    }
    for (size_t i = 0; i < nleft; i++) {
        struct req *r = left[i];
        struct pullq_pop none = { .topic = r->pop.topics[0] };
        if (!may_wait || clock_mono_ms() >= r->deadline_ms) {
            answer_pop(r, &none);
        } else {
            r->next = NULL;
            *tail = r;
            tail = &r->next;
        }
    }
    if (parked && *parked) {   /* parked again: ahead of the pops that came after them */
        *tail = p->parked;
        p->parked = *parked;
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
    pullq_run_many(p->q, k, ops, now, p->cfg->job.retention_s * 1000);
    for (size_t i = 0; i < k; i++)
        answer_op(reqs[i], &ops[i]);
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
            serve_pops(p, pops, npops, may_wait, NULL);
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
    struct req **at = &p->parked;

    while (*at) {
        struct req *r = *at;
        int left = gone && !wanted(r);
        if (left)
            metrics_inc(M_PULL_POPS_LEFT);
        if (all || left || now >= r->deadline_ms) {
            struct pullq_pop none = { .topic = r->pop.topics[0] };
            *at = r->next;
            answer_pop(r, &none);
        } else {
            at = &r->next;
        }
    }
}

/* The index of topic in topics (n of them), or n. */
static size_t topic_index(const char *const *topics, size_t n, const char *topic)
{
    size_t i = 0;

    while (i < n && strcmp(topics[i], topic) != 0)
        i++;
    return i;
}

/* Looks for ready jobs of the topics parked pops wait on; where there are, the oldest pops of
 * such a topic (enough of them to take what is ready) pop again. */
static void look_for_parked(struct pull *p)
{
    const char *topics[BATCH_MAX];
    int64_t counts[BATCH_MAX];
    struct req *take[BATCH_MAX], *again;
    size_t nt = 0, n = 0;
    struct req **at;

    for (struct req *r = p->parked; r; r = r->next)
        for (int t = 0; t < r->pop.ntopics && nt < BATCH_MAX; t++)
            if (topic_index(topics, nt, r->pop.topics[t]) == nt)
                topics[nt++] = r->pop.topics[t];
    pullq_ready_now(p->q, nt, topics, clock_now_ms(), counts);
    at = &p->parked;
    while (*at && n < BATCH_MAX) {
        struct req *r = *at;
        size_t i = nt;
        for (int t = 0; t < r->pop.ntopics && i == nt; t++) {
            i = topic_index(topics, nt, r->pop.topics[t]);
            if (i < nt && counts[i] <= 0)
                i = nt;
        }
        if (i < nt && !wanted(r)) {   /* its asker left: it takes nothing */
            struct pullq_pop none = { .topic = r->pop.topics[0] };
            metrics_inc(M_PULL_POPS_LEFT);
            *at = r->next;
            answer_pop(r, &none);
        } else if (i < nt) {
            counts[i] -= r->pop.max;
            *at = r->next;
            take[n++] = r;
        } else {
            at = &r->next;
        }
    }
    if (n)
        serve_pops(p, take, n, 1, &again);
}

static void letter_free(struct pull_letter *l)
{
    if (l->hdrs)
        rd_kafka_headers_destroy(l->hdrs);
    free(l->key);
    free(l);
}

/* The headers of l's letter without its body (taken from l, which has none left after). */
static rd_kafka_headers_t *bare_headers(struct pull_letter *l)
{
    rd_kafka_headers_t *bare = l->hdrs;

    l->hdrs = NULL;
    headers_add(bare, LETTER_BODY, LETTER_BODY_OMITTED_JOB, strlen(LETTER_BODY_OMITTED_JOB));
    return bare;
}

/* Produces l's letter: value (len bytes) with hdrs (taken). One librdkafka refuses for good at
 * once (over its message.max.bytes) goes again without its body, once, as dr_cb does for one
 * the broker refuses. 0, or -1 with l freed and the failure logged (the sweep sends it again). */
static int produce_letter(struct pull *p, struct pull_letter *l, rd_kafka_headers_t *hdrs,
                          const char *value, size_t len)
{
    rd_kafka_resp_err_t e;

    e = rd_kafka_producev(p->rk, RD_KAFKA_V_TOPIC(p->cfg->delay.dlq_topic),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                          RD_KAFKA_V_KEY(l->key, strlen(l->key)),
                          RD_KAFKA_V_VALUE((void *)(uintptr_t)value, len),
                          RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(l), RD_KAFKA_V_END);
    if (!e)
        return 0;
    rd_kafka_headers_destroy(hdrs);
    if (l->hdrs && letter_refusal_of(e) == LETTER_REFUSED_NEVER) {
        log_warn("dead letter of topic=%s job=%s refused (%s): sent again without its body",
                 l->topic, l->id, rd_kafka_err2str(e));
        return produce_letter(p, l, bare_headers(l), NULL, 0);
    }
    log_warn("dead letter of topic=%s job=%s not sent (again in %d s): %s", l->topic, l->id,
             DEAD_RESEND_MS / 1000, rd_kafka_err2str(e));
    letter_free(l);
    return -1;
}

/* Sends a dead letter of a pull job to the dead-letter topic (kafka/letter.h builds it). */
static void send_dead(struct pull *p, const char *topic, const struct pullq_dead *d)
{
    char *own_topic;
    struct job_record rec;
    struct pull_letter *l;
    struct job job;
    char err[256];

    if (job_record_read(d->id, d->rec, d->rec_len, &job, &rec, err, sizeof(err)) < 0) {
        log_error("dead letter of topic=%s job=%s: record does not decode (%s); its bytes go as "
                  "they are", topic, d->id, err);
        job_release(&job);
        job = (struct job){ .body = d->rec, .body_len = d->rec_len };
        snprintf(job.id, sizeof(job.id), "%s", d->id);
    }
    own_topic = job.topic;   /* the record's, released with it */
    if (!job.topic || !job.topic[0])
        job.topic = (char *)(uintptr_t)topic;   /* the pull topic it was popped from */
    if (!(l = calloc(1, sizeof(*l))) || !(l->key = strdup(job.key ? job.key : d->id)) ||
        !(l->hdrs = letter_job_headers(&job, d->why, d->attempt, 0))) {
        if (l)
            free(l->key);
        free(l);
        goto out;
    }
    snprintf(l->topic, sizeof(l->topic), "%s", topic);
    snprintf(l->id, sizeof(l->id), "%s", d->id);
    snprintf(l->why, sizeof(l->why), "%s", d->why);
    l->due_ms = job.due_ms;
    if (produce_letter(p, l, rd_kafka_headers_copy(l->hdrs), job.body, job.body_len) == 0)
        log_warn("dead letter topic=%s job=%s: %s", topic, d->id, d->why);
out:
    job.topic = own_topic;
    if (job.body != d->rec)
        job_release(&job);
}

/* The report of a dead letter: acknowledged, to be marked; refused for good (too large), sent
 * again without its body, once; else sent again by the sweep. */
static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct pull *p = opaque;
    struct pull_letter *l = m->_private;

    (void)rk;
    if (m->err && l->hdrs && letter_refusal_of(m->err) == LETTER_REFUSED_NEVER) {
        log_warn("dead letter of topic=%s job=%s refused (%s): sent again without its body",
                 l->topic, l->id, rd_kafka_err2str(m->err));
        produce_letter(p, l, bare_headers(l), NULL, 0);
        return;
    }
    if (m->err) {
        log_warn("dead letter of topic=%s job=%s not acknowledged (again in %d s): %s", l->topic,
                 l->id, DEAD_RESEND_MS / 1000, rd_kafka_err2str(m->err));
        letter_free(l);
        return;
    }
    metrics_inc(M_PULL_DEAD);
    l->next = p->sent;
    p->sent = l;
}

/* Marks the acknowledged dead letters: the job's record failed (so that a redrive finds it, as
 * any job's that its target gave up on), then the pull job dead-lettered. One that fails is sent
 * again later, and marked then. */
static void mark_sent(struct pull *p)
{
    char err[256];

    rd_kafka_poll(p->rk, 0);
    while (p->sent) {
        struct pull_letter *l = p->sent;
        p->sent = l->next;
        if (store_fail_delivered(p->st, l->id, l->due_ms, l->why, err, sizeof(err)) < 0 ||
            pullq_dead_sent(p->q, l->topic, l->id, p->cfg->job.retention_s * 1000, err,
                            sizeof(err)) < 0)
            log_warn("dead letter of topic=%s job=%s sent; marking it failed (it may be sent "
                     "again): %s", l->topic, l->id, err);
        letter_free(l);
    }
}

/* Publishes the counts of a whole sweep (counts, n of them; taken). */
static void publish_counts(struct pull *p, struct pull_count *counts, size_t n)
{
    const char *labels[METRICS_FAMILY_MAX];
    int64_t ready[METRICS_FAMILY_MAX], reserved[METRICS_FAMILY_MAX];
    int k = n < METRICS_FAMILY_MAX ? (int)n : METRICS_FAMILY_MAX;

    for (int i = 0; i < k; i++) {
        labels[i] = counts[i].topic;
        ready[i] = counts[i].ready;
        reserved[i] = counts[i].reserved;
    }
    metrics_set_family(MF_PULL_READY, labels, ready, k);
    metrics_set_family(MF_PULL_RESERVED, labels, reserved, k);
    pthread_mutex_lock(&p->mu);
    free(p->counts);
    p->counts = counts;
    p->ncounts = n;
    pthread_mutex_unlock(&p->mu);
}

/* A sweep on its way through the pages of the registry. */
struct sweeping {
    struct pull_count *counts;
    size_t n, cap;
    size_t failed;
    int64_t now_ms;
};

/* Sweeps the n topics of one page of the registry, BATCH_MAX to a pipeline: expired
 * reservations ready again or dead, dead letters sent, counts noted in w; topics found empty
 * leave the registry (unless a job of theirs was made ready since). */
static void sweep_page(struct pull *p, char **topics, size_t n, struct sweeping *w)
{
    struct pullq_sweep *sw = calloc(BATCH_MAX, sizeof(*sw));
    const char *empty[BATCH_MAX];
    char err[256];

    for (size_t at = 0; sw && at < n; at += BATCH_MAX) {
        size_t k = n - at < BATCH_MAX ? n - at : BATCH_MAX, nempty = 0;
        for (size_t i = 0; i < k; i++)
            sw[i] = (struct pullq_sweep){ .topic = topics[at + i] };
        pullq_sweep_many(p->q, k, sw, w->now_ms, p->cfg->pull.max_attempts, DEAD_RESEND_MS);
        for (size_t i = 0; i < k; i++) {
            if (sw[i].failed && !w->failed++)
                log_warn("sweep of topic=%s failed: %s", sw[i].topic, sw[i].err);
            metrics_add(M_PULL_EXPIRIES, (uint64_t)sw[i].back);
            for (size_t d = 0; d < sw[i].ndead; d++)
                send_dead(p, sw[i].topic, &sw[i].dead[d]);
            if (!sw[i].failed && !sw[i].ready && !sw[i].reserved && !sw[i].buried)
                empty[nempty++] = sw[i].topic;
            if (!sw[i].failed && w->n == w->cap) {
                size_t cap = w->cap ? 2 * w->cap : 64;
                struct pull_count *c = realloc(w->counts, cap * sizeof(*c));
                if (c)
                    w->counts = c, w->cap = cap;
            }
            if (!sw[i].failed && w->n < w->cap) {
                struct pull_count *c = &w->counts[w->n++];
                snprintf(c->topic, sizeof(c->topic), "%s", sw[i].topic);
                c->ready = sw[i].ready;
                c->reserved = sw[i].reserved;
            }
            pullq_sweep_release(&sw[i]);
        }
        if (nempty && pullq_forget(p->q, nempty, empty, clock_now_ms() - PULLQ_FORGET_MS, err,
                                   sizeof(err)) < 0)
            log_warn("sweep: taking %zu empty topics out of the registry failed: %s", nempty,
                     err);
    }
    free(sw);
}

/* Every pull topic, page by page of the registry however many there are. */
static void sweep(struct pull *p)
{
    struct sweeping w = { .now_ms = clock_now_ms() };
    uint64_t cursor = 0;
    char **topics, err[256];
    size_t n;

    do {
        if (pullq_topics(p->q, &cursor, &topics, &n, err, sizeof(err)) < 0) {
            log_warn("sweep: listing the pull topics failed: %s", err);
            free(w.counts);
            return;   /* the counts stay those of the last sweep */
        }
        sweep_page(p, topics, n, &w);
        for (size_t i = 0; i < n; i++)
            free(topics[i]);
        free(topics);
    } while (cursor != 0);
    if (w.failed > 1)
        log_warn("sweep: %zu topics failed", w.failed);
    publish_counts(p, w.counts, w.n);
}

/* When the thread must next wake by itself: the next sweep, or the next look while pops wait. */
static int64_t next_wake(const struct pull *p)
{
    int64_t at = p->next_sweep_ms;

    if (p->parked && p->next_look_ms < at)
        at = p->next_look_ms;
    return at;
}

static void *pull_main(void *arg)
{
    struct pull *p = arg;

    for (;;) {
        struct req *list;
        int quit, may_wait;
        int64_t now;

        pthread_mutex_lock(&p->mu);
        while (!p->queue && !p->quit && !(p->no_waiting && p->parked) &&
               clock_mono_ms() < next_wake(p))
            (void)cond_wait_until(&p->wake, &p->mu, next_wake(p));
        list = p->queue;
        p->queue = NULL;
        p->queue_tail = &p->queue;
        quit = p->quit;
        may_wait = !p->no_waiting;
        pthread_mutex_unlock(&p->mu);

        serve(p, list, may_wait);
        now = clock_mono_ms();
        if (!may_wait || quit)
            expire_parked(p, 1, 0);
        if (p->parked && now >= p->next_look_ms) {
            look_for_parked(p);
            p->next_look_ms = now + PULL_WAIT_POLL_MS;
        }
        expire_parked(p, 0, now >= p->next_gone_ms);
        if (now >= p->next_gone_ms)
            p->next_gone_ms = now + PULL_GONE_POLL_MS;
        if (now >= p->next_sweep_ms && !quit) {
            sweep(p);
            p->next_sweep_ms = clock_mono_ms() + PULL_SWEEP_MS;
        }
        mark_sent(p);
        if (quit)
            break;
    }
    return NULL;
}

struct pull *pull_new(const struct config *cfg, char *err, size_t errlen)
{
    struct pull *p = calloc(1, sizeof(*p));

    if (!p || !(p->q = pullq_new(cfg)) || !(p->st = store_new(cfg))) {
        snprintf(err, errlen, "out of memory");
        if (p) {
            pullq_free(p->q);
            store_free(p->st);
        }
        free(p);
        return NULL;
    }
    p->cfg = cfg;
    p->queue_tail = &p->queue;
    if (!(p->rk = producer_new(cfg, "pull", DEAD_TIMEOUT_MS, 5, dr_cb, p, err, errlen))) {
        pullq_free(p->q);
        store_free(p->st);
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    cond_init_monotonic(&p->wake);
    if (pthread_create(&p->thread, NULL, pull_main, p) != 0) {
        snprintf(err, errlen, "cannot start the pull thread");
        rd_kafka_destroy(p->rk);
        pullq_free(p->q);
        store_free(p->st);
        free(p);
        return NULL;
    }
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
    rd_kafka_flush(p->rk, 2000);
    mark_sent(p);
    rd_kafka_destroy(p->rk);
    pullq_free(p->q);
    store_free(p->st);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    free(p->counts);
    free(p);
}

size_t pull_counts(struct pull *p, struct pull_count **out)
{
    size_t n;

    pthread_mutex_lock(&p->mu);
    n = p->ncounts;
    *out = malloc((n ? n : 1) * sizeof(**out));
    if (!*out)
        n = 0;
    else if (n)
        memcpy(*out, p->counts, n * sizeof(**out));
    pthread_mutex_unlock(&p->mu);
    return n;
}

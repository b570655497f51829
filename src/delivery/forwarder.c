/* forwarder: the delivery path of a message whose time has come: claim its record and hand
 * the job to its target (target.c), or move the message down a level, or dead-letter it.
 * Owns the refusal rules and the schedule occurrences' plans; claims and marks go in
 * pipelines (records.c). The contract is in include/delivery/forwarder.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callback/callout.h"
#include "redis/leases.h"
#include "lib/clock.h"
#include "core/config.h"
#include "core/envelope.h"
#include "delivery/forwarder.h"
#include "delivery/groups.h"
#include "core/held.h"
#include "core/job.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "kafka/producer.h"
#include "pull/pullq.h"
#include "core/recur.h"
#include "core/timing.h"
#include "core/decide.h"
#include "redis/store.h"
#include "kafka/warm.h"
#include "delivery/forwarder_link.h"

#define LOG_MODULE "forwarder"

static void *grow(void *arr, size_t *cap, size_t n, size_t elem)
{
    size_t c = *cap ? *cap : 256;
    void *na;

    while (c < n)
        c *= 2;
    if (c == *cap)
        return arr;
    if (!(na = realloc(arr, c * elem)))
        return NULL;
    *cap = c;
    return na;
}

/* Room for n messages in v. 0, or -1 when out of memory. */
static int vec_reserve(struct vec *v, size_t n)
{
    struct held **nv = grow(v->v, &v->cap, n, sizeof(*nv));

    if (!nv)
        return -1;
    v->v = nv;
    return 0;
}


/* Hands m back with its outcome; forwarder_submit made room for it. */
static void hand_back(struct forwarder *fw, struct held *m, enum fw_result result, int64_t at_ms)
{
    callout_call_free(m->call);
    m->call = NULL;
    fw->in_flight--;
    fw->out[fw->nout++] = (struct fw_outcome){ m, result, at_ms };
}

void fw_done(struct forwarder *fw, struct held *m)
{
    hand_back(fw, m, FW_DONE, 0);
}

/* Not due yet: back to the holder until at_ms, without a failure counted. */
void fw_hold_back(struct forwarder *fw, struct held *m, int64_t at_ms)
{
    hand_back(fw, m, FW_RETRY, at_ms);
}

void fw_retry(struct forwarder *fw, struct held *m)
{
    int64_t wait = BACKOFF_MIN_MS << (m->attempts < 6 ? m->attempts : 6);

    m->attempts++;
    m->take_over[0] = '\0';
    hand_back(fw, m, FW_RETRY, clock_now_ms() + (wait < BACKOFF_MAX_MS ? wait : BACKOFF_MAX_MS));
}

const char *fw_topic_of(const struct forwarder *fw, const struct held *m)
{
    return fw->cfg->delay.levels.topic[m->level];
}

/* Checked at the last moment before a send or a pull job made ready: a lease that ran out
 * while this instance was stopped must not let it pass on anything of a group another
 * instance took over. 1 when m's group is no longer surely ours: m is dropped (done). */
int fw_dropped_if_not_ours(struct forwarder *fw, struct held *m)
{
    if (groups_may_send(fw->groups, m, clock_mono_ms()))
        return 0;
    log_debug("drop topic=%s offset=%lld: group no longer ours", fw_topic_of(fw, m),
              (long long)m->offset);
    fw_done(fw, m);
    return 1;
}

/* Why a claim did not claim: pure, from the claim's answer and the message's due time. A
 * record is kept until due + retention at least (a removed one for retention after the remove),
 * so none before then means it was lost, not removed. */
static enum skip_reason skip_reason_of(const struct store_claim *c, int64_t due_ms,
                                       int64_t retention_ms, int64_t now)
{
    if (!c->found)
        return now >= due_ms + retention_ms ? SKIP_EXPIRED : SKIP_MISSING;
    if (c->stale)
        return SKIP_EARLIER_JOB;
    if (c->busy)
        return SKIP_COPY;
    if (c->foreign)
        return SKIP_FOREIGN;
    return c->before == JOB_CANCELLED ? SKIP_CANCELLED
         : c->before == JOB_FAILED    ? SKIP_FAILED : SKIP_DELIVERED;
}

static void skip(struct forwarder *fw, struct held *m, const char *id, enum skip_reason why)
{
    static const char *const text[SKIP_REASONS] = {
        [SKIP_EXPIRED] = "no record (expired)",
        [SKIP_MISSING] = "no record, though it should be there until due + job.retention_s: "
                         "lost in Redis (a failover without its replica, or a Redis crash)",
        [SKIP_CANCELLED] = "removed",
        [SKIP_DELIVERED] = "delivered already",
        [SKIP_FAILED] = "dead-lettered already",
        [SKIP_EARLIER_JOB] = "its due time is not the record's (a message of an earlier job with "
                             "this id, or of this job before it was rescheduled)",
        [SKIP_COPY] = "another copy of its message is in flight",
        [SKIP_FOREIGN] = "the message is not the job's own (its " HDR_TAG " is not the record's)",
        [SKIP_ELSEWHERE] = "another copy is being delivered by an instance that holds its group",
    };

    metrics_skipped(why);
    if (why == SKIP_MISSING)
        log_warn("skip job=%s topic=%s partition=%d offset=%lld: %s", id, fw_topic_of(fw, m),
                 m->partition, (long long)m->offset, text[why]);
    else
        log_info("skip job=%s: %s", id, text[why]);
    fw_done(fw, m);
}

/* The job of m was rescheduled to the later due_ms: its message goes on to that time, down the
 * levels or, with less than the smallest level left, waiting here; then it claims the record
 * with that due time. */
void fw_move_on(struct forwarder *fw, struct held *m, int64_t due_ms, int64_t now)
{
    m->due_ms = due_ms;
    if (due_ms - now >= fw->cfg->delay.levels.ms[0])
        fw_move_down(fw, m, now);
    else
        fw_hold_back(fw, m, due_ms);
}

/* The fire time of an occurrence: its id is "<schedule id>@<fire time, epoch ms>". */
static int64_t fire_of(const char *id)
{
    const char *at = strrchr(id, '@');

    return at ? strtoll(at + 1, NULL, 10) : -1;
}

/* A due occurrence of a schedule: planned, its schedule told, and 1 when it runs; a missed one
 * that catch_up skips is marked cancelled (0), and not delivered. again: it was being delivered
 * when claimed (a delivery tried again, or taken over): planned to run before. */
static int occurrence_runs(struct forwarder *fw, struct held *m, const struct job *job,
                           int again, int64_t now)
{
    struct recur_timing t;
    struct recur_plan plan;
    char err[256];
    int64_t fire = fire_of(job->id);

    if (fire < 0 || timing_parse(job->sched->timing, strlen(job->sched->timing), &t,
                                           err, sizeof(err)) < 0) {
        log_warn("job=%s: its schedule's timing does not read (%s): delivered, the schedule "
                 "goes on from its sweep", job->id, fire < 0 ? "no fire time in the id" : err);
        return 1;
    }
    recur_plan(&t, job->sched->id, fire, job->sched->runs, now, &plan);
    /* Delivered again, rescheduled by hand, its callback called again after a failure (the
     * record's due time moved), or its message moved on (a call deferred): it was planned when
     * it first came due, and runs now, whatever passed meanwhile. */
    if (!plan.run && (again || m->due_ms > job->due_ms ||
                      job->due_ms != fire + recur_jitter(job->sched->id, fire, t.jitter_ms))) {
        plan.run = 1;
        if (t.max_runs > 0 && job->sched->runs + 1 >= t.max_runs)
            plan.next_ms = -1;
    }
    if (fw->occurred)
        fw->occurred(fw->occurred_ctx, job, fire, &t, &plan);
    if (plan.run) {
        metrics_inc(M_SCHED_RUN);
        metrics_sched_lateness(now - job->due_ms);
        return 1;
    }
    metrics_inc(M_SCHED_SKIPPED);
    log_info("job=%s skipped: missed, a later fire time passed too (catch_up %s)", job->id,
             recur_catch_up_name(t.catch_up));
    m->mark = JOB_CANCELLED;
    m->stage = ST_MARK;
    vec_push(&fw->marks, m);
    return 0;
}

/* Keeps occurrence m, with its job (taken over: *job is zeroed), for the check of its
 * schedule: 1, or 0 out of memory (it runs unchecked, as it did before checks). */
static int hold_for_check(struct forwarder *fw, struct held *m, struct job *job)
{
    struct occ *o = grow(fw->occs, &fw->occ_cap, fw->nocc + 1, sizeof(*o));

    if (!o)
        return 0;
    fw->occs = o;
    fw->occs[fw->nocc++] = (struct occ){ .m = m, .job = *job };
    memset(job, 0, sizeof(*job));
    return 1;
}

/* The occurrences claimed since the last check, checked against their schedules in one round
 * trip: delivered, or, changed, paused or deleted since they were made, marked cancelled. */
static void run_occurrences(struct forwarder *fw)
{
    const struct job **jobs = calloc(fw->nocc, sizeof(*jobs));
    enum recur_verdict *says = calloc(fw->nocc, sizeof(*says));

    if (jobs && says && fw->check) {
        for (size_t i = 0; i < fw->nocc; i++)
            jobs[i] = &fw->occs[i].job;
        fw->check(fw->occurred_ctx, fw->nocc, jobs, says);
    }
    for (size_t i = 0; i < fw->nocc; i++) {
        struct occ *o = &fw->occs[i];
        enum recur_verdict v = says ? says[i] : RECUR_RUNS;
        if (v == RECUR_RUNS) {
            fw_deliver(fw, o->m, &o->job);
        } else {
            metrics_inc(M_SCHED_SKIPPED);
            log_info("job=%s %s", o->job.id, recur_verdict_why(v));
            o->m->mark = JOB_CANCELLED;
            o->m->skipped = (int)v;
            o->m->stage = ST_MARK;
            vec_push(&fw->marks, o->m);
        }
        job_release(&o->job);
    }
    fw->nocc = 0;
    free(jobs);
    free(says);
}

/* What a claimed record says to do with its message. */
void fw_act_on_claim(struct forwarder *fw, struct held *m, const struct store_claim *c,
                         int64_t now)
{
    char id[JOB_ID_MAX + 1], err[256], reason[512];
    struct job_record rec;
    struct job job;

    fw_id_of(m, id);
    if (c->other) {
        int gone = fw_claim_owner_gone(fw, c->other, c->other_len);
        if (gone > 0) {   /* claimed again at once, taking that claim over */
            if (c->other_len < sizeof(m->take_over))
                snprintf(m->take_over, sizeof(m->take_over), "%.*s", (int)c->other_len, c->other);
            else
                snprintf(m->take_over, sizeof(m->take_over), "*");
            fw_hold_back(fw, m, now);
        } else if (gone < 0) {
            fw_retry(fw, m);
        } else {
            skip(fw, m, id, SKIP_ELSEWHERE);
        }
        return;
    }
    if (c->moved_due_ms > 0) {
        fw_move_on(fw, m, c->moved_due_ms, now);
        return;
    }
    if (c->wait) {
        fw_hold_back(fw, m, now + MOVED_WAIT_MS);
        return;
    }
    if (!c->found || !c->claimed) {
        skip(fw, m, id, skip_reason_of(c, m->due_ms, fw->cfg->job.retention_s * 1000, now));
        return;
    }
    if (job_record_read(id, c->data, c->len, &job, &rec, err, sizeof(err)) < 0) {
        snprintf(reason, sizeof(reason), "record of job %s does not decode: %s", id, err);
        fw_dead_letter(fw, m, DLQ_RECORD, reason);
        job_release(&job);
        return;
    }
    m->claimed_due_ms = job.due_ms;   /* the claim wrote it into the head, with the token */
    if (fw_refused_for_good(fw, m, now)) {
        fw_refusal_reason(m, reason, sizeof(reason));
        fw_dead_letter_job(fw, m, &job, reason);
    } else if (job.due_ms > now) {
        fw_hold_back(fw, m, job.due_ms);   /* the record is the authority on the due time */
    } else if (job.sched && !occurrence_runs(fw, m, &job, c->before == JOB_DELIVERING, now)) {
        ;   /* skipped: marked */
    } else if (job.sched && fw->check && hold_for_check(fw, m, &job)) {
        return;   /* the job is the check's now */
    } else {
        fw_deliver(fw, m, &job);
    }
    job_release(&job);
}

/* Why decide_message dead-letters m, in words. */
static void dead_reason(const struct forwarder *fw, const struct held *m, enum dlq_reason r,
                        char *out, size_t outlen)
{
    char why[TOPIC_NAME_MAX + 128];

    switch (r) {
    case DLQ_ENVELOPE:
        snprintf(out, outlen, "%s", m->env_err);
        break;
    case DLQ_TOPIC: case DLQ_LOOP: case DLQ_DEAD_LETTER_TOPIC:
        levels_check_target(&fw->cfg->delay.levels, fw->cfg->delay.dlq_topic, m->env.topic,
                            m->env.topic_len, why, sizeof(why));
        snprintf(out, outlen, "header %s %s: %s", HDR_TOPIC,
                 r == DLQ_TOPIC ? "is not a valid topic" : "names no business topic", why);
        break;
    case DLQ_TOO_FAR:
        snprintf(out, outlen, "header %s is more than job.max_delay_s (%lld s) away", HDR_DUE,
                 (long long)fw->cfg->job.max_delay_s);
        break;
    case DLQ_REFUSED:
        fw_refusal_reason(m, out, outlen);
        break;
    case DLQ_ID:
        job_id_valid(m->env.id, m->env.id_len, why, sizeof(why));
        snprintf(out, outlen, "header %s is not a valid job id: %s", HDR_ID, why);
        break;
    default:
        snprintf(out, outlen, "cannot be handled");
    }
}

/* Sorts one message of a flush: at once, or into the claim and mark pipelines, as
 * decide_message says. */
static void route(struct forwarder *fw, struct held *m, int64_t now)
{
    char why[TOPIC_NAME_MAX + 128], reason[512];
    struct decide_facts f = { .envelope_ok = m->env_ok, .target = TARGET_OK, .due_ms = m->due_ms,
                             .now_ms = now, .max_delay_ms = fw->cfg->job.max_delay_s * 1000,
                             .smallest_level_ms = fw->cfg->delay.levels.ms[0] };
    enum dlq_reason r;

    if (m->stage == ST_MARK) {
        vec_push(&fw->marks, m);
        return;
    }
    if (m->env_ok && !m->env.topic) {
        /* a job's message without dq-topic (its record names the target), or a direct
         * callback without one */
        f.target = TARGET_OK;
        f.has_id = m->env.id != NULL;
        f.id_valid = f.has_id && job_id_valid(m->env.id, m->env.id_len, why, sizeof(why)) == 0;
    } else if (m->env_ok) {
        f.target = levels_check_target(&fw->cfg->delay.levels, fw->cfg->delay.dlq_topic,
                                       m->env.topic, m->env.topic_len, why, sizeof(why));
        f.has_id = m->env.id != NULL;
        f.id_valid = f.has_id && job_id_valid(m->env.id, m->env.id_len, why, sizeof(why)) == 0;
        f.refused_for_good = !f.has_id && fw_refused_for_good(fw, m, now);
    }
    switch (decide_message(&f, &r)) {
    case DECIDE_DEAD:
        dead_reason(fw, m, r, reason, sizeof(reason));
        fw_dead_letter(fw, m, r, reason);
        break;
    case DECIDE_MOVE:
        fw_move_down(fw, m, now);
        break;
    case DECIDE_WAIT:
        fw_hold_back(fw, m, m->due_ms);   /* its offset stays unfinished meanwhile */
        break;
    case DECIDE_CLAIM:
        vec_push(&fw->claims, m);
        break;
    case DECIDE_DELIVER:
        fw_deliver(fw, m, NULL);
        break;
    }
}

/* Room for n outcomes. 0, or -1 when out of memory. */
static int out_reserve(struct forwarder *fw, size_t n)
{
    struct fw_outcome *no = grow(fw->out, &fw->out_cap, n, sizeof(*no));

    if (!no)
        return -1;
    fw->out = no;
    return 0;
}

int forwarder_submit(struct forwarder *fw, struct held *m)
{
    size_t n = fw->in_flight + 1;

    /* every message in flight may be in each batch at once, and each leaves with an outcome */
    if (vec_reserve(&fw->batch, n) < 0 || vec_reserve(&fw->claims, n) < 0 ||
        vec_reserve(&fw->marks, n) < 0 || out_reserve(fw, n + fw->nout) < 0) {
        log_error("out of memory taking topic=%s offset=%lld", fw_topic_of(fw, m),
                  (long long)m->offset);
        return -1;
    }
    fw->in_flight++;
    vec_push(&fw->batch, m);
    return 0;
}

int forwarder_outcome(struct forwarder *fw, struct fw_outcome *out)
{
    if (fw->out_next == fw->nout) {
        fw->out_next = fw->nout = 0;
        return 0;
    }
    *out = fw->out[fw->out_next++];
    return 1;
}

void forwarder_flush(struct forwarder *fw)
{
    int64_t now = clock_now_ms();

    for (size_t i = 0; i < fw->batch.n; i++)
        route(fw, fw->batch.v[i], now);
    fw->batch.n = 0;
    if (fw->claims.n)
        fw_run_claims(fw, now);
    if (fw->nocc)
        run_occurrences(fw);
    if (fw->nready)
        fw_run_ready(fw);
    if (fw->marks.n)
        fw_run_marks(fw);
}

int forwarder_poll(struct forwarder *fw)
{
    struct call_outcome out[CALLOUT_TAKE_MAX];
    size_t n;
    int more;

    rd_kafka_poll(fw->rk, 0);
    n = callout_outcomes(fw->co, out, &more);
    for (size_t i = 0; i < n; i++)
        fw_act_on_call(fw, &out[i]);
    if (fw->nready)
        fw_run_ready(fw);
    if (fw->marks.n)
        fw_run_marks(fw);
    return more;
}

size_t forwarder_in_flight(const struct forwarder *fw)
{
    return fw->in_flight;
}

rd_kafka_t *forwarder_producer(struct forwarder *fw)
{
    return fw->rk;
}

struct forwarder *forwarder_new(const struct config *cfg, struct groups *gs, int wake_fd,
                                char *err, size_t errlen)
{
    struct forwarder *fw = calloc(1, sizeof(*fw));

    if (!fw || !(fw->st = store_new(cfg)) || !(fw->pq = pullq_new(cfg))) {
        snprintf(err, errlen, "out of memory");
        if (fw)
            store_free(fw->st);
        free(fw);
        return NULL;
    }
    fw->cfg = cfg;
    fw->groups = gs;
    fw_token_part(fw_fnv1a(groups_token(gs)), fw->instance);   /* so another can tell its lease */
    fw->instance[TOKEN_PART] = ':';
    fw->instance[TOKEN_PART + 1] = '\0';
    if (!(fw->rk = producer_new(cfg, "forwarder", DELIVERY_TIMEOUT_MS, FORWARD_LINGER_MS, fw_report, fw,
                                err, errlen))) {
        store_free(fw->st);
        pullq_free(fw->pq);
        free(fw);
        return NULL;
    }
    if (!(fw->warm = warm_new(fw->rk, err, errlen)) ||
        !(fw->co = callout_new(cfg, fw->st, wake_fd, err, errlen))) {
        warm_free(fw->warm);
        rd_kafka_destroy(fw->rk);
        store_free(fw->st);
        pullq_free(fw->pq);
        free(fw);
        return NULL;
    }
    producer_warm(fw->rk, cfg, WARM_TIMEOUT_MS);
    return fw;
}

void forwarder_on_occurrence(struct forwarder *fw, forwarder_occurrence_fn *fn,
                             forwarder_sched_check_fn *check, void *ctx)
{
    fw->occurred = fn;
    fw->check = check;
    fw->occurred_ctx = ctx;
}

struct warm *forwarder_warm(struct forwarder *fw)
{
    return fw->warm;
}

void forwarder_free(struct forwarder *fw, int flush_ms)
{
    if (!fw)
        return;
    callout_free(fw->co);   /* calls unanswered: made again after a restart */
    if (rd_kafka_flush(fw->rk, flush_ms) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        /* what a hung broker never answered: purged, its reports hand the messages back, to
         * be freed below (read again on restart) */
        rd_kafka_purge(fw->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_flush(fw->rk, 1000);
    }
    if (fw->marks.n)
        fw_run_marks(fw);
    warm_free(fw->warm);
    rd_kafka_destroy(fw->rk);
    store_free(fw->st);
    pullq_free(fw->pq);
    free(fw->ready);
    free(fw->entries);
    fw_scratch_release(&fw->sc);
    for (size_t i = fw->out_next; i < fw->nout; i++)
        free(fw->out[i].m);   /* finished after the holder's last commit: nothing to record */
    free(fw->out);
    free(fw->batch.v);
    free(fw->claims.v);
    for (size_t i = 0; i < fw->nocc; i++)
        job_release(&fw->occs[i].job);
    free(fw->occs);
    free(fw->sends);
    free(fw->marks.v);
    free(fw);
}

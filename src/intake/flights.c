/* flights: adds on their way to Kafka. The delay-topic reference of each stored add is
 * produced, and the add answered from its delivery report, or 503 at kafka.produce_timeout_ms;
 * a failed add's record is taken back, a failed reschedule's put back. Part of the intake; the
 * shared inside is include/intake/intake_link.h. */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/api.h"
#include "redis/leases.h"
#include "lib/clock.h"
#include "core/envelope.h"
#include "intake/health.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "intake/moves.h"
#include "kafka/producer.h"
#include "pull/pull.h"
#include "pull/pullq.h"
#include "core/decide.h"
#include "kafka/stats.h"
#include "redis/store.h"
#include "kafka/warm.h"
#include "lib/workers.h"
#include "intake/intake_link.h"

#define LOG_MODULE "intake"

/* A reschedule's new message did not reach Kafka (why): puts the old record back through st,
 * so that the job keeps its old due time, and answers. A record changed meanwhile (claimed: its
 * due time came, no earlier than the new one; removed; rescheduled again) shows that the
 * reschedule held. Returns the status answered; pa stays allocated. */
int intake_moved_failed(struct intake *in, struct store *st, struct pending_add *pa, const char *why)
{
    char err[256] = "out of memory", msg[768];
    int undone = 0;

    if (!st || move_undo(st, in->cfg, pa->job.id, pa->moved, &undone, err, sizeof(err)) < 0) {
        log_error("job=%s: reschedule failed (%s) and its record could not be put back: %s",
                  pa->job.id, why, err);
        snprintf(msg, sizeof(msg), "reschedule failed: %s; its record could not be put back (%s): "
                 "the job is delivered at its old due time, or soon after", why, err);
    } else if (!undone) {
        metrics_inc(M_JOBS_RESCHEDULED);
        intake_reply(pa, 200, API_OK, "ok");
        return 200;
    } else {
        snprintf(msg, sizeof(msg), "reschedule failed: %s; the job keeps its due time", why);
    }
    intake_reply(pa, 503, API_RESCHEDULE_FAILED, msg);
    return 503;
}

/* Kafka has the message of a job moved to an earlier time: its older messages need not wait
 * for it any more (else they wait till the time the record names, and claim the job then). */
static void moved_arrived(struct intake *in, struct pending_add *pa)
{
    char err[256];

    if (move_arrived(in->st, pa->job.id, pa->moved, err, sizeof(err)) < 0)
        log_info("job=%s: its older messages wait for the time its record names: %s", pa->job.id,
                 err);
}

/* Answers an add or reschedule that never reached Kafka (status, code, msg) and frees it. */
void intake_refuse(struct intake *in, struct store *st, struct pending_add *pa, int status,
                   int code, const char *msg)
{
    if (pa->moved)
        intake_moved_failed(in, st, pa, msg);
    else
        intake_reply(pa, status, code, msg);
    intake_free_add(pa);
}

/* Deletes the record of an add whose Kafka message failed: no message, no delivery, but a
 * pending record would say otherwise. */
static void undo(struct intake *in, const char *id)
{
    char err[256];

    if (store_drop_pending(in->st, id, NULL, err, sizeof(err)) < 0)
        log_error("job=%s could not be undone (it cannot be delivered: no Kafka message): %s", id, err);
}

/* The lists of adds awaiting Kafka: in the order sent (they all wait the same time, so the head
 * is the first to reach its deadline), and those answered before Kafka's report. Intake thread
 * only (and intake_free once it has stopped). */
static void flight_push(struct flights *l, struct pending_add *pa)
{
    pa->fnext = NULL;
    pa->fprev = l->tail;
    if (l->tail)
        l->tail->fnext = pa;
    else
        l->head = pa;
    l->tail = pa;
}

static void flight_remove(struct flights *l, struct pending_add *pa)
{
    if (pa->fprev)
        pa->fprev->fnext = pa->fnext;
    else
        l->head = pa->fnext;
    if (pa->fnext)
        pa->fnext->fprev = pa->fprev;
    else
        l->tail = pa->fprev;
    pa->fprev = pa->fnext = NULL;
}

/* Answers an add whose message Kafka has not acknowledged within kafka.produce_timeout_ms,
 * whatever librdkafka is still waiting for (a refused connection, a broker that hangs, no
 * leader): 503, and its record deleted, so that the message, should it reach Kafka later,
 * finds none and delivers nothing. A record claimed by a delivery meanwhile (delivering,
 * delivered, failed) shows that its message did reach Kafka: the add succeeded. A record that
 * could not be deleted may still be delivered: the answer says so. pa stays allocated for its
 * report. */
static void give_up(struct intake *in, struct pending_add *pa)
{
    enum job_state left = JOB_PENDING;
    char err[256], msg[640];
    int kept = 0;

    if (pa->moved) {
        snprintf(msg, sizeof(msg), "kafka did not acknowledge its message within "
                 "kafka.produce_timeout_ms (%lld ms)", (long long)in->cfg->kafka.produce_timeout_ms);
        pa->answered = intake_moved_failed(in, in->st, pa, msg);
        return;
    }
    if (!pa->resent && store_drop_pending(in->st, pa->job.id, &left, err, sizeof(err)) < 0) {
        log_error("job=%s could not be undone (its message, should Kafka take it late, delivers "
                  "it): %s", pa->job.id, err);
        kept = 1;
    }
    if (left == JOB_DELIVERING || left == JOB_DELIVERED || left == JOB_FAILED) {
        pa->answered = 200;
        if ((pa->fresh = !pa->resent))
            metrics_inc(M_JOBS_ADDED);
        intake_reply(pa, 200, API_OK, "ok");
        return;
    }
    pa->answered = 503;
    metrics_inc(M_KAFKA_ERRORS);
    snprintf(msg, sizeof(msg), "add failed: kafka did not acknowledge it within "
             "kafka.produce_timeout_ms (%lld ms)%s%.200s%s",
             (long long)in->cfg->kafka.produce_timeout_ms,
             pa->resent ? "" : kept ? "; its record could not be deleted (" : "; nothing was kept",
             kept ? err : "", kept ? "): it may still be delivered; add it again with the same id" : "");
    intake_reply(pa, 503, API_ADD_FAILED, msg);
}

/* An add waited its whole deadline (or librdkafka gave up on it) with no add acknowledged since
 * it was sent: Kafka counts as unreachable from then on. */
static void note_unacknowledged(struct intake *in, const struct pending_add *pa, int64_t now)
{
    if (in->last_ack_ms >= pa->sent_ms || atomic_load(&in->unreachable_since))
        return;
    atomic_store(&in->unreachable_at, now);
    atomic_store(&in->unreachable_since, pa->sent_ms);
    health_suspect_kafka(in->health);
    log_warn("kafka: no add acknowledged for %lld ms; adds fail at once until a broker answers "
             "again (probed every %d ms)", (long long)(now - pa->sent_ms), HEALTH_SUSPECT_MS);
}

/* Answers the adds past their deadline. When none was acknowledged since the oldest of them
 * was sent, Kafka counts as unreachable from then on. */
void intake_expire_flights(struct intake *in)
{
    int64_t now = clock_mono_ms(), timeout = in->cfg->kafka.produce_timeout_ms;
    struct pending_add *pa;

    while ((pa = in->flight.head) && now - pa->sent_ms >= timeout) {
        flight_remove(&in->flight, pa);
        note_unacknowledged(in, pa, now);
        give_up(in, pa);
        flight_push(&in->late, pa);
    }
}

/* 1 while Kafka counts as unreachable: no probe found a broker answering since it was found
 * out. A probe that did ends that state (who: what noticed, for the log). */
int intake_kafka_unreachable(struct intake *in, const char *who)
{
    int64_t since = atomic_load(&in->unreachable_since);

    if (!since)
        return 0;
    if (health_kafka_answered_ms(in->health) <= atomic_load(&in->unreachable_at))
        return 1;
    if (atomic_compare_exchange_strong(&in->unreachable_since, &since, 0))
        log_info("kafka: a broker answers again (%s); adds try Kafka again", who);
    return 0;
}

void flights_report(rd_kafka_t *rk, const rd_kafka_message_t *m, void *unused)
{
    struct pending_add *pa = m->_private;
    struct intake *in = pa->in;
    char msg[512];

    (void)rk;
    (void)unused;
    if (!m->err) {
        in->last_ack_ms = clock_mono_ms();
        if (atomic_exchange(&in->unreachable_since, 0))
            log_info("kafka: adds are acknowledged again");
    }
    if (pa->answered) {
        flight_remove(&in->late, pa);
        if (!m->err && pa->answered != 200)
            log_info("job=%s: Kafka acknowledged its message after the %s was answered %d; the "
                     "message %s", pa->job.id, pa->moved ? "reschedule" : "add", pa->answered,
                     pa->moved ? "moves on to the job's due time" : "finds no record and delivers nothing");
        intake_free_add(pa);
        return;
    }
    flight_remove(&in->flight, pa);
    if (m->err == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT)
        note_unacknowledged(in, pa, clock_mono_ms());
    if (m->err && pa->moved) {
        metrics_inc(M_KAFKA_ERRORS);
        snprintf(msg, sizeof(msg), "kafka: %s", rd_kafka_err2str(m->err));
        intake_refuse(in, in->st, pa, 503, API_RESCHEDULE_FAILED, msg);
        return;
    }
    if (pa->moved) {
        log_info("rescheduled job=%s due=%lld", pa->job.id, (long long)pa->job.due_ms);
        metrics_inc(M_JOBS_RESCHEDULED);
        moved_arrived(in, pa);
        intake_finish_add(pa, 200, API_OK, "ok");
        return;
    }
    if (m->err) {
        metrics_inc(M_KAFKA_ERRORS);
        log_warn("add failed job=%s kafka: %s", pa->job.id, rd_kafka_err2str(m->err));
        if (!pa->resent)
            undo(in, pa->job.id);
        snprintf(msg, sizeof(msg), "add failed: kafka: %s", rd_kafka_err2str(m->err));
        intake_finish_add(pa, 503, API_ADD_FAILED, msg);
        return;
    }
    log_debug("added job=%s partition=%d offset=%lld", pa->job.id, m->partition, (long long)m->offset);
    if ((pa->fresh = !pa->resent))
        metrics_inc(M_JOBS_ADDED);   /* the same job added again is no new job */
    intake_finish_add(pa, 200, API_OK, pa->resent ? "ok (the same job was already added)" : "ok");
}

/* Produces the delay-topic message that references a stored job. 0, or -1 with err set.
 * It has no key (the id is in dq-id): librdkafka's sticky partitioner then fills one partition
 * at a time, and the broker takes one produce request per few milliseconds, not one per
 * partition per linger. Keyed by id, the broker would spend about 40 us of CPU per add on
 * requests. */
int intake_produce_ref(struct intake *in, struct pending_add *pa, char *err, size_t errlen)
{
    const struct job *job = &pa->job;
    const struct levels *lv = &in->cfg->delay.levels;
    int level = levels_route(lv, job->delay_ms);
    rd_kafka_headers_t *h = rd_kafka_headers_new(4);
    rd_kafka_resp_err_t e;

    if (job->topic[0])   /* a callback-only job has none */
        headers_add(h, HDR_TOPIC, job->topic, strlen(job->topic));
    headers_add(h, HDR_ID, job->id, strlen(job->id));
    if (job->tag[0])   /* a record written before tags has none */
        headers_add(h, HDR_TAG, job->tag, strlen(job->tag));
    headers_add_int(h, HDR_DUE, job->due_ms);
    /* CreateTime = the instant the delay was measured from, so timestamp + level <= due. */
    e = rd_kafka_producev(in->rk, RD_KAFKA_V_TOPIC(lv->topic[level]),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                          RD_KAFKA_V_HEADERS(h),
                          RD_KAFKA_V_TIMESTAMP(job->created_ms), RD_KAFKA_V_OPAQUE(pa),
                          RD_KAFKA_V_END);
    if (e) {
        rd_kafka_headers_destroy(h);
        snprintf(err, errlen, "kafka: %s", rd_kafka_err2str(e));
        return -1;
    }
    pa->sent_ms = clock_mono_ms();
    flight_push(&in->flight, pa);
    return 0;
}

/* The same job is pending already: an earlier add of it may have failed after writing the
 * record, before Kafka had its message, so the message is sent again, with the record's tag and
 * due time, and the add answered when Kafka has it. A second message of one job is harmless:
 * the first to claim the record delivers it, the other finds it delivered (or busy) and skips. */
static void resend(struct intake *in, struct pending_add *pa, const struct store_add_answer *a)
{
    char err[256], msg[512];
    int64_t now = clock_now_ms();

    pa->resent = 1;
    snprintf(pa->job.tag, sizeof(pa->job.tag), "%s", a->tag);
    pa->job.due_ms = a->due_ms;
    pa->job.created_ms = now;
    pa->job.delay_ms = a->due_ms > now ? a->due_ms - now : 0;
    if (intake_produce_ref(in, pa, err, sizeof(err)) == 0)
        return;
    snprintf(msg, sizeof(msg), "add failed: %s", err);   /* the record stays: a retry sends again */
    intake_finish_add(pa, 503, API_ADD_FAILED, msg);
}

/* What the record said: answer at once, or go on to Kafka. */
void intake_after_record(struct intake *in, struct pending_add *pa, const struct store_add_answer *a)
{
    char err[256], msg[512];

    if (!a->ok) {
        metrics_inc(M_REDIS_ERRORS);
        snprintf(msg, sizeof(msg), "add failed: %s", a->err);
        intake_finish_add(pa, 503, API_ADD_FAILED, msg);
    } else if (a->res == STORE_DUPLICATE && a->state == JOB_PENDING && a->due_ms >= 0) {
        resend(in, pa, a);
    } else if (a->res == STORE_DUPLICATE) {
        intake_finish_add(pa, 200, API_OK, "ok (the same job was already added)");
    } else if (a->res == STORE_ADD_NOT_A_RECORD) {
        snprintf(msg, sizeof(msg), "job id %s is taken by a Redis value that is not a job record",
                 pa->job.id);
        intake_finish_add(pa, 409, API_CONFLICT, msg);
    } else if (a->res == STORE_CONFLICT) {
        snprintf(msg, sizeof(msg), "job id %s is already used by another job (state %s)", pa->job.id,
                 job_state_name(a->state));
        intake_finish_add(pa, 409, API_CONFLICT, msg);
    } else {
        if (intake_produce_ref(in, pa, err, sizeof(err)) == 0)
            return;
        log_warn("add failed job=%s %s", pa->job.id, err);
        undo(in, pa->job.id);
        snprintf(msg, sizeof(msg), "add failed: %s", err);
        intake_finish_add(pa, 503, API_ADD_FAILED, msg);
    }
}

void flights_give_up_all(struct intake *in)
{
    struct pending_add *left;

    while ((left = in->flight.head)) {   /* as at their deadline (expire_flights) */
        flight_remove(&in->flight, left);
        give_up(in, left);
        flight_push(&in->late, left);
    }
}

void flights_free_all(struct intake *in)
{
    struct pending_add *left;

    while ((left = in->flight.head) || (left = in->late.head)) {
        flight_remove(left == in->flight.head ? &in->flight : &in->late, left);
        intake_free_add(left);
    }
}

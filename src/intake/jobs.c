/* jobs: the intake. HTTP threads queue parsed adds; one intake thread writes them to Redis in
 * pipelines and produces their delay-topic references, answering each add from Kafka's delivery
 * report. get, remove, reschedule and the claims view run on the workers (workers.c), each
 * with its own Redis connection; the pending view is the stats thread's. No call made by an
 * HTTP thread waits on the network. The contract is in include/intake/jobs.h. */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/api.h"
#include "core/apidata.h"
#include "core/apijson.h"
#include "redis/leases.h"
#include "lib/clock.h"
#include "core/envelope.h"
#include "intake/health.h"
#include "intake/jobs.h"
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

#define LOG_MODULE "jobs"
#define WARM_TIMEOUT_MS 5000    /* start-up metadata fetch; Kafka down only delays start */
/* Adds wait this long to travel to Kafka in batches: under load the broker handles one request
 * per batch, not per add; an add is answered this much later at most. */
#define INTAKE_LINGER_MS 2
#define INTAKE_BATCH_MAX 1024   /* adds written to Redis in one pipeline */
#define INTAKE_IDLE_MS 100      /* longest sleep of the intake thread: how soon it sees a stop */
#define PURGE_WAIT_MS 1000      /* at shutdown, for the reports of purged messages */
#define WORKER_BATCH 64         /* requests a worker takes at once, to share round trips */

/* An add from the moment it is parsed until Kafka answered for it. */
struct pending_add {
    struct jobs *jobs;
    struct job job;             /* owned */
    int64_t queued_ms;          /* monotonic: when it entered the intake queue */
    int fresh;                  /* answered 200 as the add that made the job */
    int resent;                 /* its record was there already: not this add's to undo */
    int answered;               /* the status it was answered with at its deadline, else 0: the
                                 * report then only frees it */
    int64_t sent_ms;            /* monotonic: when its message went to librdkafka */
    jobs_done_fn done;          /* a single add's; NULL for a job of a batch */
    void *opaque;
    struct batch *batch;        /* the batch it is a job of, or NULL */
    struct move *moved;         /* a reschedule's message, not an add's; else NULL */
    size_t slot;                /* its index in the batch */
    struct pending_add *next;   /* in the intake queue */
    struct pending_add *fprev, *fnext;   /* in the list of adds awaiting Kafka, oldest first, or
                                          * in the list of those answered before Kafka did */
};

/* A list of adds linked by fprev and fnext. */
struct flights {
    struct pending_add *head, *tail;
};

/* A request served by a worker. */
enum task_kind { T_GET, T_REMOVE, T_RESCHEDULE, T_CLAIMS, T_HAND_BACK };

struct task {
    enum task_kind kind;
    char id[JOB_ID_MAX + 1];
    int64_t due_ms;             /* a reschedule's new due time */
    int group;                  /* a hand-back's group */
    jobs_done_fn done;
    void *opaque;
};

/* Each kind's error code and the start of its failure message. */
static const struct {
    int code;
    const char *failed;
} task_kinds[] = {
    [T_GET] = { API_GET_FAILED, "get failed" },
    [T_REMOVE] = { API_REMOVE_FAILED, "remove failed" },
    [T_RESCHEDULE] = { API_RESCHEDULE_FAILED, "reschedule failed" },
    [T_CLAIMS] = { API_UNAVAILABLE, "claims" },
    [T_HAND_BACK] = { API_UNAVAILABLE, "release" },
};

struct jobs {
    const struct config *cfg;
    struct api_limits limits;
    size_t max_message_bytes;   /* the producers' message.max.bytes: no delivery is larger */
    rd_kafka_t *rk;
    struct warm *warm;          /* the deliveries' producer: each added job's topic is noted */
    pthread_t thread;
    atomic_int stop;
    struct workers *workers;
    int nworkers;
    struct store **wstore;      /* each worker's connection, made at its first use */
    struct leases **wview;      /* each worker's claims view, made at its first use */
    struct pullq **wpull;       /* each worker's pull queues connection, made at its first use */
    struct pull *pull;          /* pops and what workers do with popped jobs */
    pthread_mutex_t stats_mu;
    struct stats *stats;        /* the pending view's Kafka handle, made at its first use */
    /* The intake queue: HTTP threads append parsed adds, the intake thread takes them all at
     * once and writes them to Redis in one pipeline, so no HTTP thread waits on a round trip. */
    pthread_mutex_t q_mu;
    struct pending_add *q_head, **q_tail;
    int wake[2];                /* the queue and librdkafka's delivery reports write here */
    struct store *st;           /* the intake thread's own connection */
    /* The intake thread's: adds whose message Kafka has not acknowledged yet, oldest first. */
    struct flights flight;
    /* The intake thread's: adds answered at their deadline, whose report is still to come. */
    struct flights late;
    int64_t last_ack_ms;        /* monotonic: Kafka's last acknowledgement of an add */
    /* Monotonic ms since which no add was acknowledged although one waited longer than
     * kafka.produce_timeout_ms, or 0: adds fail at once meanwhile, until a probe of the health
     * thread finds a broker answering after unreachable_at (when it was found out). Read by
     * /readyz too. */
    _Atomic int64_t unreachable_since;
    _Atomic int64_t unreachable_at;
    struct health *health;      /* Redis and Kafka probed in the background */
    struct store_add_answer answers[INTAKE_BATCH_MAX];   /* the intake thread's, per batch */
};

static void answer(jobs_done_fn done, void *opaque, int status, int code, const char *msg, void *data)
{
    done(opaque, status, api_response(code, msg, data));
}

/* An add_batch request until every job of it is answered: then it answers the request. */
struct batch {
    pthread_mutex_t mu;
    size_t n;
    size_t left;                        /* jobs not answered yet, plus one while being queued */
    struct api_job_answer *answers;     /* n */
    jobs_done_fn done;
    void *opaque;
};

/* Notes the answer of one job of b (job id "" or NULL when none is known); the last one
 * answers the request and frees b. */
static void batch_note(struct batch *b, size_t slot, int status, int code, const char *msg,
                       const char *id, int fresh)
{
    struct api_job_answer *a = &b->answers[slot];
    size_t left;

    if (msg) {
        a->status = status;
        a->code = code;
        a->fresh = fresh;
        snprintf(a->message, sizeof(a->message), "%s", msg);
        snprintf(a->job_id, sizeof(a->job_id), "%s", id ? id : "");
    }
    pthread_mutex_lock(&b->mu);
    left = --b->left;
    pthread_mutex_unlock(&b->mu);
    if (left > 0)
        return;
    answer(b->done, b->opaque, 200, API_OK, "ok", api_batch_data(b->answers, b->n));
    pthread_mutex_destroy(&b->mu);
    free(b->answers);
    free(b);
}

/* Answers an add (a single one, or a job of a batch); on success with its job id. */
static void reply(struct pending_add *pa, int status, int code, const char *msg)
{
    if (pa->batch)
        batch_note(pa->batch, pa->slot, status, code, msg, pa->job.id, pa->fresh);
    else
        answer(pa->done, pa->opaque, status, code, msg,
               code != API_OK ? NULL
               : pa->moved ? api_rescheduled_data(pa->job.id, pa->job.due_ms)
                           : api_job_id_data(pa->job.id));
}

static void free_add(struct pending_add *pa)
{
    job_release(&pa->job);
    move_free(pa->moved);
    free(pa);
}

/* Answers an add and frees it. */
static void finish_add(struct pending_add *pa, int status, int code, const char *msg)
{
    reply(pa, status, code, msg);
    free_add(pa);
}

/* A reschedule's new message did not reach Kafka (why): puts the old record back through st,
 * so that the job keeps its old due time, and answers. A record changed meanwhile (claimed: its
 * due time came, no earlier than the new one; removed; rescheduled again) shows that the
 * reschedule held. Returns the status answered; pa stays allocated. */
static int moved_failed(struct jobs *jobs, struct store *st, struct pending_add *pa, const char *why)
{
    char err[256] = "out of memory", msg[768];
    int undone = 0;

    if (!st || move_undo(st, jobs->cfg, pa->job.id, pa->moved, &undone, err, sizeof(err)) < 0) {
        log_error("job=%s: reschedule failed (%s) and its record could not be put back: %s",
                  pa->job.id, why, err);
        snprintf(msg, sizeof(msg), "reschedule failed: %s; its record could not be put back (%s): "
                 "the job is delivered at its old due time, or soon after", why, err);
    } else if (!undone) {
        metrics_inc(M_JOBS_RESCHEDULED);
        reply(pa, 200, API_OK, "ok");
        return 200;
    } else {
        snprintf(msg, sizeof(msg), "reschedule failed: %s; the job keeps its due time", why);
    }
    reply(pa, 503, API_RESCHEDULE_FAILED, msg);
    return 503;
}

/* Kafka has the message of a job moved to an earlier time: its older messages need not wait
 * for it any more (else they wait till the time the record names, and claim the job then). */
static void moved_arrived(struct jobs *jobs, struct pending_add *pa)
{
    char err[256];

    if (move_arrived(jobs->st, pa->job.id, pa->moved, err, sizeof(err)) < 0)
        log_info("job=%s: its older messages wait for the time its record names: %s", pa->job.id,
                 err);
}

/* Answers an add or reschedule that never reached Kafka (status, code, msg) and frees it. */
static void refuse(struct jobs *jobs, struct store *st, struct pending_add *pa, int status,
                   int code, const char *msg)
{
    if (pa->moved)
        moved_failed(jobs, st, pa, msg);
    else
        reply(pa, status, code, msg);
    free_add(pa);
}

/* Deletes the record of an add whose Kafka message failed: no message, no delivery, but a
 * pending record would say otherwise. */
static void undo(struct jobs *jobs, const char *id)
{
    char err[256];

    if (store_drop_pending(jobs->st, id, NULL, err, sizeof(err)) < 0)
        log_error("job=%s could not be undone (it cannot be delivered: no Kafka message): %s", id, err);
}

/* The lists of adds awaiting Kafka: in the order sent (they all wait the same time, so the head
 * is the first to reach its deadline), and those answered before Kafka's report. Intake thread
 * only (and jobs_free once it has stopped). */
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
static void give_up(struct jobs *jobs, struct pending_add *pa)
{
    enum job_state left = JOB_PENDING;
    char err[256], msg[640];
    int kept = 0;

    if (pa->moved) {
        snprintf(msg, sizeof(msg), "kafka did not acknowledge its message within "
                 "kafka.produce_timeout_ms (%lld ms)", (long long)jobs->cfg->kafka.produce_timeout_ms);
        pa->answered = moved_failed(jobs, jobs->st, pa, msg);
        return;
    }
    if (!pa->resent && store_drop_pending(jobs->st, pa->job.id, &left, err, sizeof(err)) < 0) {
        log_error("job=%s could not be undone (its message, should Kafka take it late, delivers "
                  "it): %s", pa->job.id, err);
        kept = 1;
    }
    if (left == JOB_DELIVERING || left == JOB_DELIVERED || left == JOB_FAILED) {
        pa->answered = 200;
        if ((pa->fresh = !pa->resent))
            metrics_inc(M_JOBS_ADDED);
        reply(pa, 200, API_OK, "ok");
        return;
    }
    pa->answered = 503;
    metrics_inc(M_KAFKA_ERRORS);
    snprintf(msg, sizeof(msg), "add failed: kafka did not acknowledge it within "
             "kafka.produce_timeout_ms (%lld ms)%s%.200s%s",
             (long long)jobs->cfg->kafka.produce_timeout_ms,
             pa->resent ? "" : kept ? "; its record could not be deleted (" : "; nothing was kept",
             kept ? err : "", kept ? "): it may still be delivered; add it again with the same id" : "");
    reply(pa, 503, API_ADD_FAILED, msg);
}

/* An add waited its whole deadline (or librdkafka gave up on it) with no add acknowledged since
 * it was sent: Kafka counts as unreachable from then on. */
static void note_unacknowledged(struct jobs *jobs, const struct pending_add *pa, int64_t now)
{
    if (jobs->last_ack_ms >= pa->sent_ms || atomic_load(&jobs->unreachable_since))
        return;
    atomic_store(&jobs->unreachable_at, now);
    atomic_store(&jobs->unreachable_since, pa->sent_ms);
    health_suspect_kafka(jobs->health);
    log_warn("kafka: no add acknowledged for %lld ms; adds fail at once until a broker answers "
             "again (probed every %d ms)", (long long)(now - pa->sent_ms), HEALTH_SUSPECT_MS);
}

/* Answers the adds past their deadline. When none was acknowledged since the oldest of them
 * was sent, Kafka counts as unreachable from then on. */
static void expire_flights(struct jobs *jobs)
{
    int64_t now = clock_mono_ms(), timeout = jobs->cfg->kafka.produce_timeout_ms;
    struct pending_add *pa;

    while ((pa = jobs->flight.head) && now - pa->sent_ms >= timeout) {
        flight_remove(&jobs->flight, pa);
        note_unacknowledged(jobs, pa, now);
        give_up(jobs, pa);
        flight_push(&jobs->late, pa);
    }
}

/* 1 while Kafka counts as unreachable: no probe found a broker answering since it was found
 * out. A probe that did ends that state (who: what noticed, for the log). */
static int kafka_unreachable(struct jobs *jobs, const char *who)
{
    int64_t since = atomic_load(&jobs->unreachable_since);

    if (!since)
        return 0;
    if (health_kafka_answered_ms(jobs->health) <= atomic_load(&jobs->unreachable_at))
        return 1;
    if (atomic_compare_exchange_strong(&jobs->unreachable_since, &since, 0))
        log_info("kafka: a broker answers again (%s); adds try Kafka again", who);
    return 0;
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *unused)
{
    struct pending_add *pa = m->_private;
    struct jobs *jobs = pa->jobs;
    char msg[512];

    (void)rk;
    (void)unused;
    if (!m->err) {
        jobs->last_ack_ms = clock_mono_ms();
        if (atomic_exchange(&jobs->unreachable_since, 0))
            log_info("kafka: adds are acknowledged again");
    }
    if (pa->answered) {
        flight_remove(&jobs->late, pa);
        if (!m->err && pa->answered != 200)
            log_info("job=%s: Kafka acknowledged its message after the %s was answered %d; the "
                     "message %s", pa->job.id, pa->moved ? "reschedule" : "add", pa->answered,
                     pa->moved ? "moves on to the job's due time" : "finds no record and delivers nothing");
        free_add(pa);
        return;
    }
    flight_remove(&jobs->flight, pa);
    if (m->err == RD_KAFKA_RESP_ERR__MSG_TIMED_OUT)
        note_unacknowledged(jobs, pa, clock_mono_ms());
    if (m->err && pa->moved) {
        metrics_inc(M_KAFKA_ERRORS);
        snprintf(msg, sizeof(msg), "kafka: %s", rd_kafka_err2str(m->err));
        refuse(jobs, jobs->st, pa, 503, API_RESCHEDULE_FAILED, msg);
        return;
    }
    if (pa->moved) {
        log_info("rescheduled job=%s due=%lld", pa->job.id, (long long)pa->job.due_ms);
        metrics_inc(M_JOBS_RESCHEDULED);
        moved_arrived(jobs, pa);
        finish_add(pa, 200, API_OK, "ok");
        return;
    }
    if (m->err) {
        metrics_inc(M_KAFKA_ERRORS);
        log_warn("add failed job=%s kafka: %s", pa->job.id, rd_kafka_err2str(m->err));
        if (!pa->resent)
            undo(jobs, pa->job.id);
        snprintf(msg, sizeof(msg), "add failed: kafka: %s", rd_kafka_err2str(m->err));
        finish_add(pa, 503, API_ADD_FAILED, msg);
        return;
    }
    log_debug("added job=%s partition=%d offset=%lld", pa->job.id, m->partition, (long long)m->offset);
    if ((pa->fresh = !pa->resent))
        metrics_inc(M_JOBS_ADDED);   /* the same job added again is no new job */
    finish_add(pa, 200, API_OK, pa->resent ? "ok (the same job was already added)" : "ok");
}

/* Produces the delay-topic message that references a stored job. 0, or -1 with err set.
 * It has no key (the id is in dq-id): librdkafka's sticky partitioner then fills one partition
 * at a time, and the broker takes one produce request per few milliseconds, not one per
 * partition per linger. Keyed by id, the broker would spend about 40 us of CPU per add on
 * requests. */
static int produce_ref(struct jobs *jobs, struct pending_add *pa, char *err, size_t errlen)
{
    const struct job *job = &pa->job;
    const struct levels *lv = &jobs->cfg->delay.levels;
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
    e = rd_kafka_producev(jobs->rk, RD_KAFKA_V_TOPIC(lv->topic[level]),
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
    flight_push(&jobs->flight, pa);
    return 0;
}

/* The same job is pending already: an earlier add of it may have failed after writing the
 * record, before Kafka had its message, so the message is sent again, with the record's tag and
 * due time, and the add answered when Kafka has it. A second message of one job is harmless:
 * the first to claim the record delivers it, the other finds it delivered (or busy) and skips. */
static void resend(struct jobs *jobs, struct pending_add *pa, const struct store_add_answer *a)
{
    char err[256], msg[512];
    int64_t now = clock_now_ms();

    pa->resent = 1;
    snprintf(pa->job.tag, sizeof(pa->job.tag), "%s", a->tag);
    pa->job.due_ms = a->due_ms;
    pa->job.created_ms = now;
    pa->job.delay_ms = a->due_ms > now ? a->due_ms - now : 0;
    if (produce_ref(jobs, pa, err, sizeof(err)) == 0)
        return;
    snprintf(msg, sizeof(msg), "add failed: %s", err);   /* the record stays: a retry sends again */
    finish_add(pa, 503, API_ADD_FAILED, msg);
}

/* What the record said: answer at once, or go on to Kafka. */
static void after_record(struct jobs *jobs, struct pending_add *pa, const struct store_add_answer *a)
{
    char err[256], msg[512];

    if (!a->ok) {
        metrics_inc(M_REDIS_ERRORS);
        snprintf(msg, sizeof(msg), "add failed: %s", a->err);
        finish_add(pa, 503, API_ADD_FAILED, msg);
    } else if (a->res == STORE_DUPLICATE && a->state == JOB_PENDING && a->due_ms >= 0) {
        resend(jobs, pa, a);
    } else if (a->res == STORE_DUPLICATE) {
        finish_add(pa, 200, API_OK, "ok (the same job was already added)");
    } else if (a->res == STORE_ADD_NOT_A_RECORD) {
        snprintf(msg, sizeof(msg), "job id %s is taken by a Redis value that is not a job record",
                 pa->job.id);
        finish_add(pa, 409, API_CONFLICT, msg);
    } else if (a->res == STORE_CONFLICT) {
        snprintf(msg, sizeof(msg), "job id %s is already used by another job (state %s)", pa->job.id,
                 job_state_name(a->state));
        finish_add(pa, 409, API_CONFLICT, msg);
    } else {
        if (produce_ref(jobs, pa, err, sizeof(err)) == 0)
            return;
        log_warn("add failed job=%s %s", pa->job.id, err);
        undo(jobs, pa->job.id);
        snprintf(msg, sizeof(msg), "add failed: %s", err);
        finish_add(pa, 503, API_ADD_FAILED, msg);
    }
}

/* Writes up to INTAKE_BATCH_MAX queued adds to Redis in one pipeline, then produces them. An add
 * that waited longer than kafka.produce_timeout_ms for its turn (Redis slow or hung) is answered
 * 503 without being written: its client has most likely given up, and a queue of them would
 * only grow. */
static void run_batch(struct jobs *jobs, struct pending_add **list)
{
    const struct job *js[INTAKE_BATCH_MAX] = { NULL };
    struct pending_add *pa[INTAKE_BATCH_MAX];
    int64_t now = clock_mono_ms(), oldest = now - jobs->cfg->kafka.produce_timeout_ms;
    char err[256], msg[512];
    size_t n = 0;

    while (*list && n < INTAKE_BATCH_MAX) {
        struct pending_add *a = *list;
        *list = a->next;
        if (a->queued_ms < oldest) {
            snprintf(msg, sizeof(msg), "%snot handed to Redis within kafka.produce_timeout_ms "
                     "(%lld ms)%s", a->moved ? "" : "add failed: ",
                     (long long)jobs->cfg->kafka.produce_timeout_ms, a->moved ? "" : "; nothing was written");
            refuse(jobs, jobs->st, a, 503, API_ADD_FAILED, msg);
            continue;
        }
        if (kafka_unreachable(jobs, "the intake")) {
            snprintf(msg, sizeof(msg), "%skafka unreachable: no add acknowledged for %lld ms%s",
                     a->moved ? "" : "add failed: ",
                     (long long)(now - atomic_load(&jobs->unreachable_since)),
                     a->moved ? "" : "; nothing was written");
            refuse(jobs, jobs->st, a, 503, API_ADD_FAILED, msg);
            continue;
        }
        if (a->moved) {   /* its record is written: only its message goes to Kafka */
            if (produce_ref(jobs, a, err, sizeof(err)) < 0)
                refuse(jobs, jobs->st, a, 503, API_RESCHEDULE_FAILED, err);
            continue;
        }
        pa[n] = a;
        js[n] = &pa[n]->job;
        n++;
    }
    if (n == 0)
        return;
    if (store_add_batch(jobs->st, n, js, jobs->cfg->job.retention_s * 1000, jobs->answers, err,
                        sizeof(err)) < 0) {
        metrics_inc(M_REDIS_ERRORS);
        log_warn("%zu adds failed: %s", n, err);
        snprintf(msg, sizeof(msg), "add failed: %s", err);
        for (size_t i = 0; i < n; i++)
            finish_add(pa[i], 503, API_ADD_FAILED, msg);
        return;
    }
    for (size_t i = 0; i < n; i++)
        after_record(jobs, pa[i], &jobs->answers[i]);
}

static struct pending_add *take_queue(struct jobs *jobs)
{
    struct pending_add *list;

    pthread_mutex_lock(&jobs->q_mu);
    list = jobs->q_head;
    jobs->q_head = NULL;
    jobs->q_tail = &jobs->q_head;
    pthread_mutex_unlock(&jobs->q_mu);
    return list;
}

static void *intake_main(void *arg)
{
    struct jobs *jobs = arg;
    struct pollfd pfd = { .fd = jobs->wake[0], .events = POLLIN };
    char buf[256];

    while (!atomic_load(&jobs->stop)) {
        struct pending_add *list;
        poll(&pfd, 1, INTAKE_IDLE_MS);
        while (read(jobs->wake[0], buf, sizeof(buf)) > 0)
            ;
        list = take_queue(jobs);
        while (list)
            run_batch(jobs, &list);
        rd_kafka_poll(jobs->rk, 0);
        expire_flights(jobs);
    }
    return NULL;
}

static void wake(struct jobs *jobs)
{
    ssize_t n = write(jobs->wake[1], "a", 1);

    (void)n;   /* a full pipe already wakes the thread */
}

static workers_run_fn run_tasks;
static workers_drop_fn drop_task;

/* The workers and their per-worker state: 0, or -1 with err set. */
static int workers_start(struct jobs *jobs, char *err, size_t errlen)
{
    const struct config *cfg = jobs->cfg;

    jobs->nworkers = (int)cfg->http.workers;
    if (!(jobs->wstore = calloc((size_t)jobs->nworkers, sizeof(*jobs->wstore))) ||
        !(jobs->wview = calloc((size_t)jobs->nworkers, sizeof(*jobs->wview))) ||
        !(jobs->wpull = calloc((size_t)jobs->nworkers, sizeof(*jobs->wpull)))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* A request waits for a worker no longer than a Redis call may take; there is at most one
     * per connection. */
    if (!(jobs->workers = workers_new(jobs->nworkers, WORKER_BATCH, cfg->redis.timeout_ms,
                                      (size_t)cfg->http.max_connections, run_tasks, drop_task, jobs))) {
        snprintf(err, errlen, "cannot start the workers");
        return -1;
    }
    return 0;
}

/* Stops the workers: the requests still queued are answered 503, the running ones end. */
static void workers_stop(struct jobs *jobs)
{
    workers_free(jobs->workers);
    jobs->workers = NULL;
    for (int i = 0; i < jobs->nworkers; i++) {
        if (jobs->wstore)
            store_free(jobs->wstore[i]);
        if (jobs->wview)
            leases_free(jobs->wview[i]);
        if (jobs->wpull)
            pullq_free(jobs->wpull[i]);
    }
    free(jobs->wstore);
    free(jobs->wview);
    free(jobs->wpull);
    jobs->wstore = NULL;
    jobs->wview = NULL;
    jobs->wpull = NULL;
}

struct jobs *jobs_new(const struct config *cfg, struct warm *warm, char *err, size_t errlen)
{
    struct jobs *jobs = calloc(1, sizeof(*jobs));
    rd_kafka_queue_t *q;
    int started;

    if (!jobs || !(jobs->st = store_new(cfg)) || pipe2(jobs->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
        snprintf(err, errlen, "out of memory or file descriptors");
        if (jobs)
            store_free(jobs->st);
        free(jobs);
        return NULL;
    }
    jobs->cfg = cfg;
    jobs->warm = warm;
    jobs->limits.levels = &cfg->delay.levels;
    jobs->limits.dlq_topic = cfg->delay.dlq_topic;
    jobs->limits.max_delay_ms = cfg->job.max_delay_s * 1000;
    jobs->limits.endpoints = cfg->callbacks.endpoints;
    jobs->limits.nendpoints = cfg->callbacks.nendpoints;
    jobs->q_tail = &jobs->q_head;
    pthread_mutex_init(&jobs->stats_mu, NULL);
    pthread_mutex_init(&jobs->q_mu, NULL);
    jobs->rk = producer_new(cfg, "intake", cfg->kafka.produce_timeout_ms, INTAKE_LINGER_MS, dr_cb,
                            jobs, err, errlen);
    if (jobs->rk) {
        jobs->max_message_bytes = producer_max_message_bytes(jobs->rk);
        producer_warm(jobs->rk, cfg, WARM_TIMEOUT_MS);
        q = rd_kafka_queue_get_main(jobs->rk);
        rd_kafka_queue_io_event_enable(q, jobs->wake[1], "d", 1);
        rd_kafka_queue_destroy(q);
    }
    if (jobs->rk && !(jobs->health = health_new(cfg, jobs->rk, err, errlen))) {
        rd_kafka_destroy(jobs->rk);
        jobs->rk = NULL;
    }
    if (jobs->rk && !(jobs->pull = pull_new(cfg, err, errlen))) {
        health_free(jobs->health);
        jobs->health = NULL;
        rd_kafka_destroy(jobs->rk);
        jobs->rk = NULL;
    }
    started = jobs->rk && pthread_create(&jobs->thread, NULL, intake_main, jobs) == 0;
    if (jobs->rk && !started)
        snprintf(err, errlen, "cannot start the intake thread");
    if (started && workers_start(jobs, err, errlen) < 0) {
        workers_stop(jobs);
        atomic_store(&jobs->stop, 1);
        wake(jobs);
        pthread_join(jobs->thread, NULL);
        started = 0;
    }
    if (!started) {
        pull_free(jobs->pull);
        health_free(jobs->health);
        if (jobs->rk)
            rd_kafka_destroy(jobs->rk);
        pthread_mutex_destroy(&jobs->stats_mu);
        pthread_mutex_destroy(&jobs->q_mu);
        close(jobs->wake[0]);
        close(jobs->wake[1]);
        store_free(jobs->st);
        free(jobs);
        return NULL;
    }
    return jobs;
}

/* Answers every request begun: the HTTP server must not stop while one waits (libmicrohttpd
 * aborts when stopped with a request suspended). The workers finish the requests they are on
 * and the queued ones get 503; the intake finishes the batch it is on, the adds it had not
 * taken get 503, and those sent to Kafka get Kafka's answer, or 503 at timeout_ms (then, if
 * Kafka still has not answered for some once they are purged, they are given up as at their
 * deadline); /stats requests get the answer of the look under way. */
void jobs_free(struct jobs *jobs, int timeout_ms)
{
    struct pending_add *left;

    if (!jobs)
        return;
    pull_free(jobs->pull);   /* answers every pop and pull operation */
    workers_stop(jobs);   /* first: a reschedule they run may still queue its message */
    atomic_store(&jobs->stop, 1);   /* before the last take below: jobs_add queues no more */
    wake(jobs);
    pthread_join(jobs->thread, NULL);
    for (left = take_queue(jobs); left;) {
        struct pending_add *next = left->next;
        refuse(jobs, jobs->st, left, 503, API_UNAVAILABLE, "shutting down");
        left = next;
    }
    if (rd_kafka_flush(jobs->rk, timeout_ms) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        log_warn("%d delay-topic messages of adds still unacknowledged at shutdown; their adds "
                 "fail", rd_kafka_outq_len(jobs->rk));
        rd_kafka_purge(jobs->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        /* the purged messages' reports, served here: their adds are undone and answered */
        if (rd_kafka_flush(jobs->rk, PURGE_WAIT_MS) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            log_error("%d adds without a report from Kafka at shutdown; they are answered as at "
                      "their deadline", rd_kafka_outq_len(jobs->rk));
            while ((left = jobs->flight.head)) {   /* as at their deadline (expire_flights) */
                flight_remove(&jobs->flight, left);
                give_up(jobs, left);
                flight_push(&jobs->late, left);
            }
        }
    }
    health_free(jobs->health);
    rd_kafka_destroy(jobs->rk);   /* serves no more reports: the adds left are freed here */
    while ((left = jobs->flight.head) || (left = jobs->late.head)) {
        flight_remove(left == jobs->flight.head ? &jobs->flight : &jobs->late, left);
        free_add(left);
    }
    store_free(jobs->st);
    stats_free(jobs->stats);
    close(jobs->wake[0]);
    close(jobs->wake[1]);
    pthread_mutex_destroy(&jobs->stats_mu);
    pthread_mutex_destroy(&jobs->q_mu);
    free(jobs);
}

/* Readies a parsed add for the intake: 0, or -1 when it was answered (too large) and freed. */
static int prepare(struct jobs *jobs, struct pending_add *pa, int id_given)
{
    char msg[256];

    if (envelope_delivery_bytes(&pa->job) > jobs->max_message_bytes) {
        snprintf(msg, sizeof(msg), "job too large: its delivered message would be about %zu bytes, "
                 "over kafka message.max.bytes (%zu)", envelope_delivery_bytes(&pa->job),
                 jobs->max_message_bytes);
        finish_add(pa, 413, API_TOO_LARGE, msg);
        return -1;
    }
    if (!id_given)
        job_new_id(pa->job.id);
    job_new_tag(pa->job.tag);
    if (jobs->warm && !decide_pulls(jobs->cfg, pa->job.topic, strlen(pa->job.topic), pa->job.deliver))
        warm_topic(jobs->warm, pa->job.topic, strlen(pa->job.topic));   /* Kafka delivers it */
    pa->queued_ms = clock_mono_ms();
    return 0;
}

/* Hands a list of readied adds (linked by next, ending at *tail) to the intake thread, or
 * answers them 503 when it is stopping. */
static void enqueue(struct jobs *jobs, struct pending_add *list, struct pending_add **tail)
{
    int first;

    if (!list)
        return;
    pthread_mutex_lock(&jobs->q_mu);
    if (atomic_load(&jobs->stop)) {   /* jobs_free took the queue for the last time, or will */
        struct store *st = store_new(jobs->cfg);   /* NULL: moved_failed says so */
        pthread_mutex_unlock(&jobs->q_mu);
        while (list) {
            struct pending_add *next = list->next;
            refuse(jobs, st, list, 503, API_UNAVAILABLE, "shutting down");
            list = next;
        }
        store_free(st);
        return;
    }
    first = jobs->q_head == NULL;
    *jobs->q_tail = list;
    jobs->q_tail = tail;
    pthread_mutex_unlock(&jobs->q_mu);
    if (first)
        wake(jobs);
}

void jobs_add(struct jobs *jobs, const char *body, size_t len, jobs_done_fn done, void *opaque)
{
    struct pending_add *pa = calloc(1, sizeof(*pa));
    struct api_error e;
    int id_given;

    if (!pa) {
        answer(done, opaque, 503, API_ADD_FAILED, "add failed: out of memory", NULL);
        return;
    }
    *pa = (struct pending_add){ .jobs = jobs, .done = done, .opaque = opaque };
    if (api_parse_add(body, len, &jobs->limits, clock_now_ms(), &pa->job, &id_given, &e) < 0) {
        finish_add(pa, e.status, e.code, e.message);
        return;
    }
    if (prepare(jobs, pa, id_given) == 0)
        enqueue(jobs, pa, &pa->next);
}

void jobs_add_job(struct jobs *jobs, struct job *job, jobs_done_fn done, void *opaque)
{
    struct pending_add *pa = calloc(1, sizeof(*pa));

    if (!pa) {
        job_release(job);
        answer(done, opaque, 503, API_ADD_FAILED, "add failed: out of memory", NULL);
        return;
    }
    *pa = (struct pending_add){ .jobs = jobs, .done = done, .opaque = opaque, .job = *job };
    memset(job, 0, sizeof(*job));
    if (prepare(jobs, pa, 1) == 0)
        enqueue(jobs, pa, &pa->next);
}

/* A batch whose n answers the jobs of parsed fill; NULL when out of memory. */
static struct batch *batch_new(size_t n, jobs_done_fn done, void *opaque)
{
    struct batch *b = calloc(1, sizeof(*b));

    if (!b || !(b->answers = calloc(n, sizeof(*b->answers)))) {
        free(b);
        return NULL;
    }
    pthread_mutex_init(&b->mu, NULL);
    b->n = n;
    b->left = n + 1;
    b->done = done;
    b->opaque = opaque;
    return b;
}

void jobs_add_batch(struct jobs *jobs, const char *body, size_t len, jobs_done_fn done,
                    void *opaque)
{
    struct pending_add *list = NULL, **tail = &list;
    struct api_batch_job *parsed;
    struct api_error e;
    struct batch *b;
    size_t n;

    if (api_parse_batch(body, len, (size_t)jobs->cfg->http.max_batch_jobs, &jobs->limits,
                        clock_now_ms(), &parsed, &n, &e) < 0) {
        api_batch_free(parsed, n);
        answer(done, opaque, e.status, e.code, e.message, NULL);
        return;
    }
    if (!(b = batch_new(n, done, opaque))) {
        api_batch_free(parsed, n);
        answer(done, opaque, 503, API_ADD_FAILED, "add failed: out of memory", NULL);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        struct api_batch_job *p = &parsed[i];
        struct pending_add *pa = p->ok ? calloc(1, sizeof(*pa)) : NULL;
        if (!pa) {
            batch_note(b, i, p->ok ? 503 : p->e.status, p->ok ? API_ADD_FAILED : p->e.code,
                       p->ok ? "add failed: out of memory" : p->e.message,
                       p->id_given ? p->job.id : NULL, 0);
            continue;
        }
        *pa = (struct pending_add){ .jobs = jobs, .job = p->job, .batch = b, .slot = i };
        memset(&p->job, 0, sizeof(p->job));   /* pa owns it now */
        if (prepare(jobs, pa, p->id_given) == 0) {
            *tail = pa;
            tail = &pa->next;
        }
    }
    api_batch_free(parsed, n);
    enqueue(jobs, list, tail);
    batch_note(b, 0, 0, 0, NULL, NULL, 0);   /* every job is on its way: the last answer ends it */
}

/* Queues a request for the workers; it is answered through done. */
static void queue_task(struct jobs *jobs, enum task_kind kind, const char *id, int64_t due_ms,
                       jobs_done_fn done, void *opaque)
{
    struct task *t = calloc(1, sizeof(*t));
    char msg[64];

    if (!t) {
        snprintf(msg, sizeof(msg), "%s: out of memory", task_kinds[kind].failed);
        answer(done, opaque, 503, task_kinds[kind].code, msg, NULL);
        return;
    }
    *t = (struct task){ .kind = kind, .due_ms = due_ms, .group = (int)due_ms, .done = done,
                        .opaque = opaque };
    if (id)
        snprintf(t->id, sizeof(t->id), "%s", id);
    workers_queue(jobs->workers, t);
}

static void drop_task(void *ctx, void *task, const char *why)
{
    struct task *t = task;
    char msg[256];

    (void)ctx;
    snprintf(msg, sizeof(msg), "%s: %s", task_kinds[t->kind].failed, why);
    answer(t->done, t->opaque, 503, task_kinds[t->kind].code, msg, NULL);
    free(t);
}

void jobs_reschedule(struct jobs *jobs, const char *body, size_t len,
                     const char *const query[API_RESCHEDULE_ARGS], jobs_done_fn done, void *opaque)
{
    struct api_error e;
    char id[JOB_ID_MAX + 1];
    int64_t now = clock_now_ms(), due_ms;

    if ((len > 0 ? api_parse_reschedule(body, len, &jobs->limits, now, id, &due_ms, &e)
                 : api_reschedule_query(query, &jobs->limits, now, id, &due_ms, &e)) < 0) {
        answer(done, opaque, e.status, e.code, e.message, NULL);
        return;
    }
    queue_task(jobs, T_RESCHEDULE, id, due_ms, done, opaque);
}

/* A reschedule whose record was moved (a->mv) or not (a->e says why), on a worker: answered, or
 * for an earlier time the message for the new time handed to the intake. */
static void rescheduled(struct jobs *jobs, struct store *st, const struct task *t,
                        struct move_ask *a)
{
    struct pending_add *pa;
    struct move *mv = a->mv;
    struct job job = a->job;
    int64_t now;

    if (!mv) {
        answer(t->done, t->opaque, a->e.status, a->e.code, a->e.message, NULL);
        return;
    }
    if (!mv->earlier) {
        /* Its messages move on to the new due time when they reach the old one. */
        log_info("rescheduled job=%s due=%lld", t->id, (long long)t->due_ms);
        metrics_inc(M_JOBS_RESCHEDULED);
        answer(t->done, t->opaque, 200, API_OK, "ok", api_rescheduled_data(t->id, t->due_ms));
    } else if (!(pa = calloc(1, sizeof(*pa)))) {
        struct pending_add tmp = { .jobs = jobs, .job = job, .moved = mv, .done = t->done,
                                   .opaque = t->opaque };
        moved_failed(jobs, st, &tmp, "out of memory");
    } else {
        /* A message for the new due time, answered once Kafka has it. */
        *pa = (struct pending_add){ .jobs = jobs, .job = job, .moved = mv, .done = t->done,
                                    .opaque = t->opaque, .queued_ms = clock_mono_ms() };
        now = clock_now_ms();
        pa->job.created_ms = now;   /* the message's timestamp: its level counts from now */
        pa->job.delay_ms = t->due_ms > now ? t->due_ms - now : 0;
        enqueue(jobs, pa, &pa->next);
        return;
    }
    job_release(&job);
    move_free(mv);
}

/* The answer of a get whose record rd read (its data freed here): the JSON text (caller frees)
 * and its status. */
static char *got(const char *id, struct store_read *rd, const struct pullq_look *look, int *status)
{
    struct job_record rec;
    char err[256], msg[512], *data = rd->data, *resp;
    size_t len = rd->len;
    struct job job;

    if (rd->failed) {
        metrics_inc(M_REDIS_ERRORS);
        snprintf(msg, sizeof(msg), "get failed: %s", rd->err);
        *status = 503;
        return api_response(API_GET_FAILED, msg, NULL);
    }
    *status = 200;
    if (!rd->found)
        return api_response(API_OK, "no such job", NULL);
    if (job_record_read(id, data, len, &job, &rec, err, sizeof(err)) < 0) {
        log_error("job=%s has an unreadable record: %s", id, err);
        snprintf(msg, sizeof(msg), "job %s has an unreadable record: %s", id, err);
        *status = 500;
        resp = api_response(API_GET_FAILED, msg, NULL);
    } else {
        void *d = api_job_data(&job, rec.state, rec.state == JOB_DELIVERED ? rec.stamp_ms : -1,
                               rec.error);
        if (look && look->failed)
            log_warn("get job=%s: its pull state is not known: %s", id, look->err);
        else if (look && look->found)
            api_job_pull_state(d, pullq_state_name(look->state), look->attempt, look->until_ms);
        resp = api_response(API_OK, "ok", d);
    }
    job_release(&job);
    free(data);
    return resp;
}

/* The pull topic of a delivered record (data, len) of job id into topic: 1 when its job waits
 * in (or went through) a pull topic, else 0. */
static int pull_topic_of(const struct config *cfg, const char *id, const char *data, size_t len,
                         char topic[TOPIC_NAME_MAX + 1])
{
    struct job_record rec;
    struct job job = { .id = "" };   /* released also when never read */
    char err[256];
    int pulls = 0;

    if (len && data[0] == job_state_letter(JOB_DELIVERED) &&
        job_record_read(id, data, len, &job, &rec, err, sizeof(err)) == 0 &&
        decide_pulls(cfg, job.topic, strlen(job.topic), job.deliver)) {
        snprintf(topic, TOPIC_NAME_MAX + 1, "%s", job.topic);
        pulls = 1;
    }
    job_release(&job);
    return pulls;
}

/* The worker's pull queues connection, made at its first use (NULL when out of memory). */
static struct pullq *worker_pullq(struct jobs *jobs, int worker)
{
    if (!jobs->wpull[worker])
        jobs->wpull[worker] = pullq_new(jobs->cfg);
    return jobs->wpull[worker];
}

/* The answer of a remove whose outcome is rm: the JSON text (caller frees) and its status. */
static char *removed(const char *id, const struct store_removal *rm,
                     const struct pullq_op *cancel, int *status)
{
    enum store_remove_result res = rm->res;
    enum job_state state = rm->state;
    char msg[512];

    *status = 200;
    if (rm->failed) {
        metrics_inc(M_REDIS_ERRORS);
        snprintf(msg, sizeof(msg), "remove failed: %s", rm->err);
        *status = 503;
        return api_response(API_REMOVE_FAILED, msg, NULL);
    }
    if (res == STORE_REMOVED) {
        log_info("removed job=%s", id);
        metrics_inc(M_JOBS_CANCELLED);
        return api_response(API_OK, "ok", NULL);
    }
    if (res == STORE_NO_JOB)
        return api_response(API_OK, "no such job", NULL);
    if (res == STORE_REMOVE_NOT_A_RECORD) {
        snprintf(msg, sizeof(msg), "job %s has an unreadable record", id);
        *status = 500;
        return api_response(API_REMOVE_FAILED, msg, NULL);
    }
    if (state == JOB_CANCELLED)
        return api_response(API_OK, "ok (already removed)", NULL);
    if (cancel && cancel->failed) {
        snprintf(msg, sizeof(msg), "remove failed: %s", cancel->err);
        *status = 503;
        return api_response(API_REMOVE_FAILED, msg, NULL);
    }
    if (cancel && cancel->res == PULLQ_DONE) {
        log_info("removed pull job=%s", id);
        metrics_inc(M_JOBS_CANCELLED);
        return api_response(API_OK, "ok", NULL);
    }
    if (cancel && cancel->res == PULLQ_NOT_LIVE && cancel->state == 'c')
        return api_response(API_OK, "ok (already removed)", NULL);
    if (cancel && cancel->res == PULLQ_NOT_LIVE) {
        snprintf(msg, sizeof(msg), "job %s is already %s and cannot be removed", id,
                 pullq_state_name(cancel->state));
        *status = 409;
        return api_response(API_CONFLICT, msg, NULL);
    }
    snprintf(msg, sizeof(msg), "job %s is already %s and cannot be removed", id, job_state_name(state));
    *status = 409;
    return api_response(API_CONFLICT, msg, NULL);
}

/* The tasks of a batch of one kind, for one pipeline. */
struct kind_batch {
    struct task **t;
    size_t n;
};

/* Pull jobs among the removes found delivered (made ready for poppers): those still ready
 * or reserved are removed from their pull topic, in one pipeline, into cancels (cancels[i].id
 * NULL: not a pull job). */
static void cancel_pulled(struct jobs *jobs, int worker, struct store *st, size_t n,
                          const struct store_removal *rms, struct pullq_op *cancels,
                          char (*topics)[TOPIC_NAME_MAX + 1])
{
    struct store_read reads[WORKER_BATCH];
    struct pullq_op ops[WORKER_BATCH];
    size_t at[WORKER_BATCH], k = 0, nops = 0;
    struct pullq *pq;

    for (size_t i = 0; i < n; i++)
        if (!rms[i].failed && rms[i].res == STORE_TOO_LATE && rms[i].state == JOB_DELIVERED)
            reads[k] = (struct store_read){ .id = rms[i].id }, at[k++] = i;
    if (!k || !(pq = worker_pullq(jobs, worker)))
        return;
    store_read_many(st, k, reads);
    for (size_t j = 0; j < k; j++) {
        size_t i = at[j];
        if (reads[j].found && !reads[j].failed &&
            pull_topic_of(jobs->cfg, rms[i].id, reads[j].data, reads[j].len, topics[i])) {
            ops[nops] = (struct pullq_op){ .verb = PULLQ_CANCEL, .topic = topics[i],
                                           .id = rms[i].id };
            at[nops++] = i;
        }
        free(reads[j].data);
    }
    pullq_run_many(pq, nops, ops, clock_now_ms(), jobs->cfg->job.retention_s * 1000);
    for (size_t j = 0; j < nops; j++)
        cancels[at[j]] = ops[j];
}

/* The removes of a batch, in one pipeline. */
static void run_removes(struct jobs *jobs, int worker, struct store *st, struct kind_batch *b)
{
    struct store_removal *rms = calloc(b->n, sizeof(*rms));
    struct pullq_op cancels[WORKER_BATCH] = { { 0 } };
    char (*topics)[TOPIC_NAME_MAX + 1] = calloc(b->n ? b->n : 1, sizeof(*topics));
    int status;
    char *resp;

    for (size_t i = 0; rms && i < b->n; i++)
        rms[i].id = b->t[i]->id;
    if (rms && topics) {
        store_remove_many(st, b->n, rms, clock_now_ms(), jobs->cfg->job.retention_s * 1000);
        cancel_pulled(jobs, worker, st, b->n, rms, cancels, topics);
    }
    for (size_t i = 0; i < b->n; i++) {
        struct task *t = b->t[i];
        if (!rms || !topics) {
            drop_task(NULL, t, "out of memory");
            continue;
        }
        resp = removed(t->id, &rms[i], cancels[i].id ? &cancels[i] : NULL, &status);
        t->done(t->opaque, status, resp);
        free(t);
    }
    free(rms);
    free(topics);
}

/* The pull state of the gets' delivered pull jobs, in one pipeline, into looks (looks[i].id
 * NULL: not a pull job). */
static void look_pulled(struct jobs *jobs, int worker, size_t n, const struct store_read *reads,
                        struct pullq_look *looks, char (*topics)[TOPIC_NAME_MAX + 1])
{
    struct pullq_look some[WORKER_BATCH];
    size_t at[WORKER_BATCH], k = 0;
    struct pullq *pq;

    for (size_t i = 0; i < n; i++)
        if (reads[i].found && !reads[i].failed &&
            pull_topic_of(jobs->cfg, reads[i].id, reads[i].data, reads[i].len, topics[i]))
            some[k] = (struct pullq_look){ .topic = topics[i], .id = reads[i].id }, at[k++] = i;
    if (!k || !(pq = worker_pullq(jobs, worker)))
        return;
    pullq_look_many(pq, k, some);
    for (size_t j = 0; j < k; j++)
        looks[at[j]] = some[j];
}

/* The gets of a batch: their records read in one pipeline. */
static void run_gets(struct jobs *jobs, int worker, struct store *st, struct kind_batch *b)
{
    struct store_read *reads = calloc(b->n, sizeof(*reads));
    struct pullq_look looks[WORKER_BATCH] = { { 0 } };
    char (*topics)[TOPIC_NAME_MAX + 1] = calloc(b->n ? b->n : 1, sizeof(*topics));
    int status;
    char *resp;

    for (size_t i = 0; reads && i < b->n; i++)
        reads[i].id = b->t[i]->id;
    if (reads && topics) {
        store_read_many(st, b->n, reads);
        look_pulled(jobs, worker, b->n, reads, looks, topics);
    }
    for (size_t i = 0; i < b->n; i++) {
        struct task *t = b->t[i];
        if (!reads || !topics) {
            drop_task(NULL, t, "out of memory");
            continue;
        }
        resp = got(t->id, &reads[i], looks[i].id ? &looks[i] : NULL, &status);
        t->done(t->opaque, status, resp);
        free(t);
    }
    free(reads);
    free(topics);
}

/* The reschedules of a batch: their reads and their writes each in one pipeline. */
static void run_reschedules(struct jobs *jobs, struct store *st, struct kind_batch *b)
{
    struct move_ask *asks = calloc(b->n, sizeof(*asks));

    for (size_t i = 0; asks && i < b->n; i++)
        asks[i] = (struct move_ask){ .id = b->t[i]->id, .due_ms = b->t[i]->due_ms };
    if (asks)
        move_jobs(st, jobs->cfg, b->n, asks);
    for (size_t i = 0; i < b->n; i++) {
        if (asks)
            rescheduled(jobs, st, b->t[i], &asks[i]);
        else
            drop_task(NULL, b->t[i], "out of memory");
        free(asks ? b->t[i] : NULL);
    }
    free(asks);
}

/* Asks the owner of t's group to hand it back. */
static void run_hand_back(struct leases *view, struct task *t)
{
    char owner[LEASES_TOKEN_MAX + 1], err[256], msg[LEASES_TOKEN_MAX + 96];

    if (leases_ask_release(view, t->group, "api", owner, sizeof(owner), err, sizeof(err)) < 0) {
        snprintf(msg, sizeof(msg), "release failed: %s", err);
        answer(t->done, t->opaque, 503, API_UNAVAILABLE, msg, NULL);
    } else {
        if (owner[0])
            log_info("asked %s to hand back group %d", owner, t->group);
        snprintf(msg, sizeof(msg), owner[0] ? "asked its owner to hand group %d back" :
                 "group %d is held by nobody", t->group);
        answer(t->done, t->opaque, 200, API_OK, msg, api_release_data(t->group, owner));
    }
    free(t);
}

/* Runs the n tasks a worker took together: the gets in one pipeline, the removes in another,
 * the reschedules in two, one claims view for all the /claims requests, and the hand-backs. */
static void run_tasks(void *ctx, int worker, void **tasks, size_t n)
{
    struct jobs *jobs = ctx;
    struct store **st = &jobs->wstore[worker];
    struct leases **view = &jobs->wview[worker];
    struct task *by_kind[T_HAND_BACK + 1][WORKER_BATCH];
    struct kind_batch b[T_HAND_BACK + 1];
    int status = 503;
    char *resp;

    for (int k = 0; k <= T_HAND_BACK; k++)
        b[k] = (struct kind_batch){ by_kind[k], 0 };
    for (size_t i = 0; i < n; i++) {
        struct task *t = tasks[i];
        if (t->kind >= T_CLAIMS ? !*view && !(*view = leases_new(jobs->cfg))
                                : !*st && !(*st = store_new(jobs->cfg)))
            drop_task(jobs, t, "out of memory");
        else
            b[t->kind].t[b[t->kind].n++] = t;
    }
    run_gets(jobs, worker, *st, &b[T_GET]);
    run_removes(jobs, worker, *st, &b[T_REMOVE]);
    run_reschedules(jobs, *st, &b[T_RESCHEDULE]);
    /* One view for all the /claims requests of the batch: they would read the same. */
    resp = b[T_CLAIMS].n ? leases_view(*view, &status) : NULL;
    for (size_t i = 0; i < b[T_CLAIMS].n; i++) {
        struct task *t = b[T_CLAIMS].t[i];
        t->done(t->opaque, status, i + 1 < b[T_CLAIMS].n && resp ? strdup(resp) : resp);
        free(t);
    }
    for (size_t i = 0; i < b[T_HAND_BACK].n; i++)
        run_hand_back(*view, b[T_HAND_BACK].t[i]);
}

void jobs_pop(struct jobs *jobs, const char *body, size_t len, jobs_done_fn done, void *opaque)
{
    struct api_error e;
    struct api_pop pop;

    if (api_parse_pop(body, len, &jobs->limits, &pop, &e) < 0)
        answer(done, opaque, e.status, e.code, e.message, NULL);
    else
        pull_pop(jobs->pull, &pop, done, opaque);
}

void jobs_pop_request(struct jobs *jobs, const struct api_pop *pop, jobs_done_fn done,
                      void *opaque)
{
    pull_pop(jobs->pull, pop, done, opaque);
}

void jobs_pull_op(struct jobs *jobs, enum api_verb verb, const char *body, size_t len,
                  jobs_done_fn done, void *opaque)
{
    struct api_pull_op op;
    struct api_error e;

    if (api_parse_pull_op(body, len, verb, &jobs->limits, &op, &e) < 0)
        answer(done, opaque, e.status, e.code, e.message, NULL);
    else
        pull_op(jobs->pull, verb, &op, done, opaque);
}

void jobs_stop_waiting(struct jobs *jobs)
{
    pull_stop_waiting(jobs->pull);
}

void jobs_get(struct jobs *jobs, const char *id, jobs_done_fn done, void *opaque)
{
    queue_task(jobs, T_GET, id, 0, done, opaque);
}

void jobs_remove(struct jobs *jobs, const char *id, jobs_done_fn done, void *opaque)
{
    queue_task(jobs, T_REMOVE, id, 0, done, opaque);
}

int jobs_ready(struct jobs *jobs, char *err, size_t errlen)
{
    int64_t since = atomic_load(&jobs->unreachable_since);

    if (kafka_unreachable(jobs, "/readyz")) {
        snprintf(err, errlen, "kafka unreachable: no add acknowledged for %lld ms",
                 (long long)(clock_mono_ms() - since));
        return -1;
    }
    return health_ready(jobs->health, err, errlen);
}

void jobs_claims(struct jobs *jobs, jobs_done_fn done, void *opaque)
{
    queue_task(jobs, T_CLAIMS, NULL, 0, done, opaque);
}

void jobs_hand_back(struct jobs *jobs, const char *body, size_t len, jobs_done_fn done,
                    void *opaque)
{
    struct api_error e;
    int group;

    if (api_parse_group(body, len, jobs->cfg->delay.ngroups, &group, &e) < 0)
        answer(done, opaque, e.status, e.code, e.message, NULL);
    else
        queue_task(jobs, T_HAND_BACK, NULL, group, done, opaque);
}

/* The stats handle, made at the first look. */
static struct stats *stats_of(struct jobs *jobs, char *err, size_t errlen)
{
    struct stats *s;

    pthread_mutex_lock(&jobs->stats_mu);
    if (!jobs->stats)
        jobs->stats = stats_new(jobs->cfg, err, errlen);
    s = jobs->stats;
    pthread_mutex_unlock(&jobs->stats_mu);
    return s;
}

/* A /stats request waiting for a look. */
#define STATS_PULL_TOPICS 256   /* pull topics a /stats answer counts at most */

struct stats_wait {
    const struct levels *levels;
    struct pull *pull;
    jobs_done_fn done;
    void *opaque;
};

static void stats_answered(void *opaque, const struct pending_view *v, const char *err)
{
    struct stats_wait *w = opaque;

    if (v) {
        void *d = api_stats_data(v, w->levels);
        struct pull_count counts[STATS_PULL_TOPICS];
        size_t n = pull_counts(w->pull, counts, STATS_PULL_TOPICS);
        for (size_t i = 0; i < n; i++)
            api_stats_pull(d, counts[i].topic, counts[i].ready, counts[i].reserved);
        api_stats_callbacks(d, metrics_gauge(M_CALL_RETRIES_WAITING));
        char policy[64];
        int evicts = store_evicts(policy, sizeof(policy));
        api_stats_schedules(d, metrics_gauge(M_SCHEDULES));
        api_stats_redis(d, policy, evicts);
        answer(w->done, w->opaque, 200, API_OK, "ok", d);
    } else
        answer(w->done, w->opaque, 503, API_UNAVAILABLE, err, NULL);
    free(w);
}

void jobs_stats(struct jobs *jobs, jobs_done_fn done, void *opaque)
{
    struct stats_wait *w = malloc(sizeof(*w));
    struct stats *s;
    char err[512];

    snprintf(err, sizeof(err), "stats: out of memory");
    if (!w || !(s = stats_of(jobs, err, sizeof(err)))) {
        free(w);
        answer(done, opaque, 503, API_UNAVAILABLE, err, NULL);
        return;
    }
    *w = (struct stats_wait){ .levels = &jobs->cfg->delay.levels, .pull = jobs->pull, .done = done,
                              .opaque = opaque };
    stats_get(s, stats_answered, w);
}

void jobs_stats_gauges(struct jobs *jobs)
{
    struct stats *s;
    char err[512];

    if ((s = stats_of(jobs, err, sizeof(err))))
        stats_gauges(s);
}

/* intake: adds. HTTP threads queue parsed adds; one intake thread writes them to Redis in
 * pipelines and produces their delay-topic references (flights.c), answering each add from
 * Kafka's delivery report. get, remove, reschedule and the claims view run on the workers
 * (requests.c), each with its own Redis connection. No call made by an HTTP thread waits on the
 * network. The contract is in include/intake/intake.h, the shared inside in
 * include/intake/intake_link.h. */
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
    answer_send(b->done, b->opaque, 200, API_OK, "ok", api_batch_data(b->answers, b->n));
    pthread_mutex_destroy(&b->mu);
    free(b->answers);
    free(b);
}

/* Answers an add (a single one, or a job of a batch); on success with its job id. */
void intake_reply(struct pending_add *pa, int status, int code, const char *msg)
{
    enum answer_is is = answer_is_of(status);

    if (is == ANSWER_CONFLICT && !pa->moved)
        is = ANSWER_EXISTS;        /* an add's id taken by another job */
    else if (is == ANSWER_DONE && !pa->moved && !pa->fresh)
        is = ANSWER_ALREADY;       /* the same job was there */
    if (pa->batch)
        batch_note(pa->batch, pa->slot, status, code, msg, pa->job.id, pa->fresh);
    else
        answer_give(pa->done, pa->opaque, is, status, code, msg,
                    code != API_OK ? NULL
                    : pa->moved ? api_rescheduled_data(pa->job.id, pa->job.due_ms)
                                : api_job_id_data(pa->job.id));
}

void intake_free_add(struct pending_add *pa)
{
    job_release(&pa->job);
    move_free(pa->moved);
    free(pa);
}

/* Answers an add and frees it. */
void intake_finish_add(struct pending_add *pa, int status, int code, const char *msg)
{
    intake_reply(pa, status, code, msg);
    intake_free_add(pa);
}

/* The pull jobs whose records the n adds pa just wrote are counted among their topics' delayed
 * jobs (the figures of /stats and GET /delay-queue/api/pull/{topic}) until they are made ready. */
static void note_later(struct intake *in, struct pending_add **pa, size_t n)
{
    struct pullq_later later[INTAKE_BATCH_MAX];
    char err[256];
    size_t k = 0;

    for (size_t i = 0; i < n; i++) {
        const struct job *j = &pa[i]->job;
        if (in->answers[i].ok && in->answers[i].res == STORE_ADDED && j->topic &&
            decide_pulls(in->cfg, j->topic, strlen(j->topic), j->deliver))
            later[k++] = (struct pullq_later){ j->topic, j->id, j->due_ms };
    }
    if (!k || (!in->pq && !(in->pq = pullq_new(in->cfg))))
        return;
    if (pullq_note_later(in->pq, k, later, err, sizeof(err)) < 0)
        log_warn("counting %zu pull jobs added for later failed (the jobs are kept; the "
                 "topics' delayed figures miss them): %s", k, err);
}

/* Writes up to INTAKE_BATCH_MAX queued adds to Redis in one pipeline, then produces them. An add
 * that waited longer than kafka.produce_timeout_ms for its turn (Redis slow or hung) is answered
 * 503 without being written: its client has most likely given up, and a queue of them would
 * only grow. */
static void run_batch(struct intake *in, struct pending_add **list)
{
    const struct job *js[INTAKE_BATCH_MAX] = { NULL };
    struct pending_add *pa[INTAKE_BATCH_MAX];
    int64_t now = clock_mono_ms(), oldest = now - in->cfg->kafka.produce_timeout_ms;
    char err[256], msg[512];
    size_t n = 0;

    while (*list && n < INTAKE_BATCH_MAX) {
        struct pending_add *a = *list;
        *list = a->next;
        if (a->queued_ms < oldest) {
            snprintf(msg, sizeof(msg), "%snot handed to Redis within kafka.produce_timeout_ms "
                     "(%lld ms)%s", a->moved ? "" : "add failed: ",
                     (long long)in->cfg->kafka.produce_timeout_ms, a->moved ? "" : "; nothing was written");
            intake_refuse(in, in->st, a, 503, API_ADD_FAILED, msg);
            continue;
        }
        if (intake_kafka_unreachable(in, "the intake")) {
            snprintf(msg, sizeof(msg), "%skafka unreachable: no add acknowledged for %lld ms%s",
                     a->moved ? "" : "add failed: ",
                     (long long)(now - atomic_load(&in->unreachable_since)),
                     a->moved ? "" : "; nothing was written");
            intake_refuse(in, in->st, a, 503, API_ADD_FAILED, msg);
            continue;
        }
        if (a->moved) {   /* its record is written: only its message goes to Kafka */
            if (intake_produce_ref(in, a, err, sizeof(err)) < 0)
                intake_refuse(in, in->st, a, 503, API_RESCHEDULE_FAILED, err);
            continue;
        }
        pa[n] = a;
        js[n] = &pa[n]->job;
        n++;
    }
    if (n == 0)
        return;
    if (store_add_batch(in->st, n, js, in->cfg->job.retention_s * 1000, in->answers, err,
                        sizeof(err)) < 0) {
        metrics_inc(M_REDIS_ERRORS);
        log_warn("%zu adds failed: %s", n, err);
        snprintf(msg, sizeof(msg), "add failed: %s", err);
        for (size_t i = 0; i < n; i++)
            intake_finish_add(pa[i], 503, API_ADD_FAILED, msg);
        return;
    }
    note_later(in, pa, n);
    for (size_t i = 0; i < n; i++)
        intake_after_record(in, pa[i], &in->answers[i]);
}

static struct pending_add *take_queue(struct intake *in)
{
    struct pending_add *list;

    pthread_mutex_lock(&in->q_mu);
    list = in->q_head;
    in->q_head = NULL;
    in->q_tail = &in->q_head;
    pthread_mutex_unlock(&in->q_mu);
    return list;
}

static void *intake_main(void *arg)
{
    struct intake *in = arg;
    struct pollfd pfd = { .fd = in->wake[0], .events = POLLIN };
    char buf[256];

    while (!atomic_load(&in->stop)) {
        struct pending_add *list;
        poll(&pfd, 1, INTAKE_IDLE_MS);
        while (read(in->wake[0], buf, sizeof(buf)) > 0)
            ;
        list = take_queue(in);
        while (list)
            run_batch(in, &list);
        rd_kafka_poll(in->rk, 0);
        intake_expire_flights(in);
    }
    return NULL;
}

static void wake(struct intake *in)
{
    ssize_t n = write(in->wake[1], "a", 1);

    (void)n;   /* a full pipe already wakes the thread */
}

/* The workers and their per-worker state: 0, or -1 with err set. */
static int workers_start(struct intake *in, char *err, size_t errlen)
{
    const struct config *cfg = in->cfg;

    in->nworkers = (int)cfg->http.workers;
    if (!(in->wstore = calloc((size_t)in->nworkers, sizeof(*in->wstore))) ||
        !(in->wview = calloc((size_t)in->nworkers, sizeof(*in->wview))) ||
        !(in->wpull = calloc((size_t)in->nworkers, sizeof(*in->wpull)))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    /* A request waits for a worker no longer than a Redis call may take; there is at most one
     * per connection. */
    if (!(in->workers = workers_new(in->nworkers, WORKER_BATCH, cfg->redis.timeout_ms,
                                      (size_t)cfg->http.max_connections, intake_run_tasks, intake_drop_task, in))) {
        snprintf(err, errlen, "cannot start the workers");
        return -1;
    }
    return 0;
}

/* Stops the workers: the requests still queued are answered 503, the running ones end. */
static void workers_stop(struct intake *in)
{
    workers_free(in->workers);
    in->workers = NULL;
    for (int i = 0; i < in->nworkers; i++) {
        if (in->wstore)
            store_free(in->wstore[i]);
        if (in->wview)
            leases_free(in->wview[i]);
        if (in->wpull)
            pullq_free(in->wpull[i]);
    }
    free(in->wstore);
    free(in->wview);
    free(in->wpull);
    in->wstore = NULL;
    in->wview = NULL;
    in->wpull = NULL;
}

struct intake *intake_new(const struct config *cfg, struct warm *warm, char *err, size_t errlen)
{
    struct intake *in = calloc(1, sizeof(*in));
    rd_kafka_queue_t *q;
    int started;

    if (!in || !(in->st = store_new(cfg)) || pipe2(in->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
        snprintf(err, errlen, "out of memory or file descriptors");
        if (in)
            store_free(in->st);
        free(in);
        return NULL;
    }
    in->cfg = cfg;
    in->warm = warm;
    in->limits.levels = &cfg->delay.levels;
    in->limits.dlq_topic = cfg->delay.dlq_topic;
    in->limits.max_delay_ms = cfg->job.max_delay_s * 1000;
    in->limits.endpoints = cfg->callbacks.endpoints;
    in->limits.nendpoints = cfg->callbacks.nendpoints;
    in->limits.no_urls = cfg->callbacks.raw_urls ? NULL : "callbacks.raw_urls is false";
    in->q_tail = &in->q_head;
    pthread_mutex_init(&in->stats_mu, NULL);
    pthread_mutex_init(&in->q_mu, NULL);
    in->rk = producer_new(cfg, "intake", cfg->kafka.produce_timeout_ms, INTAKE_LINGER_MS, flights_report,
                            in, err, errlen);
    if (in->rk) {
        in->max_message_bytes = producer_max_message_bytes(in->rk);
        producer_warm(in->rk, cfg, WARM_TIMEOUT_MS);
        q = rd_kafka_queue_get_main(in->rk);
        rd_kafka_queue_io_event_enable(q, in->wake[1], "d", 1);
        rd_kafka_queue_destroy(q);
    }
    if (in->rk && !(in->health = health_new(cfg, in->rk, err, errlen))) {
        rd_kafka_destroy(in->rk);
        in->rk = NULL;
    }
    if (in->rk && !(in->pull = pull_new(cfg, err, errlen))) {
        health_free(in->health);
        in->health = NULL;
        rd_kafka_destroy(in->rk);
        in->rk = NULL;
    }
    started = in->rk && pthread_create(&in->thread, NULL, intake_main, in) == 0;
    if (in->rk && !started)
        snprintf(err, errlen, "cannot start the intake thread");
    if (started && workers_start(in, err, errlen) < 0) {
        workers_stop(in);
        atomic_store(&in->stop, 1);
        wake(in);
        pthread_join(in->thread, NULL);
        started = 0;
    }
    if (!started) {
        pull_free(in->pull);
        health_free(in->health);
        if (in->rk)
            rd_kafka_destroy(in->rk);
        pthread_mutex_destroy(&in->stats_mu);
        pthread_mutex_destroy(&in->q_mu);
        close(in->wake[0]);
        close(in->wake[1]);
        store_free(in->st);
        free(in);
        return NULL;
    }
    return in;
}

/* Answers every request begun: the HTTP server must not stop while one waits (libmicrohttpd
 * aborts when stopped with a request suspended). The workers finish the requests they are on
 * and the queued ones get 503; the intake finishes the batch it is on, the adds it had not
 * taken get 503, and those sent to Kafka get Kafka's answer, or 503 at timeout_ms (then, if
 * Kafka still has not answered for some once they are purged, they are given up as at their
 * deadline); /stats requests get the answer of the look under way. */
void intake_free(struct intake *in, int timeout_ms)
{
    struct pending_add *left;

    if (!in)
        return;
    pull_free(in->pull);   /* answers every pop and pull operation */
    workers_stop(in);   /* first: a reschedule they run may still queue its message */
    atomic_store(&in->stop, 1);   /* before the last take below: intake_add queues no more */
    wake(in);
    pthread_join(in->thread, NULL);
    for (left = take_queue(in); left;) {
        struct pending_add *next = left->next;
        intake_refuse(in, in->st, left, 503, API_UNAVAILABLE, "shutting down");
        left = next;
    }
    if (rd_kafka_flush(in->rk, timeout_ms) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        log_warn("%d delay-topic messages of adds still unacknowledged at shutdown; their adds "
                 "fail", rd_kafka_outq_len(in->rk));
        rd_kafka_purge(in->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        /* the purged messages' reports, served here: their adds are undone and answered */
        if (rd_kafka_flush(in->rk, PURGE_WAIT_MS) != RD_KAFKA_RESP_ERR_NO_ERROR) {
            log_error("%d adds without a report from Kafka at shutdown; they are answered as at "
                      "their deadline", rd_kafka_outq_len(in->rk));
            flights_give_up_all(in);
        }
    }
    health_free(in->health);
    rd_kafka_destroy(in->rk);   /* serves no more reports: the adds left are freed here */
    flights_free_all(in);
    store_free(in->st);
    stats_free(in->stats);
    pullq_free(in->stats_pq);
    pullq_free(in->pq);
    close(in->wake[0]);
    close(in->wake[1]);
    pthread_mutex_destroy(&in->stats_mu);
    pthread_mutex_destroy(&in->q_mu);
    free(in);
}

/* Readies a parsed add for the intake: 0, or -1 when it was answered (too large) and freed. */
static int prepare(struct intake *in, struct pending_add *pa, int id_given)
{
    char msg[256];

    if (envelope_delivery_bytes(&pa->job) > in->max_message_bytes) {
        snprintf(msg, sizeof(msg), "job too large: its delivered message would be about %zu bytes, "
                 "over kafka message.max.bytes (%zu)", envelope_delivery_bytes(&pa->job),
                 in->max_message_bytes);
        intake_finish_add(pa, 413, API_TOO_LARGE, msg);
        return -1;
    }
    if (!id_given)
        job_new_id(pa->job.id);
    job_new_tag(pa->job.tag);
    if (in->warm && !decide_pulls(in->cfg, pa->job.topic, strlen(pa->job.topic), pa->job.deliver))
        warm_topic(in->warm, pa->job.topic, strlen(pa->job.topic));   /* Kafka delivers it */
    pa->queued_ms = clock_mono_ms();
    return 0;
}

/* Hands a list of readied adds (linked by next, ending at *tail) to the intake thread, or
 * answers them 503 when it is stopping. */
void intake_enqueue(struct intake *in, struct pending_add *list, struct pending_add **tail)
{
    int first;

    if (!list)
        return;
    pthread_mutex_lock(&in->q_mu);
    if (atomic_load(&in->stop)) {   /* intake_free took the queue for the last time, or will */
        struct store *st = store_new(in->cfg);   /* NULL: moved_failed says so */
        pthread_mutex_unlock(&in->q_mu);
        while (list) {
            struct pending_add *next = list->next;
            intake_refuse(in, st, list, 503, API_UNAVAILABLE, "shutting down");
            list = next;
        }
        store_free(st);
        return;
    }
    first = in->q_head == NULL;
    *in->q_tail = list;
    in->q_tail = tail;
    pthread_mutex_unlock(&in->q_mu);
    if (first)
        wake(in);
}

void intake_add(struct intake *in, const char *body, size_t len, answer_fn done, void *opaque)
{
    struct pending_add *pa = calloc(1, sizeof(*pa));
    struct api_error e;
    int id_given;

    if (!pa) {
        answer_send(done, opaque, 503, API_ADD_FAILED, "add failed: out of memory", NULL);
        return;
    }
    *pa = (struct pending_add){ .in = in, .done = done, .opaque = opaque };
    if (api_parse_add(body, len, &in->limits, clock_now_ms(), &pa->job, &id_given, &e) < 0) {
        intake_finish_add(pa, e.status, e.code, e.message);
        return;
    }
    if (prepare(in, pa, id_given) == 0)
        intake_enqueue(in, pa, &pa->next);
}

void intake_add_job(struct intake *in, struct job *job, answer_fn done, void *opaque)
{
    struct pending_add *pa = calloc(1, sizeof(*pa));
    struct api_error e;

    if (!pa) {
        job_release(job);
        answer_send(done, opaque, 503, API_ADD_FAILED, "add failed: out of memory", NULL);
        return;
    }
    *pa = (struct pending_add){ .in = in, .done = done, .opaque = opaque, .job = *job };
    memset(job, 0, sizeof(*job));
    if (api_check_job(&pa->job, &in->limits, clock_now_ms(), &e) < 0) {
        intake_finish_add(pa, e.status, e.code, e.message);
        return;
    }
    if (prepare(in, pa, 1) == 0)
        intake_enqueue(in, pa, &pa->next);
}

/* A batch whose n answers the jobs of parsed fill; NULL when out of memory. */
static struct batch *batch_new(size_t n, answer_fn done, void *opaque)
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

void intake_add_batch(struct intake *in, const char *body, size_t len, answer_fn done,
                    void *opaque)
{
    struct pending_add *list = NULL, **tail = &list;
    struct api_batch_job *parsed;
    struct api_error e;
    struct batch *b;
    size_t n;

    if (api_parse_batch(body, len, (size_t)in->cfg->http.max_batch_jobs, &in->limits,
                        clock_now_ms(), &parsed, &n, &e) < 0) {
        api_batch_free(parsed, n);
        answer_send(done, opaque, e.status, e.code, e.message, NULL);
        return;
    }
    if (!(b = batch_new(n, done, opaque))) {
        api_batch_free(parsed, n);
        answer_send(done, opaque, 503, API_ADD_FAILED, "add failed: out of memory", NULL);
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
        *pa = (struct pending_add){ .in = in, .job = p->job, .batch = b, .slot = i };
        memset(&p->job, 0, sizeof(p->job));   /* pa owns it now */
        if (prepare(in, pa, p->id_given) == 0) {
            *tail = pa;
            tail = &pa->next;
        }
    }
    api_batch_free(parsed, n);
    intake_enqueue(in, list, tail);
    batch_note(b, 0, 0, 0, NULL, NULL, 0);   /* every job is on its way: the last answer ends it */
}

int intake_ready(struct intake *in, char *err, size_t errlen)
{
    int64_t since = atomic_load(&in->unreachable_since);

    if (intake_kafka_unreachable(in, "/readyz")) {
        snprintf(err, errlen, "kafka unreachable: no add acknowledged for %lld ms",
                 (long long)(clock_mono_ms() - since));
        return -1;
    }
    return health_ready(in->health, err, errlen);
}

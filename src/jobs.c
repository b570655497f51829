#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "claims.h"
#include "clock.h"
#include "envelope.h"
#include "jobs.h"
#include "log.h"
#include "metrics.h"
#include "producer.h"
#include "store.h"

#define LOG_MODULE "jobs"
#define WARM_TIMEOUT_MS 5000  /* start-up metadata fetch; Kafka down only delays start */
#define POOL_MAX 64
#define READY_TIMEOUT_MS 2000   /* /readyz waits this long for Kafka */     /* Redis connections: one per HTTP thread and the intake thread at most */

struct jobs {
    const struct config *cfg;
    struct api_limits limits;
    rd_kafka_t *rk;
    pthread_t thread;
    atomic_int stop;
    atomic_size_t in_flight;
    pthread_mutex_t pool_mu;
    struct store *pool[POOL_MAX];
    int npool;
};

/* An add waiting for its delivery report. */
struct pending_add {
    struct jobs *jobs;
    char id[JOB_ID_MAX + 1];
    jobs_done_fn done;
    void *opaque;
};

static struct store *pool_get(struct jobs *jobs)
{
    struct store *st = NULL;

    pthread_mutex_lock(&jobs->pool_mu);
    if (jobs->npool > 0)
        st = jobs->pool[--jobs->npool];
    pthread_mutex_unlock(&jobs->pool_mu);
    return st ? st : store_new(jobs->cfg);
}

static void pool_put(struct jobs *jobs, struct store *st)
{
    pthread_mutex_lock(&jobs->pool_mu);
    if (jobs->npool < POOL_MAX) {
        jobs->pool[jobs->npool++] = st;
        st = NULL;
    }
    pthread_mutex_unlock(&jobs->pool_mu);
    store_free(st);
}

static void answer(jobs_done_fn done, void *opaque, int status, int code, const char *msg, void *data)
{
    done(opaque, status, api_response(code, msg, data));
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *unused)
{
    struct pending_add *pa = m->_private;
    struct jobs *jobs = pa->jobs;
    char err[256], msg[512];

    (void)rk;
    (void)unused;
    if (m->err) {
        struct store *st = pool_get(jobs);
        metrics_inc(M_KAFKA_ERRORS);
        log_warn("add failed job=%s kafka: %s", pa->id, rd_kafka_err2str(m->err));
        if (store_drop_pending(st, pa->id, err, sizeof(err)) < 0)
            log_error("job=%s could not be undone (it cannot be delivered: no Kafka message): %s",
                      pa->id, err);
        pool_put(jobs, st);
        snprintf(msg, sizeof(msg), "add failed: kafka: %s", rd_kafka_err2str(m->err));
        answer(pa->done, pa->opaque, 503, API_ADD_FAILED, msg, NULL);
    } else {
        log_debug("added job=%s partition=%d offset=%lld", pa->id, m->partition, (long long)m->offset);
        metrics_inc(M_JOBS_ADDED);
        answer(pa->done, pa->opaque, 200, API_OK, "ok", api_job_id_data(pa->id));
    }
    free(pa);
    atomic_fetch_sub(&jobs->in_flight, 1);
}

static void *intake_main(void *arg)
{
    struct jobs *jobs = arg;

    while (!atomic_load(&jobs->stop))
        rd_kafka_poll(jobs->rk, 100);
    return NULL;
}

struct jobs *jobs_new(const struct config *cfg, char *err, size_t errlen)
{
    struct jobs *jobs = calloc(1, sizeof(*jobs));

    if (!jobs) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    jobs->cfg = cfg;
    jobs->limits.levels = &cfg->delay.levels;
    jobs->limits.max_delay_ms = cfg->job.max_delay_s * 1000;
    pthread_mutex_init(&jobs->pool_mu, NULL);
    jobs->rk = producer_new(cfg, "intake", cfg->kafka.produce_timeout_ms, dr_cb, jobs, err, errlen);
    if (jobs->rk)
        producer_warm(jobs->rk, cfg, WARM_TIMEOUT_MS);
    if (!jobs->rk || pthread_create(&jobs->thread, NULL, intake_main, jobs) != 0) {
        if (jobs->rk)
            rd_kafka_destroy(jobs->rk);
        pthread_mutex_destroy(&jobs->pool_mu);
        free(jobs);
        return NULL;
    }
    return jobs;
}

void jobs_free(struct jobs *jobs, int timeout_ms)
{
    if (!jobs)
        return;
    if (rd_kafka_flush(jobs->rk, timeout_ms) != RD_KAFKA_RESP_ERR_NO_ERROR)
        log_warn("%d delay-topic messages of adds still unacknowledged at shutdown",
                 rd_kafka_outq_len(jobs->rk));
    atomic_store(&jobs->stop, 1);
    pthread_join(jobs->thread, NULL);
    rd_kafka_destroy(jobs->rk);
    for (int i = 0; i < jobs->npool; i++)
        store_free(jobs->pool[i]);
    pthread_mutex_destroy(&jobs->pool_mu);
    free(jobs);
}

size_t jobs_in_flight(struct jobs *jobs)
{
    return atomic_load(&jobs->in_flight);
}

/* Produces the delay-topic message that references a stored job. 0, or -1 with err set. */
static int produce_ref(struct jobs *jobs, const struct job *job, struct pending_add *pa, char *err,
                       size_t errlen)
{
    const struct levels *lv = &jobs->cfg->delay.levels;
    int level = levels_route(lv, job->delay_ms);
    rd_kafka_headers_t *h = rd_kafka_headers_new(3);
    rd_kafka_resp_err_t e;

    headers_add(h, HDR_TOPIC, job->topic, strlen(job->topic));
    headers_add(h, HDR_ID, job->id, strlen(job->id));
    headers_add_int(h, HDR_DUE, job->due_ms);
    /* CreateTime = the instant the delay was measured from, so timestamp + level <= due. */
    e = rd_kafka_producev(jobs->rk, RD_KAFKA_V_TOPIC(lv->topic[level]),
                          RD_KAFKA_V_KEY(job->id, strlen(job->id)), RD_KAFKA_V_HEADERS(h),
                          RD_KAFKA_V_TIMESTAMP(job->created_ms), RD_KAFKA_V_OPAQUE(pa),
                          RD_KAFKA_V_END);
    if (e) {
        rd_kafka_headers_destroy(h);
        snprintf(err, errlen, "kafka: %s", rd_kafka_err2str(e));
        return -1;
    }
    return 0;
}

static void add_stored(struct jobs *jobs, struct store *st, const struct job *job,
                       jobs_done_fn done, void *opaque)
{
    struct pending_add *pa = calloc(1, sizeof(*pa));
    char err[256], msg[512];

    if (!pa) {
        answer(done, opaque, 503, API_ADD_FAILED, "add failed: out of memory", NULL);
        store_drop_pending(st, job->id, err, sizeof(err));
        return;
    }
    *pa = (struct pending_add){ .jobs = jobs, .done = done, .opaque = opaque };
    memcpy(pa->id, job->id, sizeof(pa->id));
    atomic_fetch_add(&jobs->in_flight, 1);
    if (produce_ref(jobs, job, pa, err, sizeof(err)) == 0)
        return;
    atomic_fetch_sub(&jobs->in_flight, 1);
    free(pa);
    log_warn("add failed job=%s %s", job->id, err);
    if (store_drop_pending(st, job->id, msg, sizeof(msg)) < 0)
        log_error("job=%s could not be undone (it cannot be delivered: no Kafka message): %s",
                  job->id, msg);
    snprintf(msg, sizeof(msg), "add failed: %s", err);
    answer(done, opaque, 503, API_ADD_FAILED, msg, NULL);
}

void jobs_add(struct jobs *jobs, const char *body, size_t len, jobs_done_fn done, void *opaque)
{
    struct api_error e;
    struct job job;
    struct store *st;
    enum store_add_result res;
    enum job_state state;
    char err[256], msg[512];
    int id_given;

    if (api_parse_add(body, len, &jobs->limits, clock_now_ms(), &job, &id_given, &e) < 0) {
        answer(done, opaque, e.status, e.code, e.message, NULL);
        job_release(&job);
        return;
    }
    if (!id_given)
        job_new_id(job.id);
    st = pool_get(jobs);
    if (store_add(st, &job, jobs->cfg->job.retention_s * 1000, &res, &state, err, sizeof(err)) < 0) {
        metrics_inc(M_REDIS_ERRORS);
        log_warn("add failed job=%s %s", job.id, err);
        snprintf(msg, sizeof(msg), "add failed: %s", err);
        answer(done, opaque, 503, API_ADD_FAILED, msg, NULL);
    } else if (res == STORE_DUPLICATE) {
        answer(done, opaque, 200, API_OK, "ok (the same job was already added)", api_job_id_data(job.id));
    } else if (res == STORE_CONFLICT) {
        snprintf(msg, sizeof(msg), "job id %s is already used by another job (state %s)", job.id,
                 job_state_name(state));
        answer(done, opaque, 409, API_CONFLICT, msg, NULL);
    } else {
        add_stored(jobs, st, &job, done, opaque);
    }
    pool_put(jobs, st);
    job_release(&job);
}

char *jobs_get(struct jobs *jobs, const char *id, int *status)
{
    struct store *st = pool_get(jobs);
    enum job_state state;
    int64_t delivered_ms;
    char err[256], msg[512], *data = NULL, *resp;
    size_t len;
    int found, rc;
    struct job job;

    rc = store_get(st, id, &found, &data, &len, &state, &delivered_ms, err, sizeof(err));
    pool_put(jobs, st);
    if (rc < 0) {
        metrics_inc(M_REDIS_ERRORS);
        snprintf(msg, sizeof(msg), "get failed: %s", err);
        *status = rc == -1 ? 503 : 500;
        return api_response(API_GET_FAILED, msg, NULL);
    }
    *status = 200;
    if (!found)
        return api_response(API_OK, "no such job", NULL);
    if (job_unpack(data, len, &job, err, sizeof(err)) < 0) {
        log_error("job=%s has an unreadable record: %s", id, err);
        snprintf(msg, sizeof(msg), "job %s has an unreadable record: %s", id, err);
        *status = 500;
        resp = api_response(API_GET_FAILED, msg, NULL);
    } else {
        resp = api_response(API_OK, "ok", api_job_data(&job, state, delivered_ms));
    }
    job_release(&job);
    free(data);
    return resp;
}

char *jobs_remove(struct jobs *jobs, const char *id, int *status)
{
    struct store *st = pool_get(jobs);
    enum store_remove_result res;
    enum job_state state = JOB_PENDING;
    char err[256], msg[512];
    int rc = store_remove(st, id, clock_now_ms(), jobs->cfg->job.retention_s * 1000, &res, &state,
                          err, sizeof(err));

    pool_put(jobs, st);
    *status = 200;
    if (rc < 0) {
        metrics_inc(M_REDIS_ERRORS);
        snprintf(msg, sizeof(msg), "remove failed: %s", err);
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
    if (state == JOB_CANCELLED)
        return api_response(API_OK, "ok (already removed)", NULL);
    snprintf(msg, sizeof(msg), "job %s is already %s and cannot be removed", id, job_state_name(state));
    *status = 409;
    return api_response(API_CONFLICT, msg, NULL);
}

int jobs_ready(struct jobs *jobs, char *err, size_t errlen)
{
    struct store *st = pool_get(jobs);
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *rkt;
    rd_kafka_resp_err_t e;
    int rc = store_ping(st, err, errlen);

    pool_put(jobs, st);
    if (rc < 0)
        return -1;
    /* A metadata request for one delay topic: Kafka answers, and knows the topic. */
    rkt = rd_kafka_topic_new(jobs->rk, jobs->cfg->delay.levels.topic[0], NULL);
    e = rd_kafka_metadata(jobs->rk, 0, rkt, &md, READY_TIMEOUT_MS);
    rd_kafka_topic_destroy(rkt);
    if (e) {
        snprintf(err, errlen, "kafka: %s", rd_kafka_err2str(e));
        return -1;
    }
    rd_kafka_metadata_destroy(md);
    return 0;
}

char *jobs_claims(struct jobs *jobs, int *status)
{
    struct store *st = pool_get(jobs);
    char *resp = claims_view(st, jobs->cfg, status);

    pool_put(jobs, st);
    return resp;
}

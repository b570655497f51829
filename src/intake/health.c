/* health: Redis and Kafka probed on a thread of their own. The contract is in include/intake/health.h. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/clock.h"
#include "intake/health.h"
#include "lib/log.h"
#include "redis/store.h"

#define LOG_MODULE "health"

struct health {
    const struct config *cfg;
    rd_kafka_t *rk;
    struct store *st;               /* the thread's own connection */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cond;            /* wakes the thread: a stop, or Kafka suspected */
    int stop, suspect;
    int redis_ok, kafka_ok, probed; /* the last probes' outcome (mu) */
    char redis_why[256], kafka_why[256];
    _Atomic int64_t kafka_answered_ms;
};

/* A metadata request for the first delay topic: the broker answers, and knows the topic. */
static int probe_kafka(struct health *h, char *why, size_t len)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(h->rk, h->cfg->delay.levels.topic[0], NULL);
    const struct rd_kafka_metadata *md;
    rd_kafka_resp_err_t e;

    if (!rkt) {
        snprintf(why, len, "kafka: out of memory");
        return -1;
    }
    e = rd_kafka_metadata(h->rk, 0, rkt, &md, HEALTH_KAFKA_TIMEOUT_MS);
    rd_kafka_topic_destroy(rkt);
    if (e) {
        snprintf(why, len, "kafka: %s", rd_kafka_err2str(e));
        return -1;
    }
    rd_kafka_metadata_destroy(md);
    atomic_store(&h->kafka_answered_ms, clock_mono_ms());
    return 0;
}

/* One round of probes; the outcome replaces the last one. */
static void probe(struct health *h)
{
    char kwhy[256] = "", rwhy[256] = "";
    int kafka_ok = probe_kafka(h, kwhy, sizeof(kwhy)) == 0;
    int redis_ok = store_ping(h->st, rwhy, sizeof(rwhy)) == 0;

    pthread_mutex_lock(&h->mu);
    if (h->probed && h->kafka_ok != kafka_ok)
        log_info("kafka %s", kafka_ok ? "answers again" : kwhy);
    if (h->probed && h->redis_ok != redis_ok)
        log_info("redis %s", redis_ok ? "answers again" : rwhy);
    h->kafka_ok = kafka_ok;
    h->redis_ok = redis_ok;
    snprintf(h->kafka_why, sizeof(h->kafka_why), "%s", kwhy);
    snprintf(h->redis_why, sizeof(h->redis_why), "%s", rwhy);
    h->probed = 1;
    if (kafka_ok)
        h->suspect = 0;
    pthread_mutex_unlock(&h->mu);
}

static void *health_main(void *arg)
{
    struct health *h = arg;

    pthread_mutex_lock(&h->mu);
    while (!h->stop) {
        struct timespec at;
        int64_t ms;
        pthread_mutex_unlock(&h->mu);
        probe(h);
        pthread_mutex_lock(&h->mu);
        ms = h->suspect ? HEALTH_SUSPECT_MS : HEALTH_PROBE_MS;
        clock_gettime(CLOCK_MONOTONIC, &at);
        at.tv_sec += ms / 1000;
        at.tv_nsec += (ms % 1000) * 1000000L;
        if (at.tv_nsec >= 1000000000L)
            at.tv_sec++, at.tv_nsec -= 1000000000L;
        while (!h->stop && pthread_cond_timedwait(&h->cond, &h->mu, &at) != ETIMEDOUT && !h->suspect)
            ;
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

struct health *health_new(const struct config *cfg, rd_kafka_t *rk, char *err, size_t errlen)
{
    struct health *h = calloc(1, sizeof(*h));
    int rc;

    if (!h || !(h->st = store_new(cfg))) {
        snprintf(err, errlen, "out of memory");
        free(h);
        return NULL;
    }
    h->cfg = cfg;
    h->rk = rk;
    pthread_mutex_init(&h->mu, NULL);
    cond_init_monotonic(&h->cond);
    snprintf(h->redis_why, sizeof(h->redis_why), "not probed yet");
    if ((rc = pthread_create(&h->thread, NULL, health_main, h)) != 0) {
        snprintf(err, errlen, "cannot start the health thread: %s", strerror(rc));
        pthread_cond_destroy(&h->cond);
        pthread_mutex_destroy(&h->mu);
        store_free(h->st);
        free(h);
        return NULL;
    }
    return h;
}

void health_free(struct health *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop = 1;
    pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->mu);
    store_free(h->st);
    free(h);
}

int health_ready(struct health *h, char *why, size_t len)
{
    char policy[64];
    int rc = 0;

    pthread_mutex_lock(&h->mu);
    if (!h->probed) {
        snprintf(why, len, "starting: Redis and Kafka not probed yet");
        rc = -1;
    } else if (!h->redis_ok || !h->kafka_ok) {
        snprintf(why, len, "%s", !h->redis_ok ? h->redis_why : h->kafka_why);
        rc = -1;
    }
    pthread_mutex_unlock(&h->mu);
    if (rc == 0) {
        why[0] = '\0';
        if (store_evicts(policy, sizeof(policy)))
            snprintf(why, len, "redis maxmemory-policy is %s: at maxmemory Redis drops job "
                     "records; set it to noeviction", policy);
    }
    return rc;
}

int64_t health_kafka_answered_ms(struct health *h)
{
    return atomic_load(&h->kafka_answered_ms);
}

void health_suspect_kafka(struct health *h)
{
    pthread_mutex_lock(&h->mu);
    h->suspect = 1;
    pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->mu);
}

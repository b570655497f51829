/* stats against librdkafka's mock cluster, which injects the broker errors a real single-node
 * broker shows only by chance (a partition's leader not yet known right after start-up). */
#include <pthread.h>
#include <stdio.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "core/config.h"
#include "kafka/stats.h"
#include "lib/clock.h"
#include "unit.h"

#define LIST_OFFSETS 2   /* Kafka's ApiKey of ListOffsets (librdkafka keeps its own private) */

static struct config cfg;

struct look {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, ok;
    char err[256];
};

static void looked(void *opaque, const struct pending_view *v, const char *err)
{
    struct look *l = opaque;

    pthread_mutex_lock(&l->mu);
    l->done = 1;
    l->ok = v != NULL;
    snprintf(l->err, sizeof(l->err), "%s", err ? err : "");
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

/* The mock cluster behind a producer handle, with the two delay topics of cfg. */
static rd_kafka_t *mock_cluster(rd_kafka_mock_cluster_t **mc)
{
    char why[512], text[1024], err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_t *rk;

    rd_kafka_conf_set(conf, "log_level", "0", why, sizeof(why));
    if (!(rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why))))
        return NULL;
    if (!(*mc = rd_kafka_mock_cluster_new(rk, 1))) {
        rd_kafka_destroy(rk);
        return NULL;
    }
    snprintf(text, sizeof(text),
             "kafka: { brokers = \"%s\"; };\n"
             "delay: { levels = [ \"1s\", \"5s\" ]; partitions = 2; };\n"
             "log: { level = \"error\"; };\n", rd_kafka_mock_cluster_bootstraps(*mc));
    config_defaults(&cfg);
    if (config_load_string(&cfg, text, err, sizeof(err)) < 0) {
        fprintf(stderr, "config refused: %s\n", err);
        rd_kafka_mock_cluster_destroy(*mc);
        rd_kafka_destroy(rk);
        return NULL;
    }
    for (int i = 0; i < cfg.delay.levels.n; i++)
        rd_kafka_mock_topic_create(*mc, cfg.delay.levels.topic[i], cfg.delay.partitions, 1);
    return rk;
}

/* A look whose ListOffsets meet "Not leader for partition" twice tries again within its
 * bound and answers the view. */
static void a_look_rides_out_a_leader_not_yet_known(void)
{
    rd_kafka_mock_cluster_t *mc;
    rd_kafka_t *rk = mock_cluster(&mc);
    struct look l = { .mu = PTHREAD_MUTEX_INITIALIZER };
    char err[256];
    struct stats *s;

    CHECK(rk);
    rd_kafka_mock_push_request_errors(mc, LIST_OFFSETS, 2,
                                      RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                                      RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION);
    cond_init_monotonic(&l.cv);
    s = stats_new(&cfg, err, sizeof(err));
    CHECK(s);
    stats_get(s, looked, &l);
    pthread_mutex_lock(&l.mu);
    while (!l.done)
        cond_wait_until(&l.cv, &l.mu, clock_mono_ms() + 1000);
    pthread_mutex_unlock(&l.mu);
    stats_free(s);
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    pthread_cond_destroy(&l.cv);
    if (!l.ok)
        fprintf(stderr, "the look answered: %s\n", l.err);
    CHECK(l.ok);
}

void unit_stats_kafka(void)
{
    RUN(a_look_rides_out_a_leader_not_yet_known);
}

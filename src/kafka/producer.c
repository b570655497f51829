/* producer: librdkafka configuration from the config file (project defaults, then every
 * kafka.properties entry), producers with delivery reports, configuration checks without
 * connecting, and header helpers. The contract is in include/kafka/producer.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "kafka/producer.h"

#define LOG_MODULE "kafka"

/* Sets name=value on conf. Returns 0, or -1 with librdkafka's reason (naming the property). */
static int kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *err,
                          size_t errlen)
{
    char why[512];

    if (rd_kafka_conf_set(conf, name, value, why, sizeof(why)) != RD_KAFKA_CONF_OK) {
        snprintf(err, errlen, "kafka property %s: %s", name, why);
        return -1;
    }
    return 0;
}

int kafka_conf_apply(rd_kafka_conf_t *conf, const struct config *cfg, char *err, size_t errlen)
{
    if (kafka_conf_set(conf, "bootstrap.servers", cfg->kafka.brokers, err, errlen) < 0)
        return -1;
    for (int i = 0; i < cfg->kafka.nproperties; i++) {
        char name[CONFIG_STR_MAX];
        const char *eq = strchr(cfg->kafka.properties[i], '=');

        snprintf(name, sizeof(name), "%.*s", (int)(eq - cfg->kafka.properties[i]),
                 cfg->kafka.properties[i]);
        if (kafka_conf_set(conf, name, eq + 1, err, errlen) < 0)
            return -1;
    }
    return 0;
}

void kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    enum log_level l = level <= 3 ? LOG_ERROR : level <= 5 ? LOG_WARN : level <= 6 ? LOG_INFO : LOG_DEBUG;
    log_at(l, 0, "%s %s: %s", rd_kafka_name(rk), fac, buf);
}

rd_kafka_conf_t *kafka_conf_build(const struct config *cfg, const char *const (*defaults)[2],
                                  size_t n, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();

    for (size_t i = 0; i < n; i++) {
        if (kafka_conf_set(conf, defaults[i][0], defaults[i][1], err, errlen) < 0) {
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    }
    if (kafka_conf_apply(conf, cfg, err, errlen) < 0) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
    return conf;
}

/* The configuration of a producer, as producer_new describes it; NULL with err set. */
static rd_kafka_conf_t *producer_conf(const struct config *cfg, const char *role, int64_t timeout_ms,
                                      int linger_ms, char *err, size_t errlen)
{
    char id[64], timeout[32], linger[16];
    /* Idempotence keeps broker-side retries from writing a message twice. */
    const char *const defaults[][2] = {
        { "client.id", id },
        { "linger.ms", linger },
        { "enable.idempotence", "true" },
        { "message.timeout.ms", timeout },
        { "socket.nagle.disable", "true" },
    };

    snprintf(id, sizeof(id), "delayq-%s", role);
    snprintf(timeout, sizeof(timeout), "%lld", (long long)timeout_ms);
    snprintf(linger, sizeof(linger), "%d", linger_ms);
    return kafka_conf_build(cfg, defaults, sizeof(defaults) / sizeof(defaults[0]), err, errlen);
}

rd_kafka_t *kafka_new_quiet(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *err, size_t errlen)
{
    char why[512];
    rd_kafka_t *rk;

    rd_kafka_conf_set(conf, "log_level", "0", why, sizeof(why));
    if (!(rk = rd_kafka_new(type, conf, why, sizeof(why)))) {
        snprintf(err, errlen, "kafka %s: %s", type == RD_KAFKA_PRODUCER ? "producer" : "consumer", why);
        rd_kafka_conf_destroy(conf);
    }
    return rk;
}

int producer_check_config(const struct config *cfg, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = producer_conf(cfg, "check", 1000, 0, err, errlen);
    rd_kafka_t *rk;

    if (!conf || !(rk = kafka_new_quiet(RD_KAFKA_PRODUCER, conf, err, errlen)))
        return -1;
    rd_kafka_destroy(rk);
    return 0;
}

rd_kafka_t *producer_new(const struct config *cfg, const char *role, int64_t timeout_ms,
                         int linger_ms,
                         void (*dr)(rd_kafka_t *, const rd_kafka_message_t *, void *),
                         void *opaque, char *err, size_t errlen)
{
    rd_kafka_conf_t *conf = producer_conf(cfg, role, timeout_ms, linger_ms, err, errlen);
    char why[512];
    rd_kafka_t *rk;

    if (!conf)
        return NULL;
    rd_kafka_conf_set_dr_msg_cb(conf, dr);
    rd_kafka_conf_set_opaque(conf, opaque);
    if (!(rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why)))) {
        snprintf(err, errlen, "kafka producer: %s", why);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    return rk;
}

size_t producer_max_message_bytes(rd_kafka_t *rk)
{
    char v[32];
    size_t len = sizeof(v);

    if (rd_kafka_conf_get(rd_kafka_conf(rk), "message.max.bytes", v, &len) != RD_KAFKA_CONF_OK)
        return SIZE_MAX;
    return (size_t)strtoull(v, NULL, 10);
}

void headers_add(rd_kafka_headers_t *hdrs, const char *name, const char *value, size_t len)
{
    rd_kafka_header_add(hdrs, name, -1, value, (ssize_t)len);
}

void headers_add_int(rd_kafka_headers_t *hdrs, const char *name, int64_t value)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%lld", (long long)value);

    rd_kafka_header_add(hdrs, name, -1, buf, n);
}

void producer_warm(rd_kafka_t *rk, const struct config *cfg, int timeout_ms)
{
    const struct levels *lv = &cfg->delay.levels;
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *rkt[LEVELS_MAX + 1];
    int64_t deadline = clock_mono_ms() + timeout_ms;
    int n = 0;

    for (int i = 0; i < lv->n; i++)
        rkt[n++] = rd_kafka_topic_new(rk, lv->topic[i], NULL);
    rkt[n++] = rd_kafka_topic_new(rk, cfg->delay.dlq_topic, NULL);
    for (int i = 0; i < n; i++) {
        if (rd_kafka_metadata(rk, 0, rkt[i], &md, (int)(deadline - clock_mono_ms())) ==
            RD_KAFKA_RESP_ERR_NO_ERROR)
            rd_kafka_metadata_destroy(md);
        rd_kafka_topic_destroy(rkt[i]);
    }
}

/* topics: creates the missing delay topics and the dead-letter topic at start-up and reads
 * their partition counts. The contract is in include/kafka/topics.h. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "lib/clock.h"

#include "lib/log.h"
#include "kafka/topics.h"

#define LOG_MODULE "topics"

/* Retention of a delay topic: its delay plus a week, so that a delayqd outage of days loses no
 * job. The dead-letter topic keeps messages for the same week. */
#define RETENTION_EXTRA_MS (7LL * 86400 * 1000)
#define ADMIN_TIMEOUT_MS 30000
#define METADATA_RETRY_MS 100   /* while new topics propagate */

static rd_kafka_NewTopic_t *new_topic(const char *name, const struct config *cfg, int64_t delay_ms,
                                      char *err, size_t errlen)
{
    char why[512], retention[32];
    rd_kafka_NewTopic_t *t = rd_kafka_NewTopic_new(name, (int)cfg->delay.partitions,
                                                   (int)cfg->kafka.replication_factor, why, sizeof(why));

    if (!t) {
        snprintf(err, errlen, "topic %s: %s", name, why);
        return NULL;
    }
    snprintf(retention, sizeof(retention), "%lld", (long long)(delay_ms + RETENTION_EXTRA_MS));
    rd_kafka_NewTopic_set_config(t, "retention.ms", retention);
    /* Due times are computed from the producer's CreateTime. */
    rd_kafka_NewTopic_set_config(t, "message.timestamp.type", "CreateTime");
    return t;
}

static int create_all(rd_kafka_t *rk, rd_kafka_NewTopic_t **nt, size_t n, char *err, size_t errlen)
{
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *opt = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_event_t *ev;
    const rd_kafka_topic_result_t **res;
    size_t nres;
    int rc = -1;

    rd_kafka_AdminOptions_set_operation_timeout(opt, ADMIN_TIMEOUT_MS, NULL, 0);
    rd_kafka_AdminOptions_set_request_timeout(opt, ADMIN_TIMEOUT_MS, NULL, 0);
    rd_kafka_CreateTopics(rk, nt, n, opt, q);
    ev = rd_kafka_queue_poll(q, ADMIN_TIMEOUT_MS + 5000);
    if (!ev) {
        snprintf(err, errlen, "creating topics: no answer from Kafka in %d ms", ADMIN_TIMEOUT_MS);
        goto out;
    }
    if (rd_kafka_event_error(ev)) {
        snprintf(err, errlen, "creating topics: %s", rd_kafka_event_error_string(ev));
        goto out;
    }
    res = rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &nres);
    rc = 0;
    for (size_t i = 0; i < nres; i++) {
        rd_kafka_resp_err_t e = rd_kafka_topic_result_error(res[i]);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
            log_info("created topic=%s", rd_kafka_topic_result_name(res[i]));
        } else if (e != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
            snprintf(err, errlen, "creating topic %s: %s", rd_kafka_topic_result_name(res[i]),
                     rd_kafka_topic_result_error_string(res[i]));
            rc = -1;
        }
    }
out:
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_AdminOptions_destroy(opt);
    rd_kafka_queue_destroy(q);
    return rc;
}

/* The partition count of topic in md, or 0 when it is not (yet) there. */
static int partitions_of(const struct rd_kafka_metadata *md, const char *topic)
{
    for (int i = 0; i < md->topic_cnt; i++)
        if (strcmp(md->topics[i].topic, topic) == 0 && !md->topics[i].err)
            return md->topics[i].partition_cnt;
    return 0;
}

/* Reads every delay topic's partition count. Right after CreateTopics the metadata may not list
 * a new topic yet: asks again until it does. */
static int read_partitions(rd_kafka_t *rk, const struct config *cfg, int partitions[LEVELS_MAX],
                           char *err, size_t errlen)
{
    const struct levels *lv = &cfg->delay.levels;
    int64_t deadline = clock_mono_ms() + ADMIN_TIMEOUT_MS;
    const struct rd_kafka_metadata *md;
    rd_kafka_resp_err_t e;
    int missing;

    for (;;) {
        if ((e = rd_kafka_metadata(rk, 1, NULL, &md, ADMIN_TIMEOUT_MS))) {
            snprintf(err, errlen, "reading topic metadata: %s", rd_kafka_err2str(e));
            return -1;
        }
        missing = -1;
        for (int l = 0; l < lv->n; l++)
            if (!(partitions[l] = partitions_of(md, lv->topic[l])) && missing < 0)
                missing = l;
        rd_kafka_metadata_destroy(md);
        if (missing < 0)
            break;
        if (clock_mono_ms() > deadline) {
            snprintf(err, errlen, "topic %s has no partitions in the metadata", lv->topic[missing]);
            return -1;
        }
        usleep(METADATA_RETRY_MS * 1000);
    }
    for (int l = 0; l < lv->n; l++) {
        if (partitions[l] != cfg->delay.partitions)
            log_warn("topic=%s has %d partitions, the config says %lld; using %d", lv->topic[l],
                     partitions[l], (long long)cfg->delay.partitions,
                     partitions[l] < cfg->delay.partitions ? partitions[l] : (int)cfg->delay.partitions);
        if (partitions[l] > cfg->delay.partitions)
            partitions[l] = (int)cfg->delay.partitions;
    }
    return 0;
}

int topics_ensure(rd_kafka_t *rk, const struct config *cfg, int partitions[LEVELS_MAX], char *err,
                  size_t errlen)
{
    const struct levels *lv = &cfg->delay.levels;
    rd_kafka_NewTopic_t *nt[LEVELS_MAX + 1];
    size_t n = 0;
    int rc = -1;

    for (int l = 0; l < lv->n; l++)
        if (!(nt[n++] = new_topic(lv->topic[l], cfg, lv->ms[l], err, errlen)))
            goto out;
    if (!(nt[n++] = new_topic(cfg->delay.dlq_topic, cfg, 0, err, errlen)))
        goto out;
    if (create_all(rk, nt, n, err, errlen) == 0)
        rc = read_partitions(rk, cfg, partitions, err, errlen);
out:
    for (size_t i = 0; i < n; i++)
        if (nt[i])
            rd_kafka_NewTopic_destroy(nt[i]);
    return rc;
}

/* offsets: offsets asked of Kafka, riding out its transient errors (kafka/offsets.h). */
#include <stdio.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "lib/clock.h"
#include "kafka/offsets.h"

#define RETRY_STEP_MS 100

int kafka_transient(rd_kafka_resp_err_t e)
{
    switch (e) {
    case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
    case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_FENCED_LEADER_EPOCH:
    case RD_KAFKA_RESP_ERR_UNKNOWN_LEADER_EPOCH:
    case RD_KAFKA_RESP_ERR_OFFSET_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_NOT_COORDINATOR:
    case RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS:
    case RD_KAFKA_RESP_ERR__WAIT_COORD:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
    case RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION:
    case RD_KAFKA_RESP_ERR__TRANSPORT:
        return 1;
    default:
        return 0;
    }
}

/* 1 when the answer to try calls for another: an error, and every error transient. */
static int again(rd_kafka_resp_err_t e, const rd_kafka_topic_partition_list_t *try)
{
    int failed = e != RD_KAFKA_RESP_ERR_NO_ERROR;

    if (failed)
        return kafka_transient(e);
    for (int i = 0; i < try->cnt; i++)
        if (try->elems[i].err) {
            if (!kafka_transient(try->elems[i].err))
                return 0;
            failed = 1;
        }
    return failed;
}

rd_kafka_resp_err_t kafka_ask_offsets(rd_kafka_t *rk, enum kafka_ask what,
                                      rd_kafka_topic_partition_list_t *l, int64_t deadline_ms)
{
    for (;;) {
        rd_kafka_topic_partition_list_t *try = rd_kafka_topic_partition_list_copy(l);
        int64_t left = deadline_ms - clock_mono_ms();
        int timeout = left > 1 ? (int)left : 1;
        rd_kafka_resp_err_t e = what == KAFKA_ASK_COMMITTED
                                    ? rd_kafka_committed(rk, try, timeout)
                                    : rd_kafka_offsets_for_times(rk, try, timeout);

        if (!again(e, try) || clock_mono_ms() + RETRY_STEP_MS >= deadline_ms) {
            for (int i = 0; i < try->cnt && i < l->cnt; i++) {
                l->elems[i].offset = try->elems[i].offset;
                l->elems[i].err = try->elems[i].err;
            }
            rd_kafka_topic_partition_list_destroy(try);
            return e;
        }
        rd_kafka_topic_partition_list_destroy(try);
        clock_sleep_ms(RETRY_STEP_MS);
    }
}

int kafka_offsets_answered(rd_kafka_resp_err_t e, const rd_kafka_topic_partition_list_t *l,
                           const char *what, char *err, size_t errlen)
{
    for (int i = 0; !e && i < l->cnt; i++)
        if (l->elems[i].err) {
            snprintf(err, errlen, "%s of %s/%d: %s", what, l->elems[i].topic,
                     (int)l->elems[i].partition, rd_kafka_err2str(l->elems[i].err));
            return -1;
        }
    if (e)
        snprintf(err, errlen, "%s: %s", what, rd_kafka_err2str(e));
    return e ? -1 : 0;
}

void kafka_ask_committed_async(rd_kafka_t *rk, const char *group_id,
                               const rd_kafka_topic_partition_list_t *l, int timeout_ms,
                               rd_kafka_queue_t *q, void *opaque)
{
    rd_kafka_AdminOptions_t *o =
        rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_LISTCONSUMERGROUPOFFSETS);
    rd_kafka_ListConsumerGroupOffsets_t *ask = rd_kafka_ListConsumerGroupOffsets_new(group_id, l);
    char why[128];

    rd_kafka_AdminOptions_set_request_timeout(o, timeout_ms > 1 ? timeout_ms : 1, why, sizeof(why));
    rd_kafka_AdminOptions_set_opaque(o, opaque);
    rd_kafka_ListConsumerGroupOffsets(rk, &ask, 1, o, q);
    rd_kafka_ListConsumerGroupOffsets_destroy(ask);
    rd_kafka_AdminOptions_destroy(o);
}

/* The element of l for topic/partition, or NULL. */
static rd_kafka_topic_partition_t *element(rd_kafka_topic_partition_list_t *l, const char *topic,
                                           int32_t partition)
{
    for (int i = 0; i < l->cnt; i++)
        if (l->elems[i].partition == partition && !strcmp(l->elems[i].topic, topic))
            return &l->elems[i];
    return NULL;
}

int kafka_committed_answer(rd_kafka_event_t *ev, void **opaque,
                           rd_kafka_topic_partition_list_t *l, int *again, char *err,
                           size_t errlen)
{
    const rd_kafka_ListConsumerGroupOffsets_result_t *res;
    const rd_kafka_group_result_t **gr;
    const rd_kafka_topic_partition_list_t *got;
    const rd_kafka_error_t *ge;
    size_t n = 0;
    int answered = 0;

    *opaque = NULL;
    *again = 0;
    if (!(res = rd_kafka_event_ListConsumerGroupOffsets_result(ev))) {
        snprintf(err, errlen, "not an answer about committed offsets");
        return -1;
    }
    *opaque = rd_kafka_event_opaque(ev);
    if (rd_kafka_event_error(ev)) {
        *again = kafka_transient(rd_kafka_event_error(ev));
        snprintf(err, errlen, "%s", rd_kafka_event_error_string(ev));
        return -1;
    }
    gr = rd_kafka_ListConsumerGroupOffsets_result_groups(res, &n);
    if (n != 1) {
        snprintf(err, errlen, "%zu groups answered where one was asked", n);
        return -1;
    }
    if ((ge = rd_kafka_group_result_error(gr[0]))) {
        *again = kafka_transient(rd_kafka_error_code(ge));
        snprintf(err, errlen, "%s", rd_kafka_error_string(ge));
        return -1;
    }
    got = rd_kafka_group_result_partitions(gr[0]);
    for (int i = 0; got && i < got->cnt; i++) {
        rd_kafka_topic_partition_t *e = element(l, got->elems[i].topic, got->elems[i].partition);
        if (!e)
            continue;
        if (got->elems[i].err) {
            *again = kafka_transient(got->elems[i].err);
            snprintf(err, errlen, "%s [%d]: %s", e->topic, (int)e->partition,
                     rd_kafka_err2str(got->elems[i].err));
            return -1;
        }
        e->offset = got->elems[i].offset;
        answered++;
    }
    if (answered < l->cnt) {
        snprintf(err, errlen, "%d of %d partitions answered", answered, l->cnt);
        *again = 1;
        return -1;
    }
    return 0;
}

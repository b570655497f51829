/* offsets: offsets asked of Kafka, riding out its transient errors (kafka/offsets.h). */
#include <librdkafka/rdkafka.h>

#include "lib/clock.h"
#include "kafka/offsets.h"

#define RETRY_STEP_MS 100

static int transient(rd_kafka_resp_err_t e)
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
        return transient(e);
    for (int i = 0; i < try->cnt; i++)
        if (try->elems[i].err) {
            if (!transient(try->elems[i].err))
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

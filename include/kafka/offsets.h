/* offsets: asking Kafka for partitions' offsets (committed ones, log bounds, by time) in one
 * request per broker, trying again while the answer is an error a moment's wait mends (a
 * partition's leader not yet known after a broker start or a topic's creation, a coordinator
 * loading, a connection lost), until a deadline. */
#ifndef DQ_KAFKA_OFFSETS_H
#define DQ_KAFKA_OFFSETS_H

#include <stdint.h>

#include <librdkafka/rdkafka.h>

/* What to ask for l's partitions. */
enum kafka_ask { KAFKA_ASK_COMMITTED, KAFKA_ASK_TIMES };

/* rd_kafka_committed (KAFKA_ASK_COMMITTED) or rd_kafka_offsets_for_times (KAFKA_ASK_TIMES,
 * each element's offset a timestamp, or RD_KAFKA_OFFSET_BEGINNING / _END for the log's bounds)
 * on l, tried again every 100 ms while it meets transient errors, until the monotonic
 * deadline_ms. l takes the last try's answers, each element's err included; returns the last
 * try's call error (RD_KAFKA_RESP_ERR_NO_ERROR when the call was answered). */
rd_kafka_resp_err_t kafka_ask_offsets(rd_kafka_t *rk, enum kafka_ask what,
                                      rd_kafka_topic_partition_list_t *l, int64_t deadline_ms);

/* A batched answer checked: the call's error e, then each partition's of l. 0 when there is
 * none, else -1 with err "<what>: <error>" or "<what> of <topic>/<partition>: <error>". */
int kafka_offsets_answered(rd_kafka_resp_err_t e, const rd_kafka_topic_partition_list_t *l,
                           const char *what, char *err, size_t errlen);

/* 1 when error e is one a moment's wait may mend (see above), 0 otherwise. */
int kafka_transient(rd_kafka_resp_err_t e);

/* Asks, without waiting, for the offsets consumer group group_id committed for l's partitions
 * (topics and partitions only are read; l stays the caller's). The answer, or the failure of a
 * request that took longer than timeout_ms, comes to q as one event carrying opaque: read it
 * with kafka_committed_answer. */
void kafka_ask_committed_async(rd_kafka_t *rk, const char *group_id,
                               const rd_kafka_topic_partition_list_t *l, int timeout_ms,
                               rd_kafka_queue_t *q, void *opaque);

/* Reads ev, an answer to kafka_ask_committed_async: *opaque takes the opaque it was sent with
 * (NULL when ev is no such answer, which is then -1; rd_kafka_event_opaque reads it alone). l, a list of the partitions asked, takes
 * each partition's committed offset (a negative one for a partition never committed). 0; or
 * -1 with err set, *again 1 when every error met is transient (asking again may mend it). */
int kafka_committed_answer(rd_kafka_event_t *ev, void **opaque,
                           rd_kafka_topic_partition_list_t *l, int *again, char *err,
                           size_t errlen);

#endif

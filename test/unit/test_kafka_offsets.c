/* kafka/offsets' asynchronous ask of a consumer group's committed offsets, against librdkafka's
 * mock cluster (a coordinator still loading the group's offsets, as after a Kafka restart). */
#include <stdio.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "kafka/offsets.h"
#include "unit.h"

#define OFFSET_FETCH 9   /* Kafka's ApiKey of OffsetFetch (librdkafka keeps its own private) */
#define TOPIC "delay_topic_5s"
#define GROUP "delayq-holder"

/* A consumer of group GROUP on a mock cluster of one broker holding TOPIC (2 partitions), its
 * offsets 5 and 7 committed. */
static rd_kafka_t *committed_consumer(rd_kafka_mock_cluster_t **mc, rd_kafka_t **owner)
{
    char why[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_topic_partition_list_t *l;
    rd_kafka_t *rk;
    rd_kafka_resp_err_t e;

    rd_kafka_conf_set(conf, "log_level", "0", why, sizeof(why));
    if (!(*owner = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why))))
        return NULL;
    if (!(*mc = rd_kafka_mock_cluster_new(*owner, 1)))
        return NULL;
    rd_kafka_mock_topic_create(*mc, TOPIC, 2, 1);
    conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "0", why, sizeof(why));
    rd_kafka_conf_set(conf, "bootstrap.servers", rd_kafka_mock_cluster_bootstraps(*mc), why,
                      sizeof(why));
    rd_kafka_conf_set(conf, "group.id", GROUP, why, sizeof(why));
    if (!(rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof(why))))
        return NULL;
    l = rd_kafka_topic_partition_list_new(2);
    rd_kafka_topic_partition_list_add(l, TOPIC, 0)->offset = 5;
    rd_kafka_topic_partition_list_add(l, TOPIC, 1)->offset = 7;
    e = rd_kafka_commit(rk, l, 0);
    rd_kafka_topic_partition_list_destroy(l);
    if (e) {
        fprintf(stderr, "commit: %s\n", rd_kafka_err2str(e));
        rd_kafka_destroy(rk);
        return NULL;
    }
    return rk;
}

/* The ask returns before its answer can have come (the broker answers 300 ms late), and a
 * coordinator answering "loading" twice is asked again until it answers the offsets. */
static void committed_offsets_are_asked_without_waiting_and_asked_again_while_loading(void)
{
    rd_kafka_mock_cluster_t *mc = NULL;
    rd_kafka_t *owner = NULL, *rk = committed_consumer(&mc, &owner);
    rd_kafka_queue_t *q;
    rd_kafka_topic_partition_list_t *l;
    int asks = 1, rc = -1, again = 0, immediate;
    char err[256] = "";
    void *tag = NULL;

    CHECK(rk);
    q = rd_kafka_queue_new(rk);
    l = rd_kafka_topic_partition_list_new(2);
    rd_kafka_topic_partition_list_add(l, TOPIC, 1);
    rd_kafka_topic_partition_list_add(l, TOPIC, 0);
    rd_kafka_mock_push_request_errors(mc, OFFSET_FETCH, 2,
                                      RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
                                      RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS);
    rd_kafka_mock_broker_set_rtt(mc, 1, 300);
    kafka_ask_committed_async(rk, GROUP, l, 5000, q, (void *)l);
    immediate = rd_kafka_queue_length(q) > 0;
    while (asks <= 5) {
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 5000);
        if (!ev)
            break;
        rc = kafka_committed_answer(ev, &tag, l, &again, err, sizeof(err));
        rd_kafka_event_destroy(ev);
        if (rc == 0 || !again)
            break;
        kafka_ask_committed_async(rk, GROUP, l, 5000, q, (void *)l);
        asks++;
    }
    rd_kafka_queue_destroy(q);
    rd_kafka_destroy(rk);
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(owner);
    if (rc < 0)
        fprintf(stderr, "the ask answered: %s (again %d)\n", err, again);
    CHECK(!immediate);
    CHECK_EQ_INT(rc, 0);
    CHECK(tag == (void *)l);
    CHECK_EQ_INT(asks, 3);
    CHECK_EQ_INT(l->elems[0].offset, 7);
    CHECK_EQ_INT(l->elems[1].offset, 5);
    rd_kafka_topic_partition_list_destroy(l);
}

void unit_kafka_offsets(void)
{
    RUN(committed_offsets_are_asked_without_waiting_and_asked_again_while_loading);
}

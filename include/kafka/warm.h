/* warm: keeps the metadata of business topics at hand for the producer that delivers to them,
 * so that the first job to a topic is not late. librdkafka asks the broker about a topic it
 * has not seen only on its next periodic scan, up to a second after the first produce to it;
 * delayqd knows a job's topic long before it is due (from the add, and from the delay-topic
 * message read ahead), so a thread of this module fetches the metadata then, and keeps a
 * handle on the topic so that librdkafka keeps it fresh. */
#ifndef DQ_WARM_H
#define DQ_WARM_H

#include <stddef.h>

#include <librdkafka/rdkafka.h>

/* Business topics kept warm at most; topics seen beyond them are delivered as before, after
 * librdkafka's own metadata fetch. Each costs a topic handle and a share of every metadata
 * request the producer sends (librdkafka refreshes known topics every 5 minutes). */
#define WARM_TOPICS_MAX 10000

struct warm;

/* Starts the thread that warms topics for rk (not owned: it must outlive the warm). NULL with
 * err set on failure. */
struct warm *warm_new(rd_kafka_t *rk, char *err, size_t errlen);

/* Stops the thread and drops the topic handles. NULL is ignored. */
void warm_free(struct warm *w);

/* Asks for the metadata of topic (len bytes, no NUL needed) unless it is known or asked for
 * already. Any thread; never waits for Kafka. */
void warm_topic(struct warm *w, const char *topic, size_t len);

/* 1 when topic's metadata was fetched, else 0. Any thread. */
int warm_ready(struct warm *w, const char *topic, size_t len);

#endif

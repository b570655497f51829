/* forwarder: acts on a message whose time has come. Due: looks up the record (jobs added over
 * HTTP: none, cancelled or delivered means skip), produces to the business topic, and after the
 * delivery report marks the record delivered. Not yet due: moves it down to the best level.
 * Unusable: dead-letter topic with dq-error. Work is batched: one Redis pipeline for the claims
 * of a batch, one for the marks, delivery reports taken together.
 * Runs on the holder's thread only. */
#ifndef DQ_FORWARDER_H
#define DQ_FORWARDER_H

#include <stddef.h>

#include <librdkafka/rdkafka.h>

#include "config.h"
#include "holder.h"

struct forwarder;

/* NULL with err set on failure. */
struct forwarder *forwarder_new(const struct config *cfg, struct holder *h, char *err, size_t errlen);
void forwarder_free(struct forwarder *fw);

/* The producer, whose main queue the holder watches for delivery reports. */
rd_kafka_t *forwarder_producer(struct forwarder *fw);

/* The metadata warmer of the producer that delivers: topics noted there are delivered to
 * without waiting for their metadata. Valid until forwarder_free. */
struct warm *forwarder_warm(struct forwarder *fw);

/* Queues m for the next flush; the forwarder now owns m until holder_done/holder_retry. */
void forwarder_submit(struct forwarder *fw, struct held *m);

/* Acts on everything submitted since the last flush. */
void forwarder_flush(struct forwarder *fw);

/* Serves delivery reports and finishes the messages they complete. */
void forwarder_poll(struct forwarder *fw);

/* Messages submitted and not yet handed back to the holder. */
size_t forwarder_in_flight(const struct forwarder *fw);

#endif

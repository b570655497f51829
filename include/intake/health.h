/* health: whether Redis and Kafka answer, kept current by a thread of its own: a PING and a
 * metadata request every HEALTH_PROBE_MS, every HEALTH_SUSPECT_MS while the intake counts Kafka
 * unreachable. /readyz answers from it at once, and the intake lets adds try Kafka again as
 * soon as a probe found it answering, so that no client's add is spent finding out. */
#ifndef DQ_HEALTH_H
#define DQ_HEALTH_H

#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "core/config.h"

#define HEALTH_PROBE_MS 1000        /* how old /readyz's answer may be */
#define HEALTH_SUSPECT_MS 200       /* the probes' pace while Kafka counts as unreachable */
#define HEALTH_KAFKA_TIMEOUT_MS 500 /* a metadata request waits this long for the broker */

struct health;

/* Starts the probing thread. rk (not owned, must outlive it) asks Kafka, for a metadata
 * request on the first delay topic. NULL with err set. */
struct health *health_new(const struct config *cfg, rd_kafka_t *rk, char *err, size_t errlen);
void health_free(struct health *h);

/* The last probes' verdict: 0 when Redis and Kafka answered, else -1 with the reason in why.
 * On 0, why holds a warning or "": a Redis that may evict job records. Never waits on the
 * network. */
int health_ready(struct health *h, char *why, size_t len);

/* Monotonic ms of Kafka's last answer to a probe, 0 before the first. */
int64_t health_kafka_answered_ms(struct health *h);

/* Kafka looks unreachable (an add went unacknowledged): probe it often until it answers. */
void health_suspect_kafka(struct health *h);

#endif

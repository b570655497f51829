/* holder: one consumer assign()ed to every partition of every delay topic. A partition whose
 * head is not due is paused, and resumed (then sought, to wake the fetcher) by a timer at the
 * head's time: no tick, no sleep. The smallest level's partitions, whose messages may be due
 * before their hop time, are read ahead into an in-memory heap of due times.
 * Offsets are committed up to the lowest message not yet finished.
 * Single-threaded: holder_run owns the consumer and drives the forwarder from its loop. Calls
 * flow one way: the holder hands due messages to the forwarder and applies the outcomes it hands
 * back, and applies the group changes groups_run returns; neither calls into the holder. */
#ifndef DQ_HOLDER_H
#define DQ_HOLDER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "delivery/forwarder.h"
#include "core/held.h"

struct holder;

struct warm;

/* The metadata warmer of the producer that delivers (see warm.h), for the intake to note the
 * topics of the jobs it adds. Valid until holder_free. */
struct warm *holder_warm(struct holder *h);

/* What an occurrence of a schedule that comes due tells (forwarder_on_occurrence); set before
 * holder_run. */
void holder_on_occurrence(struct holder *h, forwarder_occurrence_fn *fn,
                          forwarder_sched_check_fn *check, void *ctx);

/* Creates the consumer, the forwarder and the group leases. Partitions are assigned group by
 * group as their leases are won. partitions[level] is each delay topic's partition count.
 * NULL with err set on failure. */
struct holder *holder_new(const struct config *cfg, const int partitions[LEVELS_MAX], char *err,
                          size_t errlen);

/* Creates and destroys the consumer that holder_new would, without connecting: librdkafka
 * checks the whole configuration then (e.g. fetch.max.bytes against message.max.bytes).
 * Returns 0, or -1 with librdkafka's reason in err. */
int holder_check_config(const struct config *cfg, char *err, size_t errlen);

/* Runs the loop until *stop is set, then finishes in-flight forwards (up to a limit), commits
 * and returns. */
void holder_run(struct holder *h, volatile sig_atomic_t *stop);

void holder_free(struct holder *h);

#endif

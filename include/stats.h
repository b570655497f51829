/* stats: what waits in the delay topics and when it next acts, asked of Kafka (not Redis), so
 * that a look costs a few requests whatever the number of jobs: the committed offsets of
 * kafka.group_id, the log offsets, and offsets_for_times at each boundary of pending.h, each one
 * request for every delay-topic partition at once. Owns a consumer handle with that group.id
 * which never subscribes, assigns or commits, and a thread that looks when asked. A view is
 * reused for STATS_CACHE_MS. Thread-safe: concurrent callers wait for one look at Kafka. */
#ifndef DQ_STATS_H
#define DQ_STATS_H

#include <stddef.h>

#include "config.h"
#include "pending.h"

struct stats;

/* Creates the consumer handle (it connects at its first use). NULL with err set. */
struct stats *stats_new(const struct config *cfg, char *err, size_t errlen);

void stats_free(struct stats *s);

/* The pending view, at most STATS_CACHE_MS old (a look at Kafka when it is older). Returns 0,
 * or -1 with "stats: kafka: <what failed>: <why>" in err; a failure is reused as long as a
 * view would be. Waits up to about 8 s when Kafka does not answer. */
int stats_get(struct stats *s, struct pending_view *out, char *err, size_t errlen);

/* Brings the pending gauges of metrics.h up to date: asks for a look when the last one is
 * older than STATS_CACHE_MS and waits for it a quarter of a second at most (a scrape stays
 * quick; it shows the last look's values meanwhile). Every successful look sets them. */
void stats_gauges(struct stats *s);

#endif

/* stats: what waits in the delay topics and when it next acts, asked of Kafka (not Redis), so
 * that a look costs a few requests whatever the number of jobs: the committed offsets of
 * kafka.group_id, the log offsets, and offsets_for_times at each boundary of pending.h, each one
 * request for every delay-topic partition at once. Owns a consumer handle with that group.id
 * which never subscribes, assigns or commits, and a thread that looks when asked. A view is
 * reused for STATS_CACHE_MS. Thread-safe: callers that come while a look is under way are all
 * answered by that look. */
#ifndef DQ_STATS_H
#define DQ_STATS_H

#include <stddef.h>

#include "core/config.h"
#include "core/pending.h"

struct stats;

/* Creates the consumer handle (it connects at its first use). NULL with err set. */
struct stats *stats_new(const struct config *cfg, char *err, size_t errlen);

void stats_free(struct stats *s);

/* The answer to a look: the view, or v NULL and err "stats: kafka: <what failed>: <why>". */
typedef void stats_done_fn(void *opaque, const struct pending_view *v, const char *err);

/* The pending view, at most STATS_CACHE_MS old, handed to fn: at once, on the calling thread,
 * when the last look is that recent (a failure is reused as long as a view would be); else on
 * the stats thread when the look under way, or a new one, ends: within a look's limits (about
 * 7 s when Kafka does not answer), or at stats_free. The caller never waits. */
void stats_get(struct stats *s, stats_done_fn *fn, void *opaque);

/* Keeps the pending gauges of metrics.h up to date while /metrics is scraped: asks for a look
 * when the last one is older than STATS_CACHE_MS, and from then on the stats thread looks
 * every STATS_CACHE_MS by itself for a minute after the last call. Never waits: a scrape shows
 * the last look's values. */
void stats_gauges(struct stats *s);

#endif

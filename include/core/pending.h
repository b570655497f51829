/* pending: what waits in the delay topics, and when it next acts, counted from Kafka offsets
 * alone: per partition the group's committed offset, the log's low and end offsets, and the
 * offsets at a few timestamps (offsets_for_times). A message of level L with timestamp t next
 * acts at its hop time t + L (delivered if due, else moved down a level), and hop times rise
 * with offsets (docs/architecture.md), so one offset per boundary splits a
 * partition. The cost does not grow with the number of jobs. Pure logic: no network library. */
#ifndef DQ_PENDING_H
#define DQ_PENDING_H

#include <stddef.h>
#include <stdint.h>

#include "core/levels.h"

/* Boundaries, as times from now: 0 tells overdue messages apart, the others end the buckets. */
enum pending_bound { BOUND_NOW, BOUND_1M, BOUND_10M, BOUND_1H, BOUND_1D, PENDING_BOUNDS };

/* Buckets of time until a message acts; they do not overlap, and DUE_1M holds overdue ones. */
enum pending_due { DUE_1M, DUE_10M, DUE_1H, DUE_1D, DUE_LATER, PENDING_DUES };

extern const int64_t pending_bound_ms[PENDING_BOUNDS];   /* milliseconds from now */
extern const char *const pending_due_names[PENDING_DUES];  /* "1m", "10m", "1h", "1d", "later" */

/* One delay-topic partition as Kafka sees it. */
struct pending_part {
    int level;                      /* index into the levels */
    int64_t committed;              /* the group's committed offset; < 0: none (reads from low) */
    int64_t low, end;               /* the log's first offset and the offset after its last */
    int64_t at[PENDING_BOUNDS];     /* offsets_for_times(pending_bound_ts(...)) at each boundary;
                                     * < 0: no message that late (counts as end) */
};

struct pending_view {
    int64_t pending;                /* messages past the committed offsets, all partitions */
    int64_t by_level[LEVELS_MAX];   /* of those, per level */
    int64_t by_due[PENDING_DUES];   /* of those, by when they next act; sums to pending */
    int64_t overdue_ms;             /* how late the most overdue head is; 0 when none is */
};

/* The timestamp to ask offsets_for_times for at boundary bound_ms from now_ms in a level of
 * level_ms: the messages before its answer are those acting by now_ms + bound_ms, since
 * t + level_ms <= now_ms + bound_ms exactly when t < now_ms + bound_ms - level_ms + 1. */
int64_t pending_bound_ts(int64_t now_ms, int64_t bound_ms, int64_t level_ms);

/* The first offset p's group has not finished: the committed offset, or the low offset when
 * there is none (the group reads from the earliest), kept within [low, end]. */
int64_t pending_start(const struct pending_part *p);

/* The messages of p that act by boundary b, in [0, end - start]. */
int64_t pending_within(const struct pending_part *p, enum pending_bound b);

/* Counts n partitions into v; v->overdue_ms is set to 0 (see pending_search). */
void pending_count(const struct pending_part *parts, size_t n, struct pending_view *v);

/* The search for the timestamp of a partition's first unfinished message (at offset start) by
 * bisection with offsets_for_times, asked for many partitions at once: each round asks
 * pending_search_probe and hands the answer to pending_search_answer. lo and hi bound the
 * timestamp; the answer is exact once lo == hi (about 40 rounds from epoch 0). */
struct pending_search {
    int64_t start;                  /* the offset whose timestamp is sought */
    int64_t lo, hi;                 /* epoch ms: the timestamp is within [lo, hi] */
};

/* Starts a search for the timestamp of the message at start, known to be at most hi_ms. */
void pending_search_init(struct pending_search *s, int64_t start, int64_t hi_ms);

/* 1 once the timestamp is known (lo == hi), else 0. */
int pending_search_done(const struct pending_search *s);

/* The timestamp to ask offsets_for_times for next. */
int64_t pending_search_probe(const struct pending_search *s);

/* Narrows s with offsets_for_times' answer to the probe (< 0: no message that late). */
void pending_search_answer(struct pending_search *s, int64_t offset);

/* How late the message's hop time (timestamp + level_ms) is at now_ms, at least: exact once
 * the search is done, a lower bound before. 0 when not late. */
int64_t pending_search_late_ms(const struct pending_search *s, int64_t now_ms, int64_t level_ms);

#endif

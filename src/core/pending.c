/* pending: counts of the messages past the group's committed offsets, per level and by when
 * they next act, from per-partition offsets; and the bisection that finds how late a head is.
 * The contract is in include/core/pending.h. */
#include <string.h>

#include "core/pending.h"

#define MINUTE_MS 60000LL

const int64_t pending_bound_ms[PENDING_BOUNDS] = {
    [BOUND_NOW] = 0, [BOUND_1M] = MINUTE_MS, [BOUND_10M] = 10 * MINUTE_MS,
    [BOUND_1H] = 60 * MINUTE_MS, [BOUND_1D] = 24 * 60 * MINUTE_MS,
};

const char *const pending_due_names[PENDING_DUES] = {
    [DUE_1M] = "1m", [DUE_10M] = "10m", [DUE_1H] = "1h", [DUE_1D] = "1d", [DUE_LATER] = "later",
};

int64_t pending_bound_ts(int64_t now_ms, int64_t bound_ms, int64_t level_ms)
{
    return now_ms + bound_ms - level_ms + 1;
}

static int64_t clamp(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

int64_t pending_start(const struct pending_part *p)
{
    int64_t end = p->end > p->low ? p->end : p->low;

    return clamp(p->committed >= 0 ? p->committed : p->low, p->low, end);
}

int64_t pending_within(const struct pending_part *p, enum pending_bound b)
{
    int64_t start = pending_start(p), end = p->end > start ? p->end : start;
    int64_t at = p->at[b] >= 0 ? p->at[b] : end;

    return clamp(at, start, end) - start;
}

void pending_count(const struct pending_part *parts, size_t n, struct pending_view *v)
{
    memset(v, 0, sizeof(*v));
    for (size_t i = 0; i < n; i++) {
        const struct pending_part *p = &parts[i];
        int64_t total = p->end - pending_start(p), prev = 0;

        if (total < 0)
            total = 0;
        v->pending += total;
        v->by_level[p->level] += total;
        /* Bucket k holds what acts after boundary k and by boundary k + 1 (DUE_1M from now:
         * overdue included). The boundaries were asked in separate requests: a later one is
         * taken as never counting fewer, so the buckets sum to the total. */
        for (int k = 0; k < DUE_LATER; k++) {
            int64_t upto = pending_within(p, (enum pending_bound)(k + 1));
            if (upto < prev)
                upto = prev;
            v->by_due[k] += upto - prev;
            prev = upto;
        }
        v->by_due[DUE_LATER] += total - prev;
    }
}

void pending_search_init(struct pending_search *s, int64_t start, int64_t hi_ms)
{
    s->start = start;
    s->lo = 0;
    s->hi = hi_ms > 0 ? hi_ms : 0;
}

int pending_search_done(const struct pending_search *s)
{
    return s->lo >= s->hi;
}

/* The upper middle: lo is always a timestamp known to be reached by an offset up to start
 * (offsets_for_times(0) is the log's first), so the probe must move past it. */
int64_t pending_search_probe(const struct pending_search *s)
{
    return s->lo + (s->hi - s->lo + 1) / 2;
}

/* offsets_for_times(T) is the first offset with a timestamp >= T: at or before start means the
 * message at start (or an earlier one) is at least T; past start, or none, means it is below T. */
void pending_search_answer(struct pending_search *s, int64_t offset)
{
    int64_t probe = pending_search_probe(s);

    if (offset >= 0 && offset <= s->start)
        s->lo = probe;
    else
        s->hi = probe - 1;
}

int64_t pending_search_late_ms(const struct pending_search *s, int64_t now_ms, int64_t level_ms)
{
    int64_t late = now_ms - (s->hi + level_ms);

    return late > 0 ? late : 0;
}

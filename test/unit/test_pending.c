#include "core/pending.h"
#include "unit.h"

#define NOW 1800000000000LL
#define SEC 1000LL
#define MIN (60 * SEC)

/* A partition of a level level_ms whose messages at offsets [0, n) have timestamps ts[i]
 * (rising), committed up to committed: its offsets as Kafka would answer them at NOW. */
static struct pending_part part_of(int level, int64_t level_ms, const int64_t *ts, int64_t n,
                                   int64_t committed)
{
    struct pending_part p = { .level = level, .committed = committed, .low = 0, .end = n };

    for (int b = 0; b < PENDING_BOUNDS; b++) {
        int64_t want = pending_bound_ts(NOW, pending_bound_ms[b], level_ms), at = -1;
        for (int64_t i = 0; i < n && at < 0; i++)
            if (ts[i] >= want)
                at = i;
        p.at[b] = at;
    }
    return p;
}

static void bound_ts_splits_at_the_hop_time(void)
{
    /* level 10 s: a message stamped NOW - 10 s acts now, one stamped a millisecond later not */
    CHECK_EQ_INT(pending_bound_ts(NOW, 0, 10 * SEC), NOW - 10 * SEC + 1);
    CHECK_EQ_INT(pending_bound_ts(NOW, MIN, 5 * MIN), NOW - 4 * MIN + 1);
}

static void counts_by_level_and_due(void)
{
    /* level 10 s: 2 overdue, 3 acting within the minute; level 5 m: acting in 4 m, 30 m, 3 h */
    const int64_t a[] = { NOW - 60 * SEC, NOW - 11 * SEC, NOW, NOW + 5 * SEC, NOW + 40 * SEC };
    const int64_t b[] = { NOW - MIN, NOW + 25 * MIN, NOW + 175 * MIN, NOW + 2 * 24 * 60 * MIN };
    struct pending_part parts[2];
    struct pending_view v;

    parts[0] = part_of(0, 10 * SEC, a, 5, -1);
    parts[1] = part_of(1, 5 * MIN, b, 4, 0);
    pending_count(parts, 2, &v);
    CHECK_EQ_INT(v.pending, 9);
    CHECK_EQ_INT(v.by_level[0], 5);
    CHECK_EQ_INT(v.by_level[1], 4);
    CHECK_EQ_INT(v.by_due[DUE_1M], 5);
    CHECK_EQ_INT(v.by_due[DUE_10M], 1);
    CHECK_EQ_INT(v.by_due[DUE_1H], 1);
    CHECK_EQ_INT(v.by_due[DUE_1D], 1);
    CHECK_EQ_INT(v.by_due[DUE_LATER], 1);
    CHECK_EQ_INT(pending_within(&parts[0], BOUND_NOW), 2);
    CHECK_EQ_INT(pending_within(&parts[1], BOUND_NOW), 0);
    CHECK_EQ_INT(v.overdue_ms, 0);
}

static void committed_messages_do_not_count(void)
{
    const int64_t a[] = { NOW - 60 * SEC, NOW - 11 * SEC, NOW, NOW + 5 * SEC };
    struct pending_part p = part_of(0, 10 * SEC, a, 4, 2);
    struct pending_view v;

    pending_count(&p, 1, &v);
    CHECK_EQ_INT(v.pending, 2);
    CHECK_EQ_INT(v.by_due[DUE_1M], 2);
    CHECK_EQ_INT(pending_within(&p, BOUND_NOW), 0);   /* the overdue two are done */
    p.committed = 4;
    pending_count(&p, 1, &v);
    CHECK_EQ_INT(v.pending, 0);
    CHECK_EQ_INT(v.by_due[DUE_1M], 0);
}

static void offsets_out_of_range_are_clamped(void)
{
    /* deleted by retention below the committed offset; never committed: from low */
    struct pending_part p = { .level = 0, .committed = 3, .low = 10, .end = 20,
                              .at = { 5, 15, -1, -1, 30 } };
    struct pending_view v;

    CHECK_EQ_INT(pending_start(&p), 10);
    CHECK_EQ_INT(pending_within(&p, BOUND_NOW), 0);
    CHECK_EQ_INT(pending_within(&p, BOUND_1M), 5);
    CHECK_EQ_INT(pending_within(&p, BOUND_10M), 10);   /* none that late: the end */
    CHECK_EQ_INT(pending_within(&p, BOUND_1D), 10);
    p.committed = -1001;   /* RD_KAFKA_OFFSET_INVALID */
    CHECK_EQ_INT(pending_start(&p), 10);
    p.committed = 25;
    CHECK_EQ_INT(pending_start(&p), 20);
    pending_count(&p, 1, &v);
    CHECK_EQ_INT(v.pending, 0);
    p.low = p.end = 0;     /* empty */
    p.committed = -1001;
    pending_count(&p, 1, &v);
    CHECK_EQ_INT(v.pending, 0);
    CHECK_EQ_INT(v.by_due[DUE_LATER], 0);
}

static void buckets_sum_to_the_total_whatever_the_answers(void)
{
    /* answers from separate requests that disagree: a later boundary below an earlier one */
    struct pending_part p = { .level = 2, .committed = 0, .low = 0, .end = 10,
                              .at = { 2, 6, 4, 8, 7 } };
    struct pending_view v;
    int64_t sum = 0;

    pending_count(&p, 1, &v);
    for (int k = 0; k < PENDING_DUES; k++) {
        CHECK(v.by_due[k] >= 0);
        sum += v.by_due[k];
    }
    CHECK_EQ_INT(sum, 10);
    CHECK_EQ_INT(v.by_due[DUE_1M], 6);
    CHECK_EQ_INT(v.by_due[DUE_10M], 0);
    CHECK_EQ_INT(v.by_due[DUE_1H], 2);
    CHECK_EQ_INT(v.by_due[DUE_LATER], 2);
    CHECK_STR(pending_due_names[DUE_LATER], "later");
}

/* offsets_for_times over messages stamped ts[0..n) (rising). */
static int64_t first_at_or_after(const int64_t *ts, int64_t n, int64_t t)
{
    for (int64_t i = 0; i < n; i++)
        if (ts[i] >= t)
            return i;
    return -1;
}

static void search_finds_the_head_timestamp(void)
{
    const int64_t ts[] = { NOW - 90 * SEC, NOW - 70 * SEC, NOW - 70 * SEC, NOW - 30 * SEC, NOW };
    struct pending_search s;
    int rounds = 0;

    pending_search_init(&s, 2, NOW - 10 * SEC);   /* head at offset 2, level 10 s: overdue */
    CHECK_EQ_INT(pending_search_late_ms(&s, NOW, 10 * SEC), 0);   /* nothing known yet */
    while (!pending_search_done(&s) && rounds < 64) {
        pending_search_answer(&s, first_at_or_after(ts, 5, pending_search_probe(&s)));
        rounds++;
    }
    CHECK(pending_search_done(&s));
    CHECK(rounds <= 42);
    CHECK_EQ_INT(s.lo, NOW - 70 * SEC);
    CHECK_EQ_INT(pending_search_late_ms(&s, NOW, 10 * SEC), 60 * SEC);
    CHECK_EQ_INT(pending_search_late_ms(&s, NOW - 61 * SEC, 10 * SEC), 0);
}

static void search_cut_short_reports_a_lower_bound(void)
{
    const int64_t ts[] = { NOW - 3600 * SEC, NOW - 5 * SEC };
    struct pending_search s;

    pending_search_init(&s, 0, NOW - SEC);
    for (int i = 0; i < 8; i++) {
        int64_t late = pending_search_late_ms(&s, NOW, SEC);
        pending_search_answer(&s, first_at_or_after(ts, 2, pending_search_probe(&s)));
        CHECK(pending_search_late_ms(&s, NOW, SEC) >= late);
        CHECK(pending_search_late_ms(&s, NOW, SEC) <= 3599 * SEC);
    }
}

void unit_pending(void)
{
    RUN(bound_ts_splits_at_the_hop_time);
    RUN(counts_by_level_and_due);
    RUN(committed_messages_do_not_count);
    RUN(offsets_out_of_range_are_clamped);
    RUN(buckets_sum_to_the_total_whatever_the_answers);
    RUN(search_finds_the_head_timestamp);
    RUN(search_cut_short_reports_a_lower_bound);
}

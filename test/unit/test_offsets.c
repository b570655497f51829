#include "core/offsets.h"
#include "unit.h"

static void nothing_known(void)
{
    struct offsets o;

    offsets_init(&o);
    CHECK_EQ_INT(offsets_commit_point(&o), -1);
    CHECK_EQ_INT(offsets_unfinished(&o), 0);
    offsets_release(&o);
}

static void in_order_finishes(void)
{
    struct offsets o;

    offsets_init(&o);
    for (int64_t i = 10; i < 13; i++)
        CHECK_EQ_INT(offsets_take(&o, i), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 10);
    CHECK_EQ_INT(offsets_finish(&o, 10), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 11);
    CHECK_EQ_INT(offsets_finish(&o, 11), 0);
    CHECK_EQ_INT(offsets_finish(&o, 12), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 13);
    CHECK_EQ_INT(offsets_unfinished(&o), 0);
    offsets_release(&o);
}

static void out_of_order_finishes(void)
{
    struct offsets o;

    offsets_init(&o);
    for (int64_t i = 0; i < 4; i++)
        CHECK_EQ_INT(offsets_take(&o, i), 0);
    CHECK_EQ_INT(offsets_finish(&o, 2), 0);
    CHECK_EQ_INT(offsets_finish(&o, 3), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 0);
    CHECK_EQ_INT(offsets_unfinished(&o), 4);
    CHECK_EQ_INT(offsets_finish(&o, 1), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 0);
    CHECK_EQ_INT(offsets_finish(&o, 0), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 4);
    CHECK_EQ_INT(offsets_unfinished(&o), 0);
    offsets_release(&o);
}

static void gaps_between_offsets(void)
{
    struct offsets o;

    offsets_init(&o);
    CHECK_EQ_INT(offsets_take(&o, 5), 0);
    CHECK_EQ_INT(offsets_take(&o, 9), 0);
    CHECK_EQ_INT(offsets_finish(&o, 5), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 9);
    CHECK_EQ_INT(offsets_finish(&o, 7), -1);
    CHECK_EQ_INT(offsets_finish(&o, 9), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 10);
    offsets_release(&o);
}

static void hold_at_before_anything(void)
{
    struct offsets o;

    offsets_init(&o);
    offsets_hold_at(&o, 42);
    CHECK_EQ_INT(offsets_commit_point(&o), 42);
    CHECK_EQ_INT(offsets_unfinished(&o), 0);
    CHECK_EQ_INT(offsets_take(&o, 42), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 42);
    CHECK_EQ_INT(offsets_finish(&o, 42), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 43);
    offsets_release(&o);
}

static void hold_at_never_goes_back(void)
{
    struct offsets o;

    offsets_init(&o);
    CHECK_EQ_INT(offsets_take(&o, 7), 0);
    CHECK_EQ_INT(offsets_finish(&o, 7), 0);
    offsets_hold_at(&o, 3);
    CHECK_EQ_INT(offsets_commit_point(&o), 8);
    offsets_hold_at(&o, 12);
    CHECK_EQ_INT(offsets_commit_point(&o), 12);
    offsets_release(&o);
}

static void hold_at_while_unfinished(void)
{
    struct offsets o;

    offsets_init(&o);
    CHECK_EQ_INT(offsets_take(&o, 1), 0);
    offsets_hold_at(&o, 2);
    CHECK_EQ_INT(offsets_commit_point(&o), 1);
    CHECK_EQ_INT(offsets_finish(&o, 1), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 2);
    offsets_release(&o);
}

static void finish_unknown(void)
{
    struct offsets o;

    offsets_init(&o);
    CHECK_EQ_INT(offsets_finish(&o, 0), -1);
    CHECK_EQ_INT(offsets_take(&o, 3), 0);
    CHECK_EQ_INT(offsets_finish(&o, 2), -1);
    CHECK_EQ_INT(offsets_finish(&o, 4), -1);
    CHECK_EQ_INT(offsets_commit_point(&o), 3);
    CHECK_EQ_INT(offsets_finish(&o, 3), 0);
    CHECK_EQ_INT(offsets_finish(&o, 3), -1);
    offsets_release(&o);
}

static void take_out_of_order(void)
{
    struct offsets o;

    offsets_init(&o);
    CHECK_EQ_INT(offsets_take(&o, 5), 0);
    CHECK_EQ_INT(offsets_take(&o, 5), -1);
    CHECK_EQ_INT(offsets_take(&o, 4), -1);
    CHECK_EQ_INT(offsets_unfinished(&o), 1);
    CHECK_EQ_INT(offsets_commit_point(&o), 5);
    offsets_release(&o);
}

/* The header: an offset "must be above every offset taken before", also once they finished. */
static void take_below_finished_refused(void)
{
    struct offsets o;
    int rc;
    int64_t cp;

    offsets_init(&o);
    offsets_take(&o, 5);
    offsets_finish(&o, 5);
    rc = offsets_take(&o, 3);
    cp = offsets_commit_point(&o);
    offsets_release(&o);
    CHECK_EQ_INT(rc, -1);
    CHECK_EQ_INT(cp, 6);
}

static void growth_past_ring(void)
{
    struct offsets o;

    offsets_init(&o);
    for (int64_t i = 0; i < 300; i++)
        CHECK_EQ_INT(offsets_take(&o, i), 0);
    CHECK_EQ_INT(offsets_unfinished(&o), 300);
    for (int64_t i = 299; i >= 1; i--)
        CHECK_EQ_INT(offsets_finish(&o, i), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 0);
    CHECK_EQ_INT(offsets_finish(&o, 0), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 300);
    offsets_release(&o);
}

/* A window of 50 unfinished offsets slides through 1000 offsets: the ring wraps many times. */
static void wraparound_interleaved(void)
{
    struct offsets o;

    offsets_init(&o);
    for (int64_t i = 0; i < 1000; i++) {
        CHECK_EQ_INT(offsets_take(&o, i), 0);
        if (i >= 50)
            CHECK_EQ_INT(offsets_finish(&o, i - 50), 0);
        CHECK_EQ_INT(offsets_commit_point(&o), i >= 50 ? i - 49 : 0);
    }
    CHECK_EQ_INT(offsets_unfinished(&o), 50);
    CHECK(o.cap <= 64);
    offsets_release(&o);
}

/* Wraps, then grows while wrapped, finishing out of order; the ring must keep its order. */
static void growth_while_wrapped(void)
{
    struct offsets o;
    int64_t next = 0, low = 0;

    offsets_init(&o);
    for (int round = 0; round < 250; round++) {
        CHECK_EQ_INT(offsets_take(&o, next++), 0);
        if (round % 3 == 2) {
            CHECK_EQ_INT(offsets_finish(&o, low + 1), 0);
            CHECK_EQ_INT(offsets_finish(&o, low), 0);
            low += 2;
        }
        CHECK_EQ_INT(offsets_commit_point(&o), low);
    }
    while (low < next)
        CHECK_EQ_INT(offsets_finish(&o, low++), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), next);
    offsets_release(&o);
}

static void reset_forgets(void)
{
    struct offsets o;

    offsets_init(&o);
    CHECK_EQ_INT(offsets_take(&o, 100), 0);
    CHECK_EQ_INT(offsets_take(&o, 101), 0);
    offsets_reset(&o);
    CHECK_EQ_INT(offsets_commit_point(&o), -1);
    CHECK_EQ_INT(offsets_unfinished(&o), 0);
    CHECK_EQ_INT(offsets_finish(&o, 100), -1);
    CHECK_EQ_INT(offsets_take(&o, 50), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 50);
    CHECK_EQ_INT(offsets_finish(&o, 50), 0);
    CHECK_EQ_INT(offsets_commit_point(&o), 51);
    offsets_release(&o);
}

void unit_offsets(void)
{
    RUN(nothing_known);
    RUN(in_order_finishes);
    RUN(out_of_order_finishes);
    RUN(gaps_between_offsets);
    RUN(hold_at_before_anything);
    RUN(hold_at_never_goes_back);
    RUN(hold_at_while_unfinished);
    RUN(finish_unknown);
    RUN(take_out_of_order);
    RUN(take_below_finished_refused);
    RUN(growth_past_ring);
    RUN(wraparound_interleaved);
    RUN(growth_while_wrapped);
    RUN(reset_forgets);
}

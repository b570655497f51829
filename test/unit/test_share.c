#include "core/share.h"
#include "unit.h"

#define PLAN(g, n, least, held, rel, acq)                                       \
    do {                                                                        \
        struct share_plan p_ = share_plan((g), (n), (least), (held));           \
        CHECK_EQ_INT(p_.release, (rel));                                        \
        CHECK_EQ_INT(p_.acquire, (acq));                                        \
    } while (0)

/* Three instances, four groups: each takes one at once, then one of them a second: 2/1/1. */
static void three_instances_four_groups(void)
{
    PLAN(4, 3, 0, 0, 0, 1);
    PLAN(4, 3, 1, 1, 0, 1);
    PLAN(4, 3, 1, 2, 0, 0);
}

/* A fourth instance joins: whoever holds two hands one back; the newcomer takes one. */
static void join_rebalances(void)
{
    PLAN(4, 4, 0, 2, 1, 0);
    PLAN(4, 4, 0, 1, 0, 0);
    PLAN(4, 4, 0, 0, 0, 1);
}

/* At hi while someone holds less than lo: hand one back, and do not take it back. */
static void starving_instance_gets_one(void)
{
    PLAN(5, 3, 0, 2, 1, 0);
    PLAN(5, 3, 0, 1, 0, 0);
    PLAN(5, 3, 1, 1, 0, 1);
}

/* An instance died: the survivors' lo rises and they take its groups at once. */
static void dead_owner_taken_over(void)
{
    PLAN(4, 2, 2, 1, 0, 1);
    PLAN(4, 1, 2, 2, 0, 2);
}

static void alone_and_degenerate(void)
{
    PLAN(1, 1, 0, 0, 0, 1);
    PLAN(1, 1, 1, 1, 0, 0);
    PLAN(2, 0, 0, 0, 0, 2);     /* no live count yet: as if alone */
    PLAN(1, 3, 0, 0, 0, 1);     /* more instances than groups: lo 0, hi 1 */
    PLAN(1, 3, 0, 1, 0, 0);
}

void unit_share(void)
{
    RUN(three_instances_four_groups);
    RUN(join_rebalances);
    RUN(starving_instance_gets_one);
    RUN(dead_owner_taken_over);
    RUN(alone_and_degenerate);
}

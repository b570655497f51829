/* recur: fire times and the plan of a due occurrence. The contract is in include/core/recur.h. */
#include <string.h>

#include "core/recur.h"

/* How far catch_up all walks from a missed occurrence towards now before it gives up counting
 * and goes on as skip would (a cron firing every second, missed for days). */
#define CATCH_UP_WALK_MAX 100000
#define PARK_LEAD_MS 60000   /* a parked occurrence is indexed this long after it may be made, at most */

static const char *const catch_up_names[] = { "skip", "once", "all" };

const char *recur_catch_up_name(enum recur_catch_up c)
{
    return catch_up_names[c];
}

int recur_catch_up_of(const char *s, enum recur_catch_up *out)
{
    for (int i = 0; i < 3; i++) {
        if (strcmp(s, catch_up_names[i]) == 0) {
            *out = (enum recur_catch_up)i;
            return 0;
        }
    }
    return -1;
}

/* An interval's fire time strictly after after_ms. */
static int64_t every_next(const struct recur_timing *t, int64_t after_ms)
{
    if (after_ms < t->anchor_ms)
        return t->anchor_ms;
    return t->anchor_ms + ((after_ms - t->anchor_ms) / t->every_ms + 1) * t->every_ms;
}

/* A cron's fire time strictly after after_ms: cron works in whole seconds. */
static int64_t cron_next_ms(const struct recur_timing *t, int64_t after_ms)
{
    int64_t s = after_ms >= 0 ? after_ms / 1000 : -((-after_ms + 999) / 1000);
    int64_t next = cron_next(&t->cron, t->tz, s);

    return next < 0 ? -1 : next * 1000;
}

int64_t recur_next(const struct recur_timing *t, int64_t after_ms)
{
    int64_t n;

    if (t->start_ms > 0 && after_ms < t->start_ms - 1)
        after_ms = t->start_ms - 1;
    n = t->every_ms > 0 ? every_next(t, after_ms) : cron_next_ms(t, after_ms);
    if (n < 0 || (t->end_ms > 0 && n > t->end_ms))
        return -1;
    return n;
}

int64_t recur_first(const struct recur_timing *t, int64_t now_ms, int64_t pending_ms)
{
    if (pending_ms > 0 && t->catch_up != RECUR_SKIP && pending_ms <= now_ms)
        return recur_next(t, pending_ms - 1);
    return recur_next(t, now_ms);
}

/* catch_up all: the most recent catch_up_max fire times at or before now_ms, from fire_ms on.
 * The oldest of them into *oldest; 1 when fire_ms is among them, 0 when it is older, -1 when
 * the walk was too long to count. */
static int recent_window(const struct recur_timing *t, int64_t fire_ms, int64_t now_ms,
                         int64_t *oldest)
{
    int64_t max = t->catch_up_max > 0 ? t->catch_up_max : 1, seen = 1, f = fire_ms;
    int64_t lag[RECUR_CATCH_UP_MAX];   /* a ring of the last max fire times */

    if (max > RECUR_CATCH_UP_MAX)
        max = RECUR_CATCH_UP_MAX;
    if (t->every_ms > 0) {   /* arithmetic: no walk */
        int64_t last = t->end_ms > 0 && t->end_ms < now_ms ? t->end_ms : now_ms;
        int64_t count = (last - fire_ms) / t->every_ms + 1;
        *oldest = count <= max ? fire_ms : fire_ms + (count - max) * t->every_ms;
        return count <= max;
    }
    lag[0] = f;
    for (;;) {
        int64_t n = recur_next(t, f);
        if (n < 0 || n > now_ms)
            break;
        if (seen >= CATCH_UP_WALK_MAX)
            return -1;
        lag[seen++ % max] = f = n;
    }
    *oldest = seen <= max ? fire_ms : lag[seen % max];
    return seen <= max;
}

void recur_plan(const struct recur_timing *t, const char *id, int64_t fire_ms, int64_t runs,
                int64_t now_ms, struct recur_plan *out)
{
    int64_t n = recur_next(t, fire_ms), oldest;
    int in;

    /* missed when the next one is due too: its fire time plus its jitter has passed */
    out->missed = n >= 0 && n + recur_jitter(id, n, t->jitter_ms) <= now_ms;
    out->run = 1;
    out->next_ms = n;
    if (out->missed) {
        switch (t->catch_up) {
        case RECUR_SKIP:
            out->run = 0;
            out->next_ms = recur_next(t, now_ms);
            break;
        case RECUR_ONCE:
            out->next_ms = recur_next(t, now_ms);
            break;
        case RECUR_ALL:
            in = recent_window(t, fire_ms, now_ms, &oldest);
            if (in < 0) {
                out->run = 0;
                out->next_ms = recur_next(t, now_ms);
            } else if (!in) {
                out->run = 0;
                out->next_ms = oldest;
            }
            break;
        }
    }
    if (out->run && t->max_runs > 0 && runs + 1 >= t->max_runs)
        out->next_ms = -1;
}

int64_t recur_jitter(const char *id, int64_t fire_ms, int64_t jitter_ms)
{
    uint64_t h = 1469598103934665603ULL;   /* FNV-1a of the id and the fire time */

    if (jitter_ms <= 1)
        return 0;
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    for (int i = 0; i < 8; i++)
        h = (h ^ (unsigned char)((uint64_t)fire_ms >> (8 * i))) * 1099511628211ULL;
    return (int64_t)(h % (uint64_t)jitter_ms);
}

int recur_parked(int64_t due_ms, int64_t now_ms, int64_t max_delay_ms)
{
    return due_ms - now_ms > max_delay_ms;
}

int64_t recur_index_ms(int64_t due_ms, int64_t now_ms, int64_t max_delay_ms, int64_t lag_ms)
{
    int64_t lead = max_delay_ms - lag_ms - 1000;

    if (lead > PARK_LEAD_MS)
        lead = PARK_LEAD_MS;
    if (lead < 1000 - lag_ms)
        lead = 1000 - lag_ms;
    return recur_parked(due_ms, now_ms, max_delay_ms) ? due_ms - max_delay_ms + lead : due_ms;
}

const char *recur_verdict_why(enum recur_verdict v)
{
    switch (v) {
    case RECUR_SCHED_CHANGED:
        return "skipped: its schedule was changed after it was made (another generation)";
    case RECUR_SCHED_PAUSED:
        return "skipped: its schedule is paused";
    case RECUR_SCHED_GONE:
        return "skipped: its schedule was deleted";
    case RECUR_OVERLAP:
        return "skipped: the occurrence before it had not finished (overlap skip)";
    case RECUR_RUNS:
        break;
    }
    return "skipped: a later fire time of its schedule had passed too when it came due (catch_up)";
}

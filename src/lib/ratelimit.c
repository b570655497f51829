/* ratelimit: an endpoint's token bucket and adaptive rate. The contract is in
 * include/lib/ratelimit.h. */
#include <string.h>

#include "lib/ratelimit.h"

void ratelimit_init(struct ratelimit *r, double per_s, int64_t now_ms)
{
    memset(r, 0, sizeof(*r));
    r->window_ms = now_ms;
    ratelimit_set(r, per_s, now_ms);
}

void ratelimit_set(struct ratelimit *r, double per_s, int64_t now_ms)
{
    r->limit = per_s;
    r->rate = per_s;
    r->tokens = r->rate > 1 ? r->rate : 1;
    r->refilled_ms = now_ms;
    r->adapted = 0;
}

/* The tokens a full bucket holds: a second's worth, at least one call. */
static double burst(const struct ratelimit *r)
{
    return r->rate > 1 ? r->rate : 1;
}

/* The tokens there are at now_ms. */
static double tokens_at(const struct ratelimit *r, int64_t now_ms)
{
    double t = r->tokens + (double)(now_ms - r->refilled_ms) * r->rate / 1000.0;

    return t < burst(r) ? t : burst(r);
}

static void refill(struct ratelimit *r, int64_t now_ms)
{
    r->tokens = tokens_at(r, now_ms);
    r->refilled_ms = now_ms;
}

int ratelimit_take(struct ratelimit *r, int64_t now_ms)
{
    if (r->rate <= 0)
        return 1;
    refill(r, now_ms);
    if (r->tokens < 1)
        return 0;
    r->tokens -= 1;
    return 1;
}

int64_t ratelimit_wait_ms(const struct ratelimit *r, int64_t now_ms)
{
    double t;

    if (r->rate <= 0 || (t = tokens_at(r, now_ms)) >= 1)
        return 0;
    return (int64_t)((1 - t) * 1000.0 / r->rate) + 1;
}

void ratelimit_observe(struct ratelimit *r, int64_t now_ms)
{
    if (now_ms - r->window_ms >= 1000) {
        r->observed = r->window_calls * 1000.0 / (double)(now_ms - r->window_ms);
        r->window_ms = now_ms;
        r->window_calls = 0;
        if (r->observed >= r->peak || now_ms - r->peak_ms > RATELIMIT_PEAK_MS) {
            r->peak = r->observed;
            r->peak_ms = now_ms;
        }
    }
    r->window_calls++;
}

/* The rate the endpoint took lately: the most of a whole second in the last minute, the last
 * whole second's, or the current one's when more have started in it already. */
static double observed(const struct ratelimit *r, int64_t now_ms)
{
    double seen = r->observed > r->window_calls ? r->observed : r->window_calls;

    if (now_ms - r->peak_ms <= RATELIMIT_PEAK_MS && r->peak > seen)
        seen = r->peak;
    return seen;
}

/* The rate a halving stops at: RATELIMIT_FLOOR, or an eighth of the configured rate when more,
 * and never above the configured rate. */
static double floor_of(const struct ratelimit *r)
{
    double f = r->limit / 8 > RATELIMIT_FLOOR ? r->limit / 8 : RATELIMIT_FLOOR;

    return r->limit > 0 && r->limit < f ? r->limit : f;
}

int ratelimit_halve(struct ratelimit *r, int64_t now_ms)
{
    double base;

    r->throttled_ms = now_ms;
    if (r->halved_ms && now_ms - r->halved_ms < RATELIMIT_STEP_MS)
        return 0;
    if (r->rate > 0) {
        refill(r, now_ms);
        base = r->rate;
    } else {
        base = observed(r, now_ms) > floor_of(r) ? observed(r, now_ms) : floor_of(r);
        r->unlimit_above = base * RATELIMIT_UNLIMIT;
        r->tokens = 0;
        r->refilled_ms = now_ms;
    }
    r->rate = base / 2 > floor_of(r) ? base / 2 : floor_of(r);
    if (r->tokens > burst(r))
        r->tokens = burst(r);
    r->adapted = 1;
    r->halved_ms = r->grown_ms = now_ms;
    return 1;
}

int ratelimit_grow(struct ratelimit *r, int64_t now_ms)
{
    if (!r->adapted || now_ms - r->throttled_ms < RATELIMIT_STEP_MS ||
        now_ms - r->grown_ms < RATELIMIT_STEP_MS)
        return 0;
    refill(r, now_ms);
    r->grown_ms = now_ms;
    r->rate *= RATELIMIT_GROWTH;
    if (r->limit > 0 && r->rate >= r->limit) {
        r->rate = r->limit;
        r->adapted = 0;
    } else if (r->limit == 0 && r->rate >= r->unlimit_above) {
        r->rate = 0;
        r->adapted = 0;
    }
    return !r->adapted;
}

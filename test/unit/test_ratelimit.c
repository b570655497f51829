/* ratelimit: an endpoint's token bucket, and its rate halving on push-back and growing back,
 * on a clock the tests drive. */
#include "lib/ratelimit.h"
#include "unit.h"

#define T0 100000   /* a monotonic time: never 0 */

/* Calls that may start at now_ms, taking tokens until none is left (at most max). */
static int take_all(struct ratelimit *r, int64_t now_ms, int max)
{
    int n = 0;

    while (n < max && ratelimit_take(r, now_ms))
        n++;
    return n;
}

/* Quiet steps of growth from now_ms until the rate is back; *now_ms is then the last step.
 * -1 when it is not back after max steps. */
static int steps_to_recover(struct ratelimit *r, int64_t *now_ms, int max)
{
    for (int i = 1; i <= max; i++) {
        *now_ms += RATELIMIT_STEP_MS;
        if (ratelimit_grow(r, *now_ms))
            return i;
    }
    return -1;
}

/* A new endpoint without a limit that was called calls times in its first second (from T0);
 * the second is closed by a call at T0 + 1 s. */
static void busy_second(struct ratelimit *r, int calls)
{
    ratelimit_init(r, 0, T0);
    for (int i = 0; i < calls; i++)
        ratelimit_observe(r, T0 + i * (1000 / calls));
    ratelimit_observe(r, T0 + RATELIMIT_STEP_MS);
}

/* A full bucket holds a second's worth of calls, and one call at least. */
static void burst(void)
{
    struct ratelimit r;

    ratelimit_init(&r, 5, T0);
    CHECK_EQ_INT(take_all(&r, T0, 100), 5);
    ratelimit_init(&r, 0.5, T0);
    CHECK_EQ_INT(take_all(&r, T0, 100), 1);
    CHECK_EQ_INT(take_all(&r, T0 + 1999, 100), 0);
    CHECK_EQ_INT(take_all(&r, T0 + 2000, 100), 1);
}

static void refills_over_time(void)
{
    struct ratelimit r;

    ratelimit_init(&r, 10, T0);
    CHECK_EQ_INT(take_all(&r, T0, 100), 10);
    CHECK_EQ_INT(take_all(&r, T0 + 99, 100), 0);
    CHECK_EQ_INT(take_all(&r, T0 + 100, 100), 1);
    CHECK_EQ_INT(take_all(&r, T0 + 350, 100), 2);    /* 2.5 tokens: half a token stays */
    CHECK_EQ_INT(take_all(&r, T0 + 400, 100), 1);
    CHECK_EQ_INT(take_all(&r, T0 + 60000, 100), 10); /* a long idle fills the bucket only */
}

static void waits_for_the_next_token(void)
{
    struct ratelimit r;

    ratelimit_init(&r, 10, T0);
    CHECK_EQ_INT(ratelimit_wait_ms(&r, T0), 0);
    CHECK_EQ_INT(take_all(&r, T0, 100), 10);
    CHECK_EQ_INT(ratelimit_wait_ms(&r, T0), 101);
    CHECK_EQ_INT(ratelimit_wait_ms(&r, T0 + 50), 51);
    CHECK_EQ_INT(ratelimit_wait_ms(&r, T0 + 100), 0);
    CHECK_EQ_INT(take_all(&r, T0 + 101, 100), 1);    /* the wait given is enough */
    ratelimit_init(&r, 2, T0);
    CHECK_EQ_INT(take_all(&r, T0, 100), 2);
    CHECK_EQ_INT(ratelimit_wait_ms(&r, T0), 501);
    CHECK_EQ_INT(take_all(&r, T0 + 500, 100), 1);
}

static void no_limit_at_rate_0(void)
{
    struct ratelimit r;

    ratelimit_init(&r, 0, T0);
    CHECK_EQ_INT(take_all(&r, T0, 100000), 100000);
    CHECK_EQ_INT(ratelimit_wait_ms(&r, T0), 0);
    CHECK_EQ_INT(ratelimit_grow(&r, T0 + 10 * RATELIMIT_STEP_MS), 0);
    CHECK_EQ_INT(take_all(&r, T0 + 10 * RATELIMIT_STEP_MS, 1000), 1000);
}

/* The 429s of calls started together are one signal: one halving a step. */
static void halves_once_a_step(void)
{
    struct ratelimit r;

    ratelimit_init(&r, 100, T0);
    CHECK_EQ_INT(ratelimit_halve(&r, T0), 1);
    CHECK(r.rate == 50);
    CHECK_EQ_INT(take_all(&r, T0, 1000), 50);      /* the bucket shrinks with the rate */
    CHECK_EQ_INT(ratelimit_halve(&r, T0 + 1), 0);
    CHECK_EQ_INT(ratelimit_halve(&r, T0 + RATELIMIT_STEP_MS - 1), 0);
    CHECK(r.rate == 50);
    CHECK_EQ_INT(ratelimit_halve(&r, T0 + RATELIMIT_STEP_MS), 1);
    CHECK(r.rate == 25);
}

/* Never below an eighth of the configured rate, nor below a few calls a second, nor above the
 * configured rate: slowed, never starved. */
static void halves_to_a_floor(void)
{
    struct ratelimit r;
    int64_t t = T0;

    ratelimit_init(&r, 200, T0);
    for (double want = 100; want >= 25; want /= 2) {
        CHECK_EQ_INT(ratelimit_halve(&r, t), 1);
        CHECK(r.rate == want);
        t += RATELIMIT_STEP_MS;
    }
    CHECK_EQ_INT(ratelimit_halve(&r, t), 1);
    CHECK(r.rate == 25);   /* 200 / 8 */
    ratelimit_init(&r, 12, T0);
    CHECK_EQ_INT(ratelimit_halve(&r, t), 1);
    CHECK(r.rate == 6);
    CHECK_EQ_INT(ratelimit_halve(&r, t += RATELIMIT_STEP_MS), 1);
    CHECK(r.rate == RATELIMIT_FLOOR);
    ratelimit_init(&r, 3, T0);   /* below the floor: it stays as configured */
    CHECK_EQ_INT(ratelimit_halve(&r, t), 1);
    CHECK(r.rate == 3);
    CHECK_EQ_INT(take_all(&r, t += 10 * RATELIMIT_STEP_MS, 100), 3);
}

/* Doubled each quiet step, a step after the last push-back, up to the configured rate
 * exactly: back within seconds of answers coming back. */
static void grows_back_to_the_limit(void)
{
    struct ratelimit r;
    int64_t t = T0;

    ratelimit_init(&r, 100, T0);
    CHECK_EQ_INT(ratelimit_halve(&r, t), 1);
    CHECK_EQ_INT(ratelimit_grow(&r, t + 800), 0);
    CHECK(r.rate == 50);
    CHECK_EQ_INT(ratelimit_halve(&r, t + 900), 0);  /* not halved again, but not quiet */
    CHECK_EQ_INT(ratelimit_grow(&r, t + RATELIMIT_STEP_MS), 0);
    CHECK_EQ_INT(ratelimit_grow(&r, t + 900 + RATELIMIT_STEP_MS - 1), 0);
    CHECK(r.rate == 50);
    t += 900 + RATELIMIT_STEP_MS;
    CHECK_EQ_INT(ratelimit_halve(&r, t - RATELIMIT_STEP_MS + 1), 0);
    CHECK_EQ_INT(ratelimit_halve(&r, t), 1);   /* a second push-back, a step later */
    CHECK(r.rate == 25);
    t += RATELIMIT_STEP_MS;
    CHECK_EQ_INT(ratelimit_grow(&r, t), 0);
    CHECK(r.rate == 50);
    CHECK_EQ_INT(ratelimit_grow(&r, t + RATELIMIT_STEP_MS - 1), 0);   /* once a step */
    CHECK(r.rate == 50);
    CHECK_EQ_INT(steps_to_recover(&r, &t, 100), 1);
    CHECK(r.rate == 100);
    CHECK_EQ_INT(ratelimit_grow(&r, t + 10 * RATELIMIT_STEP_MS), 0);
    CHECK(r.rate == 100);
    CHECK_EQ_INT(take_all(&r, t + 10 * RATELIMIT_STEP_MS, 1000), 100);
}

/* An endpoint with no configured rate is limited to half the rate it was called at when it
 * pushes back, and is unlimited again once the rate has grown past twice that: two steps. */
static void unlimited_again_without_a_limit(void)
{
    struct ratelimit r;
    int64_t t = T0;

    busy_second(&r, 40);
    t = T0 + RATELIMIT_STEP_MS;
    CHECK_EQ_INT(ratelimit_halve(&r, t), 1);
    CHECK(r.rate == 20);
    CHECK_EQ_INT(ratelimit_take(&r, t), 0);    /* an empty bucket: it just pushed back */
    CHECK_EQ_INT(ratelimit_wait_ms(&r, t), 51);
    /* 20 * 2^n >= 80 (twice the 40/s seen): n = 2 */
    CHECK_EQ_INT(steps_to_recover(&r, &t, 100), 2);
    CHECK(r.rate == 0);
    CHECK_EQ_INT(take_all(&r, t, 100000), 100000);
}

/* Calls of the current second count when more than the last whole second's. */
static void halves_from_the_calls_seen(void)
{
    struct ratelimit r;

    ratelimit_init(&r, 0, T0);
    for (int i = 0; i < 30; i++)
        ratelimit_observe(&r, T0 + i);
    CHECK_EQ_INT(ratelimit_halve(&r, T0 + 30), 1);
    CHECK(r.rate == 15);
    ratelimit_init(&r, 0, T0);
    CHECK_EQ_INT(ratelimit_halve(&r, T0), 1);   /* nothing seen: the floor */
    CHECK(r.rate == RATELIMIT_FLOOR);
}

/* A push-back after a quiet moment halves from the most the endpoint took in the last minute,
 * not from the call or two of the moment. */
static void halves_from_the_most_taken_lately(void)
{
    struct ratelimit r;
    int64_t t = T0;

    busy_second(&r, 80);
    t = T0 + RATELIMIT_STEP_MS;
    ratelimit_observe(&r, t += 5000);         /* quiet: one call in 5 s */
    ratelimit_observe(&r, t += 10);
    CHECK_EQ_INT(ratelimit_halve(&r, t), 1);
    CHECK(r.rate == 40);
    busy_second(&r, 80);
    t = T0 + RATELIMIT_STEP_MS;
    ratelimit_observe(&r, t += RATELIMIT_PEAK_MS + 1000);   /* over a minute ago: forgotten */
    CHECK_EQ_INT(ratelimit_halve(&r, t), 1);
    CHECK(r.rate == RATELIMIT_FLOOR);
}

/* A new configured rate replaces what the old one had learnt. */
static void set_forgets_the_adapted_rate(void)
{
    struct ratelimit r;

    ratelimit_init(&r, 100, T0);
    CHECK_EQ_INT(ratelimit_halve(&r, T0), 1);
    ratelimit_set(&r, 200, T0 + 10);
    CHECK(r.rate == 200);
    CHECK_EQ_INT(take_all(&r, T0 + 10, 1000), 200);
    CHECK_EQ_INT(ratelimit_grow(&r, T0 + 10 * RATELIMIT_STEP_MS), 0);
    CHECK(r.rate == 200);
}

void unit_ratelimit(void)
{
    RUN(burst);
    RUN(refills_over_time);
    RUN(waits_for_the_next_token);
    RUN(no_limit_at_rate_0);
    RUN(halves_once_a_step);
    RUN(halves_to_a_floor);
    RUN(halves_from_the_most_taken_lately);
    RUN(grows_back_to_the_limit);
    RUN(unlimited_again_without_a_limit);
    RUN(halves_from_the_calls_seen);
    RUN(set_forgets_the_adapted_rate);
}

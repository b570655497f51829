/* callplan: what a callback's call comes to. */
#include <stdio.h>

#include "core/callplan.h"
#include "unit.h"

static const struct config_call_retry rules = { .min_backoff_ms = 1000, .max_backoff_ms = 60000,
                                                .max_attempts = 5,
                                                .max_retry_duration_ms = 3600000 };

static enum callplan_action decide(int status, const char *error, int transient, int attempts,
                                   int64_t retry_after_ms, uint32_t random, int64_t *at,
                                   char *why, size_t whylen)
{
    struct callplan_facts f = { .status = status, .error = error, .transient = transient,
                                .retry_after_ms = retry_after_ms, .attempts = attempts,
                                .first_ms = 1000000, .now_ms = 1000000 + attempts * 1000,
                                .random = random };

    return callplan_decide(&f, &rules, at, why, whylen);
}

static void success_is_done(void)
{
    char why[256];
    int64_t at = 0;

    CHECK_EQ_INT(decide(200, NULL, 0, 1, -1, 0, &at, why, sizeof(why)), CALL_DONE);
    CHECK_EQ_INT(decide(204, NULL, 0, 3, -1, 0, &at, why, sizeof(why)), CALL_DONE);
}

static void retried_statuses_and_errors(void)
{
    static const int again[] = { 408, 425, 429, 500, 502, 503, 504, 599 };
    char why[256];
    int64_t at;

    for (size_t i = 0; i < sizeof(again) / sizeof(again[0]); i++) {
        CHECK_EQ_INT(decide(again[i], NULL, 0, 1, -1, 0, &at, why, sizeof(why)), CALL_RETRY);
        CHECK(at >= 1001000 + 1000 && at <= 1001000 + 1500);   /* min_backoff_ms, up to half more */
    }
    CHECK_EQ_INT(decide(0, "connection refused", 1, 1, -1, 0, &at, why, sizeof(why)), CALL_RETRY);
    CHECK_STR(why, "connection refused");
}

static void other_answers_are_dead_at_once(void)
{
    static const int dead[] = { 301, 302, 400, 401, 403, 404, 409, 410, 422 };
    char why[256];
    int64_t at;

    for (size_t i = 0; i < sizeof(dead) / sizeof(dead[0]); i++)
        CHECK_EQ_INT(decide(dead[i], NULL, 0, 1, -1, 0, &at, why, sizeof(why)), CALL_DEAD);
    CHECK_STR(why, "HTTP 422 (not retried)");
    CHECK_EQ_INT(decide(0, "address 10.0.0.1 is private", 0, 1, -1, 0, &at, why, sizeof(why)),
                 CALL_DEAD);
    CHECK_HAS(why, "10.0.0.1");
}

static void backoff_doubles_with_jitter_and_is_capped(void)
{
    char why[256];
    int64_t at, prev_max = 0;

    for (int n = 1; n <= 4; n++) {
        int64_t now = 1000000 + n * 1000, lo, hi;
        CHECK_EQ_INT(decide(500, NULL, 0, n, -1, 0, &at, why, sizeof(why)), CALL_RETRY);
        lo = at - now;
        CHECK_EQ_INT(decide(500, NULL, 0, n, -1, UINT32_MAX, &at, why, sizeof(why)), CALL_RETRY);
        hi = at - now;
        CHECK_EQ_INT(lo, 1000LL << (n - 1));   /* never sooner than the plan */
        CHECK(hi >= lo && hi <= (1000LL << (n - 1)) * 3 / 2);
        CHECK(lo >= prev_max * 2 / 3);
        prev_max = hi;
    }
}

static void retry_after_wins_when_longer_capped(void)
{
    char why[256];
    int64_t at;

    CHECK_EQ_INT(decide(503, NULL, 0, 1, 2000, 0, &at, why, sizeof(why)), CALL_RETRY);
    CHECK_EQ_INT(at - 1001000, 2000);
    CHECK_EQ_INT(decide(429, NULL, 0, 1, 3600000, 0, &at, why, sizeof(why)), CALL_RETRY);
    CHECK_EQ_INT(at - 1001000, 60000);   /* max_backoff_ms */
    CHECK_EQ_INT(decide(503, NULL, 0, 1, 10, 0, &at, why, sizeof(why)), CALL_RETRY);
    CHECK(at - 1001000 >= 1000);         /* a shorter one does not hurry the backoff */
}

static void attempts_and_duration_end_retries(void)
{
    struct config_call_retry r = rules;
    struct callplan_facts f = { .status = 500, .retry_after_ms = -1, .attempts = 2,
                                .first_ms = 0, .now_ms = 3599500 };
    char why[256];
    int64_t at;

    CHECK_EQ_INT(decide(500, NULL, 0, 5, -1, 0, &at, why, sizeof(why)), CALL_DEAD);
    CHECK_STR(why, "gave up after 5 attempts: HTTP 500");
    CHECK_EQ_INT(callplan_decide(&f, &r, &at, why, sizeof(why)), CALL_DEAD);
    CHECK_HAS(why, "max_retry_duration_ms");
}

static void a_job_may_only_lower_the_rules(void)
{
    struct job_callback cb = { .max_attempts = 3, .min_backoff_ms = 5000, .max_backoff_ms = 999999 };
    struct config_call_retry r = callplan_rules(&rules, &cb);

    CHECK_EQ_INT(r.max_attempts, 3);
    CHECK_EQ_INT(r.min_backoff_ms, 1000);
    CHECK_EQ_INT(r.max_backoff_ms, 60000);
    CHECK_EQ_INT(r.max_retry_duration_ms, 3600000);
    cb = (struct job_callback){ .min_backoff_ms = 200, .max_backoff_ms = 100 };
    r = callplan_rules(&rules, &cb);
    CHECK_EQ_INT(r.min_backoff_ms, 200);
    CHECK_EQ_INT(r.max_backoff_ms, 200);
}

/* A call not made because its endpoint was busy comes back after the endpoint's estimate,
 * within the backoff bounds, whatever its attempts. */
static void deferred_calls_wait_without_an_attempt(void)
{
    struct callplan_facts f = { .deferred = 1, .error = "not called: busy", .retry_after_ms = 8000,
                                .attempts = 5, .first_ms = 0, .now_ms = 10000000 };
    char why[256];
    int64_t at;

    CHECK_EQ_INT(callplan_decide(&f, &rules, &at, why, sizeof(why)), CALL_RETRY);
    CHECK(at - f.now_ms >= 8000 && at - f.now_ms <= 12000);
    CHECK_STR(why, "not called: busy");
    f.retry_after_ms = 10;
    f.random = UINT32_MAX;
    CHECK_EQ_INT(callplan_decide(&f, &rules, &at, why, sizeof(why)), CALL_RETRY);
    CHECK(at - f.now_ms >= 1000 && at - f.now_ms <= 1500);
    f.retry_after_ms = 3600000;
    CHECK_EQ_INT(callplan_decide(&f, &rules, &at, why, sizeof(why)), CALL_RETRY);
    CHECK(at - f.now_ms <= 90000);   /* max_backoff_ms and half of it */
}

void unit_callplan(void)
{
    RUN(deferred_calls_wait_without_an_attempt);
    RUN(success_is_done);
    RUN(retried_statuses_and_errors);
    RUN(other_answers_are_dead_at_once);
    RUN(backoff_doubles_with_jitter_and_is_capped);
    RUN(retry_after_wins_when_longer_capped);
    RUN(attempts_and_duration_end_retries);
    RUN(a_job_may_only_lower_the_rules);
}

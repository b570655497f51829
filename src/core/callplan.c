/* callplan: the decision after a callback's call. The contract is in include/core/callplan.h. */
#include <stdio.h>

#include "core/callplan.h"

/* The smaller of a config value and a job's (0: the job says nothing). */
static int64_t lower(int64_t cfg, int64_t job)
{
    return job > 0 && job < cfg ? job : cfg;
}

struct config_call_retry callplan_rules(const struct config_call_retry *cfg,
                                        const struct job_callback *cb)
{
    struct config_call_retry r = *cfg;

    r.max_attempts = lower(cfg->max_attempts, cb->max_attempts);
    r.min_backoff_ms = lower(cfg->min_backoff_ms, cb->min_backoff_ms);
    r.max_backoff_ms = lower(cfg->max_backoff_ms, cb->max_backoff_ms);
    r.max_retry_duration_ms = lower(cfg->max_retry_duration_ms, cb->max_retry_duration_ms);
    if (r.max_backoff_ms < r.min_backoff_ms)
        r.max_backoff_ms = r.min_backoff_ms;
    return r;
}

/* A status that may be different when asked again: timeouts, too early, too many, the
 * server's own failures. */
static int retryable(int status)
{
    return status == 408 || status == 425 || status == 429 || (status >= 500 && status <= 599);
}

/* The wait before attempt n + 1: min_backoff_ms doubled per attempt, capped, and up to half of
 * it more, at random (never sooner than the plan, as Cloud Tasks' backoffs; calls that failed
 * together spread out), within the cap; a longer Retry-After wins, capped the same way. */
static int64_t backoff(const struct callplan_facts *f, const struct config_call_retry *r)
{
    int64_t wait = r->min_backoff_ms;

    for (int i = 1; i < f->attempts && wait < r->max_backoff_ms; i++)
        wait *= 2;
    if (wait > r->max_backoff_ms)
        wait = r->max_backoff_ms;
    wait += (int64_t)(f->random % (uint64_t)(wait / 2 + 1));
    if (wait > r->max_backoff_ms)
        wait = r->max_backoff_ms;
    if (f->retry_after_ms > wait)
        wait = f->retry_after_ms < r->max_backoff_ms ? f->retry_after_ms : r->max_backoff_ms;
    return wait;
}

/* A deferred call's wait: the busy endpoint's estimate within the backoff bounds, and up to
 * half more, so that the calls sent back together do not all come back at once. */
static int64_t deferral(const struct callplan_facts *f, const struct config_call_retry *r)
{
    int64_t wait = f->retry_after_ms > r->min_backoff_ms ? f->retry_after_ms : r->min_backoff_ms;

    if (wait > r->max_backoff_ms)
        wait = r->max_backoff_ms;
    return wait + (int64_t)(f->random % (uint64_t)(wait / 2 + 1));
}

enum callplan_action callplan_decide(const struct callplan_facts *f,
                                     const struct config_call_retry *rules, int64_t *at_ms,
                                     char *why, size_t whylen)
{
    char what[300];

    if (f->error)
        snprintf(what, sizeof(what), "%s", f->error);
    else
        snprintf(what, sizeof(what), "HTTP %d", f->status);
    if (f->deferred) {
        *at_ms = f->now_ms + deferral(f, rules);
        snprintf(why, whylen, "%s", what);
        return CALL_RETRY;
    }
    if (!f->error && f->status >= 200 && f->status <= 299) {
        snprintf(why, whylen, "%s", what);
        return CALL_DONE;
    }
    if (f->error ? !f->transient : !retryable(f->status)) {
        snprintf(why, whylen, "%s (not retried)", what);
        return CALL_DEAD;
    }
    if (f->attempts >= rules->max_attempts) {
        snprintf(why, whylen, "gave up after %d attempt%s: %s", f->attempts,
                 f->attempts == 1 ? "" : "s", what);
        return CALL_DEAD;
    }
    *at_ms = f->now_ms + backoff(f, rules);
    if (*at_ms - f->first_ms > rules->max_retry_duration_ms) {
        snprintf(why, whylen, "gave up after %d attempt%s over %lld ms (max_retry_duration_ms): %s",
                 f->attempts, f->attempts == 1 ? "" : "s", (long long)(f->now_ms - f->first_ms), what);
        return CALL_DEAD;
    }
    snprintf(why, whylen, "%s", what);
    return CALL_RETRY;
}

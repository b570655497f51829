/* callplan: what becomes of a callback job after a call: delivered, called again at a time, or
 * dead-lettered, and why in words. Retried: no answer (connection failed, timed out), 408, 425,
 * 429 and 5xx, after an exponential backoff with jitter, or the answer's Retry-After when longer
 * (both capped at max_backoff_ms), while attempts and max_retry_duration_ms allow. Every other
 * answer but 2xx (3xx unfollowed, other 4xx) and a refused address go to the dead letters at
 * once: calling again would only repeat them. A call deferred because its endpoint was busy
 * is planned again after the endpoint's estimate (between min_backoff_ms and max_backoff_ms,
 * up to half more at random), whatever its attempts. Pure logic. */
#ifndef DQ_CALLPLAN_H
#define DQ_CALLPLAN_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/job.h"

enum callplan_action { CALL_DONE, CALL_RETRY, CALL_DEAD };

/* How a call ended, as callbacks.h reports it. */
struct callplan_facts {
    int status;                  /* HTTP status; 0 when none came */
    int transient;               /* no answer, and one may come later (connect, timeout) */
    int deferred;                /* not called: the endpoint was busy (no attempt counted; it
                                  * is called again after retry_after_ms at least) */
    const char *error;           /* why no answer came, in words; NULL when one did */
    int64_t retry_after_ms;      /* the answer's Retry-After; -1 none */
    int attempts;                /* calls made, this one included */
    int64_t first_ms;            /* epoch ms of the first call */
    int64_t now_ms;
    uint32_t random;             /* any random value: the jitter */
};

/* The retry rules of a job: callbacks.retry, each lowered where the job asks for less. */
struct config_call_retry callplan_rules(const struct config_call_retry *cfg,
                                        const struct job_callback *cb);

/* What to do; for CALL_RETRY the epoch ms to call again at in *at_ms. why (NUL-terminated)
 * says what happened, for the record and the dead letter: "HTTP 503", "HTTP 400 (not retried)",
 * "gave up after 10 attempts: HTTP 500", ... */
enum callplan_action callplan_decide(const struct callplan_facts *f,
                                     const struct config_call_retry *rules, int64_t *at_ms,
                                     char *why, size_t whylen);

#endif

/* ratelimit: how fast one callback endpoint may be called. A token bucket holds the calls that
 * may start now (a second's worth, at least one); its rate is the configured one, halves when
 * the endpoint pushes back (the caller says when: a 429 or 503), at most once a step and never
 * below a floor (a few calls a second, or an eighth of the configured rate), and doubles each
 * quiet step back to the configured rate, or to no limit for an endpoint that has none: a
 * push-back slows an endpoint for seconds, never starves it. An endpoint without a configured
 * rate is unlimited until it pushes back; it is then limited to half the most it was seen to
 * take in the last minute, not to half of what a quiet moment asked of it.
 * Pure logic: every operation takes the time, now_ms, from a monotonic clock (positive, never
 * going back), so that tests drive the clock. Not thread-safe: one owner. */
#ifndef DQ_RATELIMIT_H
#define DQ_RATELIMIT_H

#include <stdint.h>

#define RATELIMIT_STEP_MS 1000   /* the rate halves at most once a step (the 429s of calls
                                  * started together are one signal) and grows once a step */
#define RATELIMIT_GROWTH 2.0     /* growth per quiet step */
#define RATELIMIT_FLOOR 5.0      /* calls/s: the rate never halves below this, nor below an
                                  * eighth of the configured rate (nor above that rate) */
#define RATELIMIT_PEAK_MS 60000  /* the most calls a second seen is remembered this long */
#define RATELIMIT_UNLIMIT 2.0    /* an unlimited endpoint is unlimited again once its rate grows
                                  * past this times the rate seen when it pushed back */

struct ratelimit {
    double limit;                /* calls/s configured; 0: no limit */
    double rate;                 /* calls/s now; 0: no limit */
    double tokens;               /* calls that may start now */
    int64_t refilled_ms;         /* when tokens were last counted */
    int adapted;                 /* rate is below limit (or limited though unlimited) */
    double unlimit_above;        /* calls/s: see RATELIMIT_UNLIMIT */
    int64_t throttled_ms;        /* the last push-back; 0: none */
    int64_t halved_ms;           /* the last halving; 0: none */
    int64_t grown_ms;            /* the last growth */
    int64_t window_ms;           /* the start of the current second of the observed rate */
    unsigned window_calls;       /* calls started in it */
    double observed;             /* calls/s started in the last whole window */
    double peak;                 /* the most calls/s of a whole window lately */
    int64_t peak_ms;             /* when it was seen */
};

/* A new limit of per_s calls/s (0: none), its bucket full. */
void ratelimit_init(struct ratelimit *r, double per_s, int64_t now_ms);

/* Sets the configured rate to per_s (0: none) and forgets what the old one had learnt; the rate
 * observed and the time of the last halving stay. */
void ratelimit_set(struct ratelimit *r, double per_s, int64_t now_ms);

/* 1 and a token taken when a call may start now, else 0. Always 1 without a limit. */
int ratelimit_take(struct ratelimit *r, int64_t now_ms);

/* ms until the next token comes; 0 when one is there, or without a limit. */
int64_t ratelimit_wait_ms(const struct ratelimit *r, int64_t now_ms);

/* Counts a call started: the rate an unlimited endpoint halves from. */
void ratelimit_observe(struct ratelimit *r, int64_t now_ms);

/* The endpoint pushed back: halves the rate (to the floor at least) unless it was halved less
 * than a step ago. 1 when it halved, else 0. */
int ratelimit_halve(struct ratelimit *r, int64_t now_ms);

/* Grows the rate once a step, a step after the last push-back. 1 when it is back to the
 * configured rate (or no limit) by this call, else 0. */
int ratelimit_grow(struct ratelimit *r, int64_t now_ms);

#endif

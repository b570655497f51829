/* endpoint: the endpoints of callbacks.c, each a URL's "scheme://host:port" with its own limits
 * (callbacks.limits, or those of the callbacks.endpoints entry a call names), its calls in
 * flight, its rate (a token bucket whose rate halves on 429 and 503 and grows back while calls
 * succeed), its queue of transfers and how long its calls take, so that a slow or dead endpoint
 * holds back only its own calls. callbacks.c asks it which call may start and tells it how
 * each ended; it makes no call itself. Runs on callbacks.c's thread only. */
#ifndef DQ_ENDPOINT_H
#define DQ_ENDPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "callback/callbacks.h"
#include "core/config.h"
#include "lib/ratelimit.h"

struct transfer;

/* An endpoint (a named one of the config, or the URLs of one scheme://host:port): its queue
 * and what limits its calls. */
struct endpoint {
    struct endpoint *next;
    char origin[CB_ENDPOINT_MAX];  /* its name: a named endpoint's, or the URLs' origin */
    int named;                     /* whose limits: a callbacks.endpoints index, or -1 */
    struct config_call_limits lim; /* resolved: no zero timeout or concurrency */
    struct transfer *queue, **queue_tail;
    int64_t in_flight;             /* calls started and not finished */
    int64_t queued;                /* calls in queue */
    double took_ms;                /* how long its calls take (a moving average); 0 before one */
    int64_t oldest_ms;             /* monotonic: when its oldest call in flight started; 0: none
                                    * (callbacks.c sets it each round) */
    int64_t used_ms;               /* monotonic: the last call routed or finished */
    struct ratelimit rate;         /* lim.rate_per_s, adapted; on the monotonic clock */
};

/* The endpoints of one engine, made on first use. */
struct endpoints {
    const struct config *cfg;
    struct endpoint *list;
    size_t n;
    int64_t pruned_ms;             /* monotonic: the last prune */
};

/* An empty set for cfg (not owned, must outlive it). */
void endpoints_init(struct endpoints *eps, const struct config *cfg);

/* Frees every endpoint and the transfers in their queues; an endpoint's in-flight gauge is set
 * back to 0 (the transfers in flight are the caller's to free). */
void endpoints_release(struct endpoints *eps);

/* The endpoint called name, made on first use; NULL out of memory. name is a named endpoint's
 * (named: its callbacks.endpoints index), with that endpoint's limits, or, named -1, a URL's
 * origin, with the default limits: each named endpoint has its own queue, even where two share
 * an origin, and the URLs of one origin share theirs. now: monotonic ms. */
struct endpoint *endpoints_get(struct endpoints *eps, const char *name, int named, int64_t now);

/* Above 1024 endpoints, drops those idle for 60 s (looked at once a second at most; an
 * endpoint dropped forgets what its rate had learnt). now: monotonic ms. */
void endpoints_prune(struct endpoints *eps, int64_t now);

#define ENDPOINT_QUEUE_PER_CALL 32  /* an endpoint queues 32 calls per call it may have in
                                     * flight at most, however fast its calls are */

/* How long a call of ep takes, as far as is known at now: the average of its recent calls, or
 * the age of its oldest call in flight when that is longer (a dying endpoint shows at once,
 * before its calls time out). */
int64_t endpoint_call_ms(const struct endpoint *ep, int64_t now);

/* How long a call queued now would wait for its turn at ep (ms), at endpoint_call_ms; 0 while
 * it has room. */
int64_t endpoint_wait_ms(const struct endpoint *ep, int64_t now);

/* 1 when ep's queue holds ENDPOINT_QUEUE_PER_CALL calls per call it may have in flight. */
int endpoint_queue_full(const struct endpoint *ep);

/* Takes out of ep's queue the calls that would now wait for their turn longer than bound_ms
 * (the queue's end, past the first that would not), into a list (NULL: none), and the wait of
 * the first of them into *wait_ms. */
struct transfer *endpoint_overdue(struct endpoint *ep, int64_t now, int64_t bound_ms,
                                  int64_t *wait_ms);

/* Appends t to ep's queue (t is ep's until endpoint_next hands it back). now: monotonic ms. */
void endpoint_push(struct endpoint *ep, struct transfer *t, int64_t now);

/* The next transfer of ep's queue when its concurrency and its rate let one start now (a token
 * is taken), else NULL. The caller starts it and tells endpoint_started, or fails it. */
struct transfer *endpoint_next(struct endpoint *ep, int64_t now);

/* ms until the token of ep's next queued transfer comes, or -1 when none waits for a token (an
 * empty queue, or no room for another call). */
int64_t endpoint_token_ms(const struct endpoint *ep, int64_t now);

/* A call of ep started (counted in flight and in its observed rate). */
void endpoint_started(struct endpoint *ep, int64_t now);

/* A call of ep ended with status (0: no answer) after took_ms: counted, timed and, on 429 or 503,
 * its rate halved. */
void endpoint_finished(struct endpoint *ep, int status, int64_t took_ms, int64_t now);

/* Each quiet step, ep's rate grows back towards its limit (or no limit). */
void endpoint_grow(struct endpoint *ep, int64_t now);

#endif

/* endpoint: the endpoints of callbacks.c, their limits, queues and rates. The contract is in
 * include/callback/endpoint.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callback/endpoint.h"
#include "callback/transfer.h"
#include "core/metrics.h"
#include "lib/log.h"

#define LOG_MODULE "callbacks"
#define TIMEOUT_DEFAULT_MS 30000   /* when no timeout is configured: a stalled endpoint must not
                                    * hold its slots for ever */
#define CONCURRENCY_DEFAULT 16     /* when no max_concurrency is configured */
#define ENDPOINTS_KEEP 1024        /* above this many endpoints, idle ones are dropped */
#define ENDPOINT_IDLE_MS 60000     /* ... once idle this long (their rate state is lost) */
#define PRUNE_EVERY_MS 1000

/* ---- limits ---- */

static struct config_call_limits limits_of(const struct config *cfg, int named)
{
    struct config_call_limits l = cfg->callbacks.limits;

    if (named >= 0) {
        const struct config_call_limits *own = &cfg->callbacks.endpoints[named].limits;

        l.timeout_ms = own->timeout_ms > 0 ? own->timeout_ms : l.timeout_ms;
        l.max_concurrency = own->max_concurrency > 0 ? own->max_concurrency : l.max_concurrency;
        l.rate_per_s = own->rate_per_s > 0 ? own->rate_per_s : l.rate_per_s;
    }
    l.timeout_ms = l.timeout_ms > 0 ? l.timeout_ms : TIMEOUT_DEFAULT_MS;
    l.max_concurrency = l.max_concurrency > 0 ? l.max_concurrency : CONCURRENCY_DEFAULT;
    l.rate_per_s = l.rate_per_s > 0 ? l.rate_per_s : 0;
    return l;
}

/* Sets ep's limits (and forgets what the old rate had learnt). */
static void endpoint_limit(struct endpoint *ep, const struct config *cfg, int named, int64_t now)
{
    ep->named = named;
    ep->lim = limits_of(cfg, named);
    ratelimit_set(&ep->rate, (double)ep->lim.rate_per_s, now);
}

/* A 429 or 503: the endpoint asks for fewer calls. */
static void endpoint_throttled(struct endpoint *ep, int status, int64_t now)
{
    if (ratelimit_halve(&ep->rate, now))
        log_info("endpoint=%s answered %d: rate lowered to %.1f calls/s", ep->origin, status,
                 ep->rate.rate);
}

void endpoint_grow(struct endpoint *ep, int64_t now)
{
    if (ratelimit_grow(&ep->rate, now))
        log_info("endpoint=%s rate back to %s", ep->origin,
                 ep->rate.rate > 0 ? "its limit" : "no limit");
}

static void in_flight_add(struct endpoint *ep, int64_t n)
{
    ep->in_flight += n;
    metrics_call_in_flight(ep->origin, ep->in_flight);
}

static int has_room(const struct endpoint *ep)
{
    return ep->in_flight < ep->lim.max_concurrency;
}

void endpoint_started(struct endpoint *ep, int64_t now)
{
    ratelimit_observe(&ep->rate, now);
    in_flight_add(ep, 1);
}

void endpoint_finished(struct endpoint *ep, int status, int64_t took_ms, int64_t now)
{
    ep->used_ms = now;
    in_flight_add(ep, -1);
    /* a moving average over about the last 16 calls: how soon a queued call gets its turn */
    ep->took_ms = ep->took_ms > 0 ? ep->took_ms + ((double)took_ms - ep->took_ms) / 16
                                  : (double)took_ms + 1;
    metrics_call(ep->origin, status, (double)took_ms / 1000.0);
    if (status == 429 || status == 503)
        endpoint_throttled(ep, status, now);
}

/* ---- the queue ---- */

int64_t endpoint_call_ms(const struct endpoint *ep, int64_t now)
{
    int64_t age = ep->in_flight > 0 && ep->oldest_ms ? now - ep->oldest_ms : 0;

    return age > (int64_t)ep->took_ms ? age : (int64_t)ep->took_ms;
}

/* The wait of the call at position i of ep's queue (0: the next to start). */
static int64_t wait_at(const struct endpoint *ep, int64_t i, int64_t call_ms)
{
    return (int64_t)((double)(i + 1) * (double)call_ms / (double)ep->lim.max_concurrency);
}

int64_t endpoint_wait_ms(const struct endpoint *ep, int64_t now)
{
    return has_room(ep) ? 0 : wait_at(ep, ep->queued, endpoint_call_ms(ep, now));
}

int endpoint_queue_full(const struct endpoint *ep)
{
    return ep->queued >= ENDPOINT_QUEUE_PER_CALL * ep->lim.max_concurrency;
}

struct transfer *endpoint_overdue(struct endpoint *ep, int64_t now, int64_t bound_ms,
                                  int64_t *wait_ms)
{
    int64_t call_ms = endpoint_call_ms(ep, now), i = 0;
    struct transfer **at = &ep->queue, *out;

    if (has_room(ep) || !ep->queue)
        return NULL;
    while (*at && wait_at(ep, i, call_ms) <= bound_ms)
        at = &(*at)->next, i++;
    if (!(out = *at))
        return NULL;
    *wait_ms = wait_at(ep, i, call_ms);
    *at = NULL;
    ep->queue_tail = at;
    ep->queued = i;
    return out;
}

void endpoint_push(struct endpoint *ep, struct transfer *t, int64_t now)
{
    ep->queued++;
    t->ep = ep;
    t->next = NULL;
    ep->used_ms = now;
    *ep->queue_tail = t;
    ep->queue_tail = &t->next;
}

struct transfer *endpoint_next(struct endpoint *ep, int64_t now)
{
    struct transfer *t = ep->queue;

    if (!t || !has_room(ep) || !ratelimit_take(&ep->rate, now))
        return NULL;
    if (!(ep->queue = t->next))
        ep->queue_tail = &ep->queue;
    ep->queued--;
    t->next = NULL;
    return t;
}

int64_t endpoint_token_ms(const struct endpoint *ep, int64_t now)
{
    return ep->queue && has_room(ep) ? ratelimit_wait_ms(&ep->rate, now) : -1;
}

/* ---- the set ---- */

void endpoints_init(struct endpoints *eps, const struct config *cfg)
{
    memset(eps, 0, sizeof(*eps));
    eps->cfg = cfg;
}

void endpoints_release(struct endpoints *eps)
{
    for (struct endpoint *ep = eps->list, *next; ep; ep = next) {
        next = ep->next;
        if (ep->in_flight)
            metrics_call_in_flight(ep->origin, 0);
        transfer_list_free(ep->queue);
        free(ep);
    }
    eps->list = NULL;
    eps->n = 0;
}

static struct endpoint *endpoint_find(struct endpoints *eps, const char *origin)
{
    for (struct endpoint *ep = eps->list; ep; ep = ep->next)
        if (strcmp(ep->origin, origin) == 0)
            return ep;
    return NULL;
}

struct endpoint *endpoints_get(struct endpoints *eps, const char *origin, int named, int64_t now)
{
    struct endpoint *ep = endpoint_find(eps, origin);

    if (ep)
        return ep;
    if (!(ep = calloc(1, sizeof(*ep))))
        return NULL;
    snprintf(ep->origin, sizeof(ep->origin), "%s", origin);
    ep->queue_tail = &ep->queue;
    ratelimit_init(&ep->rate, 0, now);   /* its observed rate starts now; the limit is next */
    endpoint_limit(ep, eps->cfg, named, now);
    ep->next = eps->list;
    eps->list = ep;
    eps->n++;
    return ep;
}

void endpoints_prune(struct endpoints *eps, int64_t now)
{
    struct endpoint **p = &eps->list;

    if (eps->n <= ENDPOINTS_KEEP || now - eps->pruned_ms < PRUNE_EVERY_MS)
        return;
    eps->pruned_ms = now;
    while (*p) {
        struct endpoint *ep = *p;

        if (!ep->queue && ep->in_flight == 0 && now - ep->used_ms >= ENDPOINT_IDLE_MS) {
            *p = ep->next;
            eps->n--;
            free(ep);
        } else {
            p = &ep->next;
        }
    }
}

/* callbacks: the HTTP client of callback URLs, one thread on libcurl's multi interface: the
 * calls submitted, routed to their endpoints' queues (endpoint.c), started as their limits
 * allow and their results handed back (each call a transfer.c). The contract is in
 * include/callback/callbacks.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "callback/callbacks.h"
#include "callback/endpoint.h"
#include "callback/transfer.h"
#include "lib/clock.h"
#include "lib/log.h"

#define LOG_MODULE "callbacks"
#define POLL_MAX_MS 100            /* the thread looks at its queues at least this often */

struct callbacks {
    struct transfers all;          /* libcurl's handles, keys and networks every call shares */
    int wake_fd;
    pthread_t thread;
    pthread_mutex_t mu;            /* guards the fields below up to the thread's own */
    struct transfer *inbox, **inbox_tail;
    struct transfer *results, **results_tail;
    size_t pending;                /* submitted, result not taken */
    int stop;
    /* the thread's own: */
    struct endpoints eps;
    struct transfer *flying;       /* in flight, doubly linked */
    struct transfer *done, **done_tail;   /* finished, not yet published */
};

/* ---- the caller's side ---- */

int callbacks_submit(struct callbacks *cb, const struct cb_call *call, char *err, size_t errlen)
{
    struct transfer *t;

    if (strlen(call->url) > CB_URL_MAX) {
        snprintf(err, errlen, "callback url: longer than %d characters", CB_URL_MAX);
        return -1;
    }
    if (!(t = transfer_new(&cb->all, call, err, errlen)))
        return -1;
    pthread_mutex_lock(&cb->mu);
    *cb->inbox_tail = t;
    cb->inbox_tail = &t->next;
    cb->pending++;
    pthread_mutex_unlock(&cb->mu);
    curl_multi_wakeup(cb->all.multi);
    return 0;
}

int callbacks_result(struct callbacks *cb, struct cb_result *out)
{
    struct transfer *t;

    pthread_mutex_lock(&cb->mu);
    if ((t = cb->results)) {
        if (!(cb->results = t->next))
            cb->results_tail = &cb->results;
        cb->pending--;
    }
    pthread_mutex_unlock(&cb->mu);
    if (!t)
        return 0;
    *out = t->res;
    transfer_free(t);
    return 1;
}

size_t callbacks_pending(struct callbacks *cb)
{
    size_t n;

    pthread_mutex_lock(&cb->mu);
    n = cb->pending;
    pthread_mutex_unlock(&cb->mu);
    return n;
}

/* ---- the thread ---- */

static void done_add(struct callbacks *cb, struct transfer *t)
{
    t->next = NULL;
    *cb->done_tail = t;
    cb->done_tail = &t->next;
}

/* A call that could not be made: a result without an answer. */
static void call_fail(struct callbacks *cb, struct transfer *t, enum cb_error e, const char *text)
{
    t->res.error = e;
    snprintf(t->res.error_text, sizeof(t->res.error_text), "%s", text);
    if (e == CB_E_BUSY)   /* one per job sent back while its endpoint is slow: not each logged */
        log_debug("call deferred endpoint=%s: %s", t->res.endpoint, text);
    else
        log_info("call failed endpoint=%s error=%s", t->res.endpoint, text);
    done_add(cb, t);
}

/* When each endpoint's oldest call in flight started. */
static void note_flying(struct callbacks *cb)
{
    for (struct endpoint *ep = cb->eps.list; ep; ep = ep->next)
        ep->oldest_ms = 0;
    for (struct transfer *t = cb->flying; t; t = t->next)
        if (!t->ep->oldest_ms || t->sent_mono_ms < t->ep->oldest_ms)
            t->ep->oldest_ms = t->sent_mono_ms;
}

/* Moves the calls submitted into their endpoints' queues. */
static void route(struct callbacks *cb, struct transfer *t, int64_t now)
{
    char text[CB_ENDPOINT_MAX + 96];
    int64_t wait;

    if (t)
        note_flying(cb);
    while (t) {
        struct transfer *next = t->next;
        struct endpoint *ep = endpoints_get(&cb->eps, t->res.endpoint, t->named, now);

        t->next = NULL;
        if (!ep) {
            call_fail(cb, t, CB_E_INTERNAL, "out of memory");
        } else if ((wait = endpoint_wait_ms(ep, now)) > CB_QUEUE_WAIT_MAX_MS ||
                   endpoint_queue_full(ep)) {
            snprintf(text, sizeof(text), "not called: %s is busy (%lld calls queued, about %lld ms "
                     "of them)", ep->origin, (long long)ep->queued, (long long)wait);
            t->res.retry_after_ms = wait > 0 ? wait : endpoint_call_ms(ep, now);
            call_fail(cb, t, CB_E_BUSY, text);
        } else {
            endpoint_push(ep, t, now);
        }
        t = next;
    }
}

/* Sends t. When it cannot be, it gets its result at once. */
static void call_start(struct callbacks *cb, struct transfer *t, int64_t now)
{
    if (transfer_start(t, t->ep->lim.timeout_ms, now) < 0) {
        call_fail(cb, t, CB_E_INTERNAL, "cannot set the call up (out of memory?)");
        return;
    }
    endpoint_started(t->ep, now);
    if ((t->next = cb->flying))
        cb->flying->prev = t;
    t->prev = NULL;
    cb->flying = t;
}

/* The queued calls of ep that would now wait past CB_QUEUE_WAIT_MAX_MS (its calls in flight
 * have grown old: it is slow or dead) go back to wait in the delay topics at once, not at their
 * turn, so that their messages do not hold their partitions' memory. */
static void defer_overdue(struct callbacks *cb, struct endpoint *ep, int64_t now)
{
    char text[CB_ENDPOINT_MAX + 96];
    int64_t wait = 0, queued = ep->queued;
    struct transfer *t = endpoint_overdue(ep, now, CB_QUEUE_WAIT_MAX_MS, &wait);

    while (t) {
        struct transfer *next = t->next;
        snprintf(text, sizeof(text), "not called: %s is busy (%lld calls queued, about %lld ms "
                 "of them)", ep->origin, (long long)queued, (long long)wait);
        t->res.retry_after_ms = wait;
        call_fail(cb, t, CB_E_BUSY, text);
        t = next;
    }
}


/* Starts what each endpoint's limits allow, and sends back the calls that would wait too long.
 * Returns ms until a waiting call's token comes, POLL_MAX_MS at most, and 0 when a call started
 * (libcurl has work at once). */
static int64_t start_calls(struct callbacks *cb, int64_t now)
{
    int64_t wait = POLL_MAX_MS, w;
    struct transfer *t;

    note_flying(cb);
    for (struct endpoint *ep = cb->eps.list; ep; ep = ep->next) {
        endpoint_grow(ep, now);
        while ((t = endpoint_next(ep, now))) {
            call_start(cb, t, now);
            wait = 0;
        }
        defer_overdue(cb, ep, now);
        if ((w = endpoint_token_ms(ep, now)) >= 0 && w < wait)
            wait = w;
    }
    return wait;
}

/* The end of t's transfer. */
static void call_done(struct callbacks *cb, struct transfer *t, CURLcode rc, int64_t now)
{
    if (transfer_follow(t, rc))
        return;   /* on to its Location: still in flight */
    transfer_finish(t, rc, now);
    if (t->prev)
        t->prev->next = t->next;
    else
        cb->flying = t->next;
    if (t->next)
        t->next->prev = t->prev;
    endpoint_finished(t->ep, t->res.status, t->res.took_ms, now);
    if (t->res.error != CB_E_NONE)
        log_debug("call failed endpoint=%s error=%s", t->ep->origin, t->res.error_text);
    done_add(cb, t);
}

static void finish_calls(struct callbacks *cb, int64_t now)
{
    CURLMsg *m;
    int left;

    while ((m = curl_multi_info_read(cb->all.multi, &left))) {
        struct transfer *t = NULL;

        if (m->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&t);
        call_done(cb, t, m->data.result, now);
    }
}

/* Hands the finished calls to the caller and wakes it. */
static void publish(struct callbacks *cb)
{
    char byte = 1;

    if (!cb->done)
        return;
    pthread_mutex_lock(&cb->mu);
    *cb->results_tail = cb->done;
    cb->results_tail = cb->done_tail;
    pthread_mutex_unlock(&cb->mu);
    cb->done = NULL;
    cb->done_tail = &cb->done;
    if (cb->wake_fd >= 0 && write(cb->wake_fd, &byte, 1) < 0 && errno != EAGAIN &&
        errno != EWOULDBLOCK)
        log_at(LOG_WARN, errno, "cannot wake the caller");
}

/* Takes the calls submitted; 0 when the thread is to stop. */
static int take_inbox(struct callbacks *cb, struct transfer **calls)
{
    int stop;

    pthread_mutex_lock(&cb->mu);
    stop = cb->stop;
    *calls = cb->inbox;
    cb->inbox = NULL;
    cb->inbox_tail = &cb->inbox;
    pthread_mutex_unlock(&cb->mu);
    if (stop)
        transfer_list_free(*calls);
    return !stop;
}

static void *callbacks_main(void *arg)
{
    struct callbacks *cb = arg;
    struct transfer *calls;
    int running;

    while (take_inbox(cb, &calls)) {
        int64_t now = clock_mono_ms(), wait;
        CURLMcode mc;

        route(cb, calls, now);
        if ((mc = curl_multi_perform(cb->all.multi, &running)) != CURLM_OK)
            log_error("curl_multi_perform: %s", curl_multi_strerror(mc));
        now = clock_mono_ms();
        finish_calls(cb, now);
        wait = start_calls(cb, now);
        publish(cb);
        endpoints_prune(&cb->eps, now);
        if ((mc = curl_multi_poll(cb->all.multi, NULL, 0, (int)wait, NULL)) != CURLM_OK)
            log_error("curl_multi_poll: %s", curl_multi_strerror(mc));
    }
    return NULL;
}

/* ---- life ---- */

/* Frees what callbacks_new made; the thread is not running. */
static void callbacks_release(struct callbacks *cb)
{
    transfer_list_free(cb->flying);   /* removes each easy handle before cleaning it up */
    cb->flying = NULL;
    endpoints_release(&cb->eps);
    transfer_list_free(cb->inbox);
    transfer_list_free(cb->results);
    transfer_list_free(cb->done);
    transfers_release(&cb->all);
    free(cb);
}

struct callbacks *callbacks_new(const struct config *cfg, int wake_fd, char *err, size_t errlen)
{
    struct callbacks *cb = calloc(1, sizeof(*cb));

    if (!cb) {
        snprintf(err, errlen, "callbacks: out of memory");
        return NULL;
    }
    cb->wake_fd = wake_fd;
    cb->inbox_tail = &cb->inbox;
    cb->results_tail = &cb->results;
    cb->done_tail = &cb->done;
    endpoints_init(&cb->eps, cfg);
    if (transfers_init(&cb->all, cfg, err, errlen) < 0)
        goto fail;
    pthread_mutex_init(&cb->mu, NULL);
    if (pthread_create(&cb->thread, NULL, callbacks_main, cb) != 0) {
        snprintf(err, errlen, "callbacks: cannot start its thread");
        pthread_mutex_destroy(&cb->mu);
        goto fail;
    }
    return cb;
fail:
    callbacks_release(cb);
    return NULL;
}

void callbacks_free(struct callbacks *cb)
{
    if (!cb)
        return;
    pthread_mutex_lock(&cb->mu);
    cb->stop = 1;
    pthread_mutex_unlock(&cb->mu);
    curl_multi_wakeup(cb->all.multi);
    pthread_join(cb->thread, NULL);
    pthread_mutex_destroy(&cb->mu);
    callbacks_release(cb);
}

/* callbacks: the HTTP client that calls jobs' callback URLs. One thread drives libcurl's multi
 * interface (no thread per call); connections are kept alive per endpoint. An endpoint is a
 * URL's scheme, host and port: each has its own limits (config callbacks.limits, or a named
 * endpoint's), calls in flight at once and calls started per second (a token bucket whose rate
 * halves on 429 and 503 and grows back while calls succeed), and its own queue, so that a slow
 * or dead endpoint holds back only its own calls.
 * Every call is signed when a secret applies (sign.h): the named endpoint's secrets, else
 * callbacks.secrets. Addresses are checked on the socket actually connected to: loopback,
 * private, link-local, multicast and unspecified addresses are refused unless
 * callbacks.allow_private or one of callbacks.networks allows them. Redirects are followed up
 * to callbacks.max_redirects hops (each checked the same way), else a redirect is an answer
 * like another. HTTPS is verified against the system's CA store.
 * The caller submits calls and takes their results from its own thread; the engine never calls
 * back into it: it writes a byte to wake_fd when results wait. */
#ifndef DQ_CALLBACKS_H
#define DQ_CALLBACKS_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/job.h"

#define CB_URL_MAX 2048          /* a callback URL's length at most (browsers' common bound) */
#define CB_RESPONSE_KEEP 512     /* bytes of a response body kept in a result at most */
#define CB_ENDPOINT_MAX 300      /* "scheme://host:port" */
/* A call is not queued for an endpoint whose queue, at the pace of its recent calls, would
 * keep it longer than this: it is handed back at once (CB_E_BUSY) to wait in the delay topics,
 * so that a dead endpoint's backlog is not held in memory, where it would fill the holder's
 * share of a partition and hold the partition's other jobs back. */
#define CB_QUEUE_WAIT_MAX_MS 5000

struct callbacks;

/* One call to make. Everything is copied by callbacks_submit. */
struct cb_call {
    void *ctx;                       /* the caller's, handed back in the result */
    const char *url;                 /* http:// or https:// */
    const char *endpoint;            /* the callbacks.endpoints name the job gave, or NULL:
                                      * its secrets and limits apply */
    int put;                         /* 1: PUT, else POST */
    const struct job_header *headers;   /* the job's own headers, sent as given */
    size_t nheaders;
    const char *body;
    size_t body_len;
    int json;                        /* 1: Content-Type: application/json, unless a header of
                                      * the job sets Content-Type */
    int64_t timeout_ms;              /* the whole call; 0: the endpoint's limits.timeout_ms */
    const char *webhook_id;          /* the same for every attempt of one job */
    int attempt;                     /* 1 for the first call, sent as webhook-attempt */
};

/* Why a call got no HTTP answer. */
enum cb_error {
    CB_E_NONE = 0,     /* an answer came: status says which */
    CB_E_CONNECT,      /* name not resolved, connection refused or reset, TLS failed, or the
                        * answer cut off: inside its headers, or its body short of its
                        * Content-Length (a 2xx status line is not an answer by itself) */
    CB_E_TIMEOUT,      /* no whole answer within the timeout */
    CB_E_ADDRESS,      /* the address connected to is not allowed (private, loopback, ...) */
    CB_E_REDIRECT,     /* more redirects than callbacks.max_redirects */
    CB_E_URL,          /* the URL cannot be called (scheme, syntax) */
    CB_E_INTERNAL,     /* out of memory, or libcurl failed to set the call up */
    CB_E_BUSY,         /* not called: the endpoint's queue would keep it waiting longer than
                        * CB_QUEUE_WAIT_MAX_MS (its calls are slow or time out); retry_after_ms
                        * says about when it has room */
};

struct cb_result {
    void *ctx;
    int status;                      /* HTTP status; 0 when error is not CB_E_NONE */
    enum cb_error error;
    char error_text[256];            /* error in words: libcurl's, or the refused address */
    int64_t retry_after_ms;          /* the answer's Retry-After (seconds or a date) as a wait in
                                      * ms; -1 when it gave none */
    char response[CB_RESPONSE_KEEP + 1];   /* the first bytes of the body, NUL-terminated */
    size_t response_len;
    char endpoint[CB_ENDPOINT_MAX];  /* the endpoint whose queue and limits the call had, for logs
                                      * and metrics: a named endpoint's name, else the URL's
                                      * "scheme://host:port" */
    int64_t sent_ms;                 /* epoch ms when the request went (after its queue wait) */
    int64_t took_ms;                 /* from sent to answer */
};

/* Starts the thread. NULL with err set (a secret that does not parse, libcurl's failure). */
struct callbacks *callbacks_new(const struct config *cfg, int wake_fd, char *err, size_t errlen);

/* Stops the thread; calls not yet answered are dropped without a result (the caller holds their
 * messages unfinished, so they are made again after a restart). */
void callbacks_free(struct callbacks *cb);

/* Queues a call. 0, or -1 with err set when it cannot be queued (out of memory, a URL that does
 * not parse): then no result will come for it. */
int callbacks_submit(struct callbacks *cb, const struct cb_call *call, char *err, size_t errlen);

/* Takes the next result into *out: 1, or 0 when none waits. */
int callbacks_result(struct callbacks *cb, struct cb_result *out);

/* Calls submitted and not yet taken as results. */
size_t callbacks_pending(struct callbacks *cb);

#endif

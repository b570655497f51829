/* transfer: one call of callbacks.c as a libcurl transfer. A transfer copies a cb_call, builds
 * its request (the job's headers and ours, the signature when its call starts), sets its easy
 * handle up on the engine's multi handle, checks each address a socket is opened to (redirect
 * hops included) and, at its end, turns what libcurl says into its cb_result. What all transfers
 * of one engine share (libcurl's handles, the signing keys, the networks allowed) is a struct
 * transfers. Runs on callbacks.c's thread, except transfer_new and transfer_free, which any
 * thread may call on a transfer no other thread holds. */
#ifndef DQ_TRANSFER_H
#define DQ_TRANSFER_H

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "callback/callbacks.h"
#include "core/config.h"
#include "lib/netaddr.h"
#include "lib/sign.h"

struct endpoint;

/* Keys of a named endpoint. */
struct transfer_keys {
    struct sign_key k[CONFIG_SECRETS_MAX];
    size_t n;
};

/* What every transfer of one engine shares. */
struct transfers {
    const struct config *cfg;
    CURLM *multi;                  /* every transfer in flight, driven by the engine's thread */
    CURLSH *share;                 /* TLS sessions and DNS, for all calls (one thread: no locks) */
    struct sign_key keys[CONFIG_SECRETS_MAX];   /* callbacks.secrets */
    size_t nkeys;
    struct transfer_keys *named_keys;   /* per callbacks.endpoints */
    struct netaddr_net nets[CONFIG_NETWORKS_MAX];   /* callbacks.networks */
    int nnets;
};

/* A call from callbacks_submit to callbacks_result: in the engine's inbox, then its endpoint's
 * queue, in flight, then the results; in one list at a time, linked through next. */
struct transfer {
    struct transfer *next, *prev;  /* prev: in flight only */
    const struct transfers *all;
    struct endpoint *ep;           /* set when routed (the engine's) */
    char *url;
    int named;                     /* index of the callbacks.endpoints named, or -1 */
    const struct sign_key *keys;   /* all's; n 0: unsigned */
    size_t nkeys;
    int put;
    char *body;                    /* body_len bytes and a NUL; libcurl reads it in place */
    size_t body_len;
    char *webhook_id;
    struct curl_slist *headers;    /* the job's and ours; the timestamp and signature are added
                                    * when the call starts */
    int64_t timeout_ms;            /* 0: the endpoint's */
    CURL *easy;                    /* while in flight */
    char errbuf[CURL_ERROR_SIZE];
    char refused[256];             /* "" or why an address was refused (error_text's size) */
    int64_t received;              /* response body bytes so far */
    int hops;                      /* redirects followed */
    int njob_headers;              /* the job's own headers, first in headers */
    char redirect_refused[256];    /* "" or why a redirect was not followed */
    int cut;                       /* the body passed max_response_bytes: reading stopped */
    int head_whole;                /* the last answer's headers ended (their empty line came) */
    int64_t sent_mono_ms;
    char origin[CB_ENDPOINT_MAX];  /* "scheme://host:port" of the URL first called */
    struct cb_result res;          /* filled as it goes; res.endpoint is the endpoint's name */
};

/* Sets all up for cfg (not owned, must outlive it): libcurl's global state once per process,
 * its multi and share handles, the signing secrets and the networks of callbacks. 0, or -1 with
 * err set (a secret or network that does not parse, libcurl's failure, out of memory); then
 * transfers_release frees what was made. */
int transfers_init(struct transfers *all, const struct config *cfg, char *err, size_t errlen);

/* Frees what transfers_init made. Every transfer of all is freed before. */
void transfers_release(struct transfers *all);

/* A copy of call (everything copied) with its request headers, or NULL with err set (out of
 * memory, a URL that does not parse or whose scheme is not http or https). Caller frees it with
 * transfer_free. */
struct transfer *transfer_new(const struct transfers *all, const struct cb_call *call,
                              char *err, size_t errlen);

/* Frees t, removing its easy handle from the multi handle when it is in flight. */
void transfer_free(struct transfer *t);

/* Frees t and each transfer after it through next. */
void transfer_list_free(struct transfer *t);

/* Starts t on all's multi handle: stamps and signs it at the wall clock's time, sets its easy
 * handle up with timeout_ms (the whole call, ms) unless the call gave its own, and sets
 * res.sent_ms and sent_mono_ms (now: monotonic ms). 0, or -1 when libcurl failed (out of
 * memory): then t holds no easy handle. */
int transfer_start(struct transfer *t, int64_t timeout_ms, int64_t now);

/* After libcurl reported rc for t: when its answer is a redirect that callbacks.max_redirects
 * and callbacks.redirect_across_origins let it follow, t is sent on to the Location (same method
 * and body; to another origin without the job's own headers) and stays in flight: 1. Else 0:
 * transfer_finish ends it (a redirect not followed is then CB_E_REDIRECT with why). */
int transfer_follow(struct transfer *t, CURLcode rc);

/* Ends t after libcurl reported rc for it: fills res (status and Retry-After, or the error and
 * its text), res.took_ms up to now (monotonic ms), and frees its easy handle. */
void transfer_finish(struct transfer *t, CURLcode rc, int64_t now);

#endif

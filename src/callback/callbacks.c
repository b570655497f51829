/* callbacks: the HTTP client of callback URLs, one thread on libcurl's multi interface. The
 * contract is in include/callback/callbacks.h. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "callback/callbacks.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "lib/netaddr.h"
#include "lib/ratelimit.h"
#include "lib/sign.h"

#define LOG_MODULE "callbacks"
#define POLL_MAX_MS 100            /* the thread looks at its queues at least this often */
#define CONNECT_TIMEOUT_MAX_MS 10000   /* a host that completes no handshake in 10 s is down,
                                        * however long its calls may work */
#define TIMEOUT_DEFAULT_MS 30000   /* when no timeout is configured: a stalled endpoint must not
                                    * hold its slots for ever */
#define CONCURRENCY_DEFAULT 16     /* when no max_concurrency is configured */
#define MAXCONNECTS 256            /* connections kept alive, all endpoints together */
#define ENDPOINTS_KEEP 1024        /* above this many endpoints, idle ones are dropped */
#define ENDPOINT_IDLE_MS 60000     /* ... once idle this long (their rate state is lost) */
#define REFUSED_HINT "(callbacks.allow_private or callbacks.networks allow it)"

_Static_assert(CONFIG_SECRETS_MAX <= SIGN_KEYS_MAX, "every configured secret signs a call");

/* Keys of a named endpoint. */
struct named_keys {
    struct sign_key k[CONFIG_SECRETS_MAX];
    size_t n;
};

/* A call from callbacks_submit to callbacks_result: in the inbox, then its endpoint's queue,
 * in flight, then the results. */
struct call {
    struct call *next, *prev;      /* prev: in flight only */
    struct callbacks *cb;
    struct endpoint *ep;           /* set when routed */
    char *url;
    int named;                     /* index of the callbacks.endpoints named, or -1 */
    const struct sign_key *keys;   /* cb's; n 0: unsigned */
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
    int cut;                       /* the body passed max_response_bytes: reading stopped */
    int64_t sent_mono_ms;
    struct cb_result res;          /* filled as it goes */
};

/* A scheme://host:port and what limits its calls. The thread's own. */
struct endpoint {
    struct endpoint *next;
    char origin[CB_ENDPOINT_MAX];
    int named;                     /* whose limits: a callbacks.endpoints index, or -1 */
    struct config_call_limits lim; /* resolved: no zero timeout or concurrency */
    struct call *queue, **queue_tail;
    int64_t in_flight;
    int64_t queued;                /* calls in queue */
    double took_ms;                /* how long its calls take (a moving average); 0 before one */
    int64_t used_ms;               /* monotonic: the last call routed or finished */
    struct ratelimit rate;         /* lim.rate_per_s, adapted; on the monotonic clock */
};

struct callbacks {
    const struct config *cfg;
    int wake_fd;
    CURLM *multi;
    CURLSH *share;                 /* TLS sessions and DNS, for all calls (one thread: no locks) */
    struct sign_key keys[CONFIG_SECRETS_MAX];
    size_t nkeys;
    struct named_keys *named_keys; /* per callbacks.endpoints */
    struct netaddr_net nets[CONFIG_NETWORKS_MAX];
    int nnets;
    pthread_t thread;
    pthread_mutex_t mu;            /* guards the fields below up to the thread's own */
    struct call *inbox, **inbox_tail;
    struct call *results, **results_tail;
    size_t pending;                /* submitted, result not taken */
    int stop;
    /* the thread's own: */
    struct endpoint *endpoints;
    size_t nendpoints;
    struct call *flying;           /* in flight, doubly linked */
    struct call *done, **done_tail;   /* finished, not yet published */
    int64_t pruned_ms;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

/* ---- addresses ---- */

/* Why the open-socket check refuses ip, or NULL when it may be called. */
static const char *address_refused(const struct callbacks *cb, const struct netaddr *ip)
{
    const char *why;

    if (cb->cfg->callbacks.allow_private || !(why = netaddr_class(ip)))
        return NULL;
    for (int i = 0; i < cb->nnets; i++)
        if (netaddr_net_contains(&cb->nets[i], ip))
            return NULL;
    return why;
}

/* ---- urls ---- */

/* The host of the URL c is calling now (after redirects) into out, for messages. */
static void current_host(struct call *c, char *out, size_t outlen)
{
    char *url = NULL, *host = NULL;
    CURLU *u;

    snprintf(out, outlen, "?");
    if (curl_easy_getinfo(c->easy, CURLINFO_EFFECTIVE_URL, &url) != CURLE_OK || !url ||
        !(u = curl_url()))
        return;
    if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK)
        snprintf(out, outlen, "%s", host);
    curl_free(host);
    curl_url_cleanup(u);
}

static int scheme_ok(const char *scheme)
{
    return strcmp(scheme, "http") == 0 || strcmp(scheme, "https") == 0;
}

/* "scheme://host:port" of url (the host in lower case) into out. 0, or -1 with err. */
static int origin_of(const char *url, char *out, size_t outlen, char *err, size_t errlen)
{
    char *scheme = NULL, *host = NULL, *port = NULL;
    CURLU *u = curl_url();
    CURLUcode uc;
    int rc = -1;

    if (!u) {
        snprintf(err, errlen, "callback url: out of memory");
        return -1;
    }
    uc = curl_url_set(u, CURLUPART_URL, url, 0);
    if (uc == CURLUE_UNSUPPORTED_SCHEME || uc == CURLUE_BAD_SCHEME ||
        (uc == CURLUE_OK && curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
         !scheme_ok(scheme))) {
        snprintf(err, errlen, "callback url: scheme must be http or https");
        goto out;
    }
    if (uc != CURLUE_OK || (uc = curl_url_get(u, CURLUPART_HOST, &host, 0)) != CURLUE_OK ||
        (uc = curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT)) != CURLUE_OK) {
        snprintf(err, errlen, "callback url: %s", curl_url_strerror(uc));
        goto out;
    }
    for (char *p = host; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    if ((size_t)snprintf(out, outlen, "%s://%s:%s", scheme, host, port) >= outlen) {
        snprintf(err, errlen, "callback url: host longer than %d characters", CB_ENDPOINT_MAX - 16);
        goto out;
    }
    rc = 0;
out:
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return rc;
}

/* ---- calls ---- */

static void call_free(struct call *c)
{
    if (c->easy) {
        curl_multi_remove_handle(c->cb->multi, c->easy);
        curl_easy_cleanup(c->easy);
    }
    curl_slist_free_all(c->headers);
    free(c->url);
    free(c->body);
    free(c->webhook_id);
    free(c);
}

static void call_list_free(struct call *c)
{
    while (c) {
        struct call *next = c->next;

        call_free(c);
        c = next;
    }
}

/* Appends "name<sep>value" to *l. 0, or -1 out of memory. */
static int header_add(struct curl_slist **l, const char *name, const char *sep, const char *value)
{
    size_t len = strlen(name) + strlen(sep) + strlen(value) + 1;
    char *line = malloc(len);
    struct curl_slist *n;

    if (!line)
        return -1;
    snprintf(line, len, "%s%s%s", name, sep, value);
    n = curl_slist_append(*l, line);
    free(line);
    if (!n)
        return -1;
    *l = n;
    return 0;
}

/* The headers known at submit: the job's, Content-Type, webhook-id, and no Expect (a
 * 100-continue round trip would only delay small bodies). 0, or -1 out of memory. */
static int headers_build(const struct cb_call *call, const char *id, struct curl_slist **l)
{
    int typed = 0;

    for (size_t i = 0; i < call->nheaders; i++) {
        const struct job_header *h = &call->headers[i];

        typed |= strcasecmp(h->name, "Content-Type") == 0;
        /* "Name;" is libcurl's way to send a header with an empty value. */
        if (header_add(l, h->name, h->value[0] ? ": " : ";", h->value) < 0)
            return -1;
    }
    if (!typed && header_add(l, "Content-Type", ": ", call->json ? "application/json"
                                                                 : "text/plain; charset=utf-8") < 0)
        return -1;
    if (header_add(l, "webhook-id", ": ", id) < 0 || header_add(l, "Expect", ":", "") < 0)
        return -1;
    return 0;
}

static char *dup_bytes(const char *s, size_t len)
{
    char *d = malloc(len + 1);

    if (d) {
        if (len)
            memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

/* The callbacks.endpoints index of name, or -1. */
static int named_index(const struct config *cfg, const char *name)
{
    for (int i = 0; name && i < cfg->callbacks.nendpoints; i++)
        if (strcmp(cfg->callbacks.endpoints[i].name, name) == 0)
            return i;
    return -1;
}

/* A copy of call, or NULL with err. */
static struct call *call_copy(struct callbacks *cb, const struct cb_call *call, char *err,
                              size_t errlen)
{
    const char *id = call->webhook_id ? call->webhook_id : "";
    struct call *c = calloc(1, sizeof(*c));

    if (!c) {
        snprintf(err, errlen, "callbacks: out of memory");
        return NULL;
    }
    c->cb = cb;
    if (origin_of(call->url, c->res.endpoint, sizeof(c->res.endpoint), err, errlen) < 0) {
        free(c);
        return NULL;
    }
    c->res.ctx = call->ctx;
    c->res.retry_after_ms = -1;
    c->named = named_index(cb->cfg, call->endpoint);
    if (c->named >= 0 && cb->named_keys[c->named].n > 0) {
        c->keys = cb->named_keys[c->named].k;
        c->nkeys = cb->named_keys[c->named].n;
    } else {
        c->keys = cb->keys;
        c->nkeys = cb->nkeys;
    }
    c->put = call->put;
    c->timeout_ms = call->timeout_ms;
    c->body_len = call->body_len;
    if (!(c->url = strdup(call->url)) || !(c->body = dup_bytes(call->body, call->body_len)) ||
        !(c->webhook_id = strdup(id)) || headers_build(call, id, &c->headers) < 0) {
        snprintf(err, errlen, "callbacks: out of memory");
        call_free(c);
        return NULL;
    }
    return c;
}

int callbacks_submit(struct callbacks *cb, const struct cb_call *call, char *err, size_t errlen)
{
    struct call *c;

    if (strlen(call->url) > CB_URL_MAX) {
        snprintf(err, errlen, "callback url: longer than %d characters", CB_URL_MAX);
        return -1;
    }
    if (!(c = call_copy(cb, call, err, errlen)))
        return -1;
    pthread_mutex_lock(&cb->mu);
    *cb->inbox_tail = c;
    cb->inbox_tail = &c->next;
    cb->pending++;
    pthread_mutex_unlock(&cb->mu);
    curl_multi_wakeup(cb->multi);
    return 0;
}

int callbacks_result(struct callbacks *cb, struct cb_result *out)
{
    struct call *c;

    pthread_mutex_lock(&cb->mu);
    if ((c = cb->results)) {
        if (!(cb->results = c->next))
            cb->results_tail = &cb->results;
        cb->pending--;
    }
    pthread_mutex_unlock(&cb->mu);
    if (!c)
        return 0;
    *out = c->res;
    call_free(c);
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

/* ---- the endpoints' limits ---- */

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

/* Each quiet step, the rate grows back towards the limit (or no limit). */
static void endpoint_grow(struct endpoint *ep, int64_t now)
{
    if (ratelimit_grow(&ep->rate, now))
        log_info("endpoint=%s rate back to %s", ep->origin,
                 ep->rate.rate > 0 ? "its limit" : "no limit");
}

/* ---- the thread ---- */

static struct endpoint *endpoint_find(struct callbacks *cb, const char *origin)
{
    for (struct endpoint *ep = cb->endpoints; ep; ep = ep->next)
        if (strcmp(ep->origin, origin) == 0)
            return ep;
    return NULL;
}

/* The endpoint of c, made on first use; NULL out of memory. Its limits are the first call's,
 * or those of the first call that names a configured endpoint. */
static struct endpoint *endpoint_of(struct callbacks *cb, const struct call *c, int64_t now)
{
    struct endpoint *ep = endpoint_find(cb, c->res.endpoint);

    if (ep) {
        if (ep->named < 0 && c->named >= 0)
            endpoint_limit(ep, cb->cfg, c->named, now);
        return ep;
    }
    if (!(ep = calloc(1, sizeof(*ep))))
        return NULL;
    snprintf(ep->origin, sizeof(ep->origin), "%s", c->res.endpoint);
    ep->queue_tail = &ep->queue;
    ratelimit_init(&ep->rate, 0, now);   /* its observed rate starts now; the limit is next */
    endpoint_limit(ep, cb->cfg, c->named, now);
    ep->next = cb->endpoints;
    cb->endpoints = ep;
    cb->nendpoints++;
    return ep;
}

static void done_add(struct callbacks *cb, struct call *c)
{
    c->next = NULL;
    *cb->done_tail = c;
    cb->done_tail = &c->next;
}

/* A call that could not be made: a result without an answer. */
static void call_fail(struct callbacks *cb, struct call *c, enum cb_error e, const char *text)
{
    c->res.error = e;
    snprintf(c->res.error_text, sizeof(c->res.error_text), "%s", text);
    if (e == CB_E_BUSY)   /* one per job sent back while its endpoint is slow: not each logged */
        log_debug("call deferred endpoint=%s: %s", c->res.endpoint, text);
    else
        log_info("call failed endpoint=%s error=%s", c->res.endpoint, text);
    done_add(cb, c);
}

/* How long a call queued now would wait for its turn at ep, at the pace of its recent calls;
 * 0 while it has room or has made no call yet. */
static int64_t queue_wait_ms(const struct endpoint *ep)
{
    if (ep->in_flight < ep->lim.max_concurrency)
        return 0;
    return (int64_t)((double)(ep->queued + 1) * ep->took_ms / (double)ep->lim.max_concurrency);
}

/* Moves the calls submitted into their endpoints' queues. */
static void route(struct callbacks *cb, struct call *c, int64_t now)
{
    char text[CB_ENDPOINT_MAX + 96];
    int64_t wait;

    while (c) {
        struct call *next = c->next;
        struct endpoint *ep = endpoint_of(cb, c, now);

        c->next = NULL;
        if (!ep) {
            call_fail(cb, c, CB_E_INTERNAL, "out of memory");
        } else if ((wait = queue_wait_ms(ep)) > CB_QUEUE_WAIT_MAX_MS) {
            snprintf(text, sizeof(text), "not called: %s is busy (%lld calls queued, about %lld ms "
                     "of them)", ep->origin, (long long)ep->queued, (long long)wait);
            c->res.retry_after_ms = wait;
            call_fail(cb, c, CB_E_BUSY, text);
        } else {
            ep->queued++;
            c->ep = ep;
            ep->used_ms = now;
            *ep->queue_tail = c;
            ep->queue_tail = &c->next;
        }
        c = next;
    }
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    struct call *c = arg;
    int64_t max = c->cb->cfg->callbacks.max_response_bytes;
    size_t len = size * n, keep = CB_RESPONSE_KEEP - c->res.response_len;

    if (max > 0 && c->received + (int64_t)len > max) {
        c->cut = 1;   /* enough read: stop, the status has come */
        len = (size_t)(max - c->received);
    }
    keep = len < keep ? len : keep;
    memcpy(c->res.response + c->res.response_len, data, keep);
    c->res.response_len += keep;
    c->res.response[c->res.response_len] = '\0';
    c->received += (int64_t)len;
    return c->cut ? 0 : size * n;
}

/* Checks each address before libcurl connects to it (redirect hops included); a refusal
 * makes libcurl try the host's next address, or fail. */
static curl_socket_t on_open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *sa)
{
    struct call *c = arg;
    char addr[INET6_ADDRSTRLEN] = "?", host[256];
    const char *why = NULL;
    struct netaddr ip;

    if (purpose != CURLSOCKTYPE_IPCXN)
        return socket(sa->family, sa->socktype | SOCK_CLOEXEC, sa->protocol);
    if (netaddr_of_sockaddr(&sa->addr, sa->addrlen, &ip) < 0)
        why = "not an IP address";
    else if ((why = address_refused(c->cb, &ip)))
        inet_ntop(ip.v4 ? AF_INET : AF_INET6, ip.b, addr, sizeof(addr));
    if (why) {
        current_host(c, host, sizeof(host));
        snprintf(c->refused, sizeof(c->refused), "address %.46s of %.96s is not allowed: %.20s "
                 REFUSED_HINT, addr, host, why);
        return CURL_SOCKET_BAD;
    }
    return socket(sa->family, sa->socktype | SOCK_CLOEXEC, sa->protocol);
}

/* Adds the headers that depend on the moment the call starts. 0, or -1. */
static int call_stamp(struct call *c, int64_t now_ms)
{
    char ts[32], sig[CONFIG_SECRETS_MAX * (SIGN_VALUE_LEN + 1)];

    snprintf(ts, sizeof(ts), "%" PRId64, now_ms / 1000);
    if (header_add(&c->headers, "webhook-timestamp", ": ", ts) < 0)
        return -1;
    if (c->nkeys == 0)
        return 0;
    if (sign_header(c->keys, c->nkeys, c->webhook_id, now_ms / 1000, c->body, c->body_len, sig,
                    sizeof(sig)) < 0)
        return -1;
    return header_add(&c->headers, "webhook-signature", ": ", sig);
}

/* The easy handle of c. 0, or -1 (out of memory: any option failing says so). */
static int call_setup(struct callbacks *cb, struct call *c)
{
    long redirects = (long)cb->cfg->callbacks.max_redirects;
    long timeout = (long)(c->timeout_ms > 0 ? c->timeout_ms : c->ep->lim.timeout_ms);
    long connect = timeout < CONNECT_TIMEOUT_MAX_MS ? timeout : CONNECT_TIMEOUT_MAX_MS;
    CURL *e;

    if (!(e = c->easy = curl_easy_init()))
        return -1;
    /* No proxy from the environment: the address check must see the endpoint's address. A
     * redirect keeps the method and body (POSTREDIR): a callback never turns into a GET. */
    if (curl_easy_setopt(e, CURLOPT_PRIVATE, c) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_URL, c->url) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_SHARE, cb->share) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_PROXY, "") != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, redirects > 0 ? 1L : 0L) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_MAXREDIRS, redirects) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_POSTREDIR, (long)CURL_REDIR_POST_ALL) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_USERAGENT, "delayq") != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->body_len) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->body) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, c->put ? "PUT" : NULL) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_WRITEDATA, c) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_open_socket) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, c) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->errbuf) != CURLE_OK)
        return -1;
    return 0;
}

static void in_flight_add(struct endpoint *ep, int64_t n)
{
    ep->in_flight += n;
    metrics_call_in_flight(ep->origin, ep->in_flight);
}

/* Sends c. When it cannot be, it gets its result at once. */
static void call_start(struct callbacks *cb, struct call *c, int64_t now)
{
    int64_t now_ms = clock_now_ms();

    c->next = NULL;
    if (call_stamp(c, now_ms) < 0 || call_setup(cb, c) < 0 ||
        curl_multi_add_handle(cb->multi, c->easy) != CURLM_OK) {
        if (c->easy) {
            curl_easy_cleanup(c->easy);
            c->easy = NULL;
        }
        call_fail(cb, c, CB_E_INTERNAL, "cannot set the call up (out of memory?)");
        return;
    }
    c->res.sent_ms = now_ms;
    c->sent_mono_ms = now;
    ratelimit_observe(&c->ep->rate, now);
    in_flight_add(c->ep, 1);
    if ((c->next = cb->flying))
        cb->flying->prev = c;
    c->prev = NULL;
    cb->flying = c;
}

static struct call *queue_pop(struct endpoint *ep)
{
    struct call *c = ep->queue;

    if (!(ep->queue = c->next))
        ep->queue_tail = &ep->queue;
    ep->queued--;
    return c;
}

/* Starts what each endpoint's limits allow. Returns ms until a waiting call's token comes,
 * POLL_MAX_MS at most, and 0 when a call started (libcurl has work at once). */
static int64_t start_calls(struct callbacks *cb, int64_t now)
{
    int64_t wait = POLL_MAX_MS, w;

    for (struct endpoint *ep = cb->endpoints; ep; ep = ep->next) {
        endpoint_grow(ep, now);
        while (ep->queue && ep->in_flight < ep->lim.max_concurrency &&
               ratelimit_take(&ep->rate, now)) {
            call_start(cb, queue_pop(ep), now);
            wait = 0;
        }
        if (ep->queue && ep->in_flight < ep->lim.max_concurrency &&
            (w = ratelimit_wait_ms(&ep->rate, now)) < wait)
            wait = w;
    }
    return wait;
}

static enum cb_error error_of(CURLcode rc, int refused)
{
    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT:
        return CB_E_TIMEOUT;
    case CURLE_COULDNT_RESOLVE_HOST: case CURLE_COULDNT_CONNECT: case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR: case CURLE_GOT_NOTHING: case CURLE_PARTIAL_FILE:
    case CURLE_WEIRD_SERVER_REPLY: case CURLE_HTTP2: case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR: case CURLE_PEER_FAILED_VERIFICATION: case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER: case CURLE_SSL_CACERT_BADFILE: case CURLE_SSL_SHUTDOWN_FAILED:
    case CURLE_SSL_CRL_BADFILE: case CURLE_SSL_ISSUER_ERROR: case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS: case CURLE_SSL_CLIENTCERT:
        return refused ? CB_E_ADDRESS : CB_E_CONNECT;
    case CURLE_TOO_MANY_REDIRECTS:
        return CB_E_REDIRECT;
    case CURLE_UNSUPPORTED_PROTOCOL: case CURLE_URL_MALFORMAT:
        return CB_E_URL;
    default:
        return CB_E_INTERNAL;
    }
}

/* The answer's Retry-After in ms, or -1. libcurl says 0 both for none and for 0 seconds. */
static int64_t retry_after_ms(CURL *e)
{
    struct curl_header *h;
    curl_off_t s = 0;

    if (curl_easy_getinfo(e, CURLINFO_RETRY_AFTER, &s) != CURLE_OK || s < 0)
        return -1;
    if (s == 0 && curl_easy_header(e, "Retry-After", 0, CURLH_HEADER, -1, &h) != CURLHE_OK)
        return -1;
    return (int64_t)s * 1000;
}

/* Fills c's result from what libcurl says of its transfer. */
static void call_result(struct call *c, CURLcode rc)
{
    struct cb_result *r = &c->res;
    long status = 0;

    if (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && c->cut)) {
        curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
        r->status = (int)status;
        r->retry_after_ms = retry_after_ms(c->easy);
        return;
    }
    r->error = error_of(rc, c->refused[0] != '\0');
    if (r->error == CB_E_ADDRESS)
        snprintf(r->error_text, sizeof(r->error_text), "%s", c->refused);
    else
        snprintf(r->error_text, sizeof(r->error_text), "%s",
                 c->errbuf[0] ? c->errbuf : curl_easy_strerror(rc));
    r->response_len = 0;
    r->response[0] = '\0';
}

/* The end of c's transfer. */
static void call_done(struct callbacks *cb, struct call *c, CURLcode rc, int64_t now)
{
    struct endpoint *ep = c->ep;

    call_result(c, rc);
    c->res.took_ms = now - c->sent_mono_ms;
    if (c->prev)
        c->prev->next = c->next;
    else
        cb->flying = c->next;
    if (c->next)
        c->next->prev = c->prev;
    curl_multi_remove_handle(cb->multi, c->easy);
    curl_easy_cleanup(c->easy);
    c->easy = NULL;
    ep->used_ms = now;
    in_flight_add(ep, -1);
    /* a moving average over about the last 16 calls: how soon a queued call gets its turn */
    ep->took_ms = ep->took_ms > 0 ? ep->took_ms + ((double)c->res.took_ms - ep->took_ms) / 16
                                  : (double)c->res.took_ms + 1;
    metrics_call(ep->origin, c->res.status, (double)c->res.took_ms / 1000.0);
    if (c->res.status == 429 || c->res.status == 503)
        endpoint_throttled(ep, c->res.status, now);
    if (c->res.error != CB_E_NONE)
        log_debug("call failed endpoint=%s error=%s", ep->origin, c->res.error_text);
    done_add(cb, c);
}

static void finish_calls(struct callbacks *cb, int64_t now)
{
    CURLMsg *m;
    int left;

    while ((m = curl_multi_info_read(cb->multi, &left))) {
        struct call *c = NULL;

        if (m->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
        call_done(cb, c, m->data.result, now);
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

/* Above ENDPOINTS_KEEP endpoints, drops those idle for a while (once a second). */
static void prune(struct callbacks *cb, int64_t now)
{
    struct endpoint **p = &cb->endpoints;

    if (cb->nendpoints <= ENDPOINTS_KEEP || now - cb->pruned_ms < 1000)
        return;
    cb->pruned_ms = now;
    while (*p) {
        struct endpoint *ep = *p;

        if (!ep->queue && ep->in_flight == 0 && now - ep->used_ms >= ENDPOINT_IDLE_MS) {
            *p = ep->next;
            cb->nendpoints--;
            free(ep);
        } else {
            p = &ep->next;
        }
    }
}

/* Takes the calls submitted; 0 when the thread is to stop. */
static int take_inbox(struct callbacks *cb, struct call **calls)
{
    int stop;

    pthread_mutex_lock(&cb->mu);
    stop = cb->stop;
    *calls = cb->inbox;
    cb->inbox = NULL;
    cb->inbox_tail = &cb->inbox;
    pthread_mutex_unlock(&cb->mu);
    if (stop)
        call_list_free(*calls);
    return !stop;
}

static void *callbacks_main(void *arg)
{
    struct callbacks *cb = arg;
    struct call *calls;
    int running;

    while (take_inbox(cb, &calls)) {
        int64_t now = clock_mono_ms(), wait;
        CURLMcode mc;

        route(cb, calls, now);
        if ((mc = curl_multi_perform(cb->multi, &running)) != CURLM_OK)
            log_error("curl_multi_perform: %s", curl_multi_strerror(mc));
        now = clock_mono_ms();
        finish_calls(cb, now);
        wait = start_calls(cb, now);
        publish(cb);
        prune(cb, now);
        if ((mc = curl_multi_poll(cb->multi, NULL, 0, (int)wait, NULL)) != CURLM_OK)
            log_error("curl_multi_poll: %s", curl_multi_strerror(mc));
    }
    return NULL;
}

/* ---- life ---- */

/* Parses the signing secrets and networks of the config. 0, or -1 with err. */
static int parse_config(struct callbacks *cb, char *err, size_t errlen)
{
    const struct config *cfg = cb->cfg;
    char why[256];

    for (int i = 0; i < cfg->callbacks.nsecrets; i++, cb->nkeys++)
        if (sign_key_parse(cfg->callbacks.secrets[i], &cb->keys[i], why, sizeof(why)) < 0) {
            snprintf(err, errlen, "callbacks.secret: %s", why);
            return -1;
        }
    for (int e = 0; e < cfg->callbacks.nendpoints; e++) {
        const struct config_endpoint *ce = &cfg->callbacks.endpoints[e];

        for (int i = 0; i < ce->nsecrets; i++, cb->named_keys[e].n++)
            if (sign_key_parse(ce->secrets[i], &cb->named_keys[e].k[i], why, sizeof(why)) < 0) {
                snprintf(err, errlen, "callbacks.endpoints.%s.secret: %s", ce->name, why);
                return -1;
            }
    }
    for (; cb->nnets < cfg->callbacks.nnetworks; cb->nnets++)
        if (netaddr_net_parse(cfg->callbacks.networks[cb->nnets], &cb->nets[cb->nnets], why,
                              sizeof(why)) < 0) {
            snprintf(err, errlen, "callbacks.networks: %s", why);
            return -1;
        }
    return 0;
}

/* The multi and share handles. 0, or -1. */
static int curl_handles(struct callbacks *cb)
{
    if (!(cb->multi = curl_multi_init()) || !(cb->share = curl_share_init()))
        return -1;
    if (curl_multi_setopt(cb->multi, CURLMOPT_MAXCONNECTS, (long)MAXCONNECTS) != CURLM_OK ||
        curl_share_setopt(cb->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK ||
        curl_share_setopt(cb->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK)
        return -1;
    return 0;
}

/* Frees what callbacks_new made; the thread is not running. */
static void callbacks_release(struct callbacks *cb)
{
    call_list_free(cb->flying);   /* removes each easy handle before cleaning it up */
    cb->flying = NULL;
    for (struct endpoint *ep = cb->endpoints, *next; ep; ep = next) {
        next = ep->next;
        call_list_free(ep->queue);
        free(ep);
    }
    call_list_free(cb->inbox);
    call_list_free(cb->results);
    call_list_free(cb->done);
    if (cb->multi)
        curl_multi_cleanup(cb->multi);
    if (cb->share)
        curl_share_cleanup(cb->share);
    free(cb->named_keys);
    free(cb);
}

struct callbacks *callbacks_new(const struct config *cfg, int wake_fd, char *err, size_t errlen)
{
    struct callbacks *cb;

    if (pthread_once(&curl_once, curl_init) != 0 || curl_init_rc < 0) {
        snprintf(err, errlen, "callbacks: libcurl failed to initialise");
        return NULL;
    }
    if (!(cb = calloc(1, sizeof(*cb))) ||
        !(cb->named_keys = calloc((size_t)cfg->callbacks.nendpoints + 1, sizeof(*cb->named_keys)))) {
        snprintf(err, errlen, "callbacks: out of memory");
        free(cb);
        return NULL;
    }
    cb->cfg = cfg;
    cb->wake_fd = wake_fd;
    cb->inbox_tail = &cb->inbox;
    cb->results_tail = &cb->results;
    cb->done_tail = &cb->done;
    if (parse_config(cb, err, errlen) < 0)
        goto fail;
    if (curl_handles(cb) < 0) {
        snprintf(err, errlen, "callbacks: libcurl failed to set up");
        goto fail;
    }
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
    curl_multi_wakeup(cb->multi);
    pthread_join(cb->thread, NULL);
    for (struct endpoint *ep = cb->endpoints; ep; ep = ep->next)
        if (ep->in_flight)
            metrics_call_in_flight(ep->origin, 0);
    pthread_mutex_destroy(&cb->mu);
    callbacks_release(cb);
}

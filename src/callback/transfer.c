/* transfer: one call of callbacks.c as a libcurl transfer: its request built, its easy handle,
 * the address check on each socket it opens, its result. The contract is in
 * include/callback/transfer.h. */
#include <arpa/inet.h>
#include <ctype.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <curl/curl.h>

#include "callback/transfer.h"
#include "lib/clock.h"
#include "lib/log.h"

#define LOG_MODULE "callbacks"
#define CONNECT_TIMEOUT_MAX_MS 10000   /* a host that completes no handshake in 10 s is down,
                                        * however long its calls may work */
#define MAXCONNECTS 256            /* connections kept alive, all endpoints together */
#define REFUSED_HINT "(callbacks.allow_private or callbacks.networks allow it)"

_Static_assert(CONFIG_SECRETS_MAX <= SIGN_KEYS_MAX, "every configured secret signs a call");

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

/* ---- addresses ---- */

/* Why the open-socket check refuses ip, or NULL when it may be called. */
static const char *address_refused(const struct transfers *all, const struct netaddr *ip)
{
    const char *why;

    if (all->cfg->callbacks.allow_private || !(why = netaddr_class(ip)))
        return NULL;
    for (int i = 0; i < all->nnets; i++)
        if (netaddr_net_contains(&all->nets[i], ip))
            return NULL;
    return why;
}

/* ---- urls ---- */

/* The host of the URL t is calling now (after redirects) into out, for messages. */
static void current_host(struct transfer *t, char *out, size_t outlen)
{
    char *url = NULL, *host = NULL;
    CURLU *u;

    snprintf(out, outlen, "?");
    if (curl_easy_getinfo(t->easy, CURLINFO_EFFECTIVE_URL, &url) != CURLE_OK || !url ||
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

/* ---- the request ---- */

void transfer_free(struct transfer *t)
{
    if (t->easy) {
        curl_multi_remove_handle(t->all->multi, t->easy);
        curl_easy_cleanup(t->easy);
    }
    curl_slist_free_all(t->headers);
    free(t->url);
    free(t->body);
    free(t->webhook_id);
    free(t);
}

void transfer_list_free(struct transfer *t)
{
    while (t) {
        struct transfer *next = t->next;

        transfer_free(t);
        t = next;
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

/* The headers known at submit: the job's, Content-Type, webhook-id, webhook-attempt (1 for the
 * first call, as Cloud Tasks' X-CloudTasks-TaskRetryCount counts from 0), and no Expect (a
 * 100-continue round trip would only delay small bodies). 0, or -1 out of memory. */
static int headers_build(const struct cb_call *call, const char *id, struct curl_slist **l,
                         int *njob)
{
    char attempt[16];
    int typed = 0;

    for (size_t i = 0; i < call->nheaders; i++) {
        const struct job_header *h = &call->headers[i];

        typed |= strcasecmp(h->name, "Content-Type") == 0;
        /* "Name;" is libcurl's way to send a header with an empty value. */
        if (header_add(l, h->name, h->value[0] ? ": " : ";", h->value) < 0)
            return -1;
    }
    *njob = (int)call->nheaders;
    if (!typed && header_add(l, "Content-Type", ": ", call->json ? "application/json"
                                                                 : "text/plain; charset=utf-8") < 0)
        return -1;
    snprintf(attempt, sizeof(attempt), "%d", call->attempt > 0 ? call->attempt : 1);
    if (header_add(l, "webhook-id", ": ", id) < 0 ||
        header_add(l, "webhook-attempt", ": ", attempt) < 0 || header_add(l, "Expect", ":", "") < 0)
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

struct transfer *transfer_new(const struct transfers *all, const struct cb_call *call,
                              char *err, size_t errlen)
{
    const char *id = call->webhook_id ? call->webhook_id : "";
    struct transfer *t = calloc(1, sizeof(*t));

    if (!t) {
        snprintf(err, errlen, "callbacks: out of memory");
        return NULL;
    }
    t->all = all;
    if (origin_of(call->url, t->origin, sizeof(t->origin), err, errlen) < 0) {
        free(t);
        return NULL;
    }
    t->res.ctx = call->ctx;
    t->res.retry_after_ms = -1;
    t->named = named_index(all->cfg, call->endpoint);
    snprintf(t->res.endpoint, sizeof(t->res.endpoint), "%s",
             t->named >= 0 ? all->cfg->callbacks.endpoints[t->named].name : t->origin);
    if (t->named >= 0 && all->named_keys[t->named].n > 0) {
        t->keys = all->named_keys[t->named].k;
        t->nkeys = all->named_keys[t->named].n;
    } else {
        t->keys = all->keys;
        t->nkeys = all->nkeys;
    }
    t->put = call->put;
    t->timeout_ms = call->timeout_ms;
    t->body_len = call->body_len;
    if (!(t->url = strdup(call->url)) || !(t->body = dup_bytes(call->body, call->body_len)) ||
        !(t->webhook_id = strdup(id)) ||
        headers_build(call, id, &t->headers, &t->njob_headers) < 0) {
        snprintf(err, errlen, "callbacks: out of memory");
        transfer_free(t);
        return NULL;
    }
    return t;
}

/* ---- in flight ---- */


static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    struct transfer *t = arg;
    int64_t max = t->all->cfg->callbacks.max_response_bytes;
    size_t len = size * n, keep = CB_RESPONSE_KEEP - t->res.response_len;

    if (max > 0 && t->received + (int64_t)len > max) {
        t->cut = 1;   /* enough read: stop, the status has come */
        len = (size_t)(max - t->received);
    }
    keep = len < keep ? len : keep;
    memcpy(t->res.response + t->res.response_len, data, keep);
    t->res.response_len += keep;
    t->res.response[t->res.response_len] = '\0';
    t->received += (int64_t)len;
    return t->cut ? 0 : size * n;
}

/* Notes whether the headers of the answer being read have ended: libcurl 7.88 reports an
 * answer whose connection closed inside its headers as complete, with the status line's
 * status. A status line begins an answer (a 1xx's, then the final one); the empty line ends
 * its headers. */
static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    struct transfer *t = arg;
    size_t len = size * n;

    if (len >= 5 && strncmp(data, "HTTP/", 5) == 0)
        t->head_whole = 0;
    else if ((len == 2 && data[0] == '\r' && data[1] == '\n') || (len == 1 && data[0] == '\n'))
        t->head_whole = 1;
    return len;
}

/* Checks each address before libcurl connects to it (redirect hops included); a refusal
 * makes libcurl try the host's next address, or fail. */
static curl_socket_t on_open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *sa)
{
    struct transfer *t = arg;
    char addr[INET6_ADDRSTRLEN] = "?", host[256];
    const char *why = NULL;
    struct netaddr ip;

    if (purpose != CURLSOCKTYPE_IPCXN)
        return socket(sa->family, sa->socktype | SOCK_CLOEXEC, sa->protocol);
    if (netaddr_of_sockaddr(&sa->addr, sa->addrlen, &ip) < 0)
        why = "not an IP address";
    else if ((why = address_refused(t->all, &ip)))
        inet_ntop(ip.v4 ? AF_INET : AF_INET6, ip.b, addr, sizeof(addr));
    if (why) {
        current_host(t, host, sizeof(host));
        snprintf(t->refused, sizeof(t->refused), "address %.46s of %.96s is not allowed: %.20s "
                 REFUSED_HINT, addr, host, why);
        return CURL_SOCKET_BAD;
    }
    return socket(sa->family, sa->socktype | SOCK_CLOEXEC, sa->protocol);
}

/* Adds the headers that depend on the moment the call starts. 0, or -1. */
static int stamp(struct transfer *t, int64_t now_ms)
{
    char ts[32], sig[CONFIG_SECRETS_MAX * (SIGN_VALUE_LEN + 1)];

    snprintf(ts, sizeof(ts), "%" PRId64, now_ms / 1000);
    if (header_add(&t->headers, "webhook-timestamp", ": ", ts) < 0)
        return -1;
    if (t->nkeys == 0)
        return 0;
    if (sign_header(t->keys, t->nkeys, t->webhook_id, now_ms / 1000, t->body, t->body_len, sig,
                    sizeof(sig)) < 0)
        return -1;
    return header_add(&t->headers, "webhook-signature", ": ", sig);
}

/* The easy handle of t. 0, or -1 (out of memory: any option failing says so). */
static int setup(struct transfer *t, int64_t timeout_ms)
{
    long timeout = (long)(t->timeout_ms > 0 ? t->timeout_ms : timeout_ms);
    long connect = timeout < CONNECT_TIMEOUT_MAX_MS ? timeout : CONNECT_TIMEOUT_MAX_MS;
    CURL *e;

    if (!(e = t->easy = curl_easy_init()))
        return -1;
    /* No proxy from the environment: the address check must see the endpoint's address.
     * Redirects are followed by transfer_follow, which checks where they lead. */
    if (curl_easy_setopt(e, CURLOPT_PRIVATE, t) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_URL, t->url) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_SHARE, t->all->share) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https") != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_PROXY, "") != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L) != CURLE_OK ||   /* transfer_follow */
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, connect) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_USERAGENT, "delayq") != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)t->body_len) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->body) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, t->put ? "PUT" : NULL) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_WRITEDATA, t) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_HEADERDATA, t) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, on_open_socket) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, t) != CURLE_OK ||
        curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf) != CURLE_OK)
        return -1;
    return 0;
}

int transfer_start(struct transfer *t, int64_t timeout_ms, int64_t now)
{
    int64_t now_ms = clock_now_ms();

    if (stamp(t, now_ms) < 0 || setup(t, timeout_ms) < 0 ||
        curl_multi_add_handle(t->all->multi, t->easy) != CURLM_OK) {
        if (t->easy) {
            curl_easy_cleanup(t->easy);
            t->easy = NULL;
        }
        return -1;
    }
    t->res.sent_ms = now_ms;
    t->sent_mono_ms = now;
    return 0;
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

/* Makes r a call that got no answer: error, with text. */
static void result_error(struct cb_result *r, enum cb_error error, const char *text)
{
    r->error = error;
    snprintf(r->error_text, sizeof(r->error_text), "%s", text);
    r->response_len = 0;
    r->response[0] = '\0';
}

/* Fills t's result from what libcurl says of it. An answer cut off is no answer, whatever its
 * status line said: inside its headers here, short of its Content-Length by libcurl's
 * CURLE_PARTIAL_FILE (error_of). Only max_response_bytes, our own limit, may end the body. */
static void result(struct transfer *t, CURLcode rc)
{
    struct cb_result *r = &t->res;
    enum cb_error error;
    long status = 0;

    if (rc == CURLE_OK && t->redirect_refused[0]) {
        result_error(r, CB_E_REDIRECT, t->redirect_refused);
        return;
    }
    if (rc == CURLE_OK && !t->head_whole) {
        result_error(r, CB_E_CONNECT, "connection closed inside the answer's headers");
        return;
    }
    if (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && t->cut)) {
        curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
        r->status = (int)status;
        r->retry_after_ms = retry_after_ms(t->easy);
        return;
    }
    error = error_of(rc, t->refused[0] != '\0');
    result_error(r, error, error == CB_E_ADDRESS ? t->refused
                           : t->errbuf[0] ? t->errbuf : curl_easy_strerror(rc));
}

/* t's headers without the job's own (Content-Type kept), for another origin. 0, or -1. */
static int drop_job_headers(struct transfer *t)
{
    struct curl_slist *kept = NULL, *n;
    int i = 0;

    for (struct curl_slist *h = t->headers; h; h = h->next, i++) {
        if (i < t->njob_headers && strncasecmp(h->data, "Content-Type:", 13) != 0)
            continue;
        if (!(n = curl_slist_append(kept, h->data))) {
            curl_slist_free_all(kept);
            return -1;
        }
        kept = n;
    }
    curl_slist_free_all(t->headers);
    t->headers = kept;
    t->njob_headers = 0;
    return 0;
}

int transfer_follow(struct transfer *t, CURLcode rc)
{
    const struct config *cfg = t->all->cfg;
    char origin[CB_ENDPOINT_MAX], err[160], *url;
    const char *loc = NULL;
    long status = 0;

    if (rc != CURLE_OK || !t->head_whole || cfg->callbacks.max_redirects == 0)
        return 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    if (curl_easy_getinfo(t->easy, CURLINFO_REDIRECT_URL, &loc) != CURLE_OK || !loc ||
        status < 300 || status > 399)
        return 0;
    if (t->hops >= cfg->callbacks.max_redirects) {
        snprintf(t->redirect_refused, sizeof(t->redirect_refused), "more than %lld redirects "
                 "(callbacks.max_redirects)", (long long)cfg->callbacks.max_redirects);
        return 0;
    }
    if (origin_of(loc, origin, sizeof(origin), err, sizeof(err)) < 0) {
        snprintf(t->redirect_refused, sizeof(t->redirect_refused), "redirected to a URL that "
                 "cannot be called: %.200s", err);
        return 0;
    }
    if (strcmp(origin, t->origin) != 0 && !cfg->callbacks.redirect_across_origins) {
        snprintf(t->redirect_refused, sizeof(t->redirect_refused), "redirected to %.160s, another "
                 "origin (callbacks.redirect_across_origins is false)", origin);
        return 0;
    }
    if (!(url = strdup(loc)) ||
        (strcmp(origin, t->origin) != 0 && t->njob_headers && drop_job_headers(t) < 0)) {
        free(url);
        snprintf(t->redirect_refused, sizeof(t->redirect_refused), "out of memory following a "
                 "redirect");
        return 0;
    }
    curl_multi_remove_handle(t->all->multi, t->easy);
    free(t->url);
    t->url = url;
    t->received = 0;
    t->cut = 0;
    t->head_whole = 0;
    t->res.response_len = 0;
    t->res.response[0] = '\0';
    t->hops++;
    if (curl_easy_setopt(t->easy, CURLOPT_URL, t->url) != CURLE_OK ||
        curl_easy_setopt(t->easy, CURLOPT_HTTPHEADER, t->headers) != CURLE_OK ||
        curl_multi_add_handle(t->all->multi, t->easy) != CURLM_OK) {
        snprintf(t->redirect_refused, sizeof(t->redirect_refused), "cannot follow a redirect "
                 "(out of memory?)");
        curl_multi_add_handle(t->all->multi, t->easy);   /* transfer_finish removes it */
        return 0;
    }
    return 1;
}

void transfer_finish(struct transfer *t, CURLcode rc, int64_t now)
{
    result(t, rc);
    t->res.took_ms = now - t->sent_mono_ms;
    curl_multi_remove_handle(t->all->multi, t->easy);
    curl_easy_cleanup(t->easy);
    t->easy = NULL;
}

/* ---- life ---- */

/* Parses the signing secrets and networks of the config. 0, or -1 with err. */
static int parse_config(struct transfers *all, char *err, size_t errlen)
{
    const struct config *cfg = all->cfg;
    char why[256];

    for (int i = 0; i < cfg->callbacks.nsecrets; i++, all->nkeys++)
        if (sign_key_parse(cfg->callbacks.secrets[i], &all->keys[i], why, sizeof(why)) < 0) {
            snprintf(err, errlen, "callbacks.secret: %s", why);
            return -1;
        }
    for (int e = 0; e < cfg->callbacks.nendpoints; e++) {
        const struct config_endpoint *ce = &cfg->callbacks.endpoints[e];

        for (int i = 0; i < ce->nsecrets; i++, all->named_keys[e].n++)
            if (sign_key_parse(ce->secrets[i], &all->named_keys[e].k[i], why, sizeof(why)) < 0) {
                snprintf(err, errlen, "callbacks.endpoints.%s.secret: %s", ce->name, why);
                return -1;
            }
    }
    for (; all->nnets < cfg->callbacks.nnetworks; all->nnets++)
        if (netaddr_net_parse(cfg->callbacks.networks[all->nnets], &all->nets[all->nnets], why,
                              sizeof(why)) < 0) {
            snprintf(err, errlen, "callbacks.networks: %s", why);
            return -1;
        }
    return 0;
}

/* The multi and share handles. 0, or -1. */
static int curl_handles(struct transfers *all)
{
    if (!(all->multi = curl_multi_init()) || !(all->share = curl_share_init()))
        return -1;
    if (curl_multi_setopt(all->multi, CURLMOPT_MAXCONNECTS, (long)MAXCONNECTS) != CURLM_OK ||
        curl_share_setopt(all->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION) != CURLSHE_OK ||
        curl_share_setopt(all->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) != CURLSHE_OK)
        return -1;
    return 0;
}

int transfers_init(struct transfers *all, const struct config *cfg, char *err, size_t errlen)
{
    memset(all, 0, sizeof(*all));
    all->cfg = cfg;
    if (pthread_once(&curl_once, curl_init) != 0 || curl_init_rc < 0) {
        snprintf(err, errlen, "callbacks: libcurl failed to initialise");
        return -1;
    }
    if (!(all->named_keys = calloc((size_t)cfg->callbacks.nendpoints + 1,
                                   sizeof(*all->named_keys)))) {
        snprintf(err, errlen, "callbacks: out of memory");
        return -1;
    }
    if (parse_config(all, err, errlen) < 0)
        return -1;
    if (curl_handles(all) < 0) {
        snprintf(err, errlen, "callbacks: libcurl failed to set up");
        return -1;
    }
    return 0;
}

void transfers_release(struct transfers *all)
{
    if (all->multi)
        curl_multi_cleanup(all->multi);
    if (all->share)
        curl_share_cleanup(all->share);
    free(all->named_keys);
    memset(all, 0, sizeof(*all));
}

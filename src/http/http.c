/* http: the HTTP server (libmicrohttpd): one daemon per thread on a shared listening socket,
 * each connection's deadline, the per-address limit, clients' FINs, TLS reload, the life of a
 * request (body, suspension until the jobs module answers, the answer), and the drain. Which
 * paths there are and how each is served is routes.c's. The contract is in include/http/http.h,
 * the shared inside in include/http/http_link.h. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include <netinet/in.h>

#include "core/api.h"
#include "core/apijson.h"
#include "core/calljson.h"
#include "http/conns.h"
#include "http/http_link.h"
#include "http/openapi.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "http/tls.h"

#define LOG_MODULE "http"

/* Per connection (headers, read and write buffers; bodies are copied out as they arrive). MHD
 * clears it for every request: its default 32 KiB cost about 5 us of memset per add. 16 KiB
 * still takes 14 KB of request headers. */
#define CONN_MEMORY_BYTES 16384
/* At shutdown, how long HTTP threads may stay inside the jobs module (they only parse and queue
 * there) before the wait for them is logged; it goes on until they are out. */
#define INSIDE_WAIT_MS 1000
/* At shutdown, after every request was answered, how long their answers get to be sent before
 * the daemons stop. */
#define ANSWERS_WAIT_MS 2000
#define LOOP_IDLE_MS 250        /* longest sleep of an HTTP thread (resumes, drain and stop wake it) */
/* Clients' FINs taken per turn of an HTTP thread; more wait for the next turn, which the wakes
 * of this one bring at once. */
#define FIN_BATCH 64

/* One HTTP thread and the libmicrohttpd daemon it runs: its connections, in an epoll set. */
struct server {
    struct http *http;
    struct MHD_Daemon *d;
    int wake;                 /* eventfd: a connection was resumed, or drain or stop began */
    atomic_int woken;         /* wake written since the thread last looked: no need again */
    int fins;                 /* epoll: the daemon's connections, each until its client's FIN */
    unsigned conns, limit;    /* the daemon's connections; its MHD_OPTION_CONNECTION_LIMIT */
    struct conns tracked;     /* the daemon's connections, each with its deadline */
    pthread_t thread;
};

/* A request of cn ended: the next one must have arrived whole within the keep-alive idle time
 * and http.request_timeout_s. */
static void conn_idle(const struct http *http, struct conn *cn)
{
    if (cn)
        cn->deadline_ms = clock_mono_ms() +
                          (http->cfg->http.connection_timeout_s + http->cfg->http.request_timeout_s) * 1000;
}

enum MHD_Result http_send_text(struct request *req, int status, char *text, const char *type)
{
    struct MHD_Response *r;
    enum MHD_Result ret;
    char allow[64];

    static char no_memory[] = "{\"code\":503,\"message\":\"out of memory\",\"data\":null}";

    if (!text)
        status = 503;
    req->status = status;
    r = text ? MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE)
             : MHD_create_response_from_buffer(strlen(no_memory), no_memory, MHD_RESPMEM_PERSISTENT);
    if (!r) {   /* out of memory: libmicrohttpd closes the connection */
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 405)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, routes_allowed(req, allow, sizeof(allow)));
    if (req->must_close)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    ret = MHD_queue_response(req->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result http_send_json(struct request *req, int status, char *text)
{
    return http_send_text(req, status, text, "application/json");
}

enum MHD_Result http_send_error(struct request *req, int status, int code, const char *msg)
{
    return http_send_json(req, status, api_response(code, msg, NULL));
}

/* Keeps at most max_body_bytes; past that only notes that the body was too large. */
static void take_body(struct request *req, const char *data, size_t n)
{
    size_t max = (size_t)req->http->cfg->http.max_body_bytes;

    if (req->too_large || req->len + n > max) {
        req->too_large = 1;
        return;
    }
    if (req->len + n + 1 > req->cap) {
        size_t cap = req->cap ? req->cap : 1024;
        char *b;
        while (cap < req->len + n + 1)
            cap *= 2;
        if (!(b = realloc(req->body, cap))) {
            req->too_large = 1;
            return;
        }
        req->body = b;
        req->cap = cap;
    }
    memcpy(req->body + req->len, data, n);
    req->len += n;
    req->body[req->len] = '\0';
}

static void wake(struct server *s)
{
    (void)eventfd_write(s->wake, 1);
}

/* Wakes s for a resumed connection, once per turn of its loop: Kafka answers adds in bursts,
 * and one write and one wake-up serve the burst. */
static void wake_once(struct server *s)
{
    if (!atomic_exchange(&s->woken, 1))
        wake(s);
}

void http_done(void *opaque, int status, char *response)
{
    http_done_as(opaque, status, response, NULL);
}

void http_done_as(void *opaque, int status, char *response, const char *type)
{
    struct request *req = opaque;
    struct MHD_Connection *conn = req->conn;
    struct server *srv = req->srv;
    int suspended;

    pthread_mutex_lock(&req->mu);
    req->async_status = status;
    req->response = response;
    req->response_type = type;
    suspended = req->state == ASYNC_SUSPENDED;
    req->state = ASYNC_DONE;
    pthread_mutex_unlock(&req->mu);
    /* Last, and without req: once resumed, the request may end (its client gone) and req be
     * freed before this thread would have left req->mu. */
    if (suspended) {
        MHD_resume_connection(conn);
        wake_once(srv);   /* a daemon run from outside has no channel of its own for this */
    }
}

void http_answered(void *opaque, const struct answer *a)
{
    struct request *req = opaque;

    http_done(opaque, a->status, api_response(a->code, a->message, req->hide_secrets
                                                                  ? calljson_hidden(a->data)
                                                                  : api_data_ref(a->data)));
}

int http_wanted(void *opaque)
{
    struct request *req = opaque;
    struct pollfd pfd = { .fd = req->fd, .events = POLLRDHUP };

    /* The connection is suspended until answered, so the socket stays this request's. A
     * client that half-closed after its request (shutdown of its writing side) counts as gone:
     * HTTP clients that wait for an answer do not. */
    if (req->fd < 0 || poll(&pfd, 1, 0) <= 0)
        return 1;
    return !(pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Takes req out of http->busy, once: when its answer is queued, or when it ends without (its
 * client left, and libmicrohttpd read the end of the connection before asking for the
 * answer). */
static void async_uncount(struct request *req)
{
    if (req->counted) {
        req->counted = 0;
        atomic_fetch_sub(&req->http->busy, 1);
    }
}

/* A request for the jobs module: answered at once, or suspended until http_done. */
static enum MHD_Result serve_async(struct request *req)
{
    struct http *http = req->http;
    enum MHD_Result ret = MHD_YES;

    if (req->state == ASYNC_NEW) {
        /* busy first, then the flag: http_drain waits for every request that saw it clear. */
        atomic_fetch_add(&http->busy, 1);
        req->counted = 1;
        if (atomic_load(&http->draining)) {
            async_uncount(req);
            return http_send_error(req, 503, API_UNAVAILABLE, "shutting down");
        }
        routes_start(req);
    }
    pthread_mutex_lock(&req->mu);
    if (req->state == ASYNC_DONE) {
        ret = http_send_text(req, req->async_status, req->response,
                             req->response_type ? req->response_type : "application/json");
        req->response = NULL;
        async_uncount(req);
    } else if (req->state == ASYNC_NEW) {
        /* Answered later by http_done, which resumes the connection. */
        req->state = ASYNC_SUSPENDED;
        MHD_suspend_connection(req->conn);
    }
    pthread_mutex_unlock(&req->mu);
    return ret;
}

/* Serves req. Once draining, a request that would call into the jobs module is refused
 * (serve_async sees to that itself, and the answers of those begun still go out), so that none
 * does once it is freed. */
static enum MHD_Result serve(struct request *req)
{
    struct http *http = req->http;
    int async = routes_is_async(req->route);
    enum MHD_Result ret;

    /* inside first, then the flag: http_drain waits for every request that saw it clear */
    atomic_fetch_add(&http->inside, 1);
    if (atomic_load(&http->draining) && !async && req->route != R_HEALTH)
        ret = http_send_error(req, 503, API_UNAVAILABLE, "shutting down");
    else if (req->too_large)
        ret = http_send_error(req, 413, API_TOO_LARGE, "request body is over http.max_body_bytes");
    else if (async)
        ret = serve_async(req);
    else
        ret = routes_serve(req);
    atomic_fetch_sub(&http->inside, 1);
    return ret;
}

/* 1 when the path of uri (the target as sent, up to its query) decodes to a NUL byte, which
 * would end the decoded path there: "/schedules/victim%00x" would name schedule victim. */
static int nul_in_path(const char *uri)
{
    const char *nul = strstr(uri, "%00"), *query = strchr(uri, '?');

    return nul && (!query || nul < query);
}

/* libmicrohttpd's URI log callback: a request begins, its request line read (uri: its target
 * as sent, not yet decoded). What it returns is the request's *con_cls (NULL: out of memory). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    struct request *req = calloc(1, sizeof(*req));

    if (!req)
        return NULL;
    req->srv = cls;
    req->http = req->srv->http;
    req->conn = conn;
    req->cn = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT)->socket_context;
    req->fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD)->connect_fd;
    req->nul_in_path = nul_in_path(uri);
    req->start_us = clock_mono_us();
    pthread_mutex_init(&req->mu, NULL);
    return req;
}

/* The first call for req, its headers read (url: its path, decoded): what it is, and the
 * checks made before any body is read. */
static enum MHD_Result begin(struct request *req, const char *url, const char *method)
{
    enum MHD_Result ret = MHD_YES;

    req->begun = 1;
    req->path = routes_match(req->http->cfg, url, &req->route);
    if (req->nul_in_path)
        return http_send_error(req, 400, API_BAD_REQUEST, "path: holds a NUL byte (%00)");
    if (req->route == R_COMPAT || req->route == R_SCHEDULES || req->route == R_DEAD ||
        req->route == R_PULL_TOPIC || req->route == R_UI) {
        snprintf(req->method, sizeof(req->method), "%s", method);
        if (!(req->url = strdup(url)))
            req->route = R_OTHER;   /* out of memory: answered as an unknown path */
    }
    routes_admit(req, method, &ret);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    struct request *req = *con_cls;

    (void)cls;
    (void)conn;
    (void)version;
    if (!req)   /* out of memory in on_uri */
        return MHD_NO;
    if (!req->begun)
        return begin(req, url, method);
    if (*upload_size > 0) {
        take_body(req, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (req->cn)
        req->cn->deadline_ms = 0;   /* arrived whole: being served */
    return serve(req);
}

/* The end of a request, whatever its termination code. libmicrohttpd ends a suspended one only
 * in MHD_stop_daemon, after intake_free has answered every add: no add still refers to req. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode why)
{
    struct request *req = *con_cls;

    (void)cls;
    (void)conn;
    (void)why;
    if (!req)
        return;
    conn_idle(req->http, req->cn);
    async_uncount(req);
    if (req->status)
        metrics_http(req->route, req->status, (double)(clock_mono_us() - req->start_us) / 1e6);
    pthread_mutex_destroy(&req->mu);
    free(req->response);
    free(req->body);
    free(req->url);
    free(req);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char buf[512];

    (void)cls;
    vsnprintf(buf, sizeof(buf), fmt, ap);
    buf[strcspn(buf, "\n")] = '\0';
    log_warn("%s", buf);
}

/* Resolves "host:port" (an IPv6 host in brackets) into a socket address. */
static int resolve(const char *listen, struct sockaddr_storage *sa, char *err, size_t errlen)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV }, *ai;
    int rc;

    if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof(host) || !colon[1]) {
        snprintf(err, errlen, "http.listen \"%s\" is not host:port", listen);
        return -1;
    }
    snprintf(host, sizeof(host), "%.*s", (int)(colon - listen), listen);
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = '\0';
    }
    if ((rc = getaddrinfo(host, colon + 1, &hints, &ai)) != 0) {
        snprintf(err, errlen, "http.listen \"%s\": %s", listen, gai_strerror(rc));
        return -1;
    }
    memcpy(sa, ai->ai_addr, ai->ai_addrlen);
    freeaddrinfo(ai);
    return 0;
}

/* The bytes that tell a client's address apart: 4 for IPv4, 16 for IPv6, 0 for any other
 * family (not counted). */
static size_t addr_key(const struct sockaddr *sa, uint8_t key[ADDRS_KEY_MAX])
{
    if (sa->sa_family == AF_INET) {
        memcpy(key, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
        return 4;
    }
    if (sa->sa_family == AF_INET6) {
        memcpy(key, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, 16);
        return 16;
    }
    return 0;
}

/* libmicrohttpd's accept policy: a connection counts against its address's
 * http.max_connections_per_ip over every thread's daemon (on_connection gives it back). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    struct http *http = cls;
    uint8_t key[ADDRS_KEY_MAX];
    size_t len = addrlen ? addr_key(addr, key) : 0;

    if (!len || addrs_take(&http->addrs, key, len) == 0)
        return MHD_YES;
    return MHD_NO;
}

/* libmicrohttpd 0.9.75 watches connections edge-triggered and takes a read shorter than its
 * buffer for a drained socket: when a client's last bytes and its FIN come in one edge (always
 * so for a connection accepted from the backlog after its client left), it reads the bytes,
 * never the end, and no edge follows. The closed connection would keep its slot until
 * connection_timeout_s, and a full daemon accepts nothing. So each daemon's connections are
 * also in s->fins until their client's FIN: once libmicrohttpd has read every byte before it
 * and still holds the connection, shutdown(SHUT_RD) wakes the socket (and does nothing else:
 * nothing arrives after a FIN), the daemon's epoll reports it again, and libmicrohttpd reads
 * the end and closes the connection. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct server *s = cls;
    const union MHD_ConnectionInfo *ci;
    struct epoll_event ev = { .events = EPOLLRDHUP | EPOLLONESHOT };

    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        uint8_t key[ADDRS_KEY_MAX];
        size_t len;
        s->conns--;   /* closing the socket takes it out of s->fins */
        conns_forget(&s->tracked, *socket_context);
        ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && (len = addr_key(ci->client_addr, key)))
            addrs_give(&s->http->addrs, key, len);
        return;
    }
    s->conns++;
    ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    ev.data.fd = ci->connect_fd;
    /* its first request must arrive whole within http.request_timeout_s */
    *socket_context = conns_note(&s->tracked, ci->connect_fd,
                                 clock_mono_ms() + s->http->cfg->http.request_timeout_s * 1000);
    if (epoll_ctl(s->fins, EPOLL_CTL_ADD, ev.data.fd, &ev) < 0)
        log_warn("connection fd=%d not watched for its client's FIN: %s", ev.data.fd, strerror(errno));
}

/* Wakes the connections whose client has sent its FIN and whose bytes have all been read (see
 * on_connection); one with bytes still unread is looked at again after the next run. */
static void wake_fins(struct server *s)
{
    struct epoll_event ev[FIN_BATCH];
    int n = epoll_wait(s->fins, ev, FIN_BATCH, 0);

    for (int i = 0; i < n; i++) {
        int fd = ev[i].data.fd, unread = 0;

        if (ioctl(fd, FIONREAD, &unread) == 0 && unread > 0) {
            ev[i].events = EPOLLRDHUP | EPOLLONESHOT;
            (void)epoll_ctl(s->fins, EPOLL_CTL_MOD, fd, &ev[i]);
        } else {
            (void)shutdown(fd, SHUT_RD);
        }
    }
}

/* SIGHUP: the certificate and key files are read again; new connections get them, those
 * open keep theirs. A file that does not load leaves the current ones in use. */
static void reload_tls(struct http *http)
{
    const struct config *cfg = http->cfg;
    char err[512];

    atomic_store(http->reload, 0);
    if (!cfg->http.tls_cert_file[0])
        log_info("SIGHUP: nothing to reload (no http.tls_cert_file)");
    else if (tls_load(cfg->http.tls_cert_file, cfg->http.tls_key_file, err, sizeof(err)) < 0)
        log_error("SIGHUP: the TLS certificate was not reloaded, the current one stays: %s", err);
    else
        log_info("SIGHUP: TLS certificate reloaded from %s", cfg->http.tls_cert_file);
}

/* How long the thread of s may sleep: the daemon's own timeout, at most LOOP_IDLE_MS. */
static int sleep_ms(struct server *s)
{
    MHD_UNSIGNED_LONG_LONG t;

    if (MHD_get_timeout(s->d, &t) == MHD_YES && t < (MHD_UNSIGNED_LONG_LONG)LOOP_IDLE_MS)
        return (int)t;
    return LOOP_IDLE_MS;
}

/* The thread of one daemon. libmicrohttpd's own threads (0.9.75) wait in epoll_wait again,
 * with the timeout they computed before, whenever one wait returned its whole batch of 128
 * events: 128 connections of one thread that became readable together then sat unanswered
 * until another event or the connection timeout. MHD_run never waits, so the only wait is this
 * poll() of the daemon's epoll descriptor, with the daemon's own timeout (0 while it has
 * connections ready). An add answered on another thread wakes it through s->wake. */
static void *serve_loop(void *arg)
{
    struct server *s = arg;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_EPOLL_FD);
    struct pollfd pfd[2] = { { .fd = info->epoll_fd, .events = POLLIN }, { .fd = s->wake, .events = POLLIN } };
    int quiesced = 0, freed = 0;

    while (!atomic_load(&s->http->stop)) {
        int ms, full;

        if (!quiesced && atomic_load(&s->http->quiesce)) {
            MHD_socket fd = MHD_quiesce_daemon(s->d);   /* the daemon's copy of the socket */
            if (fd != MHD_INVALID_SOCKET)
                close(fd);
            quiesced = 1;
        }
        ms = freed ? 0 : sleep_ms(s);
        if (ms > 0 && poll(pfd, 2, ms) > 0 && pfd[1].revents) {
            eventfd_t n;
            (void)eventfd_read(s->wake, &n);
        }
        /* Cleared before the run: a connection resumed from here on is served by this run or
         * wakes the next poll. */
        atomic_store(&s->woken, 0);
        full = s->conns >= s->limit;
        MHD_run(s->d);
        wake_fins(s);
        conns_sweep(&s->tracked);
        if (s == s->http->srv && atomic_load(s->http->reload))
            reload_tls(s->http);
        /* A full daemon takes its listening socket out of its epoll set, and puts it back only
         * at the start of a run: once slots are free, that run must not wait for another event. */
        freed = full && s->conns < s->limit;
    }
    return NULL;
}

/* A non-blocking listening socket on sa, or -1 with err set. */
static int listen_on(const struct sockaddr_storage *sa, const char *listen_at, char *err, size_t errlen)
{
    socklen_t len = sa->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;

    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, (const struct sockaddr *)sa, len) < 0 || listen(fd, SOMAXCONN) < 0) {
        snprintf(err, errlen, "cannot listen on %s (in use, or not an address of this host)", listen_at);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

struct http *http_new(const struct config *cfg, struct intake *jobs, struct schedules *schedules,
                      struct dead *dead,
                      atomic_int *reload, char *err, size_t errlen)
{
    struct http *http = calloc(1, sizeof(*http));
    int n = (int)cfg->http.threads, fd = -1;
    unsigned limit = (unsigned)(cfg->http.max_connections / n);
    int tls = cfg->http.tls_cert_file[0] != '\0';
    struct MHD_OptionItem tls_opts[] = {
        { MHD_OPTION_HTTPS_CERT_CALLBACK, 0, (void *)(uintptr_t)tls_retrieve },
        { MHD_OPTION_END, 0, NULL },
    }, no_opts[] = { { MHD_OPTION_END, 0, NULL } };
    struct sockaddr_storage sa;

    metrics_http_routes(routes_labels, HTTP_ROUTES);
    if (!http || addrs_init(&http->addrs, (unsigned)cfg->http.max_connections,
                            (unsigned)cfg->http.max_connections_per_ip) < 0) {
        snprintf(err, errlen, "out of memory");
        free(http);
        return NULL;
    }
    if (!(http->srv = calloc((size_t)n, sizeof(*http->srv))) ||
        !(http->openapi = openapi_build(cfg, &http->openapi_len, err, errlen)) ||
        resolve(cfg->http.listen, &sa, err, errlen) < 0 ||
        (fd = listen_on(&sa, cfg->http.listen, err, errlen)) < 0)
        goto fail;
    http->cfg = cfg;
    http->jobs = jobs;
    http->schedules = schedules;
    http->dead = dead;
    http->reload = reload;
    for (http->nsrv = 0; http->nsrv < n; http->nsrv++) {
        struct server *s = &http->srv[http->nsrv];
        int own;

        s->http = http;
        s->limit = limit ? limit : 1u;
        if ((s->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0 ||
            (s->fins = epoll_create1(EPOLL_CLOEXEC)) < 0) {
            snprintf(err, errlen, "cannot start an HTTP thread: %s", strerror(errno));
            if (s->wake >= 0)
                close(s->wake);
            goto fail;
        }
        own = fcntl(fd, F_DUPFD_CLOEXEC, 0);   /* each daemon closes its own copy */
        s->d = own < 0 ? NULL : MHD_start_daemon(
            MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | (tls ? MHD_USE_TLS : 0),
            0, on_accept, http,
            on_request, s,
            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
            MHD_OPTION_LISTEN_SOCKET, own,
            MHD_OPTION_CONNECTION_LIMIT, s->limit,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->http.connection_timeout_s,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY_BYTES,
            MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
            MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
            MHD_OPTION_ARRAY, tls ? tls_opts : no_opts,
            MHD_OPTION_END);
        if (!s->d) {   /* its copy of the socket stays open: the process is failing to start */
            close(s->wake);
            close(s->fins);
            snprintf(err, errlen, "cannot start the HTTP server on %s", cfg->http.listen);
            goto fail;
        }
        if (pthread_create(&s->thread, NULL, serve_loop, s) != 0) {
            MHD_stop_daemon(s->d);
            close(s->wake);
            close(s->fins);
            snprintf(err, errlen, "cannot start an HTTP thread");
            goto fail;
        }
    }
    close(fd);
    log_info("listening on %s threads=%d", cfg->http.listen, n);
    return http;
fail:
    if (fd >= 0)
        close(fd);
    http_free(http);
    return NULL;
}

void http_drain(struct http *http, int timeout_ms)
{
    atomic_store(&http->quiesce, 1);
    atomic_store(&http->draining, 1);
    for (int i = 0; i < http->nsrv; i++)
        wake(&http->srv[i]);
    intake_stop_waiting(http->jobs);   /* pops waiting for a job are answered now, with none */
    for (int waited = 0; atomic_load(&http->busy) > 0 && waited < timeout_ms; waited += 10)
        usleep(10 * 1000);
    if (atomic_load(&http->busy) > 0)
        log_warn("%d requests unanswered at shutdown; the jobs module answers them as it stops",
                 atomic_load(&http->busy));
    /* An HTTP thread inside the jobs module only parses and queues: it is out at once. Once
     * none is, none goes in again (serve checks the flag after counting itself in). */
    for (int waited = 0; atomic_load(&http->inside) > 0; waited += 10) {
        if (waited == INSIDE_WAIT_MS)
            log_warn("%d requests still being served at shutdown", atomic_load(&http->inside));
        usleep(10 * 1000);
    }
}

void http_free(struct http *http)
{
    if (!http)
        return;
    /* The answers given as the jobs module stopped are sent before the daemons stop. */
    for (int waited = 0; atomic_load(&http->busy) > 0 && waited < ANSWERS_WAIT_MS; waited += 10)
        usleep(10 * 1000);
    atomic_store(&http->stop, 1);
    for (int i = 0; i < http->nsrv; i++) {
        wake(&http->srv[i]);
        pthread_join(http->srv[i].thread, NULL);
        MHD_stop_daemon(http->srv[i].d);
        close(http->srv[i].wake);
        close(http->srv[i].fins);
    }
    free(http->srv);
    addrs_release(&http->addrs);
    free(http->openapi);
    free(http);
}

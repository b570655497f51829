#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include <netinet/in.h>

#include "http/addrs.h"
#include "core/api.h"
#include "core/apijson.h"
#include "http/compat.h"
#include "http/http.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "dead/dead.h"
#include "http/ui.h"
#include "schedules/schedules.h"
#include "http/tls.h"

#define LOG_MODULE "http"
#define API_PREFIX "/delay-queue/api/jobs/"
#define SCHEDULES_PATH "/delay-queue/api/schedules"
#define DEAD_PATH "/delay-queue/api/dead"
#define OPENAPI_PATH "/delay-queue/api/openapi.json"   /* the API's description, OpenAPI 3.1 */

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
#define SWEEP_MS 250           /* connections are checked against their deadline this often */
#define LOOP_IDLE_MS 250        /* longest sleep of an HTTP thread (resumes, drain and stop wake it) */
/* Clients' FINs taken per turn of an HTTP thread; more wait for the next turn, which the wakes
 * of this one bring at once. */
#define FIN_BATCH 64

/* A request answered by the jobs module: from queued, to suspended, to answered. */
enum async_state { ASYNC_NEW, ASYNC_SUSPENDED, ASYNC_DONE };

/* A connection of a daemon, from accept to close, and by when its next request must have
 * arrived whole. */
struct conn {
    int fd;
    int64_t deadline_ms;      /* monotonic; 0 while a request is being served */
    struct conn *prev, *next;
};

/* One HTTP thread and the libmicrohttpd daemon it runs: its connections, in an epoll set. */
struct server {
    struct http *http;
    struct MHD_Daemon *d;
    int wake;                 /* eventfd: a connection was resumed, or drain or stop began */
    atomic_int woken;         /* wake written since the thread last looked: no need again */
    int fins;                 /* epoll: the daemon's connections, each until its client's FIN */
    unsigned conns, limit;    /* the daemon's connections; its MHD_OPTION_CONNECTION_LIMIT */
    struct conn *list;        /* the daemon's connections, each with its deadline */
    int64_t swept_ms;         /* monotonic: the last look for connections past their deadline */
    pthread_t thread;
};

struct http {
    const struct config *cfg;
    struct jobs *jobs;
    struct schedules *schedules;
    struct dead *dead;
    struct server *srv;       /* http.threads of them, all accepting on one listening socket */
    int nsrv;
    atomic_int quiesce;       /* set at drain: the threads stop accepting connections */
    atomic_int stop;          /* set at free: the threads return */
    atomic_int draining;      /* set at shutdown: requests for the jobs module are refused */
    atomic_int busy;          /* requests handed to the jobs module and not yet answered */
    atomic_int inside;        /* requests being served on an HTTP thread */
    atomic_int *reload;              /* set by SIGHUP: load the TLS certificate again */
    struct addrs addrs;       /* connections per client address, over all threads */
};

/* One request, from its first callback to its completion. */
struct request {
    struct http *http;
    struct server *srv;     /* whose thread serves the connection */
    struct MHD_Connection *conn;
    int path;               /* index in routes, or -1 */
    struct conn *cn;        /* its connection's deadline */
    enum http_route route;
    int64_t start_us;       /* monotonic, for the latency metric */
    int status;             /* of the answer queued */
    char *body;             /* read so far, at most max_body_bytes */
    size_t len, cap;
    int too_large;
    int must_close;         /* the body cannot be framed: the connection ends with the answer */
    pthread_mutex_t mu;     /* guards the answer, which arrives on another thread */
    enum async_state state;
    int async_status;
    char *response;
    int counted;            /* the request is in http->busy */
    char method[8];         /* a compat route's */
    char *url;              /* a compat route's path, owned */
};

/* Starts tracking a new connection of s: its first request must arrive whole within
 * http.request_timeout_s. NULL when out of memory (it then has no deadline but the idle one). */
static struct conn *conn_note(struct server *s, int fd)
{
    struct conn *cn = calloc(1, sizeof(*cn));

    if (!cn)
        return NULL;
    cn->fd = fd;
    cn->deadline_ms = clock_mono_ms() + s->http->cfg->http.request_timeout_s * 1000;
    cn->next = s->list;
    if (s->list)
        s->list->prev = cn;
    s->list = cn;
    return cn;
}

static void conn_forget(struct server *s, struct conn *cn)
{
    if (!cn)
        return;
    if (cn->prev)
        cn->prev->next = cn->next;
    else
        s->list = cn->next;
    if (cn->next)
        cn->next->prev = cn->prev;
    free(cn);
}

/* A request of cn ended: the next one must have arrived whole within the keep-alive idle time
 * and http.request_timeout_s. */
static void conn_idle(const struct http *http, struct conn *cn)
{
    if (cn)
        cn->deadline_ms = clock_mono_ms() +
                          (http->cfg->http.connection_timeout_s + http->cfg->http.request_timeout_s) * 1000;
}

/* Ends the connections of s whose request did not arrive whole by its deadline: a client that
 * sends slowly or not at all loses its own connections, not everyone's slots. libmicrohttpd's
 * timeout alone restarts with every byte. At most once per SWEEP_MS. */
static void sweep(struct server *s)
{
    int64_t now = clock_mono_ms();

    if (now - s->swept_ms < SWEEP_MS)
        return;
    s->swept_ms = now;
    for (struct conn *cn = s->list; cn; cn = cn->next) {
        if (cn->deadline_ms && now > cn->deadline_ms) {
            cn->deadline_ms = 0;   /* once: libmicrohttpd closes it on its next read */
            (void)shutdown(cn->fd, SHUT_RDWR);
        }
    }
}

static const char *allowed(const struct request *req, char *buf, size_t len);

/* Queues text (taken, freed by MHD) as the answer of req; a 405 names the methods its path
 * takes in Allow (RFC 9110). */
static enum MHD_Result send_text(struct request *req, int status, char *text, const char *type)
{
    struct MHD_Response *r;
    enum MHD_Result ret;
    char allow[64];

    static char no_memory[] = "{\"code\":500,\"message\":\"out of memory\",\"data\":null}";

    if (!text)
        status = 500;
    req->status = status;
    r = text ? MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE)
             : MHD_create_response_from_buffer(strlen(no_memory), no_memory, MHD_RESPMEM_PERSISTENT);
    if (!r) {   /* out of memory: libmicrohttpd closes the connection */
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 405)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allowed(req, allow, sizeof(allow)));
    if (req->must_close)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    ret = MHD_queue_response(req->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_json(struct request *req, int status, char *text)
{
    return send_text(req, status, text, "application/json");
}

static enum MHD_Result send_error(struct request *req, int status, int code, const char *msg)
{
    return send_json(req, status, api_response(code, msg, NULL));
}

enum { METHOD_GET = 1, METHOD_POST = 2, METHOD_PUT = 4, METHOD_DELETE = 8 };

/* Every path, the methods it takes, and what a wrong one is told (NULL: the methods). */
static const struct {
    const char *path;
    enum http_route route;
    int methods;
    const char *wrong;
} routes[] = {
    { API_PREFIX "add", R_ADD, METHOD_POST, "add takes POST" },
    { API_PREFIX "add_batch", R_ADD_BATCH, METHOD_POST, "add_batch takes POST" },
    { API_PREFIX "get", R_GET, METHOD_GET | METHOD_POST, "get takes GET or POST" },
    { API_PREFIX "remove", R_REMOVE, METHOD_GET | METHOD_POST, "remove takes GET or POST" },
    { API_PREFIX "reschedule", R_RESCHEDULE, METHOD_GET | METHOD_POST, "reschedule takes GET or POST" },
    { "/delay-queue/api/claims", R_CLAIMS, METHOD_GET, "this path takes GET" },
    { "/delay-queue/api/claims/release", R_HAND_BACK, METHOD_POST, "this path takes POST" },
    { "/healthz", R_HEALTH, METHOD_GET, "this path takes GET" },
    { "/readyz", R_READY, METHOD_GET, "this path takes GET" },
    { "/metrics", R_METRICS, METHOD_GET, "this path takes GET" },
    { UI_PREFIX, R_UI, METHOD_GET, "the console takes GET" },
    { "/delay-queue/ui", R_UI, METHOD_GET, "the console takes GET" },
    { "/delay-queue/api/stats", R_STATS, METHOD_GET, "this path takes GET" },
    { OPENAPI_PATH, R_OPENAPI, METHOD_GET, "this path takes GET" },
    { API_PREFIX "pop", R_POP, METHOD_POST, "pop takes POST" },
    { API_PREFIX "finish", R_FINISH, METHOD_POST, "finish takes POST" },
    { API_PREFIX "release", R_RELEASE, METHOD_POST, "release takes POST" },
    { API_PREFIX "touch", R_TOUCH, METHOD_POST, "touch takes POST" },
    { API_PREFIX "bury", R_BURY, METHOD_POST, "bury takes POST" },
    { SCHEDULES_PATH, R_SCHEDULES, METHOD_GET, "this path takes GET" },
    { DEAD_PATH, R_DEAD, METHOD_GET, "this path takes GET" },
    /* (a wrong method is told the methods of the path itself, which differ below these) */
    { DEAD_PATH "/", R_DEAD, METHOD_GET | METHOD_POST, NULL },
    { SCHEDULES_PATH "/", R_SCHEDULES, METHOD_GET | METHOD_POST | METHOD_PUT | METHOD_DELETE, NULL },
    /* ouqiang/delay-queue's, with compat.ouqiang */
    { "/push", R_COMPAT, METHOD_GET | METHOD_POST, "this path takes POST" },
    { "/pop", R_COMPAT, METHOD_GET | METHOD_POST, "this path takes POST" },
    { "/finish", R_COMPAT, METHOD_GET | METHOD_POST, "this path takes POST" },
    { "/delete", R_COMPAT, METHOD_GET | METHOD_POST, "this path takes POST" },
    { "/get", R_COMPAT, METHOD_GET | METHOD_POST, "this path takes POST" },
    /* changsongl/delay-queue's, with compat.changsongl: /topic/<topic>/job[/<id>] */
    { COMPAT_TOPIC_PREFIX, R_COMPAT, METHOD_GET | METHOD_POST | METHOD_PUT | METHOD_DELETE,
      "this path takes GET, POST, PUT or DELETE" },
};

/* The methods req's path takes: a schedule or dead-letter path's own (those routes take
 * different methods below one prefix), else its route's, into buf. */
static const char *allowed(const struct request *req, char *buf, size_t len)
{
    static const struct { int bit; const char *name; } names[] = {
        { METHOD_GET, "GET" }, { METHOD_POST, "POST" }, { METHOD_PUT, "PUT" },
        { METHOD_DELETE, "DELETE" },
    };
    const char *own = NULL;
    size_t n = 0;

    buf[0] = '\0';
    if (req->path < 0)
        return buf;
    if (req->route == R_SCHEDULES && req->url)
        own = schedules_allow(req->url + strlen(SCHEDULES_PATH));
    else if (req->route == R_DEAD && req->url)
        own = dead_allow(req->url + strlen(DEAD_PATH));
    if (own)
        return own;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (routes[req->path].methods & names[i].bit)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", names[i].name);
    }
    return buf;
}

/* 1 for the routes the jobs module answers (suspended until it has): refused once draining. */
static int is_async(enum http_route route)
{
    switch (route) {
    case R_ADD: case R_ADD_BATCH: case R_RESCHEDULE: case R_GET: case R_REMOVE: case R_CLAIMS:
    case R_STATS: case R_POP: case R_FINISH: case R_RELEASE: case R_TOUCH: case R_BURY:
    case R_COMPAT: case R_SCHEDULES: case R_DEAD: case R_HAND_BACK:
        return 1;
    default:
        return 0;
    }
}

/* The index of url in routes, or -1 (also for a compat route whose switch is off). */
static int match(const struct config *cfg, const char *url)
{
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const char *path = routes[i].path;
        int prefix = path[strlen(path) - 1] == '/';   /* a route of paths below it */
        if (prefix ? strncmp(url, path, strlen(path)) != 0 : strcmp(url, path) != 0)
            continue;
        if (routes[i].route == R_COMPAT &&
            !(prefix ? cfg->compat.changsongl : cfg->compat.ouqiang))
            return -1;
        return (int)i;
    }
    return -1;
}

/* Compares in time independent of where the first difference is. */
static int token_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);

    for (size_t i = 0; i < lb; i++)
        diff |= (unsigned char)(a[i % (la ? la : 1)] ^ b[i]);
    return diff == 0;
}

/* Whether the request's bearer token is token (which is set). */
static int bears(struct MHD_Connection *conn, const char *token)
{
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);

    return h && strncasecmp(h, "Bearer ", 7) == 0 && token_equal(h + 7, token);   /* RFC 9110: any case */
}

/* Who may use a path: http.auth_token every one; http.read_token get, stats and claims;
 * http.metrics_token /metrics. A path no set token guards is open; /healthz and /readyz are. */
static int authorized(const struct http *http, struct MHD_Connection *conn, enum http_route route)
{
    const char *all = http->cfg->http.auth_token, *read = http->cfg->http.read_token,
               *metrics = http->cfg->http.metrics_token;

    switch (route) {
    case R_HEALTH:
    case R_READY:
    case R_UI:   /* the page: what it shows comes from the API, which asks for the token */
    case R_OPENAPI:   /* what the routes are is no secret */
        return 1;
    case R_METRICS:
        return !metrics[0] || bears(conn, metrics) || (all[0] && bears(conn, all));
    case R_GET:
    case R_STATS:
    case R_CLAIMS:
        return !all[0] || bears(conn, all) || (read[0] && bears(conn, read));
    default:
        return !all[0] || bears(conn, all);
    }
}

/* The Content-Length headers of a request: libmicrohttpd frames the body by the first. */
struct lengths {
    const char *first;
    int differ;             /* another one says otherwise */
};

static enum MHD_Result note_length(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value)
{
    struct lengths *l = cls;

    (void)kind;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) != 0)
        return MHD_YES;
    if (!l->first)
        l->first = value;
    else if (strcmp(value, l->first) != 0)
        l->differ = 1;
    return MHD_YES;
}

/* Whether two Content-Length headers disagree: where the body ends is then a guess, and a
 * proxy in front may guess otherwise (request smuggling). */
static int lengths_differ(struct MHD_Connection *conn)
{
    struct lengths l = { NULL, 0 };

    MHD_get_connection_values(conn, MHD_HEADER_KIND, note_length, &l);
    return l.differ;
}

/* A Transfer-Encoding other than chunked alone: libmicrohttpd reads only chunked bodies, and
 * would wait for a body it cannot frame. NULL when there is none or it is "chunked". */
static const char *foreign_coding(struct MHD_Connection *conn)
{
    const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_TRANSFER_ENCODING);
    size_t n;

    if (!te)
        return NULL;
    te += strspn(te, " \t");
    n = strlen(te);
    while (n > 0 && (te[n - 1] == ' ' || te[n - 1] == '\t'))
        n--;
    return n == 7 && strncasecmp(te, "chunked", 7) == 0 ? NULL : te;
}

/* Checks made before any body is read. Returns 0 to go on, or -1 when an answer was queued
 * (libmicrohttpd then reads no body and closes the connection after the answer). */
static int admit(struct request *req, const char *method, enum MHD_Result *ret)
{
    struct MHD_Connection *conn = req->conn;
    const char *cl, *te;
    char msg[128], allow[64];
    int is_get = strcmp(method, "GET") == 0, is_post = strcmp(method, "POST") == 0;
    int is_put = strcmp(method, "PUT") == 0, is_delete = strcmp(method, "DELETE") == 0;

    if (lengths_differ(conn)) {
        *ret = send_error(req, 400, API_BAD_REQUEST, "Content-Length headers disagree");
        return -1;
    }
    if ((te = foreign_coding(conn))) {
        snprintf(msg, sizeof(msg), "Transfer-Encoding '%.64s' is not supported: only chunked", te);
        req->must_close = 1;
        *ret = send_error(req, 501, API_NOT_IMPLEMENTED, msg);
        return -1;
    }
    if (req->route == R_OTHER) {
        *ret = send_error(req, 404, API_NOT_FOUND, "no such path");
        return -1;
    }
    /* The schedule and dead-letter routes' reads (GET) are the read token's, as get's. */
    if (!authorized(req->http, conn, (req->route == R_SCHEDULES || req->route == R_DEAD) &&
                                     strcmp(req->method, "GET") == 0 ? R_GET : req->route)) {
        *ret = send_error(req, 401, API_UNAUTHORIZED, "missing or wrong bearer token");
        return -1;
    }
    if (!((is_get && (routes[req->path].methods & METHOD_GET)) ||
          (is_post && (routes[req->path].methods & METHOD_POST)) ||
          (is_put && (routes[req->path].methods & METHOD_PUT)) ||
          (is_delete && (routes[req->path].methods & METHOD_DELETE)))) {
        if (!routes[req->path].wrong)
            snprintf(msg, sizeof(msg), "this path takes %s", allowed(req, allow, sizeof(allow)));
        *ret = send_error(req, 405, API_BAD_REQUEST,
                          routes[req->path].wrong ? routes[req->path].wrong : msg);
        return -1;
    }
    cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > (unsigned long long)req->http->cfg->http.max_body_bytes) {
        *ret = send_error(req, 413, API_TOO_LARGE, "request body is over http.max_body_bytes");
        return -1;
    }
    return 0;
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

/* The answer of the jobs module to req, from any thread. */
static void async_done(void *opaque, int status, char *response)
{
    struct request *req = opaque;
    struct MHD_Connection *conn = req->conn;
    struct server *srv = req->srv;
    int suspended;

    pthread_mutex_lock(&req->mu);
    req->async_status = status;
    req->response = response;
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

/* A query string value of req into *v (NULL when absent). -1 when it holds a NUL byte, which a
 * C string would cut short ("abc%00x" would name job abc). */
static int query_value(struct MHD_Connection *conn, const char *key, const char **v)
{
    size_t len = 0;

    *v = NULL;
    if (MHD_lookup_connection_value_n(conn, MHD_GET_ARGUMENT_KIND, key, strlen(key), v, &len) !=
        MHD_YES)
        *v = NULL;
    return *v && strlen(*v) != len ? -1 : 0;
}

/* A reschedule: from the body when it has one, else from the query string. */
static void start_reschedule(struct request *req)
{
    static const char *const keys[API_RESCHEDULE_ARGS] = { "job_id", "delay", "delay_ms",
                                                           "deliver_at_ms" };
    const char *query[API_RESCHEDULE_ARGS] = { NULL };
    char msg[64];

    for (int i = 0; i < API_RESCHEDULE_ARGS && req->len == 0; i++) {
        if (query_value(req->conn, keys[i], &query[i]) < 0) {
            snprintf(msg, sizeof(msg), "%s: holds a NUL byte", keys[i]);
            async_done(req, 400, api_response(API_BAD_REQUEST, msg, NULL));
            return;
        }
    }
    jobs_reschedule(req->http->jobs, req->body ? req->body : "", req->len, query, async_done, req);
}

/* The job_id of the query string into id. libmicrohttpd decodes %00 into the value, which a
 * C string would cut short: "abc%00x" named job abc. Returns 0, or -1 with e set. */
static int query_job_id(struct MHD_Connection *conn, char id[JOB_ID_MAX + 1], struct api_error *e)
{
    const char *v;

    if (query_value(conn, "job_id", &v) < 0)
        return api_fail(e, 400, API_BAD_REQUEST, "job_id: holds a NUL byte");
    return api_check_job_id(v, id, e);
}

/* A get or remove: the job id from the body, else from the query string. */
static void start_id(struct request *req)
{
    struct api_error e;
    char id[JOB_ID_MAX + 1];

    if (req->len > 0 ? api_parse_job_id(req->body, req->len, id, &e) < 0
                     : query_job_id(req->conn, id, &e) < 0)
        async_done(req, e.status, api_response(e.code, e.message, NULL));
    else if (req->route == R_GET)
        jobs_get(req->http->jobs, id, async_done, req);
    else
        jobs_remove(req->http->jobs, id, async_done, req);
}

/* A compat route: the request as its queue's clients send it. */
static void start_compat(struct request *req, const char *body)
{
    struct compat_request c = { .method = req->method, .path = req->url, .body = body,
                                .len = req->len };

    if (query_value(req->conn, "timeout", &c.timeout) < 0)
        c.timeout = "";
    compat_serve(req->http->jobs, req->http->cfg, &c, async_done, req);
}

/* The n query values named keys into vals (NULL when absent): 0, or -1 when one holds a NUL
 * byte (req answered 400). */
static int query_values(struct request *req, const char *const *keys, const char ***vals,
                        size_t n)
{
    char msg[64];

    for (size_t i = 0; i < n; i++) {
        if (query_value(req->conn, keys[i], vals[i]) < 0) {
            snprintf(msg, sizeof(msg), "%s: holds a NUL byte", keys[i]);
            async_done(req, 400, api_response(API_BAD_REQUEST, msg, NULL));
            return -1;
        }
    }
    return 0;
}

/* A schedule route: the request as schedules.h takes it. */
static void start_schedules(struct request *req, const char *body)
{
    struct schedules_request r = { .method = req->method, .path = req->url + strlen(SCHEDULES_PATH),
                                   .body = body, .len = req->len };
    static const char *const keys[] = { "n", "from_ms", "limit", "after" };
    const char **vals[] = { &r.n, &r.from_ms, &r.limit, &r.after };

    if (query_values(req, keys, vals, 4) == 0)
        schedules_serve(req->http->schedules, &r, async_done, req);
}

/* A dead-letter route: the request as dead.h takes it. */
static void start_dead(struct request *req, const char *body)
{
    struct dead_request r = { .method = req->method, .path = req->url + strlen(DEAD_PATH),
                              .body = body, .len = req->len };
    static const char *const keys[] = { "limit", "before", "topic", "reason" };
    const char **vals[] = { &r.limit, &r.before, &r.topic, &r.reason };

    if (query_values(req, keys, vals, 4) == 0)
        dead_serve(req->http->dead, &r, async_done, req);
}

/* Hands the request to the jobs module, which answers it through async_done. */
static void start(struct request *req)
{
    const char *body = req->body ? req->body : "";

    switch (req->route) {
    case R_ADD_BATCH:
        jobs_add_batch(req->http->jobs, body, req->len, async_done, req);
        break;
    case R_RESCHEDULE:
        start_reschedule(req);
        break;
    case R_GET:
    case R_REMOVE:
        start_id(req);
        break;
    case R_CLAIMS:
        jobs_claims(req->http->jobs, async_done, req);
        break;
    case R_STATS:
        jobs_stats(req->http->jobs, async_done, req);
        break;
    case R_POP:
        jobs_pop(req->http->jobs, body, req->len, async_done, req);
        break;
    case R_COMPAT:
        start_compat(req, body);
        break;
    case R_SCHEDULES:
        start_schedules(req, body);
        break;
    case R_DEAD:
        start_dead(req, body);
        break;
    case R_HAND_BACK:
        jobs_hand_back(req->http->jobs, body, req->len, async_done, req);
        break;
    case R_FINISH:
    case R_RELEASE:
    case R_TOUCH:
    case R_BURY:
        jobs_pull_op(req->http->jobs, req->route == R_FINISH ? API_FINISH
                                      : req->route == R_RELEASE ? API_RELEASE
                                      : req->route == R_TOUCH ? API_TOUCH : API_BURY,
                     body, req->len, async_done, req);
        break;
    default:
        jobs_add(req->http->jobs, body, req->len, async_done, req);
        break;
    }
}

/* A request for the jobs module: answered at once, or suspended until async_done. */
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
            return send_error(req, 503, API_UNAVAILABLE, "shutting down");
        }
        start(req);
    }
    pthread_mutex_lock(&req->mu);
    if (req->state == ASYNC_DONE) {
        ret = send_json(req, req->async_status, req->response);
        req->response = NULL;
        async_uncount(req);
    } else if (req->state == ASYNC_NEW) {
        /* Answered later by async_done, which resumes the connection. */
        req->state = ASYNC_SUSPENDED;
        MHD_suspend_connection(req->conn);
    }
    pthread_mutex_unlock(&req->mu);
    return ret;
}

static enum MHD_Result serve_ready(struct request *req)
{
    char err[256], msg[320];

    if (jobs_ready(req->http->jobs, err, sizeof(err)) == 0) {
        snprintf(msg, sizeof(msg), "ready%s%s", err[0] ? "; warning: " : "", err);
        return send_json(req, 200, api_response(API_OK, msg, NULL));
    }
    /* Open to anyone: with a token guarding the API, why is for the log, not the caller. */
    if (req->http->cfg->http.auth_token[0]) {
        log_info("not ready: %s", err);
        return send_error(req, 503, API_UNAVAILABLE, "not ready");
    }
    snprintf(msg, sizeof(msg), "not ready: %s", err);
    return send_error(req, 503, API_UNAVAILABLE, msg);
}

/* A file of the console, from the binary: the page may run only its own scripts and styles
 * and talk only to its own origin. /delay-queue/ui itself is sent on to /delay-queue/ui/. */
static enum MHD_Result serve_ui(struct request *req)
{
    struct MHD_Response *r;
    struct ui_file f;
    enum MHD_Result ret;
    int moved = strcmp(req->url, UI_PREFIX) != 0 && strncmp(req->url, UI_PREFIX,
                                                             strlen(UI_PREFIX)) != 0;

    if (!moved && ui_find(req->url + strlen(UI_PREFIX), &f) < 0)
        return send_error(req, 404, API_NOT_FOUND, "no such console file");
    r = moved ? MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT)
              : MHD_create_response_from_buffer(f.len, (void *)f.data, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    req->status = moved ? 308 : 200;
    if (moved) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_LOCATION, UI_PREFIX);
    } else {
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, f.content_type);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(r, "Content-Security-Policy",
                                "default-src 'self'; img-src 'self' data:; base-uri 'none'; "
                                "form-action 'none'; frame-ancestors 'none'");
        MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    }
    ret = MHD_queue_response(req->conn, req->status, r);
    MHD_destroy_response(r);
    return ret;
}

/* The API's description, docs/openapi.yaml as JSON, embedded beside the console's files. */
static enum MHD_Result serve_openapi(struct request *req)
{
    struct MHD_Response *r;
    struct ui_file f;
    enum MHD_Result ret;

    if (ui_find(UI_OPENAPI, &f) < 0)
        return send_error(req, 404, API_NOT_FOUND, "no API description was built in");
    r = MHD_create_response_from_buffer(f.len, (void *)f.data, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    req->status = 200;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, f.content_type);
    ret = MHD_queue_response(req->conn, req->status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result route(struct request *req)
{
    if (req->too_large)
        return send_error(req, 413, API_TOO_LARGE, "request body is over http.max_body_bytes");
    if (is_async(req->route))
        return serve_async(req);
    switch (req->route) {
    case R_HEALTH:
        return send_json(req, 200, api_response(API_OK, "ok", NULL));
    case R_READY:
        return serve_ready(req);
    case R_METRICS:
        jobs_stats_gauges(req->http->jobs);
        return send_text(req, 200, metrics_render(), "text/plain; version=0.0.4");
    case R_UI:
        return serve_ui(req);
    case R_OPENAPI:
        return serve_openapi(req);
    default:   /* R_OTHER; the others are served above */
        break;
    }
    return send_error(req, 404, API_NOT_FOUND, "no such path");
}

/* Serves req. Once draining, a request that would call into the jobs module is refused
 * (serve_async sees to that itself, and the answers of those begun still go out), so that none
 * does once it is freed. */
static enum MHD_Result serve(struct request *req)
{
    struct http *http = req->http;
    int async = is_async(req->route);
    enum MHD_Result ret;

    /* inside first, then the flag: http_drain waits for every request that saw it clear */
    atomic_fetch_add(&http->inside, 1);
    if (atomic_load(&http->draining) && !async && req->route != R_HEALTH)
        ret = send_error(req, 503, API_UNAVAILABLE, "shutting down");
    else
        ret = route(req);
    atomic_fetch_sub(&http->inside, 1);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    struct request *req = *con_cls;
    enum MHD_Result ret = MHD_YES;

    (void)version;
    if (!req) {
        if (!(req = calloc(1, sizeof(*req))))
            return MHD_NO;
        req->srv = cls;
        req->http = req->srv->http;
        req->conn = conn;
        req->path = match(req->http->cfg, url);
        req->cn = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT)->socket_context;
        req->route = req->path < 0 ? R_OTHER : routes[req->path].route;
        if (req->route == R_COMPAT || req->route == R_SCHEDULES || req->route == R_DEAD ||
            req->route == R_UI) {
            snprintf(req->method, sizeof(req->method), "%s", method);
            if (!(req->url = strdup(url)))
                req->route = R_OTHER;   /* out of memory: answered as an unknown path */
        }
        req->start_us = clock_mono_us();
        pthread_mutex_init(&req->mu, NULL);
        *con_cls = req;
        admit(req, method, &ret);
        return ret;
    }
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
 * in MHD_stop_daemon, after jobs_free has answered every add: no add still refers to req. */
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
        conn_forget(s, *socket_context);
        ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && (len = addr_key(ci->client_addr, key)))
            addrs_give(&s->http->addrs, key, len);
        return;
    }
    s->conns++;
    ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    ev.data.fd = ci->connect_fd;
    *socket_context = conn_note(s, ci->connect_fd);
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
        sweep(s);
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

struct http *http_new(const struct config *cfg, struct jobs *jobs, struct schedules *schedules,
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

    if (!http || addrs_init(&http->addrs, (unsigned)cfg->http.max_connections,
                            (unsigned)cfg->http.max_connections_per_ip) < 0) {
        snprintf(err, errlen, "out of memory");
        free(http);
        return NULL;
    }
    if (!(http->srv = calloc((size_t)n, sizeof(*http->srv))) ||
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
    jobs_stop_waiting(http->jobs);   /* pops waiting for a job are answered now, with none */
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
    free(http);
}

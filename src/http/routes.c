/* routes: the paths delayqd serves, part of http. The route table (each path, the methods it
 * takes, what a wrong one is told), who may use each path (the bearer tokens), the checks made
 * before a body is read, and each route's handler: the jobs module's routes are handed on to be
 * answered later through http_answered (the compat routes through http_done), the others are
 * answered at once. The contract is in include/http/http.h, the inside in http_link.h. */
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/api.h"
#include "dead/dead.h"
#include "http/compat.h"
#include "http/http_link.h"
#include "http/ui.h"
#include "lib/netaddr.h"
#include "lib/log.h"
#include "schedules/schedules.h"

#define LOG_MODULE "http"
#define API_PREFIX "/delay-queue/api/jobs/"
#define SCHEDULES_PATH "/delay-queue/api/schedules"
#define DEAD_PATH "/delay-queue/api/dead"
#define PULL_TOPIC_PATH "/delay-queue/api/pull/"   /* /{topic}, /{topic}/jobs, /pause, /resume */
#define OPENAPI_PATH "/delay-queue/api/openapi.json"   /* the API's description, OpenAPI 3.1 */

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
    { PULL_TOPIC_PATH, R_PULL_TOPIC, METHOD_GET | METHOD_POST, NULL },
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

/* Those routes take different methods below one prefix: a schedule or dead-letter path is
 * told its own. */
const char *routes_allowed(const struct request *req, char *buf, size_t len)
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
    else if (req->route == R_PULL_TOPIC && req->url)
        own = api_pull_topic_allow(req->url + strlen(PULL_TOPIC_PATH));
    if (own)
        return own;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (routes[req->path].methods & names[i].bit)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", names[i].name);
    }
    return buf;
}

const char *const routes_labels[HTTP_ROUTES] = {
    [R_ADD] = "add", [R_GET] = "get", [R_REMOVE] = "remove", [R_CLAIMS] = "claims",
    [R_ADD_BATCH] = "add_batch", [R_RESCHEDULE] = "reschedule", [R_STATS] = "stats",
    [R_POP] = "pop", [R_FINISH] = "finish", [R_RELEASE] = "release", [R_TOUCH] = "touch",
    [R_BURY] = "bury", [R_COMPAT] = "compat", [R_SCHEDULES] = "schedules",
    [R_DEAD] = "dead", [R_HAND_BACK] = "claims_release", [R_PULL_TOPIC] = "pull_topic", [R_UI] = "ui", [R_OPENAPI] = "openapi",
    [R_HEALTH] = "healthz", [R_READY] = "readyz", [R_METRICS] = "metrics", [R_OTHER] = "other",
};

int routes_is_async(enum http_route route)
{
    switch (route) {
    case R_ADD: case R_ADD_BATCH: case R_RESCHEDULE: case R_GET: case R_REMOVE: case R_CLAIMS:
    case R_STATS: case R_POP: case R_FINISH: case R_RELEASE: case R_TOUCH: case R_BURY:
    case R_COMPAT: case R_SCHEDULES: case R_DEAD: case R_HAND_BACK: case R_PULL_TOPIC:
        return 1;
    default:
        return 0;
    }
}

int routes_match(const struct config *cfg, const char *url, enum http_route *route)
{
    *route = R_OTHER;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        const char *path = routes[i].path;
        int prefix = path[strlen(path) - 1] == '/';   /* a route of paths below it */
        if (prefix ? strncmp(url, path, strlen(path)) != 0 : strcmp(url, path) != 0)
            continue;
        if (routes[i].route == R_COMPAT &&
            !(prefix ? cfg->compat.changsongl : cfg->compat.ouqiang))
            return -1;
        *route = routes[i].route;
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

/* 1 when the client of conn is in one of compat.networks. */
static int compat_client(const struct config *cfg, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci;
    struct netaddr a;
    struct netaddr_net net;
    char err[128];

    if (!cfg->compat.nnetworks ||
        !(ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS)) ||
        netaddr_of_sockaddr(ci->client_addr, ci->client_addr->sa_family == AF_INET6
                                                 ? sizeof(struct sockaddr_in6)
                                                 : sizeof(struct sockaddr_in), &a) < 0)
        return 0;
    for (int i = 0; i < cfg->compat.nnetworks; i++)
        if (netaddr_net_parse(cfg->compat.networks[i], &net, err, sizeof(err)) == 0 &&
            netaddr_net_contains(&net, &a))
            return 1;
    return 0;
}

/* Who may use a path: http.auth_token every one; http.read_token get, stats, claims (and, by
 * routes_admit, the GETs of schedules and dead letters);
 * http.metrics_token /metrics; the clients of compat.networks the compatibility routes, whose
 * clients send no token. A path no set token guards is open; /healthz and /readyz are. */
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
    case R_COMPAT:
        return !all[0] || bears(conn, all) || compat_client(http->cfg, conn);
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

int routes_admit(struct request *req, const char *method, enum MHD_Result *ret)
{
    struct MHD_Connection *conn = req->conn;
    const char *cl, *te;
    char msg[128], allow[64];
    int is_get = strcmp(method, "GET") == 0, is_post = strcmp(method, "POST") == 0;
    int is_put = strcmp(method, "PUT") == 0, is_delete = strcmp(method, "DELETE") == 0;

    if (lengths_differ(conn)) {
        *ret = http_send_error(req, 400, API_BAD_REQUEST, "Content-Length headers disagree");
        return -1;
    }
    if ((te = foreign_coding(conn))) {
        snprintf(msg, sizeof(msg), "Transfer-Encoding '%.64s' is not supported: only chunked", te);
        req->must_close = 1;
        *ret = http_send_error(req, 501, API_NOT_IMPLEMENTED, msg);
        return -1;
    }
    if (req->route == R_OTHER) {
        *ret = http_send_error(req, 404, API_NOT_FOUND, "no such path");
        return -1;
    }
    /* The schedule and dead-letter routes' reads (GET) are the read token's, as get's. */
    if (!authorized(req->http, conn, (req->route == R_SCHEDULES || req->route == R_DEAD) &&
                                     strcmp(req->method, "GET") == 0 ? R_GET : req->route)) {
        *ret = http_send_error(req, 401, API_UNAUTHORIZED, "missing or wrong bearer token");
        return -1;
    }
    req->hide_secrets = req->http->cfg->http.auth_token[0] &&
                        !bears(conn, req->http->cfg->http.auth_token);
    if (!((is_get && (routes[req->path].methods & METHOD_GET)) ||
          (is_post && (routes[req->path].methods & METHOD_POST)) ||
          (is_put && (routes[req->path].methods & METHOD_PUT)) ||
          (is_delete && (routes[req->path].methods & METHOD_DELETE)))) {
        if (!routes[req->path].wrong)
            snprintf(msg, sizeof(msg), "this path takes %s", routes_allowed(req, allow, sizeof(allow)));
        *ret = http_send_error(req, 405, API_BAD_REQUEST,
                          routes[req->path].wrong ? routes[req->path].wrong : msg);
        return -1;
    }
    cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > (unsigned long long)req->http->cfg->http.max_body_bytes) {
        *ret = http_send_error(req, 413, API_TOO_LARGE, "request body is over http.max_body_bytes");
        return -1;
    }
    return 0;
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
            http_done(req, 400, api_response(API_BAD_REQUEST, msg, NULL));
            return;
        }
    }
    intake_reschedule(req->http->jobs, req->body ? req->body : "", req->len, query,
                      http_answered, req);
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
        http_done(req, e.status, api_response(e.code, e.message, NULL));
    else if (req->route == R_GET)
        intake_get(req->http->jobs, id, http_answered, req);
    else
        intake_remove(req->http->jobs, id, http_answered, req);
}

/* A compat route: the request as its queue's clients send it. */
static void start_compat(struct request *req, const char *body)
{
    struct compat_request c = { .method = req->method, .path = req->url, .body = body,
                                .len = req->len };

    if (query_value(req->conn, "timeout", &c.timeout) < 0)
        c.timeout = "";
    compat_serve(req->http->jobs, req->http->cfg, &c, http_done_as, http_wanted, req);
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
            http_done(req, 400, api_response(API_BAD_REQUEST, msg, NULL));
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
        schedules_serve(req->http->schedules, &r, http_answered, req);
}

/* A pull topic's route: the request as intake.h takes it. */
static void start_pull_topic(struct request *req)
{
    struct intake_topic_request r = { .path = req->url + strlen(PULL_TOPIC_PATH),
                                      .post = strcmp(req->method, "POST") == 0 };
    static const char *const keys[] = { "state", "limit", "after" };
    const char **vals[] = { &r.state, &r.limit, &r.after };

    if (query_values(req, keys, vals, 3) == 0)
        intake_pull_topic(req->http->jobs, &r, http_answered, req);
}

/* A dead-letter route: the request as dead.h takes it. */
static void start_dead(struct request *req, const char *body)
{
    struct dead_request r = { .method = req->method, .path = req->url + strlen(DEAD_PATH),
                              .body = body, .len = req->len };
    static const char *const keys[] = { "limit", "before", "topic", "reason" };
    const char **vals[] = { &r.limit, &r.before, &r.topic, &r.reason };

    if (query_values(req, keys, vals, 4) == 0)
        dead_serve(req->http->dead, &r, http_answered, req);
}

void routes_start(struct request *req)
{
    const char *body = req->body ? req->body : "";

    switch (req->route) {
    case R_ADD_BATCH:
        intake_add_batch(req->http->jobs, body, req->len, http_answered, req);
        break;
    case R_RESCHEDULE:
        start_reschedule(req);
        break;
    case R_GET:
    case R_REMOVE:
        start_id(req);
        break;
    case R_CLAIMS:
        intake_claims(req->http->jobs, http_answered, req);
        break;
    case R_STATS:
        intake_stats(req->http->jobs, http_answered, req);
        break;
    case R_POP:
        intake_pop(req->http->jobs, body, req->len, http_answered, http_wanted, req);
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
        intake_hand_back(req->http->jobs, body, req->len, http_answered, req);
        break;
    case R_PULL_TOPIC:
        start_pull_topic(req);
        break;
    case R_FINISH:
    case R_RELEASE:
    case R_TOUCH:
    case R_BURY:
        intake_pull_op(req->http->jobs, req->route == R_FINISH ? API_FINISH
                                      : req->route == R_RELEASE ? API_RELEASE
                                      : req->route == R_TOUCH ? API_TOUCH : API_BURY,
                     body, req->len, http_answered, req);
        break;
    default:
        intake_add(req->http->jobs, body, req->len, http_answered, req);
        break;
    }
}

static enum MHD_Result serve_ready(struct request *req)
{
    char err[256], msg[320];

    if (intake_ready(req->http->jobs, err, sizeof(err)) == 0) {
        snprintf(msg, sizeof(msg), "ready%s%s", err[0] ? "; warning: " : "", err);
        return http_send_json(req, 200, api_response(API_OK, msg, NULL));
    }
    /* Open to anyone: with a token guarding the API, why is for the log, not the caller. */
    if (req->http->cfg->http.auth_token[0]) {
        log_info("not ready: %s", err);
        return http_send_error(req, 503, API_UNAVAILABLE, "not ready");
    }
    snprintf(msg, sizeof(msg), "not ready: %s", err);
    return http_send_error(req, 503, API_UNAVAILABLE, msg);
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
        return http_send_error(req, 404, API_NOT_FOUND, "no such console file");
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

/* The API's description for this instance's config (openapi.h), made at start. */
static enum MHD_Result serve_openapi(struct request *req)
{
    struct MHD_Response *r;
    enum MHD_Result ret;

    r = MHD_create_response_from_buffer(req->http->openapi_len, req->http->openapi,
                                        MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    req->status = 200;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    ret = MHD_queue_response(req->conn, req->status, r);
    MHD_destroy_response(r);
    return ret;
}

enum MHD_Result routes_serve(struct request *req)
{
    switch (req->route) {
    case R_HEALTH:
        return http_send_json(req, 200, api_response(API_OK, "ok", NULL));
    case R_READY:
        return serve_ready(req);
    case R_METRICS:
        intake_stats_gauges(req->http->jobs);
        return http_send_text(req, 200, metrics_render(), "text/plain; version=0.0.4");
    case R_UI:
        return serve_ui(req);
    case R_OPENAPI:
        return serve_openapi(req);
    default:   /* R_OTHER; the others are handed on by routes_start */
        break;
    }
    return http_send_error(req, 404, API_NOT_FOUND, "no such path");
}

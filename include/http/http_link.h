/* http_link: the inside of http, shared by its two files and nothing else: http.c (the server:
 * its threads and daemons, connections and their deadlines, the per-address limit, the life of
 * a request, its suspension until the answer, and the answering) and routes.c (the route table,
 * who may use each path, the checks made before a body is read, and each route's handler).
 * http.c asks routes.c what a request is and hands it over; routes.c answers through http.c's
 * send and done functions. Callers use include/http/http.h. */
#ifndef DQ_HTTP_LINK_H
#define DQ_HTTP_LINK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

#include "core/answer.h"
#include "core/config.h"
#include "core/metrics.h"
#include "http/addrs.h"
#include "http/http.h"
#include "intake/intake.h"

/* The routes, as the metrics count requests by (their labels: routes_labels). */
enum http_route { R_ADD, R_GET, R_REMOVE, R_CLAIMS, R_HEALTH, R_READY, R_METRICS, R_ADD_BATCH,
                  R_RESCHEDULE, R_STATS, R_POP, R_FINISH, R_RELEASE, R_TOUCH, R_BURY, R_COMPAT,
                  R_SCHEDULES, R_DEAD, R_HAND_BACK, R_PULL_TOPIC, R_UI, R_OPENAPI, R_OTHER,
                  HTTP_ROUTES };

/* Each route's label in delayq_http_requests_total, HTTP_ROUTES of them (routes.c). */
extern const char *const routes_labels[HTTP_ROUTES];

struct server;   /* one HTTP thread and its daemon (http.c) */
struct conn;     /* a connection and its deadline (conns.h) */

struct http {
    const struct config *cfg;
    struct intake *jobs;
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
    char *openapi;            /* the API's description for this config (openapi.h) */
    size_t openapi_len;
};

/* A request answered by the jobs module: from queued, to suspended, to answered. */
enum async_state { ASYNC_NEW, ASYNC_SUSPENDED, ASYNC_DONE };

/* One request, from its first callback to its completion. */
struct request {
    struct http *http;
    struct server *srv;     /* whose thread serves the connection */
    struct MHD_Connection *conn;
    int fd;                 /* its connection's socket, watched while it waits suspended */
    int begun;              /* its headers were read, and it was routed */
    int nul_in_path;        /* its path decodes to a NUL byte: refused */
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
    const char *response_type;   /* its Content-Type (static); NULL: application/json */
    int counted;            /* the request is in http->busy */
    int hide_secrets;       /* answered to the read token: no callback header value shows */
    char method[8];         /* a compat route's */
    char *url;              /* a compat route's path, owned */
};

/* The answering (http.c). */

/* Queues text (taken, freed by MHD; NULL: out of memory, answered 500) as the answer of req,
 * with Content-Type type; a 405 names the methods its path takes in Allow (RFC 9110). MHD_NO
 * when out of memory (libmicrohttpd closes the connection). */
enum MHD_Result http_send_text(struct request *req, int status, char *text, const char *type);
/* As http_send_text, as application/json. */
enum MHD_Result http_send_json(struct request *req, int status, char *text);
/* An API error answer: status, the API's code and msg (copied). */
enum MHD_Result http_send_error(struct request *req, int status, int code, const char *msg);
/* Answers a request handed on by routes_start (opaque: the request) with status and the JSON
 * text response, which it takes, from any thread, and resumes the connection when it waits
 * suspended. */
void http_done(void *opaque, int status, char *response);
/* http_done with the Content-Type type (a string that outlives the request). */
void http_done_as(void *opaque, int status, char *response, const char *type);
/* The same for a module's answer (core/answer.h), rendered here as the API's JSON. */
void http_answered(void *opaque, const struct answer *a);
/* The answer_wanted_fn of a request handed on (opaque: the request): 0 once its client has
 * closed its connection (a suspended connection is not watched by libmicrohttpd). */
int http_wanted(void *opaque);

/* The routes (routes.c). */

/* The index in the route table of url, its route into *route; or -1 and R_OTHER (also for a
 * compat route whose switch is off). */
int routes_match(const struct config *cfg, const char *url, enum http_route *route);
/* The methods req's path takes, as an Allow header lists them: a schedule or dead-letter
 * path's own, else its route's written into buf (len bytes; "" for no route). */
const char *routes_allowed(const struct request *req, char *buf, size_t len);
/* 1 for the routes the jobs module answers (suspended until it has): refused once draining. */
int routes_is_async(enum http_route route);
/* Checks made before any body is read: framing, path, token, method, Content-Length. 0 to go
 * on, or -1 when an answer was queued (*ret: its result; libmicrohttpd then reads no body and
 * closes the connection after it). */
int routes_admit(struct request *req, const char *method, enum MHD_Result *ret);
/* Hands req, whole, to the module that answers it, which calls http_done exactly once (at
 * once for a bad request). For a route routes_is_async takes. */
void routes_start(struct request *req);
/* Answers req, whole, on the HTTP thread: for a route routes_is_async does not take. */
enum MHD_Result routes_serve(struct request *req);

#endif

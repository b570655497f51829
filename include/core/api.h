/* api: the JSON of the HTTP API (requests in, responses out), wire compatible with
 * go-delayqueue. Pure logic: jansson only. */
#ifndef DQ_API_H
#define DQ_API_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/job.h"
#include "core/levels.h"

/* Response codes. 0, 400 and 10001-10004 are go-delayqueue's; the others equal the HTTP status. */
enum api_code {
    API_OK = 0,
    API_BAD_REQUEST = 400,
    API_UNAUTHORIZED = 401,
    API_NOT_FOUND = 404,
    API_CONFLICT = 409,
    API_TOO_LARGE = 413,
    API_NOT_IMPLEMENTED = 501,
    API_UNAVAILABLE = 503,
    API_BAD_DELAY = 10001,
    API_ADD_FAILED = 10002,
    API_REMOVE_FAILED = 10003,
    API_GET_FAILED = 10004,
    API_RESCHEDULE_FAILED = 10005,
};

struct api_error {
    int status;            /* HTTP status */
    int code;              /* enum api_code */
    char message[256];
};

struct api_limits {
    const struct levels *levels;   /* a job may not target a delay topic */
    const char *dlq_topic;         /* nor the dead-letter topic */
    int64_t max_delay_ms;
    const struct config_endpoint *endpoints;   /* the names a callback may give (nendpoints) */
    int nendpoints;
};

/* Reads a job's callback from its JSON text (a dq-callback header; the add's "callback" field
 * has the same form) into *out (caller frees with job_callback_free, also on error). 0, or -1
 * with what is wrong in e. */
int api_parse_callback(const char *text, size_t len, const struct api_limits *lim,
                       struct job_callback **out, struct api_error *e);

/* A callback as JSON text in the form api_parse_callback reads (for a dead letter's
 * dq-callback, so that it can be added again as it was): malloc'd, NULL when out of memory. */
char *api_callback_json(const struct job_callback *cb);

/* 1 when body (len bytes) is a JSON object or array: it is called back with Content-Type
 * application/json. */
int api_is_json(const char *body, size_t len);

/* Sets e and returns -1, so that error paths read `return api_fail(e, ...)`. */
int api_fail(struct api_error *e, int status, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Parses an add request into out (caller releases it with job_release, also on error).
 * Sets out->due_ms, delay_ms and created_ms from now_ms. *id_given says whether the client
 * named the id; when it did not, out->id is empty. Returns 0, or -1 with e set. */
int api_parse_add(const char *body, size_t len, const struct api_limits *lim, int64_t now_ms,
                  struct job *out, int *id_given, struct api_error *e);

/* One job of an add_batch request: parsed, or why not. */
struct api_batch_job {
    struct job job;             /* when ok: as api_parse_add fills it */
    int id_given;
    int ok;
    struct api_error e;         /* when !ok */
};

/* Parses {"jobs": [<add body>, ...]}, each job on its own, into *out (n of them; caller frees
 * with api_batch_free, also on error). Returns 0 when the batch itself was read (a job that is
 * bad has ok 0 and says why), or -1 with e set: not JSON, no jobs array, an empty one (400), or
 * more than max_jobs (413). */
int api_parse_batch(const char *body, size_t len, size_t max_jobs, const struct api_limits *lim,
                    int64_t now_ms, struct api_batch_job **out, size_t *n, struct api_error *e);
void api_batch_free(struct api_batch_job *jobs, size_t n);

/* What one job of a batch was answered, as a single add would have been. */
struct api_job_answer {
    int status;                 /* HTTP status */
    int code;                   /* enum api_code */
    char message[384];
    char job_id[JOB_ID_MAX + 1];   /* "" when none is known */
    int fresh;                  /* 1: the add made the job; 0: failed, or the job was there */
};

/* data of an add_batch answer: {"added": n, "already": n, "failed": n, "jobs": [{"status",
 * "code", "message", "job_id"}, ...]} in the order of the request: "added" counts the jobs the
 * batch made, "already" the ones it found added before (answered code 0 too), "failed" the
 * others. Returns a jansson json_t * as void *. */
void *api_batch_data(const struct api_job_answer *answers, size_t n);

/* Parses {"job_id": "..."} into out. Returns 0, or -1 with e set. */
int api_parse_job_id(const char *body, size_t len, char out[JOB_ID_MAX + 1], struct api_error *e);

/* Parses a reschedule request {"job_id", and one of "delay", "delay_ms", "deliver_at_ms"} (as
 * on add) into id and *due_ms (epoch ms). Returns 0, or -1 with e set. */
int api_parse_reschedule(const char *body, size_t len, const struct api_limits *lim,
                         int64_t now_ms, char id[JOB_ID_MAX + 1], int64_t *due_ms,
                         struct api_error *e);

/* The same from a query string: the values of job_id, delay, delay_ms and deliver_at_ms, in
 * that order (NULL: absent). */
#define API_RESCHEDULE_ARGS 4
int api_reschedule_query(const char *const query[API_RESCHEDULE_ARGS],
                         const struct api_limits *lim, int64_t now_ms, char id[JOB_ID_MAX + 1],
                         int64_t *due_ms, struct api_error *e);

/* data of a reschedule answer: {"job_id", "exec_time", "exec_time_ms"}. */
void *api_rescheduled_data(const char *id, int64_t due_ms);

/* Validates a job id that came in a query string. Returns 0, or -1 with e set. */
int api_check_job_id(const char *id, char out[JOB_ID_MAX + 1], struct api_error *e);

#define API_POP_WAIT_MAX_MS 180000   /* a pop waits 3 minutes at most (ouqiang's hold is 180 s) */
#define API_RECEIPT_MAX 300          /* longer receipts are none of delayqd's */
#define API_REASON_MAX 400           /* a bury's reason, as kept and sent in dq-error */

#define API_POP_TOPICS_MAX 16        /* topics one pop may name (the first with a job serves it) */

/* A pop request {"topic", "wait_ms" (0..API_POP_WAIT_MAX_MS, default 0), "ttr" | "ttr_ms"
 * (default 0: the job's own or the config's), "max" (1..100, default 1)}. The compatibility
 * routes may name several topics, tried in their order. */
struct api_pop {
    char topics[API_POP_TOPICS_MAX][TOPIC_NAME_MAX + 1];
    int ntopics;
    int64_t wait_ms;
    int64_t ttr_ms;
    int max;
};
int api_parse_pop(const char *body, size_t len, const struct api_limits *lim, struct api_pop *out,
                  struct api_error *e);

/* What a worker does with a job it popped. */
enum api_verb { API_FINISH, API_RELEASE, API_TOUCH, API_BURY };

/* A finish, release, touch or bury request {"job_id", "receipt"}, with release's "delay" |
 * "delay_ms" (default 0: ready now), touch's "ttr" | "ttr_ms" (default 0: the config's) and
 * bury's "reason" (optional). */
struct api_pull_op {
    char id[JOB_ID_MAX + 1];
    char receipt[API_RECEIPT_MAX + 1];
    int64_t delay_ms;
    int64_t ttr_ms;
    char reason[API_REASON_MAX + 1];
};
int api_parse_pull_op(const char *body, size_t len, enum api_verb verb,
                      const struct api_limits *lim, struct api_pull_op *out, struct api_error *e);

/* One job a pop hands out. */
struct api_popped {
    const struct job *job;
    int64_t attempt;
    const char *receipt;
    int64_t until_ms;           /* epoch ms: reserved until then */
};

/* data of a pop answer: {"jobs": [{"id", "topic", "body", "key", "headers", "due_ms",
 * "attempt", "receipt", "reserved_until_ms"}, ...]}. */
void *api_pop_data(const struct api_popped *jobs, size_t n);

/* data of a finish, release, touch or bury answer: {"job_id", "state"[, "reserved_until_ms"]}
 * (until_ms < 0: left out). */
void *api_pull_op_data(const char *id, const char *state, int64_t until_ms);

/* Adds a pull job's "pull": {"state", "attempt", "reserved_until_ms"} to the data of a get
 * answer (data: api_job_data's; until_ms < 0: null), whose "state" becomes the pull state:
 * ready, reserved, finished, dead-letter (on its way there), dead or removed. */
void api_job_pull_state(void *data, const char *state, int64_t attempt, int64_t until_ms);

/* Adds topic's counts to the "pull" object of a stats answer's data (made at the first):
 * "pull": {topic: {"ready": n, "reserved": n}, ...}. */
/* Adds "callbacks": {"waiting_for_retry": waiting} to a stats answer. */
void api_stats_callbacks(void *data, int64_t waiting);
/* Adds "schedules": {"count"} to a stats answer's data. */
void api_stats_schedules(void *data, int64_t count);
/* {"redis": {"maxmemory_policy" (null when not known), "evicts"}}: an evicting Redis drops job
 * records at maxmemory. */
void api_stats_redis(void *data, const char *policy, int evicts);

void api_stats_pull(void *data, const char *topic, int64_t ready, int64_t reserved);

/* Builds {"code":..,"message":..,"data":..}; takes ownership of data (may be NULL for null).
 * Returns a malloc'd NUL-terminated string (caller frees), or NULL when out of memory. */
char *api_response(int code, const char *message, void *data);

/* Frees data made for api_response that will not be answered. Safe on NULL. */
void api_data_free(void *data);

/* A query value v (NULL: absent, *out left as it is) as a decimal integer from lo to hi into
 * *out: 0, or -1 when it is not one. */
int api_query_int(const char *v, int64_t lo, int64_t hi, int64_t *out);

/* A JSON integer v (a json_t *) into *out: 0, or -1 when v is none. A number with a fraction of
 * zero (1500.0, as clients that compute in floating point send it) is one too, as in JSON
 * Schema, up to 2^53. */
int api_json_int(const void *v, int64_t *out);

/* An optional integer member name of the JSON object obj (a json_t *) into *out, from lo to hi:
 * 0 (also when absent or null), or -1 with e set to a 400 naming what then name. */
int api_json_member_int(const void *obj, const char *what, const char *name, int64_t lo,
                        int64_t hi, int64_t *out, struct api_error *e);

/* Bytes s (len of them) as a JSON string (a json_t *): at most max bytes of them, cut before a
 * character that would not fit, and each byte that is not part of UTF-8 as U+FFFD. */
void *api_json_text(const char *s, size_t len, size_t max);

/* Reads {"group": <0 .. ngroups - 1>} (a release request). 0, or -1 with e set. */
int api_parse_group(const char *body, size_t len, int ngroups, int *group, struct api_error *e);

/* data of a release answer: {"group", "owner" (its token, or null when nobody held it)}. */
void *api_release_data(int group, const char *owner);

/* data of an add answer: {"job_id": id}. Returns a jansson json_t * as void *. */
void *api_job_id_data(const char *id);

/* data of a get answer, from the record and its state. delivered_ms < 0 means not delivered;
 * error is why a failed job failed ("" or NULL: null). */
void *api_job_data(const struct job *job, enum job_state state, int64_t delivered_ms,
                   const char *error);

struct pending_view;

/* data of a stats answer: {"pending", "by_level": {name: n, ...} for every level of lv,
 * "by_due": {"1m", "10m", "1h", "1d", "later"}, "overdue_ms"}. Returns a json_t * as void *. */
void *api_stats_data(const struct pending_view *v, const struct levels *lv);

#endif

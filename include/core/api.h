/* api: the requests of the HTTP API, wire compatible with go-delayqueue: an add (alone or in a
 * batch), a job id, a reschedule, a pop and a worker's finish, release, touch or bury, a
 * group's release, each read from its JSON into plain structs and checked. Pure logic: jansson
 * only. Answers are apidata.h's, the callback of an add calljson.h's. */
#ifndef DQ_API_H
#define DQ_API_H

#include <stddef.h>
#include <stdint.h>

#include "core/apijson.h"
#include "core/config.h"
#include "core/job.h"
#include "core/levels.h"

#define API_HEADER_VALUE_MAX 4096   /* a header's value, a job's or its callback's: a header
                                     * carries a token or a name, not a payload */

struct api_limits {
    const struct levels *levels;   /* a job may not target a delay topic */
    const char *dlq_topic;         /* nor the dead-letter topic */
    int64_t max_delay_ms;
    const struct config_endpoint *endpoints;   /* the names a callback may give (nendpoints) */
    int nendpoints;
    const char *no_urls;           /* NULL: a callback may give a url; else the config setting
                                    * that refuses it ("callbacks.raw_urls is false") */
};

/* Parses an add request into out (caller releases it with job_release, also on error).
 * Sets out->due_ms, delay_ms and created_ms from now_ms. *id_given says whether the client
 * named the id; when it did not, out->id is empty. Returns 0, or -1 with e set. */
int api_parse_add(const char *body, size_t len, const struct api_limits *lim, int64_t now_ms,
                  struct job *out, int *id_given, struct api_error *e);

/* Checks a job built in the process (a redrive's, an occurrence's) as an add's is checked,
 * every add included: its id, that it names a target (a valid topic, or a callback), its due
 * time within lim->max_delay_ms of now_ms, key, headers, ttr, and the combination of its
 * target fields. 0, or -1 with e naming what is wrong. */
int api_check_job(const struct job *j, const struct api_limits *lim, int64_t now_ms,
                  struct api_error *e);

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

/* Releases the n jobs of a batch and frees the array. Safe on NULL. */
void api_batch_free(struct api_batch_job *jobs, size_t n);

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

/* Validates a job id that came in a query string. Returns 0, or -1 with e set. */
int api_check_job_id(const char *id, char out[JOB_ID_MAX + 1], struct api_error *e);

#define API_POP_WAIT_MAX_MS 180000   /* a pop waits 3 minutes at most (ouqiang's hold is 180 s) */
#define API_RECEIPT_MAX 300          /* longer receipts are none of delayqd's */
#define API_REASON_MAX 400           /* a bury's reason, as kept and sent in dq-error */

#define API_POP_TOPICS_MAX 16        /* topics one pop may name (the first with a job serves it) */

/* A pop request {"topic" | "topics" (up to API_POP_TOPICS_MAX, tried in their order: the first
 * with a ready job serves the pop, as beanstalkd's watch list), "wait_ms"
 * (0..API_POP_WAIT_MAX_MS, default 0), "ttr" | "ttr_ms" (default 0: the job's own or the
 * config's), "max" (1..100, default 1)}. */
struct api_pop {
    char topics[API_POP_TOPICS_MAX][TOPIC_NAME_MAX + 1];
    int ntopics;
    int64_t wait_ms;
    int64_t ttr_ms;
    int max;
};

/* Parses a pop request into out. Returns 0, or -1 with e set. */
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

/* Parses the request of verb into out. Returns 0, or -1 with e set. */
int api_parse_pull_op(const char *body, size_t len, enum api_verb verb,
                      const struct api_limits *lim, struct api_pull_op *out, struct api_error *e);

#define API_PULL_OPS_MAX 100   /* jobs one finish, release, touch or bury request may name */

/* The operations of one request: one job's fields, or {"jobs": [...]} of up to
 * API_PULL_OPS_MAX (batch 1), each with its own fault (errs[i].status 0: none). */
struct api_pull_batch {
    struct api_pull_op *ops;
    struct api_error *errs;
    size_t n;
    int batch;
};

/* Parses the request of verb into out (api_pull_batch_free frees it). 0, or -1 with e set: a
 * request that is not JSON, a one-job request at fault, or jobs that is no array of 1 to
 * API_PULL_OPS_MAX. */
int api_parse_pull_ops(const char *body, size_t len, enum api_verb verb,
                       const struct api_limits *lim, struct api_pull_batch *out,
                       struct api_error *e);
void api_pull_batch_free(struct api_pull_batch *b);

/* What a request of one pull topic's routes asks (below /delay-queue/api/pull/): {topic}
 * (GET: its figures), {topic}/jobs (GET: a page of its jobs), {topic}/pause and
 * {topic}/resume (POST). */
enum api_topic_ask { API_TOPIC_FIGURES, API_TOPIC_JOBS, API_TOPIC_PAUSE, API_TOPIC_RESUME };

#define API_TOPIC_LIMIT_DEFAULT 20   /* jobs a page holds unless limit says */
#define API_TOPIC_LIMIT_MAX 100

struct api_pull_topic {
    char topic[TOPIC_NAME_MAX + 1];
    enum api_topic_ask ask;
    char state[9];              /* jobs: "ready" (default), "delayed" or "reserved" */
    int limit;                  /* jobs: 1..API_TOPIC_LIMIT_MAX */
    int has_after;              /* jobs: the page after the job after_ms:after_id (the next
                                 * of the page before) */
    int64_t after_ms;
    char after_id[JOB_ID_MAX + 1];
};

/* Parses the path below /delay-queue/api/pull/ (post: the method is POST, else GET) and the
 * query values state, limit, after (NULL when absent) into out. 0, or -1 with e set (404 for
 * no such path or a topic no pull topic can be, a delay or the dead-letter topic; 405 for the
 * wrong method). */
int api_parse_pull_topic(const char *path, int post, const char *state, const char *limit,
                         const char *after, const struct api_limits *lim,
                         struct api_pull_topic *out, struct api_error *e);

/* The method the path below /delay-queue/api/pull/ takes: "POST" or "GET". */
const char *api_pull_topic_allow(const char *path);

/* Reads {"group": <0 .. ngroups - 1>} (a release request). 0, or -1 with e set. */
int api_parse_group(const char *body, size_t len, int ngroups, int *group, struct api_error *e);

#endif

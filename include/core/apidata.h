/* apidata: the data of the HTTP API's answers, wire compatible with go-delayqueue: a job as get
 * shows it, the answers of an add, a batch, a reschedule, a pop and a worker's verbs, a
 * release, and the stats. Each is a jansson json_t * as void *, handed to api_response
 * (apijson.h), which takes it. Pure logic: jansson only. */
#ifndef DQ_APIDATA_H
#define DQ_APIDATA_H

#include <stddef.h>
#include <stdint.h>

#include "core/job.h"
#include "core/groupview.h"
#include "core/levels.h"

/* data of an add answer: {"job_id": id}. */
void *api_job_id_data(const char *id);

/* Sets "body" of the JSON object obj (a json_t *) to len bytes of body: as a string when they
 * are UTF-8 text, else their base64 with "body_encoding": "base64" beside it. */
void api_body_set(void *obj, const char *body, size_t len);

/* data of a get answer, from the record and its state. delivered_ms < 0 means not delivered;
 * error is why a failed job failed ("" or NULL: null). */
void *api_job_data(const struct job *job, enum job_state state, int64_t delivered_ms,
                   const char *error);

/* Adds a pull job's "pull": {"state", "attempt", "reserved_until_ms"} to the data of a get
 * answer (data: api_job_data's; until_ms < 0: null), whose "state" becomes the pull state:
 * ready, reserved, finished, dead-letter (on its way there), dead or removed. */
void api_job_pull_state(void *data, const char *state, int64_t attempt, int64_t until_ms);

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
 * others. */
void *api_batch_data(const struct api_job_answer *answers, size_t n);

/* data of a reschedule answer: {"job_id", "exec_time", "exec_time_ms"}. */
void *api_rescheduled_data(const char *id, int64_t due_ms);

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

/* One job's answer in a batch of pull operations: its HTTP status, code and message, and the
 * data a one-job request would answer (a json_t the caller still frees; NULL: none). */
struct api_pull_answer {
    int status;
    int code;
    char message[256];
    char job_id[JOB_ID_MAX + 1];
    void *data;
};

/* data of a batch of pull operations: {"jobs": [{"code", "message", "job_id", and the data's
 * members} in the request's order]}. */
void *api_pull_batch_data(const struct api_pull_answer *answers, size_t n);

/* data of a release answer: {"group", "owner" (its token, or null when nobody held it)}. */
void *api_release_data(int group, const char *owner);

struct pending_view;

/* data of a stats answer: {"pending", "by_level": {name: n, ...} for every level of lv,
 * "by_due": {"1m", "10m", "1h", "1d", "later"}, "overdue_ms"}. */
void *api_stats_data(const struct pending_view *v, const struct levels *lv);

/* Adds topic's figures to the "pull" object of a stats answer's data (made at the first):
 * "pull": {topic: {"ready", "delayed", "reserved", "dead_letter", "oldest_ready_age_ms" (null
 * when none is ready), "paused"}, ...}. */
/* One pull topic's figures, counted together (Redis's clock). */
struct pull_figures {
    int64_t ready;              /* may be popped now */
    int64_t delayed;            /* added and not yet due, or released with a delay */
    int64_t reserved;           /* popped, not yet finished */
    int64_t buried;             /* on their way to the dead-letter topic */
    int64_t oldest_age_ms;      /* how long the oldest job ready now has been; -1: none */
    int paused;                 /* pops answer empty (POST .../pull/{topic}/pause) */
};

void api_stats_pull(void *data, const char *topic, const struct pull_figures *f);

/* data of GET /delay-queue/api/pull/{topic}: {"topic", the figures as in stats}. */
void *api_pull_topic_data(const char *topic, const struct pull_figures *f);

/* One job of a pull topic's list. */
struct pull_listed {
    char *id;
    int64_t at_ms;              /* ready, delayed: when it may be popped; reserved: until when */
    const char *state;          /* its pull state's word */
    int64_t attempt;
    int64_t due_ms;
    char *body;                 /* the start of its body (body_len bytes) */
    size_t body_len;
    int64_t body_size;          /* the whole body's bytes */
};

/* data of GET /delay-queue/api/pull/{topic}/jobs: {"topic", "state", "jobs": [{"id", "state",
 * "attempt", "due_ms", "ready_at_ms" or (reserved) "reserved_until_ms", "body" (its start, cut
 * where UTF-8 allows), "body_bytes", "body_truncated"}], "next": the after of the next page, or
 * null when this one was not full}. */
void *api_pull_jobs_data(const char *topic, const char *state, const struct pull_listed *jobs,
                         size_t n, int full);

/* data of a pause or resume: {"topic", "paused"}. */
void *api_pull_paused_data(const char *topic, int paused);

/* Adds "callbacks": {"waiting_for_retry": waiting} to a stats answer's data. */
void api_stats_callbacks(void *data, int64_t waiting);

/* Adds "schedules": {"count"} to a stats answer's data. */
void api_stats_schedules(void *data, int64_t count);

/* {"redis": {"maxmemory_policy" (null when not known), "evicts"}}: an evicting Redis drops job
 * records at maxmemory. */
void api_stats_redis(void *data, const char *policy, int evicts);

/* GET /delay-queue/api/claims's data: each group of v, its partitions (of cfg), lease, owner
 * (alive at now_ms, epoch ms, or not) and published status. Returns a json_t * as void *. */
void *api_claims_data(const struct lease_view *v, const struct config *cfg, int64_t now_ms);

#endif

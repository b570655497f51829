/* schedjson: the JSON of the schedule routes: a schedule's definition in (its timing and the
 * job each occurrence is), its answers out, and the timing as kept in Redis and in each
 * occurrence's record. Pure logic: jansson only. */
#ifndef DQ_SCHEDJSON_H
#define DQ_SCHEDJSON_H

#include <stddef.h>
#include <stdint.h>

#include "core/api.h"
#include "core/recur.h"
#include "core/timing.h"

/* A schedule's definition as a PUT gives it. */
struct sched_def {
    struct recur_timing timing;
    char *timing_json;      /* malloc'd: the timing fields, as kept (timing_parse) */
    char *job_json;         /* malloc'd: the job fields of each occurrence, as kept */
    int immediately;        /* the put asks for one occurrence now besides the grid's (not kept) */
};

/* Reads a PUT body: the timing fields (cron or every_ms, timezone, start_at_ms, end_at_ms,
 * max_runs, catch_up, catch_up_max, jitter_ms), "immediately" (true or false) and the fields of an add but for id and the
 * due time (topic, body, key, headers, deliver, ttr_ms or once, callback), checked as an add's.
 * now_ms anchors an interval without start_at_ms. 0, or -1 with e set (400 naming the field). */
int schedjson_parse_def(const char *body, size_t len, const struct api_limits *lim,
                        int64_t now_ms, struct sched_def *out, struct api_error *e);
void sched_def_release(struct sched_def *d);

/* 1 when kept timings a and b say the same, but for an interval's anchor (when it was put). */
int schedjson_same_timing(const char *a, const char *b);

/* A timing's signature (malloc'd; NULL out of memory): the same for the same timing fields,
 * whatever their order and anchor, so that Redis can compare two in a script. */
char *schedjson_timing_sig(const char *timing_json);

/* The occurrence job of kept job JSON due at due_ms, its id set by the caller (out released by
 * the caller with job_release, also on error). 0, or -1 with e set. */
int schedjson_occurrence(const char *job_json, size_t len, const struct api_limits *lim,
                         int64_t now_ms, int64_t due_ms, struct job *out, struct api_error *e);

/* What Redis keeps of a schedule besides its definition (schedstore.h). */
struct sched_state {
    int64_t generation;
    int paused;
    int64_t runs;           /* occurrences run */
    int64_t next_ms;        /* fire time of the pending occurrence; 0: none (paused, ended) */
    int64_t last_ms;        /* fire time of the last occurrence run; 0: none yet */
    int64_t created_ms, updated_ms;
};

/* A schedule as GET answers it: its definition, state and the next n fire times from from_ms.
 * NULL when out of memory or when the kept JSON does not read. */
void *schedjson_data(const char *id, const char *timing_json, const char *job_json,
                     const struct sched_state *st, int n, int64_t from_ms);

/* {"next": [{"at_ms", "local"}, ...]}: the next n fire times strictly after from_ms. */
void *schedjson_preview(const struct recur_timing *t, int n, int64_t from_ms);

/* A fire time a schedule moved on from, and its occurrence's record as it is now. */
struct sched_run_seen {
    int64_t fire_ms;
    int ran;                    /* 0: skipped (missed, catch_up) */
    const char *job_id;
    int found;                  /* 0: its record is gone (older than job.retention_s) */
    enum job_state state;
    char error[JOB_ERROR_MAX + 1];
};

/* {"runs": [{"fire_at_ms", "job_id", "ran", "state" (null: gone), "error" (or null)}, ...]},
 * the latest first. */
void *schedjson_runs(const struct sched_run_seen *runs, size_t n);

/* {"schedules": [...], "after": <id of the last, or null when none follow>}. items are
 * schedjson_data's (taken). */
void *schedjson_list(void *const *items, size_t n, const char *last, int more);

/* {"id"}: a schedule deleted. */
void *schedjson_id(const char *id);

/* {"id", "job_id", "exec_time_ms"}: an occurrence triggered. */
void *schedjson_triggered(const char *id, const char *job_id, int64_t due_ms);

#endif

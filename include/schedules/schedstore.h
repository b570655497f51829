/* schedstore: schedules in Redis. One hash per schedule (its definition, generation, paused,
 * the fire time of its pending occurrence, the one it advanced from, its last run and runs),
 * a sorted set of the pending occurrences' due times (the sweep's), and one of the ids (the
 * listing's), all in the hash slot {sched} so that each change is one script. Every change bumps
 * the generation, except advancing: an occurrence made under an older generation advances
 * nothing. A struct schedstore is one connection: use it from one thread at a time. */
#ifndef DQ_SCHEDSTORE_H
#define DQ_SCHEDSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "schedules/schedjson.h"

struct schedstore;

struct schedstore *schedstore_new(const struct config *cfg);
void schedstore_free(struct schedstore *ss);

/* Every call returns 0, or -1 with err set when Redis did not answer (or answered an error). */

/* A schedule as kept. */
struct sched_kept {
    char *timing_json;      /* malloc'd */
    char *job_json;         /* malloc'd */
    struct sched_state st;
    int64_t advanced_from;  /* the fire time the pending occurrence was planned from; 0 none */
    int64_t paused_pending; /* paused: the fire time of the occurrence the pause cancelled */
};
void sched_kept_release(struct sched_kept *k);

/* Reads schedule id into out (*found 0: there is none). */
int schedstore_get(struct schedstore *ss, const char *id, struct sched_kept *out, int *found,
                   char *err, size_t errlen);

/* schedstore_get of n ids in one pipeline: outs[i] and found[i] for ids[i]. 0, or -1 with err
 * when any read failed (then none is kept). */
int schedstore_get_many(struct schedstore *ss, size_t n, const char *const *ids,
                        struct sched_kept *outs, int *found, char *err, size_t errlen);

/* What a put, delete or pause changed. */
struct sched_change {
    int64_t old_next;       /* the fire time of the occurrence it had pending (0: none) */
    char *old_job;          /* delete, pause: that occurrence's job, as kept (malloc'd; NULL) */
    int64_t gen;            /* put, pause: the new generation */
    int paused;             /* put: the schedule is paused, and stays so (no occurrence) */
    int kept;               /* put: the timing was the kept one and a fire time was planned:
                             * only the job was replaced (old_next, gen and runs stay) */
    int64_t runs;           /* put, kept: the runs so far */
    char *kept_timing;      /* put, kept: the timing as kept, anchor and all (malloc'd; NULL) */
};
void sched_change_release(struct sched_change *c);

/* Creates or replaces schedule id, its pending occurrence to fire at first_ms (0: none) and be
 * due at first_due_ms, unless it is paused: it stays paused, its definition replaced. Runs start
 * again from 0 unless the timing is the same (sig: schedjson_timing_sig; keep_runs: a read
 * before found it the same, for schedules kept without a signature); the last run is kept. */
int schedstore_put(struct schedstore *ss, const char *id, const char *timing_json,
                   const char *job_json, int64_t first_ms, int64_t first_due_ms, int64_t now_ms,
                   int keep_runs, const char *sig, struct sched_change *out, char *err,
                   size_t errlen);

/* Deletes schedule id: *found, and what it had pending. */
int schedstore_delete(struct schedstore *ss, const char *id, int *found,
                      struct sched_change *out, char *err, size_t errlen);

enum sched_switch { SCHED_NONE, SCHED_SWITCHED, SCHED_ALREADY, SCHED_CHANGED };

/* Pauses schedule id: *res NONE, SWITCHED (out: the occurrence it had pending, which a resume
 * catches up from) or ALREADY (paused before). */
int schedstore_pause(struct schedstore *ss, const char *id, int64_t now_ms,
                     enum sched_switch *res, struct sched_change *out, char *err, size_t errlen);

/* Resumes schedule id if its generation is still gen, its pending occurrence to fire at
 * first_ms (0: none), due at first_due_ms: *res NONE, SWITCHED (*new_gen set), ALREADY (it
 * was not paused) or CHANGED (another change came first). */
int schedstore_resume(struct schedstore *ss, const char *id, int64_t gen, int64_t first_ms,
                      int64_t first_due_ms, int64_t now_ms, enum sched_switch *res,
                      int64_t *new_gen, char *err, size_t errlen);

/* What an advance found. */
struct sched_advance {
    int res;                /* 0 stale (other generation, or not this occurrence's to
                             * advance), 1 advanced now, 2 advanced from it before */
    int64_t next_ms;        /* the fire time of the pending occurrence now (0: none) */
    int64_t runs;           /* runs after it */
    char *job_json;         /* malloc'd when res > 0 */
};

/* Moves schedule id (generation gen) on from its occurrence of fire time fire_ms to the one of
 * next_ms (0: none, the schedule ended), due at next_due_ms; ran: fire_ms's occurrence ran (is
 * counted) or was skipped. */
int schedstore_advance(struct schedstore *ss, const char *id, int64_t gen, int64_t fire_ms,
                       int64_t next_ms, int64_t next_due_ms, int ran, struct sched_advance *out,
                       char *err, size_t errlen);

#define SCHED_SHARDS 16       /* hash tags "{sched:0}" .. "{sched:15}" the schedules spread over */
#define SCHED_RUNS_KEPT 100   /* fire times a schedule keeps the outcome of (GET .../runs) */

/* A fire time the schedule moved on from: its occurrence ran (1) or was skipped (0). */
struct sched_run {
    int64_t fire_ms;
    int ran;
};

/* The last (up to max) fire times schedule id moved on from, the latest first, into out. */
int schedstore_runs(struct schedstore *ss, const char *id, size_t max, struct sched_run *out,
                    size_t *n, char *err, size_t errlen);

/* Indexes schedule id's pending occurrence of fire time next_ms at index_ms (recur_index_ms),
 * unless the schedule moved on meanwhile. */
int schedstore_index(struct schedstore *ss, const char *id, int64_t next_ms, int64_t index_ms,
                     char *err, size_t errlen);

/* Up to max ids after `after` ("": from the first), in order, into *ids (malloc'd, each
 * malloc'd; *n of them); *more: others follow. */
int schedstore_list(struct schedstore *ss, const char *after, size_t max, char ***ids, size_t *n,
                    int *more, char *err, size_t errlen);

/* Takes up to max schedules of shards first .. first + shards - 1 whose pending occurrence was
 * due before before_ms, and puts each back at again_ms, so that one sweep (of any instance) looks at each, and again later only if
 * it is still due then. */
int schedstore_take_overdue(struct schedstore *ss, int first, int shards, int64_t before_ms,
                            int64_t again_ms, size_t max, char ***ids, size_t *n, char *err,
                            size_t errlen);

/* How many schedules there are. */
int schedstore_count(struct schedstore *ss, int64_t *n, char *err, size_t errlen);

/* Moves up to max schedules kept in the unsharded layout ("{sched}", an older delayqd's) to
 * their shards, *moved of them; one put since in its shard keeps that copy. Reads of a
 * schedule not found look in the unsharded layout too while it holds any. */
int schedstore_migrate(struct schedstore *ss, size_t max, size_t *moved, char *err, size_t errlen);

void schedstore_ids_free(char **ids, size_t n);

#endif

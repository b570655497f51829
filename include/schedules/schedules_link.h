/* schedules_link: the inside of schedules, shared by its two files and nothing else:
 * schedules.c (the workers, the occurrences and the moves on, the sweep) and schedroutes.c (the
 * HTTP routes: a request read on the HTTP thread into a task, run on a request worker). Both
 * run tasks on the workers of one struct schedules; schedroutes.c calls schedules.c to add and
 * cancel occurrences, schedules.c calls schedroutes.c to run a request's task. Callers use
 * include/schedules/schedules.h. */
#ifndef DQ_SCHEDULES_LINK_H
#define DQ_SCHEDULES_LINK_H

#include <pthread.h>
#include <stdint.h>

#include "core/api.h"
#include "core/config.h"
#include "core/recur.h"
#include "intake/intake.h"
#include "lib/workers.h"
#include "redis/store.h"
#include "schedules/schedjson.h"
#include "schedules/schedstore.h"
#include "schedules/schedules.h"

#define REQUEST_WORKERS 2
#define MOVE_WORKERS 2

/* T_PUT to T_RECHECK are requests (schedroutes.c; T_RECHECK is a put's second look, below),
 * T_MOVE and T_SWEEP no request waits for. */
enum task_kind { T_PUT, T_GET, T_LIST, T_DELETE, T_PAUSE, T_RESUME, T_TRIGGER, T_NEXT, T_RUNS,
                 T_RECHECK, T_MOVE, T_SWEEP };

struct task {
    enum task_kind kind;
    char id[RECUR_ID_MAX + 1];
    struct sched_def def;        /* T_PUT */
    int64_t first_ms;            /* T_PUT: its first occurrence's fire time */
    char after[RECUR_ID_MAX + 1];   /* T_LIST */
    int64_t n, from_ms;          /* T_LIST: page size; T_NEXT: fire times and from when;
                                  * T_RUNS: runs */
    /* T_MOVE: the occurrence that came due (fire_ms, generation gen, runs before it), whether it
     * ran, and the fire time planned after it (0: none) */
    int64_t gen, fire_ms, runs, next_ms;   /* T_PUT: gen, runs and fire_ms (the fire time before)
                                            * its occurrence was added with */
    int ran;
    struct recur_timing timing;
    char *timing_json;
    int kept;                    /* T_PUT: only the job was replaced (the timing kept) */
    char immediate[JOB_ID_MAX + 1];   /* T_PUT: the occurrence "immediately" made; "" none */
    struct schedules *owner;     /* T_PUT: to look again once its occurrence is added */
    int rechecks;                /* T_PUT: looks again so far */
    void *data;                  /* the answer, while its occurrence is added */
    answer_fn done;           /* a request's; NULL for T_MOVE and T_SWEEP */
    void *opaque;
};

struct schedules {
    const struct config *cfg;
    struct intake *jobs;
    struct api_limits limits;
    struct workers *requests;    /* HTTP requests */
    struct workers *moves;       /* moves on and sweeps: never an HTTP thread's wait */
    struct schedstore *wss[REQUEST_WORKERS + MOVE_WORKERS];
    struct store *wst[REQUEST_WORKERS + MOVE_WORKERS];
    struct schedstore *sweep_ss;
    struct schedstore *check_ss;   /* the holder's thread's, for schedules_check */
    struct store *check_st;
    struct pullq *check_pq;
    pthread_t sweeper;
    int sweeping;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    int recount;                 /* a schedule was made or deleted here: the sweep counts */
};


/* Queues request task t on the request workers: 1, or 0 once s is stopping (t not taken). */
int schedules_queue_request(struct schedules *s, struct task *t);

/* Frees t and what it holds (not t->data). */
void schedules_task_free(struct task *t);

/* The schedstore of worker slot (the request pool's 0 .., the move pool's after them), made on
 * first use; NULL out of memory. */
struct schedstore *schedules_ss(struct schedules *s, int slot);

/* The job store of worker slot, made at its first use (NULL out of memory). */
struct store *schedules_st(struct schedules *s, int slot);

/* The index time of an occurrence due at due_ms (0: none) made now: recur_index_ms. */
int64_t schedules_index_ms(const struct schedules *s, int64_t due_ms);

/* Cancels the pending occurrence of schedule id that fires at fire_ms (a replace, pause or
 * delete): it is not delivered. When it has no record yet (its add still on its way), a
 * cancelled record of job_json is written first, so that the add, when it comes, is refused.
 * A failure is logged. */
void schedules_cancel_occurrence(struct schedules *s, int slot, const char *id, int64_t fire_ms,
                                 const char *job_json);

/* Adds the occurrence of schedule id firing at fire_ms, its job from job_json; chained (a next
 * occurrence of generation gen, runs before it) or not (a trigger's: no schedule to move on).
 * override: it replaces a pending or removed job of its id (a schedule put or resumed). done is
 * called exactly once with the add's answer. */
void schedules_add_occurrence(struct schedules *s, const char *id, const struct recur_timing *t,
                              const char *timing_json, const char *job_json, int64_t fire_ms,
                              int64_t gen, int64_t runs, int64_t prev_ms, int chained,
                              int override,
                              answer_fn done, void *opaque);

/* Runs the request task t (T_PUT to T_RUNS) on worker slot and answers it: 1 when t was handed
 * on (to an add whose answer answers it and frees t), 0 when the caller frees t. */
int schedules_run_request(struct schedules *s, int slot, struct task *t);

#endif

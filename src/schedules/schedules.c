/* schedules: recurring jobs: the workers that run their tasks, adding and cancelling
 * occurrences, moving a schedule on when one came due, and the sweep. The HTTP routes are
 * schedroutes.c. The contract is in include/schedules/schedules.h, the shared inside in
 * include/schedules/schedules_link.h. */
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/apijson.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "pull/pullq.h"
#include "schedules/schedules_link.h"

#define LOG_MODULE "schedules"
#define MOVE_BATCH 64
#define MOVE_WAIT_MS 60000        /* a move on waits this long for a worker; later, the sweep's */
#define MOVE_QUEUE_MAX 200000
#define SWEEP_EVERY_MS 1000
/* A pending occurrence this late is looked at by a sweep; then again this much later if it
 * is still there. */
#define SWEEP_GRACE_MS 3000
#define SWEEP_AGAIN_MS 10000
#define SWEEP_MAX 512             /* schedules one sweep takes */
#define MIGRATE_BATCH 200         /* schedules of the unsharded layout one sweep moves */
/* Each sweep looks at SCHED_SHARDS / SWEEP_ROUND shards, each shard every SWEEP_ROUND sweeps:
 * an idle instance sends Redis a few commands a second. */
#define SWEEP_ROUND 8
#define SWEEP_LAG_MS (SWEEP_GRACE_MS + SWEEP_EVERY_MS * SWEEP_ROUND)   /* an index time is looked
                                                                       * at by then */
#define COUNT_EVERY 30            /* sweeps between counts of the schedules (and after a make or
                                   * delete here), and between looks at the unsharded layout
                                   * once it held none */

/* ---- shared with schedroutes.c ---- */

void schedules_task_free(struct task *t)
{
    sched_def_release(&t->def);
    free(t->timing_json);
    free(t);
}

struct schedstore *schedules_ss(struct schedules *s, int slot)
{
    if (!s->wss[slot])
        s->wss[slot] = schedstore_new(s->cfg);
    return s->wss[slot];
}

int64_t schedules_index_ms(const struct schedules *s, int64_t due_ms)
{
    return due_ms > 0 ? recur_index_ms(due_ms, clock_now_ms(), s->limits.max_delay_ms, SWEEP_LAG_MS)
                      : 0;
}

/* The store of worker slot, as schedules_ss. */
struct store *schedules_st(struct schedules *s, int slot)
{
    if (!s->wst[slot])
        s->wst[slot] = store_new(s->cfg);
    return s->wst[slot];
}

void schedules_cancel_occurrence(struct schedules *s, int slot, const char *id, int64_t fire_ms,
                                 const char *job_json)
{
    char name[JOB_ID_MAX + 1], err[256];
    struct store_removal rm = { .id = name };
    struct store_add_answer added;
    struct store *st = schedules_st(s, slot);
    int64_t now = clock_now_ms(), retention = s->cfg->job.retention_s * 1000;
    struct api_error e;
    struct job job;
    const struct job *jp = &job;

    if (fire_ms <= 0 || !st || recur_parked(fire_ms, now, s->limits.max_delay_ms))
        return;   /* a parked occurrence is no job yet, and none is on its way */
    snprintf(name, sizeof(name), "%s@%lld", id, (long long)fire_ms);
    if (store_remove_many(st, 1, &rm, now, retention) == 0 && (rm.res != STORE_NO_JOB || !job_json))
        return;
    if (!rm.failed) {
        if (schedjson_occurrence(job_json, strlen(job_json), &s->limits, now, fire_ms, &job,
                                 &e) == 0) {
            snprintf(job.id, sizeof(job.id), "%s", name);
            job_new_tag(job.tag);
            if (store_add_batch(st, 1, &jp, retention, &added, err, sizeof(err)) < 0)
                snprintf(rm.err, sizeof(rm.err), "%s", err);
            else if (store_remove_many(st, 1, &rm, now, retention) == 0)
                rm.err[0] = '\0';
        } else {
            snprintf(rm.err, sizeof(rm.err), "its job does not read: %.200s", e.message);
        }
        job_release(&job);
        if (!rm.err[0])
            return;
    }
    log_warn("schedule=%s: its pending occurrence %s was not removed (%s): it is delivered "
             "if due before the schedule's change reaches it", id, name, rm.err);
}

/* What became of an add of an occurrence no request waits for. */
static void occurrence_added(void *opaque, const struct answer *a)
{
    (void)opaque;
    if (a->is != ANSWER_DONE && a->is != ANSWER_ALREADY)
        log_warn("an occurrence was not added (the sweep makes it again): %s", a->message);
}

void schedules_add_occurrence(struct schedules *s, const char *id, const struct recur_timing *t,
                              const char *timing_json, const char *job_json, int64_t fire_ms,
                              int64_t gen, int64_t runs, int64_t prev_ms, int chained,
                              int override,
                              answer_fn done, void *opaque)
{
    int64_t now = clock_now_ms();
    int64_t due = fire_ms + (chained ? recur_jitter(id, fire_ms, t->jitter_ms) : 0);
    struct api_error e;
    struct job job;

    if (recur_parked(due, now, s->limits.max_delay_ms)) {
        answer_send(done, opaque, 200, API_OK, "parked: the sweep makes it when it may wait", NULL);
        return;
    }
    if (schedjson_occurrence(job_json, strlen(job_json), &s->limits, now, due, &job, &e) < 0) {
        job_release(&job);
        log_error("schedule=%s: its job does not read: %s", id, e.message);
        answer_send(done, opaque, e.status, e.code, e.message, NULL);
        return;
    }
    snprintf(job.id, sizeof(job.id), "%s@%lld", id, (long long)fire_ms);
    job.override = override;
    if (chained && (job.sched = calloc(1, sizeof(*job.sched)))) {
        job.sched->id = strdup(id);
        job.sched->timing = strdup(timing_json);
        job.sched->gen = gen;
        job.sched->runs = runs;
        job.sched->prev_ms = prev_ms;
    }
    if (chained && (!job.sched || !job.sched->id || !job.sched->timing)) {
        job_release(&job);
        answer_send(done, opaque, 503, API_UNAVAILABLE, "out of memory", NULL);
        return;
    }
    metrics_inc(M_SCHED_MADE);
    intake_add_job(s->jobs, &job, done, opaque);
}

/* ---- moving on and the sweep ---- */

/* Moves the schedule on from the occurrence of t that came due, and adds the next occurrence
 * (again, when it had moved on before: the add is idempotent). */
static void move_on(struct schedules *s, int slot, const char *id, int64_t gen, int64_t fire_ms,
                    int64_t next_ms, int ran, const struct recur_timing *timing,
                    const char *timing_json)
{
    struct sched_advance a;
    char err[256];
    int64_t due = next_ms > 0 ? next_ms + recur_jitter(id, next_ms, timing->jitter_ms) : 0;

    due = schedules_index_ms(s, due);
    if (schedstore_advance(schedules_ss(s, slot), id, gen, fire_ms, next_ms, due, ran, &a, err,
                           sizeof(err)) < 0) {
        log_warn("schedule=%s: moving on from %lld failed (a sweep does it): %s", id,
                 (long long)fire_ms, err);
        return;
    }
    if (a.res > 0 && a.next_ms > 0)
        schedules_add_occurrence(s, id, timing, timing_json, a.job_json, a.next_ms, gen, a.runs,
                                 fire_ms, 1, 0, occurrence_added, NULL);
    else if (a.res == 1)
        log_info("schedule=%s ended: no fire time after %lld", id, (long long)fire_ms);
    free(a.job_json);
}

/* The state of the record of job id into *state: 1, 0 when there is none, -1 on failure. */
static int occurrence_state(struct schedules *s, int slot, const char *job, enum job_state *state)
{
    struct store_read rd = { .id = job };
    struct job_record rec;
    struct job j = { .id = "" };
    char err[256];
    int rc = -1;

    if (!schedules_st(s, slot) || store_read_many(schedules_st(s, slot), 1, &rd) < 0) {
        log_warn("sweep: reading %s failed: %s", job, rd.err);
    } else if (!rd.found) {
        rc = 0;
    } else if (job_record_read(job, rd.data, rd.len, &j, &rec, err, sizeof(err)) == 0) {
        *state = rec.state;
        rc = 1;
    } else {
        *state = JOB_FAILED;   /* a record that does not read was dead-lettered when due */
        rc = 1;
    }
    if (rd.found)
        job_release(&j);
    free(rd.data);
    return rc;
}

/* A schedule whose pending occurrence is seconds overdue: added (sent) again when it is
 * pending or gone, moved on when it is finished and the schedule did not move on. */
static void sweep_one(struct schedules *s, int slot, const char *id)
{
    struct recur_timing timing, plain;
    struct recur_plan plan;
    struct sched_kept k;
    char err[256], job[JOB_ID_MAX + 1];
    enum job_state state = JOB_PENDING;
    int64_t due, now;
    int found, rc;

    if (schedstore_get(schedules_ss(s, slot), id, &k, &found, err, sizeof(err)) < 0) {
        log_warn("sweep: reading schedule %s failed: %s", id, err);
        return;
    }
    if (!found)
        return;
    if (k.st.paused || !k.st.next_ms) {
        sched_kept_release(&k);
        return;
    }
    if (timing_parse(k.timing_json, strlen(k.timing_json), &timing, err,
                               sizeof(err)) < 0) {
        log_error("sweep: schedule %s as kept in Redis does not read (%s): its occurrences stop "
                  "until it is put again", id, err);
        sched_kept_release(&k);
        return;
    }
    snprintf(job, sizeof(job), "%s@%lld", id, (long long)k.st.next_ms);
    rc = occurrence_state(s, slot, job, &state);
    due = k.st.next_ms + recur_jitter(id, k.st.next_ms, timing.jitter_ms);
    if (rc >= 0 && due > (now = clock_now_ms())) {
        /* a parked occurrence's time to be made came: made, then indexed at its due time */
        if (rc == 0 && !recur_parked(due, now, s->limits.max_delay_ms))
            schedules_add_occurrence(s, id, &timing, k.timing_json, k.job_json, k.st.next_ms,
                                     k.st.generation, k.st.runs, k.advanced_from, 1, 0,
                                     occurrence_added, NULL);
        if (schedstore_index(schedules_ss(s, slot), id, k.st.next_ms,
                             recur_index_ms(due, now, s->limits.max_delay_ms, SWEEP_LAG_MS), err,
                             sizeof(err)) < 0)
            log_warn("sweep: indexing schedule %s failed (looked at again in seconds): %s", id, err);
    } else if (rc == 0 || (rc == 1 && state == JOB_PENDING)) {
        log_info("sweep: occurrence %s %s; adding it again", job, rc ? "is overdue" : "is missing");
        schedules_add_occurrence(s, id, &timing, k.timing_json, k.job_json, k.st.next_ms,
                                 k.st.generation, k.st.runs, k.advanced_from, 1, 0,
                                 occurrence_added, NULL);
    } else if (rc == 1 && state != JOB_DELIVERING) {
        int ran = state != JOB_CANCELLED;
        plain = timing;
        if (!ran)
            plain.max_runs = 0;   /* not counted: the cap does not end it */
        recur_plan(&plain, id, k.st.next_ms, k.st.runs, clock_now_ms(), &plan);
        if (ran && timing.max_runs > 0 && k.st.runs + 1 >= timing.max_runs)
            plan.next_ms = -1;   /* it ran, missed or not: the cap counts it */
        log_info("sweep: occurrence %s is %s, its schedule did not move on; moving it on", job,
                 job_state_name(state));
        move_on(s, slot, id, k.st.generation, k.st.next_ms, plan.next_ms > 0 ? plan.next_ms : 0,
                ran, &timing, k.timing_json);
    }
    sched_kept_release(&k);
}

/* ---- the workers ---- */

static void run_task(struct schedules *s, int slot, struct task *t)
{
    int handed = 0;

    if (!schedules_ss(s, slot) || !schedules_st(s, slot)) {
        if (t->done)
            answer_send(t->done, t->opaque, 503, API_UNAVAILABLE, "out of memory", NULL);
        schedules_task_free(t);
        return;
    }
    if (t->kind == T_MOVE)
        move_on(s, slot, t->id, t->gen, t->fire_ms, t->next_ms, t->ran, &t->timing,
                t->timing_json);
    else if (t->kind == T_SWEEP)
        sweep_one(s, slot, t->id);
    else
        handed = schedules_run_request(s, slot, t);
    if (!handed)
        schedules_task_free(t);
}

static void run_requests(void *ctx, int worker, void **tasks, size_t n)
{
    for (size_t i = 0; i < n; i++)
        run_task(ctx, worker, tasks[i]);
}

static void run_moves(void *ctx, int worker, void **tasks, size_t n)
{
    for (size_t i = 0; i < n; i++)
        run_task(ctx, REQUEST_WORKERS + worker, tasks[i]);
}

static void drop_task(void *ctx, void *task, const char *why)
{
    struct task *t = task;
    char msg[256];

    (void)ctx;
    if (t->kind == T_RECHECK) {   /* the put is done: its look again is what was dropped */
        answer_send(t->done, t->opaque, 200, API_OK, "ok", t->data);
        t->data = NULL;
    } else if (t->done) {
        snprintf(msg, sizeof(msg), "schedules: %s", why);
        answer_send(t->done, t->opaque, 503, API_UNAVAILABLE, msg, NULL);
    } else {
        log_info("schedule=%s: a move on was dropped (%s); a sweep does it", t->id, why);
    }
    schedules_task_free(t);
}

static void *sweep_main(void *arg)
{
    struct schedules *s = arg;
    char err[256];
    int64_t count;
    unsigned tick = (unsigned)getpid();   /* instances start on different shards */
    size_t moved = 1;

    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        struct timespec until;
        char **ids = NULL;
        size_t n = 0;
        int first = (int)(tick % SWEEP_ROUND) * (SCHED_SHARDS / SWEEP_ROUND);
        int64_t now;

        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += SWEEP_EVERY_MS / 1000;
        pthread_cond_timedwait(&s->cv, &s->mu, &until);
        if (s->stop)
            break;
        pthread_mutex_unlock(&s->mu);
        now = clock_now_ms();
        if (schedstore_take_overdue(s->sweep_ss, first, SCHED_SHARDS / SWEEP_ROUND,
                                    now - SWEEP_GRACE_MS, now + SWEEP_AGAIN_MS, SWEEP_MAX, &ids,
                                    &n, err, sizeof(err)) == 0) {
            for (size_t i = 0; i < n; i++) {
                struct task *t = calloc(1, sizeof(*t));
                if (!t)
                    break;
                t->kind = T_SWEEP;
                snprintf(t->id, sizeof(t->id), "%s", ids[i]);
                workers_queue(s->moves, t);
            }
            schedstore_ids_free(ids, n);
        }
        if (moved || tick % COUNT_EVERY == 0) {
            if (schedstore_migrate(s->sweep_ss, MIGRATE_BATCH, &moved, err, sizeof(err)) < 0)
                log_warn("moving schedules to their shards failed (tried again): %s", err);
            else if (moved)
                log_info("moved %zu schedules of the unsharded layout to their shards", moved);
        }
        if ((tick % COUNT_EVERY == 0 || __atomic_exchange_n(&s->recount, 0, __ATOMIC_RELAXED)) &&
            schedstore_count(s->sweep_ss, &count, err, sizeof(err)) == 0)
            metrics_set(M_SCHEDULES, count);
        tick++;
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- life ---- */

struct schedules *schedules_new(const struct config *cfg, struct intake *jobs, char *err,
                                size_t errlen)
{
    struct schedules *s = calloc(1, sizeof(*s));

    if (!s || !(s->sweep_ss = schedstore_new(cfg))) {
        free(s);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->cfg = cfg;
    s->jobs = jobs;
    s->limits = (struct api_limits){ .levels = &cfg->delay.levels, .dlq_topic = cfg->delay.dlq_topic,
                                     .max_delay_ms = cfg->job.max_delay_s * 1000,
                                     .endpoints = cfg->callbacks.endpoints,
                                     .nendpoints = cfg->callbacks.nendpoints,
                                     .no_urls = cfg->callbacks.raw_urls ? NULL
                                                : "callbacks.raw_urls is false" };
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->requests = workers_new(REQUEST_WORKERS, 1, cfg->redis.timeout_ms,
                              (size_t)cfg->http.max_connections, run_requests, drop_task, s);
    s->moves = workers_new(MOVE_WORKERS, MOVE_BATCH, MOVE_WAIT_MS, MOVE_QUEUE_MAX, run_moves,
                           drop_task, s);
    s->sweeping = s->requests && s->moves && pthread_create(&s->sweeper, NULL, sweep_main, s) == 0;
    if (!s->sweeping) {
        snprintf(err, errlen, "cannot start the schedules' threads");
        schedules_free(s);
        return NULL;
    }
    return s;
}

int schedules_queue_request(struct schedules *s, struct task *t)
{
    int queued = 0;

    pthread_mutex_lock(&s->mu);
    if (!s->stop && s->requests) {
        workers_queue(s->requests, t);
        queued = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return queued;
}

void schedules_stop(struct schedules *s)
{
    struct workers *requests, *moves;

    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->sweeping)   /* it queues moves: gone before they are */
        pthread_join(s->sweeper, NULL);
    s->sweeping = 0;
    pthread_mutex_lock(&s->mu);
    requests = s->requests;
    moves = s->moves;
    s->requests = s->moves = NULL;
    pthread_mutex_unlock(&s->mu);
    if (requests)
        workers_free(requests);
    if (moves)
        workers_free(moves);
}

void schedules_free(struct schedules *s)
{
    if (!s)
        return;
    schedules_stop(s);
    for (int i = 0; i < REQUEST_WORKERS + MOVE_WORKERS; i++) {
        schedstore_free(s->wss[i]);
        store_free(s->wst[i]);
    }
    schedstore_free(s->sweep_ss);
    schedstore_free(s->check_ss);
    store_free(s->check_st);
    pullq_free(s->check_pq);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

#define OVERLAP_HOPS 16   /* occurrences skipped for overlap walked back, at most */

/* 1 when the record of an occurrence (data, len bytes) says it has not finished: pending (a
 * callback waiting for its retry), being delivered, or a pull job made ready and not yet
 * finished (its pull hash ready, delayed or reserved); 0 when it has, or it cannot tell. One
 * skipped for overlap stands for the one before it, whose record is read in turn. */
static int unfinished(struct schedules *s, const char *id, const char *data, size_t len)
{
    char cur[JOB_ID_MAX + 1], err[256];
    struct store_read rd = { .id = cur };
    int rc = 0;

    snprintf(cur, sizeof(cur), "%s", id);
    for (int hop = 0; hop <= OVERLAP_HOPS; hop++) {
        struct job_record rec;
        struct job j = { .id = "" };
        int again = 0;

        if (job_record_read(cur, data, len, &j, &rec, err, sizeof(err)) == 0) {
            if (rec.state == JOB_PENDING || rec.state == JOB_DELIVERING) {
                rc = 1;
            } else if (rec.state == JOB_DELIVERED && j.deliver == JOB_DELIVER_PULL && s->check_pq) {
                struct pullq_look look = { .topic = j.topic, .id = cur };
                rc = pullq_look_many(s->check_pq, 1, &look) == 0 && look.found &&
                     (look.state == 'r' || look.state == 'R');
            } else if (rec.state == JOB_CANCELLED && j.sched && j.sched->prev_ms > 0 &&
                       strcmp(rec.error, recur_verdict_why(RECUR_OVERLAP)) == 0) {
                snprintf(cur, sizeof(cur), "%s@%lld", j.sched->id, (long long)j.sched->prev_ms);
                again = 1;
            }
        }
        job_release(&j);
        if (hop > 0)
            free(rd.data);
        if (!again || hop == OVERLAP_HOPS)
            break;
        rd = (struct store_read){ .id = cur };
        if (store_read_many(s->check_st, 1, &rd) < 0 || !rd.found) {
            free(rd.data);
            break;
        }
        data = rd.data;
        len = rd.len;
    }
    return rc;
}

/* Occurrences that are to run, of schedules with overlap "skip", whose predecessor has not
 * finished: RECUR_OVERLAP. kept[i] (found) is occurrence i's schedule. */
static void check_overlap(struct schedules *s, size_t n, const struct job *const *jobs,
                          const struct sched_kept *kept, enum recur_verdict *out)
{
    struct store_read *reads = calloc(n, sizeof(*reads));
    char (*ids)[JOB_ID_MAX + 1] = calloc(n, sizeof(*ids)), err[256];
    size_t *at = calloc(n, sizeof(*at)), m = 0;
    struct recur_timing t;

    if (!s->check_st)
        s->check_st = store_new(s->cfg);
    if (!s->check_pq)
        s->check_pq = pullq_new(s->cfg);
    for (size_t i = 0; reads && ids && at && i < n; i++) {
        if (out[i] != RECUR_RUNS || jobs[i]->sched->prev_ms <= 0 ||
            timing_parse(kept[i].timing_json, strlen(kept[i].timing_json), &t, err,
                         sizeof(err)) < 0 || !t.overlap_skip)
            continue;
        snprintf(ids[m], sizeof(ids[m]), "%s@%lld", jobs[i]->sched->id,
                 (long long)jobs[i]->sched->prev_ms);
        reads[m] = (struct store_read){ .id = ids[m] };
        at[m++] = i;
    }
    if (m && s->check_st && store_read_many(s->check_st, m, reads) < 0)
        log_warn("overlap: reading %zu occurrences before others failed: those run", m);
    for (size_t k = 0; k < m; k++) {
        if (reads[k].found && unfinished(s, ids[k], reads[k].data, reads[k].len)) {
            out[at[k]] = RECUR_OVERLAP;
            metrics_inc(M_SCHED_OVERLAPPED);
        }
        free(reads[k].data);
    }
    free(reads);
    free(ids);
    free(at);
}

void schedules_check(void *ctx, size_t n, const struct job *const *jobs,
                     enum recur_verdict *out)
{
    struct schedules *s = ctx;
    struct sched_kept *kept = calloc(n, sizeof(*kept));
    const char **ids = calloc(n, sizeof(*ids));
    int *found = calloc(n, sizeof(*found));
    char err[256] = "out of memory";

    for (size_t i = 0; i < n; i++)
        out[i] = RECUR_RUNS;
    if (!s->check_ss)
        s->check_ss = schedstore_new(s->cfg);
    if (kept && ids && found && s->check_ss) {
        for (size_t i = 0; i < n; i++)
            ids[i] = jobs[i]->sched->id;
        if (schedstore_get_many(s->check_ss, n, ids, kept, found, err, sizeof(err)) == 0) {
            for (size_t i = 0; i < n; i++) {
                if (!found[i])
                    out[i] = RECUR_SCHED_GONE;
                else if (kept[i].st.paused)
                    out[i] = RECUR_SCHED_PAUSED;
                else if (kept[i].st.generation != jobs[i]->sched->gen)
                    out[i] = RECUR_SCHED_CHANGED;
            }
            check_overlap(s, n, jobs, kept, out);
            for (size_t i = 0; i < n; i++)
                if (found[i])
                    sched_kept_release(&kept[i]);
            err[0] = '\0';
        }
    }
    if (err[0])
        log_warn("checking %zu occurrences against their schedules failed (%s): they run", n, err);
    free(kept);
    free(ids);
    free(found);
}

void schedules_occurred(void *ctx, const struct job *job, int64_t fire_ms,
                        const struct recur_timing *timing, const struct recur_plan *plan)
{
    struct schedules *s = ctx;
    struct task *t = calloc(1, sizeof(*t));

    if (!t || !(t->timing_json = strdup(job->sched->timing))) {
        free(t);
        log_warn("job=%s: out of memory moving its schedule on; a sweep does it", job->id);
        return;
    }
    t->kind = T_MOVE;
    snprintf(t->id, sizeof(t->id), "%s", job->sched->id);
    t->gen = job->sched->gen;
    t->fire_ms = fire_ms;
    t->runs = job->sched->runs;
    t->ran = plan->run;
    t->next_ms = plan->next_ms > 0 ? plan->next_ms : 0;
    t->timing = *timing;
    workers_queue(s->moves, t);
}

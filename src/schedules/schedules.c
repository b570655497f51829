/* schedules: recurring jobs, their HTTP routes, moving them on and the sweep. The contract is in
 * include/schedules/schedules.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/apijson.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "core/recur.h"
#include "schedules/schedjson.h"
#include "schedules/schedstore.h"
#include "schedules/schedules.h"
#include "redis/store.h"
#include "lib/workers.h"

#define LOG_MODULE "schedules"
#define REQUEST_WORKERS 2
#define MOVE_WORKERS 2
#define MOVE_BATCH 64
#define MOVE_WAIT_MS 60000        /* a move on waits this long for a worker; later, the sweep's */
#define MOVE_QUEUE_MAX 200000
#define SWEEP_EVERY_MS 1000
/* A pending occurrence this late is looked at by a sweep; then again this much later if it
 * is still there. */
#define SWEEP_GRACE_MS 3000
#define SWEEP_AGAIN_MS 10000
#define SWEEP_MAX 512             /* schedules one sweep takes */
#define PREVIEW_DEFAULT 5
#define LIST_DEFAULT 50
#define LIST_MAX 500

enum task_kind { T_PUT, T_GET, T_LIST, T_DELETE, T_PAUSE, T_RESUME, T_TRIGGER, T_NEXT,
                 T_MOVE, T_SWEEP };

struct task {
    enum task_kind kind;
    char id[RECUR_ID_MAX + 1];
    struct sched_def def;        /* T_PUT */
    int64_t first_ms;            /* T_PUT: its first occurrence's fire time */
    char after[RECUR_ID_MAX + 1];   /* T_LIST */
    int64_t n, from_ms;          /* T_LIST: page size; T_NEXT: fire times and from when */
    /* T_MOVE: the occurrence that came due (fire_ms, generation gen, runs before it), whether it
     * ran, and the fire time planned after it (0: none) */
    int64_t gen, fire_ms, runs, next_ms;
    int ran;
    struct recur_timing timing;
    char *timing_json;
    void *data;                  /* the answer, while its occurrence is added */
    jobs_done_fn done;
    void *opaque;
};

struct schedules {
    const struct config *cfg;
    struct jobs *jobs;
    struct api_limits limits;
    struct workers *requests;    /* HTTP requests */
    struct workers *moves;       /* moves on and sweeps: never an HTTP thread's wait */
    struct schedstore *wss[REQUEST_WORKERS + MOVE_WORKERS];
    struct store *wst[REQUEST_WORKERS + MOVE_WORKERS];
    struct schedstore *sweep_ss;
    pthread_t sweeper;
    int sweeping;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
};

static void answer(jobs_done_fn done, void *opaque, int status, int code, const char *msg,
                   void *data)
{
    done(opaque, status, api_response(code, msg, data));
}

static void task_free(struct task *t)
{
    sched_def_release(&t->def);
    free(t->timing_json);
    free(t);
}

/* A worker's connections: the request pool's are 0 .., the move pool's after them. */
static struct schedstore *ss_of(struct schedules *s, int slot)
{
    if (!s->wss[slot])
        s->wss[slot] = schedstore_new(s->cfg);
    return s->wss[slot];
}

static struct store *st_of(struct schedules *s, int slot)
{
    if (!s->wst[slot])
        s->wst[slot] = store_new(s->cfg);
    return s->wst[slot];
}

/* Cancels the pending occurrence of schedule id that fires at fire_ms (a replace, pause or
 * delete): it is not delivered. When it has no record yet (its add still on its way), a
 * cancelled record of job_json is written first, so that the add, when it comes, is refused. */
static void cancel_occurrence(struct schedules *s, int slot, const char *id, int64_t fire_ms,
                              const char *job_json)
{
    char name[JOB_ID_MAX + 1], err[256];
    struct store_removal rm = { .id = name };
    struct store_add_answer added;
    struct store *st = st_of(s, slot);
    int64_t now = clock_now_ms(), retention = s->cfg->job.retention_s * 1000;
    struct api_error e;
    struct job job;
    const struct job *jp = &job;

    if (fire_ms <= 0 || !st)
        return;
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
static void occurrence_added(void *opaque, int status, char *response)
{
    (void)opaque;
    if (status != 200)
        log_warn("an occurrence was not added (the sweep makes it again): %s", response);
    free(response);
}

/* Adds the occurrence of schedule id firing at fire_ms, its job from job_json; chained (a next
 * occurrence of generation gen, runs before it) or not (a trigger's: no schedule to move on).
 * override: it replaces a pending or removed job of its id (a schedule put or resumed). */
static void add_occurrence(struct schedules *s, const char *id, const struct recur_timing *t,
                           const char *timing_json, const char *job_json, int64_t fire_ms,
                           int64_t gen, int64_t runs, int chained, int override,
                           jobs_done_fn done, void *opaque)
{
    int64_t now = clock_now_ms(), due = fire_ms + (chained ? recur_jitter(id, fire_ms, t->jitter_ms) : 0);
    struct api_error e;
    struct job job;

    if (schedjson_occurrence(job_json, strlen(job_json), &s->limits, now, due, &job, &e) < 0) {
        job_release(&job);
        log_error("schedule=%s: its job does not read: %s", id, e.message);
        answer(done, opaque, e.status, e.code, e.message, NULL);
        return;
    }
    snprintf(job.id, sizeof(job.id), "%s@%lld", id, (long long)fire_ms);
    job.override = override;
    if (chained && (job.sched = calloc(1, sizeof(*job.sched)))) {
        job.sched->id = strdup(id);
        job.sched->timing = strdup(timing_json);
        job.sched->gen = gen;
        job.sched->runs = runs;
    }
    if (chained && (!job.sched || !job.sched->id || !job.sched->timing)) {
        job_release(&job);
        answer(done, opaque, 503, API_UNAVAILABLE, "out of memory", NULL);
        return;
    }
    metrics_inc(M_SCHED_MADE);
    jobs_add_job(s->jobs, &job, done, opaque);
}

/* The add of a put's or resume's first occurrence answered: so is the request. */
static void first_added(void *opaque, int status, char *response)
{
    struct task *t = opaque;

    free(response);
    if (status == 200) {
        answer(t->done, t->opaque, 200, API_OK, "ok", t->data);
    } else {
        api_data_free(t->data);
        if (t->kind == T_TRIGGER)
            answer(t->done, t->opaque, 503, API_UNAVAILABLE, "the occurrence was not added "
                   "(Redis or Kafka failed)", NULL);
        else
            answer(t->done, t->opaque, 503, API_UNAVAILABLE, "the schedule is kept, but its "
                   "first occurrence was not added now (Redis or Kafka failed); a sweep adds it "
                   "within seconds of its due time", NULL);
    }
    task_free(t);
}

/* The schedule id of the request's task is answered 404. */
static void not_found(struct task *t)
{
    char msg[RECUR_ID_MAX + 32];

    snprintf(msg, sizeof(msg), "no schedule %s", t->id);
    answer(t->done, t->opaque, 404, API_NOT_FOUND, msg, NULL);
}

static void redis_failed(struct task *t, const char *what, const char *err)
{
    char msg[512];

    snprintf(msg, sizeof(msg), "%s failed: %s", what, err);
    answer(t->done, t->opaque, 503, API_UNAVAILABLE, msg, NULL);
}

/* The schedule as GET answers it, read again; NULL when it could not be read. */
static void *read_data(struct schedstore *ss, const char *id, int preview)
{
    struct sched_kept k;
    char err[256];
    int found;
    void *data = NULL;

    if (schedstore_get(ss, id, &k, &found, err, sizeof(err)) == 0 && found) {
        data = schedjson_data(id, k.timing_json, k.job_json, &k.st, preview, clock_now_ms());
        sched_kept_release(&k);
    }
    return data;
}

/* Reads schedule id of t into k: 1, or 0 when t was answered (none, or Redis failed). */
static int read_kept(struct schedstore *ss, struct task *t, struct sched_kept *k)
{
    char err[256];
    int found;

    if (schedstore_get(ss, t->id, k, &found, err, sizeof(err)) < 0) {
        redis_failed(t, "reading the schedule", err);
        return 0;
    }
    if (!found) {
        not_found(t);
        return 0;
    }
    return 1;
}

/* The kept timing of k into out: 0, or -1 when t was answered. */
static int kept_timing(struct task *t, const struct sched_kept *k, struct recur_timing *out)
{
    char err[256], msg[420];

    if (timing_parse(k->timing_json, strlen(k->timing_json), out, err, sizeof(err)) == 0)
        return 0;
    snprintf(msg, sizeof(msg), "schedule %s as kept in Redis does not read: %s", t->id, err);
    answer(t->done, t->opaque, 500, API_UNAVAILABLE, msg, NULL);
    return -1;
}

/* A put of a schedule that exists with the same timing keeps its grid and its runs (a put
 * repeated at every deploy must not restart an interval, nor its max_runs): t's timing becomes
 * the kept one, its first occurrence the pending one. 1 when so. */
static int same_timing(struct task *t, const struct sched_kept *k, int64_t now)
{
    char err[256], *kept;

    if (!schedjson_same_timing(k->timing_json, t->def.timing_json) ||
        !(kept = strdup(k->timing_json)))
        return 0;
    if (timing_parse(kept, strlen(kept), &t->def.timing, err, sizeof(err)) < 0) {
        free(kept);
        return 0;
    }
    free(t->def.timing_json);
    t->def.timing_json = kept;
    t->first_ms = k->st.next_ms > 0 ? k->st.next_ms : recur_next(&t->def.timing, now);
    return 1;
}

/* Each runner answers t's request; 1 when it handed t on (to an add whose answer answers it),
 * 0 when the caller frees t. */
static int run_put(struct schedules *s, int slot, struct task *t)
{
    struct schedstore *ss = ss_of(s, slot);
    int64_t now = clock_now_ms(), due;
    struct sched_change c;
    struct sched_kept k;
    char err[256];
    int found, keep = 0;
    int64_t runs = 0;

    if (schedstore_get(ss, t->id, &k, &found, err, sizeof(err)) < 0) {
        redis_failed(t, "put", err);
        return 0;
    }
    if (found) {
        if ((keep = same_timing(t, &k, now)))
            runs = k.st.runs;
        sched_kept_release(&k);
    }
    due = t->first_ms + recur_jitter(t->id, t->first_ms, t->def.timing.jitter_ms);
    if (schedstore_put(ss, t->id, t->def.timing_json, t->def.job_json, t->first_ms, due, now,
                       keep, &c, err, sizeof(err)) < 0) {
        redis_failed(t, "put", err);
        return 0;
    }
    if (c.old_next && (c.paused || c.old_next != t->first_ms))
        cancel_occurrence(s, slot, t->id, c.old_next, t->def.job_json);
    log_info("schedule=%s put (generation %lld)%s, first fire %lld", t->id, (long long)c.gen,
             c.paused ? ", paused" : "", (long long)t->first_ms);
    t->data = read_data(ss, t->id, PREVIEW_DEFAULT);
    if (c.paused || t->first_ms <= 0) {
        answer(t->done, t->opaque, 200, API_OK, c.paused ? "ok; the schedule stays paused until "
               "resumed" : "ok; the schedule has no fire time left", t->data);
        t->data = NULL;
        return 0;
    }
    add_occurrence(s, t->id, &t->def.timing, t->def.timing_json, t->def.job_json, t->first_ms,
                   c.gen, runs, 1, 1, first_added, t);
    return 1;
}

static void run_get(struct schedules *s, int slot, struct task *t)
{
    struct schedstore *ss = ss_of(s, slot);
    struct sched_kept k;
    void *data;

    if (!read_kept(ss, t, &k))
        return;
    data = schedjson_data(t->id, k.timing_json, k.job_json, &k.st, PREVIEW_DEFAULT,
                          clock_now_ms());
    sched_kept_release(&k);
    if (data)
        answer(t->done, t->opaque, 200, API_OK, "ok", data);
    else
        answer(t->done, t->opaque, 500, API_UNAVAILABLE, "the schedule as kept in Redis does not "
               "read", NULL);
}

static void run_list(struct schedules *s, int slot, struct task *t)
{
    struct schedstore *ss = ss_of(s, slot);
    char **ids = NULL, err[256];
    void **items;
    size_t n = 0;
    int more = 0;

    if (schedstore_list(ss, t->after, (size_t)t->n, &ids, &n, &more, err, sizeof(err)) < 0) {
        redis_failed(t, "listing schedules", err);
        return;
    }
    if (!(items = calloc(n ? n : 1, sizeof(*items)))) {
        schedstore_ids_free(ids, n);
        answer(t->done, t->opaque, 503, API_UNAVAILABLE, "out of memory", NULL);
        return;
    }
    for (size_t i = 0; i < n; i++)
        items[i] = read_data(ss, ids[i], 1);   /* NULL: deleted meanwhile */
    answer(t->done, t->opaque, 200, API_OK, "ok",
           schedjson_list(items, n, n ? ids[n - 1] : NULL, more));
    free(items);
    schedstore_ids_free(ids, n);
}

static void run_delete(struct schedules *s, int slot, struct task *t)
{
    struct sched_change c;
    char err[256];
    int found;

    if (schedstore_delete(ss_of(s, slot), t->id, &found, &c, err, sizeof(err)) < 0) {
        redis_failed(t, "delete", err);
        return;
    }
    if (!found) {
        not_found(t);
        return;
    }
    cancel_occurrence(s, slot, t->id, c.old_next, c.old_job);
    sched_change_release(&c);
    log_info("schedule=%s deleted", t->id);
    answer(t->done, t->opaque, 200, API_OK, "deleted", schedjson_id(t->id));
}

static void run_pause(struct schedules *s, int slot, struct task *t)
{
    struct schedstore *ss = ss_of(s, slot);
    struct sched_change c;
    enum sched_switch res;
    char err[256];

    if (schedstore_pause(ss, t->id, clock_now_ms(), &res, &c, err, sizeof(err)) < 0) {
        redis_failed(t, "pause", err);
        return;
    }
    if (res == SCHED_NONE) {
        not_found(t);
        return;
    }
    if (res == SCHED_SWITCHED)
        cancel_occurrence(s, slot, t->id, c.old_next, c.old_job);
    sched_change_release(&c);
    answer(t->done, t->opaque, 200, API_OK, res == SCHED_SWITCHED ? "paused" : "already paused",
           read_data(ss, t->id, 0));
}

/* Resumes: the first occurrence after the pause as catch_up says, under a compare of the
 * generation read (a change in between: read again, twice). */
static int run_resume(struct schedules *s, int slot, struct task *t)
{
    struct schedstore *ss = ss_of(s, slot);
    int64_t now, first = 0, gen;
    enum sched_switch res = SCHED_CHANGED;
    struct recur_timing timing;
    struct sched_kept k;
    char err[256];

    for (int tries = 0; res == SCHED_CHANGED && tries < 3; tries++) {
        if (!read_kept(ss, t, &k))
            return 0;
        if (!k.st.paused) {
            sched_kept_release(&k);
            answer(t->done, t->opaque, 200, API_OK, "not paused",
                   read_data(ss, t->id, PREVIEW_DEFAULT));
            return 0;
        }
        if (kept_timing(t, &k, &timing) < 0) {
            sched_kept_release(&k);
            return 0;
        }
        now = clock_now_ms();
        first = recur_first(&timing, now, k.paused_pending);
        if (schedstore_resume(ss, t->id, k.st.generation, first,
                              first + recur_jitter(t->id, first, timing.jitter_ms), now, &res, &gen,
                              err, sizeof(err)) < 0) {
            sched_kept_release(&k);
            redis_failed(t, "resume", err);
            return 0;
        }
        if (res == SCHED_SWITCHED && first > 0) {
            t->data = read_data(ss, t->id, PREVIEW_DEFAULT);
            add_occurrence(s, t->id, &timing, k.timing_json, k.job_json, first, gen, k.st.runs,
                           1, 1, first_added, t);
            sched_kept_release(&k);
            return 1;
        }
        sched_kept_release(&k);
    }
    if (res == SCHED_SWITCHED)
        answer(t->done, t->opaque, 200, API_OK, "resumed; the schedule has no fire time left",
               read_data(ss, t->id, PREVIEW_DEFAULT));
    else if (res == SCHED_NONE)
        not_found(t);
    else if (res == SCHED_ALREADY)
        answer(t->done, t->opaque, 200, API_OK, "not paused", NULL);
    else
        answer(t->done, t->opaque, 409, API_CONFLICT, "the schedule kept changing; try again",
               NULL);
    return 0;
}

static int run_trigger(struct schedules *s, int slot, struct task *t)
{
    struct recur_timing timing;
    struct sched_kept k;
    char job[JOB_ID_MAX + 1];
    int64_t now = clock_now_ms();
    int handed = 0;

    if (!read_kept(ss_of(s, slot), t, &k))
        return 0;
    if (kept_timing(t, &k, &timing) == 0) {
        if (recur_next(&timing, now - 1) == now)
            now++;   /* not the id of the schedule's own occurrence of this instant */
        snprintf(job, sizeof(job), "%s@%lld", t->id, (long long)now);
        t->data = schedjson_triggered(t->id, job, now);
        add_occurrence(s, t->id, &timing, k.timing_json, k.job_json, now, 0, 0, 0, 0,
                       first_added, t);
        handed = 1;
    }
    sched_kept_release(&k);
    return handed;
}

static void run_next(struct schedules *s, int slot, struct task *t)
{
    struct recur_timing timing;
    struct sched_kept k;

    if (!read_kept(ss_of(s, slot), t, &k))
        return;
    if (kept_timing(t, &k, &timing) == 0)
        answer(t->done, t->opaque, 200, API_OK, "ok",
               schedjson_preview(&timing, (int)t->n, t->from_ms));
    sched_kept_release(&k);
}

/* Moves the schedule on from the occurrence of t that came due, and adds the next occurrence
 * (again, when it had moved on before: the add is idempotent). */
static void move_on(struct schedules *s, int slot, const char *id, int64_t gen, int64_t fire_ms,
                    int64_t next_ms, int ran, const struct recur_timing *timing,
                    const char *timing_json)
{
    struct sched_advance a;
    char err[256];
    int64_t due = next_ms > 0 ? next_ms + recur_jitter(id, next_ms, timing->jitter_ms) : 0;

    if (schedstore_advance(ss_of(s, slot), id, gen, fire_ms, next_ms, due, ran, &a, err,
                           sizeof(err)) < 0) {
        log_warn("schedule=%s: moving on from %lld failed (a sweep does it): %s", id,
                 (long long)fire_ms, err);
        return;
    }
    if (a.res > 0 && a.next_ms > 0)
        add_occurrence(s, id, timing, timing_json, a.job_json, a.next_ms, gen, a.runs, 1, 0,
                       occurrence_added, NULL);
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

    if (!st_of(s, slot) || store_read_many(st_of(s, slot), 1, &rd) < 0) {
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
    int found, rc;

    if (schedstore_get(ss_of(s, slot), id, &k, &found, err, sizeof(err)) < 0) {
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
    if (rc == 0 || (rc == 1 && state == JOB_PENDING)) {
        log_info("sweep: occurrence %s %s; adding it again", job, rc ? "is overdue" : "is missing");
        add_occurrence(s, id, &timing, k.timing_json, k.job_json, k.st.next_ms, k.st.generation,
                       k.st.runs, 1, 0, occurrence_added, NULL);
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

static void run_task(struct schedules *s, int slot, struct task *t)
{
    int handed = 0;

    if (!ss_of(s, slot) || !st_of(s, slot)) {
        if (t->done)
            answer(t->done, t->opaque, 503, API_UNAVAILABLE, "out of memory", NULL);
        task_free(t);
        return;
    }
    switch (t->kind) {
    case T_PUT: handed = run_put(s, slot, t); break;
    case T_RESUME: handed = run_resume(s, slot, t); break;
    case T_TRIGGER: handed = run_trigger(s, slot, t); break;
    case T_GET: run_get(s, slot, t); break;
    case T_LIST: run_list(s, slot, t); break;
    case T_DELETE: run_delete(s, slot, t); break;
    case T_PAUSE: run_pause(s, slot, t); break;
    case T_NEXT: run_next(s, slot, t); break;
    case T_MOVE:
        move_on(s, slot, t->id, t->gen, t->fire_ms, t->next_ms, t->ran, &t->timing,
                t->timing_json);
        break;
    case T_SWEEP: sweep_one(s, slot, t->id); break;
    }
    if (!handed)
        task_free(t);
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
    if (t->done) {
        snprintf(msg, sizeof(msg), "schedules: %s", why);
        answer(t->done, t->opaque, 503, API_UNAVAILABLE, msg, NULL);
    } else {
        log_info("schedule=%s: a move on was dropped (%s); a sweep does it", t->id, why);
    }
    task_free(t);
}

static void *sweep_main(void *arg)
{
    struct schedules *s = arg;
    char err[256];
    int64_t count;

    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        struct timespec until;
        char **ids = NULL;
        size_t n = 0;
        int64_t now;

        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += SWEEP_EVERY_MS / 1000;
        pthread_cond_timedwait(&s->cv, &s->mu, &until);
        if (s->stop)
            break;
        pthread_mutex_unlock(&s->mu);
        now = clock_now_ms();
        if (schedstore_take_overdue(s->sweep_ss, now - SWEEP_GRACE_MS, now + SWEEP_AGAIN_MS,
                                    SWEEP_MAX, &ids, &n, err, sizeof(err)) == 0) {
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
        if (schedstore_count(s->sweep_ss, &count, err, sizeof(err)) == 0)
            metrics_set(M_SCHEDULES, count);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

struct schedules *schedules_new(const struct config *cfg, struct jobs *jobs, char *err,
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
                                     .nendpoints = cfg->callbacks.nendpoints };
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

void schedules_free(struct schedules *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->sweeping)
        pthread_join(s->sweeper, NULL);
    if (s->requests)
        workers_free(s->requests);
    if (s->moves)
        workers_free(s->moves);
    for (int i = 0; i < REQUEST_WORKERS + MOVE_WORKERS; i++) {
        schedstore_free(s->wss[i]);
        store_free(s->wst[i]);
    }
    schedstore_free(s->sweep_ss);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
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

/* The id and the action of a path below the prefix: 0, or -1 with e set. */
static int split_path(const char *path, char id[RECUR_ID_MAX + 1], const char **action,
                      struct api_error *e)
{
    const char *start = path[0] == '/' ? path + 1 : path, *slash = strchr(start, '/');
    size_t len = slash ? (size_t)(slash - start) : strlen(start);
    char why[128];

    *action = slash ? slash + 1 : "";
    id[0] = '\0';
    if (len == 0 && slash)
        return api_fail(e, 404, API_NOT_FOUND, "no such schedule route: an empty schedule id");
    if (len == 0)
        return 0;
    if (len > RECUR_ID_MAX)
        return api_fail(e, 400, API_BAD_REQUEST, "schedule id: longer than %d characters",
                        RECUR_ID_MAX);
    if (job_id_valid(start, len, why, sizeof(why)) < 0)
        return api_fail(e, 400, API_BAD_REQUEST, "schedule id: %s", why);
    memcpy(id, start, len);
    id[len] = '\0';
    return 0;
}

const char *schedules_allow(const char *path)
{
    const char *start = path[0] == '/' ? path + 1 : path, *slash = strchr(start, '/');
    const char *action = slash ? slash + 1 : "";

    if (!start[0])
        return "GET";
    if (slash == start)
        return NULL;   /* an empty id */
    if (!action[0])
        return "GET, PUT, DELETE";
    if (strcmp(action, "next") == 0)
        return "GET";
    if (strcmp(action, "pause") == 0 || strcmp(action, "resume") == 0 ||
        strcmp(action, "trigger") == 0)
        return "POST";
    return NULL;
}

/* Whether method is one of the list allow ("GET, PUT, DELETE"). */
static int takes(const char *allow, const char *method)
{
    size_t n = strlen(method);

    for (const char *m = allow; (m = strstr(m, method)); m += n) {
        if ((m == allow || m[-1] == ' ') && (m[n] == ',' || m[n] == '\0'))
            return 1;
    }
    return 0;
}

/* Fills t from r (the HTTP thread's part: parsing, no network). 0, or -1 with e set. A path's
 * methods are checked before its id: a wrong method is a 405 whatever the id. */
static int task_of(struct schedules *s, const struct schedules_request *r, struct task *t,
                   struct api_error *e)
{
    const char *action, *allow = schedules_allow(r->path);

    if (allow && !takes(allow, r->method))
        return api_fail(e, 405, API_BAD_REQUEST, "this path takes %s", allow);
    if (split_path(r->path, t->id, &action, e) < 0)
        return -1;
    if (!t->id[0]) {
        t->kind = T_LIST;
        t->n = LIST_DEFAULT;
        snprintf(t->after, sizeof(t->after), "%s", r->after ? r->after : "");
        if (api_query_int(r->limit, 1, LIST_MAX, &t->n) < 0)
            return api_fail(e, 400, API_BAD_REQUEST, "limit must be an integer from 1 to %d",
                            LIST_MAX);
        return 0;
    }
    if (!action[0]) {
        t->kind = strcmp(r->method, "GET") == 0 ? T_GET
                  : strcmp(r->method, "DELETE") == 0 ? T_DELETE : T_PUT;
        return 0;
    }
    if (strcmp(action, "next") == 0) {
        t->kind = T_NEXT;
        t->n = 10;
        t->from_ms = clock_now_ms();
        if (api_query_int(r->n, 1, RECUR_PREVIEW_MAX, &t->n) < 0)
            return api_fail(e, 400, API_BAD_REQUEST, "n must be an integer from 1 to %d",
                            RECUR_PREVIEW_MAX);
        if (api_query_int(r->from_ms, 0, 253402300799999LL, &t->from_ms) < 0)
            return api_fail(e, 400, API_BAD_REQUEST, "from_ms must be epoch milliseconds");
        return 0;
    }
    if (strcmp(action, "pause") == 0)
        t->kind = T_PAUSE;
    else if (strcmp(action, "resume") == 0)
        t->kind = T_RESUME;
    else if (strcmp(action, "trigger") == 0)
        t->kind = T_TRIGGER;
    else
        return api_fail(e, 404, API_NOT_FOUND, "no such schedule route: %s %s (a schedule has "
                        "POST pause, resume, trigger and GET next)", r->method, action);
    (void)s;
    return 0;
}

/* A put's definition, read and checked on the HTTP thread. 0, or -1 with e set. */
static int read_put(struct schedules *s, const struct schedules_request *r, struct task *t,
                    struct api_error *e)
{
    int64_t now = clock_now_ms();

    if (schedjson_parse_def(r->body ? r->body : "", r->len, &s->limits, now, &t->def, e) < 0)
        return -1;
    if ((t->first_ms = recur_first(&t->def.timing, now, 0)) < 0)
        return api_fail(e, 400, API_BAD_REQUEST, "%s: the schedule never fires after now%s",
                        t->def.timing.cron_text[0] ? "cron" : "every_ms",
                        t->def.timing.end_ms ? " and before end_at_ms" : "");
    return 0;
}

void schedules_serve(struct schedules *s, const struct schedules_request *r, jobs_done_fn done,
                     void *opaque)
{
    struct task *t = calloc(1, sizeof(*t));
    struct api_error e;

    if (!t) {
        answer(done, opaque, 503, API_UNAVAILABLE, "out of memory", NULL);
        return;
    }
    t->done = done;
    t->opaque = opaque;
    if (task_of(s, r, t, &e) < 0 || (t->kind == T_PUT && read_put(s, r, t, &e) < 0)) {
        answer(done, opaque, e.status, e.code, e.message, NULL);
        task_free(t);
        return;
    }
    workers_queue(s->requests, t);
}

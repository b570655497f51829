/* schedroutes: the schedules' HTTP routes. A request is read on the HTTP thread into a task
 * (its path, methods, query and, for a put, its definition), run on a request worker against
 * Redis and answered; a put's, resume's or trigger's answer waits for the add of its occurrence.
 * Part of schedules; the contract is in include/schedules/schedules.h, the shared inside in
 * include/schedules/schedules_link.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "schedules/schedules_link.h"

#define LOG_MODULE "schedules"
#define PREVIEW_DEFAULT 5
#define LIST_DEFAULT 50
#define LIST_MAX 500
#define RUNS_DEFAULT 20
/* A put of the kept timing whose planned occurrence has come (claimed, being called, retried):
 * it runs with the job it had and moves the schedule on; the next ones take the new job. */
#define UNDER_WAY "ok; the occurrence under way runs with the job it had, the next ones with this"

static void reply(struct task *t, int status, int code, const char *msg, void *data)
{
    answer_send(t->done, t->opaque, status, code, msg, data);
}

#define PUT_RECHECKS 3   /* a put's looks again at its schedule's job once its add is done */

static void reply_added(struct task *t)
{
    char msg[JOB_ID_MAX + 64];

    snprintf(msg, sizeof(msg), "ok; and one occurrence now: %s", t->immediate);
    reply(t, 200, API_OK, t->immediate[0] ? msg : "ok", t->data);
}

/* The add of a put's or resume's first occurrence answered: so is the request (a put looks at
 * its schedule again first: run_recheck). */
static void first_added(void *opaque, const struct answer *a)
{
    struct task *t = opaque;

    if ((a->is == ANSWER_DONE || a->is == ANSWER_ALREADY) && t->owner &&
        t->rechecks < PUT_RECHECKS) {
        enum task_kind was = t->kind;
        t->kind = T_RECHECK;
        if (schedules_queue_request(t->owner, t))
            return;
        t->kind = was;   /* stopping: answered as it is */
    }
    if (a->is == ANSWER_DONE || a->is == ANSWER_ALREADY) {
        reply_added(t);
    } else if ((t->kept || t->kind == T_RECHECK) &&
               (a->is == ANSWER_EXISTS || a->is == ANSWER_CONFLICT)) {
        /* claimed between the put and this add: under way */
        reply(t, 200, API_OK, UNDER_WAY, t->data);
    } else if (t->kind == T_RECHECK) {   /* the put is done; its occurrence has another's job */
        log_warn("schedule=%s: its occurrence at %lld was not given the job kept: %s", t->id,
                 (long long)t->first_ms, a->message);
        reply_added(t);
    } else {
        api_data_free(t->data);
        if (t->kind == T_TRIGGER)
            reply(t, 503, API_UNAVAILABLE, "the occurrence was not added (Redis or Kafka failed)",
                  NULL);
        else
            reply(t, 503, API_UNAVAILABLE, "the schedule is kept, but its "
                  "first occurrence was not added now (Redis or Kafka failed); a sweep adds it "
                  "within seconds of its due time", NULL);
    }
    schedules_task_free(t);
}

/* What became of a put's immediate occurrence, which no request waits for. */
static void immediate_added(void *opaque, const struct answer *a)
{
    char *job = opaque;

    if (a->is != ANSWER_DONE && a->is != ANSWER_ALREADY)
        log_warn("the immediate occurrence %s was not added: %s", job, a->message);
    free(job);
}

/* A put's "immediately": one occurrence now, besides the grid's (as a trigger), when the put
 * made a new grid; a put that kept it (repeated, or one of several at once) runs none. Its job
 * id into job. */
static void run_immediately(struct schedules *s, struct task *t, char job[JOB_ID_MAX + 1])
{
    int64_t now = clock_now_ms();
    char *copy;

    if (recur_next(&t->def.timing, now - 1) == now)
        now++;   /* not the id of the schedule's own occurrence of this instant */
    snprintf(job, JOB_ID_MAX + 1, "%s@%lld", t->id, (long long)now);
    if (!(copy = strdup(job))) {
        log_warn("the immediate occurrence %s was not added: out of memory", job);
        return;
    }
    schedules_add_occurrence(s, t->id, &t->def.timing, t->def.timing_json, t->def.job_json, now,
                             0, 0, 0, 0, 0, immediate_added, copy);
}

/* The schedule id of the request's task is answered 404. */
static void not_found(struct task *t)
{
    char msg[RECUR_ID_MAX + 32];

    snprintf(msg, sizeof(msg), "no schedule %s", t->id);
    reply(t, 404, API_NOT_FOUND, msg, NULL);
}

static void redis_failed(struct task *t, const char *what, const char *err)
{
    char msg[512];

    snprintf(msg, sizeof(msg), "%s failed: %s", what, err);
    reply(t, 503, API_UNAVAILABLE, msg, NULL);
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

/* A put's answer: the schedule as this put left it (its definition, generation and fire time,
 * whatever a put at the same time wrote after it), with what only Redis knows (created,
 * last run) read again. NULL when out of memory. */
static void *put_data(struct schedstore *ss, const struct task *t, const struct sched_change *c,
                      int64_t runs, int64_t now)
{
    struct sched_kept k;
    struct sched_state st = { .created_ms = now };
    char err[256];
    int found = 0;

    if (schedstore_get(ss, t->id, &k, &found, err, sizeof(err)) == 0 && found) {
        st = k.st;
        sched_kept_release(&k);
    }
    st.generation = c->gen;
    st.paused = c->paused;
    st.runs = runs;
    st.next_ms = c->paused || t->first_ms <= 0 ? 0 : t->first_ms;
    st.updated_ms = now;
    return schedjson_data(t->id, t->def.timing_json, t->def.job_json, &st, PREVIEW_DEFAULT, now);
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
    reply(t, 500, API_INTERNAL, msg, NULL);
    return -1;
}

/* A put of a schedule that exists with the same timing keeps its grid and its runs (a put
 * repeated at every deploy must not restart an interval, nor its max_runs): t's timing becomes
 * the kept one, its first occurrence the pending one. 1 when so. */
/* t's timing becomes the kept one, timing_json (anchor and all): 1, or 0 when it does not read. */
static int adopt_timing(struct task *t, const char *timing_json)
{
    char err[256], *kept = strdup(timing_json);
    struct recur_timing timing;

    if (!kept || timing_parse(kept, strlen(kept), &timing, err, sizeof(err)) < 0) {
        free(kept);
        return 0;
    }
    t->def.timing = timing;
    free(t->def.timing_json);
    t->def.timing_json = kept;
    return 1;
}

static int same_timing(struct task *t, const struct sched_kept *k, int64_t now)
{
    if (!schedjson_same_timing(k->timing_json, t->def.timing_json) ||
        !adopt_timing(t, k->timing_json))
        return 0;
    t->first_ms = k->st.next_ms > 0 ? k->st.next_ms : recur_next(&t->def.timing, now);
    return 1;
}

/* Each runner answers t's request; 1 when it handed t on (to an add whose answer answers it),
 * 0 when the caller frees t. */
static int run_put(struct schedules *s, int slot, struct task *t)
{
    struct schedstore *ss = schedules_ss(s, slot);
    int64_t now = clock_now_ms(), due;
    struct sched_change c;
    struct sched_kept k;
    char err[256], *sig;
    int found, keep = 0, rc;
    int64_t runs = 0, prev = 0;

    if (schedstore_get(ss, t->id, &k, &found, err, sizeof(err)) < 0) {
        redis_failed(t, "put", err);
        return 0;
    }
    if (found) {
        if ((keep = same_timing(t, &k, now)))
            runs = k.st.runs;
        prev = k.advanced_from;
        sched_kept_release(&k);
    }
    due = schedules_index_ms(s, t->first_ms > 0 ? t->first_ms + recur_jitter(t->id, t->first_ms,
                                                  t->def.timing.jitter_ms) : 0);
    if (!(sig = schedjson_timing_sig(t->def.timing_json))) {
        reply(t, 503, API_UNAVAILABLE, "out of memory", NULL);
        return 0;
    }
    rc = schedstore_put(ss, t->id, t->def.timing_json, t->def.job_json, t->first_ms, due, now,
                        keep, sig, &c, err, sizeof(err));
    free(sig);
    if (rc < 0) {
        redis_failed(t, "put", err);
        return 0;
    }
    if (c.kept) {   /* the fire time planned now, whatever the read saw (one may have run) */
        t->kept = 1;
        t->first_ms = c.old_next;
        runs = c.runs;
        /* kept by the script where the read saw another timing, or none: a concurrent put of
         * this timing made it; its anchor is the grid */
        if (!keep && c.kept_timing && !adopt_timing(t, c.kept_timing))
            log_error("schedule=%s: its timing as kept does not read", t->id);
    } else if (c.old_next && (c.paused || c.old_next != t->first_ms)) {
        schedules_cancel_occurrence(s, slot, t->id, c.old_next, t->def.job_json);
    }
    if (c.gen == 1)
        __atomic_store_n(&s->recount, 1, __ATOMIC_RELAXED);
    log_info("schedule=%s put (generation %lld)%s, first fire %lld", t->id, (long long)c.gen,
             c.paused ? ", paused" : "", (long long)t->first_ms);
    if (t->def.immediately && !c.kept && !c.paused) {
        run_immediately(s, t, t->immediate);
    }
    t->data = put_data(ss, t, &c, runs, now);
    sched_change_release(&c);
    if (c.paused || t->first_ms <= 0 || (t->kept && t->first_ms <= now)) {
        reply(t, 200, API_OK, c.paused ? "ok; the schedule stays paused until resumed"
                              : t->first_ms <= 0 ? "ok; the schedule has no fire time left"
                              : UNDER_WAY, t->data);
        t->data = NULL;
        return 0;
    }
    t->owner = s;
    t->gen = c.gen;
    t->runs = runs;
    t->fire_ms = t->kept ? prev : 0;
    schedules_add_occurrence(s, t->id, &t->def.timing, t->def.timing_json, t->def.job_json,
                             t->first_ms, t->gen, t->runs, t->fire_ms, 1, 1, first_added, t);
    return 1;
}

/* A put's look again once its occurrence is added: a concurrent put of the same timing may have
 * written its job after this put did and added its occurrence before this one's add, which then
 * gave the occurrence the job no longer kept. The occurrence is added again with the job kept.
 * Each put looks after its own add, so the last add is always looked at. */
static int run_recheck(struct schedules *s, int slot, struct task *t)
{
    struct sched_kept k;
    char err[256];
    int found, again = 0;

    t->rechecks++;
    if (schedstore_get(schedules_ss(s, slot), t->id, &k, &found, err, sizeof(err)) < 0) {
        log_warn("schedule=%s: looking at its job again failed: %s", t->id, err);
    } else if (found) {
        again = !k.st.paused && k.st.generation == t->gen && k.st.next_ms == t->first_ms &&
                strcmp(k.job_json, t->def.job_json) != 0;
        if (again) {
            free(t->def.job_json);
            t->def.job_json = k.job_json;
            k.job_json = NULL;
        }
        sched_kept_release(&k);
    }
    if (!again) {
        reply_added(t);
        return 0;
    }
    schedules_add_occurrence(s, t->id, &t->def.timing, t->def.timing_json, t->def.job_json,
                             t->first_ms, t->gen, t->runs, t->fire_ms, 1, 1, first_added, t);
    return 1;
}

static void run_get(struct schedules *s, int slot, struct task *t)
{
    struct schedstore *ss = schedules_ss(s, slot);
    struct sched_kept k;
    void *data;

    if (!read_kept(ss, t, &k))
        return;
    data = schedjson_data(t->id, k.timing_json, k.job_json, &k.st, PREVIEW_DEFAULT,
                          clock_now_ms());
    sched_kept_release(&k);
    if (data)
        reply(t, 200, API_OK, "ok", data);
    else
        reply(t, 500, API_INTERNAL, "the schedule as kept in Redis does not read", NULL);
}

static void run_list(struct schedules *s, int slot, struct task *t)
{
    struct schedstore *ss = schedules_ss(s, slot);
    char **ids = NULL, err[256];
    void **items;
    struct sched_kept *kept;
    int64_t now = clock_now_ms();
    size_t n = 0;
    int more = 0, *found;

    if (schedstore_list(ss, t->after, (size_t)t->n, &ids, &n, &more, err, sizeof(err)) < 0) {
        redis_failed(t, "listing schedules", err);
        return;
    }
    items = calloc(n ? n : 1, sizeof(*items));
    kept = calloc(n ? n : 1, sizeof(*kept));
    found = calloc(n ? n : 1, sizeof(*found));
    if (!items || !kept || !found) {
        reply(t, 503, API_UNAVAILABLE, "out of memory", NULL);
    } else if (schedstore_get_many(ss, n, (const char *const *)ids, kept, found, err,
                                   sizeof(err)) < 0) {
        redis_failed(t, "listing schedules", err);
    } else {
        for (size_t i = 0; i < n; i++)   /* not found: deleted meanwhile */
            if (found[i]) {
                items[i] = schedjson_data(ids[i], kept[i].timing_json, kept[i].job_json,
                                          &kept[i].st, 1, now);
                sched_kept_release(&kept[i]);
            }
        reply(t, 200, API_OK, "ok", schedjson_list(items, n, n ? ids[n - 1] : NULL, more));
    }
    free(items);
    free(kept);
    free(found);
    schedstore_ids_free(ids, n);
}

static void run_delete(struct schedules *s, int slot, struct task *t)
{
    struct sched_change c;
    char err[256];
    int found;

    if (schedstore_delete(schedules_ss(s, slot), t->id, &found, &c, err, sizeof(err)) < 0) {
        redis_failed(t, "delete", err);
        return;
    }
    if (!found) {
        not_found(t);
        return;
    }
    schedules_cancel_occurrence(s, slot, t->id, c.old_next, c.old_job);
    sched_change_release(&c);
    __atomic_store_n(&s->recount, 1, __ATOMIC_RELAXED);
    log_info("schedule=%s deleted", t->id);
    reply(t, 200, API_OK, "deleted", schedjson_id(t->id));
}

static void run_pause(struct schedules *s, int slot, struct task *t)
{
    struct schedstore *ss = schedules_ss(s, slot);
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
        schedules_cancel_occurrence(s, slot, t->id, c.old_next, c.old_job);
    sched_change_release(&c);
    reply(t, 200, API_OK, res == SCHED_SWITCHED ? "paused" : "already paused",
          read_data(ss, t->id, 0));
}

/* Resumes: the first occurrence after the pause as catch_up says, under a compare of the
 * generation read (a change in between: read again, twice). */
static int run_resume(struct schedules *s, int slot, struct task *t)
{
    struct schedstore *ss = schedules_ss(s, slot);
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
            reply(t, 200, API_OK, "not paused", read_data(ss, t->id, PREVIEW_DEFAULT));
            return 0;
        }
        if (kept_timing(t, &k, &timing) < 0) {
            sched_kept_release(&k);
            return 0;
        }
        now = clock_now_ms();
        first = recur_first(&timing, now, k.paused_pending);
        if (schedstore_resume(ss, t->id, k.st.generation, first,
                              schedules_index_ms(s, first > 0 ? first + recur_jitter(t->id, first,
                                                 timing.jitter_ms) : 0), now, &res, &gen,
                              err, sizeof(err)) < 0) {
            sched_kept_release(&k);
            redis_failed(t, "resume", err);
            return 0;
        }
        if (res == SCHED_SWITCHED && first > 0) {
            t->data = read_data(ss, t->id, PREVIEW_DEFAULT);
            schedules_add_occurrence(s, t->id, &timing, k.timing_json, k.job_json, first, gen,
                                     k.st.runs, 0, 1, 1, first_added, t);
            sched_kept_release(&k);
            return 1;
        }
        sched_kept_release(&k);
    }
    if (res == SCHED_SWITCHED)
        reply(t, 200, API_OK, "resumed; the schedule has no fire time left",
              read_data(ss, t->id, PREVIEW_DEFAULT));
    else if (res == SCHED_NONE)
        not_found(t);
    else if (res == SCHED_ALREADY)
        reply(t, 200, API_OK, "not paused", NULL);
    else
        reply(t, 409, API_CONFLICT, "the schedule kept changing; try again", NULL);
    return 0;
}

static int run_trigger(struct schedules *s, int slot, struct task *t)
{
    struct recur_timing timing;
    struct sched_kept k;
    char job[JOB_ID_MAX + 1];
    int64_t now = clock_now_ms();
    int handed = 0;

    if (!read_kept(schedules_ss(s, slot), t, &k))
        return 0;
    if (kept_timing(t, &k, &timing) == 0) {
        if (recur_next(&timing, now - 1) == now)
            now++;   /* not the id of the schedule's own occurrence of this instant */
        snprintf(job, sizeof(job), "%s@%lld", t->id, (long long)now);
        t->data = schedjson_triggered(t->id, job, now);
        schedules_add_occurrence(s, t->id, &timing, k.timing_json, k.job_json, now, 0, 0, 0, 0, 0,
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

    if (!read_kept(schedules_ss(s, slot), t, &k))
        return;
    if (kept_timing(t, &k, &timing) == 0)
        reply(t, 200, API_OK, "ok", schedjson_preview(&timing, (int)t->n, t->from_ms));
    sched_kept_release(&k);
}

/* The last runs: each fire time moved on from, and what its occurrence's record says now. */
static void run_runs(struct schedules *s, int slot, struct task *t)
{
    struct sched_run runs[SCHED_RUNS_KEPT];
    struct store_read reads[SCHED_RUNS_KEPT];
    char ids[SCHED_RUNS_KEPT][JOB_ID_MAX + 1], err[256];
    struct sched_run_seen seen[SCHED_RUNS_KEPT];
    struct sched_kept k;
    size_t n = 0;

    if (!read_kept(schedules_ss(s, slot), t, &k))
        return;
    sched_kept_release(&k);
    if (schedstore_runs(schedules_ss(s, slot), t->id, (size_t)t->n, runs, &n, err,
                        sizeof(err)) < 0) {
        redis_failed(t, "reading the runs", err);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(ids[i], sizeof(ids[i]), "%s@%lld", t->id, (long long)runs[i].fire_ms);
        reads[i] = (struct store_read){ .id = ids[i] };
    }
    if (n && store_read_many(schedules_st(s, slot), n, reads) < 0) {
        for (size_t i = 0; i < n; i++)
            free(reads[i].data);
        redis_failed(t, "reading the runs' jobs", reads[0].err);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        struct job_record rec;
        struct job j = { .id = "" };
        seen[i] = (struct sched_run_seen){ .fire_ms = runs[i].fire_ms, .ran = runs[i].ran,
                                           .job_id = ids[i], .found = reads[i].found };
        if (reads[i].found &&
            job_record_read(ids[i], reads[i].data, reads[i].len, &j, &rec, err, sizeof(err)) == 0) {
            seen[i].state = rec.state;
            snprintf(seen[i].error, sizeof(seen[i].error), "%s", rec.error);
        } else if (reads[i].found) {
            seen[i].state = JOB_FAILED;
            snprintf(seen[i].error, sizeof(seen[i].error), "its record does not read: %s", err);
        }
        if (reads[i].found)
            job_release(&j);
        free(reads[i].data);
    }
    reply(t, 200, API_OK, "ok", schedjson_runs(seen, n));
}

int schedules_run_request(struct schedules *s, int slot, struct task *t)
{
    switch (t->kind) {
    case T_PUT: return run_put(s, slot, t);
    case T_RECHECK: return run_recheck(s, slot, t);
    case T_RESUME: return run_resume(s, slot, t);
    case T_TRIGGER: return run_trigger(s, slot, t);
    case T_GET: run_get(s, slot, t); break;
    case T_LIST: run_list(s, slot, t); break;
    case T_DELETE: run_delete(s, slot, t); break;
    case T_PAUSE: run_pause(s, slot, t); break;
    case T_NEXT: run_next(s, slot, t); break;
    case T_RUNS: run_runs(s, slot, t); break;
    case T_MOVE: case T_SWEEP: break;   /* schedules.c's */
    }
    return 0;
}

/* ---- reading a request (on the HTTP thread) ---- */

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
    if (strcmp(action, "next") == 0 || strcmp(action, "runs") == 0)
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
    if (strcmp(action, "runs") == 0) {
        t->kind = T_RUNS;
        t->n = RUNS_DEFAULT;
        if (api_query_int(r->limit, 1, SCHED_RUNS_KEPT, &t->n) < 0)
            return api_fail(e, 400, API_BAD_REQUEST, "limit must be an integer from 1 to %d",
                            SCHED_RUNS_KEPT);
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
                        "POST pause, resume, trigger and GET next, runs)", r->method, action);
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

void schedules_serve(struct schedules *s, const struct schedules_request *r, answer_fn done,
                     void *opaque)
{
    struct task *t = calloc(1, sizeof(*t));
    struct api_error e;

    if (!t) {
        answer_send(done, opaque, 503, API_UNAVAILABLE, "out of memory", NULL);
        return;
    }
    t->done = done;
    t->opaque = opaque;
    if (task_of(s, r, t, &e) < 0 || (t->kind == T_PUT && read_put(s, r, t, &e) < 0)) {
        answer_send(done, opaque, e.status, e.code, e.message, NULL);
        schedules_task_free(t);
        return;
    }
    if (!schedules_queue_request(s, t)) {
        answer_send(done, opaque, 503, API_UNAVAILABLE, "schedules: stopping", NULL);
        schedules_task_free(t);
    }
}

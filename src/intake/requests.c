/* requests: what the workers serve (get, remove, reschedule, the claims view and hand-backs,
 * each kind of a batch in one Redis pipeline), pops and pull operations handed to the pull
 * thread, and /stats. Part of the intake; the shared inside is include/intake/intake_link.h. */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/api.h"
#include "redis/leases.h"
#include "lib/clock.h"
#include "core/envelope.h"
#include "intake/health.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "intake/moves.h"
#include "kafka/producer.h"
#include "pull/pull.h"
#include "pull/pullq.h"
#include "core/decide.h"
#include "kafka/stats.h"
#include "redis/store.h"
#include "kafka/warm.h"
#include "lib/workers.h"
#include "intake/intake_link.h"

#define LOG_MODULE "intake"

/* Each kind's error code and the start of its failure message. */
static const struct {
    int code;
    const char *failed;
} task_kinds[] = {
    [T_GET] = { API_GET_FAILED, "get failed" },
    [T_REMOVE] = { API_REMOVE_FAILED, "remove failed" },
    [T_RESCHEDULE] = { API_RESCHEDULE_FAILED, "reschedule failed" },
    [T_CLAIMS] = { API_UNAVAILABLE, "claims" },
    [T_HAND_BACK] = { API_UNAVAILABLE, "release" },
    [T_PULL_TOPIC] = { API_UNAVAILABLE, "pull topic" },
};


/* Queues a request for the workers; it is answered through done. */
/* A task for the workers; NULL when out of memory (then done is answered). */
static struct task *task_new(enum task_kind kind, const char *id, int64_t due_ms, answer_fn done,
                             void *opaque)
{
    struct task *t = calloc(1, sizeof(*t));
    char msg[64];

    if (!t) {
        snprintf(msg, sizeof(msg), "%s: out of memory", task_kinds[kind].failed);
        answer_send(done, opaque, 503, task_kinds[kind].code, msg, NULL);
        return NULL;
    }
    *t = (struct task){ .kind = kind, .due_ms = due_ms, .group = (int)due_ms, .done = done,
                        .opaque = opaque };
    if (id)
        snprintf(t->id, sizeof(t->id), "%s", id);
    return t;
}

static void queue_task(struct intake *in, enum task_kind kind, const char *id, int64_t due_ms,
                       answer_fn done, void *opaque)
{
    struct task *t = task_new(kind, id, due_ms, done, opaque);

    if (t)
        workers_queue(in->workers, t);
}

void intake_drop_task(void *ctx, void *task, const char *why)
{
    struct task *t = task;
    char msg[256];

    (void)ctx;
    snprintf(msg, sizeof(msg), "%s: %s", task_kinds[t->kind].failed, why);
    answer_send(t->done, t->opaque, 503, task_kinds[t->kind].code, msg, NULL);
    free(t->ask);
    free(t);
}

void intake_reschedule(struct intake *in, const char *body, size_t len,
                     const char *const query[API_RESCHEDULE_ARGS], answer_fn done, void *opaque)
{
    struct api_error e;
    char id[JOB_ID_MAX + 1];
    int64_t now = clock_now_ms(), due_ms;

    if ((len > 0 ? api_parse_reschedule(body, len, &in->limits, now, id, &due_ms, &e)
                 : api_reschedule_query(query, &in->limits, now, id, &due_ms, &e)) < 0) {
        answer_send(done, opaque, e.status, e.code, e.message, NULL);
        return;
    }
    queue_task(in, T_RESCHEDULE, id, due_ms, done, opaque);
}

/* A reschedule whose record was moved (a->mv) or not (a->e says why), on a worker: answered, or
 * for an earlier time the message for the new time handed to the intake. */
static void rescheduled(struct intake *in, struct store *st, const struct task *t,
                        struct move_ask *a)
{
    struct pending_add *pa;
    struct move *mv = a->mv;
    struct job job = a->job;
    int64_t now;

    if (!mv) {
        answer_send(t->done, t->opaque, a->e.status, a->e.code, a->e.message, NULL);
        return;
    }
    if (!mv->earlier) {
        /* Its messages move on to the new due time when they reach the old one. */
        log_info("rescheduled job=%s due=%lld", t->id, (long long)t->due_ms);
        metrics_inc(M_JOBS_RESCHEDULED);
        answer_send(t->done, t->opaque, 200, API_OK, "ok", api_rescheduled_data(t->id, t->due_ms));
    } else if (!(pa = calloc(1, sizeof(*pa)))) {
        struct pending_add tmp = { .in = in, .job = job, .moved = mv, .done = t->done,
                                   .opaque = t->opaque };
        intake_moved_failed(in, st, &tmp, "out of memory");
    } else {
        /* A message for the new due time, answered once Kafka has it. */
        *pa = (struct pending_add){ .in = in, .job = job, .moved = mv, .done = t->done,
                                    .opaque = t->opaque, .queued_ms = clock_mono_ms() };
        now = clock_now_ms();
        pa->job.created_ms = now;   /* the message's timestamp: its level counts from now */
        pa->job.delay_ms = t->due_ms > now ? t->due_ms - now : 0;
        intake_enqueue(in, pa, &pa->next);
        return;
    }
    job_release(&job);
    move_free(mv);
}

/* Answers the get t whose record rd read (its data freed here). */
static void got(struct task *t, struct store_read *rd, const struct pullq_look *look)
{
    const char *id = t->id;
    struct job_record rec;
    char err[256], msg[512], *data = rd->data;
    size_t len = rd->len;
    struct job job;

    if (rd->failed) {
        metrics_inc(M_REDIS_ERRORS);
        snprintf(msg, sizeof(msg), "get failed: %s", rd->err);
        answer_send(t->done, t->opaque, 503, API_GET_FAILED, msg, NULL);
        return;
    }
    if (!rd->found) {
        answer_give(t->done, t->opaque, ANSWER_NO_JOB, 200, API_OK, "no such job", NULL);
        return;
    }
    if (job_record_read(id, data, len, &job, &rec, err, sizeof(err)) < 0) {
        log_error("job=%s has an unreadable record: %s", id, err);
        snprintf(msg, sizeof(msg), "job %s has an unreadable record: %s", id, err);
        answer_send(t->done, t->opaque, 500, API_GET_FAILED, msg, NULL);
    } else {
        void *d = api_job_data(&job, rec.state, rec.state == JOB_DELIVERED ? rec.stamp_ms : -1,
                               rec.error);
        if (look && look->failed)
            log_warn("get job=%s: its pull state is not known: %s", id, look->err);
        else if (look && look->found)
            api_job_pull_state(d, pullq_state_name(look->state), look->attempt, look->until_ms);
        answer_send(t->done, t->opaque, 200, API_OK, "ok", d);
    }
    job_release(&job);
    free(data);
}

/* The topic of the record (data, len) of job id into topic: 1 when its job is a pull job, else
 * 0 (an unreadable record too). */
static int record_pull_topic(const struct config *cfg, const char *id, const char *data,
                             size_t len, char topic[TOPIC_NAME_MAX + 1])
{
    struct job_record rec;
    struct job job = { .id = "" };   /* released also when never read */
    char err[256];
    int pulls = 0;

    if (job_record_read(id, data, len, &job, &rec, err, sizeof(err)) == 0 &&
        decide_pulls(cfg, job.topic, strlen(job.topic), job.deliver)) {
        snprintf(topic, TOPIC_NAME_MAX + 1, "%s", job.topic);
        pulls = 1;
    }
    job_release(&job);
    return pulls;
}

/* The pull topic of a delivered record (data, len) of job id into topic, or of a failed one (a
 * pull job dead-lettered): 1 when its job waits in (or went through) a pull topic, else 0. */
static int pull_topic_of(const struct config *cfg, const char *id, const char *data, size_t len,
                         char topic[TOPIC_NAME_MAX + 1])
{
    return len && (data[0] == job_state_letter(JOB_DELIVERED) ||
                   data[0] == job_state_letter(JOB_FAILED)) &&
           record_pull_topic(cfg, id, data, len, topic);
}

/* 1 when a job of topic is one the remove t may remove: any job for a plain remove; of t's
 * topic, when it names one, for a forgetting remove (which the caller found a pull job). */
static int topic_in_scope(const struct task *t, const char *topic)
{
    return !t->forget || !t->topic[0] || strcmp(topic, t->topic) == 0;
}

/* The worker's pull queues connection, made at its first use (NULL when out of memory). */
struct pullq *intake_worker_pullq(struct intake *in, int worker)
{
    if (!in->wpull[worker])
        in->wpull[worker] = pullq_new(in->cfg);
    return in->wpull[worker];
}

/* Answers the remove t whose outcome is rm. */
static void removed(struct task *t, const struct store_removal *rm, const struct pullq_op *cancel)
{
    const char *id = t->id;
    enum store_remove_result res = rm->res;
    enum job_state state = rm->state;
    char msg[512];

    if (rm->failed) {
        metrics_inc(M_REDIS_ERRORS);
        snprintf(msg, sizeof(msg), "remove failed: %s", rm->err);
        answer_send(t->done, t->opaque, 503, API_REMOVE_FAILED, msg, NULL);
    } else if (res == STORE_REMOVED || (cancel && !cancel->failed && cancel->res == PULLQ_DONE &&
                                        state != JOB_CANCELLED)) {
        log_info("removed %sjob=%s", res == STORE_REMOVED ? "" : "pull ", id);
        metrics_inc(M_JOBS_CANCELLED);
        answer_send(t->done, t->opaque, 200, API_OK, "ok", NULL);
    } else if (res == STORE_NO_JOB) {
        answer_give(t->done, t->opaque, ANSWER_NO_JOB, 200, API_OK, "no such job", NULL);
    } else if (res == STORE_REMOVE_NOT_A_RECORD) {
        snprintf(msg, sizeof(msg), "job %s has an unreadable record", id);
        answer_send(t->done, t->opaque, 500, API_REMOVE_FAILED, msg, NULL);
    } else if (state == JOB_CANCELLED ||
               (cancel && !cancel->failed && cancel->res == PULLQ_NOT_LIVE && cancel->state == 'c')) {
        answer_give(t->done, t->opaque, ANSWER_ALREADY, 200, API_OK, "ok (already removed)", NULL);
    } else if (cancel && cancel->failed) {
        snprintf(msg, sizeof(msg), "remove failed: %s", cancel->err);
        answer_send(t->done, t->opaque, 503, API_REMOVE_FAILED, msg, NULL);
    } else {
        snprintf(msg, sizeof(msg), "job %s is already %s and cannot be removed", id,
                 cancel && cancel->res == PULLQ_NOT_LIVE ? pullq_state_name(cancel->state)
                                                         : job_state_name(state));
        answer_send(t->done, t->opaque, 409, API_CONFLICT, msg, NULL);
    }
}

/* The tasks of a batch of one kind, for one pipeline. */
struct kind_batch {
    struct task **t;
    size_t n;
};

/* Pull jobs among the removes found delivered (made ready for poppers), or delivering (made
 * ready, or about to be, and not yet marked: a pop may have had it already): those ready or
 * reserved are removed from their pull topic, in one pipeline, into cancels (cancels[i].id
 * NULL: not a pull job). A delivering one not in its queue yet stays delivering (409). */
static void cancel_pulled(struct intake *in, int worker, struct store *st,
                          const struct kind_batch *b, const struct store_removal *rms,
                          struct pullq_op *cancels, char (*topics)[TOPIC_NAME_MAX + 1])
{
    size_t n = b->n;
    struct store_read reads[WORKER_BATCH];
    struct pullq_op ops[WORKER_BATCH];
    size_t at[WORKER_BATCH], k = 0, nops = 0, nended = 0;
    const char *ended[WORKER_BATCH];
    char err[256];
    struct pullq *pq;

    for (size_t i = 0; i < n; i++)
        if (!rms[i].failed && rms[i].res == STORE_TOO_LATE &&
            (rms[i].state == JOB_DELIVERED || rms[i].state == JOB_DELIVERING))
            reads[k] = (struct store_read){ .id = rms[i].id }, at[k++] = i;
    if (!k || !(pq = intake_worker_pullq(in, worker)))
        return;
    store_read_many(st, k, reads);
    for (size_t j = 0; j < k; j++) {
        size_t i = at[j];
        if (reads[j].found && !reads[j].failed &&
            (rms[i].state == JOB_DELIVERING
                 ? record_pull_topic(in->cfg, rms[i].id, reads[j].data, reads[j].len, topics[i])
                 : pull_topic_of(in->cfg, rms[i].id, reads[j].data, reads[j].len, topics[i])) &&
            topic_in_scope(b->t[i], topics[i])) {
            ops[nops] = (struct pullq_op){ .verb = PULLQ_CANCEL, .topic = topics[i],
                                           .id = rms[i].id };
            at[nops++] = i;
        }
        free(reads[j].data);
    }
    pullq_run_many(pq, nops, ops, clock_now_ms(), in->cfg->job.retention_s * 1000);
    for (size_t j = 0; j < nops; j++) {
        cancels[at[j]] = ops[j];
        /* taken out, or over already: its record lived as long (one delivering and not in its
         * queue yet is about to be: its record is left to the job) */
        if (!ops[j].failed && (ops[j].res == PULLQ_DONE || rms[at[j]].state == JOB_DELIVERED))
            ended[nended++] = ops[j].id;
    }
    if (nended && store_keep_many(st, nended, ended, in->cfg->job.retention_s * 1000, NULL,
                                  err, sizeof(err)) < 0)
        log_warn("the records of %zu removed pull jobs (job=%s first) were not given their "
                 "expiry; removing them again does: %s", nended, ended[0], err);
}

/* The records of the forgetting removes whose job is now removed (by them or before) are
 * deleted, so that their ids are free. A message of such a job still in the delay topics
 * carries a tag no later record of the id has, and is skipped. */
static void forget_removed(struct store *st, const struct kind_batch *b,
                           const struct store_removal *rms, const struct pullq_op *cancels)
{
    const char *ids[WORKER_BATCH];
    size_t n = 0;
    char err[256];

    for (size_t i = 0; i < b->n; i++) {
        const struct pullq_op *c = cancels[i].id ? &cancels[i] : NULL;
        int gone = !rms[i].failed &&
                   (rms[i].res == STORE_REMOVED || rms[i].state == JOB_CANCELLED ||
                    (c && !c->failed && (c->res == PULLQ_DONE || c->state == 'c')));
        if (b->t[i]->forget && gone && n < WORKER_BATCH)
            ids[n++] = b->t[i]->id;
    }
    if (n && store_keep_many(st, n, ids, 0, NULL, err, sizeof(err)) < 0)
        log_warn("the records of %zu removed jobs (job=%s first) were kept; their ids stay "
                 "taken until they expire: %s", n, ids[0], err);
}

/* The records of the forgetting removes of b, read in one pipeline and checked: each whose
 * job is in its scope (a pull job, of its topic when it names one) is to be removed only while
 * its record is the one read (its rms[i].head then points into records[i], which the caller
 * frees); each other one is answered no such job, or failed, in rms[i], and skip[i] is 1. */
static void check_scopes(const struct config *cfg, struct store *st, const struct kind_batch *b,
                         struct store_removal *rms, char **records, char *skip)
{
    struct store_read reads[WORKER_BATCH];
    size_t at[WORKER_BATCH], k = 0;
    char topic[TOPIC_NAME_MAX + 1];

    for (size_t i = 0; i < b->n; i++)
        if (b->t[i]->forget)
            reads[k] = (struct store_read){ .id = b->t[i]->id }, at[k++] = i;
    if (!k)
        return;
    store_read_many(st, k, reads);
    for (size_t j = 0; j < k; j++) {
        size_t i = at[j];
        skip[i] = 1;
        if (reads[j].failed) {
            rms[i].failed = 1;
            snprintf(rms[i].err, sizeof(rms[i].err), "%s", reads[j].err);
        } else if (!reads[j].found ||
                   !record_pull_topic(cfg, rms[i].id, reads[j].data, reads[j].len, topic) ||
                   !topic_in_scope(b->t[i], topic)) {
            rms[i].res = STORE_NO_JOB;
        } else {
            skip[i] = 0;
            rms[i].head = records[i] = reads[j].data;
            rms[i].head_len = job_record_head_len(reads[j].data, reads[j].len);
            continue;
        }
        free(reads[j].data);
    }
}

/* The removes of b not skipped, in one pipeline (some: room for b->n), their outcomes into rms. */
static void remove_some(struct intake *in, struct store *st, const struct kind_batch *b,
                        struct store_removal *rms, const char *skip, struct store_removal *some)
{
    size_t at[WORKER_BATCH], k = 0;

    for (size_t i = 0; i < b->n; i++)
        if (!skip[i])
            some[k] = rms[i], at[k++] = i;
    store_remove_many(st, k, some, clock_now_ms(), in->cfg->job.retention_s * 1000);
    for (size_t j = 0; j < k; j++)
        rms[at[j]] = some[j];
}

/* The removes of a batch, in one pipeline (the forgetting ones checked first, in another). */
static void run_removes(struct intake *in, int worker, struct store *st, struct kind_batch *b)
{
    struct store_removal *rms = calloc(b->n, sizeof(*rms)), *some = calloc(b->n, sizeof(*some));
    struct pullq_op cancels[WORKER_BATCH] = { { 0 } };
    char (*topics)[TOPIC_NAME_MAX + 1] = calloc(b->n ? b->n : 1, sizeof(*topics));
    char *records[WORKER_BATCH] = { 0 }, skip[WORKER_BATCH] = { 0 };

    if (rms && some && topics) {
        for (size_t i = 0; i < b->n; i++)
            rms[i].id = b->t[i]->id;
        check_scopes(in->cfg, st, b, rms, records, skip);
        remove_some(in, st, b, rms, skip, some);
        cancel_pulled(in, worker, st, b, rms, cancels, topics);
        forget_removed(st, b, rms, cancels);
    }
    for (size_t i = 0; i < b->n; i++) {
        struct task *t = b->t[i];
        if (!rms || !some || !topics) {
            intake_drop_task(NULL, t, "out of memory");
            continue;
        }
        removed(t, &rms[i], cancels[i].id ? &cancels[i] : NULL);
        free(t);
    }
    for (size_t i = 0; i < b->n; i++)
        free(records[i]);
    free(rms);
    free(some);
    free(topics);
}

/* The pull state of the gets' delivered pull jobs, in one pipeline, into looks (looks[i].id
 * NULL: not a pull job). */
static void look_pulled(struct intake *in, int worker, size_t n, const struct store_read *reads,
                        struct pullq_look *looks, char (*topics)[TOPIC_NAME_MAX + 1])
{
    struct pullq_look some[WORKER_BATCH];
    size_t at[WORKER_BATCH], k = 0;
    struct pullq *pq;

    for (size_t i = 0; i < n; i++)
        if (reads[i].found && !reads[i].failed &&
            pull_topic_of(in->cfg, reads[i].id, reads[i].data, reads[i].len, topics[i]))
            some[k] = (struct pullq_look){ .topic = topics[i], .id = reads[i].id }, at[k++] = i;
    if (!k || !(pq = intake_worker_pullq(in, worker)))
        return;
    pullq_look_many(pq, k, some);
    for (size_t j = 0; j < k; j++)
        looks[at[j]] = some[j];
}

/* The gets of a batch: their records read in one pipeline. */
static void run_gets(struct intake *in, int worker, struct store *st, struct kind_batch *b)
{
    struct store_read *reads = calloc(b->n, sizeof(*reads));
    struct pullq_look looks[WORKER_BATCH] = { { 0 } };
    char (*topics)[TOPIC_NAME_MAX + 1] = calloc(b->n ? b->n : 1, sizeof(*topics));

    for (size_t i = 0; reads && i < b->n; i++)
        reads[i].id = b->t[i]->id;
    if (reads && topics) {
        store_read_many(st, b->n, reads);
        look_pulled(in, worker, b->n, reads, looks, topics);
    }
    for (size_t i = 0; i < b->n; i++) {
        struct task *t = b->t[i];
        if (!reads || !topics) {
            intake_drop_task(NULL, t, "out of memory");
            continue;
        }
        got(t, &reads[i], looks[i].id ? &looks[i] : NULL);
        free(t);
    }
    free(reads);
    free(topics);
}

/* The reschedules of a batch: their reads and their writes each in one pipeline. */
static void run_reschedules(struct intake *in, struct store *st, struct kind_batch *b)
{
    struct move_ask *asks = calloc(b->n, sizeof(*asks));

    for (size_t i = 0; asks && i < b->n; i++)
        asks[i] = (struct move_ask){ .id = b->t[i]->id, .due_ms = b->t[i]->due_ms };
    if (asks)
        move_jobs(st, in->cfg, b->n, asks);
    for (size_t i = 0; i < b->n; i++) {
        if (asks)
            rescheduled(in, st, b->t[i], &asks[i]);
        else
            intake_drop_task(NULL, b->t[i], "out of memory");
        free(asks ? b->t[i] : NULL);
    }
    free(asks);
}

/* Asks the owner of t's group to hand it back. */
static void run_hand_back(struct leases *view, struct task *t)
{
    char owner[LEASES_TOKEN_MAX + 1], err[256], msg[LEASES_TOKEN_MAX + 96];

    if (leases_ask_release(view, t->group, "api", owner, sizeof(owner), err, sizeof(err)) < 0) {
        snprintf(msg, sizeof(msg), "release failed: %s", err);
        answer_send(t->done, t->opaque, 503, API_UNAVAILABLE, msg, NULL);
    } else {
        if (owner[0])
            log_info("asked %s to hand back group %d", owner, t->group);
        snprintf(msg, sizeof(msg), owner[0] ? "asked its owner to hand group %d back" :
                 "group %d is held by nobody", t->group);
        answer_send(t->done, t->opaque, 200, API_OK, msg, api_release_data(t->group, owner));
    }
    free(t);
}

/* Answers the n GET /delay-queue/api/claims requests ts with one view, read on view: they
 * would all read the same. */
static void answer_claims(struct intake *in, struct leases *view, struct task **ts, size_t n)
{
    struct answer a = { 503, API_UNAVAILABLE, ANSWER_FAILED, "", NULL };
    struct lease_view v;
    char err[256], msg[320];

    if (!n)
        return;
    if (leases_read_view(view, &v, err, sizeof(err)) < 0) {
        snprintf(msg, sizeof(msg), "claims: %s", err);
        a.message = msg;
    } else {
        a = (struct answer){ 200, API_OK, ANSWER_DONE, "ok",
                             api_claims_data(&v, in->cfg, clock_now_ms()) };
        lease_view_release(&v);
    }
    for (size_t i = 0; i < n; i++) {
        ts[i]->done(ts[i]->opaque, &a);
        free(ts[i]);
    }
    api_data_free(a.data);
}

/* Runs the n tasks a worker took together: the gets in one pipeline, the removes in another,
 * the reschedules in two, one claims view for all the /claims requests, and the hand-backs. */
void intake_run_tasks(void *ctx, int worker, void **tasks, size_t n)
{
    struct intake *in = ctx;
    struct store **st = &in->wstore[worker];
    struct leases **view = &in->wview[worker];
    struct task *by_kind[T_PULL_TOPIC + 1][WORKER_BATCH];
    struct kind_batch b[T_PULL_TOPIC + 1];

    for (int k = 0; k <= T_PULL_TOPIC; k++)
        b[k] = (struct kind_batch){ by_kind[k], 0 };
    for (size_t i = 0; i < n; i++) {
        struct task *t = tasks[i];
        if (t->kind == T_PULL_TOPIC ? 0
            : t->kind >= T_CLAIMS ? !*view && !(*view = leases_new(in->cfg))
                                  : !*st && !(*st = store_new(in->cfg)))
            intake_drop_task(in, t, "out of memory");
        else
            b[t->kind].t[b[t->kind].n++] = t;
    }
    run_gets(in, worker, *st, &b[T_GET]);
    run_removes(in, worker, *st, &b[T_REMOVE]);
    run_reschedules(in, *st, &b[T_RESCHEDULE]);
    answer_claims(in, *view, b[T_CLAIMS].t, b[T_CLAIMS].n);
    for (size_t i = 0; i < b[T_HAND_BACK].n; i++)
        run_hand_back(*view, b[T_HAND_BACK].t[i]);
    intake_run_topic_asks(in, worker, b[T_PULL_TOPIC].t, b[T_PULL_TOPIC].n);
}

void intake_pop(struct intake *in, const char *body, size_t len, answer_fn done,
                answer_wanted_fn wanted, void *opaque)
{
    struct api_error e;
    struct api_pop pop;

    if (api_parse_pop(body, len, &in->limits, &pop, &e) < 0)
        answer_send(done, opaque, e.status, e.code, e.message, NULL);
    else
        pull_pop(in->pull, &pop, done, wanted, opaque);
}

void intake_pop_request(struct intake *in, const struct api_pop *pop, answer_fn done,
                        answer_wanted_fn wanted, void *opaque)
{
    pull_pop(in->pull, pop, done, wanted, opaque);
}

/* A request of several pull operations, each answered on its own: the last answer answers
 * the request. */
struct op_batch {
    pthread_mutex_t mu;
    size_t n, left;
    struct api_pull_answer *answers;
    answer_fn done;
    void *opaque;
};

/* One operation of an op_batch and where its answer goes. */
struct op_slot {
    struct op_batch *b;
    size_t i;
};

/* Notes the answer of one job of b; the last answers the request and frees b. */
static void op_noted(struct op_batch *b, size_t i, const struct answer *a)
{
    struct api_pull_answer *to = &b->answers[i];
    size_t left;

    to->status = a->status;
    to->code = a->code;
    snprintf(to->message, sizeof(to->message), "%s", a->message);
    to->data = api_data_ref(a->data);
    pthread_mutex_lock(&b->mu);
    left = --b->left;
    pthread_mutex_unlock(&b->mu);
    if (left > 0)
        return;
    answer_send(b->done, b->opaque, 200, API_OK, "ok", api_pull_batch_data(b->answers, b->n));
    for (size_t k = 0; k < b->n; k++)
        api_data_free(b->answers[k].data);
    pthread_mutex_destroy(&b->mu);
    free(b->answers);
    free(b);
}

static void op_answered(void *opaque, const struct answer *a)
{
    struct op_slot *s = opaque;

    op_noted(s->b, s->i, a);
    free(s);
}

void intake_pull_op(struct intake *in, enum api_verb verb, const char *body, size_t len,
                  answer_fn done, void *opaque)
{
    struct api_pull_batch req;
    struct op_batch *b;
    struct api_error e;

    if (api_parse_pull_ops(body, len, verb, &in->limits, &req, &e) < 0) {
        answer_send(done, opaque, e.status, e.code, e.message, NULL);
        return;
    }
    if (!req.batch) {
        pull_op(in->pull, verb, &req.ops[0], done, opaque);
        api_pull_batch_free(&req);
        return;
    }
    if (!(b = calloc(1, sizeof(*b))) || !(b->answers = calloc(req.n, sizeof(*b->answers)))) {
        free(b);
        api_pull_batch_free(&req);
        answer_send(done, opaque, 503, API_UNAVAILABLE, "out of memory", NULL);
        return;
    }
    pthread_mutex_init(&b->mu, NULL);
    b->n = b->left = req.n;
    b->done = done;
    b->opaque = opaque;
    for (size_t i = 0; i < req.n; i++)
        snprintf(b->answers[i].job_id, sizeof(b->answers[i].job_id), "%s", req.ops[i].id);
    for (size_t i = 0; i < req.n; i++) {   /* the last answer may free b: nothing of it after */
        struct op_slot *s = req.errs[i].status ? NULL : malloc(sizeof(*s));
        if (req.errs[i].status) {
            struct answer a = { req.errs[i].status, req.errs[i].code, ANSWER_REFUSED,
                                req.errs[i].message, NULL };
            op_noted(b, i, &a);
        } else if (!s) {
            struct answer a = { 503, API_UNAVAILABLE, ANSWER_FAILED, "out of memory", NULL };
            op_noted(b, i, &a);
        } else {
            *s = (struct op_slot){ b, i };
            pull_op(in->pull, verb, &req.ops[i], op_answered, s);
        }
    }
    api_pull_batch_free(&req);
}

void intake_stop_waiting(struct intake *in)
{
    pull_stop_waiting(in->pull);
}

void intake_get(struct intake *in, const char *id, answer_fn done, void *opaque)
{
    queue_task(in, T_GET, id, 0, done, opaque);
}

void intake_remove(struct intake *in, const char *id, answer_fn done, void *opaque)
{
    queue_task(in, T_REMOVE, id, 0, done, opaque);
}

void intake_forget(struct intake *in, const char *id, const char *topic, answer_fn done,
                   void *opaque)
{
    struct task *t = task_new(T_REMOVE, id, 0, done, opaque);

    if (t) {
        t->forget = 1;
        snprintf(t->topic, sizeof(t->topic), "%s", topic ? topic : "");
        workers_queue(in->workers, t);
    }
}

void intake_claims(struct intake *in, answer_fn done, void *opaque)
{
    queue_task(in, T_CLAIMS, NULL, 0, done, opaque);
}

void intake_hand_back(struct intake *in, const char *body, size_t len, answer_fn done,
                    void *opaque)
{
    struct api_error e;
    int group;

    if (api_parse_group(body, len, in->cfg->delay.ngroups, &group, &e) < 0)
        answer_send(done, opaque, e.status, e.code, e.message, NULL);
    else
        queue_task(in, T_HAND_BACK, NULL, group, done, opaque);
}

/* The stats handle, made at the first look. */
static struct stats *stats_of(struct intake *in, char *err, size_t errlen)
{
    struct stats *s;

    pthread_mutex_lock(&in->stats_mu);
    if (!in->stats)
        in->stats = stats_new(in->cfg, err, errlen);
    s = in->stats;
    pthread_mutex_unlock(&in->stats_mu);
    return s;
}

/* A /stats request waiting for a look. */
struct stats_wait {
    struct intake *in;
    answer_fn done;
    void *opaque;
};

static void stats_answered(void *opaque, const struct pending_view *v, const char *err)
{
    struct stats_wait *w = opaque;

    if (v) {
        struct intake *in = w->in;
        void *d = api_stats_data(v, &in->cfg->delay.levels);
        struct pullq_count *counts = NULL;
        char why[256];
        size_t n = 0;
        /* one connection for the counts of every /stats, one at a time: answers come from
         * the stats thread, or at once from an HTTP thread when the last look is recent */
        pthread_mutex_lock(&in->stats_mu);
        if (!in->stats_pq)
            in->stats_pq = pullq_new(in->cfg);
        if (in->stats_pq && pullq_counts(in->stats_pq, &counts, &n, why, sizeof(why)) < 0)
            log_warn("stats: counting the pull topics failed: %s", why);
        pthread_mutex_unlock(&in->stats_mu);
        for (size_t i = 0; i < n; i++)
            api_stats_pull(d, counts[i].topic, &counts[i].f);
        free(counts);
        api_stats_callbacks(d, metrics_gauge(M_CALL_RETRIES_WAITING));
        char policy[64];
        int evicts = store_evicts(policy, sizeof(policy));
        api_stats_schedules(d, metrics_gauge(M_SCHEDULES));
        api_stats_redis(d, policy, evicts);
        answer_send(w->done, w->opaque, 200, API_OK, "ok", d);
    } else
        answer_send(w->done, w->opaque, 503, API_UNAVAILABLE, err, NULL);
    free(w);
}

void intake_stats(struct intake *in, answer_fn done, void *opaque)
{
    struct stats_wait *w = malloc(sizeof(*w));
    struct stats *s;
    char err[512];

    snprintf(err, sizeof(err), "stats: out of memory");
    if (!w || !(s = stats_of(in, err, sizeof(err)))) {
        free(w);
        answer_send(done, opaque, 503, API_UNAVAILABLE, err, NULL);
        return;
    }
    *w = (struct stats_wait){ .in = in, .done = done, .opaque = opaque };
    stats_get(s, stats_answered, w);
}

void intake_stats_gauges(struct intake *in)
{
    struct stats *s;
    char err[512];

    if ((s = stats_of(in, err, sizeof(err))))
        stats_gauges(s);
    pull_counts_wanted(in->pull);
}

/* moves: a reschedule's compare-and-set of a job's record, and its undo. The contract is in
 * include/intake/moves.h. */
#include <stdlib.h>
#include <string.h>

#include "core/apijson.h"
#include "lib/clock.h"
#include "core/metrics.h"
#include "intake/moves.h"

/* A move reads the record again when it changed between its read and its write. Each change is
 * a claim, a remove or another move: after a few, it is final or contended. */
#define MOVE_TRIES 8
/* A job moved to an earlier time holds back its older messages until Kafka has its message
 * for the new time, or the move failed: at most the wait in the intake queue and in flight
 * (kafka.produce_timeout_ms each) and the write that undoes it. Past that it counts as lost
 * and the older messages claim the job, late rather than never. */
#define HOLD_FACTOR 2
#define HOLD_MARGIN_MS 10000

void move_free(struct move *mv)
{
    if (mv) {
        free(mv->old);
        free(mv->head);
        free(mv->plain);
        free(mv);
    }
}

/* Whether a record in state rec may move: 0, or -1 with the answer in e. */
static int movable(const char *id, const struct job_record *rec, int64_t now, struct api_error *e)
{
    if (rec->state == JOB_PENDING && rec->stamp_ms > now)
        return api_fail(e, 503, API_RESCHEDULE_FAILED, "job %s is being rescheduled to an "
                        "earlier time (its message on its way to Kafka); try again", id);
    if (rec->state == JOB_CANCELLED)
        return api_fail(e, 404, API_NOT_FOUND, "job %s was removed", id);
    if (rec->state != JOB_PENDING)
        return api_fail(e, 409, API_CONFLICT, "job %s is already %s and cannot be rescheduled", id,
                        job_state_name(rec->state));
    if (!rec->tag[0])
        return api_fail(e, 409, API_CONFLICT, "job %s was added by an older delayqd and cannot "
                        "be rescheduled", id);
    return 0;
}

/* Moves job to due_ms and packs its new record into buf; an earlier move holds back the job's
 * older messages till until_ms, and the same record without that goes to mv->plain. 0, or -1
 * out of memory. */
static int pack_moved(struct job *job, int64_t due_ms, int64_t until_ms, struct move *mv,
                      msgpack_sbuffer *buf)
{
    int64_t created = job->due_ms - job->delay_ms;
    msgpack_sbuffer plain;

    job->due_ms = due_ms;
    job->delay_ms = due_ms > created ? due_ms - created : 0;
    if (!mv->earlier)
        return job_record_pack(job, buf);
    msgpack_sbuffer_init(&plain);
    if (job_record_pack_moved(job, until_ms, buf) < 0 || job_record_pack(job, &plain) < 0) {
        msgpack_sbuffer_destroy(&plain);
        return -1;
    }
    mv->plain_len = plain.size;
    mv->plain = msgpack_sbuffer_release(&plain);
    return 0;
}

/* The move of a record read (data, taken) to due_ms, its new record in buf. NULL out of memory. */
static struct move *plan(const struct config *cfg, struct job *job, char *data, size_t len,
                         int64_t due_ms, int64_t now, msgpack_sbuffer *buf)
{
    struct move *mv = calloc(1, sizeof(*mv));
    int64_t until = now + HOLD_FACTOR * cfg->kafka.produce_timeout_ms + HOLD_MARGIN_MS;

    if (!mv)
        return NULL;
    *mv = (struct move){ .old_due_ms = job->due_ms, .earlier = due_ms < job->due_ms, .old = data,
                         .old_len = len };
    mv->expires_ms = (due_ms > mv->old_due_ms ? due_ms : mv->old_due_ms) + cfg->job.retention_s * 1000;
    if (pack_moved(job, due_ms, until, mv, buf) < 0 ||
        !(mv->head_len = job_record_head_len(buf->data, buf->size)) ||
        !(mv->head = malloc(mv->head_len))) {
        mv->old = NULL;   /* the caller's still */
        move_free(mv);
        return NULL;
    }
    memcpy(mv->head, buf->data, mv->head_len);
    return mv;
}

/* One try. 0: moved (*out set); 1: the record changed between the read and the write; -1:
 * answered in e. *job is the caller's to release in every case. */
/* One round for ask a, whose record rd read: the move planned and its replacement in sw (the
 * record written lives in buf), 0; or -1 when a is answered (a->e set). */
static int plan_one(const struct config *cfg, struct move_ask *a, struct store_read *rd,
                    int64_t now, msgpack_sbuffer *buf, struct store_swap *sw)
{
    struct job_record rec;
    char err[256];
    size_t head;

    memset(&a->job, 0, sizeof(a->job));
    if (rd->failed) {
        metrics_inc(M_REDIS_ERRORS);
        return api_fail(&a->e, 503, API_RESCHEDULE_FAILED, "reschedule failed: %s", rd->err);
    }
    if (!rd->found)
        return api_fail(&a->e, 404, API_NOT_FOUND, "no such job");
    if (job_record_read(a->id, rd->data, rd->len, &a->job, &rec, err, sizeof(err)) < 0 ||
        !(head = job_record_head_len(rd->data, rd->len))) {
        job_release(&a->job);
        return api_fail(&a->e, 500, API_RESCHEDULE_FAILED, "job %s has an unreadable record: %s",
                        a->id, err);
    }
    if (movable(a->id, &rec, now, &a->e) < 0) {
        job_release(&a->job);
        return -1;
    }
    memcpy(a->job.tag, rec.tag, sizeof(a->job.tag));
    if (!(a->mv = plan(cfg, &a->job, rd->data, rd->len, a->due_ms, now, buf))) {
        job_release(&a->job);
        return api_fail(&a->e, 503, API_RESCHEDULE_FAILED, "reschedule failed: out of memory");
    }
    rd->data = NULL;   /* a->mv has it */
    *sw = (struct store_swap){ .id = a->id, .head = a->mv->old, .head_len = head, .value = buf->data,
                               .len = buf->size, .ttl_ms = a->mv->expires_ms - now };
    return 0;
}

/* Drops the move a planned in a round that did not write it. */
static void unplan(struct move_ask *a)
{
    move_free(a->mv);
    a->mv = NULL;
    job_release(&a->job);
}

void move_jobs(struct store *st, const struct config *cfg, size_t n, struct move_ask *asks)
{
    size_t *left = malloc(n * sizeof(*left)), *planned = malloc(n * sizeof(*planned)), nleft = n;
    struct store_read *reads = calloc(n, sizeof(*reads));
    struct store_swap *swaps = calloc(n, sizeof(*swaps));
    msgpack_sbuffer *bufs = calloc(n, sizeof(*bufs));

    for (size_t i = 0; i < n; i++)
        asks[i].mv = NULL;
    if (!left || !planned || !reads || !swaps || !bufs) {
        for (size_t i = 0; i < n; i++)
            api_fail(&asks[i].e, 503, API_RESCHEDULE_FAILED, "reschedule failed: out of memory");
        nleft = 0;
    }
    for (size_t i = 0; i < nleft; i++)
        left[i] = i;
    /* Each round reads the records still to move, then replaces those that may move, each
     * only if it is still the one read; one that changed meanwhile goes round again. */
    for (int round = 0; nleft > 0 && round < MOVE_TRIES; round++) {
        int64_t now = clock_now_ms();
        size_t np = 0, again = 0;
        for (size_t k = 0; k < nleft; k++)
            reads[k] = (struct store_read){ .id = asks[left[k]].id };
        store_read_many(st, nleft, reads);
        for (size_t k = 0; k < nleft; k++) {
            msgpack_sbuffer_init(&bufs[np]);
            if (plan_one(cfg, &asks[left[k]], &reads[k], now, &bufs[np], &swaps[np]) == 0)
                planned[np++] = left[k];
            else
                msgpack_sbuffer_destroy(&bufs[np]);
            free(reads[k].data);
        }
        store_replace_many(st, np, swaps);
        for (size_t k = 0; k < np; k++) {
            struct move_ask *a = &asks[planned[k]];
            if (swaps[k].failed) {
                metrics_inc(M_REDIS_ERRORS);
                api_fail(&a->e, 503, API_RESCHEDULE_FAILED, "reschedule failed: %s", swaps[k].err);
                unplan(a);
            } else if (!swaps[k].replaced) {
                unplan(a);
                left[again++] = planned[k];
            }
            msgpack_sbuffer_destroy(&bufs[k]);
        }
        nleft = again;
    }
    for (size_t k = 0; k < nleft; k++)
        api_fail(&asks[left[k]].e, 503, API_RESCHEDULE_FAILED, "reschedule failed: the job changed "
                 "%d times while being rescheduled; try again", MOVE_TRIES);
    free(left);
    free(planned);
    free(reads);
    free(swaps);
    free(bufs);
}

int move_arrived(struct store *st, const char *id, const struct move *mv, char *err,
                 size_t errlen)
{
    int replaced;

    if (!mv->plain)
        return 0;
    return store_replace(st, id, mv->head, mv->head_len, mv->plain, mv->plain_len,
                         mv->expires_ms - clock_now_ms(), &replaced, err, errlen);
}

int move_undo(struct store *st, const struct config *cfg, const char *id, const struct move *mv,
              int *undone, char *err, size_t errlen)
{
    int64_t ttl = mv->old_due_ms + cfg->job.retention_s * 1000 - clock_now_ms();

    *undone = 0;
    return store_replace(st, id, mv->head, mv->head_len, mv->old, mv->old_len, ttl, undone, err,
                         errlen);
}

/* moves: a reschedule's compare-and-set of a job's record, and its undo. The contract is in
 * include/moves.h. */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "metrics.h"
#include "moves.h"

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
static int try_move(struct store *st, const struct config *cfg, const char *id, int64_t due_ms,
                    struct job *job, struct move **out, struct api_error *e)
{
    char err[256], *data = NULL;
    size_t len = 0, head;
    msgpack_sbuffer buf;
    struct job_record rec;
    struct move *mv = NULL;
    int found, replaced = 0, rc = -1;
    int64_t now = clock_now_ms();

    if (store_get(st, id, &found, &data, &len, err, sizeof(err)) < 0) {
        metrics_inc(M_REDIS_ERRORS);
        return api_fail(e, 503, API_RESCHEDULE_FAILED, "reschedule failed: %s", err);
    }
    if (!found)
        return api_fail(e, 404, API_NOT_FOUND, "no such job");
    msgpack_sbuffer_init(&buf);
    if (job_record_read(id, data, len, job, &rec, err, sizeof(err)) < 0 ||
        !(head = job_record_head_len(data, len))) {
        api_fail(e, 500, API_RESCHEDULE_FAILED, "job %s has an unreadable record: %s", id, err);
        goto out;
    }
    if (movable(id, &rec, now, e) < 0)
        goto out;
    memcpy(job->tag, rec.tag, sizeof(job->tag));
    if (!(mv = plan(cfg, job, data, len, due_ms, now, &buf))) {
        api_fail(e, 500, API_RESCHEDULE_FAILED, "reschedule failed: out of memory");
        goto out;
    }
    data = NULL;   /* mv has it */
    if (store_replace(st, id, mv->old, head, buf.data, buf.size, mv->expires_ms - now, &replaced,
                      err, sizeof(err)) < 0) {
        metrics_inc(M_REDIS_ERRORS);
        api_fail(e, 503, API_RESCHEDULE_FAILED, "reschedule failed: %s", err);
        goto out;
    }
    rc = replaced ? 0 : 1;
out:
    msgpack_sbuffer_destroy(&buf);
    free(data);
    if (rc == 0)
        *out = mv;
    else
        move_free(mv);
    return rc;
}

struct move *move_job(struct store *st, const struct config *cfg, const char *id, int64_t due_ms,
                      struct job *job, struct api_error *e)
{
    struct move *mv = NULL;
    int rc = 1;

    memset(job, 0, sizeof(*job));
    for (int i = 0; rc == 1 && i < MOVE_TRIES; i++) {
        job_release(job);
        rc = try_move(st, cfg, id, due_ms, job, &mv, e);
    }
    if (rc == 1)
        api_fail(e, 503, API_RESCHEDULE_FAILED, "reschedule failed: the job changed %d times "
                 "while being rescheduled; try again", MOVE_TRIES);
    if (rc != 0)
        job_release(job);
    return rc == 0 ? mv : NULL;
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

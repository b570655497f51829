/* moves: a reschedule's work on a job's Redis record: read it, check that the job may move,
 * and write the moved record in its place only if the record is still the one read
 * (store_replace_many, many jobs at once); later, for a move to an earlier time, lift its hold on the job's older
 * messages once Kafka has the message for the new time, or put the old record back when that
 * message failed. The intake (intake.c) answers the client and sends that message. Every call
 * runs on the caller's store connection. */
#ifndef DQ_MOVES_H
#define DQ_MOVES_H

#include <stddef.h>
#include <stdint.h>

#include "core/apijson.h"
#include "core/config.h"
#include "core/job.h"
#include "redis/store.h"

/* A move written to Redis, and what undoing it takes. */
struct move {
    int64_t old_due_ms;         /* epoch ms */
    int earlier;                /* moved to an earlier time: a message for it must reach Kafka;
                                 * till then the record holds back the job's older messages */
    char *old;                  /* the record before, owned */
    size_t old_len;
    char *head;                 /* the head of the record written, owned */
    size_t head_len;
    char *plain;                /* earlier: the record written, without the hold, owned */
    size_t plain_len;
    int64_t expires_ms;         /* epoch ms: the record is kept till then, so that the job's
                                 * messages of both due times find it */
};

/* One job of move_jobs: id and due_ms (epoch ms) in. Out: the move (caller frees with
 * move_free) and the job at its new due time (caller releases); or mv NULL and the answer in e:
 * 404 no such job or removed, 409 being delivered, delivered or failed (or added by an older
 * delayqd), 503 Redis failed or another move to an earlier time is on its way, 500 the record
 * does not decode. */
struct move_ask {
    const char *id;
    int64_t due_ms;
    struct move *mv;
    struct job job;
    struct api_error e;
};

/* Moves n pending jobs to their due times: each keeps its tag, so that its messages still
 * claim it, and its delay counts from its creation. Their reads and their writes each go in
 * one pipeline; a record that changed between its read and its write is read again. */
void move_jobs(struct store *st, const struct config *cfg, size_t n, struct move_ask *asks);

/* Kafka has the message of an earlier move: the job's older messages need not wait any more.
 * 0, or -1 (err set; they wait till the time the record names, then claim the job). */
int move_arrived(struct store *st, const char *id, const struct move *mv, char *err,
                 size_t errlen);

/* The message of an earlier move failed: puts the old record back. 0 with *undone 1, or 0 (the
 * record changed since: claimed, its due time having come, or removed; the move held), or -1
 * when Redis failed (err set). */
int move_undo(struct store *st, const struct config *cfg, const char *id, const struct move *mv,
              int *undone, char *err, size_t errlen);

void move_free(struct move *mv);

#endif

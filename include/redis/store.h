/* store: job records in Redis. Every state change is one Lua script, so remove and delivery
 * racing at the due instant resolve atomically inside Redis. With redis.wait_replicas, every
 * call confirms its writes with the replicas before it answers (see each call).
 * A struct store is one connection (conn): use it from one thread at a time. It finds Redis
 * again by itself on the next call after a connection error or a failover. */
#ifndef DQ_STORE_H
#define DQ_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/job.h"

struct store;

enum store_add_result {
    STORE_ADDED,        /* new record, state pending */
    STORE_DUPLICATE,    /* same id, topic and body already there: an idempotent retry */
    STORE_CONFLICT,     /* same id with other content, or a removed job */
    STORE_ADD_NOT_A_RECORD,   /* the job's key holds something that is not a record */
};

enum store_remove_result {
    STORE_REMOVED,      /* was pending, now cancelled: it will not be delivered */
    STORE_NO_JOB,       /* no record */
    STORE_TOO_LATE,     /* already cancelled, delivering or delivered: *state says which */
    STORE_REMOVE_NOT_A_RECORD,   /* the job's key holds something that is not a record */
};

/* One claim answer of store_claim_batch. */
struct store_claim {
    int found;              /* 0: no record (removed or expired) */
    int stale;              /* the record is another job's with the same id: skip the message */
    int busy;               /* another copy of this job's message is in flight here: skip */
    int foreign;            /* the message is not one of the job's own (its dq-tag differs): skip */
    int64_t moved_due_ms;   /* > 0: the job was rescheduled to this later due time (epoch ms):
                             * its message is to move on to it */
    int wait;               /* the job was rescheduled to an earlier time and the message for
                             * it may still be on its way: try again shortly */
    const char *other;      /* the record is being delivered under this claim of another
                             * instance, not taken over; valid only inside store_claim_fn */
    size_t other_len;
    enum job_state before;  /* state before the claim */
    int claimed;            /* 1: was pending or delivering, now delivering; data is set */
    const char *data;       /* record value, when claimed; valid only inside store_claim_fn */
    size_t len;
};

/* Called once per record of store_claim_batch (i: its index) as its answer arrives: with its
 * claim, or with c NULL and the reason in err when Redis did not answer for it. */
typedef void store_claim_fn(void *ctx, size_t i, const struct store_claim *c, const char *err);

/* Returns a store for cfg's Redis; connects lazily. Never NULL except out of memory. */
struct store *store_new(const struct config *cfg);
void store_free(struct store *st);

/* Every fallible call returns 0, or -1 when Redis could not answer (err says why); the
 * results are valid only on 0. */

/* The answer to one job of store_add_batch. */
struct store_add_answer {
    int ok;                     /* 0: Redis refused this one, or did not confirm it; err says why */
    int undo;                   /* not ok, and it may have written its record (then deleted) */
    enum store_add_result res;
    enum job_state state;       /* the record's state after the call */
    char tag[JOB_TAG_LEN + 1];  /* STORE_DUPLICATE of a pending job: its tag ("" if it has none) */
    int64_t due_ms;             /* STORE_DUPLICATE: the record's due time, epoch ms; else -1 */
    char err[160];
};

/* Writes n new pending records, each expiring retention_ms after its due time unless its id
 * exists, in one pipeline: a SET NX per record, then a script for the ids found taken. The claim
 * and mark batches call Redis once per 128 records.
 * Each job gets its own answer: one whose master took and confirmed its record is ok; the
 * others say why not, and a record such an add may have written is deleted again (only its
 * own: a pending record under its tag). Returns 0, or -1 (err set) out of memory: then none is
 * known to be written. */
int store_add_batch(struct store *st, size_t n, const struct job *const *jobs, int64_t retention_ms,
                    struct store_add_answer *out, char *err, size_t errlen);

/* Deletes the record if it is still pending (an add whose Kafka message failed). *left (when
 * not NULL): JOB_PENDING when it was deleted or there is none, else the state of the record
 * that stays (delivering or delivered: its message reached Kafka after all). */
int store_drop_pending(struct store *st, const char *id, enum job_state *left, char *err,
                       size_t errlen);

/* One record of store_read_many: id in; out, found (0: there is none) and its value in data
 * (caller frees; empty when the key holds another type) and len, for job_record_read; or
 * failed, with err. */
struct store_read {
    const char *id;
    int found;
    char *data;
    size_t len;
    int failed;
    char err[256];
};

/* Reads n records in one pipeline (each as store_get). 0, or -1 when some failed. */
int store_read_many(struct store *st, size_t n, struct store_read *reads);

/* One removal of store_remove_many: id, and head when not NULL, in; out, res (and for
 * STORE_TOO_LATE, state), or failed with err. */
struct store_removal {
    const char *id;
    const char *head;           /* NULL, or the head (head_len bytes, job_record_head_len) of the
                                 * record as the caller read it: a pending record with another
                                 * head, another job of the id since, is left alone and answered
                                 * STORE_NO_JOB */
    size_t head_len;
    enum store_remove_result res;
    enum job_state state;
    int failed;
    char err[256];
};

/* Cancels n pending jobs in one pipeline; each record stays queryable for retention_ms. 0, or
 * -1 when some failed. */
int store_remove_many(struct store *st, size_t n, struct store_removal *removals, int64_t now_ms,
                      int64_t retention_ms);

/* Claims n records for delivery in one pipeline: pending or delivering -> delivering.
 * instance is this process's "<instance>:"; args holds four strings per record: the due time
 * its message carries (decimal text, or ""), its dq-tag (or ""), which must be the one a
 * pending record holds, the message's claim token "<instance>:<message>", 13 characters
 * (forwarder.c), and another instance's claim on the record that it may take over (or ""). The
 * answers go to fn as they arrive, 128 records at a time, while Redis claims the next ones.
 * Returns 0, or -1 with err set when the connection failed (fn was told for every record not
 * answered). */
int store_claim_batch(struct store *st, size_t n, const char *const *ids, const char *instance,
                      const char *const *args, store_claim_fn *fn, void *ctx, char *err,
                      size_t errlen);

/* A claimed record to mark: its job id, the due time and claim token its claim wrote, the state
 * to move it to (delivered or failed), for failed why (NULL: no reason kept), and a tail to
 * write in place of the record's (tail_len bytes of job_record_pack's after its head; NULL:
 * the record keeps its own). */
struct store_mark {
    const char *id;
    int64_t due_ms;
    const char *token;
    enum job_state state;
    const char *error;
    const char *tail;
    size_t tail_len;
    int kept;                   /* its expiry is left as it is (a pull job's record) */
};

/* Moves n records, each still claimed by its token, to their states at now_ms, in one pipeline;
 * a record claimed by another token since (taken over) or no longer claimed is left alone. A
 * record marked more than retention_ms / 64 after its due time (and not kept) expires
 * retention_ms after now_ms at the soonest; one marked sooner keeps its expiry (due + retention_ms from the add, or later
 * for a job rescheduled to an earlier time: its old messages still find it).
 * failed (n bytes): 1 for each record not marked (Redis did not answer or confirm for it).
 * Returns 0 when every record was marked, else -1 with err the first reason. */
int store_mark_batch(struct store *st, size_t n, const struct store_mark *marks, int64_t now_ms,
                     int64_t retention_ms, char *failed, char *err, size_t errlen);

/* Replaces the record of job id with value (a whole record, job_record_pack's), expiring
 * ttl_ms from now, if its head (job_record_head_len) is still head: *replaced 1, else 0 (it was
 * claimed, removed or rescheduled since it was read, or is gone). With redis.wait_replicas, a
 * replacement the replicas did not confirm is -1. */
int store_replace(struct store *st, const char *id, const char *head, size_t head_len,
                  const char *value, size_t len, int64_t ttl_ms, int *replaced, char *err,
                  size_t errlen);

/* One replacement of store_replace_many: the arguments of store_replace in; replaced out, or
 * failed with err. */
struct store_swap {
    const char *id;
    const char *head;
    size_t head_len;
    const char *value;
    size_t len;
    int64_t ttl_ms;
    int replaced;
    int failed;
    char err[256];
};

/* n replacements (each as store_replace) in one pipeline. 0, or -1 when some failed. */
int store_replace_many(struct store *st, size_t n, struct store_swap *swaps);

/* A job whose delivery was made with due time due_ms (epoch ms), and that its target then gave
 * up on (a pull job buried or out of attempts, its dead letter sent): its record, if still
 * delivered with that due time, becomes failed with why, as a job the forwarder dead-lettered,
 * so that a redrive finds it, and is kept retention_ms from now. 0 (also when the record is gone
 * or in another state), or -1 with err set (with redis.wait_replicas, also when the replicas
 * did not confirm it). */
int store_fail_delivered(struct store *st, const char *id, int64_t due_ms, const char *why,
                         int64_t retention_ms, char *err, size_t errlen);

/* The lifetime of a record that lives as long as its pull job: ttl_ms -1 keeps the records of
 * the n ids (PERSIST; before the jobs are made ready, so that nothing ends them earlier), else
 * each expires ttl_ms from now (the job was finished, removed or handed out once), or, ttl_ms
 * 0, is deleted at once (its id free for a new job). In one
 * pipeline, unconfirmed; a record that is not there is left so. failed (n bytes, or NULL): 1 for
 * each call Redis did not answer. 0, or -1 with err the first failure. */
int store_keep_many(struct store *st, size_t n, const char *const *ids, int64_t ttl_ms,
                    char *failed, char *err, size_t errlen);

/* Lists the next attempts of n callback jobs (ids[i] due at at_ms[i], epoch ms) among the
 * retries planned (for /stats), in two round trips whatever n; listings more than a minute
 * past due (now_ms) are dropped then. 0, or -1 with err set. */
int store_retries_planned(struct store *st, size_t n, const char *const *ids,
                          const int64_t *at_ms, int64_t now_ms, char *err, size_t errlen);

/* The retries planned that are not yet due at now_ms, into *n (a job removed while it waits is
 * counted until its retry time). 0, or -1 with err set. */
int store_retries_waiting(struct store *st, int64_t now_ms, int64_t *n, char *err, size_t errlen);

/* 1 when Redis may evict job records (its maxmemory-policy, into policy, is not noeviction). */
int store_evicts(char *policy, size_t len);

/* A count the Redis layer bumps whenever the master moved (conn_master_moves): what waits to
 * be tried again after a Redis failure may go now. */
unsigned store_master_moves(void);

/* PING: 0 when Redis answers. */
int store_ping(struct store *st, char *err, size_t errlen);

#endif

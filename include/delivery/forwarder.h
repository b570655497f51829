/* forwarder: acts on a message whose time has come. Due: looks up the record (jobs added over
 * HTTP: none, cancelled or delivered means skip), produces to the business topic, and after the
 * delivery report marks the record delivered. Not yet due: moves it down to the best level.
 * Unusable: dead-letter topic with dq-error. Work is batched: one Redis pipeline for the claims
 * of a batch, one for the marks, delivery reports taken together.
 * Runs on the holder's thread only, and calls nothing of it: it hands every message back as an
 * outcome (done, or to retry at a time) that the holder takes and applies. */
#ifndef DQ_FORWARDER_H
#define DQ_FORWARDER_H

#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "core/config.h"
#include "core/held.h"
#include "core/recur.h"

struct forwarder;
struct groups;

/* What became of a message the forwarder hands back. */
enum fw_result {
    FW_DONE,    /* finished: delivered, skipped, moved on or dead-lettered */
    FW_RETRY,   /* to be submitted again at at_ms: not due yet, or a failure to retry */
};

struct fw_outcome {
    struct held *m;
    enum fw_result result;
    int64_t at_ms;              /* FW_RETRY: epoch ms */
};

/* gs (not owned) is consulted right before each send (a message whose group is no longer surely
 * ours is not sent), and when a record is found claimed by another instance (taken over only
 * once that instance no longer holds the group it claimed it for). A byte is written to
 * wake_fd when callbacks' results wait for forwarder_poll. NULL with err set on failure. */
struct forwarder *forwarder_new(const struct config *cfg, struct groups *gs, int wake_fd,
                                char *err, size_t errlen);
/* Frees fw once its producer has sent what it holds, waiting flush_ms at most: what is then
 * unsent is dropped (read again from the delay topics on restart). */
void forwarder_free(struct forwarder *fw, int flush_ms);

/* The producer, whose main queue the holder watches for delivery reports. */
rd_kafka_t *forwarder_producer(struct forwarder *fw);

/* The metadata warmer of the producer that delivers: topics noted there are delivered to
 * without waiting for their metadata. Valid until forwarder_free. */
struct warm *forwarder_warm(struct forwarder *fw);

/* Queues m for the next flush: the forwarder owns m until it hands it back as an outcome.
 * 0, or -1 when out of memory (m stays the caller's). */
int forwarder_submit(struct forwarder *fw, struct held *m);

/* Acts on everything submitted since the last flush. */
void forwarder_flush(struct forwarder *fw);

/* Serves delivery reports and a take of callbacks' results, and finishes the messages they
 * complete. 1 when more callbacks' results may wait: the caller comes back without sleeping. */
int forwarder_poll(struct forwarder *fw);

/* Takes the next message handed back (after a flush or poll) into *out: 1, or 0 when there is
 * none. The caller owns out->m again. */
int forwarder_outcome(struct forwarder *fw, struct fw_outcome *out);

struct job;
struct recur_timing;
struct recur_plan;

/* A schedule's occurrence job came due and was planned (sched.h): fire_ms its fire time. Called
 * on the holder's thread before the occurrence is delivered (or, skipped, marked so), again if
 * its message is acted on again: it must not wait, and must be idempotent. */
typedef void forwarder_occurrence_fn(void *ctx, const struct job *job, int64_t fire_ms,
                                     const struct recur_timing *t, const struct recur_plan *plan);

/* The verdicts out[i] of the n occurrences jobs[i] about to run: each compared with its
 * schedule as it is now (generation, paused, there). Called on the holder's thread once per
 * batch of claims, in one round trip; a failed read answers RECUR_RUNS. */
typedef void forwarder_sched_check_fn(void *ctx, size_t n, const struct job *const *jobs,
                                      enum recur_verdict *out);

/* Sets what an occurrence that comes due tells, and how it is checked (before the holder
 * runs; check NULL: none is). */
void forwarder_on_occurrence(struct forwarder *fw, forwarder_occurrence_fn *fn,
                             forwarder_sched_check_fn *check, void *ctx);

/* Messages submitted and not yet handed back. */
size_t forwarder_in_flight(const struct forwarder *fw);

#endif

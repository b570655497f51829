/* callout: the calls of callback jobs, below the forwarder. A due callback job (its record
 * claimed by the forwarder) or a due direct message with dq-callback is called through
 * callbacks.c; what callplan.c makes of each result is reported as an outcome for the caller
 * to act on (mark, deliver, dead-letter, move on, copy for a retry). Of the work, callout.c does
 * only what is its own: it writes a record job's next attempt into Redis and counts the retries
 * waiting, and it builds the headers of a call's dead letter and of a direct message's retry
 * copy into the caller's headers. It never produces to Kafka, nor hands a message back.
 * Runs on the caller's thread (the holder's) only. */
#ifndef DQ_CALLOUT_H
#define DQ_CALLOUT_H

#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "core/config.h"
#include "core/envelope.h"
#include "core/held.h"
#include "core/job.h"
#include "core/metrics.h"

/* The head a claim wrote into a record, "<state><due>||<token>|" (store.c): a token is 13
 * characters and a due time 20 digits at most, so 64 leaves room. */
#define CALL_HEAD_MAX 64
/* Results one callout_outcomes takes: a storm of them is served a take at a time, between which
 * the holder renews leases and serves its partitions; one take's next attempts cost two Redis
 * round trips. */
#define CALLOUT_TAKE_MAX 256

struct callout;
struct call;
struct store;

/* What the caller is to do with a message callout.c hands back, and what with. */
enum call_act {
    CO_MADE,           /* the call is made: m is callout.c's until callout_outcome reports it */
    CO_RETRY,          /* m is to be retried after a backoff (out of memory, logged) */
    CO_WRITE_FAILED,   /* writing job's next attempt failed (why: Redis's error): m to retry */
    CO_GONE,           /* job's record changed during its call (logged): m is done */
    CO_AGAIN,          /* job's next attempt is written: m moves on to at_ms */
    CO_AGAIN_DIRECT,   /* m's copy into the delay topics, due at at_ms (callout_again_headers) */
    CO_DELIVERED,      /* a direct message's call answered, it has no topic: m is done */
    CO_DELIVER_DIRECT, /* a direct message's call answered: m itself on to topic */
    CO_DELIVER_JOB,    /* job's call answered: job on to its topic, its record marked after */
    CO_MARK,           /* job's call answered, it has no topic: its record marked delivered */
    CO_DEAD,           /* m itself to the dead letters, dlq its reason, why in words */
    CO_DEAD_JOB,       /* job to the dead letters, why in words; its record marked failed */
};

/* One message handed back. m->call is the message's call (or NULL when none was made): the
 * caller keeps it with m and frees it with callout_call_free once m leaves, after its dead
 * letter and its mark have read it. why is valid until the next call into callout.c; job and
 * topic while m->call lives. */
struct call_outcome {
    struct held *m;
    enum call_act act;
    struct job *job;            /* CO_WRITE_FAILED, CO_GONE, CO_AGAIN, CO_DELIVER_JOB,
                                 * CO_DEAD_JOB: the job as its calls left it */
    const char *topic;          /* CO_DELIVER_DIRECT */
    enum dlq_reason dlq;        /* CO_DEAD */
    const char *why;            /* CO_DEAD, CO_DEAD_JOB, CO_WRITE_FAILED */
    int64_t at_ms;              /* CO_AGAIN, CO_AGAIN_DIRECT: epoch ms of the next call */
    int64_t now_ms;             /* epoch ms: when the result was taken */
};

/* The calls' state with its HTTP client (callbacks.h), which writes a byte to wake_fd when
 * results wait. st is borrowed (a record's next attempt is written there) and outlives the
 * callout. NULL with err set on failure. */
struct callout *callout_new(const struct config *cfg, struct store *st, int wake_fd, char *err,
                            size_t errlen);
/* Stops the HTTP client and frees the messages whose calls are unanswered (made again after a
 * restart), with their calls. */
void callout_free(struct callout *co);

/* Calls a due callback job, m its message: job is its claimed record, taken when the call is
 * made or dead-lettered (left zeroed), left to the caller when the outcome is CO_RETRY.
 * head is the claimed record's head (at most CALL_HEAD_MAX - 1 characters) and tag m's dq-tag
 * ("" for none): a next attempt is written under them. Fills out: CO_MADE, CO_RETRY or
 * CO_DEAD_JOB (no call could be made). */
void callout_job(struct callout *co, struct held *m, struct job *job, const char *head,
                 const char *tag, struct call_outcome *out);
/* Calls a due direct message with dq-callback; from is the delay topic it was read from (its
 * id, without dq-call-id, names where it is). Fills out: CO_MADE, CO_RETRY or CO_DEAD
 * (dq-callback unusable, m->call NULL; or no call could be made). */
void callout_direct(struct callout *co, struct held *m, const char *from,
                    struct call_outcome *out);
/* Takes up to CALLOUT_TAKE_MAX calls' results, writes the next attempts of the record jobs
 * among them (as callplan.c decides), and for those answered 2xx with a topic to go on to that
 * they were, in one pipeline, and fills out[0..n) with what is left to
 * do; returns n. *more is 1 when more results may wait (the caller takes them after its other
 * work: leases, partitions). With none waiting, counts the retries waiting for /stats, at most
 * once a second. */
size_t callout_outcomes(struct callout *co, struct call_outcome *out, int *more);

/* Frees a message's call (m->call); NULL is fine. */
void callout_call_free(struct call *c);
/* Adds what c's calls came to (dq-callback, dq-attempts, dq-status, dq-response) to hdrs, for
 * a dead letter. */
void callout_dead_headers(rd_kafka_headers_t *hdrs, const struct call *c);
/* Turns hdrs, a copy of a direct message's headers, into its retry copy's due at at_ms (epoch
 * ms): routed (dq-hops + 1), with its webhook-id and the calls made so far. */
void callout_again_headers(rd_kafka_headers_t *hdrs, const struct call *c, int64_t at_ms);
/* What c's calls came to, in words: the reason of the record and of the dead letter. */
const char *callout_why(const struct call *c);
/* c's job: its record as claimed, with how its calls went. */
const struct job *callout_job_of(const struct call *c);

#endif

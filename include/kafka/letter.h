/* letter: the one builder of dead letters, for every path that gives up on a job or a message:
 * a business topic that refuses it, a message that cannot be handled, a callback that gave up,
 * a pull job buried or out of attempts. Every letter carries what a redrive needs to send it back
 * to the target it came from, and how Kafka's refusals are told apart, so that a letter the
 * dead-letter topic refuses goes again without its body (bare), once. */
#ifndef DQ_LETTER_H
#define DQ_LETTER_H

#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "core/job.h"

/* dq-body of a bare letter: where the body stays (the job's record, state failed, for
 * job.retention_s; the delay topic, dq-source, for the topic's retention). */
#define LETTER_BODY_OMITTED_JOB "omitted: refused by the dead-letter topic; get the job by its dq-id"
#define LETTER_BODY_OMITTED_DIRECT \
    "omitted: refused by the dead-letter topic; the message is at dq-source"
#define LETTER_BODY "dq-body"
#define LETTER_SOURCE "dq-source"

/* How Kafka refused a message. Every error that is no refusal, such as a timeout while Kafka is
 * unreachable, is retried for as long as it lasts. */
enum letter_refusal {
    LETTER_NOT_REFUSED = 0,
    LETTER_REFUSED_FIXABLE,   /* the topic is missing or not ours to write: an operator may fix it */
    LETTER_REFUSED_NEVER,     /* the message itself can never be written (too large, invalid) */
};

/* What e, a produce's error or a delivery report's, says of the message. */
enum letter_refusal letter_refusal_of(rd_kafka_resp_err_t e);

/* The headers of job's dead letter (caller owns them): the job's own headers, then dq-topic
 * (when it names one), dq-id, dq-due-ms, dq-error (reason), dq-deliver (when the job asked
 * for kafka or pull), dq-ttr-ms (when it set one), dq-attempts (when attempts > 0), and dq-body
 * when bare (the letter goes without the job's body). */
rd_kafka_headers_t *letter_job_headers(const struct job *job, const char *reason, int64_t attempts,
                                       int bare);

/* Turns hdrs, a copy of a message's own headers, into its dead letter's: dq-error (reason),
 * dq-source (where the message is: "<topic>/<partition>/<offset>") and dq-body when bare. */
void letter_message_headers(rd_kafka_headers_t *hdrs, const char *reason, const char *source,
                            int bare);

#endif

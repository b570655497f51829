/* reasons: why the delivery path gives up on a message (a dead letter) or passes one over (a
 * skip): the values its decisions name and its metrics count by. Pure declarations. */
#ifndef DQ_REASONS_H
#define DQ_REASONS_H

/* Why a message went to the dead-letter topic. */
enum dlq_reason { DLQ_ENVELOPE, DLQ_TOPIC, DLQ_LOOP, DLQ_DEAD_LETTER_TOPIC, DLQ_TOO_FAR, DLQ_ID,
                  DLQ_RECORD, DLQ_REFUSED, DLQ_CALLBACK, DLQ_REASONS };

/* Why a due message of a job added over HTTP was not delivered. */
enum skip_reason {
    SKIP_EXPIRED,           /* no record, and it would have expired by now */
    SKIP_MISSING,           /* no record although it should still be there: lost in Redis */
    SKIP_CANCELLED,         /* removed */
    SKIP_DELIVERED,         /* delivered already (by another copy of its message) */
    SKIP_FAILED,            /* dead-lettered already */
    SKIP_EARLIER_JOB,       /* its due time is not the record's: an earlier job's with this id,
                             * or this job's before it was rescheduled */
    SKIP_COPY,              /* another copy of its message is being delivered here */
    SKIP_FOREIGN,           /* not one of the job's own messages (dq-tag) */
    SKIP_ELSEWHERE,         /* another copy is being delivered by an instance that holds its group */
    SKIP_REASONS
};

#endif

/* letter: the one builder of dead letters. The contract is in include/kafka/letter.h. */
#include <string.h>

#include "core/envelope.h"
#include "kafka/letter.h"
#include "kafka/producer.h"

enum letter_refusal letter_refusal_of(rd_kafka_resp_err_t e)
{
    switch (e) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE:
        return LETTER_REFUSED_NEVER;
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
    case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
        return LETTER_REFUSED_FIXABLE;
    default:
        return LETTER_NOT_REFUSED;
    }
}

rd_kafka_headers_t *letter_job_headers(const struct job *job, const char *reason, int64_t attempts,
                                       int bare)
{
    rd_kafka_headers_t *hdrs = rd_kafka_headers_new(job->nheaders + 10);

    for (size_t i = 0; i < job->nheaders; i++)
        headers_add(hdrs, job->headers[i].name, job->headers[i].value,
                    strlen(job->headers[i].value));
    if (job->topic && job->topic[0])   /* a callback-only job has none */
        headers_add(hdrs, HDR_TOPIC, job->topic, strlen(job->topic));
    headers_add(hdrs, HDR_ID, job->id, strlen(job->id));
    headers_add_int(hdrs, HDR_DUE, job->due_ms);
    headers_add(hdrs, HDR_ERROR, reason, strlen(reason));
    if (job->deliver != JOB_DELIVER_AUTO) {
        const char *d = job->deliver == JOB_DELIVER_PULL ? "pull" : "kafka";
        headers_add(hdrs, HDR_DELIVER, d, strlen(d));
    }
    if (job->ttr_ms > 0)
        headers_add_int(hdrs, HDR_TTR, job->ttr_ms);
    if (attempts > 0)
        headers_add_int(hdrs, HDR_CALL_ATTEMPTS, attempts);
    if (bare)
        headers_add(hdrs, LETTER_BODY, LETTER_BODY_OMITTED_JOB, strlen(LETTER_BODY_OMITTED_JOB));
    return hdrs;
}

void letter_message_headers(rd_kafka_headers_t *hdrs, const char *reason, const char *source,
                            int bare)
{
    headers_add(hdrs, HDR_ERROR, reason, strlen(reason));
    headers_add(hdrs, LETTER_SOURCE, source, strlen(source));
    if (bare)
        headers_add(hdrs, LETTER_BODY, LETTER_BODY_OMITTED_DIRECT, strlen(LETTER_BODY_OMITTED_DIRECT));
}

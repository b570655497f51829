/* envelope: the dq-* control headers of a delay-topic message, and the times they imply.
 * Pure logic: headers arrive as a neutral array, so no Kafka library is needed here. */
#ifndef DQ_ENVELOPE_H
#define DQ_ENVELOPE_H

#include <stddef.h>
#include <stdint.h>

#include "core/job.h"

#define HDR_TOPIC   "dq-topic"    /* business topic to deliver to (required) */
#define HDR_ID      "dq-id"       /* job id: the body is in the Redis record */
#define HDR_DUE     "dq-due-ms"   /* absolute due time, epoch ms */
#define HDR_TAG     "dq-tag"      /* job tag: the record's and its own messages' shared secret */
#define HDR_HOPS    "dq-hops"     /* levels this message was moved down by delayqd */
#define HDR_SENT    "dq-sent-ms"  /* set on delivery: when it was sent */
#define HDR_ERROR   "dq-error"    /* set on dead letters: why */
#define HDR_DELIVER "dq-deliver"  /* "pull": the job waits in Redis for poppers, "kafka": it
                                   * goes to its topic even when that is a pull topic */
#define HDR_TTR     "dq-ttr-ms"   /* a pull job's reservation time, ms */
#define HDR_CALLBACK      "dq-callback"   /* a callback as JSON, the add's "callback" field: a
                                           * direct message's own; on a callback job's dead
                                           * letter, the job's */
#define HDR_CALL_ID       "dq-call-id"    /* a direct message's retry: its webhook-id */
#define HDR_CALL_ATTEMPTS "dq-attempts"   /* a direct message's retry: calls made so far; on a
                                           * callback's dead letter: calls made */
#define HDR_CALL_FIRST    "dq-first-ms"   /* a direct message's retry: when the first call went */
#define HDR_CALL_STATUS   "dq-status"     /* on a callback's dead letter: the last HTTP status */
#define HDR_CALL_RESPONSE "dq-response"   /* on a callback's dead letter: the first bytes of the
                                           * last answer's body */
#define HDR_PREFIX  "dq-"         /* every control header; none is copied onto a delivery */
#define ENVELOPE_TAG_MAX 64       /* longer dq-tag values are refused (delayqd writes 13) */

/* One message header. value may be NULL (a header without value); it is not NUL-terminated. */
struct hdr {
    const char *name;
    const char *value;
    size_t len;
};

/* The parsed control headers. Strings point into the headers passed to envelope_parse. */
struct envelope {
    const char *topic;        /* NULL when absent */
    size_t topic_len;
    const char *id;           /* NULL for a direct message */
    size_t id_len;
    const char *tag;          /* NULL when absent */
    size_t tag_len;
    int has_due;
    int64_t due_ms;           /* epoch ms, valid when has_due */
    int hops;                 /* 0 unless moved down the levels by delayqd */
    enum job_deliver deliver; /* dq-deliver; JOB_DELIVER_AUTO when absent */
    int64_t ttr_ms;           /* dq-ttr-ms; 0 when absent */
    const char *callback;     /* dq-callback (JSON, read by calljson_parse); NULL: none */
    size_t callback_len;
    const char *call_id;      /* dq-call-id; NULL when absent */
    size_t call_id_len;
    int64_t call_attempts;    /* dq-attempts of a direct callback's retry; 0 when absent */
    int64_t call_first_ms;    /* dq-first-ms; 0 when absent */
};

/* Parses the control headers. Returns 0, or -1 with the reason (naming the header) in err:
 * missing dq-topic (a message needs it unless it names a job, dq-id, or a callback,
 * dq-callback), an empty or repeated control header, a malformed number. */
int envelope_parse(const struct hdr *hdrs, size_t n, struct envelope *env, char *err, size_t errlen);

/* 1 when name is a control header (dq-*), else 0. */
int envelope_is_control(const char *name);

/* The two times of a message with CreateTime timestamp_ms in a topic of level_ms:
 *  due_ms: when it is to be delivered. A message routed by delayqd (dq-id or dq-hops) is due at
 *          dq-due-ms exactly; a direct message never before timestamp + level (its delay).
 *  act_ms: when the holder must act on it (deliver if due, else move it down a level):
 *          the earlier of due_ms and the hop time timestamp + level. */
void envelope_times(const struct envelope *env, int64_t timestamp_ms, int64_t level_ms,
                    int64_t *act_ms, int64_t *due_ms);

/* The size of the message delivered for job as Kafka counts it against message.max.bytes:
 * key, body, headers (the job's and dq-id, dq-due-ms, dq-sent-ms) and the record's overhead,
 * rounded up; a job over the producer's limit could never be delivered. */
size_t envelope_delivery_bytes(const struct job *job);

/* Parses a non-negative decimal int64 of len bytes. Returns 0 or -1. */
int parse_int64(const char *s, size_t len, int64_t *out);

#endif

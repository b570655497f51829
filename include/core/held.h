/* held: a delay-topic message on its way through delayqd, as the holder takes it from Kafka and
 * the forwarder acts on it. A plain struct shared by the two. */
#ifndef DQ_HELD_H
#define DQ_HELD_H

#include <stddef.h>
#include <stdint.h>

#include "core/envelope.h"

struct part;
struct call;

/* A delay-topic message taken by the holder: an owned copy, which the holder hands to the
 * forwarder and takes back (done, or to retry) from its outcomes. */
struct held {
    struct part *part;          /* the holder's */
    uint32_t gen;               /* the holder's: the partition's generation when taken */
    int group;                  /* its partition group */
    uint32_t epoch;             /* the group's ownership (groups_epoch) when it was taken */
    int level;                  /* index of its delay topic's level */
    int32_t partition;
    int64_t offset;
    int64_t timestamp_ms;       /* CreateTime */
    int64_t act_ms;             /* when to act: deliver if due, else move down a level */
    int64_t due_ms;             /* when it is due (epoch ms) */
    const char *key;            /* NULL when the message has none */
    size_t key_len;
    const char *value;          /* NULL when the message has none */
    size_t value_len;
    struct hdr *hdrs;           /* all headers, control ones included */
    size_t nhdrs;
    struct envelope env;        /* valid when env_ok */
    int env_ok;
    char env_err[160];          /* why the envelope is bad, when !env_ok */
    int attempts;               /* failed tries so far (Redis or Kafka) */
    int stage;                  /* the forwarder's */
    int mark;                   /* the forwarder's: state to mark the record once sent */
    int skipped;                /* the forwarder's: a cancelled mark's enum recur_verdict */
    int64_t claimed_due_ms;     /* the forwarder's: the due time in the record it claimed */
    int kept;                   /* the forwarder's: its record has no expiry (a pull job's,
                                 * made ready: the job ends it), which its mark keeps */
    int last_err;               /* the refusal (rd_kafka_resp_err_t) of its delivery or move */
    int refused_move;           /* 1: last_err refused a move down the levels, not a delivery */
    int64_t sent_ms;            /* the forwarder's: when its delivery was sent */
    int64_t refused_since_ms;   /* first time the broker refused it (not: was unreachable); 0 */
    int dead_bare;              /* the dead-letter topic refused the body: send it without */
    int called;                 /* a direct message's callback answered 2xx: only its onward
                                 * delivery is left, and retried */
    struct call *call;          /* callout.c's call of a callback job, while it lasts; freed by
                                 * the forwarder when it hands m back */
    char take_over[32];         /* the forwarder's: another instance's claim on its record whose
                                 * owner no longer holds that claim's group ("*": one too long
                                 * to name, of an older delayqd), or "" */
};

#endif

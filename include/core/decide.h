/* decide: what to do with a delay-topic message whose act time has come: deliver it, move it
 * down the levels, let it wait the last stretch in memory, or dead-letter it, and why. Pure
 * logic: the forwarder gathers the facts and acts on the answer. */
#ifndef DQ_DECIDE_H
#define DQ_DECIDE_H

#include <stdint.h>

#include "core/config.h"
#include "core/job.h"
#include "core/levels.h"
#include "core/reasons.h"

enum decision {
    DECIDE_DEAD,         /* to the dead-letter topic; *why says which reason */
    DECIDE_MOVE,         /* produce it to the level that fits what remains */
    DECIDE_WAIT,         /* less than the smallest level remains: wait in memory until due */
    DECIDE_CLAIM,        /* due, a job added over HTTP: claim its record, then deliver */
    DECIDE_DELIVER,      /* due, a direct message: deliver its own body */
};

/* What is known of the message when it acts. */
struct decide_facts {
    int envelope_ok;            /* its dq- headers parse */
    enum target_fault target;   /* of its dq-topic (TARGET_OK when envelope_ok is 0) */
    int has_id;                 /* it carries dq-id */
    int id_valid;               /* that id is a valid job id */
    int refused_for_good;       /* a direct message the business topic kept refusing */
    int64_t due_ms;             /* epoch ms */
    int64_t now_ms;             /* epoch ms */
    int64_t max_delay_ms;       /* job.max_delay_s */
    int64_t smallest_level_ms;
};

/* 1 when a due job of topic (len bytes) waits in Redis for poppers instead of going to Kafka:
 * it asked for that (deliver), or it did not ask for Kafka and its topic is one of
 * pull.topics (names or fnmatch patterns). */
int decide_pulls(const struct config *cfg, const char *topic, size_t len, enum job_deliver deliver);

/* The one target a due job goes to next. A job has one or two steps: a callback first (until
 * it was answered 2xx), then its topic, which is a pull topic or a Kafka topic. */
enum dest {
    DEST_CALLBACK,      /* call its callback (callout.c) */
    DEST_PULL,          /* make it ready in its pull topic (pullq.c) */
    DEST_KAFKA,         /* produce it to its business topic */
    DEST_DONE,          /* nothing is left: a callback-only job called back; mark it */
};

/* Where a due job of topic (len bytes, 0 for none), delivery choice deliver, with a callback
 * (has_callback) or not, goes now; called_back: its callback was answered 2xx already. */
enum dest decide_dest(const struct config *cfg, const char *topic, size_t len,
                      enum job_deliver deliver, int has_callback, int called_back);

/* The action for f; for DECIDE_DEAD also the reason in *why. */
enum decision decide_message(const struct decide_facts *f, enum dlq_reason *why);

#endif

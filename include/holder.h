/* holder: one consumer assign()ed to every partition of every delay topic. A partition whose
 * head is not due is paused, and resumed (then sought, to wake the fetcher) by a timer at the
 * head's time: no tick, no sleep. The smallest level's partitions, whose messages may be due
 * before their hop time, are read ahead into an in-memory heap of due times.
 * Offsets are committed up to the lowest message not yet finished.
 * Single-threaded: holder_run owns the consumer and drives the forwarder from its loop. */
#ifndef DQ_HOLDER_H
#define DQ_HOLDER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "envelope.h"

struct holder;
struct part;

/* A delay-topic message taken by the holder: an owned copy, freed by holder_done. */
struct held {
    struct part *part;
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
    int last_err;               /* the last Kafka error (rd_kafka_resp_err_t), for dq-error */
    int64_t refused_since_ms;   /* first time the broker refused it (not: was unreachable); 0 */
    int dead_bare;              /* the dead-letter topic refused the body: send it without */
};

/* Creates the consumer and the forwarder, and assigns every delay-topic partition.
 * partitions[level] is each delay topic's partition count. NULL with err set on failure. */
struct holder *holder_new(const struct config *cfg, const int partitions[LEVELS_MAX], char *err,
                          size_t errlen);

/* Runs the loop until *stop is set, then finishes in-flight forwards (up to a limit), commits
 * and returns. */
void holder_run(struct holder *h, volatile sig_atomic_t *stop);

void holder_free(struct holder *h);

/* For the forwarder: the message is finished (delivered, skipped, moved on or dead-lettered);
 * frees it and lets the commit point pass it. */
void holder_done(struct holder *h, struct held *m);

/* For the forwarder: try the message again at at_ms. */
void holder_retry(struct holder *h, struct held *m, int64_t at_ms);

#endif

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

/* One partition's line in the status an owner publishes (claims.h). */
struct part_status {
    char field[TOPIC_NAME_MAX + 16];   /* "<topic>/<partition>" */
    char value[64];                    /* "<committed> <end> <head due ms, or -1>" */
};

/* A delay-topic message taken by the holder: an owned copy, freed by holder_done. */
struct held {
    struct part *part;
    uint32_t gen;               /* the partition's generation when taken: stale once it moves on */
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
    int64_t claimed_due_ms;     /* the forwarder's: the due time in the record it claimed */
    int last_err;               /* the refusal (rd_kafka_resp_err_t) of its delivery or move */
    int refused_move;           /* 1: last_err refused a move down the levels, not a delivery */
    int64_t sent_ms;            /* the forwarder's: when its delivery was sent */
    int64_t refused_since_ms;   /* first time the broker refused it (not: was unreachable); 0 */
    int dead_bare;              /* the dead-letter topic refused the body: send it without */
};

struct warm;

/* The metadata warmer of the producer that delivers (see warm.h), for the intake to note the
 * topics of the jobs it adds. Valid until holder_free. */
struct warm *holder_warm(struct holder *h);

/* Creates the consumer, the forwarder and the group leases. Partitions are assigned group by
 * group as their leases are won. partitions[level] is each delay topic's partition count.
 * NULL with err set on failure. */
struct holder *holder_new(const struct config *cfg, const int partitions[LEVELS_MAX], char *err,
                          size_t errlen);

/* Creates and destroys the consumer that holder_new would, without connecting: librdkafka
 * checks the whole configuration then (e.g. fetch.max.bytes against message.max.bytes).
 * Returns 0, or -1 with librdkafka's reason in err. */
int holder_check_config(const struct config *cfg, char *err, size_t errlen);

/* Runs the loop until *stop is set, then finishes in-flight forwards (up to a limit), commits
 * and returns. */
void holder_run(struct holder *h, volatile sig_atomic_t *stop);

void holder_free(struct holder *h);

/* For the forwarder: the message is finished (delivered, skipped, moved on or dead-lettered);
 * frees it and lets the commit point pass it. */
void holder_done(struct holder *h, struct held *m);

/* For the forwarder: try the message again at at_ms. */
void holder_retry(struct holder *h, struct held *m, int64_t at_ms);

/* For the forwarder, right before it sends m: 1 when m's group is still surely ours. */
int holder_may_forward(struct holder *h, const struct held *m);

/* For groups.c: the partitions of one group (the same numbers in every delay topic). */
/* Assigns the group's partitions from their committed offsets. 0, or -1 with err set. */
int holder_group_acquire(struct holder *h, int group, char *err, size_t errlen);
/* Unassigns them and forgets every message of them (handed back, or fenced). */
void holder_group_drop(struct holder *h, int group);
/* Stops taking messages of the group; those taken already are still forwarded when due (at
 * most the read-ahead from now), so the group is handed back with nothing acted on left
 * uncommitted. holder_group_in_flight says when they are done. */
void holder_group_quiesce(struct holder *h, int group);
/* Messages of the group taken and not finished. */
size_t holder_group_in_flight(struct holder *h, int group);
/* Commits the group's partitions now, synchronously. */
void holder_group_commit(struct holder *h, int group);
/* Fills up to max lines of the group's status. Returns how many. */
size_t holder_group_status(struct holder *h, int group, struct part_status *out, size_t max);

#endif

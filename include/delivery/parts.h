/* parts: the partitions of the holder's consumer, one struct part per partition of every delay
 * topic: which are assigned (group by group, as their leases are won), which are paused and why,
 * the resume timers of those whose head is not due, the offsets taken and finished, and the
 * commits up to the lowest unfinished one. Runs on the holder's thread, on its consumer; it
 * reads the groups (which are surely ours) and calls nothing of the holder. */
#ifndef DQ_PARTS_H
#define DQ_PARTS_H

#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "core/config.h"
#include "core/offsets.h"
#include "lib/heap.h"

struct groups;
struct part_status;

enum hold { HOLD_NONE, HOLD_HEAD, HOLD_FULL };

/* One partition. The holder reads it; parts_* change it. */
struct part {
    int level;
    int32_t partition;
    struct offsets offs;
    enum hold hold;          /* why it is paused */
    int64_t resume_at;       /* HOLD_HEAD: epoch ms of the resume timer */
    size_t in_memory;        /* taken and not finished */
    int64_t committed;       /* last offset sent in a commit, -1 none */
    int group;               /* its partition group */
    uint32_t gen;            /* bumped whenever its state is forgotten */
};

/* A won group's assignment: its committed offsets asked of Kafka, then its parts assigned. */
struct group_ask {
    int asking;              /* its offsets asked and not yet answered */
    int assigned;
    uint32_t seq;            /* bumped by each ask and cancel: an older answer is dropped */
    int64_t deadline;        /* monotonic: asked again on transient errors until then */
    int64_t retry_at;        /* monotonic, 0: none due */
};

struct parts {
    const struct config *cfg;
    rd_kafka_t *rk;                 /* the holder's consumer (not owned) */
    const struct groups *groups;    /* the holder's (not owned) */
    rd_kafka_topic_t *rkt[LEVELS_MAX];
    int first[LEVELS_MAX];   /* v index of each level's partition 0 */
    int count[LEVELS_MAX];   /* partitions of each level */
    struct part *v;
    size_t n;
    struct heap timers;      /* struct part by resume_at */
    size_t cap;              /* in-memory messages a partition may always hold: its share of
                              * delay.max_held among every partition */
    size_t total;            /* in memory, all partitions */
    size_t busy;             /* partitions holding any */
    rd_kafka_queue_t *asks;  /* the answers about won groups' committed offsets */
    struct group_ask *ask;   /* one per partition group */
    int *failed;             /* groups whose offsets could not be had (parts_run_asks) */
};

/* One part per partition of every delay topic (partitions[level] of each); none is assigned
 * until parts_assign. rk and gs are borrowed and must outlive ps; an answer about committed
 * offsets writes a byte to wake_fd. 0, or -1 with err set (out of memory); parts_release then
 * frees what was made. */
int parts_init(struct parts *ps, const struct config *cfg, rd_kafka_t *rk, const struct groups *gs,
               const int partitions[LEVELS_MAX], int wake_fd, char *err, size_t errlen);

/* Frees the parts and their topic handles; before rd_kafka_destroy of the consumer. Safe on a
 * zeroed struct that parts_init never ran on. */
void parts_release(struct parts *ps);

/* The part of partition of the delay topic named topic, or NULL when it is none of them. */
struct part *parts_find(struct parts *ps, const char *topic, int32_t partition);

/* Pauses p, its head at offset not due: resumed (and sought to offset) by a timer at at_ms
 * (epoch), or at once when there is no memory for the timer. */
void parts_hold_head(struct parts *ps, struct part *p, int64_t offset, int64_t at_ms);

/* Takes the message at offset from p: 0, or -1 when p holds what it may in memory (its share of
 * delay.max_held, more while other partitions leave theirs unused; see limit_of) (or
 * out of memory): then p is paused at offset until half of them are finished. */
int parts_take(struct parts *ps, struct part *p, int64_t offset);

/* The message at offset, taken from p, is finished: the commit point may pass it. */
void parts_finish(struct parts *ps, struct part *p, int64_t offset);

/* A message taken from p is dropped unfinished: the commit stops before it. */
void parts_untake(struct parts *ps, struct part *p);

/* Resumes the parts whose timer is due at now_ms (epoch), where their group is still usable. */
void parts_fire_timers(struct parts *ps, int64_t now_ms);

/* 1 with the epoch ms of the next resume timer in *at_ms, 0 when there is none. */
int parts_next_timer(const struct parts *ps, int64_t *at_ms);

/* Commits the parts of group (-1: of every group) whose lease is surely still ours, up to their
 * lowest unfinished offset, asynchronously unless sync (then a failure is logged). Returns 1
 * when an asynchronous commit was sent (its answer comes to the offset commit callback). */
int parts_commit(struct parts *ps, int group, int sync);

/* An asynchronous commit failed: every part is committed again at the next parts_commit. */
void parts_commit_failed(struct parts *ps);

/* Begins to assign the parts of group, won, each part's state forgotten: their committed offsets
 * are asked of Kafka without waiting, and the parts assigned from them (the beginning for one
 * never committed) by parts_run_asks once answered. */
void parts_assign(struct parts *ps, int group);

/* Reads the answers about committed offsets that came, assigning the groups answered, and asks
 * again where a transient error (a coordinator loading) was met, within half a claim TTL (at
 * most 15 s) of the first ask. Returns how many groups could not be assigned (logged), their
 * numbers in *failed: they are to be let go. */
size_t parts_run_asks(struct parts *ps, const int **failed);

/* The monotonic ms of the next ask due again, or INT64_MAX. */
int64_t parts_next_ask_ms(const struct parts *ps);

/* Unassigns the parts of group, lost or handed back, each part's state forgotten (an ask of its
 * offsets not answered is forgotten too). Errors are logged. */
void parts_unassign(struct parts *ps, int group);

/* Pauses the parts of group, being handed back: nothing more is read; what was read is still
 * forwarded. */
void parts_quiesce(struct parts *ps, int group);

/* How many messages taken from group's parts are not finished. */
size_t parts_in_flight(const struct parts *ps, int group);

/* The status rows of group's parts into out, at most max; returns how many. */
size_t parts_status(const struct parts *ps, int group, struct part_status *out, size_t max);

/* Sets the gauges of paused partitions and of messages in memory. */
void parts_gauges(const struct parts *ps);

#endif

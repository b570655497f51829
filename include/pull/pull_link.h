/* pull_link: the inside of pull, shared by its files and nothing else: pull.c (the thread,
 * pops, what workers do with popped jobs, waiting pops and the announcements that wake them)
 * and sweep.c (sweeps of the pull topics, their counts, and dead letters). Callers use
 * include/pull/pull.h. */
#ifndef DQ_PULL_LINK_H
#define DQ_PULL_LINK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "core/answer.h"
#include "core/api.h"
#include "pull/pull.h"
#include "pull/pullq.h"

#define BATCH_MAX 256              /* requests served in one pipeline at most */
#define WOKEN_MAX 64               /* topics announced between two looks, kept one by one */
#define DEAD_TIMEOUT_MS 10000      /* a dead letter gives up on Kafka after this (sent again) */

enum kind { K_POP, K_OP };

/* A topic to sweep at a time known: a reservation of it ends then, or a dead letter is due. */
struct due {
    char topic[TOPIC_NAME_MAX + 1];
    int64_t at_ms;                 /* monotonic */
};

struct req;
struct waitq;

/* A parked pop's place in the queue of one topic it waits on (parked.c). */
struct wnode {
    struct req *r;
    struct waitq *q;
    struct wnode *prev, *next;
};

struct req {
    enum kind kind;
    struct api_pop pop;
    enum api_verb verb;
    struct api_pull_op op;
    answer_fn done;
    answer_wanted_fn wanted;       /* a pop's; NULL: always wanted */
    void *opaque;
    int64_t deadline_ms;           /* monotonic: when a parked pop's wait ends */
    struct req *next;              /* the queue's, or (parked) the next pop parked */
    struct req *prev;              /* parked: the pop parked before */
    int parked;
    struct wnode wn[API_POP_TOPICS_MAX];   /* parked: in the queues of its topics, nwn of them */
    int nwn;
};

/* A dead letter on its way to Kafka: what to mark once acknowledged, and what to send again
 * without the body should the dead-letter topic refuse it for good. */
struct pull_letter {
    char topic[TOPIC_NAME_MAX + 1];
    char id[JOB_ID_MAX + 1];
    char *key;                     /* owned */
    rd_kafka_headers_t *hdrs;      /* owned: a copy of the letter's headers; NULL once bare */
    int64_t due_ms;                /* epoch ms: the due time the job was made ready with */
    char why[256];                 /* why it was dead-lettered */
    struct pull_letter *next;
};

struct pull {
    const struct config *cfg;
    struct pullq *q;
    struct store *st;                  /* job records: a dead-lettered job's is marked failed */
    rd_kafka_t *rk;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    struct req *queue, **queue_tail;   /* new requests (mu) */
    int no_waiting;                    /* pull_stop_waiting was called (mu) */
    int quit;                          /* (mu) */
    char (*woken)[TOPIC_NAME_MAX + 1]; /* topics announced ready since the last look (mu) */
    int *wjobs;                        /* each one's jobs announced, 0: to look at (mu) */
    size_t nwoken;                     /* WOKEN_MAX at most; more: look at every topic */
    int woken_all;                     /* look at every topic waited on (mu) */
    pthread_t listener;                /* hears the announcements (listen_main) */
    int listener_started;
    atomic_int listening;              /* 1 while subscribed: waiting pops need no polling */
    atomic_int stop_listening;
    int64_t counts_wanted_ms;          /* monotonic: when pull_counts_wanted was last called (mu) */
    /* the thread's own: */
    struct req *parked, *parked_tail;  /* pops waiting for a job, oldest first (parked.c) */
    struct waitq **waitqs;             /* their queues by topic: hash buckets (parked.c) */
    size_t nwaitqs;
    int64_t next_sweep_ms, next_look_ms, next_gone_ms;   /* monotonic */
    char (*looking)[TOPIC_NAME_MAX + 1];   /* the woken topics being looked at */
    int *ljobs;                            /* their jobs announced (wjobs) */
    char (*fresh)[TOPIC_NAME_MAX + 1];     /* topics of the pops parked since the last look */
    struct due *due;                       /* topics to sweep at a time known, ndue of them */
    size_t ndue, due_cap;
    int64_t next_idle_ms, next_count_ms;   /* monotonic */
    size_t nfresh;                         /* WOKEN_MAX at most */
    int fresh_all;
    struct pull_letter *sent;               /* dead letters acknowledged, to mark */
};

/* parked.c */
/* Parks r: last (front 0) or first (front 1: a pop parked before, parked again), in the list
 * and in the queue of each of its topics. 0, or -1 when out of memory (r is not parked). */
int parked_add(struct pull *p, struct req *r, int front);
/* Takes r out of the list and its topics' queues. */
void parked_remove(struct pull *p, struct req *r);
/* The oldest pop parked on topic, or NULL. */
struct req *parked_first_of(struct pull *p, const char *topic);
/* The topics parked pops wait on, n of them (caller frees the array; the strings are the
 * queues' until a pop leaves). NULL when out of memory. */
const char **parked_topics(struct pull *p, size_t *n);
/* Frees the queues (the pops are answered before). */
void parked_free(struct pull *p);

/* sweep.c */
/* Topic is to be swept by at_ms (monotonic) at the latest: a reservation of it ends then, or a
 * dead letter of it is due. */
void pull_sweep_by(struct pull *p, const char *topic, int64_t at_ms);
/* The monotonic time of epoch_ms, an instant by Redis's clock (taken to be ours). */
int64_t pull_mono_of(int64_t epoch_ms);
/* The sweeps and counts due at now (monotonic). */
void pull_sweep(struct pull *p, int64_t now);
/* The dead-letter producer's delivery reports. */
void pull_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque);
/* Marks the acknowledged dead letters. */
void pull_mark_sent(struct pull *p);

#endif

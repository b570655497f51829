/* intake_link: the inside of the intake, shared by its three files and nothing else: intake.c
 * (the adds' path: the queue, the intake thread, Redis writes), flights.c (adds on their way to
 * Kafka, answered from delivery reports or at their deadline) and requests.c (get, remove,
 * reschedule and the claims on the workers, /stats). */
#ifndef DQ_INTAKE_LINK_H
#define DQ_INTAKE_LINK_H

#include <pthread.h>
#include <stdatomic.h>

#include <librdkafka/rdkafka.h>

#include "core/api.h"
#include "core/apidata.h"
#include "core/apijson.h"
#include "intake/health.h"
#include "intake/intake.h"
#include "intake/moves.h"
#include "lib/workers.h"
#include "redis/store.h"

#define WARM_TIMEOUT_MS 5000    /* start-up metadata fetch; Kafka down only delays start */
/* Adds wait this long to travel to Kafka in batches: under load the broker handles one request
 * per batch, not per add; an add is answered this much later at most. */
#define INTAKE_LINGER_MS 2
#define INTAKE_BATCH_MAX 1024   /* adds written to Redis in one pipeline */
#define INTAKE_IDLE_MS 100      /* longest sleep of the intake thread: how soon it sees a stop */
#define PURGE_WAIT_MS 1000      /* at shutdown, for the reports of purged messages */
#define WORKER_BATCH 64         /* requests a worker takes at once, to share round trips */

/* An add from the moment it is parsed until Kafka answered for it. */
struct pending_add {
    struct intake *in;
    struct job job;             /* owned */
    int64_t queued_ms;          /* monotonic: when it entered the intake queue */
    int fresh;                  /* answered 200 as the add that made the job */
    int resent;                 /* its record was there already: not this add's to undo */
    int answered;               /* the status it was answered with at its deadline, else 0: the
                                 * report then only frees it */
    int64_t sent_ms;            /* monotonic: when its message went to librdkafka */
    answer_fn done;          /* a single add's; NULL for a job of a batch */
    void *opaque;
    struct batch *batch;        /* the batch it is a job of, or NULL */
    struct move *moved;         /* a reschedule's message, not an add's; else NULL */
    size_t slot;                /* its index in the batch */
    struct pending_add *next;   /* in the intake queue */
    struct pending_add *fprev, *fnext;   /* in the list of adds awaiting Kafka, oldest first, or
                                          * in the list of those answered before Kafka did */
};

/* A list of adds linked by fprev and fnext. */
struct flights {
    struct pending_add *head, *tail;
};

/* A request served by a worker. */
enum task_kind { T_GET, T_REMOVE, T_RESCHEDULE, T_CLAIMS, T_HAND_BACK, T_PULL_TOPIC };

struct task {
    enum task_kind kind;
    char id[JOB_ID_MAX + 1];
    int64_t due_ms;             /* a reschedule's new due time */
    int group;                  /* a hand-back's group */
    int forget;                 /* a remove's: of a pull job alone, and the record goes too,
                                 * its id free at once */
    char topic[TOPIC_NAME_MAX + 1];   /* a forgetting remove's: of this topic alone; "" any */
    struct api_pull_topic *ask; /* a pull topic's request (owned) */
    answer_fn done;
    void *opaque;
};

struct intake {
    const struct config *cfg;
    struct api_limits limits;
    size_t max_message_bytes;   /* the producers' message.max.bytes: no delivery is larger */
    rd_kafka_t *rk;
    struct warm *warm;          /* the deliveries' producer: each added job's topic is noted */
    pthread_t thread;
    atomic_int stop;
    struct workers *workers;
    int nworkers;
    struct store **wstore;      /* each worker's connection, made at its first use */
    struct leases **wview;      /* each worker's claims view, made at its first use */
    struct pullq **wpull;       /* each worker's pull queues connection, made at its first use */
    struct pull *pull;          /* pops and what workers do with popped jobs */
    pthread_mutex_t stats_mu;
    struct stats *stats;        /* the pending view's Kafka handle, made at its first use */
    struct pullq *stats_pq;     /* the stats thread's pull queues connection (/stats' counts) */
    struct pullq *pq;           /* the intake thread's: pull jobs added for later, counted */
    /* The intake queue: HTTP threads append parsed adds, the intake thread takes them all at
     * once and writes them to Redis in one pipeline, so no HTTP thread waits on a round trip. */
    pthread_mutex_t q_mu;
    struct pending_add *q_head, **q_tail;
    int wake[2];                /* the queue and librdkafka's delivery reports write here */
    struct store *st;           /* the intake thread's own connection */
    /* The intake thread's: adds whose message Kafka has not acknowledged yet, oldest first. */
    struct flights flight;
    /* The intake thread's: adds answered at their deadline, whose report is still to come. */
    struct flights late;
    int64_t last_ack_ms;        /* monotonic: Kafka's last acknowledgement of an add */
    /* Monotonic ms since which no add was acknowledged although one waited longer than
     * kafka.produce_timeout_ms, or 0: adds fail at once meanwhile, until a probe of the health
     * thread finds a broker answering after unreachable_at (when it was found out). Read by
     * /readyz too. */
    _Atomic int64_t unreachable_since;
    _Atomic int64_t unreachable_at;
    struct health *health;      /* Redis and Kafka probed in the background */
    struct store_add_answer answers[INTAKE_BATCH_MAX];   /* the intake thread's, per batch */
};

/* An add_batch request until every job of it is answered: then it answers the request. */
struct batch {
    pthread_mutex_t mu;
    size_t n;
    size_t left;                        /* jobs not answered yet, plus one while being queued */
    struct api_job_answer *answers;     /* n */
    answer_fn done;
    void *opaque;
};

/* intake.c */
/* Answers an add (a single one, or a job of a batch); on success with its job id. */
void intake_reply(struct pending_add *pa, int status, int code, const char *msg);
void intake_free_add(struct pending_add *pa);
/* Answers an add and frees it. */
void intake_finish_add(struct pending_add *pa, int status, int code, const char *msg);
/* Hands a list of readied adds (linked by next, ending at *tail) to the intake thread, or
 * answers them when it is stopping. */
void intake_enqueue(struct intake *in, struct pending_add *list, struct pending_add **tail);

/* flights.c, on the intake thread */
/* Answers an add or reschedule that never reached Kafka (status, code, msg) and frees it. */
void intake_refuse(struct intake *in, struct store *st, struct pending_add *pa, int status,
                   int code, const char *msg);
/* A reschedule's new message did not reach Kafka (why): the old record put back through st,
 * answered; returns the status answered (pa stays allocated). */
int intake_moved_failed(struct intake *in, struct store *st, struct pending_add *pa,
                        const char *why);
/* 1 while Kafka counts as unreachable (adds fail at once), logged for who. */
int intake_kafka_unreachable(struct intake *in, const char *who);
/* Answers the adds past their deadline. */
void intake_expire_flights(struct intake *in);
/* What the record written for pa said (a): answered at once, or on to Kafka. */
void intake_after_record(struct intake *in, struct pending_add *pa,
                         const struct store_add_answer *a);
/* Produces the delay-topic message of a stored job. 0, or -1 with err set. */
int intake_produce_ref(struct intake *in, struct pending_add *pa, char *err, size_t errlen);
/* The delivery report of an add's or a reschedule's message: answers it. */
void flights_report(rd_kafka_t *rk, const rd_kafka_message_t *m, void *unused);
/* At shutdown, the adds Kafka never answered: answered as at their deadline. */
void flights_give_up_all(struct intake *in);
/* At shutdown, once no report can come: frees every add left in the lists. */
void flights_free_all(struct intake *in);

/* requests.c: what the workers run, and what they answer when a task is dropped. */
workers_run_fn intake_run_tasks;
/* The worker's pull queues connection, made at its first use (NULL when out of memory). */
struct pullq *intake_worker_pullq(struct intake *in, int worker);

/* topics.c */
/* Serves the n pull topic requests a worker took (each answered and freed). */
void intake_run_topic_asks(struct intake *in, int worker, struct task **ts, size_t n);
workers_drop_fn intake_drop_task;

#endif

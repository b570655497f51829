/* metrics: process-wide counters, gauges and histograms, rendered in Prometheus text format.
 * Every update is a relaxed atomic, safe from any thread. Pure logic. */
#ifndef DQ_METRICS_H
#define DQ_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "core/reasons.h"

enum metric_counter {
    M_JOBS_ADDED,           /* adds answered with success (new jobs) */
    M_JOBS_DELIVERED,       /* business messages acknowledged by Kafka */
    M_JOBS_CANCELLED,       /* removes of pending jobs */
    M_JOBS_RESCHEDULED,     /* pending jobs moved to another due time */
    M_FORWARDS,             /* produce calls to a business topic (counted when sent) */
    M_COLD_DELIVERIES,      /* of those, to a topic whose metadata was not fetched ahead */
    M_MOVES,                /* messages moved down a level */
    M_RESUMES,              /* held partitions resumed (each costs a fetch) */
    M_LEASE_RENEW_FAILURES, /* renewals that failed or found the lease gone */
    M_GROUPS_FENCED,        /* groups dropped because their lease could not be renewed */
    M_REDIS_ERRORS,
    M_REDIS_PIPELINES,      /* pipelines (batches of calls) sent to Redis */
    M_REDIS_ROUND_TRIPS,    /* a pipeline's calls to one node, sent and answered together */
    M_REDIS_CALLS,          /* calls (commands, script calls) in those */
    M_REDIS_MASTER_MOVES,   /* the master moved (a replica promoted, a switch) as Sentinel said */
    M_REDIS_FAILOVER_WAIT_MS,   /* ms Redis pipelines waited for failovers, summed */
    M_KAFKA_ERRORS,
    M_PULL_READY,           /* due jobs made ready for poppers */
    M_PULL_POPS,            /* pops answered with jobs */
    M_PULL_EMPTY_POPS,      /* pops answered with none (their wait ran out) */
    M_PULL_POPS_LEFT,       /* waiting pops whose client left: answered with none */
    M_PULL_POPPED,          /* jobs handed out by pops */
    M_PULL_FINISHES,
    M_PULL_RELEASES,
    M_PULL_EXPIRIES,        /* reservations that ran out: the job is ready again */
    M_PULL_DEAD,            /* pull jobs sent to the dead-letter topic (buried, or out of attempts) */
    M_CALL_DEFERRED,        /* callback jobs sent back to wait: their endpoint was busy */
    M_SCHED_RUN,            /* occurrences of schedules that came due and ran */
    M_SCHED_SKIPPED,        /* occurrences that came due and were skipped (catch_up, a change
                             * of their schedule since, overlap) */
    M_SCHED_OVERLAPPED,     /* of those: skipped because the one before had not finished */
    M_SCHED_MADE,           /* occurrences made (the next of each, a trigger's, a sweep's) */
    M_DEAD_REDRIVEN,        /* dead letters added again as jobs (POST /dead/redrive) */
    M_COUNTERS
};

enum metric_gauge {
    M_HELD_PARTITIONS,      /* partitions paused until their head is due */
    M_GROUPS_OWNED,
    M_IN_MEMORY,            /* messages held in memory (read ahead, retried) */
    M_LIVE_INSTANCES,
    M_OVERDUE_MS,           /* how late the most overdue delay-topic head is (see stats.h) */
    M_CALL_RETRIES_WAITING, /* callback jobs waiting for their next attempt, all instances */
    M_SCHEDULES,            /* schedules in Redis, at the last look */
    M_LEASE_LEFT_MS,        /* the least time a lease had left when last renewed, ms */
    M_GAUGES
};


void metrics_inc(enum metric_counter c);
void metrics_add(enum metric_counter c, uint64_t n);
void metrics_set(enum metric_gauge g, int64_t v);
int64_t metrics_gauge(enum metric_gauge g);
void metrics_dead_letter(enum dlq_reason r);
void metrics_skipped(enum skip_reason r);
/* One HTTP request: its route, status and how long it took. */
/* The HTTP layer's route labels (names[0..n), n at most METRICS_ROUTES_MAX; the array must
 * outlive the process's metrics), set once before any request is counted. */
#define METRICS_ROUTES_MAX 32
void metrics_http_routes(const char *const *names, size_t n);
void metrics_http(size_t route, int status, double seconds);
/* A delivery's lateness: Kafka's acknowledgement of the delivered message minus its due time,
 * milliseconds. */
void metrics_lateness(int64_t ms);
/* A pull job's first pop: when it was handed out minus its due time, milliseconds. */
void metrics_pop_lateness(int64_t ms);

/* Callbacks, per endpoint ("scheme://host:port"; the first METRICS_ENDPOINTS_MAX seen, the
 * others together under "other"). A call's answer: its status (0 when none came) and seconds. */
#define METRICS_ENDPOINTS_MAX 32
void metrics_call(const char *endpoint, int status, double seconds);
/* Calls in flight to an endpoint now. */
void metrics_call_in_flight(const char *endpoint, int64_t n);
/* A failed call that will be made again later; a callback job dead-lettered. */
void metrics_call_retry(const char *endpoint);
void metrics_call_dead(const char *endpoint);
/* A callback job's first call: when its request went minus its due time, milliseconds. */
void metrics_call_lateness(int64_t ms);
/* A schedule's occurrence that ran: when it was taken for delivery minus its due time, ms. */
void metrics_sched_lateness(int64_t ms);

/* Labelled gauges of what waits in the delay topics, set whole from one view (see stats.h). */
enum metric_family {
    MF_PENDING,             /* delayq_pending_jobs{level=...} */
    MF_PENDING_BY_DUE,      /* delayq_pending_jobs_by_due{due=...} */
    MF_PULL_READY,          /* delayq_pull_ready_jobs{topic=...} */
    MF_PULL_RESERVED,       /* delayq_pull_reserved_jobs{topic=...} */
    MF_PULL_DELAYED,        /* delayq_pull_delayed_jobs{topic=...} */
    MF_PULL_OLDEST,         /* delayq_pull_oldest_ready_age_ms{topic=...} */
    MF_PULL_PAUSED,         /* delayq_pull_paused{topic=...} */
    M_FAMILIES
};
#define METRICS_FAMILY_MAX 32   /* labels of one family: the levels (LEVELS_MAX), or the first
                                 * 32 pull topics */

/* Sets the n gauges of family f: labels[i] (copied; at most 249 characters, a topic name) and values[i].
 * n above METRICS_FAMILY_MAX is cut to it. Rendered once set. */
void metrics_set_family(enum metric_family f, const char *const *labels, const int64_t *values,
                        int n);

/* The Prometheus text of every metric; malloc'd (caller frees), NULL when out of memory. */
char *metrics_render(void);

/* Zeroes everything (tests). */
void metrics_reset(void);

#endif

/* schedules: recurring jobs. A schedule (cron in a time zone, or an interval) lives in Redis
 * (schedstore.h); each occurrence is an ordinary job "<schedule id>@<fire time ms>" added
 * through the intake (intake.h), so it is delivered once however often it is made. When an
 * occurrence comes due, the forwarder plans it (sched.h) and tells schedules_occurred, which
 * moves the schedule on and adds the next occurrence; no instance holds schedules in memory and
 * any instance carries any schedule on. A sweep on every instance repairs what a crash left
 * half done: a pending occurrence overdue by seconds is added (sent) again, a finished one whose
 * schedule did not move on is moved on.
 * HTTP requests are queued to workers and answered through done: no call of an HTTP thread
 * waits on Redis or Kafka. Thread-safe. */
#ifndef DQ_SCHEDULES_H
#define DQ_SCHEDULES_H

#include <stdint.h>

#include "core/config.h"
#include "delivery/forwarder.h"
#include "intake/intake.h"

struct schedules;

/* Starts the workers and the sweep; jobs (not owned) must outlive it. NULL with err set. */
struct schedules *schedules_new(const struct config *cfg, struct intake *jobs, char *err,
                                size_t errlen);
/* Answers the queued requests 503, waits for the running ones and stops the sweep; requests
 * served from here on are answered 503. The adds it made may still be answered (by
 * intake_free): s stays until schedules_free. */
void schedules_stop(struct schedules *s);
/* Stops s if it runs, and frees it: after every add it made was answered. */
void schedules_free(struct schedules *s);

/* A request to /delay-queue/api/schedules[/...]: the method, the path below that prefix ("",
 * "/<id>", "/<id>/pause", "/<id>/resume", "/<id>/trigger", "/<id>/next"), the body, and the
 * query values it may take (NULL when absent). */
struct schedules_request {
    const char *method;
    const char *path;
    const char *body;
    size_t len;
    const char *n, *from_ms, *limit, *after;
};

/* Serves r; done is called exactly once, at once for a bad request, else from a worker or the
 * intake thread. */
void schedules_serve(struct schedules *s, const struct schedules_request *r, answer_fn done,
                     void *opaque);

/* The methods a path below /delay-queue/api/schedules takes, as an Allow header lists them
 * ("GET, PUT, DELETE"); NULL for a path that is none of its routes. */
const char *schedules_allow(const char *path);

/* The forwarder's hook (forwarder_occurrence_fn; ctx is the struct schedules): queues the
 * schedule's move on to plan->next_ms and the add of that occurrence. */
void schedules_occurred(void *ctx, const struct job *job, int64_t fire_ms,
                        const struct recur_timing *t, const struct recur_plan *plan);

/* The forwarder's check (forwarder_sched_check_fn): each occurrence's schedule read in one
 * pipeline; an occurrence of another generation, a paused or a deleted schedule does not run.
 * Called on the holder's thread only. */
void schedules_check(void *ctx, size_t n, const struct job *const *jobs,
                     enum recur_verdict *out);

#endif

/* pull: the poppers' side of pull topics. One thread serves every pop, finish, release, touch
 * and bury in pipelines (pullq.h), parks pops that wait for a job (the HTTP connection stays
 * suspended; no thread waits for one), looks for ready jobs of the topics waited on every
 * PULL_WAIT_POLL_MS, and sweeps every pull topic every PULL_SWEEP_MS: reservations that ran
 * out are ready again, jobs out of attempts or buried go to the dead-letter topic.
 * Thread-safe: every call may come from any thread. */
#ifndef DQ_PULL_H
#define DQ_PULL_H

#include <stddef.h>
#include <stdint.h>

#include "core/answer.h"
#include "core/api.h"
#include "core/config.h"

#define PULL_WAIT_POLL_MS 5     /* a waiting pop hears of a ready job this late at most, from
                                 * any instance, while announcements cannot be heard: well
                                 * within the 50 ms poppers are promised */
#define PULL_LOOK_MS 30000      /* while they are heard, waiting pops look at their topics this
                                 * often all the same (a missed announcement) */
#define PULL_GONE_POLL_MS 100  /* a waiting pop whose client left is dropped this late at most */
#define PULL_SWEEP_MS 250       /* a reservation that ran out is ready again this late at most,
                                 * when the instance that handed it out (or one that swept the
                                 * topic since) is up */
#define PULL_IDLE_SWEEP_MS 10000   /* every topic is swept this often, by one instance at a
                                    * time: reservations of an instance that died come back */
#define PULL_COUNT_MS 1000      /* the counts of /stats and /metrics are this old at most... */
#define PULL_COUNT_WANTED_MS 10000   /* ...while asked for within this */

struct pull;


/* Starts the thread and the dead-letter producer. NULL with err set. */
struct pull *pull_new(const struct config *cfg, char *err, size_t errlen);

/* Answers every request still waiting (parked pops with no jobs, queued ones 503), and stops. */
void pull_free(struct pull *p);

/* Parked pops are answered now (with no jobs), and pops to come do not wait. */
void pull_stop_waiting(struct pull *p);

/* Pops up to req->max ready jobs of req->topic, waiting up to req->wait_ms (at most
 * pull.max_wait_ms) for one. done is called exactly once, from the pull thread (or at once,
 * out of memory). A waiting pop whose asker is gone (wanted, when not NULL, says 0) is
 * answered at once with no jobs and takes none. */
void pull_pop(struct pull *p, const struct api_pop *req, answer_fn done, answer_wanted_fn wanted,
              void *opaque);

/* Finishes, releases, touches or buries a popped job, as its receipt allows. done is called
 * exactly once: 200, 404 (no such pull job), 409 (the receipt is not the job's reservation
 * now), 503 (Redis did not answer). */
void pull_op(struct pull *p, enum api_verb verb, const struct api_pull_op *req, answer_fn done,
             void *opaque);

/* The counts of the /metrics gauges are wanted: kept up to date (PULL_COUNT_MS) for
 * PULL_COUNT_WANTED_MS. */
void pull_counts_wanted(struct pull *p);

#endif

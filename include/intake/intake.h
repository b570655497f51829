/* intake: adds and the requests on jobs. add writes the Redis record, then the delay-topic
 * message, and answers only when Kafka has acknowledged it; get and remove read and change the
 * record. Every request is answered through an answer_fn (core/answer.h), from whatever thread
 * has its answer: no call waits on Redis or Kafka. A request waits at most redis.timeout_ms for one of the http.workers workers, and
 * is answered 503 when it waited longer.
 * Thread-safe: every call may come from any HTTP thread. */
#ifndef DQ_INTAKE_H
#define DQ_INTAKE_H

#include <stddef.h>
#include <stdint.h>

#include "core/answer.h"
#include "core/api.h"
#include "core/config.h"

struct intake;


struct warm;

/* Starts the intake producer, its delivery-report thread and the workers. warm (may be NULL; not owned,
 * must outlive the intake) is told each added job's topic, so that the deliveries' producer knows it
 * before the job is due. Returns NULL with err set. */
struct intake *intake_new(const struct config *cfg, struct warm *warm, char *err, size_t errlen);

/* Answers every request begun (see intake.c), waiting up to timeout_ms for Kafka's
 * answers to the adds in flight, then stops. */
void intake_free(struct intake *in, int timeout_ms);

/* Adds a job from a request body. done is called exactly once: before intake_add returns for a
 * bad request or a Redis failure, or later from the intake thread once Kafka answered. */
void intake_add(struct intake *in, const char *body, size_t len, answer_fn done, void *opaque);

/* Adds job (its id set; parsed or built by the caller, which it takes: *job is zeroed) as
 * intake_add would add a request's, checked as one (api_check_job): the same answers through
 * done. */
void intake_add_job(struct intake *in, struct job *job, answer_fn done, void *opaque);
/* Adds the jobs of an add_batch request, each on its own as intake_add would: done is called
 * exactly once, 200 with every job's answer in order once all are answered, or at once with
 * 400/413 when the batch itself cannot be read. */
void intake_add_batch(struct intake *in, const char *body, size_t len, answer_fn done,
                    void *opaque);

/* Moves a pending job to another due time, as a reschedule request asks: its body (len > 0),
 * else the values of its query string (api_reschedule_query). done is called exactly once: 200
 * when rescheduled (its messages then deliver it at the new time, not at its old one), 400 for
 * a bad request, 404 when there is no such job or it was removed, 409 when it is being
 * delivered, delivered or failed, 503 when Redis or Kafka failed (the job keeps its old due
 * time). A move to a later time is one Redis write; to an earlier one, a new delay-topic
 * message too, and done is called from the intake thread once Kafka answered. */
void intake_reschedule(struct intake *in, const char *body, size_t len,
                     const char *const query[API_RESCHEDULE_ARGS], answer_fn done, void *opaque);

/* Gets or removes the job id (already validated); done is called exactly once, from a worker. */
void intake_get(struct intake *in, const char *id, answer_fn done, void *opaque);
void intake_remove(struct intake *in, const char *id, answer_fn done, void *opaque);

/* A remove as the queues of the compatibility routes do one: of a pull job alone, and of one
 * of topic when topic is not NULL (a job of another topic, or for Kafka, is left alone and
 * answered as no such job; the record is read and checked, and removed only if it is still
 * the one checked); and freeing the id too: once the job is removed (or was already), its
 * record goes, and an add of its id is a new job at once (intake_remove keeps the record
 * job.retention_s for get, and refuses the id as long). */
void intake_forget(struct intake *in, const char *id, const char *topic, answer_fn done,
                   void *opaque);

/* Pops jobs of a pull topic as a pop request body asks (see pull.h); done is called exactly
 * once: at once for a bad request (400), else from the pull thread. A waiting pop whose asker
 * is gone (wanted says 0; NULL: never) is dropped and takes nothing. */
void intake_pop(struct intake *in, const char *body, size_t len, answer_fn done,
                answer_wanted_fn wanted, void *opaque);

/* The same for a pop already parsed (its topics checked). */
void intake_pop_request(struct intake *in, const struct api_pop *pop, answer_fn done,
                        answer_wanted_fn wanted, void *opaque);

/* Finishes, releases, touches or buries a popped job as the request body asks (see pull_op);
 * done is called exactly once. */
void intake_pull_op(struct intake *in, enum api_verb verb, const char *body, size_t len,
                  answer_fn done, void *opaque);

/* Pops waiting for a job are answered now, with none; pops to come do not wait (shutdown). */
void intake_stop_waiting(struct intake *in);

/* From the background probes (health.h), at once: 0 when Redis answers a PING and Kafka a
 * metadata request; -1 with the reason in err. On 0, err holds a warning, or "": a Redis that
 * may evict job records (maxmemory-policy). */
int intake_ready(struct intake *in, char *err, size_t errlen);

/* A request of one pull topic's routes (below /delay-queue/api/pull/: its figures, a page of
 * its jobs, pause, resume; see api_parse_pull_topic), served on a worker. */
struct intake_topic_request {
    const char *path;           /* below /delay-queue/api/pull/ */
    int post;                   /* POST, else GET */
    const char *state, *limit, *after;   /* query values, NULL when absent */
};
void intake_pull_topic(struct intake *in, const struct intake_topic_request *r, answer_fn done,
                       void *opaque);

/* The lease view of GET /delay-queue/api/claims, read in one pipeline on a worker. */
void intake_claims(struct intake *in, answer_fn done, void *opaque);

/* POST /delay-queue/api/claims/release {"group": N}: asks the group's owner to hand it back
 * (it does within a lease time; another instance then takes it). */
void intake_hand_back(struct intake *in, const char *body, size_t len, answer_fn done,
                    void *opaque);

/* The pending view of GET /delay-queue/api/stats: 200, or 503 with "stats: kafka: ..." when
 * Kafka did not answer; done is called at once or by the stats thread (see stats_get). */
void intake_stats(struct intake *in, answer_fn done, void *opaque);

/* Keeps the pending gauges of /metrics up to date, never waiting (see stats_gauges); on
 * failure they keep their last values. */
void intake_stats_gauges(struct intake *in);


#endif

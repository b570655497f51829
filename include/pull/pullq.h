/* pullq: the pull queues in Redis, the one module that knows their keys and scripts. A pull
 * topic T has, under one hash tag (so each script touches one slot, on Redis Cluster too):
 *   <prefix>{pull:T}:ready     zset of job ids, score the time it may be popped (epoch ms)
 *   <prefix>{pull:T}:reserved  zset of job ids, score the end of the reservation (epoch ms)
 *   <prefix>{pull:T}:dead      zset of job ids bound for the dead-letter topic, score when the
 *                              next try to send it is due (epoch ms)
 *   <prefix>{pull:T}:paused    present while the topic is paused (pops hand out nothing)
 *   <prefix>{pull:T}:later     zset of the ids of jobs added and not yet due, score their due
 *                              time (epoch ms), for the figures: a job leaves it as it is made
 *                              ready, or (removed meanwhile, its add failed) by a sweep
 *                              PULLQ_LATER_FORGET_MS after it was due
 *   <prefix>{pull:T}:j:<id>    hash: rec (the job's record, job_record_read's format), due,
 *                              st (r ready, R reserved, f finished, b bound for the dead
 *                              letters, d dead-lettered, c removed), att (pops so far), ttr (ms,
 *                              0: the default), rcpt (the receipt of the reservation), until
 *                              (its end), rttr (the ttr the reservation was given), why (why it
 *                              is bound for the dead letters)
 * and <prefix>pull:registry is a zset of the topics that have (or lately had) jobs, score when
 * a job of it was last made ready (epoch ms), for the sweepers; an empty topic leaves it. A job
 * made ready (by the forwarder, a release, a sweep) is announced on the channel
 * <prefix>pull:ready, so that waiting pops hear of it at once: the message is its topic when
 * one job is ready now, "peek:" and the topic when some jobs are or one will be
 * (PULLQ_PEEK).
 * Every change is one script, so that no crash between two steps loses or doubles a job.
 * A struct pullq is one connection (conn): use it from one thread at a time. */
#ifndef DQ_PULLQ_H
#define DQ_PULLQ_H

#include <stddef.h>
#include <stdint.h>

#include "core/apidata.h"
#include "core/config.h"
#include "core/job.h"

/* A receipt: 13 random characters, the job's attempt, ':' and its topic (so that a finish
 * needs no more than the job id and the receipt). */
#define PULLQ_RECEIPT_MAX (JOB_TAG_LEN + 12 + 1 + 256)
#define PULLQ_POP_MAX 100           /* jobs one pop hands out at most */

struct pullq;

/* NULL when out of memory; connects lazily. */
struct pullq *pullq_new(const struct config *cfg);
void pullq_free(struct pullq *q);

/* One job to make ready: in; out, res or failed with err. */
enum pullq_ready_result {
    PULLQ_MADE_READY,   /* it is ready now */
    PULLQ_WAS_READY,    /* it was made ready before (a replay of its message): nothing changed */
    PULLQ_ID_BUSY,      /* another job of this id is ready, reserved or bound for the dead
                         * letters: try again later */
};
struct pullq_entry {
    const char *topic;
    const char *id;
    const char *rec;            /* the record (job_record_pack's value), rec_len bytes */
    size_t rec_len;
    int64_t due_ms;             /* epoch ms: it may be popped from then on, oldest first */
    int64_t ttr_ms;             /* its own reservation time; 0: the pop's or the default */
    int64_t max_pops;           /* its own limit of receives (job.max_pops); 0: pull.max_attempts */
    enum pullq_ready_result res;
    int failed;
    char err[256];
};

#define PULLQ_LATER_FORGET_MS 60000   /* a job added for later left over this long past due
                                       * (removed, or its add failed) leaves the figures */

/* One job added for later: a pull job whose record was just written, due at due_ms. */
struct pullq_later {
    const char *topic;
    const char *id;
    int64_t due_ms;
};

/* Counts n jobs added for later among their topics' delayed jobs, in one pipeline (each topic
 * put in the registry, so that /stats shows it). Unconfirmed: a failover may lose a count,
 * never a job. 0, or -1 with err. */
int pullq_note_later(struct pullq *q, size_t n, const struct pullq_later *later, char *err,
                     size_t errlen);

/* Makes n jobs ready in one pipeline, each once (a job made ready before is left as it is).
 * Their writes are confirmed with redis.wait_replicas. 0, or -1 when some failed. */
int pullq_ready_many(struct pullq *q, size_t n, struct pullq_entry *entries);

/* A job handed out by a pop: owned strings (pullq_pop_release frees them). */
struct pullq_popped {
    char *id;
    char *rec;                  /* rec_len bytes and a NUL */
    size_t rec_len;
    int64_t attempt;            /* 1 on its first pop */
    char receipt[PULLQ_RECEIPT_MAX + 1];
    int64_t until_ms;           /* epoch ms: reserved until then */
    int64_t due_ms;
};

/* One pop: topic, max (1..PULLQ_POP_MAX) and ttr_ms (0: the job's own, else the default) in;
 * jobs (n of them, oldest due first, caller frees with pullq_pop_release) out, or failed. */
struct pullq_pop {
    const char *topic;
    int max;
    int64_t ttr_ms;
    struct pullq_popped *jobs;
    size_t n;
    int failed;
    int64_t buried;             /* jobs it sent to the dead letters instead (received
                                 * pull.max_attempts times already) */
    int unconfirmed;            /* the jobs were reserved, but too few replicas confirmed it
                                 * (err says so): they are handed out all the same */
    char err[256];
};

/* Reserves the ready jobs of n pops in one pipeline: each pop's step (ready -> reserved,
 * attempt raised, deadline and receipt set) is one script. A job whose own ttr_ms is
 * JOB_TTR_ONCE_MS is finished instead (its receipt "", kept retention_ms). */
int pullq_pop_many(struct pullq *q, size_t n, struct pullq_pop *pops, int64_t now_ms,
                   int64_t default_ttr_ms, int64_t retention_ms);
void pullq_pop_release(struct pullq_pop *pop);

/* What a worker does with a job it holds (or, for PULLQ_CANCEL, what remove does to a job
 * that is ready or reserved). */
enum pullq_verb { PULLQ_FINISH, PULLQ_RELEASE, PULLQ_TOUCH, PULLQ_BURY, PULLQ_CANCEL };

enum pullq_op_result {
    PULLQ_DONE,         /* done; state says the job's state now */
    PULLQ_NO_JOB,       /* no pull job of this id in this topic */
    PULLQ_STALE,        /* the receipt is not the job's reservation now (it ran out and the
                         * job was popped again, or it was finished, released or buried) */
    PULLQ_NOT_LIVE,     /* PULLQ_CANCEL: the job is neither ready nor reserved */
};

/* One operation: verb, topic, id, receipt (not for PULLQ_CANCEL), after_ms (RELEASE: ready
 * again that long after now; TOUCH: reserved that long from now, or -1: for the job's own ttr,
 * else the one its pop gave, else pull.ttr_s; now is Redis's clock), reason (BURY) in; res,
 * state (a letter of the hash's st) and until_ms (TOUCH) out, or failed. */
struct pullq_op {
    enum pullq_verb verb;
    const char *topic;
    const char *id;
    const char *receipt;
    int64_t after_ms;
    const char *reason;
    enum pullq_op_result res;
    int repeated;               /* PULLQ_DONE of a finish already done with this receipt */
    char state;
    int64_t until_ms;
    int failed;
    char err[256];
};

/* Runs n operations in one pipeline; a finished or removed job is kept retention_ms. */
int pullq_run_many(struct pullq *q, size_t n, struct pullq_op *ops, int64_t now_ms,
                   int64_t retention_ms);

/* A job bound for the dead-letter topic, as a sweep hands it out (owned strings). */
struct pullq_dead {
    char *id;
    char *rec;
    size_t rec_len;
    char *why;
    int64_t attempt;
};

/* One topic's sweep: topic in; back (reservations that ran out, ready again), ready and
 * reserved (counts after the sweep) and dead (ndead jobs to send to the dead-letter topic,
 * each handed out again resend_ms later until pullq_dead_sent) out, or failed. */
struct pullq_sweep {
    const char *topic;
    int64_t back;
    int64_t ready, reserved, buried;
    int64_t next_ms;            /* when its next reservation ends or dead letter is due (epoch
                                 * ms, Redis's clock); -1: none */
    int keep;                   /* paused, or jobs were added for later: it stays in the
                                 * registry, empty or not */
    struct pullq_dead *dead;
    size_t ndead;
    int failed;
    char err[256];
};

/* Sweeps n topics in one pipeline: every reservation that ended by now_ms is ready again
 * (attempt kept), or, having been popped max_attempts times (0: no limit), bound for the dead
 * letters. */
int pullq_sweep_many(struct pullq *q, size_t n, struct pullq_sweep *sweeps, int64_t now_ms,
                     int64_t max_attempts, int64_t resend_ms);
void pullq_sweep_release(struct pullq_sweep *sw);

/* The dead letter of job id of topic was acknowledged: its state is d, kept retention_ms. */
int pullq_dead_sent(struct pullq *q, const char *topic, const char *id, int64_t retention_ms,
                    char *err, size_t errlen);

#define PULLQ_PEEK "peek:"   /* an announcement of a topic to look at (a topic has no ':') */

/* The channel a job made ready is announced on (its topic the message): <prefix>pull:ready. */
void pullq_channel(const struct pullq *q, char *out, size_t outlen);

/* Makes q, used for nothing else from then on, hear the announcements. 0, or -1 with err. */
int pullq_listen(struct pullq *q, char *err, size_t errlen);
/* Waits up to timeout_ms for an announcement: 1 with its topic in topic, 0 when none came, -1
 * with err when the connection failed (pullq_listen again). */
int pullq_heard(struct pullq *q, int timeout_ms, char *topic, size_t len, char *err,
                size_t errlen);

#define PULLQ_PAGE_TEXT "256"       /* topics a page of the registry holds, about */
#define PULLQ_REGISTER_MS 60000     /* a topic is put in the registry again this often while jobs
                                     * of it are made ready */
#define PULLQ_FORGET_MS 600000      /* an empty topic not put there for this long leaves it */

/* A page of the pull topics in the registry, from *cursor (0: the first; set to the next page's,
 * 0 after the last): *topics (n strings; caller frees each and the array) and when each was
 * last registered, *scores (epoch ms; caller frees). 0, or -1 with err. The pages of one pass
 * from 0 to 0 hold every topic registered before it began. */
int pullq_topics(struct pullq *q, uint64_t *cursor, char ***topics, int64_t **scores, size_t *n,
                 char *err, size_t errlen);

/* 1 when this instance takes the turn of sweeping every topic for the next ms (no other has
 * it); 0 when another has it or Redis did not answer. */
int pullq_take_turn(struct pullq *q, int64_t ms);

/* One pull topic's figures. */
struct pullq_count {
    char topic[TOPIC_NAME_MAX + 1];
    struct pull_figures f;
};

/* Every registered pull topic's figures, page by page, into *out (n of them; caller frees).
 * 0, or -1 with err (*out NULL). */
int pullq_counts(struct pullq *q, struct pullq_count **out, size_t *n, char *err, size_t errlen);

/* The figures of n topics, each counted in one step (Redis's clock), in one pipeline, into out
 * (ready -1 where Redis did not answer). */
void pullq_figures(struct pullq *q, size_t n, const char *const *topics, struct pull_figures *out);

/* Pauses (paused 1) or resumes (0) topic: while paused, pops hand out none of its jobs (they
 * stay ready, reserved ones come back after their ttr as ever); a resume wakes the pops that
 * wait on it. The topic is put in the registry, so that /stats shows it. *changed: 1 when it
 * was not so already. 0, or -1 with err. */
int pullq_pause(struct pullq *q, const char *topic, int paused, int *changed, char *err,
                size_t errlen);

#define PULLQ_LIST_MAX 100          /* jobs one page of a topic's list holds at most */
#define PULLQ_PREVIEW 256           /* bytes of each body a list shows */


/* A page of one topic's jobs: topic, state ("ready": may be popped now, "delayed": ready later,
 * "reserved"), limit (1..PULLQ_LIST_MAX), and the last job of the page before (after_ms and
 * after_id; after_id NULL for the first page) in; jobs (n, in the order pops take them, or
 * reservations end) out, or failed. */
struct pullq_list {
    const char *topic;
    const char *state;
    int limit;
    int64_t after_ms;
    const char *after_id;
    struct pull_listed *jobs;   /* owned strings: pullq_list_release frees them */
    size_t n;
    int failed;
    char err[256];
};
int pullq_list(struct pullq *q, struct pullq_list *l);
void pullq_list_release(struct pullq_list *l);

/* Takes the n topics (found empty: nothing ready, reserved or buried) out of the registry,
 * each unless put there again since before_ms (epoch ms). 0, or -1 with err. */
int pullq_forget(struct pullq *q, size_t n, const char *const *topics, int64_t before_ms,
                 char *err, size_t errlen);

/* How many jobs of each of n topics may be popped now (Redis's clock), in one pipeline, into
 * counts, and when none may, in how many ms the first one may, into waits (0 when some may
 * now; -1 where none is ready or the topic is paused, or Redis did not answer, with counts -1
 * too). */
void pullq_ready_now(struct pullq *q, size_t n, const char *const *topics, int64_t *counts,
                     int64_t *waits);

/* A job's pull state, for get: in topic, id; out found, state (a letter of st), attempt,
 * until_ms (-1 when not reserved), or failed. */
struct pullq_look {
    const char *topic;
    const char *id;
    int found;
    char state;
    int64_t attempt;
    int64_t until_ms;
    int failed;
    char err[256];
};
int pullq_look_many(struct pullq *q, size_t n, struct pullq_look *looks);

/* The word for a state letter: "ready", "reserved", "finished", "dead-letter", "dead", "removed". */
const char *pullq_state_name(char state);

/* The topic a receipt names (receipt_topic_len bytes at *topic). 0, or -1 when it names none. */
int pullq_receipt_topic(const char *receipt, const char **topic, size_t *len);

#endif

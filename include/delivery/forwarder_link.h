/* forwarder_link: the inside of the forwarder, shared by its files and nothing else:
 * forwarder.c (what a due message becomes, the flush), records.c (claims and marks of job
 * records in pipelines, claim tokens), target.c (the targets' one interface: which target takes
 * a due message, and what is done with its report), and the targets: send.c (Kafka; also moves
 * down the levels and dead letters, and their reports), ready.c (pull topics: jobs made ready
 * in Redis) and calls.c (callbacks, made by callout.c). */
#ifndef DQ_FORWARDER_LINK_H
#define DQ_FORWARDER_LINK_H

#include <msgpack.h>

#include "callback/callout.h"
#include "redis/leases.h"
#include "lib/clock.h"
#include "core/config.h"
#include "core/envelope.h"
#include "delivery/forwarder.h"
#include "delivery/groups.h"
#include "core/held.h"
#include "core/job.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "kafka/producer.h"
#include "pull/pullq.h"
#include "core/recur.h"
#include "core/timing.h"
#include "core/decide.h"
#include "redis/store.h"
#include "kafka/warm.h"

#define BACKOFF_MIN_MS 100       /* first retry after a Redis or Kafka failure */
#define BACKOFF_MAX_MS 5000      /* retries never wait longer than this */
#define WARN_INTERVAL_MS 5000    /* a repeating failure is logged once per interval, with a count */
#define WARM_TIMEOUT_MS 5000     /* start-up metadata fetch */
/* A job rescheduled to an earlier time whose new message may still be on its way to Kafka: its
 * old message asks again this often (the wait ends with Kafka's answer, within
 * kafka.produce_timeout_ms). */
#define MOVED_WAIT_MS 20
#define DELIVERY_TIMEOUT_MS 30000
/* A due job leaves within a millisecond, yet a burst still travels in batches. */
#define FORWARD_LINGER_MS 1

/* Room for n elements of elem bytes at arr, whose capacity is *cap: arr or its new place (*cap
 * updated), or NULL when out of memory (arr stays as it was). */
enum stage {
    ST_NEW = 0,        /* to be acted on */
    ST_SEND_JOB,       /* produced a job's body; the record is marked delivered after the report */
    ST_SEND_DEAD_JOB,  /* produced a job's body to the dead-letter topic; marked failed after */
    ST_SEND_DIRECT,    /* produced a direct message to its business topic */
    ST_SEND_MOVE,      /* produced a move down a level */
    ST_SEND_DEAD,      /* produced a message that cannot be handled to the dead-letter topic */
    ST_MARK,           /* sent; marking the record (m->mark) is pending or retried */
    ST_READY,          /* a pull job, to be made ready in Redis (fw->ready) */
    ST_CALL,           /* a callback job, its call made (m->call) */
};

struct vec {
    struct held **v;
    size_t n, cap;
};

/* Each vector holds messages in flight only, and forwarder_submit made room for all of them. */
static inline void vec_push(struct vec *v, struct held *m)
{
    v->v[v->n++] = m;
}

/* A claim token, "<instance>:<message>", has as many characters as a stamp (13), so that a mark
 * puts the stamp where the token was and rewrites the record's head in place (store.c).
 * Each part is 36 bits in 6 characters: the instance's a hash of its lease token (so another
 * instance can tell whether it still holds a group), the message's 24 bits of a hash of its
 * topic, partition and offset and 12 of its group. Two messages of one job (a copy left by a
 * crash in a move) would have to collide in those 24 bits and their group to be taken for one. */
#define TOKEN_PART 6
#define CLAIM_TOKEN_LEN (2 * TOKEN_PART + 1)

struct rec_args;
struct store_mark;

/* Per-batch arrays for the Redis pipelines, kept and grown across flushes. */
struct scratch {
    struct rec_args *a;
    const char **ids;           /* n */
    const char **args;          /* 4 * n */
    struct store_mark *marks;   /* n */
    char *failed;               /* n: the marks that failed */
    size_t cap;
};

/* A job's message built while the pipeline of its claim still runs, produced once it is done
 * (fw_send_held): its headers without dq-sent-ms, and one allocation holding its topic, key
 * and value. */
struct held_send {
    struct held *m;
    rd_kafka_headers_t *hdrs;
    char *topic;                /* owned: the allocation key and value point into */
    const char *key;
    size_t key_len;
    const char *value;
    size_t value_len;
};

/* An occurrence claimed and planned to run, its job read from its record, waiting for its
 * schedule's check. */
struct occ {
    struct held *m;
    struct job job;
};

struct forwarder {
    const struct config *cfg;
    struct groups *groups;   /* consulted right before each send, and on another's claim */
    struct store *st;
    rd_kafka_t *rk;
    struct warm *warm;       /* business topics' metadata, fetched ahead for rk */
    char instance[TOKEN_PART + 2];   /* random, per process: "<6 characters>:" starts its tokens */
    struct log_gate redis_gate, kafka_gate;
    struct scratch sc;
    struct vec batch;        /* submitted since the last flush */
    struct vec claims;       /* scratch: jobs whose records are claimed in this flush */
    struct vec marks;        /* delivered jobs whose records are to be marked */
    struct pullq *pq;        /* the pull queues, for due pull jobs */
    struct ready_item *ready;   /* due pull jobs of this flush, nready of them */
    size_t nready, ready_cap;
    struct pullq_entry *entries;   /* scratch for ready, ready_cap of them */
    int64_t claim_now;       /* epoch ms: the flush's, while its claims are answered */
    int hold_sends;          /* 1 while claims are answered: deliveries wait in sends */
    struct held_send *sends; /* nsends of them, room for sends_cap */
    size_t nsends, sends_cap;
    size_t claim_failures;   /* of the claims being answered: not answered, with claim_err */
    char claim_err[256];
    struct callout *co;      /* callback jobs' calls (callout.c) */
    forwarder_occurrence_fn *occurred;   /* told of each schedule occurrence that comes due */
    forwarder_sched_check_fn *check;     /* asked whether they still run */
    void *occurred_ctx;
    struct occ *occs;                    /* occurrences claimed, to be checked (fw_run_occurrences) */
    size_t nocc, occ_cap;
    size_t in_flight;
    struct fw_outcome *out;  /* messages handed back, out[out_next .. nout) not yet taken */
    size_t nout, out_next, out_cap;
};

/* Logs a failure that is retried, at most once per WARN_INTERVAL_MS for each gate. */
#define warn_retried(gate, ...)                                                              \
    do {                                                                                     \
        unsigned long held_;                                                                 \
        if (log_gate_open((gate), clock_mono_ms(), WARN_INTERVAL_MS, &held_)) {              \
            log_warn(__VA_ARGS__);                                                           \
            if (held_)                                                                       \
                log_warn("%lu more such failures in the last %d s", held_, WARN_INTERVAL_MS / 1000); \
        }                                                                                    \
    } while (0)

/* A due pull job on its way into its topic's ready set, with the record poppers will read. */
struct ready_item {
    struct held *m;
    char id[JOB_ID_MAX + 1];
    char topic[TOPIC_NAME_MAX + 1];
    msgpack_sbuffer rec;
    int64_t due_ms;
    int64_t ttr_ms;
    int64_t max_pops;
};

/* The text arguments of one record's claim or mark. */
struct rec_args {
    char id[JOB_ID_MAX + 1];
    char due[24];
    char tag[ENVELOPE_TAG_MAX + 1];
    char token[CLAIM_TOKEN_LEN + 1];
    char *error;                /* a failed job's reason, owned; NULL for the others */
    msgpack_sbuffer tail;       /* a callback job's record, its tail written by the mark */
};


/* forwarder.c */
/* Hands m back to be submitted again after a backoff that grows with its attempts. */
void fw_retry(struct forwarder *fw, struct held *m);
/* Hands m back finished: its offset may be committed. */
void fw_done(struct forwarder *fw, struct held *m);
/* Not due yet: back to the holder until at_ms, without a failure counted. */
void fw_hold_back(struct forwarder *fw, struct held *m, int64_t at_ms);
/* The delay topic m was read from. */
const char *fw_topic_of(const struct forwarder *fw, const struct held *m);
/* Checked at the last moment before a send or a pull job made ready: a lease that ran out
 * while this instance was stopped must not let it pass on anything of a group another
 * instance took over. 1 when m's group is no longer surely ours: m is dropped (done). */
int fw_dropped_if_not_ours(struct forwarder *fw, struct held *m);
/* What a claimed record says to do with its message. */
void fw_act_on_claim(struct forwarder *fw, struct held *m, const struct store_claim *c,
                         int64_t now);
/* The job of m was rescheduled to the later due_ms: its message goes on to that time, down the
 * levels or, with less than the smallest level left, waiting here; then it claims the record
 * with that due time. */
void fw_move_on(struct forwarder *fw, struct held *m, int64_t due_ms, int64_t now);

/* target.c */
/* What a target reports of a message it took. */
enum target_says {
    TARGET_DELIVERED,   /* delivered: a job's record is marked delivered, a direct message done */
    TARGET_ONWARD,      /* its callback was answered 2xx: on to its pull or Kafka topic */
    TARGET_RETRY,       /* failed: taken again after a backoff that grows with its attempts */
    TARGET_LATER,       /* deferred, or its next attempt planned: its message goes on to at_ms */
    TARGET_DEAD,        /* to the dead letters, why in words (a direct message's reason: dlq) */
    TARGET_GONE,        /* nothing is left to do (its record changed meanwhile): done */
};

struct target_report {
    enum target_says says;
    int64_t at_ms;              /* TARGET_LATER */
    enum dlq_reason dlq;        /* TARGET_DEAD of a direct message */
    const char *why;            /* TARGET_DEAD */
};

/* A target: takes a due message m, with job, its claimed record read (the target may take
 * what it owns), or NULL for a direct message; reports later or at once through
 * fw_target_report, or hands m back itself (fw_retry when it cannot take it now). */
struct target {
    const char *name;
    void (*take)(struct forwarder *fw, struct held *m, struct job *job);
};

extern const struct target fw_kafka_target;      /* send.c */
extern const struct target fw_pull_target;       /* ready.c */
extern const struct target fw_callback_target;   /* calls.c */

/* A due message (job: its claimed record read; NULL: a direct message) to the one target
 * decide_dest names. */
void fw_deliver(struct forwarder *fw, struct held *m, struct job *job);
/* Acts on what a target reports of m (job: its record read, as the target took it, or NULL
 * for a direct message). */
void fw_target_report(struct forwarder *fw, struct held *m, struct job *job,
                      const struct target_report *r);

/* calls.c */
/* Acts on what callout.c reports of a callback's message. */
void fw_act_on_call(struct forwarder *fw, const struct call_outcome *o);

/* records.c */
/* The claim token of m: this instance's part (from its lease token), then its message's: 24
 * bits of a hash of where the message is, and 12 bits of its group. */
void fw_claim_token(const struct forwarder *fw, const struct held *m, char out[CLAIM_TOKEN_LEN + 1]);
/* May m's claim take over the other instance's claim on its record? Only when that instance no
 * longer holds the group of the message it claimed with: while it does, it delivers the job (or,
 * fenced, leaves its lease, and then the record). 1 yes, 0 no, -1 Redis did not say. */
int fw_claim_owner_gone(struct forwarder *fw, const char *claim, size_t len);
/* Claims the records of fw->claims in one pipeline, each acted on as its answer comes. */
void fw_run_claims(struct forwarder *fw, int64_t now);
/* Marks the records of fw->marks in one pipeline: each message done, or retried when Redis
 * did not mark it. */
void fw_run_marks(struct forwarder *fw);
/* Frees the pipelines' scratch arrays. */
void fw_scratch_release(struct scratch *sc);
/* Copies the message's job id into out; the envelope checked it is present. */
void fw_id_of(const struct held *m, char out[JOB_ID_MAX + 1]);
/* Copies the message's dq-tag into out ("" when it has none); the envelope checked its length. */
void fw_tag_of(const struct held *m, char out[ENVELOPE_TAG_MAX + 1]);
/* Writes 36 bits of v as TOKEN_PART characters that are never '|' (the head's separator). */
void fw_token_part(uint64_t v, char *out);
/* FNV-1a, 64 bits, of text. */
uint64_t fw_fnv1a(const char *text);

/* send.c */
/* Produces a direct message to its business topic (retried on failure). */
void fw_deliver_direct(struct forwarder *fw, struct held *m, const char *topic);
/* Produces a claimed job to its business topic; its record is marked after the report. While
 * claims are answered (fw_hold_sends), the message waits, built, for fw_send_held. */
void fw_deliver_job(struct forwarder *fw, struct held *m, const struct job *job);
/* Until fw_send_held, the deliveries of up to n claims answered wait, built, so that the
 * answers are read and decoded while Redis runs the next claims, and the messages are produced
 * together right after the last one, which no produce (nor the broker's work on it) slows
 * down. 0, or -1 when out of memory (nothing waits then). */
int fw_hold_sends(struct forwarder *fw, size_t n);
/* Produces the deliveries that wait, each stamped dq-sent-ms as it is produced. */
void fw_send_held(struct forwarder *fw);
/* 1 when the business topic has refused m for job.refused_retry_s: it goes to the dead letters. */
int fw_refused_for_good(const struct forwarder *fw, const struct held *m, int64_t now);
/* Why m goes to the dead letters after refused_for_good. */
void fw_refusal_reason(const struct held *m, char *out, size_t outlen);
/* Not due yet: on to the largest level not above the remaining time. */
void fw_move_down(struct forwarder *fw, struct held *m, int64_t now);
/* Produces with a copy of every buffer; takes hdrs. Returns 0 (sent), -1 (failed: the caller
 * retries) or 1 (m's group is no longer surely ours: m was dropped, nothing was sent). */
int fw_produce(struct forwarder *fw, struct held *m, const char *topic, const void *key,
               size_t key_len, const void *value, size_t value_len, rd_kafka_headers_t *hdrs,
               int64_t timestamp_ms);
/* Copies m's headers, leaving out control headers (all, or only the named one). */
rd_kafka_headers_t *fw_copy_headers(const struct held *m, int drop_control, const char *drop);
/* The message itself goes to the dead-letter topic, with why and where it was read. */
void fw_dead_letter(struct forwarder *fw, struct held *m, enum dlq_reason why, const char *reason);
/* The job's own body and headers go to the dead-letter topic, so nothing accepted is lost. */
void fw_dead_letter_job(struct forwarder *fw, struct held *m, const struct job *job,
                        const char *reason);
/* The producer's delivery report of one message: marked, done or retried. */
/* A produce of m failed with e, right away or in its delivery report. A refused letter is sent
 * again without its body; a refused delivery or move is remembered, for refused_for_good. */
void fw_note_failure(struct held *m, rd_kafka_resp_err_t e);
void fw_report(rd_kafka_t *rk, const rd_kafka_message_t *rkm, void *opaque);

/* ready.c */
/* Queues job (a due pull job, m its message) to be made ready by run_ready. */
void fw_ready_job(struct forwarder *fw, struct held *m, const struct job *job);
/* A direct message to a pull topic becomes a job whose id names its message, so that a copy
 * read again after a crash finds it made ready already. */
void fw_ready_direct(struct forwarder *fw, struct held *m);
/* Makes the due pull jobs of this flush ready, in one pipeline; a job's record is then marked
 * delivered (its message committed after), a direct message is done. */
void fw_run_ready(struct forwarder *fw);

#endif

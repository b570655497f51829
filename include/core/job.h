/* job: the job model, its validation, ids, and the msgpack record kept in Redis.
 * Pure logic: msgpack is a codec, no network library is involved. */
#ifndef DQ_JOB_H
#define DQ_JOB_H

#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#define JOB_ID_MAX 128          /* generous for UUIDs and "order:<n>" style ids, small in Redis */
#define JOB_ID_GEN_LEN 36       /* a generated id is a UUID v4 in text */
#define JOB_HEADERS_MAX 64      /* headers on one delivered message */
#define JOB_HEADER_NAME_MAX 256
#define JOB_TAG_LEN 13          /* a job's tag: as long as a stamp and a claim token */
#define JOB_ERROR_MAX 511       /* why a failed job failed, as kept in its record */

#define JOB_TTR_MAX_MS (86400LL * 1000)   /* a pull job is reserved a day at most */
#define JOB_POPS_NO_LIMIT (-1)   /* a pull job's max_pops: handed out until finished */
#define JOB_POPS_MAX 1000000     /* a pull job's own limit of receives, at most */
#define JOB_TTR_ONCE_MS 1   /* a pull job's ttr_ms that means: finished as its first pop hands
                             * it out, never handed out again (changsongl's ttr 0) */

/* Where a due job goes: its topic in Kafka, or ready in Redis for poppers (pull). AUTO: as the
 * config's pull.topics say of its topic. */
enum job_deliver { JOB_DELIVER_AUTO = 0, JOB_DELIVER_KAFKA, JOB_DELIVER_PULL };

/* Reads "pull" or "kafka" (len bytes) into *out. 0, or -1 when it is neither. */
int job_deliver_of(const char *s, size_t len, enum job_deliver *out);

/* pending -> delivering -> delivered; pending -> cancelled (remove);
 * delivering -> failed (the business topic refused it; the job went to the dead-letter topic). */
enum job_state { JOB_PENDING = 0, JOB_DELIVERING, JOB_DELIVERED, JOB_CANCELLED, JOB_FAILED };

struct job_header {
    char *name;     /* owned, NUL-terminated */
    char *value;    /* owned, NUL-terminated text */
};

/* A job's HTTP callback (callbacks.h makes the calls): what to call, and how its calls went so
 * far (kept in the record between attempts). */
struct job_callback {
    char *url;                   /* owned; NULL when endpoint names it */
    char *endpoint;              /* owned: a callbacks.endpoints name, or NULL */
    int put;                     /* 1: PUT, else POST */
    struct job_header *headers;  /* owned array of nheaders, sent with each call */
    size_t nheaders;
    int64_t timeout_ms;          /* 0: the endpoint's */
    int64_t max_attempts;        /* 0 each: callbacks.retry's (a job may only lower them) */
    int64_t min_backoff_ms, max_backoff_ms, max_retry_duration_ms;
    int attempts;                /* calls made so far */
    int last_status;             /* HTTP status of the last call; 0: none came (or no call) */
    char *last_error;            /* owned: why the last call failed, or NULL */
    int64_t first_ms;            /* epoch ms of the first call; 0 before it */
    int sent;                    /* 1: delivered to its topic already (a job with both) */
};

/* The schedule an occurrence job belongs to (schedules.h): kept in its record so that the
 * forwarder, when the occurrence is due, plans the next one without reading the schedule. */
struct job_sched {
    char *id;                    /* owned: the schedule's id */
    int64_t gen;                 /* the schedule's generation when the occurrence was made */
    int64_t runs;                /* occurrences of the schedule run before this one */
    int64_t prev_ms;             /* the fire time of the occurrence before it; 0: none known */
    char *timing;                /* owned: the schedule's timing as JSON (api_parse_timing) */
};

#define JOB_OVERRIDE_FAILED 2

struct job {
    char id[JOB_ID_MAX + 1];
    char *topic;                 /* business topic, owned */
    char *key;                   /* Kafka key on delivery, owned; NULL means the id */
    char *body;                  /* owned, body_len bytes plus a NUL */
    size_t body_len;
    struct job_header *headers;  /* owned array of nheaders */
    size_t nheaders;
    int64_t delay_ms;            /* as asked, milliseconds */
    int64_t due_ms;              /* epoch ms */
    int64_t created_ms;          /* epoch ms */
    enum job_deliver deliver;    /* as asked at add */
    int64_t ttr_ms;              /* a pull job's reservation time as asked at add; 0: default */
    int64_t max_pops;            /* a pull job's receives before it is buried: 0 pull.max_attempts,
                                  * JOB_POPS_NO_LIMIT none */
    struct job_callback *callback;   /* owned; NULL: none */
    struct job_sched *sched;     /* owned; NULL: not an occurrence of a schedule */
    int override;                /* 1: the add replaces a pending or removed job of its id;
                                  * JOB_OVERRIDE_FAILED: a failed one (asked at add; not kept in
                                  * the record) */
    char tag[JOB_TAG_LEN + 1];   /* set at add (job_new_tag); "" for a job read back */
};

/* 1 when cb's last call was answered 2xx: the call is made, only what follows it is left. */
int job_called_back(const struct job_callback *cb);

/* Frees what the callback owns and the callback. Safe on NULL. */
void job_callback_free(struct job_callback *cb);

/* Frees what the schedule reference owns and it. Safe on NULL. */
void job_sched_free(struct job_sched *s);

/* Frees what the job owns and zeroes it. Safe on a zeroed job. */
void job_release(struct job *job);

/* Ids are 1..JOB_ID_MAX visible ASCII characters (no space or control). Returns 0, or -1 with
 * the reason in err. */
int job_id_valid(const char *id, size_t len, char *err, size_t errlen);

/* Writes a random UUID v4 (JOB_ID_GEN_LEN characters and a NUL) into out. */
void job_new_id(char out[JOB_ID_GEN_LEN + 1]);


/* Writes a random tag (JOB_TAG_LEN characters of [A-Za-z0-9_-] and a NUL) into out: the secret
 * that a job's record and its own delay-topic messages share (dq-tag), so that a message that
 * merely names the job's id cannot claim it. */
void job_new_tag(char out[JOB_TAG_LEN + 1]);

/* The Redis value of a job (one string per job, to keep Redis small):
 *   <state><due_ms>|<stamp_ms>|<claim>|<tail>[<error>]
 * state is one letter (job_state_letter); due_ms the due time, epoch ms; stamp_ms when the job
 * reached delivered, cancelled or failed (empty before; in a pending record rescheduled to an
 * earlier time, until when its new message may be on its way). claim is 13 characters while the job
 * is pending or delivering: a pending record holds its tag there (the secret its own delay
 * messages carry as dq-tag, so that a message naming only its id cannot claim it), a
 * delivering one the token of the message delivering it; a mark or remove writes its 13-digit
 * stamp where they were, so the head keeps its length and store.c writes heads in place.
 * tail is the msgpack array [topic, body, delay_ms, key or nil, {headers}, deliver, ttr_ms,
 * {callback} or nil, {schedule} or nil, max_pops], written at add (and again between a callback's attempts),
 * with what follows delay_ms left off when it says nothing (no key, no headers, deliver AUTO, no
 * callback, no schedule) and any later elements ignored. A callback-only job's topic is "".
 * A failed record may carry a msgpack string after the tail: why it failed. The id is the
 * key's, created_ms is due_ms - delay_ms. Records written before tags hold JOB_CLAIM_ROOM in
 * a pending record's claim field, and no tag is asked of their messages; records written
 * before that room have an empty claim field and the tail [topic, body, key or nil, {headers},
 * delay_ms]; both are still read, and the latter rewritten whole by the first script that
 * changes its head. store.c's Lua scripts edit the head with the pattern JOB_RECORD_HEAD and
 * never decode the tail, except add's duplicate check. */
#define JOB_RECORD_HEAD "^(%l)(%d+)|(%d*)|([^|]*)|()"
#define JOB_CLAIM_ROOM "-------------"   /* 13 characters: a pending record's claim, untagged */

/* What the head of a record says besides the job. */
struct job_record {
    enum job_state state;
    int64_t stamp_ms;                /* -1 when empty */
    char tag[JOB_TAG_LEN + 1];       /* while pending; "" when it has none */
    char error[JOB_ERROR_MAX + 1];   /* why it failed; "" when it did not, or does not say */
};

/* The length of the head of record value v (the part before the tail, which every change of
 * state rewrites), or 0 when v has none. */
size_t job_record_head_len(const char *v, size_t len);

/* Appends the value of a new, pending record of job (with its tag) to buf. Returns 0 or -1. */
int job_record_pack(const struct job *job, msgpack_sbuffer *buf);

/* The same for a job rescheduled to an earlier time whose message for that time is on its way
 * to Kafka: until until_ms (epoch ms, in the stamp field) only a message of its due time claims
 * it; its older messages wait (store.c's claim). */
int job_record_pack_moved(const struct job *job, int64_t until_ms, msgpack_sbuffer *buf);

/* Decodes the record value v of job id into out (which the caller releases with job_release,
 * also on error) and rec. Returns 0, or -1 with what is wrong in err. */
int job_record_read(const char *id, const char *v, size_t len, struct job *out,
                    struct job_record *rec, char *err, size_t errlen);

/* The one-letter code of a state in a record: p pending, s delivering (sending), d delivered,
 * c cancelled, f failed. */
char job_state_letter(enum job_state state);
/* Returns 0 and the state of a letter, or -1 when it is none. */
int job_state_of_letter(char c, enum job_state *out);

const char *job_state_name(enum job_state state);

#endif

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

/* pending -> delivering -> delivered; pending -> cancelled (remove);
 * delivering -> failed (the business topic refused it; the job went to the dead-letter topic). */
enum job_state { JOB_PENDING = 0, JOB_DELIVERING, JOB_DELIVERED, JOB_CANCELLED, JOB_FAILED };

struct job_header {
    char *name;     /* owned, NUL-terminated */
    char *value;    /* owned, NUL-terminated text */
};

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
};

/* Frees what the job owns and zeroes it. Safe on a zeroed job. */
void job_release(struct job *job);

/* Ids are 1..JOB_ID_MAX visible ASCII characters (no space or control). Returns 0, or -1 with
 * the reason in err. */
int job_id_valid(const char *id, size_t len, char *err, size_t errlen);

/* Writes a random UUID v4 (JOB_ID_GEN_LEN characters and a NUL) into out. */
void job_new_id(char out[JOB_ID_GEN_LEN + 1]);

/* Appends the msgpack record of job (a map with string keys) to buf. Returns 0 or -1. */
int job_pack(const struct job *job, msgpack_sbuffer *buf);

/* Decodes a record made by job_pack into out (which the caller releases with job_release, also
 * on error). Returns 0, or -1 with the field at fault in err. Unknown fields are ignored. */
int job_unpack(const char *data, size_t len, struct job *out, char *err, size_t errlen);

const char *job_state_name(enum job_state state);
/* Returns 0 and the state for its name, or -1 when it is none. */
int job_state_parse(const char *name, size_t len, enum job_state *out);

#endif

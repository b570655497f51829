/* store_link: the inside of store, shared by its files and nothing else: store.c (the struct, the
 * calls of one command or script per record: reads, removes, replaces; retries planned),
 * store_lua.c (the record scripts' text), store_chunk.c (a looped script over many records, in
 * calls of CHUNK_MAX), store_add.c (adds, and the undo of failed ones) and store_claim.c (the
 * delivery's claims and marks). Callers use include/redis/store.h. */
#ifndef DQ_STORE_LINK_H
#define DQ_STORE_LINK_H

#include <stddef.h>

#include "redis/conn.h"
#include "redis/store.h"

#define KEY_MAX (CONFIG_STR_MAX + 4 + JOB_ID_MAX + 1)   /* prefix + "job:" + id */

/* The record scripts, loaded once per connection by conn and called by their SHA-1, so that
 * their text is not sent again for every job. */
enum script { S_ADD, S_DROP, S_REMOVE, S_CLAIM, S_MARK, S_REPLACE, S_FAIL, S_COUNT };

/* The text of each script, by enum script (store_lua.c). */
extern const char *const store_script_text[S_COUNT];

#define ADD_ARGS 3   /* the add script's arguments per record: record, ttl, override */

struct undo;   /* a failed add's record to delete later (store_add.c) */

struct store {
    const struct config *cfg;
    struct conn *db;
    struct undo *undo;          /* UNDO_MAX of them (store_add.c), nundo in use */
    size_t nundo;
};

/* The record key of job id into out. */
void job_key(const struct store *st, const char *id, char *out, size_t outlen);

/* One script call on the record of job id: its reply (caller frees), or NULL with err set when
 * Redis did not answer or answered an error. argc is at most 4. */
struct conn_reply *eval1(struct store *st, enum script script, const char *id, int argc,
                         const char *const *argv, enum conn_confirm confirm, char *err,
                         size_t errlen);

/* A state letter of a script's reply: 0 with *state, or -1. */
int parse_state(const struct conn_reply *r, enum job_state *state);

/* A {result, state letter} reply of add or remove: 0 with *res (and *state when the result
 * carries one: results below 2 for add and 2 for remove, see the scripts), or -1. */
int read_result(const struct conn_reply *r, int *res, enum job_state *state);

/* why as a message that says it came from Redis, into out. */
void redis_says(char *out, size_t outlen, const char *why);

#define CHUNK_MAX 128   /* records per call of a looped script (add, claim, mark) */

/* A looped script over n records: its nshared arguments, then per arguments for each record
 * (record i's at args[i * per]). a, l and keys are the scratch of one call. The first member
 * of each batch's context, which build_chunk reads.
 * Records share a call CHUNK_MAX at a time, in their order; in a Redis Cluster only records of
 * one hash slot may, so there the plan sorts them by slot (order) and cuts the calls where the
 * slot changes (start). */
struct chunked {
    const struct store *st;
    enum script script;
    size_t n;
    const char *const *ids;
    int nshared;
    const char *const *shared;
    int per;
    const char *const *args;
    const size_t *argslen;      /* NULL: text arguments, strlen */
    int plain;                  /* add: each record's call is a plain SET NX (build_plain_add) */
    size_t *order;              /* cluster: the records in call order; NULL: as given */
    size_t *start;              /* cluster: call j takes order[start[j] .. start[j + 1]) */
    size_t nchunks;
    const char **a;
    size_t *l;
    char (*keys)[KEY_MAX];
};

/* The first position and the number of records of call j. */
size_t chunk_first(const struct chunked *c, size_t j);
size_t chunk_size(const struct chunked *c, size_t j);

/* The record at position pos of the call order. */
size_t record_at(const struct chunked *c, size_t pos);

/* Runs c's script over its records, CHUNK_MAX to a call, all calls in one pipeline; fn gets
 * each call's reply (ctx starts with c), and out of memory a failure for every call. Returns
 * conn_pipeline's answer (0 when every call got a confirmed answer, else -1 with err the first
 * failure's text), or -1 with err set out of memory. */
int run_chunked(struct chunked *c, conn_reply_fn *fn, void *ctx, enum conn_confirm confirm,
                char *err, size_t errlen);

/* Record i of call j's reply r (k records): the call's error reply when the call failed, NULL
 * when there is no reply or it is not one per record. */
const struct conn_reply *item_of(const struct conn_reply *r, size_t k, size_t i);

/* Why record i of a reply (item, from item_of) is no answer: its error reply, else err (the
 * call's failure) or what when there is no item; NULL when it is an answer. */
const char *item_failure(const struct conn_reply *item, const char *err, const char *what);

#endif

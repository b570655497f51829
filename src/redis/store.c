/* store: job records in Redis: the Lua scripts that add, claim, mark, remove and drop records
 * atomically, run through conn in pipelines of 128 records per call (adds: a SET NX per record,
 * the script for taken ids). The contract is in include/redis/store.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/conn.h"
#include "redis/store.h"

#define KEY_MAX (CONFIG_STR_MAX + 4 + JOB_ID_MAX + 1)   /* prefix + "job:" + id */

/* The record scripts, loaded once per connection by conn and called by their SHA-1, so that
 * their text is not sent again for every job. */
enum script { S_ADD, S_DROP, S_REMOVE, S_CLAIM, S_MARK, S_REPLACE, S_COUNT };

/* Records of failed adds that Redis may have written while it did not answer: deleted once it
 * answers again (before the next batch of adds). A bound on the memory an outage may take;
 * past it, a record left over expires with its retention (it has no delay message and is
 * never delivered). */
#define UNDO_MAX 4096

struct undo {
    char id[JOB_ID_MAX + 1];
    char tag[JOB_TAG_LEN + 1];
};

#define RETRIES_KEPT_MS 60000   /* a planned retry stays listed this long past its due time */

struct store {
    const struct config *cfg;
    struct conn *db;
    struct undo *undo;          /* UNDO_MAX of them, nundo in use */
    size_t nundo;
};

#define READ_RECORD                                                                        \
    "local v = redis.pcall('GET', key)\n"                                                  \
    "if type(v) == 'table' then v = '' end\n"                                              \
    "local st, due, stamp, claim, at\n"                                                    \
    "if v then st, due, stamp, claim, at = string.match(v, '" JOB_RECORD_HEAD "') end\n"   \
    "local function tail() return string.sub(v, at) end\n"

/* Puts head in place of the head of record v (key), which ends before position at: written over
 * it when the two have the same length (a record with room for the claim token), else the whole
 * value again (one written before that room existed), keeping the expiry. */
#define WRITE_HEAD                                                                         \
    "local function write_head(key, v, at, head)\n"                                        \
    "  if at == #head + 1 then\n"                                                         \
    "    redis.call('SETRANGE', key, '0', head)\n"                                        \
    "  else\n"                                                                            \
    "    redis.call('SET', key, head .. string.sub(v, at), 'KEEPTTL')\n"                  \
    "  end\n"                                                                             \
    "end\n"

/* A script on one record: key is KEYS[1]. */
#define ONE_RECORD "local key = KEYS[1]\n" READ_RECORD

/* A script on many records, one call per CHUNK_MAX of a batch, so Redis sets up a script call
 * once for many records: function one(i, key) runs for KEYS[i] and its reply is the i-th of
 * the array returned. Records are independent; each is still changed atomically. */
#define EACH_RECORD(args) "local function one(" args ", key)\n" READ_RECORD
#define END_EACH(call)                                                                      \
    "end\n"                                                                                \
    "local out = {}\n"                                                                     \
    "for i = 1, #KEYS do out[i] = " call " end\n"                                          \
    "return out\n"

/* Every script reads the record of key the same way: v is false when there is none, '' when
 * the key holds something else; st, due, stamp and claim are the head's fields (st is nil when
 * the value is no record of ours) and tail the msgpack after the head. See job.h for the layout.
 *
 * Add, ARGV per record: record, ttl ms, override ("1": a pending or removed job of the id is
 * replaced; its messages then carry a tag that is not the new record's, and are skipped; "2":
 * a failed one is, a redriven dead letter's).
 * Returns {result, state letter} per record: 0 added,
 * 1 the same job is there (same topic and body; then also its claim field, a pending record's
 * tag, and due time, so that the add can send its message again), 2 another job has the id, 3
 * the key holds no record; or the
 * error of its SET (such as OOM) as that record's answer, not the whole call's.
 * The add tries SET NX on its own first (build_plain_add) and runs this only for an id it found
 * taken; the SET NX here adds a record that expired in between. */
#define ADD_ARGS 3   /* the add script's arguments per record: record, ttl, override */
static const char add_lua[] =
    "local function one(record, ttl, override, key)\n"
    "local r = redis.pcall('SET', key, record, 'PX', ttl, 'NX')\n"
    "if type(r) == 'table' and r.err then return r end\n"
    "if r then return {0, 'p'} end\n"
    READ_RECORD
    "if not st then return {3, ''} end\n"
    "if (override == '1' and (st == 'p' or st == 'c')) or (override == '2' and st == 'f') then\n"
    "  redis.call('SET', key, record, 'PX', ttl)\n"
    "  return {0, 'p'}\n"
    "end\n"
    "if st ~= 'c' then\n"
    "  local ok, rec = pcall(cmsgpack.unpack, tail())\n"
    "  local mine = cmsgpack.unpack(string.sub(record, select(5, string.match(record, '" JOB_RECORD_HEAD "'))))\n"
    "  if ok and type(rec) == 'table' and rec[1] == mine[1] and rec[2] == mine[2] then\n"
    "    return {1, st, claim, due}\n"
    "  end\n"
    "end\n"
    "return {2, st}\n"
    END_EACH("one(ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i], KEYS[i])");

/* ARGV (optional): the tag of the add whose record it is to be. Returns 1 when the pending
 * record (of that add) was deleted, else the state letter of the record there ('' for none). */
static const char drop_lua[] =
    ONE_RECORD
    "if st == 'p' and (not ARGV[1] or claim == ARGV[1]) then return redis.call('DEL', key) end\n"
    "return st or ''\n";

/* ARGV: now ms, ttl ms. Returns {result, state letter}: 0 removed, 1 no job, 2 too late, 3 the
 * key holds no record. The stamp goes where the tag (or the claim room) was, as a mark's does. */
static const char remove_lua[] =
    WRITE_HEAD
    ONE_RECORD
    "if not v then return {1, ''} end\n"
    "if not st then return {3, ''} end\n"
    "if st == 'p' then\n"
    "  write_head(key, v, at, 'c' .. due .. '|' .. ARGV[1] .. '||')\n"
    "  redis.call('PEXPIRE', key, ARGV[2])\n"
    "  return {0, 'c'}\n"
    "end\n"
    "return {2, st}\n";

/* Claim, ARGV: "<instance>:", then per record the due ms of the message (its dq-due-ms, or the
 * due time a reschedule moved it on to) or "", its dq-tag or "",
 * its claim token "<instance>:<message>" (forwarder.c), and the claim of another instance it may
 * take over ("*": whichever it finds), or "". Returns per record: {} when no record, {'other', claim} when the record is
 * being delivered under another instance's claim that it may not take over, {'stale'} when the message's due time is not the record's and the record is not pending under
 * the message's tag (an earlier job's message with this id, or the job's old message after it
 * was rescheduled), {'moved', due} when the pending job was rescheduled to the later due time
 * due (its message is to move on to it; rescheduled to an earlier time, the job is due and
 * claimed), {'wait'} when it was rescheduled to an earlier time and the message for that time
 * may still be on its way to Kafka (the pending record's stamp field holds until when, epoch
 * ms: till then only that message claims it, so that the reschedule's answer tells how it was
 * delivered),
 * {'foreign'} when it is not one of the pending job's own messages (its tag is not the one the
 * record holds in its claim field: any producer can write a dq-id, not the tag; a record written
 * before tags holds JOB_CLAIM_ROOM and asks for none), {'busy'} when another message of the job
 * (a copy
 * left by a crash in the middle of a move down the levels) is being delivered by this instance,
 * {state} when not claimable, {state, value} when claimed, and {'', value} for a value that is
 * no record (the caller dead-letters it). A delivering record claimed by another instance is
 * taken over only with that claim named: the caller first learns that its owner's lease is gone. The token goes over the room a pending record holds for it
 * (SETRANGE: the value is not copied, and the AOF gets the head instead of the whole record);
 * a record written before that room existed is rewritten whole. */
static const char claim_lua[] =
    WRITE_HEAD
    EACH_RECORD("mdue, mtag, token, take, instance")
    "if not v then return {} end\n"
    "if not st then return {'', v} end\n"
    "local tagged = st == 'p' and claim ~= '' and claim ~= '" JOB_CLAIM_ROOM "'\n"
    "if tagged and claim ~= mtag then return {'foreign'} end\n"
    /* the message whose claim this is, read again (a restart, a take-over, a lost reply) */
    "local again = st == 's' and string.sub(claim, #instance + 1) == string.sub(token, #instance + 1)\n"
    "if mdue ~= '' and due ~= mdue and not again then\n"
    "  if not tagged then return {'stale'} end\n"
    "  if tonumber(due) > tonumber(mdue) then return {'moved', due} end\n"
    "  if stamp ~= '' then\n"
    "    local t = redis.call('TIME')\n"
    "    if tonumber(stamp) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) then\n"
    "      return {'wait'}\n"
    "    end\n"
    "  end\n"
    "end\n"
    "if st == 's' and claim ~= token then\n"
    "  if string.sub(claim, 1, #instance) == instance then return {'busy'} end\n"
    "  if claim ~= take and take ~= '*' then return {'other', claim} end\n"
    "end\n"
    "if st == 'p' or st == 's' then\n"
    "  write_head(key, v, at, 's' .. due .. '||' .. token .. '|')\n"
    "  return {st, v}\n"
    "end\n"
    "return {st}\n"
    END_EACH("one(ARGV[4 * i - 2], ARGV[4 * i - 1], ARGV[4 * i], ARGV[4 * i + 1], ARGV[1], KEYS[i])");

/* Mark, ARGV per record: the head its claim wrote ("s<due>||<token>|"), the head to write in its
 * place ("<letter><due>|<now>|<rest of the token>|": the stamp takes the token's place, so the
 * two have the same length), a ttl in ms to renew the expiry with, or "" to keep it, why the
 * job failed, or "" (appended to the record as a msgpack string, see job.h), and a new tail, or
 * "" to keep the record's (a callback job's tail holds how its calls went).
 * Returns 1 per record marked, 0 per record no longer claimed by that token (delivered, or taken
 * over by another instance). The head is compared and written in place: no read or write of
 * the tail, and a few bytes to the AOF instead of the whole value. Numbers go to redis.call as
 * strings, which Lua would otherwise format with printf's floating point. */
static const char mark_lua[] =
    "local function one(claimed, head, ttl, why, tail, key)\n"
    "local v = redis.pcall('GETRANGE', key, '0', tostring(#claimed - 1))\n"
    "if v ~= claimed then return 0 end\n"
    "if tail ~= '' then\n"
    "  redis.call('SET', key, head .. tail, 'KEEPTTL')\n"
    "elseif #head == #claimed then\n"
    "  redis.call('SETRANGE', key, '0', head)\n"
    "else\n"
    "  v = redis.call('GET', key)\n"
    "  redis.call('SET', key, head .. string.sub(v, #claimed + 1), 'KEEPTTL')\n"
    "end\n"
    "if why ~= '' then redis.call('APPEND', key, cmsgpack.pack(why)) end\n"
    "if ttl ~= '' and redis.call('PTTL', key) < tonumber(ttl) then redis.call('PEXPIRE', key, ttl) end\n"
    "return 1\n"
    END_EACH("one(ARGV[5 * i - 4], ARGV[5 * i - 3], ARGV[5 * i - 2], ARGV[5 * i - 1], ARGV[5 * i], KEYS[i])");

/* Replace, ARGV: the head the record is to have still, the new value, its ttl ms. Returns 1 when
 * replaced, 0 when the head is another (claimed, removed or rescheduled meanwhile) or there is
 * no record. */
static const char replace_lua[] =
    "local head = redis.pcall('GETRANGE', KEYS[1], '0', tostring(#ARGV[1] - 1))\n"
    "if head ~= ARGV[1] then return 0 end\n"
    "redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])\n"
    "return 1\n";

static const char *const script_text[S_COUNT] = { add_lua, drop_lua, remove_lua, claim_lua, mark_lua,
                                                  replace_lua };

struct store *store_new(const struct config *cfg)
{
    struct store *st = calloc(1, sizeof(*st));

    if (!st || !(st->db = conn_new(cfg, script_text, S_COUNT))) {
        free(st);
        return NULL;
    }
    st->cfg = cfg;
    return st;
}

void store_free(struct store *st)
{
    if (!st)
        return;
    free(st->undo);
    conn_free(st->db);
    free(st);
}

static void job_key(const struct store *st, const char *id, char *out, size_t outlen)
{
    snprintf(out, outlen, "%sjob:%s", st->cfg->redis.prefix, id);
}

/* One script call on the record of job id: its reply (caller frees), or NULL with err set when
 * Redis did not answer or answered an error. */
static struct conn_reply *eval1(struct store *st, enum script script, const char *id, int argc,
                               const char *const *argv, enum conn_confirm confirm, char *err,
                               size_t errlen)
{
    char key[KEY_MAX];
    const char *a[1 + 4] = { key };
    struct conn_call call = { .script = (int)script, .nkeys = 1, .argc = 1 + (size_t)argc, .argv = a };

    job_key(st, id, key, sizeof(key));
    for (int i = 0; i < argc && i < 4; i++)
        a[1 + i] = argv[i];
    return conn_call(st->db, &call, confirm, err, errlen);
}

/* A state letter of a script's reply. */
static int parse_state(const struct conn_reply *r, enum job_state *state)
{
    size_t len;
    const char *s = conn_type(r) == CONN_STR ? conn_str(r, &len) : NULL;

    return s && len == 1 ? job_state_of_letter(s[0], state) : -1;
}

/* A {result, state letter} reply of add or remove: 0 with *res (and *state when the result
 * carries one: results below 2 for add and 2 for remove, see the scripts), or -1. */
static int read_result(const struct conn_reply *r, int *res, enum job_state *state)
{
    const struct conn_reply *letter;

    if (conn_count(r) < 2 || conn_type(conn_at(r, 0)) != CONN_INT)
        return -1;
    *res = (int)conn_int(conn_at(r, 0));
    letter = conn_at(r, 1);
    if (*res < 0 || *res > 3 ||
        (conn_type(letter) == CONN_STR && conn_str(letter, NULL)[0] && parse_state(letter, state) < 0))
        return -1;
    return 0;
}

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

/* Records per call: a plain SET NX takes one. */
static size_t per_call(const struct chunked *c)
{
    return c->plain ? 1 : CHUNK_MAX;
}

/* How many script calls the batch takes. */
static size_t chunks_of(const struct chunked *c)
{
    return c->start ? c->nchunks : (c->n + per_call(c) - 1) / per_call(c);
}

/* The first position and the number of records of call j. */
static size_t chunk_first(const struct chunked *c, size_t j)
{
    return c->start ? c->start[j] : j * per_call(c);
}

static size_t chunk_size(const struct chunked *c, size_t j)
{
    size_t first = chunk_first(c, j), end = c->start ? c->start[j + 1] : first + per_call(c);

    return (end < c->n ? end : c->n) - first;
}

/* The record at position pos of the call order. */
static size_t record_at(const struct chunked *c, size_t pos)
{
    return c->order ? c->order[pos] : pos;
}

/* Call j as SET <key> <record> PX <ttl> NX: the add script's first step, which is the whole
 * add when the id is new, the usual case; the script runs afterwards only for the few ids whose
 * key was taken. Redis spends less on a pipeline of SETs than on the looped script (8-10 us per
 * add against 12, make bench), and in a Redis Cluster, where a batch's ids rarely share a hash
 * slot and so each would be a script call of its own, a third of it. */
static void build_plain_add(const struct chunked *c, size_t j, struct conn_call *call)
{
    size_t at = record_at(c, chunk_first(c, j)) * ADD_ARGS;

    job_key(c->st, c->ids[at / ADD_ARGS], c->keys[0], KEY_MAX);
    c->a[0] = "SET", c->l[0] = 3;
    c->a[1] = c->keys[0], c->l[1] = strlen(c->keys[0]);
    c->a[2] = c->args[at], c->l[2] = c->argslen[at];
    c->a[3] = "PX", c->l[3] = 2;
    c->a[4] = c->args[at + 1], c->l[4] = c->argslen[at + 1];
    c->a[5] = "NX", c->l[5] = 2;
    *call = (struct conn_call){ .script = -1, .nkeys = 1, .argc = 6, .argv = c->a, .lens = c->l };
}

/* Call j: the script on its records: their keys, the shared arguments, then each record's. */
static void build_chunk(void *ctx, size_t j, struct conn_call *call)
{
    const struct chunked *c = ctx;
    size_t first = chunk_first(c, j), k = chunk_size(c, j), argc = 0;

    if (c->plain) {
        build_plain_add(c, j, call);
        return;
    }
    for (size_t i = 0; i < k; i++) {
        job_key(c->st, c->ids[record_at(c, first + i)], c->keys[i], KEY_MAX);
        c->a[argc] = c->keys[i], c->l[argc++] = strlen(c->keys[i]);
    }
    for (int i = 0; i < c->nshared; i++)
        c->a[argc] = c->shared[i], c->l[argc++] = strlen(c->shared[i]);
    for (size_t i = 0; i < k; i++) {
        size_t at = record_at(c, first + i) * (size_t)c->per;
        for (size_t x = at; x < at + (size_t)c->per; x++)
            c->a[argc] = c->args[x], c->l[argc++] = c->argslen ? c->argslen[x] : strlen(c->args[x]);
    }
    *call = (struct conn_call){ .script = (int)c->script, .nkeys = k, .argc = argc, .argv = c->a,
                               .lens = c->l };
}

struct slotted {
    int slot;
    size_t i;
};

static int by_slot(const void *a, const void *b)
{
    const struct slotted *x = a, *y = b;

    return x->slot != y->slot ? (x->slot > y->slot) - (x->slot < y->slot) : (x->i > y->i) - (x->i < y->i);
}

/* In a cluster: sorts the records by hash slot and cuts the calls where the slot changes or
 * CHUNK_MAX is reached. Out of memory, c keeps the plain order (Redis then refuses the calls
 * that span slots, and those records fail). */
static void plan_chunks(struct chunked *c)
{
    struct slotted *sl;
    char key[KEY_MAX];

    job_key(c->st, c->n ? c->ids[0] : "", key, sizeof(key));
    if (!c->n || c->plain || conn_slot_of(c->st->db, key, strlen(key)) < 0 || !(sl = malloc(c->n * sizeof(*sl))))
        return;
    c->order = malloc(c->n * sizeof(*c->order));
    c->start = malloc((c->n + 1) * sizeof(*c->start));
    if (!c->order || !c->start) {
        free(c->order);
        free(c->start);
        free(sl);
        c->order = c->start = NULL;
        return;
    }
    for (size_t i = 0; i < c->n; i++) {
        job_key(c->st, c->ids[i], key, sizeof(key));
        sl[i] = (struct slotted){ conn_slot_of(c->st->db, key, strlen(key)), i };
    }
    qsort(sl, c->n, sizeof(*sl), by_slot);
    c->nchunks = 0;
    for (size_t p = 0; p < c->n; p++) {
        c->order[p] = sl[p].i;
        if (p == 0 || sl[p].slot != sl[p - 1].slot || p - c->start[c->nchunks - 1] == per_call(c))
            c->start[c->nchunks++] = p;
    }
    c->start[c->nchunks] = c->n;
    free(sl);
}

/* Runs c's script over its records, CHUNK_MAX to a call, all calls in one pipeline; fn gets
 * each call's reply (ctx starts with c). */
static int run_chunked(struct chunked *c, conn_reply_fn *fn, void *ctx, enum conn_confirm confirm,
                       char *err, size_t errlen)
{
    size_t argc = CHUNK_MAX + (size_t)c->nshared + CHUNK_MAX * (size_t)c->per;
    int rc = -1;

    plan_chunks(c);
    c->a = malloc(argc * sizeof(*c->a));
    c->l = malloc(argc * sizeof(*c->l));
    c->keys = malloc(CHUNK_MAX * sizeof(*c->keys));
    if (c->a && c->l && c->keys) {
        rc = conn_pipeline(c->st->db, chunks_of(c), build_chunk, fn, ctx, confirm, err, errlen);
    } else {
        struct conn_fail fail = { CONN_E_MEMORY, "out of memory" };
        snprintf(err, errlen, "out of memory");
        for (size_t j = 0; j < chunks_of(c); j++)
            fn(ctx, j, NULL, &fail);
    }
    free(c->a);
    free(c->l);
    free(c->keys);
    free(c->order);
    free(c->start);
    return rc;
}

/* Record i of call j's reply r: the call's error reply when the call failed, NULL when there
 * is no reply or it is not one per record. */
static const struct conn_reply *item_of(const struct conn_reply *r, size_t k, size_t i)
{
    if (!r || conn_type(r) == CONN_ERR)
        return r;
    return conn_count(r) == k ? conn_at(r, i) : NULL;
}

/* Why record i of a reply is no answer: NULL when it is one. */
static const char *failure(const struct conn_reply *item, const char *err, const char *what)
{
    if (!item)
        return err ? err : what;
    return conn_type(item) == CONN_ERR ? conn_str(item, NULL) : NULL;
}

/* why as a message that says it came from Redis. */
static void redis_says(char *out, size_t outlen, const char *why)
{
    snprintf(out, outlen, "%s%s", strncmp(why, "redis", 5) ? "redis: " : "", why);
}

struct add_batch {
    struct chunked c;
    struct store_add_answer *out;
    size_t *taken;      /* records whose plain SET NX found their key taken: the script decides */
    size_t ntaken;
};

/* An add's result; for the same job already there, the tag and due time of its record. */
static void read_duplicate(const struct conn_reply *r, int res, struct store_add_answer *out)
{
    size_t len;
    const char *tag;

    out->res = (enum store_add_result)res;
    out->tag[0] = '\0';
    out->due_ms = -1;
    if (res != STORE_DUPLICATE || conn_count(r) < 4 || conn_type(conn_at(r, 2)) != CONN_STR ||
        conn_type(conn_at(r, 3)) != CONN_STR)
        return;
    tag = conn_str(conn_at(r, 2), &len);
    if (len == JOB_TAG_LEN && strcmp(tag, JOB_CLAIM_ROOM) != 0)
        memcpy(out->tag, tag, JOB_TAG_LEN + 1);   /* else a record without one */
    out->due_ms = strtoll(conn_str(conn_at(r, 3), NULL), NULL, 10);
}

/* An add that failed after it may have written its record: the record is dropped (see
 * undo_failed), so that no pending record outlives an add answered as failed. */
static void failed_add(struct store_add_answer *out, const char *why, int wrote)
{
    out->ok = 0;
    out->undo = wrote;   /* 1: it wrote (unconfirmed); -1: it may have (no answer) */
    redis_says(out->err, sizeof(out->err), why);
}

/* The reply to a plain SET NX of record i: added, or its key taken (left to the script). */
static void plain_add_reply(struct add_batch *b, size_t i, const struct conn_reply *r,
                            const struct conn_fail *fail)
{
    struct store_add_answer *out = &b->out[i];

    if (!r) {
        failed_add(out, fail->text, -1);   /* it may have run */
    } else if (conn_type(r) == CONN_NIL) {
        out->ok = 0;
        snprintf(out->err, sizeof(out->err), "redis: the add of a taken id was not run");
        b->taken[b->ntaken++] = i;
    } else if (!conn_is(r, "OK")) {
        failed_add(out, conn_type(r) == CONN_ERR ? conn_str(r, NULL) : "unexpected reply to add", 0);
    } else if (fail) {
        failed_add(out, fail->text, 1);   /* written, but a failover could take it back */
    } else {
        *out = (struct store_add_answer){ .ok = 1, .res = STORE_ADDED, .state = JOB_PENDING,
                                          .due_ms = -1 };
    }
}

static void add_reply(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct add_batch *b = ctx;
    size_t k = chunk_size(&b->c, j);

    if (b->c.plain) {
        plain_add_reply(b, record_at(&b->c, chunk_first(&b->c, j)), r, fail);
        return;
    }
    for (size_t i = 0; i < k; i++) {
        struct store_add_answer *out = &b->out[record_at(&b->c, chunk_first(&b->c, j) + i)];
        const struct conn_reply *item = item_of(r, k, i);
        const char *why = failure(item, r ? NULL : fail->text, "unexpected reply to add");
        int res = -1;

        if (!why && read_result(item, &res, &out->state) < 0)
            why = "unexpected reply to add";
        if (why)
            failed_add(out, why, r ? 0 : -1);
        else if (fail)
            failed_add(out, fail->text, res == STORE_ADDED);
        else
            out->ok = 1, out->undo = 0, read_duplicate(item, res, out);
    }
}

/* Deletes the record of a failed add: only a pending record under the add's own tag, so that
 * a record of an earlier add of the same id stays. 0, or -1 when Redis did not answer. */
static int drop_own(struct store *st, const char *id, const char *tag)
{
    char err[256];
    struct conn_reply *r = eval1(st, S_DROP, id, tag[0] ? 1 : 0, &tag, CONN_NO_WAIT, err, sizeof(err));

    conn_reply_free(r);
    return r || conn_code(st->db) == CONN_E_REPLY ? 0 : -1;
}

/* Keeps a failed add's record to delete once Redis answers again. */
static void undo_later(struct store *st, const struct job *job)
{
    if (!st->undo && !(st->undo = malloc(UNDO_MAX * sizeof(*st->undo))))
        return;
    if (st->nundo == UNDO_MAX)
        return;
    snprintf(st->undo[st->nundo].id, sizeof(st->undo[0].id), "%s", job->id);
    memcpy(st->undo[st->nundo++].tag, job->tag, sizeof(job->tag));
}

/* Deletes the records kept by undo_later, while Redis answers. */
static void undo_kept(struct store *st)
{
    size_t done = 0;

    while (done < st->nundo && drop_own(st, st->undo[done].id, st->undo[done].tag) == 0)
        done++;
    memmove(st->undo, st->undo + done, (st->nundo - done) * sizeof(*st->undo));
    st->nundo -= done;
}

/* Drops the records that failed adds may have written. One Redis answered but did not confirm
 * goes at once; one Redis did not answer for is kept to delete when it answers again (asking
 * now would wait for the same timeout). */
static void undo_failed(struct store *st, size_t n, const struct job *const *jobs,
                        struct store_add_answer *out)
{
    for (size_t i = 0; i < n; i++) {
        const char *more = "";
        if (out[i].ok || !out[i].undo)
            continue;
        if (out[i].undo < 0)
            undo_later(st, jobs[i]), more = "; its record, if Redis wrote it, is deleted once Redis answers";
        else if (drop_own(st, jobs[i]->id, jobs[i]->tag) < 0)
            undo_later(st, jobs[i]), more = "; its record is deleted once Redis answers";
        snprintf(out[i].err + strlen(out[i].err), sizeof(out[i].err) - strlen(out[i].err), "%s", more);
    }
}

static int add_records(struct store *st, size_t n, const struct job *const *jobs,
                       int64_t retention_ms, int plain, struct store_add_answer *out,
                       char *err, size_t errlen);

/* The script's add of the records whose plain SET NX found their key taken: the same job sent
 * again, another job with that id, or a key that expired in between (then added after all).
 * Their answers replace the ones the SET NX left; when Redis could not be asked, they say why. */
static void add_taken(struct store *st, const struct add_batch *b, const struct job *const *jobs,
                      int64_t retention_ms)
{
    const struct job **sub = malloc(b->ntaken * sizeof(*sub));
    struct store_add_answer *ans = calloc(b->ntaken, sizeof(*ans));
    char err[sizeof(ans->err)] = "out of memory";
    int rc = -1;

    if (sub && ans) {
        for (size_t i = 0; i < b->ntaken; i++)
            sub[i] = jobs[b->taken[i]];
        rc = add_records(st, b->ntaken, sub, retention_ms, 0, ans, err, sizeof(err));
    }
    for (size_t i = 0; i < b->ntaken; i++) {
        struct store_add_answer *out = &b->out[b->taken[i]];
        if (rc == 0)
            *out = ans[i];
        else
            redis_says(out->err, sizeof(out->err), err);
    }
    free(sub);
    free(ans);
}

/* store_add_batch; plain: each record is first tried with SET NX, the script only where its key
 * was taken. */
static int add_records(struct store *st, size_t n, const struct job *const *jobs,
                       int64_t retention_ms, int plain, struct store_add_answer *out,
                       char *err, size_t errlen)
{
    msgpack_sbuffer *bufs = calloc(n ? n : 1, sizeof(*bufs));
    char (*ttl)[24] = malloc((n ? n : 1) * sizeof(*ttl));
    const char **ids = malloc((n ? n : 1) * sizeof(*ids));
    const char **args = malloc(ADD_ARGS * n * sizeof(*args) + 1);
    size_t *lens = malloc(ADD_ARGS * n * sizeof(*lens) + 1);
    struct add_batch b = { { .st = st, .script = S_ADD, .n = n, .ids = ids, .per = ADD_ARGS, .args = args,
                             .argslen = lens, .plain = plain }, out,
                           malloc((n ? n : 1) * sizeof(*b.taken)), 0 };
    int rc = -1;

    if (!bufs || !ttl || !ids || !args || !lens || !b.taken) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        msgpack_sbuffer_init(&bufs[i]);
    for (size_t i = 0; i < n; i++) {
        const struct job *job = jobs[i];
        if (job_record_pack(job, &bufs[i]) < 0) {
            snprintf(err, errlen, "out of memory packing the record of job %s", job->id);
            goto done;
        }
        snprintf(ttl[i], sizeof(ttl[i]), "%lld", (long long)(job->due_ms - job->created_ms + retention_ms));
        ids[i] = job->id;
        args[ADD_ARGS * i] = bufs[i].data,       lens[ADD_ARGS * i] = bufs[i].size;
        args[ADD_ARGS * i + 1] = ttl[i],         lens[ADD_ARGS * i + 1] = strlen(ttl[i]);
        args[ADD_ARGS * i + 2] = job->override == JOB_OVERRIDE_FAILED ? "2"
                                 : job->override ? "1" : "";
        lens[ADD_ARGS * i + 2] = job->override ? 1 : 0;
    }
    run_chunked(&b.c, add_reply, &b, CONN_WAIT_END, err, errlen);   /* each job its own answer */
    undo_failed(st, n, jobs, out);
    if (b.ntaken)
        add_taken(st, &b, jobs, retention_ms);
    rc = 0;
done:
    for (size_t i = 0; bufs && i < n; i++)
        msgpack_sbuffer_destroy(&bufs[i]);
    free(bufs);
    free(ttl);
    free(ids);
    free(args);
    free(lens);
    free(b.taken);
    return rc;
}

int store_add_batch(struct store *st, size_t n, const struct job *const *jobs, int64_t retention_ms,
                    struct store_add_answer *out, char *err, size_t errlen)
{
    if (st->nundo)
        undo_kept(st);
    return add_records(st, n, jobs, retention_ms, 1, out, err, errlen);
}

int store_drop_pending(struct store *st, const char *id, enum job_state *left, char *err,
                       size_t errlen)
{
    struct conn_reply *r = eval1(st, S_DROP, id, 0, NULL, CONN_NO_WAIT, err, errlen);   /* nothing rests on it */

    if (left && (!r || conn_type(r) != CONN_STR || parse_state(r, left) < 0))
        *left = JOB_PENDING;   /* dropped, or nothing there */
    conn_reply_free(r);
    return r ? 0 : -1;
}

/* Reads and replacements, one call per record, all in one pipeline. */
struct many {
    struct store *st;
    struct store_read *reads;       /* or */
    struct store_swap *swaps;       /* or */
    struct store_removal *removals;
    char now[32];                   /* the removals' time */
    char key[KEY_MAX], ttl[32];     /* the call being built (ttl: the removals' retention) */
    const char *argv[4];
    size_t lens[4];
};

static void build_read(void *ctx, size_t j, struct conn_call *call)
{
    struct many *m = ctx;

    job_key(m->st, m->reads[j].id, m->key, sizeof(m->key));
    m->argv[0] = "GET";
    m->argv[1] = m->key;
    *call = (struct conn_call){ .script = -1, .nkeys = 1, .argc = 2, .argv = m->argv };
}

static void note_failure(int *failed, char *err, size_t errlen, const char *why)
{
    *failed = 1;
    redis_says(err, errlen, why);
}

static void on_read(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct store_read *rd = &((struct many *)ctx)->reads[j];
    const char *v = "";

    if (fail) {
        note_failure(&rd->failed, rd->err, sizeof(rd->err), fail->text);
        return;
    }
    if (conn_type(r) == CONN_ERR && strncmp(conn_str(r, NULL), "WRONGTYPE", 9) != 0) {
        note_failure(&rd->failed, rd->err, sizeof(rd->err), conn_str(r, NULL));
        return;
    }
    if (conn_type(r) == CONN_STR)
        v = conn_str(r, &rd->len);
    else if (conn_type(r) != CONN_ERR)   /* nil: no record; WRONGTYPE: one that is no record */
        return;
    if (!(rd->data = malloc(rd->len + 1))) {
        rd->len = 0;
        note_failure(&rd->failed, rd->err, sizeof(rd->err), "out of memory");
        return;
    }
    memcpy(rd->data, v, rd->len);
    rd->data[rd->len] = '\0';
    rd->found = 1;
}

int store_read_many(struct store *st, size_t n, struct store_read *reads)
{
    struct many m = { .st = st, .reads = reads };
    char err[256];
    int rc = 0;

    for (size_t i = 0; i < n; i++)
        reads[i] = (struct store_read){ .id = reads[i].id };
    if (n > 0)
        (void)conn_pipeline(st->db, n, build_read, on_read, &m, CONN_NO_WAIT, err, sizeof(err));
    for (size_t i = 0; i < n; i++)
        rc |= reads[i].failed ? -1 : 0;
    return rc;
}

static void build_removal(void *ctx, size_t j, struct conn_call *call)
{
    struct many *m = ctx;

    job_key(m->st, m->removals[j].id, m->key, sizeof(m->key));
    m->argv[0] = m->key, m->argv[1] = m->now, m->argv[2] = m->ttl;
    *call = (struct conn_call){ .script = S_REMOVE, .nkeys = 1, .argc = 3, .argv = m->argv };
}

static void on_removal(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct store_removal *rm = &((struct many *)ctx)->removals[j];
    int result;

    if (fail && fail->code == CONN_E_UNCONFIRMED) {
        rm->failed = 1;
        snprintf(rm->err, sizeof(rm->err), "%s, so whether the job was removed is not known; "
                 "removing it again is safe", fail->text);
    } else if (fail) {
        note_failure(&rm->failed, rm->err, sizeof(rm->err), fail->text);
    } else if (conn_type(r) == CONN_ERR) {
        note_failure(&rm->failed, rm->err, sizeof(rm->err), conn_str(r, NULL));
    } else if (read_result(r, &result, &rm->state) < 0) {
        note_failure(&rm->failed, rm->err, sizeof(rm->err), "unexpected reply to remove");
    } else {
        rm->res = (enum store_remove_result)result;
    }
}

int store_remove_many(struct store *st, size_t n, struct store_removal *removals, int64_t now_ms,
                      int64_t retention_ms)
{
    struct many m = { .st = st, .removals = removals };
    char err[256];
    int rc = 0;

    snprintf(m.now, sizeof(m.now), "%lld", (long long)now_ms);
    snprintf(m.ttl, sizeof(m.ttl), "%lld", (long long)retention_ms);
    for (size_t i = 0; i < n; i++)
        removals[i] = (struct store_removal){ .id = removals[i].id, .state = JOB_PENDING };
    if (n > 0)
        (void)conn_pipeline(st->db, n, build_removal, on_removal, &m, CONN_WAIT_END, err, sizeof(err));
    for (size_t i = 0; i < n; i++)
        rc |= removals[i].failed ? -1 : 0;
    return rc;
}

static void build_swap(void *ctx, size_t j, struct conn_call *call)
{
    struct many *m = ctx;
    const struct store_swap *sw = &m->swaps[j];

    job_key(m->st, sw->id, m->key, sizeof(m->key));
    snprintf(m->ttl, sizeof(m->ttl), "%lld", (long long)(sw->ttl_ms > 1 ? sw->ttl_ms : 1));
    m->argv[0] = m->key, m->argv[1] = sw->head, m->argv[2] = sw->value, m->argv[3] = m->ttl;
    m->lens[0] = strlen(m->key), m->lens[1] = sw->head_len, m->lens[2] = sw->len;
    m->lens[3] = strlen(m->ttl);
    *call = (struct conn_call){ .script = S_REPLACE, .nkeys = 1, .argc = 4, .argv = m->argv,
                               .lens = m->lens };
}

static void on_swap(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct store_swap *sw = &((struct many *)ctx)->swaps[j];

    if (fail && fail->code != CONN_E_UNCONFIRMED) {
        note_failure(&sw->failed, sw->err, sizeof(sw->err), fail->text);
        return;
    }
    if (conn_type(r) == CONN_ERR) {
        note_failure(&sw->failed, sw->err, sizeof(sw->err), conn_str(r, NULL));
        return;
    }
    sw->replaced = conn_type(r) == CONN_INT && conn_int(r) == 1;
    if (sw->replaced && fail) {   /* too few replicas have it: a failover could undo it */
        sw->failed = 1;
        snprintf(sw->err, sizeof(sw->err), "%s, so whether the record was changed is not known",
                 fail->text);
    }
}

int store_replace_many(struct store *st, size_t n, struct store_swap *swaps)
{
    struct many m = { .st = st, .swaps = swaps };
    char err[256];
    int rc = 0;

    for (size_t i = 0; i < n; i++) {
        swaps[i].replaced = swaps[i].failed = 0;
        swaps[i].err[0] = '\0';
    }
    if (n > 0)
        (void)conn_pipeline(st->db, n, build_swap, on_swap, &m, CONN_WAIT_END, err, sizeof(err));
    for (size_t i = 0; i < n; i++)
        rc |= swaps[i].failed ? -1 : 0;
    return rc;
}

int store_replace(struct store *st, const char *id, const char *head, size_t head_len,
                  const char *value, size_t len, int64_t ttl_ms, int *replaced, char *err,
                  size_t errlen)
{
    struct store_swap sw = { .id = id, .head = head, .head_len = head_len, .value = value,
                             .len = len, .ttl_ms = ttl_ms };

    *replaced = 0;
    if (store_replace_many(st, 1, &sw) < 0) {
        snprintf(err, errlen, "%s", sw.err);
        return -1;
    }
    *replaced = sw.replaced;
    return 0;
}

/* A record's claim from its answer r; data points into r. */
static void read_claim(const struct conn_reply *r, struct store_claim *out)
{
    const struct conn_reply *first;

    memset(out, 0, sizeof(*out));
    if (conn_count(r) == 0)
        return;
    out->found = 1;
    first = conn_at(r, 0);
    if (conn_is(first, "other") && conn_count(r) == 2 && conn_type(conn_at(r, 1)) == CONN_STR) {
        out->other = conn_str(conn_at(r, 1), &out->other_len);
        return;
    }
    if (conn_is(first, "moved") && conn_count(r) == 2 && conn_type(conn_at(r, 1)) == CONN_STR) {
        out->moved_due_ms = strtoll(conn_str(conn_at(r, 1), NULL), NULL, 10);
        return;
    }
    if (conn_is(first, "wait")) {
        out->wait = 1;
        return;
    }
    if (conn_is(first, "stale") || conn_is(first, "busy") || conn_is(first, "foreign")) {
        out->stale = conn_is(first, "stale");
        out->busy = conn_is(first, "busy");
        out->foreign = conn_is(first, "foreign");
        return;
    }
    if (parse_state(first, &out->before) < 0)
        out->before = JOB_DELIVERING;   /* no record of ours: claimed, and the value does not decode */
    if (conn_count(r) == 2 && conn_type(conn_at(r, 1)) == CONN_STR) {
        out->data = conn_str(conn_at(r, 1), &out->len);
        out->claimed = 1;
    }
}

struct claim_batch {
    struct chunked c;
    store_claim_fn *fn;
    void *ctx;
};

/* The reply of claim call j: one answer per record of its chunk. */
static void claim_reply(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *f)
{
    const char *err = f ? f->text : NULL;
    const struct claim_batch *b = ctx;
    size_t k = chunk_size(&b->c, j), first = chunk_first(&b->c, j);
    struct store_claim c;
    char why[256];

    for (size_t i = 0; i < k; i++) {
        const struct conn_reply *item = f ? NULL : item_of(r, k, i);   /* unconfirmed: not claimed */
        const char *fail = failure(item, err, "unexpected reply to claim");
        if (!fail) {
            read_claim(item, &c);
            b->fn(b->ctx, record_at(&b->c, first + i), &c, NULL);
            continue;
        }
        redis_says(why, sizeof(why), fail);
        b->fn(b->ctx, record_at(&b->c, first + i), NULL, why);
    }
}

int store_claim_batch(struct store *st, size_t n, const char *const *ids, const char *instance,
                      const char *const *args, store_claim_fn *fn, void *ctx, char *err,
                      size_t errlen)
{
    struct claim_batch b = { { .st = st, .script = S_CLAIM, .n = n, .ids = ids, .nshared = 1,
                               .shared = &instance, .per = 4, .args = args }, fn, ctx };

    /* A record must not be delivered on a claim that a failover could take back: each chunk's
     * claims are confirmed before they are answered, while Redis claims the next chunk. */
    return run_chunked(&b.c, claim_reply, &b, CONN_WAIT_EACH, err, errlen);
}

/* A head "<letter><due>|<stamp>|<token>|": two 20-digit numbers and a token of up to 19
 * characters (the forwarder's have 13). */
#define MARK_HEAD_MAX 64

/* The arguments of one record's mark. */
struct mark_args {
    char claimed[MARK_HEAD_MAX];
    char head[MARK_HEAD_MAX];
    char ttl[24];
};

static void mark_args(const struct store_mark *m, int64_t now_ms, int64_t retention_ms,
                      struct mark_args *out)
{
    size_t now_len = (size_t)snprintf(out->ttl, sizeof(out->ttl), "%lld", (long long)now_ms);
    const char *rest = strlen(m->token) > now_len ? m->token + now_len : "";

    snprintf(out->claimed, sizeof(out->claimed), "%c%lld||%s|", job_state_letter(JOB_DELIVERING),
             (long long)m->due_ms, m->token);
    snprintf(out->head, sizeof(out->head), "%c%lld|%lld|%s|", job_state_letter(m->state),
             (long long)m->due_ms, (long long)now_ms, rest);
    out->ttl[0] = '\0';
    if (now_ms - m->due_ms > retention_ms / 64)
        snprintf(out->ttl, sizeof(out->ttl), "%lld", (long long)retention_ms);
}

struct mark_batch {
    struct chunked c;
    char *failed;               /* per record: 1 when it was not marked */
    char first_err[256];        /* why the first record not marked was not */
};

static void mark_reply(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *f)
{
    struct mark_batch *b = ctx;
    size_t k = chunk_size(&b->c, j);

    for (size_t i = 0; i < k; i++) {
        const char *why = failure(f ? NULL : item_of(r, k, i), f ? f->text : NULL, "unexpected reply to mark");
        if (!why)
            continue;
        b->failed[record_at(&b->c, chunk_first(&b->c, j) + i)] = 1;
        if (!b->first_err[0])
            redis_says(b->first_err, sizeof(b->first_err), why);
    }
}

int store_mark_batch(struct store *st, size_t n, const struct store_mark *marks, int64_t now_ms,
                     int64_t retention_ms, char *failed, char *err, size_t errlen)
{
    struct mark_args *a = malloc((n ? n : 1) * sizeof(*a));
    const char **ids = malloc((n ? n : 1) * sizeof(*ids));
    const char **argv = malloc((n ? n : 1) * 5 * sizeof(*argv));
    size_t *lens = malloc((n ? n : 1) * 5 * sizeof(*lens));
    struct mark_batch b = { { .st = st, .script = S_MARK, .n = n, .ids = ids, .per = 5, .args = argv,
                              .argslen = lens }, failed, "" };
    int rc = -1;

    memset(failed, 0, n);
    if (!a || !ids || !argv || !lens) {
        memset(failed, 1, n);
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        mark_args(&marks[i], now_ms, retention_ms, &a[i]);
        ids[i] = marks[i].id;
        argv[5 * i] = a[i].claimed;
        argv[5 * i + 1] = a[i].head;
        argv[5 * i + 2] = a[i].ttl;
        argv[5 * i + 3] = marks[i].error ? marks[i].error : "";
        argv[5 * i + 4] = marks[i].tail ? marks[i].tail : "";
        for (int k = 0; k < 4; k++)
            lens[5 * i + k] = strlen(argv[5 * i + k]);
        lens[5 * i + 4] = marks[i].tail ? marks[i].tail_len : 0;
    }
    run_chunked(&b.c, mark_reply, &b, CONN_WAIT_END, err, errlen);
    if (b.first_err[0])
        snprintf(err, errlen, "%s", b.first_err);
    else
        rc = 0;
out:
    free(a);
    free(ids);
    free(argv);
    free(lens);
    return rc;
}

/* The retries planned, by due time: a sorted set of job ids, kept a minute past each due time. */
static void retries_key(const struct store *st, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s{cb}:retries", st->cfg->redis.prefix);
}

int store_retry_planned(struct store *st, const char *id, int64_t at_ms, int64_t now_ms, char *err,
                        size_t errlen)
{
    char key[KEY_MAX], at[24], old[24];
    struct conn_reply *r;

    retries_key(st, key, sizeof(key));
    snprintf(at, sizeof(at), "%lld", (long long)at_ms);
    snprintf(old, sizeof(old), "(%lld", (long long)(now_ms - RETRIES_KEPT_MS));
    if (!(r = conn_command(st->db, err, errlen, "ZADD", key, at, id, NULL)))
        return -1;
    conn_reply_free(r);
    if (!(r = conn_command(st->db, err, errlen, "ZREMRANGEBYSCORE", key, "-inf", old, NULL)))
        return -1;
    conn_reply_free(r);
    return 0;
}

int store_retries_waiting(struct store *st, int64_t now_ms, int64_t *n, char *err, size_t errlen)
{
    char key[KEY_MAX], now[24];
    struct conn_reply *r;

    retries_key(st, key, sizeof(key));
    snprintf(now, sizeof(now), "%lld", (long long)now_ms);
    if (!(r = conn_command(st->db, err, errlen, "ZCOUNT", key, now, "+inf", NULL)))
        return -1;
    *n = conn_int(r);
    conn_reply_free(r);
    return 0;
}

int store_evicts(char *policy, size_t len)
{
    return conn_eviction(policy, len);
}

int store_ping(struct store *st, char *err, size_t errlen)
{
    return conn_ping(st->db, err, errlen);
}

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis.h>

#include "store.h"

#define KEY_MAX (CONFIG_STR_MAX + 4 + JOB_ID_MAX + 1)   /* prefix + "job:" + id */

struct store {
    const struct config *cfg;
    redisContext *c;
};

/* Every script reads the record the same way: v is false when there is none, '' when the key
 * holds something else; st, due, stamp and claim are the head's fields (st is nil when the
 * value is no record of ours) and tail the msgpack after the head. See job.h for the layout. */
#define READ_RECORD                                                                        \
    "local v = redis.pcall('GET', KEYS[1])\n"                                              \
    "if type(v) == 'table' then v = '' end\n"                                              \
    "local st, due, stamp, claim, at\n"                                                    \
    "if v then st, due, stamp, claim, at = string.match(v, '" JOB_RECORD_HEAD "') end\n"   \
    "local function tail() return string.sub(v, at) end\n"

/* ARGV: value, ttl ms, topic, body. Returns {result, state letter}: 0 added, 1 duplicate (the
 * same topic and body: an add retried by its client), 2 conflict, 3 the key holds no record. */
static const char add_lua[] =
    READ_RECORD
    "if not v then\n"
    "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
    "  return {0, 'p'}\n"
    "end\n"
    "if not st then return {3, ''} end\n"
    "if st ~= 'c' then\n"
    "  local ok, rec = pcall(cmsgpack.unpack, tail())\n"
    "  if ok and type(rec) == 'table' and rec[1] == ARGV[3] and rec[2] == ARGV[4] then\n"
    "    return {1, st}\n"
    "  end\n"
    "end\n"
    "return {2, st}\n";

static const char drop_lua[] =
    READ_RECORD
    "if st == 'p' then return redis.call('DEL', KEYS[1]) end\n"
    "return 0\n";

/* ARGV: now ms, ttl ms. Returns {result, state letter}: 0 removed, 1 no job, 2 too late, 3 the
 * key holds no record. */
static const char remove_lua[] =
    READ_RECORD
    "if not v then return {1, ''} end\n"
    "if not st then return {3, ''} end\n"
    "if st == 'p' then\n"
    "  redis.call('SET', KEYS[1], 'c' .. due .. '|' .. ARGV[1] .. '||' .. tail(), 'PX', ARGV[2])\n"
    "  return {0, 'c'}\n"
    "end\n"
    "return {2, st}\n";

/* ARGV: the message's due ms or "", its claim token "<instance>:<topic>/<partition>/<offset>",
 * and "<instance>:". Returns {} when no record, {'stale'} when the message is not this record's,
 * {'busy'} when another message of the job (a copy left by a crash in the middle of a move down
 * the levels) is being delivered by this instance, {state} when not claimable, {state, value}
 * when claimed, and {'', value} for a value that is no record (the caller dead-letters it). A
 * delivering record claimed by another instance (which crashed) is taken over. */
static const char claim_lua[] =
    READ_RECORD
    "if not v then return {} end\n"
    "if not st then return {'', v} end\n"
    "if ARGV[1] ~= '' and due ~= ARGV[1] then return {'stale'} end\n"
    "if st == 's' and claim ~= ARGV[2] and string.sub(claim, 1, #ARGV[3]) == ARGV[3] then\n"
    "  return {'busy'}\n"
    "end\n"
    "if st == 'p' or st == 's' then\n"
    "  redis.call('SET', KEYS[1], 's' .. due .. '||' .. ARGV[2] .. '|' .. tail(), 'KEEPTTL')\n"
    "  return {st, v}\n"
    "end\n"
    "return {st}\n";

/* ARGV: final state letter (delivered or failed), now ms, ttl ms. */
static const char mark_lua[] =
    READ_RECORD
    "if st ~= 's' then return 0 end\n"
    "redis.call('SET', KEYS[1], ARGV[1] .. due .. '|' .. ARGV[2] .. '||' .. tail(), 'PX', ARGV[3])\n"
    "return 1\n";

struct store *store_new(const struct config *cfg)
{
    struct store *st = calloc(1, sizeof(*st));

    if (st)
        st->cfg = cfg;
    return st;
}

void store_free(struct store *st)
{
    if (!st)
        return;
    if (st->c)
        redisFree(st->c);
    free(st);
}

static void drop_conn(struct store *st)
{
    if (st->c) {
        redisFree(st->c);
        st->c = NULL;
    }
}

/* Runs a setup command on a fresh connection; 0 when it answers without error. */
static int setup_cmd(struct store *st, char *err, size_t errlen, const char *fmt, const char *arg)
{
    redisReply *r = redisCommand(st->c, fmt, arg);
    int rc = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;

    if (rc < 0)
        snprintf(err, errlen, "redis %s: %s", fmt, r ? r->str : st->c->errstr);
    if (r)
        freeReplyObject(r);
    return rc;
}

static int ensure_conn(struct store *st, char *err, size_t errlen)
{
    const struct config *cfg = st->cfg;
    struct timeval tv = { cfg->redis.timeout_ms / 1000, (cfg->redis.timeout_ms % 1000) * 1000 };
    char db[32];

    if (st->c && !st->c->err)
        return 0;
    drop_conn(st);
    st->c = redisConnectWithTimeout(cfg->redis.host, (int)cfg->redis.port, tv);
    if (!st->c || st->c->err) {
        snprintf(err, errlen, "redis %s:%lld: %s", cfg->redis.host, (long long)cfg->redis.port,
                 st->c ? st->c->errstr : "out of memory");
        drop_conn(st);
        return -1;
    }
    redisSetTimeout(st->c, tv);
    snprintf(db, sizeof(db), "%lld", (long long)cfg->redis.db);
    if ((cfg->redis.password[0] && setup_cmd(st, err, errlen, "AUTH %s", cfg->redis.password) < 0) ||
        (cfg->redis.db && setup_cmd(st, err, errlen, "SELECT %s", db) < 0)) {
        drop_conn(st);
        return -1;
    }
    return 0;
}

static void job_key(const struct store *st, const char *id, char *out, size_t outlen)
{
    snprintf(out, outlen, "%sjob:%s", st->cfg->redis.prefix, id);
}

#define EVAL_ARGS_MAX 8   /* script arguments; the most any script here takes is 5 */

/* Queues EVAL script 1 key argv... on the connection. argc <= EVAL_ARGS_MAX. */
static void append_eval(struct store *st, const char *script, const char *key, int argc,
                        const char *const *argv, const size_t *argvlen)
{
    const char *a[4 + EVAL_ARGS_MAX] = { "EVAL", script, "1", key };
    size_t l[4 + EVAL_ARGS_MAX] = { 4, strlen(script), 1, strlen(key) };

    for (int i = 0; i < argc && i < EVAL_ARGS_MAX; i++) {
        a[4 + i] = argv[i];
        l[4 + i] = argvlen ? argvlen[i] : strlen(argv[i]);
    }
    redisAppendCommandArgv(st->c, 4 + (argc < EVAL_ARGS_MAX ? argc : EVAL_ARGS_MAX), a, l);
}

/* Reads one reply; on a connection error drops the connection and returns NULL with err set.
 * A Redis error reply is returned as is, for the caller to judge. */
static redisReply *read_reply(struct store *st, char *err, size_t errlen)
{
    void *r = NULL;

    if (redisGetReply(st->c, &r) != REDIS_OK || !r) {
        snprintf(err, errlen, "redis: %s", st->c->errstr[0] ? st->c->errstr : "no reply");
        drop_conn(st);
        return NULL;
    }
    return r;
}

/* A reply as the store_* callers want it: NULL with err set for a connection error (the
 * connection is dropped) or a Redis error reply. */
static redisReply *checked(struct store *st, redisReply *r, char *err, size_t errlen)
{
    if (!r) {
        snprintf(err, errlen, "redis: %s", st->c->errstr);
        drop_conn(st);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "redis: %s", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

redisReply *store_eval(struct store *st, const char *script, const char *key, int argc,
                       const char *const *argv, const size_t *argvlen, char *err, size_t errlen)
{
    redisReply *r;

    if (ensure_conn(st, err, errlen) < 0)
        return NULL;
    append_eval(st, script, key, argc, argv, argvlen);
    if (!(r = read_reply(st, err, errlen)))
        return NULL;
    return checked(st, r, err, errlen);
}

redisReply *store_command(struct store *st, char *err, size_t errlen, const char *fmt, ...)
{
    redisReply *r;
    va_list ap;

    if (ensure_conn(st, err, errlen) < 0)
        return NULL;
    va_start(ap, fmt);
    r = redisvCommand(st->c, fmt, ap);
    va_end(ap);
    return checked(st, r, err, errlen);
}

redisReply *store_argv(struct store *st, int argc, const char **argv, char *err, size_t errlen)
{
    if (ensure_conn(st, err, errlen) < 0)
        return NULL;
    return checked(st, redisCommandArgv(st->c, argc, argv, NULL), err, errlen);
}

/* EVAL of a script on the record of job id. */
static redisReply *eval1(struct store *st, const char *script, const char *id, int argc,
                         const char *const *argv, const size_t *argvlen, char *err, size_t errlen)
{
    char key[KEY_MAX];

    job_key(st, id, key, sizeof(key));
    return store_eval(st, script, key, argc, argv, argvlen, err, errlen);
}

/* A state letter of a script's reply. */
static int parse_state(const redisReply *r, enum job_state *state)
{
    return r->type == REDIS_REPLY_STRING && r->len == 1 ? job_state_of_letter(r->str[0], state) : -1;
}

/* A {result, state letter} reply of add or remove: 0 with *res (and *state when the result
 * carries one: results below 2 for add and 2 for remove, see the scripts), or -1. */
static int read_result(const redisReply *r, int *res, enum job_state *state)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_INTEGER)
        return -1;
    *res = (int)r->element[0]->integer;
    if (*res < 0 || *res > 3 || (r->element[1]->type == REDIS_REPLY_STRING && r->element[1]->len &&
                                 parse_state(r->element[1], state) < 0))
        return -1;
    return 0;
}

/* Queues the add script of one job on the connection. */
static void append_add(struct store *st, const struct job *job, int64_t retention_ms)
{
    msgpack_sbuffer buf;
    char key[KEY_MAX], ttl[32];
    const char *argv[4];
    size_t argvlen[4];

    msgpack_sbuffer_init(&buf);
    job_record_pack(job, &buf);
    job_key(st, job->id, key, sizeof(key));
    snprintf(ttl, sizeof(ttl), "%lld", (long long)(job->due_ms - job->created_ms + retention_ms));
    argv[0] = buf.data;   argvlen[0] = buf.size;
    argv[1] = ttl;        argvlen[1] = strlen(ttl);
    argv[2] = job->topic; argvlen[2] = strlen(job->topic);
    argv[3] = job->body;  argvlen[3] = job->body_len;
    append_eval(st, add_lua, key, 4, argv, argvlen);   /* copies the arguments */
    msgpack_sbuffer_destroy(&buf);
}

int store_add_batch(struct store *st, size_t n, const struct job *const *jobs, int64_t retention_ms,
                    struct store_add_answer *out, char *err, size_t errlen)
{
    if (ensure_conn(st, err, errlen) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        append_add(st, jobs[i], retention_ms);
    for (size_t i = 0; i < n; i++) {
        redisReply *r = read_reply(st, err, errlen);
        if (!r)
            return -1;
        int res;
        out[i].ok = read_result(r, &res, &out[i].state) == 0;
        if (out[i].ok)
            out[i].res = (enum store_add_result)res;
        else
            snprintf(out[i].err, sizeof(out[i].err), "redis: %s",
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply to add");
        freeReplyObject(r);
    }
    return 0;
}

int store_drop_pending(struct store *st, const char *id, char *err, size_t errlen)
{
    redisReply *r = eval1(st, drop_lua, id, 0, NULL, NULL, err, errlen);

    if (!r)
        return -1;
    freeReplyObject(r);
    return 0;
}

int store_get(struct store *st, const char *id, int *found, char **data, size_t *len, char *err,
              size_t errlen)
{
    char key[KEY_MAX];
    const char *v = "";
    redisReply *r;

    *found = 0;
    job_key(st, id, key, sizeof(key));
    if (!(r = store_command(st, err, errlen, "GET %s", key))) {
        if (strncmp(err, "redis: WRONGTYPE", 16) != 0)
            return -1;
    } else if (r->type == REDIS_REPLY_STRING) {
        v = r->str;
    } else {
        freeReplyObject(r);
        return 0;
    }
    *len = r ? r->len : 0;
    if (!(*data = malloc(*len + 1))) {
        snprintf(err, errlen, "out of memory");
        if (r)
            freeReplyObject(r);
        return -1;
    }
    memcpy(*data, v, *len);
    (*data)[*len] = '\0';
    *found = 1;
    if (r)
        freeReplyObject(r);
    return 0;
}

int store_remove(struct store *st, const char *id, int64_t now_ms, int64_t retention_ms,
                 enum store_remove_result *res, enum job_state *state, char *err, size_t errlen)
{
    char now[32], ttl[32];
    const char *argv[2] = { now, ttl };
    redisReply *r;
    int rc = -1, result;

    snprintf(now, sizeof(now), "%lld", (long long)now_ms);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)retention_ms);
    if (!(r = eval1(st, remove_lua, id, 2, argv, NULL, err, errlen)))
        return -1;
    if (read_result(r, &result, state) == 0) {
        *res = (enum store_remove_result)result;
        rc = 0;
    }
    if (rc < 0)
        snprintf(err, errlen, "redis: unexpected reply to remove");
    freeReplyObject(r);
    return rc;
}

/* Reads one claim reply into out. */
static void read_claim(const redisReply *r, struct store_claim *out)
{
    memset(out, 0, sizeof(*out));
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        return;
    out->found = 1;
    if (r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "stale") == 0) {
        out->stale = 1;
        return;
    }
    if (r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "busy") == 0) {
        out->busy = 1;
        return;
    }
    if (parse_state(r->element[0], &out->before) < 0)
        out->before = JOB_DELIVERING;   /* no record of ours: claimed, and the value does not decode */
    if (r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING &&
        (out->data = malloc(r->element[1]->len + 1))) {
        memcpy(out->data, r->element[1]->str, r->element[1]->len);
        out->len = r->element[1]->len;
        out->claimed = 1;
    }
}

/* Sends n single-key EVALs in one pipeline, item i with the argc arguments argv[i * argc ...],
 * and hands each reply to fn. A Redis error reply to one script fails the batch, as does a
 * connection error. */
static int pipeline(struct store *st, const char *script, size_t n, const char *const *ids,
                    int argc, const char *const *argv, void (*fn)(const redisReply *, void *, size_t),
                    void *opaque, char *err, size_t errlen)
{
    char key[KEY_MAX];
    int rc = 0;

    if (ensure_conn(st, err, errlen) < 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        job_key(st, ids[i], key, sizeof(key));
        append_eval(st, script, key, argc, argv + i * (size_t)argc, NULL);
    }
    for (size_t i = 0; i < n; i++) {
        redisReply *r = read_reply(st, err, errlen);
        if (!r)
            return -1;
        if (r->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "redis: %s", r->str);
            rc = -1;
        } else if (rc == 0 && fn) {
            fn(r, opaque, i);
        }
        freeReplyObject(r);
    }
    return rc;
}

static void claim_reply(const redisReply *r, void *opaque, size_t i)
{
    read_claim(r, &((struct store_claim *)opaque)[i]);
}

int store_claim_batch(struct store *st, size_t n, const char *const *ids, const char *const *args,
                      struct store_claim *out, char *err, size_t errlen)
{
    memset(out, 0, n * sizeof(*out));
    if (pipeline(st, claim_lua, n, ids, 3, args, claim_reply, out, err, errlen) == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        free(out[i].data);
        out[i].data = NULL;
    }
    return -1;
}

int store_mark_batch(struct store *st, size_t n, const char *const *ids,
                     const enum job_state *states, int64_t now_ms, int64_t retention_ms, char *err,
                     size_t errlen)
{
    char now[32], ttl[32], letters[JOB_FAILED + 1][2];
    const char **argv = malloc(3 * n * sizeof(*argv) + 1);
    int rc;

    if (!argv) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(now, sizeof(now), "%lld", (long long)now_ms);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)retention_ms);
    for (int s = JOB_PENDING; s <= JOB_FAILED; s++)
        letters[s][0] = job_state_letter((enum job_state)s), letters[s][1] = '\0';
    for (size_t i = 0; i < n; i++) {
        argv[3 * i] = letters[states[i]];
        argv[3 * i + 1] = now;
        argv[3 * i + 2] = ttl;
    }
    rc = pipeline(st, mark_lua, n, ids, 3, argv, NULL, NULL, err, errlen);
    free(argv);
    return rc;
}

int store_ping(struct store *st, char *err, size_t errlen)
{
    redisReply *r;
    int rc;

    if (ensure_conn(st, err, errlen) < 0)
        return -1;
    if (!(r = redisCommand(st->c, "PING"))) {
        snprintf(err, errlen, "redis: %s", st->c->errstr);
        drop_conn(st);
        return -1;
    }
    rc = r->type == REDIS_REPLY_ERROR ? -1 : 0;
    if (rc < 0)
        snprintf(err, errlen, "redis: %s", r->str);
    freeReplyObject(r);
    return rc;
}

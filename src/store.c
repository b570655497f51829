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

/* KEYS[1] job key. ARGV: data, ttl ms, topic, body, due ms. Returns {result, state}.
 * due_ms is kept beside the data so that a claim can tell a stale delay-topic message (of an
 * earlier job with the same id) from the one of this job without decoding the record. */
static const char add_lua[] =
    "local st = redis.call('HGET', KEYS[1], 'state')\n"
    "if not st then\n"
    "  redis.call('HSET', KEYS[1], 'data', ARGV[1], 'state', 'pending', 'due_ms', ARGV[5])\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return {0, 'pending'}\n"
    "end\n"
    "if st ~= 'cancelled' then\n"
    "  local ok, rec = pcall(cmsgpack.unpack, redis.call('HGET', KEYS[1], 'data'))\n"
    "  if ok and type(rec) == 'table' and rec.topic == ARGV[3] and rec.body == ARGV[4] then\n"
    "    return {1, st}\n"
    "  end\n"
    "end\n"
    "return {2, st}\n";

static const char drop_lua[] =
    "if redis.call('HGET', KEYS[1], 'state') == 'pending' then\n"
    "  return redis.call('DEL', KEYS[1])\n"
    "end\n"
    "return 0\n";

/* ARGV: now ms, ttl ms. Returns {result, state}: 0 removed, 1 no job, 2 too late. */
static const char remove_lua[] =
    "local st = redis.call('HGET', KEYS[1], 'state')\n"
    "if not st then return {1, ''} end\n"
    "if st == 'pending' then\n"
    "  redis.call('HSET', KEYS[1], 'state', 'cancelled', 'cancelled_ms', ARGV[1])\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return {0, 'cancelled'}\n"
    "end\n"
    "return {2, st}\n";

/* ARGV: the message's due ms or "", its claim token "<instance>:<topic>/<partition>/<offset>",
 * and "<instance>:". Returns {} when no record, {'stale'} when the message is not this record's,
 * {'busy'} when another message of the job (a copy left by a crash in the middle of a move down
 * the levels) is being delivered by this instance, {state} when not claimable, {state, data}
 * when claimed. A delivering record claimed by another instance (which crashed) is taken over. */
static const char claim_lua[] =
    "local v = redis.call('HMGET', KEYS[1], 'state', 'data', 'due_ms', 'claim')\n"
    "if not v[1] then return {} end\n"
    "if ARGV[1] ~= '' and v[3] and v[3] ~= ARGV[1] then return {'stale'} end\n"
    "if v[1] == 'delivering' and v[4] and v[4] ~= ARGV[2] and\n"
    "   string.sub(v[4], 1, #ARGV[3]) == ARGV[3] then return {'busy'} end\n"
    "if (v[1] == 'pending' or v[1] == 'delivering') and v[2] then\n"
    "  redis.call('HSET', KEYS[1], 'state', 'delivering', 'claim', ARGV[2])\n"
    "  return {v[1], v[2]}\n"
    "end\n"
    "return {v[1]}\n";

/* ARGV: final state (delivered or failed), now ms, ttl ms. */
static const char mark_lua[] =
    "if redis.call('HGET', KEYS[1], 'state') == 'delivering' then\n"
    "  redis.call('HSET', KEYS[1], 'state', ARGV[1], ARGV[1] .. '_ms', ARGV[2])\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
    "  return 1\n"
    "end\n"
    "return 0\n";

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

static int parse_state(const redisReply *r, enum job_state *state)
{
    return r->type == REDIS_REPLY_STRING ? job_state_parse(r->str, r->len, state) : -1;
}

/* Queues the add script of one job on the connection. */
static void append_add(struct store *st, const struct job *job, int64_t retention_ms)
{
    msgpack_sbuffer buf;
    char key[KEY_MAX], ttl[32], due[32];
    const char *argv[5];
    size_t argvlen[5];

    msgpack_sbuffer_init(&buf);
    job_pack(job, &buf);
    job_key(st, job->id, key, sizeof(key));
    snprintf(ttl, sizeof(ttl), "%lld", (long long)(job->due_ms - job->created_ms + retention_ms));
    snprintf(due, sizeof(due), "%lld", (long long)job->due_ms);
    argv[0] = buf.data;   argvlen[0] = buf.size;
    argv[1] = ttl;        argvlen[1] = strlen(ttl);
    argv[2] = job->topic; argvlen[2] = strlen(job->topic);
    argv[3] = job->body;  argvlen[3] = job->body_len;
    argv[4] = due;        argvlen[4] = strlen(due);
    append_eval(st, add_lua, key, 5, argv, argvlen);   /* copies the arguments */
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
        out[i].ok = r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
                    r->element[0]->type == REDIS_REPLY_INTEGER &&
                    parse_state(r->element[1], &out[i].state) == 0;
        if (out[i].ok)
            out[i].res = (enum store_add_result)r->element[0]->integer;
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

int store_get(struct store *st, const char *id, int *found, char **data, size_t *len,
              enum job_state *state, int64_t *delivered_ms, char *err, size_t errlen)
{
    char key[KEY_MAX];
    redisReply *r;
    int rc = -1;

    *found = 0;
    if (ensure_conn(st, err, errlen) < 0)
        return -1;
    job_key(st, id, key, sizeof(key));
    r = redisCommand(st->c, "HMGET %s data state delivered_ms", key);
    if (!r) {
        snprintf(err, errlen, "redis: %s", st->c->errstr);
        drop_conn(st);
        return -1;
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 3) {
        snprintf(err, errlen, "redis: %s", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        goto out;
    }
    rc = 0;
    if (r->element[0]->type != REDIS_REPLY_STRING)
        goto out;
    if (parse_state(r->element[1], state) < 0) {
        snprintf(err, errlen, "record %s has no valid state", key);
        rc = -2;
        goto out;
    }
    *delivered_ms = -1;
    if (r->element[2]->type == REDIS_REPLY_STRING)
        *delivered_ms = strtoll(r->element[2]->str, NULL, 10);
    *len = r->element[0]->len;
    if (!(*data = malloc(*len + 1))) {
        rc = -1;
        goto out;
    }
    memcpy(*data, r->element[0]->str, *len);
    *found = 1;
out:
    freeReplyObject(r);
    return rc;
}

int store_remove(struct store *st, const char *id, int64_t now_ms, int64_t retention_ms,
                 enum store_remove_result *res, enum job_state *state, char *err, size_t errlen)
{
    char now[32], ttl[32];
    const char *argv[2] = { now, ttl };
    redisReply *r;
    int rc = -1;

    snprintf(now, sizeof(now), "%lld", (long long)now_ms);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)retention_ms);
    if (!(r = eval1(st, remove_lua, id, 2, argv, NULL, err, errlen)))
        return -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_INTEGER) {
        *res = (enum store_remove_result)r->element[0]->integer;
        if (*res == STORE_NO_JOB || parse_state(r->element[1], state) == 0)
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
        out->before = JOB_DELIVERING;   /* unknown state text: treat as claimable, data decides */
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
    char now[32], ttl[32];
    const char **argv = malloc(3 * n * sizeof(*argv) + 1);
    int rc;

    if (!argv) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(now, sizeof(now), "%lld", (long long)now_ms);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)retention_ms);
    for (size_t i = 0; i < n; i++) {
        argv[3 * i] = job_state_name(states[i]);
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

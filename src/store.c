#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis.h>

#include "store.h"

#define KEY_MAX (CONFIG_STR_MAX + 4 + JOB_ID_MAX + 1)   /* prefix + "job:" + id */

/* The record scripts, loaded once per connection (SCRIPT LOAD) and called by EVALSHA, so that
 * neither their text nor its SHA-1 is sent or computed again for every job. */
enum script { S_ADD, S_DROP, S_REMOVE, S_CLAIM, S_MARK, S_COUNT };

struct store {
    const struct config *cfg;
    redisContext *c;
    char sha[S_COUNT][41];
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

static const char *const script_text[S_COUNT] = { add_lua, drop_lua, remove_lua, claim_lua, mark_lua };

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

/* SCRIPT LOAD of every record script; their SHA-1s go to st->sha. */
static int load_scripts(struct store *st, char *err, size_t errlen)
{
    for (int i = 0; i < S_COUNT; i++) {
        redisReply *r = redisCommand(st->c, "SCRIPT LOAD %s", script_text[i]);
        int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;

        if (ok)
            memcpy(st->sha[i], r->str, 41);
        else
            snprintf(err, errlen, "redis SCRIPT LOAD: %s",
                     !r ? st->c->errstr : r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        if (r)
            freeReplyObject(r);
        if (!ok)
            return -1;
    }
    return 0;
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
        (cfg->redis.db && setup_cmd(st, err, errlen, "SELECT %s", db) < 0) ||
        load_scripts(st, err, errlen) < 0) {
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

/* Queues cmd (EVAL or EVALSHA) script 1 key argv... on the connection. argc <= EVAL_ARGS_MAX. */
static void append_eval(struct store *st, const char *cmd, const char *script, const char *key,
                        int argc, const char *const *argv, const size_t *argvlen)
{
    const char *a[4 + EVAL_ARGS_MAX] = { cmd, script, "1", key };
    size_t l[4 + EVAL_ARGS_MAX] = { strlen(cmd), strlen(script), 1, strlen(key) };

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
    append_eval(st, "EVAL", script, key, argc, argv, argvlen);
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

/* Queues EVALSHA of script s on job id's record. */
static void append_script(struct store *st, enum script s, const char *id, int argc,
                          const char *const *argv, const size_t *argvlen)
{
    char key[KEY_MAX];

    job_key(st, id, key, sizeof(key));
    append_eval(st, "EVALSHA", st->sha[s], key, argc, argv, argvlen);   /* copies the arguments */
}

static void free_replies(redisReply **r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        freeReplyObject(r[i]);
}

/* Queues item i of a batch. */
typedef void append_fn(struct store *st, size_t i, const void *ctx);

/* Sends n script calls in one pipeline (append queues call i) and returns their n replies
 * (free them with free_batch), or NULL on a connection error (err set). When Redis has lost the
 * scripts (SCRIPT FLUSH, or a failover to a server that never had them) they are loaded again
 * and the whole pipeline is sent once more: every record script may run twice (add then finds
 * its own record, a claim its own token, a mark or remove an already final state). */
static redisReply **run_scripts(struct store *st, size_t n, append_fn *append, const void *ctx,
                                char *err, size_t errlen)
{
    redisReply **out = malloc((n ? n : 1) * sizeof(*out));

    if (!out) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (int attempt = 0;; attempt++) {
        int lost = 0;

        if (ensure_conn(st, err, errlen) < 0)
            break;
        for (size_t i = 0; i < n; i++)
            append(st, i, ctx);
        for (size_t i = 0; i < n; i++) {
            if (!(out[i] = read_reply(st, err, errlen))) {
                free_replies(out, i);
                free(out);
                return NULL;
            }
            lost |= out[i]->type == REDIS_REPLY_ERROR && strncmp(out[i]->str, "NOSCRIPT", 8) == 0;
        }
        if (!lost || attempt > 0)
            return out;
        free_replies(out, n);
        if (load_scripts(st, err, errlen) < 0) {
            drop_conn(st);
            break;
        }
    }
    free(out);
    return NULL;
}

static void free_batch(redisReply **r, size_t n)
{
    free_replies(r, n);
    free(r);
}

/* n calls of one script, call i on record ids[i] with the argc arguments argv[i * argc ...]. */
struct calls {
    enum script script;
    const char *const *ids;
    int argc;
    const char *const *argv;
};

static void append_call(struct store *st, size_t i, const void *ctx)
{
    const struct calls *c = ctx;

    append_script(st, c->script, c->ids[i], c->argc, c->argv + i * (size_t)c->argc, NULL);
}

/* One script call on the record of job id: its reply (caller frees), or NULL with err set on a
 * connection error or a Redis error reply. */
static redisReply *eval1(struct store *st, enum script script, const char *id, int argc,
                         const char *const *argv, char *err, size_t errlen)
{
    const struct calls c = { script, &id, argc, argv };
    redisReply **rs = run_scripts(st, 1, append_call, &c, err, errlen), *r;

    if (!rs)
        return NULL;
    r = rs[0];
    free(rs);
    return checked(st, r, err, errlen);
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

/* An add batch: the jobs and how long their records outlive their due times. */
struct adds {
    const struct job *const *jobs;
    int64_t retention_ms;
};

/* Queues the add script of job i. */
static void append_add(struct store *st, size_t i, const void *ctx)
{
    const struct adds *a = ctx;
    const struct job *job = a->jobs[i];
    msgpack_sbuffer buf;
    char ttl[32];
    const char *argv[4];
    size_t argvlen[4];

    msgpack_sbuffer_init(&buf);
    job_record_pack(job, &buf);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)(job->due_ms - job->created_ms + a->retention_ms));
    argv[0] = buf.data;   argvlen[0] = buf.size;
    argv[1] = ttl;        argvlen[1] = strlen(ttl);
    argv[2] = job->topic; argvlen[2] = strlen(job->topic);
    argv[3] = job->body;  argvlen[3] = job->body_len;
    append_script(st, S_ADD, job->id, 4, argv, argvlen);
    msgpack_sbuffer_destroy(&buf);
}

int store_add_batch(struct store *st, size_t n, const struct job *const *jobs, int64_t retention_ms,
                    struct store_add_answer *out, char *err, size_t errlen)
{
    const struct adds a = { jobs, retention_ms };
    redisReply **r = run_scripts(st, n, append_add, &a, err, errlen);

    if (!r)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int res;
        out[i].ok = read_result(r[i], &res, &out[i].state) == 0;
        if (out[i].ok)
            out[i].res = (enum store_add_result)res;
        else
            snprintf(out[i].err, sizeof(out[i].err), "redis: %s",
                     r[i]->type == REDIS_REPLY_ERROR ? r[i]->str : "unexpected reply to add");
    }
    free_batch(r, n);
    return 0;
}

int store_drop_pending(struct store *st, const char *id, char *err, size_t errlen)
{
    redisReply *r = eval1(st, S_DROP, id, 0, NULL, err, errlen);

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
    if (!(r = eval1(st, S_REMOVE, id, 2, argv, err, errlen)))
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

/* Runs n calls of script in one pipeline, item i with the argc arguments argv[i * argc ...],
 * and hands each reply to fn. A Redis error reply to one call fails the batch, as does a
 * connection error. */
static int pipeline(struct store *st, enum script script, size_t n, const char *const *ids,
                    int argc, const char *const *argv, void (*fn)(const redisReply *, void *, size_t),
                    void *opaque, char *err, size_t errlen)
{
    const struct calls c = { script, ids, argc, argv };
    redisReply **r = run_scripts(st, n, append_call, &c, err, errlen);
    int rc = 0;

    if (!r)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (r[i]->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "redis: %s", r[i]->str);
            rc = -1;
        }
    }
    for (size_t i = 0; i < n && rc == 0 && fn; i++)
        fn(r[i], opaque, i);
    free_batch(r, n);
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
    if (pipeline(st, S_CLAIM, n, ids, 3, args, claim_reply, out, err, errlen) == 0)
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
    rc = pipeline(st, S_MARK, n, ids, 3, argv, NULL, NULL, err, errlen);
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

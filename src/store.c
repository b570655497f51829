/* store: job records in Redis over hiredis: the Lua scripts that add, claim, mark, remove and
 * drop records atomically, loaded once per connection and run in pipelines of 128 records per
 * call. The contract is in include/store.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis.h>

#include "sentinel.h"
#include "store.h"

#define KEY_MAX (CONFIG_STR_MAX + 4 + JOB_ID_MAX + 1)   /* prefix + "job:" + id */

/* The record scripts, loaded once per connection (SCRIPT LOAD) and called by EVALSHA, so that
 * neither their text nor its SHA-1 is sent or computed again for every job. */
enum script { S_ADD, S_DROP, S_REMOVE, S_CLAIM, S_MARK, S_COUNT };

/* A Sentinel is asked this long at most (connect and answer), so that a dead one costs little
 * before the next is asked; never longer than redis.timeout_ms. */
#define SENTINEL_TIMEOUT_MS 500

struct store {
    const struct config *cfg;
    redisContext *c;
    int elsewhere;              /* a reply said this is not the master: reconnect before use */
    int unconfirmed;            /* the last pipeline's writes lack redis.wait_replicas replicas */
    char wait_err[160];         /* why, when unconfirmed */
    int order[CONFIG_SENTINELS_MAX];   /* the Sentinels, in the order they are asked */
    char sha[S_COUNT][41];
    char why[96];               /* conn_error's text for a timeout */
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
 * Add, ARGV per record: record, ttl ms. Returns {result, state letter} per record: 0 added,
 * 1 the same job is there (same topic and body; then also its claim field, a pending record's
 * tag, and due time, so that the add can send its message again), 2 another job has the id, 3
 * the key holds no record; or the
 * error of its SET (such as OOM) as that record's answer, not the whole call's.
 * A new id, the usual case, costs one SET NX; the record there is read only when that fails. */
static const char add_lua[] =
    "local function one(record, ttl, key)\n"
    "local r = redis.pcall('SET', key, record, 'PX', ttl, 'NX')\n"
    "if type(r) == 'table' and r.err then return r end\n"
    "if r then return {0, 'p'} end\n"
    READ_RECORD
    "if not st then return {3, ''} end\n"
    "if st ~= 'c' then\n"
    "  local ok, rec = pcall(cmsgpack.unpack, tail())\n"
    "  local mine = cmsgpack.unpack(string.sub(record, select(5, string.match(record, '" JOB_RECORD_HEAD "'))))\n"
    "  if ok and type(rec) == 'table' and rec[1] == mine[1] and rec[2] == mine[2] then\n"
    "    return {1, st, claim, due}\n"
    "  end\n"
    "end\n"
    "return {2, st}\n"
    END_EACH("one(ARGV[2 * i - 1], ARGV[2 * i], KEYS[i])");

static const char drop_lua[] =
    ONE_RECORD
    "if st == 'p' then return redis.call('DEL', key) end\n"
    "return 0\n";

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

/* Claim, ARGV: "<instance>:", then per record the message's due ms or "", its dq-tag or "",
 * and its claim token "<instance>:<message>" (forwarder.c). Returns per record: {} when no
 * record, {'stale'} when the message is an earlier job's with this id (its due time differs),
 * {'foreign'} when it is not one of the pending job's own messages (its tag is not the one the
 * record holds in its claim field: any producer can write a dq-id, not the tag; a record written
 * before tags holds JOB_CLAIM_ROOM and asks for none), {'busy'} when another message of the job
 * (a copy
 * left by a crash in the middle of a move down the levels) is being delivered by this instance,
 * {state} when not claimable, {state, value} when claimed, and {'', value} for a value that is
 * no record (the caller dead-letters it). A delivering record claimed by another instance
 * (which crashed) is taken over. The token goes over the room a pending record holds for it
 * (SETRANGE: the value is not copied, and the AOF gets the head instead of the whole record);
 * a record written before that room existed is rewritten whole. */
static const char claim_lua[] =
    WRITE_HEAD
    EACH_RECORD("mdue, mtag, token, instance")
    "if not v then return {} end\n"
    "if not st then return {'', v} end\n"
    "if mdue ~= '' and due ~= mdue then return {'stale'} end\n"
    "if st == 'p' and claim ~= '' and claim ~= '" JOB_CLAIM_ROOM "' and claim ~= mtag then\n"
    "  return {'foreign'}\n"
    "end\n"
    "if st == 's' and claim ~= token and string.sub(claim, 1, #instance) == instance then\n"
    "  return {'busy'}\n"
    "end\n"
    "if st == 'p' or st == 's' then\n"
    "  write_head(key, v, at, 's' .. due .. '||' .. token .. '|')\n"
    "  return {st, v}\n"
    "end\n"
    "return {st}\n"
    END_EACH("one(ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1], ARGV[1], KEYS[i])");

/* Mark, ARGV per record: the head its claim wrote ("s<due>||<token>|"), the head to write in its
 * place ("<letter><due>|<now>|<rest of the token>|": the stamp takes the token's place, so the
 * two have the same length), a ttl in ms to renew the expiry with, or "" to keep it, and why the
 * job failed, or "" (appended to the record as a msgpack string, see job.h).
 * Returns 1 per record marked, 0 per record no longer claimed by that token (delivered, or taken
 * over by another instance). The head is compared and written in place: no read or write of
 * the tail, and a few bytes to the AOF instead of the whole value. Numbers go to redis.call as
 * strings, which Lua would otherwise format with printf's floating point. */
static const char mark_lua[] =
    "local function one(claimed, head, ttl, why, key)\n"
    "local v = redis.pcall('GETRANGE', key, '0', tostring(#claimed - 1))\n"
    "if v ~= claimed then return 0 end\n"
    "if #head == #claimed then\n"
    "  redis.call('SETRANGE', key, '0', head)\n"
    "else\n"
    "  v = redis.call('GET', key)\n"
    "  redis.call('SET', key, head .. string.sub(v, #claimed + 1), 'KEEPTTL')\n"
    "end\n"
    "if why ~= '' then redis.call('APPEND', key, cmsgpack.pack(why)) end\n"
    "if ttl ~= '' then redis.call('PEXPIRE', key, ttl) end\n"
    "return 1\n"
    END_EACH("one(ARGV[4 * i - 3], ARGV[4 * i - 2], ARGV[4 * i - 1], ARGV[4 * i], KEYS[i])");

static const char *const script_text[S_COUNT] = { add_lua, drop_lua, remove_lua, claim_lua, mark_lua };

struct store *store_new(const struct config *cfg)
{
    struct store *st = calloc(1, sizeof(*st));

    if (!st)
        return NULL;
    st->cfg = cfg;
    for (int i = 0; i < cfg->redis.nsentinels; i++)
        st->order[i] = i;
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

/* The connection's error, for a message. A read or write that timed out reads as EAGAIN's text
 * in hiredis ("Resource temporarily unavailable"): it names the timeout instead. */
static const char *conn_error(struct store *st)
{
    if (st->c->err == REDIS_ERR_IO && strcmp(st->c->errstr, strerror(EAGAIN)) == 0) {
        snprintf(st->why, sizeof(st->why), "no answer within redis.timeout_ms (%lld ms)",
                 (long long)st->cfg->redis.timeout_ms);
        return st->why;
    }
    return st->c->errstr[0] ? st->c->errstr : "no reply";
}

static void drop_conn(struct store *st)
{
    if (st->c) {
        redisFree(st->c);
        st->c = NULL;
    }
    st->elsewhere = 0;
}

/* Notes a reply that says the connection is not to the master (a replica after a failover, a
 * node still loading): the connection is dropped, and the master looked for again, before the
 * next call. */
static void note_reply(struct store *st, const redisReply *r)
{
    if (r && r->type == REDIS_REPLY_ERROR && sentinel_error_means_elsewhere(r->str))
        st->elsewhere = 1;
}

/* Runs a setup command on a fresh connection; 0 when it answers without error. */
static int setup_cmd(struct store *st, char *err, size_t errlen, const char *fmt, const char *arg)
{
    redisReply *r = redisCommand(st->c, fmt, arg);
    int rc = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;

    if (rc < 0)
        snprintf(err, errlen, "redis %s: %s", fmt, r ? r->str : conn_error(st));
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
                     !r ? conn_error(st) : r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        if (r)
            freeReplyObject(r);
        if (!ok)
            return -1;
    }
    return 0;
}

static struct timeval timeval_of(int64_t ms)
{
    return (struct timeval){ (time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000) };
}

/* AUTH with the ACL user and password when set (password alone: the default user). */
static int authenticate(struct store *st, const char *user, const char *password, char *err,
                        size_t errlen)
{
    redisReply *r;
    int rc;

    if (!password[0])
        return 0;
    r = user[0] ? redisCommand(st->c, "AUTH %s %s", user, password)
                : redisCommand(st->c, "AUTH %s", password);
    rc = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;
    if (rc < 0)
        snprintf(err, errlen, "redis AUTH: %s", r ? r->str : conn_error(st));
    if (r)
        freeReplyObject(r);
    return rc;
}

/* Connects st->c to host:port. 0, or -1 with err set and no connection. */
static int connect_to(struct store *st, const char *host, int port, int64_t timeout_ms,
                      char *err, size_t errlen)
{
    struct timeval tv = timeval_of(timeout_ms);

    st->c = redisConnectWithTimeout(host, port, tv);
    if (!st->c || st->c->err) {
        snprintf(err, errlen, "redis %s:%d: %s", host, port, st->c ? conn_error(st) : "out of memory");
        drop_conn(st);
        return -1;
    }
    redisSetTimeout(st->c, tv);
    return 0;
}

/* Asks the Sentinel at position i of st->order where the master is. 0 with host and port, or
 * -1 with err set. */
static int ask_sentinel(struct store *st, int i, char host[SENTINEL_HOST_MAX], int *port,
                        char *err, size_t errlen)
{
    const struct config *cfg = st->cfg;
    const char *addr = cfg->redis.sentinels[st->order[i]];
    int64_t timeout = cfg->redis.timeout_ms < SENTINEL_TIMEOUT_MS ? cfg->redis.timeout_ms
                                                                  : SENTINEL_TIMEOUT_MS;
    char shost[SENTINEL_HOST_MAX], why[256];
    redisReply *r = NULL;
    int sport, rc = -1;

    if (sentinel_split_addr(addr, shost, &sport) < 0) {
        snprintf(err, errlen, "Sentinel %s: not host:port", addr);
        return -1;
    }
    if (connect_to(st, shost, sport, timeout, why, sizeof(why)) < 0 ||
        authenticate(st, "", cfg->redis.sentinel_password, why, sizeof(why)) < 0 ||
        !(r = redisCommand(st->c, "SENTINEL get-master-addr-by-name %s", cfg->redis.master_name))) {
        snprintf(err, errlen, "Sentinel %s: %s", addr, st->c ? conn_error(st) : why);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING) {
        rc = sentinel_master_addr(r->element[0]->str, r->element[0]->len, r->element[1]->str,
                                  r->element[1]->len, host, port, why, sizeof(why));
        if (rc < 0)
            snprintf(err, errlen, "Sentinel %s: %s", addr, why);
    } else {
        snprintf(err, errlen, "Sentinel %s: %s", addr,
                 r->type == REDIS_REPLY_ERROR ? r->str : "knows no master of that name");
    }
    if (r)
        freeReplyObject(r);
    drop_conn(st);
    return rc;
}

/* 0 when the connected server says it is a master (ROLE), else -1 with err set: a Sentinel may
 * name a node that has not taken its new role yet. */
static int check_role(struct store *st, char *err, size_t errlen)
{
    redisReply *r = redisCommand(st->c, "ROLE");
    int rc = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0
                 ? 0 : -1;

    if (rc < 0)
        snprintf(err, errlen, "redis: the server Sentinel named is not a master (yet): %s",
                 !r ? conn_error(st) : r->type == REDIS_REPLY_ERROR ? r->str
                 : r->type == REDIS_REPLY_ARRAY && r->elements && r->element[0]->type == REDIS_REPLY_STRING
                     ? r->element[0]->str : "no role");
    if (r)
        freeReplyObject(r);
    return rc;
}

/* The master's answers may take redis.timeout_ms, and a WAIT redis.wait_timeout_ms more. */
static int64_t master_timeout_ms(const struct config *cfg)
{
    return cfg->redis.timeout_ms + (cfg->redis.wait_replicas > 0 ? cfg->redis.wait_timeout_ms : 0);
}

/* Connects to the master: the configured server, or the one the Sentinels name, asked in turn
 * (the first that answers is asked first from then on) and checked with ROLE. */
static int connect_master(struct store *st, char *err, size_t errlen)
{
    const struct config *cfg = st->cfg;
    char host[SENTINEL_HOST_MAX];
    int port;

    if (!cfg->redis.nsentinels)
        return connect_to(st, cfg->redis.host, (int)cfg->redis.port, master_timeout_ms(cfg), err, errlen);
    for (int i = 0; i < cfg->redis.nsentinels; i++) {
        if (ask_sentinel(st, i, host, &port, err, errlen) < 0)
            continue;
        sentinel_prefer(st->order, i);
        if (connect_to(st, host, port, master_timeout_ms(cfg), err, errlen) < 0)
            return -1;
        return 0;
    }
    return -1;   /* err: the last Sentinel's reason */
}

static int ensure_conn(struct store *st, char *err, size_t errlen)
{
    const struct config *cfg = st->cfg;
    char db[32];

    if (st->c && !st->c->err && !st->elsewhere)
        return 0;
    drop_conn(st);
    if (connect_master(st, err, errlen) < 0)
        return -1;
    snprintf(db, sizeof(db), "%lld", (long long)cfg->redis.db);
    if (authenticate(st, cfg->redis.username, cfg->redis.password, err, errlen) < 0 ||
        (cfg->redis.nsentinels && check_role(st, err, errlen) < 0) ||
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
        snprintf(err, errlen, "redis: %s", conn_error(st));
        drop_conn(st);
        return NULL;
    }
    note_reply(st, r);
    return r;
}

/* A reply as the store_* callers want it: NULL with err set for a connection error (the
 * connection is dropped) or a Redis error reply. */
static redisReply *checked(struct store *st, redisReply *r, char *err, size_t errlen)
{
    if (!r) {
        snprintf(err, errlen, "redis: %s", conn_error(st));
        drop_conn(st);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        note_reply(st, r);
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

static int is_noscript(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Queues WAIT for redis.wait_replicas replicas, after a pipeline's writes. WAIT counts the
 * writes made on this connection, and answers the count even when it timed out. */
static void append_wait(struct store *st)
{
    redisAppendCommand(st->c, "WAIT %lld %lld", (long long)st->cfg->redis.wait_replicas,
                       (long long)st->cfg->redis.wait_timeout_ms);
}

/* Reads WAIT's answer into st->unconfirmed (and st->wait_err). -1 on a connection error. */
static int read_wait(struct store *st, char *err, size_t errlen)
{
    redisReply *r = read_reply(st, err, errlen);
    long long want = st->cfg->redis.wait_replicas;

    if (!r)
        return -1;
    st->unconfirmed = !(r->type == REDIS_REPLY_INTEGER && r->integer >= want);
    if (st->unconfirmed)
        snprintf(st->wait_err, sizeof(st->wait_err), "redis: %s%lld of %lld replicas confirmed the "
                 "write within redis.wait_timeout_ms (%lld ms)",
                 r->type == REDIS_REPLY_ERROR ? r->str : "", 
                 r->type == REDIS_REPLY_INTEGER ? r->integer : 0LL, want,
                 (long long)st->cfg->redis.wait_timeout_ms);
    freeReplyObject(r);
    return 0;
}

int store_confirm(struct store *st, char *err, size_t errlen)
{
    st->unconfirmed = 0;
    if (st->cfg->redis.wait_replicas <= 0)
        return 0;
    if (ensure_conn(st, err, errlen) < 0)
        return -1;
    append_wait(st);
    if (read_wait(st, err, errlen) < 0)
        return -1;
    if (st->unconfirmed) {
        snprintf(err, errlen, "%s", st->wait_err);
        return -1;
    }
    return 0;
}

/* Queues item i of a batch. */
typedef void append_fn(struct store *st, size_t i, const void *ctx);

/* Sends n script calls in one pipeline (append queues call i) and returns their n replies
 * (free them with free_batch), or NULL on a connection error (err set). When Redis has lost the
 * scripts (SCRIPT FLUSH, or a failover to a server that never had them) they are loaded again
 * and the whole pipeline is sent once more: every record script may run twice (add then finds
 * its own record, a claim its own token, a mark or remove an already final state). confirm:
 * WAIT for redis.wait_replicas after the calls, setting st->unconfirmed when too few confirm. */
static redisReply **run_scripts(struct store *st, size_t n, append_fn *append, const void *ctx,
                                int confirm, char *err, size_t errlen)
{
    redisReply **out = malloc((n ? n : 1) * sizeof(*out));

    st->unconfirmed = 0;
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
        if (confirm && st->cfg->redis.wait_replicas > 0)
            append_wait(st);
        for (size_t i = 0; i < n; i++) {
            if (!(out[i] = read_reply(st, err, errlen))) {
                free_replies(out, i);
                free(out);
                return NULL;
            }
            lost |= is_noscript(out[i]);
        }
        if (confirm && st->cfg->redis.wait_replicas > 0 && read_wait(st, err, errlen) < 0) {
            free_replies(out, n);
            free(out);
            return NULL;
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

/* Called with the reply of call j (valid only during the call), or with NULL when the
 * connection failed before it came. */
typedef void reply_fn(size_t j, const redisReply *r, void *ctx);

/* As run_scripts, but each reply goes to fn as soon as it arrives, so that the caller works on
 * the first answers while Redis computes the rest; fn is called once per call. Calls answered
 * NOSCRIPT are sent once more after the scripts are loaded again. confirm: each call is followed
 * by a WAIT for redis.wait_replicas, and a call whose writes too few replicas confirmed goes to
 * fn as NULL with err saying so; the caller still works on one call's answers while Redis runs
 * the next. Returns 0, or -1 with err set when the connection failed (the calls not answered by
 * then got NULL). */
static int stream_scripts(struct store *st, size_t n, append_fn *append, const void *actx,
                          int confirm, reply_fn *fn, void *fctx, char *err, size_t errlen)
{
    size_t *todo = malloc((n ? n : 1) * sizeof(*todo)), ntodo = n;
    int waits = confirm && st->cfg->redis.wait_replicas > 0;
    int rc = -1;

    if (!todo) {
        snprintf(err, errlen, "out of memory");
        for (size_t j = 0; j < n; j++)
            fn(j, NULL, fctx);
        return -1;
    }
    for (size_t j = 0; j < n; j++)
        todo[j] = j;
    for (int attempt = 0; ntodo; attempt++) {
        size_t lost = 0, done;
        int failed;
        if (ensure_conn(st, err, errlen) < 0)
            break;
        if (attempt > 0 && load_scripts(st, err, errlen) < 0) {
            drop_conn(st);
            break;
        }
        for (size_t i = 0; i < ntodo; i++) {
            append(st, todo[i], actx);
            if (waits)
                append_wait(st);
        }
        for (done = 0; done < ntodo; done++) {
            redisReply *r = read_reply(st, err, errlen);
            if (!r)
                break;
            if (waits && read_wait(st, err, errlen) < 0) {
                freeReplyObject(r);
                break;
            }
            if (attempt == 0 && is_noscript(r)) {
                todo[lost++] = todo[done];
            } else if (waits && st->unconfirmed) {
                snprintf(err, errlen, "%s", st->wait_err);
                fn(todo[done], NULL, fctx);
            } else {
                fn(todo[done], r, fctx);
            }
            freeReplyObject(r);
        }
        failed = done < ntodo;   /* the connection: the rest are not answered */
        memmove(todo + lost, todo + done, (ntodo - done) * sizeof(*todo));
        ntodo = lost + (ntodo - done);
        if (failed)
            break;
    }
    if (!ntodo)
        rc = 0;
    for (size_t i = 0; i < ntodo; i++)
        fn(todo[i], NULL, fctx);
    free(todo);
    return rc;
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
                         const char *const *argv, int confirm, char *err, size_t errlen)
{
    const struct calls c = { script, &id, argc, argv };
    redisReply **rs = run_scripts(st, 1, append_call, &c, confirm, err, errlen), *r;

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
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || r->element[0]->type != REDIS_REPLY_INTEGER)
        return -1;
    *res = (int)r->element[0]->integer;
    if (*res < 0 || *res > 3 || (r->element[1]->type == REDIS_REPLY_STRING && r->element[1]->len &&
                                 parse_state(r->element[1], state) < 0))
        return -1;
    return 0;
}

#define CHUNK_MAX 128   /* records per call of a looped script (add, claim, mark) */

/* A looped script over n records: its nshared arguments, then per arguments for each record
 * (record i's at args[i * per]). a, l and keys are the scratch of one call. */
struct chunked {
    enum script script;
    size_t n;
    const char *const *ids;
    int nshared;
    const char *const *shared;
    int per;
    const char *const *args;
    const size_t *argslen;      /* NULL: text arguments, strlen */
    const char **a;
    size_t *l;
    char (*keys)[KEY_MAX];
};

/* How many script calls a batch of n records takes. */
static size_t chunks_of(size_t n)
{
    return (n + CHUNK_MAX - 1) / CHUNK_MAX;
}

static size_t chunk_size(size_t n, size_t j)
{
    return n - j * CHUNK_MAX < CHUNK_MAX ? n - j * CHUNK_MAX : CHUNK_MAX;
}

/* Queues call j: EVALSHA sha k key... shared... args... for records [j * CHUNK_MAX, + k). */
static void append_chunk(struct store *st, size_t j, const void *ctx)
{
    const struct chunked *c = ctx;
    size_t first = j * CHUNK_MAX, k = chunk_size(c->n, j), argc = 0;
    char nkeys[24];

    snprintf(nkeys, sizeof(nkeys), "%zu", k);
    c->a[argc] = "EVALSHA", c->l[argc++] = 7;
    c->a[argc] = st->sha[c->script], c->l[argc++] = 40;
    c->a[argc] = nkeys, c->l[argc++] = strlen(nkeys);
    for (size_t i = 0; i < k; i++) {
        job_key(st, c->ids[first + i], c->keys[i], KEY_MAX);
        c->a[argc] = c->keys[i], c->l[argc++] = strlen(c->keys[i]);
    }
    for (int i = 0; i < c->nshared; i++)
        c->a[argc] = c->shared[i], c->l[argc++] = strlen(c->shared[i]);
    for (size_t i = first * (size_t)c->per; i < (first + k) * (size_t)c->per; i++)
        c->a[argc] = c->args[i], c->l[argc++] = c->argslen ? c->argslen[i] : strlen(c->args[i]);
    redisAppendCommandArgv(st->c, (int)argc, c->a, c->l);   /* copies the arguments */
}

/* The scratch of one call of c. 0, or -1 (out of memory, err set; chunked_release still). */
static int chunked_alloc(struct chunked *c, char *err, size_t errlen)
{
    size_t argc = 3 + CHUNK_MAX + (size_t)c->nshared + CHUNK_MAX * (size_t)c->per;

    c->a = malloc(argc * sizeof(*c->a));
    c->l = malloc(argc * sizeof(*c->l));
    c->keys = malloc(CHUNK_MAX * sizeof(*c->keys));
    if (c->a && c->l && c->keys)
        return 0;
    snprintf(err, errlen, "out of memory");
    return -1;
}

static void chunked_release(struct chunked *c)
{
    free(c->a);
    free(c->l);
    free(c->keys);
}

/* Runs c's script over its records, CHUNK_MAX to a call, all calls in one pipeline. Returns
 * the calls' replies (free_batch(r, chunks_of(n))), with item[i] set to record i's reply inside
 * them: the call's error reply when the call failed, NULL when the reply is not one per
 * record. NULL with err set on a connection error. */
static redisReply **run_chunked(struct store *st, struct chunked *c, const redisReply **item,
                                char *err, size_t errlen)
{
    size_t calls = chunks_of(c->n);
    redisReply **r = NULL;

    if (chunked_alloc(c, err, errlen) == 0)
        r = run_scripts(st, calls, append_chunk, c, 1, err, errlen);
    chunked_release(c);
    for (size_t j = 0; r && j < calls; j++) {
        size_t k = chunk_size(c->n, j);
        int failed = r[j]->type == REDIS_REPLY_ERROR;
        int fits = r[j]->type == REDIS_REPLY_ARRAY && r[j]->elements == k;
        for (size_t i = 0; i < k; i++)
            item[j * CHUNK_MAX + i] = failed ? r[j] : fits ? r[j]->element[i] : NULL;
    }
    return r;
}

/* 0 when every item is the script's reply, else -1 with err naming the first failure. */
static int all_answered(const redisReply *const *item, size_t n, const char *what, char *err,
                        size_t errlen)
{
    for (size_t i = 0; i < n; i++) {
        if (!item[i] || item[i]->type == REDIS_REPLY_ERROR) {
            snprintf(err, errlen, "redis: %s", item[i] ? item[i]->str : what);
            return -1;
        }
    }
    return 0;
}

/* An add's result; for the same job already there, the tag and due time of its record. */
static void read_duplicate(const redisReply *r, int res, struct store_add_answer *out)
{
    out->res = (enum store_add_result)res;
    out->tag[0] = '\0';
    out->due_ms = -1;
    if (res != STORE_DUPLICATE || r->elements < 4 || r->element[2]->type != REDIS_REPLY_STRING ||
        r->element[3]->type != REDIS_REPLY_STRING)
        return;
    if (r->element[2]->len == JOB_TAG_LEN && strcmp(r->element[2]->str, JOB_CLAIM_ROOM) != 0)
        memcpy(out->tag, r->element[2]->str, JOB_TAG_LEN + 1);   /* else a record without one */
    out->due_ms = strtoll(r->element[3]->str, NULL, 10);
}

/* Adds whose records too few replicas confirmed fail, and the records they wrote are dropped:
 * a failover could otherwise lose a job that was answered, or keep one that was refused. */
static void refuse_unconfirmed(struct store *st, size_t n, const struct job *const *jobs,
                               struct store_add_answer *out)
{
    char lack[sizeof(st->wait_err)], err[256];

    snprintf(lack, sizeof(lack), "%s", st->wait_err);   /* the drops run scripts of their own */
    for (size_t i = 0; i < n; i++) {
        int undone = !(out[i].ok && out[i].res == STORE_ADDED) ||
                     store_drop_pending(st, jobs[i]->id, err, sizeof(err)) == 0;
        out[i].ok = 0;
        snprintf(out[i].err, sizeof(out[i].err), "%.120s%s", lack,
                 undone ? "" : "; undoing the record failed too");
    }
}

int store_add_batch(struct store *st, size_t n, const struct job *const *jobs, int64_t retention_ms,
                    struct store_add_answer *out, char *err, size_t errlen)
{
    msgpack_sbuffer *bufs = calloc(n ? n : 1, sizeof(*bufs));
    char (*ttl)[24] = malloc((n ? n : 1) * sizeof(*ttl));
    const char **ids = malloc((n ? n : 1) * sizeof(*ids)), **args = malloc(2 * n * sizeof(*args) + 1);
    size_t *lens = malloc(2 * n * sizeof(*lens) + 1);
    const redisReply **item = malloc((n ? n : 1) * sizeof(*item));
    struct chunked c = { .script = S_ADD, .n = n, .ids = ids, .per = 2, .args = args, .argslen = lens };
    redisReply **r = NULL;

    if (!bufs || !ttl || !ids || !args || !lens || !item) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const struct job *job = jobs[i];
        msgpack_sbuffer_init(&bufs[i]);
        job_record_pack(job, &bufs[i]);
        snprintf(ttl[i], sizeof(ttl[i]), "%lld", (long long)(job->due_ms - job->created_ms + retention_ms));
        ids[i] = job->id;
        args[2 * i] = bufs[i].data,     lens[2 * i] = bufs[i].size;
        args[2 * i + 1] = ttl[i],       lens[2 * i + 1] = strlen(ttl[i]);
    }
    if (!(r = run_chunked(st, &c, item, err, errlen)))
        goto done;
    for (size_t i = 0; i < n; i++) {
        int res;
        out[i].ok = item[i] && item[i]->type != REDIS_REPLY_ERROR &&
                    read_result(item[i], &res, &out[i].state) == 0;
        if (out[i].ok)
            read_duplicate(item[i], res, &out[i]);
        else
            snprintf(out[i].err, sizeof(out[i].err), "redis: %s",
                     item[i] && item[i]->type == REDIS_REPLY_ERROR ? item[i]->str : "unexpected reply to add");
    }
    free_batch(r, chunks_of(n));
    if (st->unconfirmed)
        refuse_unconfirmed(st, n, jobs, out);
done:
    for (size_t i = 0; bufs && i < n; i++)
        msgpack_sbuffer_destroy(&bufs[i]);
    free(bufs);
    free(ttl);
    free(ids);
    free(args);
    free(lens);
    free(item);
    return r ? 0 : -1;
}

int store_drop_pending(struct store *st, const char *id, char *err, size_t errlen)
{
    redisReply *r = eval1(st, S_DROP, id, 0, NULL, 0, err, errlen);   /* nothing rests on it */

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
    if (!(r = eval1(st, S_REMOVE, id, 2, argv, 1, err, errlen)))
        return -1;
    if (st->unconfirmed) {
        snprintf(err, errlen, "%s, so whether the job was removed is not known; removing it again "
                 "is safe", st->wait_err);
        freeReplyObject(r);
        return -1;
    }
    if (read_result(r, &result, state) == 0) {
        *res = (enum store_remove_result)result;
        rc = 0;
    }
    if (rc < 0)
        snprintf(err, errlen, "redis: unexpected reply to remove");
    freeReplyObject(r);
    return rc;
}

/* A record's claim from its answer r; data points into r. */
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
    if (r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "foreign") == 0) {
        out->foreign = 1;
        return;
    }
    if (parse_state(r->element[0], &out->before) < 0)
        out->before = JOB_DELIVERING;   /* no record of ours: claimed, and the value does not decode */
    if (r->elements == 2 && r->element[1]->type == REDIS_REPLY_STRING) {
        out->data = r->element[1]->str;
        out->len = r->element[1]->len;
        out->claimed = 1;
    }
}

struct claim_stream {
    size_t n;
    store_claim_fn *fn;
    void *ctx;
    const char *conn_err;   /* why a call has no reply */
};

/* The reply of claim call j: one answer per record of its chunk. */
static void claim_reply(size_t j, const redisReply *r, void *vctx)
{
    const struct claim_stream *cs = vctx;
    size_t first = j * CHUNK_MAX, k = chunk_size(cs->n, j);
    int fits = r && r->type == REDIS_REPLY_ARRAY && r->elements == k;
    struct store_claim c;
    char why[256];

    for (size_t i = 0; i < k; i++) {
        const redisReply *item = fits ? r->element[i] : r;
        if (fits && item->type != REDIS_REPLY_ERROR) {
            read_claim(item, &c);
            cs->fn(cs->ctx, first + i, &c, NULL);
            continue;
        }
        snprintf(why, sizeof(why), "redis: %s", !r ? cs->conn_err
                                                : item->type == REDIS_REPLY_ERROR ? item->str
                                                : "unexpected reply to claim");
        cs->fn(cs->ctx, first + i, NULL, why);
    }
}

int store_claim_batch(struct store *st, size_t n, const char *const *ids, const char *instance,
                      const char *const *args, store_claim_fn *fn, void *ctx, char *err,
                      size_t errlen)
{
    struct chunked c = { .script = S_CLAIM, .n = n, .ids = ids, .nshared = 1, .shared = &instance,
                         .per = 3, .args = args };
    struct claim_stream cs = { n, fn, ctx, err };
    int rc = -1;

    if (chunked_alloc(&c, err, errlen) == 0)
        /* A record must not be delivered on a claim that a failover could take back: each
         * chunk's claims are confirmed before they are answered. */
        rc = stream_scripts(st, chunks_of(n), append_chunk, &c, 1, claim_reply, &cs, err, errlen);
    else
        for (size_t j = 0; j < chunks_of(n); j++)
            claim_reply(j, NULL, &cs);
    chunked_release(&c);
    return rc;
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

int store_mark_batch(struct store *st, size_t n, const struct store_mark *marks, int64_t now_ms,
                     int64_t retention_ms, char *err, size_t errlen)
{
    struct mark_args *a = malloc((n ? n : 1) * sizeof(*a));
    const char **ids = malloc((n ? n : 1) * sizeof(*ids));
    const char **argv = malloc((n ? n : 1) * 4 * sizeof(*argv));
    const redisReply **item = malloc((n ? n : 1) * sizeof(*item));
    struct chunked c = { .script = S_MARK, .n = n, .ids = ids, .per = 4, .args = argv };
    redisReply **r;
    int rc = -1;

    if (!a || !ids || !argv || !item) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        mark_args(&marks[i], now_ms, retention_ms, &a[i]);
        ids[i] = marks[i].id;
        argv[4 * i] = a[i].claimed;
        argv[4 * i + 1] = a[i].head;
        argv[4 * i + 2] = a[i].ttl;
        argv[4 * i + 3] = marks[i].error ? marks[i].error : "";
    }
    if ((r = run_chunked(st, &c, item, err, errlen))) {
        rc = all_answered(item, n, "unexpected reply to mark", err, errlen);
        free_batch(r, chunks_of(n));
        if (rc == 0 && st->unconfirmed) {
            snprintf(err, errlen, "%s", st->wait_err);
            rc = -1;
        }
    }
out:
    free(a);
    free(ids);
    free(argv);
    free(item);
    return rc;
}

int store_ping(struct store *st, char *err, size_t errlen)
{
    redisReply *r;
    int rc;

    if (ensure_conn(st, err, errlen) < 0)
        return -1;
    if (!(r = redisCommand(st->c, "PING"))) {
        snprintf(err, errlen, "redis: %s", conn_error(st));
        drop_conn(st);
        return -1;
    }
    rc = r->type == REDIS_REPLY_ERROR ? -1 : 0;
    if (rc < 0)
        snprintf(err, errlen, "redis: %s", r->str);
    freeReplyObject(r);
    return rc;
}

/* rdb: the connection to the Redis master over hiredis: where the master is, (re)connecting with
 * backoff, script loading, pipelines with NOSCRIPT reload and WAIT, and the reply accessors.
 * The contract is in include/rdb.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis.h>

#include "clock.h"
#include "rdb.h"
#include "sentinel.h"
#include "watch.h"

/* A Sentinel is asked this long at most (connect and answer), so that a dead one costs little
 * before the next is asked; never longer than redis.timeout_ms. */
#define SENTINEL_TIMEOUT_MS 500
/* After connecting failed, calls fail at once for this long, doubling up to the most, so that
 * a thread whose every call would connect does not hammer Redis or the Sentinels. */
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000
#define ARGS_MAX 1024   /* words of one call; the largest (a chunk of 128 claims) has 4 + 4 x 128 */

struct rdb {
    const struct config *cfg;
    redisContext *c;
    int elsewhere;              /* a reply said this is not the master: reconnect before use */
    int unconfirmed;            /* the last pipeline's writes lack redis.wait_replicas replicas */
    char wait_err[160];         /* why, when unconfirmed */
    int order[CONFIG_SENTINELS_MAX];   /* the Sentinels, in the order they are asked */
    const char *const *scripts;
    int nscripts;
    char (*sha)[41];
    unsigned seen_gen;          /* the watch's generation this connection was made in */
    int64_t retry_at_ms;        /* connecting failed: not again before then */
    int64_t backoff_ms;
    char last_err[256];         /* why connecting failed */
    char why[96];               /* conn_error's text for a timeout */
};

/* ------------------------------------------------------------------ replies */

static const redisReply *R(const struct rdb_reply *r) { return (const redisReply *)r; }

enum rdb_type rdb_type(const struct rdb_reply *r)
{
    switch (R(r)->type) {
    case REDIS_REPLY_INTEGER: return RDB_INT;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:  return RDB_STR;
    case REDIS_REPLY_ARRAY:   return RDB_ARR;
    case REDIS_REPLY_ERROR:   return RDB_ERR;
    default:                  return RDB_NIL;
    }
}

long long rdb_int(const struct rdb_reply *r)
{
    return R(r)->type == REDIS_REPLY_INTEGER ? R(r)->integer : 0;
}

const char *rdb_str(const struct rdb_reply *r, size_t *len)
{
    int t = R(r)->type;

    if (t != REDIS_REPLY_STRING && t != REDIS_REPLY_STATUS && t != REDIS_REPLY_ERROR)
        return NULL;
    if (len)
        *len = R(r)->len;
    return R(r)->str;
}

size_t rdb_count(const struct rdb_reply *r)
{
    return R(r)->type == REDIS_REPLY_ARRAY ? R(r)->elements : 0;
}

const struct rdb_reply *rdb_at(const struct rdb_reply *r, size_t i)
{
    return (const struct rdb_reply *)R(r)->element[i];
}

int rdb_is(const struct rdb_reply *r, const char *s)
{
    return R(r)->type == REDIS_REPLY_STRING && strcmp(R(r)->str, s) == 0;
}

void rdb_reply_free(struct rdb_reply *r)
{
    if (r)
        freeReplyObject(r);
}

/* ------------------------------------------------------------------ the connection */

struct rdb *rdb_new(const struct config *cfg, const char *const *scripts, int nscripts)
{
    struct rdb *db = calloc(1, sizeof(*db));

    if (!db || !(db->sha = calloc(nscripts > 0 ? (size_t)nscripts : 1, sizeof(*db->sha)))) {
        free(db);
        return NULL;
    }
    db->cfg = cfg;
    db->scripts = scripts;
    db->nscripts = nscripts;
    for (int i = 0; i < cfg->redis.nsentinels; i++)
        db->order[i] = i;
    return db;
}

void rdb_free(struct rdb *db)
{
    if (!db)
        return;
    if (db->c)
        redisFree(db->c);
    free(db->sha);
    free(db);
}

/* The connection's error, for a message. A read or write that timed out reads as EAGAIN's text
 * in hiredis ("Resource temporarily unavailable"): it names the timeout instead. */
static const char *conn_error(struct rdb *db)
{
    if (db->c->err == REDIS_ERR_IO && strcmp(db->c->errstr, strerror(EAGAIN)) == 0) {
        snprintf(db->why, sizeof(db->why), "no answer within redis.timeout_ms (%lld ms)",
                 (long long)db->cfg->redis.timeout_ms);
        return db->why;
    }
    return db->c->errstr[0] ? db->c->errstr : "no reply";
}

static void drop_conn(struct rdb *db)
{
    if (db->c) {
        redisFree(db->c);
        db->c = NULL;
    }
    db->elsewhere = 0;
}

static int means_elsewhere(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && sentinel_error_means_elsewhere(r->str);
}

/* Notes a reply that says the connection is not to the master (a replica after a failover, a
 * node still loading): the connection is dropped, and the master looked for again, before the
 * next call. A script that catches its errors per record (redis.pcall) answers them inside its
 * array: those count too. */
static void note_reply(struct rdb *db, const redisReply *r)
{
    if (means_elsewhere(r))
        db->elsewhere = 1;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements && !db->elsewhere; i++)
        if (means_elsewhere(r->element[i]))
            db->elsewhere = 1;
}

/* Runs a setup command on a fresh connection; 0 when it answers without error. */
static int setup_cmd(struct rdb *db, char *err, size_t errlen, const char *fmt, const char *arg)
{
    redisReply *r = redisCommand(db->c, fmt, arg);
    int rc = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;

    if (rc < 0)
        snprintf(err, errlen, "redis %s: %s", fmt, r ? r->str : conn_error(db));
    if (r)
        freeReplyObject(r);
    return rc;
}

/* SCRIPT LOAD of every script; their SHA-1s go to db->sha. */
static int load_scripts(struct rdb *db, char *err, size_t errlen)
{
    for (int i = 0; i < db->nscripts; i++) {
        redisReply *r = redisCommand(db->c, "SCRIPT LOAD %s", db->scripts[i]);
        int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;

        if (ok)
            memcpy(db->sha[i], r->str, 41);
        else
            snprintf(err, errlen, "redis SCRIPT LOAD: %s",
                     !r ? conn_error(db) : r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
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
static int authenticate(struct rdb *db, const char *user, const char *password, char *err,
                        size_t errlen)
{
    redisReply *r;
    int rc;

    if (!password[0])
        return 0;
    r = user[0] ? redisCommand(db->c, "AUTH %s %s", user, password)
                : redisCommand(db->c, "AUTH %s", password);
    rc = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;
    if (rc < 0)
        snprintf(err, errlen, "redis AUTH: %s", r ? r->str : conn_error(db));
    if (r)
        freeReplyObject(r);
    return rc;
}

/* Connects db->c to host:port. 0, or -1 with err set and no connection. */
static int connect_to(struct rdb *db, const char *host, int port, int64_t timeout_ms, char *err,
                      size_t errlen)
{
    struct timeval tv = timeval_of(timeout_ms);

    db->c = redisConnectWithTimeout(host, port, tv);
    if (!db->c || db->c->err) {
        snprintf(err, errlen, "redis %s:%d: %s", host, port, db->c ? conn_error(db) : "out of memory");
        drop_conn(db);
        return -1;
    }
    redisSetTimeout(db->c, tv);
    return 0;
}

/* Asks the Sentinel at position i of db->order where the master is. 0 with host and port, or
 * -1 with err set. */
static int ask_sentinel(struct rdb *db, int i, char host[SENTINEL_HOST_MAX], int *port,
                        char *err, size_t errlen)
{
    const struct config *cfg = db->cfg;
    const char *addr = cfg->redis.sentinels[db->order[i]];
    int64_t timeout = cfg->redis.timeout_ms < SENTINEL_TIMEOUT_MS ? cfg->redis.timeout_ms
                                                                  : SENTINEL_TIMEOUT_MS;
    char shost[SENTINEL_HOST_MAX], why[256];
    redisReply *r = NULL;
    int sport, rc = -1;

    if (sentinel_split_addr(addr, shost, &sport) < 0) {
        snprintf(err, errlen, "Sentinel %s: not host:port", addr);
        return -1;
    }
    if (connect_to(db, shost, sport, timeout, why, sizeof(why)) < 0 ||
        authenticate(db, "", cfg->redis.sentinel_password, why, sizeof(why)) < 0 ||
        !(r = redisCommand(db->c, "SENTINEL get-master-addr-by-name %s", cfg->redis.master_name))) {
        snprintf(err, errlen, "Sentinel %.64s: %.180s", addr, db->c ? conn_error(db) : why);
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
               r->element[0]->type == REDIS_REPLY_STRING && r->element[1]->type == REDIS_REPLY_STRING) {
        rc = sentinel_master_addr(r->element[0]->str, r->element[0]->len, r->element[1]->str,
                                  r->element[1]->len, host, port, why, sizeof(why));
        if (rc < 0)
            snprintf(err, errlen, "Sentinel %.64s: %.180s", addr, why);
    } else {
        snprintf(err, errlen, "Sentinel %.64s: %.180s", addr,
                 r->type == REDIS_REPLY_ERROR ? r->str : "knows no master of that name");
    }
    if (r)
        freeReplyObject(r);
    drop_conn(db);
    return rc;
}

/* 0 when the connected server says it is a master (ROLE), else -1 with err set: a Sentinel may
 * name a node that has not taken its new role yet. */
static int check_role(struct rdb *db, char *err, size_t errlen)
{
    redisReply *r = redisCommand(db->c, "ROLE");
    int rc = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
             r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0
                 ? 0 : -1;

    if (rc < 0)
        snprintf(err, errlen, "redis: the server Sentinel named is not a master (yet): %s",
                 !r ? conn_error(db) : r->type == REDIS_REPLY_ERROR ? r->str
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
static int connect_master(struct rdb *db, char *err, size_t errlen)
{
    const struct config *cfg = db->cfg;
    char host[SENTINEL_HOST_MAX];
    int port;

    if (!cfg->redis.nsentinels)
        return connect_to(db, cfg->redis.host, (int)cfg->redis.port, master_timeout_ms(cfg), err, errlen);
    for (int i = 0; i < cfg->redis.nsentinels; i++) {
        if (ask_sentinel(db, i, host, &port, err, errlen) < 0)
            continue;
        sentinel_prefer(db->order, i);
        return connect_to(db, host, port, master_timeout_ms(cfg), err, errlen);
    }
    return -1;   /* err: the last Sentinel's reason */
}

static int setup(struct rdb *db, char *err, size_t errlen)
{
    const struct config *cfg = db->cfg;
    char num[32];

    snprintf(num, sizeof(num), "%lld", (long long)cfg->redis.db);
    if (connect_master(db, err, errlen) < 0)
        return -1;
    if (authenticate(db, cfg->redis.username, cfg->redis.password, err, errlen) < 0 ||
        (cfg->redis.nsentinels && check_role(db, err, errlen) < 0) ||
        (cfg->redis.db && setup_cmd(db, err, errlen, "SELECT %s", num) < 0) ||
        load_scripts(db, err, errlen) < 0) {
        drop_conn(db);
        return -1;
    }
    return 0;
}

/* 1 when db's calls follow the Sentinel watch. */
static int watched(const struct rdb *db)
{
    return db->cfg->redis.nsentinels && watch_running();
}

/* After the master moved, the Sentinel that told of it is asked first. */
static void prefer_announcer(struct rdb *db)
{
    int a = watch_announcer();

    for (int i = 0; a >= 0 && i < db->cfg->redis.nsentinels; i++)
        if (db->order[i] == a)
            sentinel_prefer(db->order, i);
}

/* A connection to the master, made now when there is none: 0, or -1 with err set. After a
 * failed attempt the next waits BACKOFF_MIN_MS, doubling up to BACKOFF_MAX_MS; until then
 * calls fail at once with the reason of the last attempt. */
static int ensure_conn(struct rdb *db, char *err, size_t errlen)
{
    unsigned gen = watch_gen();
    int64_t now;

    if (watched(db) && watch_failing()) {
        snprintf(err, errlen, "redis: Sentinel is failing master %s over; calls wait until it ends",
                 db->cfg->redis.master_name);
        drop_conn(db);
        return -1;
    }
    if (db->c && !db->c->err && !db->elsewhere && (!watched(db) || gen == db->seen_gen))
        return 0;
    drop_conn(db);
    if (watched(db) && gen != db->seen_gen)
        prefer_announcer(db);
    now = clock_now_ms();
    if (now < db->retry_at_ms) {
        snprintf(err, errlen, "%s (next attempt in %lld ms)", db->last_err,
                 (long long)(db->retry_at_ms - now));
        return -1;
    }
    if (setup(db, db->last_err, sizeof(db->last_err)) == 0) {
        db->seen_gen = gen;
        db->backoff_ms = 0;
        db->retry_at_ms = 0;
        return 0;
    }
    db->backoff_ms = db->backoff_ms ? db->backoff_ms * 2 : BACKOFF_MIN_MS;
    if (db->backoff_ms > BACKOFF_MAX_MS)
        db->backoff_ms = BACKOFF_MAX_MS;
    db->retry_at_ms = clock_now_ms() + db->backoff_ms;
    snprintf(err, errlen, "%s", db->last_err);
    return -1;
}

/* ------------------------------------------------------------------ calls */

/* Queues call on the connection: EVALSHA sha nkeys argv... for a script, else argv as is. */
static int append_call(struct rdb *db, const struct rdb_call *call)
{
    const char *a[ARGS_MAX];
    size_t l[ARGS_MAX], argc = 0;
    char nkeys[24];

    if (call->script >= 0) {
        snprintf(nkeys, sizeof(nkeys), "%zu", call->nkeys);
        a[0] = "EVALSHA", l[0] = 7;
        a[1] = db->sha[call->script], l[1] = 40;
        a[2] = nkeys, l[2] = strlen(nkeys);
        argc = 3;
    }
    if (call->argc > ARGS_MAX - argc)
        return -1;
    for (size_t i = 0; i < call->argc; i++, argc++) {
        a[argc] = call->argv[i];
        l[argc] = call->lens ? call->lens[i] : strlen(call->argv[i]);
    }
    return redisAppendCommandArgv(db->c, (int)argc, a, l) == REDIS_OK ? 0 : -1;   /* copies */
}

/* Reads one reply; on a connection error drops the connection and returns NULL with err set.
 * A Redis error reply is returned as is, for the caller to judge. */
static redisReply *read_reply(struct rdb *db, char *err, size_t errlen)
{
    void *r = NULL;

    if (redisGetReply(db->c, &r) != REDIS_OK || !r) {
        snprintf(err, errlen, "redis: %s", conn_error(db));
        drop_conn(db);
        return NULL;
    }
    note_reply(db, r);
    return r;
}

static int is_noscript(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Queues WAIT for redis.wait_replicas replicas, after writes. WAIT counts the writes made on
 * this connection, and answers the count even when it timed out. */
static void append_wait(struct rdb *db)
{
    redisAppendCommand(db->c, "WAIT %lld %lld", (long long)db->cfg->redis.wait_replicas,
                       (long long)db->cfg->redis.wait_timeout_ms);
}

/* Reads WAIT's answer: 0 when enough replicas confirmed, 1 when too few (db->wait_err says
 * how many, and with Sentinels the master is looked for again: one that has lost its replicas
 * may have been replaced), -1 on a connection error. */
static int read_wait(struct rdb *db, char *err, size_t errlen)
{
    redisReply *r = read_reply(db, err, errlen);
    long long want = db->cfg->redis.wait_replicas;
    int short_of = 0;

    if (!r)
        return -1;
    if (watched(db) && (watch_gen() != db->seen_gen || watch_failing())) {
        short_of = 1;   /* the replicas that confirmed may follow another master now */
        snprintf(db->wait_err, sizeof(db->wait_err), "redis: a failover of master %.40s began before "
                 "the replicas confirmed the write", db->cfg->redis.master_name);
        db->elsewhere = 1;
    } else if (!(r->type == REDIS_REPLY_INTEGER && r->integer >= want)) {
        short_of = 1;
        snprintf(db->wait_err, sizeof(db->wait_err), "redis: %s%lld of %lld replicas confirmed the "
                 "write within redis.wait_timeout_ms (%lld ms)",
                 r->type == REDIS_REPLY_ERROR ? r->str : "",
                 r->type == REDIS_REPLY_INTEGER ? r->integer : 0LL, want,
                 (long long)db->cfg->redis.wait_timeout_ms);
        if (db->cfg->redis.nsentinels)
            db->elsewhere = 1;
    }
    freeReplyObject(r);
    return short_of;
}

/* The engine of rdb_pipeline and rdb_call: got is handed each call's reply (NULL, with err,
 * when there is none) and returns 1 when it keeps the reply (it frees it then), else 0. */
typedef int got_fn(void *ctx, size_t j, redisReply *r, const char *err);

static int pipeline(struct rdb *db, size_t n, rdb_build_fn *build, void *bctx, got_fn *got,
                    void *gctx, enum rdb_confirm confirm, char *err, size_t errlen)
{
    size_t *todo = malloc((n ? n : 1) * sizeof(*todo)), ntodo = n;
    int waits = confirm != RDB_NO_WAIT && db->cfg->redis.wait_replicas > 0;
    int each = waits && confirm == RDB_WAIT_EACH;
    int rc = -1;

    db->unconfirmed = 0;
    if (!todo) {
        snprintf(err, errlen, "out of memory");
        for (size_t j = 0; j < n; j++)
            got(gctx, j, NULL, err);
        return -1;
    }
    for (size_t j = 0; j < n; j++)
        todo[j] = j;
    for (int attempt = 0; ntodo; attempt++) {
        size_t lost = 0, done;
        int failed, short_of;
        if (ensure_conn(db, err, errlen) < 0)
            break;
        if (attempt > 0 && load_scripts(db, err, errlen) < 0) {
            drop_conn(db);
            break;
        }
        for (size_t i = 0; i < ntodo; i++) {
            struct rdb_call call;
            build(bctx, todo[i], &call);
            if (append_call(db, &call) < 0) {
                snprintf(err, errlen, "redis: a call of %zu words is more than one call takes",
                         call.argc);
                drop_conn(db);   /* what was queued is not sent */
                goto out;
            }
            if (each)
                append_wait(db);
        }
        if (waits && !each)
            append_wait(db);
        for (done = 0; done < ntodo; done++) {
            redisReply *r = read_reply(db, err, errlen);
            if (!r)
                break;
            if (each && (short_of = read_wait(db, err, errlen)) != 0) {
                freeReplyObject(r);
                if (short_of < 0)
                    break;
                if (is_noscript(r) && attempt == 0) {   /* nothing written: send again */
                    todo[lost++] = todo[done];
                    continue;
                }
                got(gctx, todo[done], NULL, db->wait_err);
                continue;
            }
            if (attempt == 0 && is_noscript(r)) {
                todo[lost++] = todo[done];
                freeReplyObject(r);
            } else if (!got(gctx, todo[done], r, NULL)) {
                freeReplyObject(r);
            }
        }
        failed = done < ntodo;   /* the connection: the rest are not answered */
        if (!failed && waits && !each && (short_of = read_wait(db, err, errlen)) != 0) {
            if (short_of < 0)
                failed = 1;
            else
                db->unconfirmed = 1;
        }
        memmove(todo + lost, todo + done, (ntodo - done) * sizeof(*todo));
        ntodo = lost + (ntodo - done);
        if (failed)
            break;
    }
out:
    if (!ntodo)
        rc = 0;
    for (size_t i = 0; i < ntodo; i++)
        got(gctx, todo[i], NULL, err);
    free(todo);
    return rc;
}

struct relay {
    rdb_reply_fn *fn;
    void *ctx;
};

static int relay(void *ctx, size_t j, redisReply *r, const char *err)
{
    const struct relay *rl = ctx;

    rl->fn(rl->ctx, j, (const struct rdb_reply *)r, err);
    return 0;
}

int rdb_pipeline(struct rdb *db, size_t n, rdb_build_fn *build, rdb_reply_fn *fn, void *ctx,
                 enum rdb_confirm confirm, char *err, size_t errlen)
{
    struct relay rl = { fn, ctx };

    return pipeline(db, n, build, ctx, relay, &rl, confirm, err, errlen);
}

static void build_one(void *ctx, size_t j, struct rdb_call *call)
{
    (void)j;
    *call = *(const struct rdb_call *)ctx;
}

static int keep_one(void *ctx, size_t j, redisReply *r, const char *err)
{
    (void)j;
    (void)err;
    *(redisReply **)ctx = r;
    return r != NULL;
}

struct rdb_reply *rdb_call(struct rdb *db, const struct rdb_call *call, enum rdb_confirm confirm,
                           char *err, size_t errlen)
{
    redisReply *r = NULL;

    if (pipeline(db, 1, build_one, (void *)call, keep_one, &r, confirm, err, errlen) < 0)
        return NULL;
    if (!r) {   /* RDB_WAIT_EACH short of replicas */
        snprintf(err, errlen, "%s", db->wait_err);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "redis: %s", r->str);
        freeReplyObject(r);
        return NULL;
    }
    return (struct rdb_reply *)r;
}

#define COMMAND_WORDS_MAX 16

struct rdb_reply *rdb_command(struct rdb *db, char *err, size_t errlen, const char *name, ...)
{
    const char *argv[COMMAND_WORDS_MAX];
    struct rdb_call call = { .script = -1, .argv = argv };
    va_list ap;

    va_start(ap, name);
    for (const char *w = name; w; w = va_arg(ap, const char *)) {
        if (call.argc == COMMAND_WORDS_MAX) {
            va_end(ap);
            snprintf(err, errlen, "redis: %s with more than %d words", name, COMMAND_WORDS_MAX);
            return NULL;
        }
        argv[call.argc++] = w;
    }
    va_end(ap);
    return rdb_call(db, &call, RDB_NO_WAIT, err, errlen);
}

const char *rdb_unconfirmed(const struct rdb *db)
{
    return db->unconfirmed ? db->wait_err : NULL;
}

int rdb_ping(struct rdb *db, char *err, size_t errlen)
{
    struct rdb_reply *r = rdb_command(db, err, errlen, "PING", NULL);

    rdb_reply_free(r);
    return r ? 0 : -1;
}

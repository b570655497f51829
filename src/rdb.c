/* rdb: the connections to Redis over hiredis: (re)connecting with backoff, script loading,
 * pipelines with NOSCRIPT reload, cluster redirections and WAIT, and the reply accessors. Where
 * the master is lives in rdb_where.c. The contract is in include/rdb.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "metrics.h"
#include "rdb_link.h"
#include "sentinel.h"
#include "watch.h"
/* After connecting failed, calls fail at once for this long, doubling up to the most, so that
 * a thread whose every call would connect does not hammer Redis or the Sentinels. */
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 1000
#define ARGS_MAX 1024   /* words of one call; the largest (a chunk of 128 claims) has 4 + 4 x 128 */
/* A call redirected (MOVED, ASK) or told to wait (TRYAGAIN, CLUSTERDOWN) is sent again, this
 * many times at most in one pipeline, the waits growing by RETRY_STEP_MS each time. */
#define ROUNDS_MAX 6
#define RETRY_STEP_MS 25

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
    return rdb_type(r) == RDB_STR && strcmp(R(r)->str, s) == 0;
}

void rdb_reply_free(struct rdb_reply *r)
{
    if (r)
        freeReplyObject(r);
}

/* ------------------------------------------------------------------ links */

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
    db->cluster = cfg->redis.ncluster > 0;
    for (int i = 0; i < cfg->redis.nsentinels; i++)
        db->order[i] = i;
    if (db->cluster && (!(db->map = malloc(sizeof(*db->map))) ||
                        !(db->links = calloc(SLOTS_NODES_MAX, sizeof(*db->links))))) {
        rdb_free(db);
        return NULL;
    }
    if (db->map)
        slots_map_init(db->map);
    return db;
}

void link_drop(struct link *l)
{
    if (l->c) {
        redisFree(l->c);
        l->c = NULL;
    }
    l->elsewhere = 0;
}

void rdb_free(struct rdb *db)
{
    if (!db)
        return;
    link_drop(&db->one);
    for (int i = 0; db->links && i < SLOTS_NODES_MAX; i++)
        link_drop(&db->links[i]);
    free(db->links);
    free(db->map);
    free(db->sha);
    free(db);
}

/* The connection's error, for a message. A read or write that timed out reads as EAGAIN's text
 * in hiredis ("Resource temporarily unavailable"): it names the timeout instead. */
const char *link_error(struct rdb *db, const struct link *l)
{
    if (l->c->err == REDIS_ERR_IO && strcmp(l->c->errstr, strerror(EAGAIN)) == 0) {
        snprintf(db->why, sizeof(db->why), "no answer within redis.timeout_ms (%lld ms)",
                 (long long)db->cfg->redis.timeout_ms);
        return db->why;
    }
    return l->c->errstr[0] ? l->c->errstr : "no reply";
}

static int means_elsewhere(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && sentinel_error_means_elsewhere(r->str);
}

/* Notes a reply that says the connection is not to the master (a replica after a failover, a
 * node still loading): the connection is dropped, and the master looked for again, before the
 * next call. A script that catches its errors per record (redis.pcall) answers them inside its
 * array: those count too. */
static void note_reply(struct link *l, const redisReply *r)
{
    if (means_elsewhere(r))
        l->elsewhere = 1;
    for (size_t i = 0; r->type == REDIS_REPLY_ARRAY && i < r->elements && !l->elsewhere; i++)
        if (means_elsewhere(r->element[i]))
            l->elsewhere = 1;
}

/* Runs a command on a fresh connection (fmt takes one string); its reply, or NULL with err set
 * (what: the command's name for the message) when it failed or answered an error. */
redisReply *link_cmd(struct rdb *db, struct link *l, const char *what, char *err,
                             size_t errlen, const char *fmt, const char *arg)
{
    redisReply *r = redisCommand(l->c, fmt, arg);

    if (r && r->type != REDIS_REPLY_ERROR)
        return r;
    snprintf(err, errlen, "redis %s: %s", what, r ? r->str : link_error(db, l));
    if (r)
        freeReplyObject(r);
    return NULL;
}

/* SCRIPT LOAD of every script; their SHA-1s go to db->sha. */
static int load_scripts(struct rdb *db, struct link *l, char *err, size_t errlen)
{
    for (int i = 0; i < db->nscripts; i++) {
        redisReply *r = link_cmd(db, l, "SCRIPT LOAD", err, errlen, "SCRIPT LOAD %s", db->scripts[i]);
        int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;

        if (ok)
            memcpy(db->sha[i], r->str, 41);
        else if (r)
            snprintf(err, errlen, "redis SCRIPT LOAD: unexpected reply");
        if (r)
            freeReplyObject(r);
        if (!ok)
            return -1;
    }
    return 0;
}

struct timeval link_timeval(int64_t ms)
{
    return (struct timeval){ (time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000) };
}

/* AUTH with the ACL user and password when set (password alone: the default user). */
int link_auth(struct rdb *db, struct link *l, const char *user, const char *password,
                        char *err, size_t errlen)
{
    redisReply *r;
    int rc;

    if (!password[0])
        return 0;
    r = user[0] ? redisCommand(l->c, "AUTH %s %s", user, password)
                : redisCommand(l->c, "AUTH %s", password);
    rc = r && r->type != REDIS_REPLY_ERROR ? 0 : -1;
    if (rc < 0)
        snprintf(err, errlen, "redis AUTH: %s", r ? r->str : link_error(db, l));
    if (r)
        freeReplyObject(r);
    return rc;
}

/* Connects l to host:port. 0, or -1 with err set and no connection. */
int link_connect(struct rdb *db, struct link *l, const char *host, int port, int64_t timeout_ms,
                      char *err, size_t errlen)
{
    struct timeval tv = link_timeval(timeout_ms);

    l->c = redisConnectWithTimeout(host, port, tv);
    if (!l->c || l->c->err) {
        snprintf(err, errlen, "redis %s:%d: %s", host, port, l->c ? link_error(db, l) : "out of memory");
        link_drop(l);
        return -1;
    }
    redisSetTimeout(l->c, tv);
    return 0;
}

/* The master's answers may take redis.timeout_ms, and a WAIT redis.wait_timeout_ms more. */
static int64_t master_timeout_ms(const struct config *cfg)
{
    return cfg->redis.timeout_ms + (cfg->redis.wait_replicas > 0 ? cfg->redis.wait_timeout_ms : 0);
}

/* Connects l to a master at host:port with AUTH, SELECT and the scripts. */
int link_open(struct rdb *db, struct link *l, const char *host, int port, char *err,
                       size_t errlen)
{
    const struct config *cfg = db->cfg;
    char num[32];
    redisReply *r = NULL;

    snprintf(num, sizeof(num), "%lld", (long long)cfg->redis.db);
    if (link_connect(db, l, host, port, master_timeout_ms(cfg), err, errlen) < 0)
        return -1;
    if (link_auth(db, l, cfg->redis.username, cfg->redis.password, err, errlen) < 0 ||
        (cfg->redis.db && !(r = link_cmd(db, l, "SELECT", err, errlen, "SELECT %s", num))) ||
        load_scripts(db, l, err, errlen) < 0) {
        link_drop(l);
        return -1;
    }
    if (r)
        freeReplyObject(r);
    return 0;
}

/* l connected, now when it was not: 0, or -1 with err set. node: the cluster node l goes to,
 * or -1 for db->one. After a failed attempt the next waits BACKOFF_MIN_MS, doubling up to
 * BACKOFF_MAX_MS; until then calls fail at once with the reason of the last attempt. */
static int ensure(struct rdb *db, struct link *l, int node, char *err, size_t errlen)
{
    unsigned gen = watch_gen();
    int64_t now;
    int rc;

    if (node < 0 && rdb_watched(db) && watch_failing()) {
        snprintf(err, errlen, "redis: Sentinel is failing master %.100s over; calls wait until it ends",
                 db->cfg->redis.master_name);
        link_drop(l);
        return -1;
    }
    if (l->c && !l->c->err && !l->elsewhere && (node >= 0 || !rdb_watched(db) || gen == db->seen_gen))
        return 0;
    link_drop(l);
    if (node < 0 && rdb_watched(db) && gen != db->seen_gen)
        prefer_announcer(db);
    now = clock_now_ms();
    if (now < l->retry_at_ms) {
        snprintf(err, errlen, "%.200s (next attempt in %lld ms)", l->last_err,
                 (long long)(l->retry_at_ms - now));
        return -1;
    }
    rc = node < 0 ? open_one(db, l->last_err, sizeof(l->last_err))
                  : link_open(db, l, l->host, l->port, l->last_err, sizeof(l->last_err));
    if (rc == 0) {
        if (node < 0)
            db->seen_gen = gen;
        l->backoff_ms = 0;
        l->retry_at_ms = 0;
        return 0;
    }
    l->backoff_ms = l->backoff_ms ? l->backoff_ms * 2 : BACKOFF_MIN_MS;
    if (l->backoff_ms > BACKOFF_MAX_MS)
        l->backoff_ms = BACKOFF_MAX_MS;
    l->retry_at_ms = clock_now_ms() + l->backoff_ms;
    snprintf(err, errlen, "%s", l->last_err);
    if (node >= 0)
        db->map_stale = 1;   /* the node may be gone, its slots served by another */
    return -1;
}

/* ------------------------------------------------------------------ calls */

/* Queues call on l: EVALSHA sha nkeys argv... for a script, else argv as is. -1 when it has
 * more words than a call may. */
static int append_call(struct rdb *db, struct link *l, const struct rdb_call *call)
{
    const char *a[ARGS_MAX];
    size_t len[ARGS_MAX], argc = 0;
    char nkeys[24];

    if (call->script >= 0) {
        snprintf(nkeys, sizeof(nkeys), "%zu", call->nkeys);
        a[0] = "EVALSHA", len[0] = 7;
        a[1] = db->sha[call->script], len[1] = 40;
        a[2] = nkeys, len[2] = strlen(nkeys);
        argc = 3;
    }
    if (call->argc > ARGS_MAX - argc)
        return -1;
    for (size_t i = 0; i < call->argc; i++, argc++) {
        a[argc] = call->argv[i];
        len[argc] = call->lens ? call->lens[i] : strlen(call->argv[i]);
    }
    return redisAppendCommandArgv(l->c, (int)argc, a, len) == REDIS_OK ? 0 : -1;   /* copies */
}

/* Reads one reply; on a connection error drops the connection and returns NULL with err set.
 * A Redis error reply is returned as is, for the caller to judge. */
static redisReply *read_reply(struct rdb *db, struct link *l, char *err, size_t errlen)
{
    void *r = NULL;

    if (!l->c) {
        snprintf(err, errlen, "redis: the connection was lost");
        return NULL;
    }
    if (redisGetReply(l->c, &r) != REDIS_OK || !r) {
        snprintf(err, errlen, "redis: %s", link_error(db, l));
        link_drop(l);
        return NULL;
    }
    note_reply(l, r);
    return r;
}

static int is_noscript(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

/* Queues WAIT for redis.wait_replicas replicas, after writes. WAIT counts the writes made on
 * this connection, and answers the count even when it timed out. */
static void append_wait(struct rdb *db, struct link *l)
{
    redisAppendCommand(l->c, "WAIT %lld %lld", (long long)db->cfg->redis.wait_replicas,
                       (long long)db->cfg->redis.wait_timeout_ms);
}

/* Reads WAIT's answer: 0 when enough replicas confirmed, 1 when too few (db->wait_err says
 * how many, and with Sentinels the master is looked for again: one that has lost its replicas
 * may have been replaced), -1 on a connection error. */
static int read_wait(struct rdb *db, struct link *l, char *err, size_t errlen)
{
    redisReply *r = read_reply(db, l, err, errlen);
    long long want = db->cfg->redis.wait_replicas;
    int short_of = 0;

    if (!r)
        return -1;
    if (l == &db->one && rdb_watched(db) && (watch_gen() != db->seen_gen || watch_failing())) {
        short_of = 1;   /* the replicas that confirmed may follow another master now */
        snprintf(db->wait_err, sizeof(db->wait_err), "redis: a failover of master %.40s began before "
                 "the replicas confirmed the write", db->cfg->redis.master_name);
        l->elsewhere = 1;
    } else if (!(r->type == REDIS_REPLY_INTEGER && r->integer >= want)) {
        short_of = 1;
        snprintf(db->wait_err, sizeof(db->wait_err), "redis: %s%lld of %lld replicas confirmed the "
                 "write within redis.wait_timeout_ms (%lld ms)",
                 r->type == REDIS_REPLY_ERROR ? r->str : "",
                 r->type == REDIS_REPLY_INTEGER ? r->integer : 0LL, want,
                 (long long)db->cfg->redis.wait_timeout_ms);
        if (db->cfg->redis.nsentinels)
            l->elsewhere = 1;
    }
    freeReplyObject(r);
    return short_of;
}

/* A call of a pipeline on its way. */
struct pend {
    size_t j;
    int node;           /* where it goes: a cluster node, -1 for db->one, -2 for none */
    int ask;            /* ASK sent it to this node: ASKING goes first; else -1 */
    int reloaded;       /* answered NOSCRIPT once already */
    const char *why;    /* not sent this round: why */
};

static struct link *link_of(struct rdb *db, int node)
{
    return node < 0 ? &db->one : &db->links[node];
}

/* Where call goes: in a cluster, the master of its key's slot (a keyless call: any node),
 * or the node an ASK named. */
static int route(struct rdb *db, const struct rdb_call *call, const struct pend *p)
{
    size_t k = call->script >= 0 ? 0 : 1;
    int slot;

    if (!db->cluster)
        return -1;
    if (p->ask >= 0)
        return p->ask;
    if ((call->script >= 0 && !call->nkeys) || call->argc <= k)
        return db->map->nnodes ? 0 : -2;
    slot = slots_of_key(call->argv[k], call->lens ? call->lens[k] : strlen(call->argv[k]));
    return db->map->node_of[slot] >= 0 ? db->map->node_of[slot] : -2;
}

/* Does reply r of p ask for p to be sent again (next round)? NOSCRIPT once (the scripts are
 * loaded again first); in a cluster, MOVED (the map is updated, and read again before the
 * next round), ASK (once to the node named, after ASKING), TRYAGAIN and CLUSTERDOWN (after a
 * pause), and a node that is no master any more (READONLY: a failover; read the map again). */
static int again(struct rdb *db, struct link *l, struct pend *p, const redisReply *r, int *pause)
{
    char host[SLOTS_HOST_MAX];
    int slot, port, n;
    enum slots_redirect kind;

    if (is_noscript(r) && !p->reloaded) {
        p->reloaded = l->reload = 1;
        return 1;
    }
    if (!db->cluster || r->type != REDIS_REPLY_ERROR)
        return 0;
    p->ask = -1;
    if ((kind = slots_parse_redirect(r->str, &slot, host, &port)) != SLOTS_NO_REDIRECT) {
        l->elsewhere = 0;   /* the node is well; the key is elsewhere */
        if (!host[0])
            snprintf(host, sizeof(host), "%s", l->host);
        if ((n = node_of_addr(db, host, port)) < 0)
            return 0;
        if (kind == SLOTS_ASK) {
            p->ask = n;
        } else {
            db->map->node_of[slot] = (int16_t)n;
            db->map_stale = 1;   /* other slots have likely moved with it */
        }
        return 1;
    }
    if (strncmp(r->str, "TRYAGAIN", 8) == 0 || strncmp(r->str, "CLUSTERDOWN", 11) == 0) {
        l->elsewhere = 0;
        db->map_stale |= r->str[0] == 'C';
        *pause = 1;
        return 1;
    }
    if (l->elsewhere) {
        link_drop(l);
        db->map_stale = 1;
        *pause = 1;
        return 1;
    }
    return 0;
}

/* Sends every output buffer now, so that all nodes work on their calls at once. A link whose
 * write fails is left with its error, which the next read reports. */
static void flush(struct link *l)
{
    int done = 0;

    while (l->c && !done)
        if (redisBufferWrite(l->c, &done) != REDIS_OK)
            break;
}

/* The engine of rdb_pipeline and rdb_call: got is handed each call's reply (NULL, with err,
 * when there is none) and returns 1 when it keeps the reply (it frees it then), else 0. */
typedef int got_fn(void *ctx, size_t j, redisReply *r, const char *err);

/* The state of one pipeline. */
struct run {
    struct rdb *db;
    got_fn *got;
    void *gctx;
    int rc;
    char *err;
    size_t errlen;
};

/* Call p has no reply: why. The pipeline fails, with the first such reason. */
static void unanswered(struct run *run, const struct pend *p, const char *why)
{
    if (run->rc == 0)
        snprintf(run->err, run->errlen, "%s", why);
    run->rc = -1;
    run->got(run->gctx, p->j, NULL, why);
}

/* The links the calls of a round use: db->one, or every node of the map. */
static int nlinks(const struct rdb *db)
{
    return db->cluster ? db->map->nnodes : 1;
}

/* Sends the calls of one round; the calls that cannot go get their p->why. */
static void send_round(struct run *run, struct pend *todo, size_t ntodo, rdb_build_fn *build,
                       void *bctx, int each, int waits)
{
    struct rdb *db = run->db;
    static const char no_node[] = "redis cluster: no node serves the key's slot (reading the map again)";
    static const char too_long[] = "redis: a call with more words than one call takes";

    for (size_t i = 0; i < ntodo; i++) {
        struct pend *p = &todo[i];
        struct rdb_call call;
        struct link *l;
        build(bctx, p->j, &call);
        p->why = NULL;
        if ((p->node = route(db, &call, p)) == -2) {
            p->why = no_node;
            db->map_stale = 1;
            continue;
        }
        l = link_of(db, p->node);
        if (!l->used && ensure(db, l, db->cluster ? p->node : -1, l->fail, sizeof(l->fail)) < 0) {
            p->why = l->fail;
            continue;
        }
        if (!l->c) {
            p->why = l->fail;
            continue;
        }
        l->used = 1;
        if (call.argc + 3 > ARGS_MAX) {
            p->why = too_long;
            continue;
        }
        if (p->ask >= 0)
            redisAppendCommand(l->c, "ASKING");
        append_call(db, l, &call);
        if (each)
            append_wait(db, l);
    }
    for (int k = 0; k < nlinks(db); k++) {
        struct link *l = link_of(db, db->cluster ? k : -1);
        if (l->used && l->c && waits && !each)
            append_wait(db, l);
        if (l->used) {
            flush(l);
            metrics_inc(M_REDIS_ROUND_TRIPS);
        }
    }
    metrics_add(M_REDIS_CALLS, ntodo);
}

/* Reads the answers of one round: each goes to got, or into next (*nnext) to be sent again. */
static void read_round(struct run *run, struct pend *todo, size_t ntodo, struct pend *next,
                       size_t *nnext, int each, int waits, int *pause)
{
    struct rdb *db = run->db;
    char why[256];

    for (size_t i = 0; i < ntodo; i++) {
        struct pend *p = &todo[i];
        struct link *l = p->why ? NULL : link_of(db, p->node);
        redisReply *r = NULL;
        int short_of = 0;
        if (p->why) {
            unanswered(run, p, p->why);
            continue;
        }
        if (p->ask >= 0 && (r = read_reply(db, l, why, sizeof(why))))
            freeReplyObject(r);   /* ASKING's OK */
        if ((p->ask >= 0 && !r) || !(r = read_reply(db, l, why, sizeof(why))) ||
            (each && (short_of = read_wait(db, l, why, sizeof(why))) < 0)) {
            if (r)
                freeReplyObject(r);
            unanswered(run, p, why);
            continue;
        }
        if (again(db, l, p, r, pause)) {
            next[(*nnext)++] = *p;
            freeReplyObject(r);
        } else if (short_of) {
            freeReplyObject(r);
            run->got(run->gctx, p->j, NULL, db->wait_err);
        } else if (!run->got(run->gctx, p->j, r, NULL)) {
            freeReplyObject(r);
        }
    }
    for (int k = 0; k < nlinks(db); k++) {
        struct link *l = link_of(db, db->cluster ? k : -1);
        int short_of;
        if (l->used && waits && !each && (short_of = read_wait(db, l, why, sizeof(why))) != 0) {
            db->unconfirmed = 1;   /* a WAIT not answered confirms nothing either */
            if (short_of < 0)
                snprintf(db->wait_err, sizeof(db->wait_err), "%.150s", why);
        }
        if (l->reload && l->c && load_scripts(db, l, why, sizeof(why)) < 0)
            link_drop(l);
        l->used = l->reload = 0;
    }
}

static int pipeline(struct rdb *db, size_t n, rdb_build_fn *build, void *bctx, got_fn *got,
                    void *gctx, enum rdb_confirm confirm, char *err, size_t errlen)
{
    struct pend *todo = malloc((n ? n : 1) * sizeof(*todo)), *next = malloc((n ? n : 1) * sizeof(*next));
    int waits = confirm != RDB_NO_WAIT && db->cfg->redis.wait_replicas > 0;
    int each = waits && confirm == RDB_WAIT_EACH;
    struct run run = { db, got, gctx, 0, err, errlen };
    size_t ntodo = n;

    db->unconfirmed = 0;
    metrics_inc(M_REDIS_PIPELINES);
    for (size_t j = 0; todo && j < n; j++)
        todo[j] = (struct pend){ .j = j, .ask = -1 };
    for (int round = 0; ntodo; round++) {
        size_t nnext = 0;
        int pause = 0;
        const char *why = !todo || !next ? "out of memory"
                        : round == ROUNDS_MAX ? "redis cluster: still redirected after several tries"
                        : NULL;
        if (!why && db->cluster && (!db->map->nnodes || db->map_stale) &&
            refresh_map(db, err, errlen) < 0 && !db->map->nnodes)
            why = err;
        if (why) {
            char copy[256];
            snprintf(copy, sizeof(copy), "%s", why);
            for (size_t i = 0; i < ntodo; i++)
                unanswered(&run, todo ? &todo[i] : &(struct pend){ .j = i }, copy);
            break;
        }
        send_round(&run, todo, ntodo, build, bctx, each, waits);
        read_round(&run, todo, ntodo, next, &nnext, each, waits, &pause);
        memcpy(todo, next, nnext * sizeof(*todo));
        ntodo = nnext;
        if (pause && ntodo)
            nanosleep(&(struct timespec){ 0, (long)RETRY_STEP_MS * (round + 1) * 1000000L }, NULL);
    }
    free(todo);
    free(next);
    return run.rc;
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

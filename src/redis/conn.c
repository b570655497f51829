/* conn: the Redis calls of one thread: the pipeline engine's transport over hiredis links
 * (rpipe.h: rounds, redirections, waits; rlink.h: one connection), WAIT, single calls and the
 * reply accessors. Where the master is lives in master.c. The contract is in
 * include/redis/conn.h. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "core/metrics.h"
#include "redis/conn_link.h"
#include "redis/watch.h"

#define LOG_MODULE "redis"

#define ARGS_ON_STACK 64   /* words of a call kept on the stack; longer calls take the heap */

/* ------------------------------------------------------------------ replies */

static const redisReply *R(const struct conn_reply *r) { return (const redisReply *)r; }

enum conn_type conn_type(const struct conn_reply *r)
{
    switch (R(r)->type) {
    case REDIS_REPLY_INTEGER: return CONN_INT;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:  return CONN_STR;
    case REDIS_REPLY_ARRAY:   return CONN_ARR;
    case REDIS_REPLY_ERROR:   return CONN_ERR;
    default:                  return CONN_NIL;
    }
}

long long conn_int(const struct conn_reply *r)
{
    return R(r)->type == REDIS_REPLY_INTEGER ? R(r)->integer : 0;
}

const char *conn_str(const struct conn_reply *r, size_t *len)
{
    int t = R(r)->type;

    if (t != REDIS_REPLY_STRING && t != REDIS_REPLY_STATUS && t != REDIS_REPLY_ERROR)
        return NULL;
    if (len)
        *len = R(r)->len;
    return R(r)->str;
}

size_t conn_count(const struct conn_reply *r)
{
    return R(r)->type == REDIS_REPLY_ARRAY ? R(r)->elements : 0;
}

const struct conn_reply *conn_at(const struct conn_reply *r, size_t i)
{
    return (const struct conn_reply *)R(r)->element[i];
}

int conn_is(const struct conn_reply *r, const char *s)
{
    return conn_type(r) == CONN_STR && strcmp(R(r)->str, s) == 0;
}

void conn_reply_free(struct conn_reply *r)
{
    if (r)
        freeReplyObject(r);
}

/* ------------------------------------------------------------------ links */

static const struct rpipe_ops transport;

struct conn *conn_new(const struct config *cfg, const char *const *scripts, int nscripts)
{
    struct conn *db = calloc(1, sizeof(*db));

    if (!db || !(db->lc.sha = calloc(nscripts > 0 ? (size_t)nscripts : 1, sizeof(*db->lc.sha)))) {
        free(db);
        return NULL;
    }
    db->cfg = cfg;
    db->sub = -1;
    db->lc = (struct link_conf){ cfg, scripts, nscripts, db->lc.sha };
    for (int i = 0; i < cfg->redis.nsentinels; i++)
        db->order[i] = i;
    if (cfg->redis.ncluster > 0 && !(db->topo = shared_topo())) {
        conn_free(db);
        return NULL;
    }
    db->pipe = (struct rpipe){ &transport, db, db->topo, cfg->redis.failover_wait_ms,
                               (int)cfg->redis.wait_replicas };
    return db;
}

void conn_free(struct conn *db)
{
    if (!db)
        return;
    link_drop(&db->one);
    for (int i = 0; i < db->nlinks; i++)
        link_drop(&db->links[i]);
    free(db->links);
    free(db->lc.sha);
    free(db);
}
/* The link to node (-1: db->one); NULL when out of memory. Links are numbered as the nodes of
 * the slot map's registry, which only grows. */
static struct link *link_of(struct conn *db, int node)
{
    if (node < 0)
        return &db->one;
    if (node >= db->nlinks) {
        int n = slots_nodes(db->topo) > node ? slots_nodes(db->topo) : node + 1;
        struct link *links = realloc(db->links, (size_t)n * sizeof(*links));
        if (!links)
            return NULL;
        memset(links + db->nlinks, 0, (size_t)(n - db->nlinks) * sizeof(*links));
        db->links = links;
        db->nlinks = n;
    }
    return &db->links[node];
}

/* Connects l (node: a cluster node's number, or -1 for db->one) when it is not, after the
 * backoff of a failed attempt (rlink.h). 0, or -1 with err set. */
static int ensure(struct conn *db, struct link *l, int node, char *err, size_t errlen)
{
    unsigned gen = watch_gen();
    char host[SLOTS_HOST_MAX];
    int rc, port;

    if (l->c && !l->c->err && !l->elsewhere && (node >= 0 || !conn_watched(db) || gen == db->seen_gen))
        return 0;
    link_drop(l);
    if (node < 0 && conn_watched(db) && gen != db->seen_gen)
        prefer_announcer(db);
    if (link_waiting(l, err, errlen))
        return -1;
    if (node < 0)
        rc = open_one(db, l->last_err, sizeof(l->last_err));
    else if ((rc = slots_node_addr(db->topo, node, host, &port)) == 0)
        rc = link_open(&db->lc, l, host, port, l->last_err, sizeof(l->last_err));
    if (rc == 0) {
        if (node < 0 && conn_watched(db) && gen != db->seen_gen && watch_since_began() >= 0)
            log_info("a connection moved to the master at %s, %lld ms after the failover began",
                     db->at, watch_since_began());
        if (node < 0)
            db->seen_gen = gen;
        link_opened(l);
        return 0;
    }
    link_failed(l, err, errlen);
    if (node >= 0)
        slots_mark_stale(db->topo);   /* the node may be gone, its slots served by another */
    return -1;
}

/* ------------------------------------------------------------------ the transport */

static int t_open(void *t, int node, struct conn_fail *why, char *text, size_t textlen)
{
    struct conn *db = t;
    struct link *l = link_of(db, node);

    if (!l) {
        snprintf(text, textlen, "out of memory");
        *why = (struct conn_fail){ CONN_E_MEMORY, text };
        return -1;
    }
    if (ensure(db, l, node, text, textlen) == 0)
        return 0;
    *why = (struct conn_fail){ CONN_E_CONN, text };
    return -1;
}

/* Queues call: EVALSHA sha nkeys argv... for a script, else argv as is (copied). */
static int t_send(void *t, int node, const struct conn_call *call, int asking)
{
    struct conn *db = t;
    struct link *l = link_of(db, node);
    const char *stack_a[ARGS_ON_STACK], **a = stack_a;
    size_t stack_len[ARGS_ON_STACK], *len = stack_len, argc = 0, words = call->argc + 3;
    char nkeys[24];
    int rc;

    if (words > ARGS_ON_STACK && (!(a = malloc(words * sizeof(*a))) || !(len = malloc(words * sizeof(*len))))) {
        free(a != stack_a ? a : NULL);
        return -1;
    }
    if (asking)
        redisAppendCommand(l->c, "ASKING");
    if (call->script >= 0) {
        snprintf(nkeys, sizeof(nkeys), "%zu", call->nkeys);
        a[0] = "EVALSHA", len[0] = 7;
        a[1] = db->lc.sha[call->script], len[1] = 40;
        a[2] = nkeys, len[2] = strlen(nkeys);
        argc = 3;
    }
    for (size_t i = 0; i < call->argc; i++, argc++) {
        a[argc] = call->argv[i];
        len[argc] = call->lens ? call->lens[i] : strlen(call->argv[i]);
    }
    rc = redisAppendCommandArgv(l->c, (int)argc, a, len) == REDIS_OK ? 0 : -1;
    if (a != stack_a) {
        free(a);
        free(len);
    }
    metrics_inc(M_REDIS_CALLS);
    return rc;
}

/* WAIT counts the writes made on this connection, and answers the count even when it timed
 * out. */
static void t_send_wait(void *t, int node)
{
    struct conn *db = t;

    redisAppendCommand(link_of(db, node)->c, "WAIT %lld %lld", (long long)db->cfg->redis.wait_replicas,
                       (long long)db->cfg->redis.wait_timeout_ms);
}

/* Sends the output buffer now, so that all nodes work on their calls at once. A write that
 * fails leaves its error, which the next read reports. */
static void t_flush(void *t, int node)
{
    struct link *l = link_of(t, node);
    int done = 0;

    while (l->c && !done)
        if (redisBufferWrite(l->c, &done) != REDIS_OK)
            break;
    metrics_inc(M_REDIS_ROUND_TRIPS);
}

static int t_read(void *t, int node, void **reply, struct conn_fail *why, char *text, size_t textlen)
{
    struct conn *db = t;
    struct link *l = link_of(db, node);

    *reply = NULL;
    if (l->c && redisGetReply(l->c, reply) == REDIS_OK && *reply) {
        link_note(l, *reply);
        return 0;
    }
    snprintf(text, textlen, "redis: %s", l->c ? link_error(l) : "the connection was lost");
    *why = (struct conn_fail){ l->c ? link_code(l) : CONN_E_CONN, text };
    link_drop(l);
    return -1;
}

static const char *t_error_of(const void *reply)
{
    const redisReply *r = reply;

    return r->type == REDIS_REPLY_ERROR ? r->str : NULL;
}

/* WAIT's answer. With Sentinels, a write whose WAIT answered after a failover began counts as
 * short: the replicas that confirmed it may follow another master now; and a master short of
 * replicas is looked for again (it may have been replaced). */
static int t_read_wait(void *t, int node, struct conn_fail *why, char *text, size_t textlen)
{
    struct conn *db = t;
    struct link *l = link_of(db, node);
    long long want = db->cfg->redis.wait_replicas;
    void *v;
    redisReply *r;
    int short_of = 0;

    if (t_read(t, node, &v, why, text, textlen) < 0)
        return -1;
    r = v;
    if (node < 0 && conn_watched(db) && (watch_gen() != db->seen_gen || watch_failing())) {
        short_of = 1;
        snprintf(text, textlen, "redis: a failover of master %.40s began before the replicas "
                 "confirmed the write", db->cfg->redis.master_name);
        l->elsewhere = 1;
    } else if (!(r->type == REDIS_REPLY_INTEGER && r->integer >= want)) {
        short_of = 1;
        snprintf(text, textlen, "redis: %.80s%lld of %lld replicas confirmed the write within "
                 "redis.wait_timeout_ms (%lld ms)", r->type == REDIS_REPLY_ERROR ? r->str : "",
                 r->type == REDIS_REPLY_INTEGER ? r->integer : 0LL, want,
                 (long long)db->cfg->redis.wait_timeout_ms);
        if (db->cfg->redis.nsentinels)
            l->elsewhere = 1;
    }
    if (short_of)
        *why = (struct conn_fail){ CONN_E_UNCONFIRMED, text };
    freeReplyObject(r);
    return short_of;
}

static void t_reply_free(void *reply)
{
    freeReplyObject(reply);
}

static void t_reload(void *t, int node)
{
    struct conn *db = t;
    struct link *l = link_of(db, node);
    char why[256];

    if (l->c && link_load_scripts(&db->lc, l, why, sizeof(why)) < 0)
        link_drop(l);
}

static void t_drop(void *t, int node)
{
    link_drop(link_of(t, node));
}

static void t_refresh(void *t)
{
    refresh_map(t);
}

static int t_holding(void *t)
{
    return conn_watched(t) && watch_failing();
}

static int t_switched(void *t, int node)
{
    struct conn *db = t;

    return node < 0 && conn_watched(db) && watch_gen() != db->seen_gen;
}

static int64_t t_now(void *t)
{
    (void)t;
    return clock_mono_ms();
}

static void t_sleep(void *t, int64_t ms)
{
    (void)t;
    clock_sleep_ms(ms);
}

static void t_waited(void *t, int64_t ms)
{
    (void)t;
    metrics_add(M_REDIS_FAILOVER_WAIT_MS, (uint64_t)ms);
    watch_waited(ms);
}

static const struct rpipe_ops transport = {
    t_open, t_send, t_send_wait, t_flush, t_read, t_error_of, t_read_wait, t_reply_free,
    t_reload, t_drop, t_refresh, t_holding, t_switched, t_now, t_sleep, t_waited,
};

/* ------------------------------------------------------------------ calls */

struct relay {
    conn_reply_fn *fn;
    void *ctx;
};

static int relay(void *ctx, size_t j, void *r, const struct conn_fail *fail)
{
    const struct relay *rl = ctx;

    rl->fn(rl->ctx, j, (const struct conn_reply *)r, fail);
    return 0;
}

int conn_pipeline(struct conn *db, size_t n, conn_build_fn *build, conn_reply_fn *fn, void *ctx,
                 enum conn_confirm confirm, char *err, size_t errlen)
{
    struct relay rl = { fn, ctx };

    metrics_inc(M_REDIS_PIPELINES);
    return rpipe_run(&db->pipe, n, build, ctx, relay, &rl, confirm, err, errlen);
}

static void build_one(void *ctx, size_t j, struct conn_call *call)
{
    (void)j;
    *call = *(const struct conn_call *)ctx;
}

/* The outcome of conn_call's one call. */
struct one {
    struct conn *db;
    redisReply *r;
};

static int keep_one(void *ctx, size_t j, void *r, const struct conn_fail *fail)
{
    struct one *o = ctx;

    (void)j;
    o->db->code = fail ? fail->code : CONN_OK;
    if (fail && fail->code == CONN_E_UNCONFIRMED) {
        o->db->unconfirmed = 1;
        snprintf(o->db->wait_err, sizeof(o->db->wait_err), "%s", fail->text);
    }
    o->r = r;
    return r != NULL;
}

struct conn_reply *conn_call(struct conn *db, const struct conn_call *call, enum conn_confirm confirm,
                           char *err, size_t errlen)
{
    struct one o = { db, NULL };

    db->unconfirmed = 0;
    metrics_inc(M_REDIS_PIPELINES);
    if (rpipe_run(&db->pipe, 1, build_one, (void *)call, keep_one, &o, confirm, err, errlen) < 0 &&
        !o.r)
        return NULL;
    if (o.r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "redis: %s", o.r->str);
        db->code = CONN_E_REPLY;
        freeReplyObject(o.r);
        return NULL;
    }
    return (struct conn_reply *)o.r;
}

#define COMMAND_WORDS_MAX 16

struct conn_reply *conn_command(struct conn *db, char *err, size_t errlen, const char *name, ...)
{
    const char *argv[COMMAND_WORDS_MAX];
    struct conn_call call = { .script = -1, .argv = argv };
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
    return conn_call(db, &call, CONN_NO_WAIT, err, errlen);
}

const char *conn_unconfirmed(const struct conn *db)
{
    return db->unconfirmed ? db->wait_err : NULL;
}

unsigned conn_master_moves(void)
{
    return watch_moves();
}

int conn_eviction(char *policy, size_t len)
{
    return link_eviction(policy, len);
}

enum conn_code conn_code(const struct conn *db)
{
    return db->code;
}

int conn_subscribe(struct conn *db, const char *channel, char *err, size_t errlen)
{
    struct link *l;
    redisReply *r;
    int node = -1;

    if (db->topo) {   /* every node of a cluster hears every PUBLISH: any one will do */
        if (slots_any(db->topo) < 0)
            refresh_map(db);
        if ((node = slots_any(db->topo)) < 0) {
            snprintf(err, errlen, "no node of the cluster is known yet");
            return -1;
        }
    }
    if (!(l = link_of(db, node))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (ensure(db, l, node, err, errlen) < 0)
        return -1;
    r = redisCommand(l->c, "SUBSCRIBE %s", channel);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "SUBSCRIBE: %s", r ? r->str : link_error(l));
        freeReplyObject(r);
        link_drop(l);
        return -1;
    }
    freeReplyObject(r);
    db->sub = node;
    return 0;
}

int conn_message(struct conn *db, int timeout_ms, char *out, size_t outlen, char *err,
                 size_t errlen)
{
    struct link *l = link_of(db, db->sub);
    struct pollfd pfd;
    void *reply = NULL;
    redisReply *r;
    int n;

    if (!l || !l->c || l->c->err) {
        snprintf(err, errlen, "not subscribed");
        return -1;
    }
    if (redisGetReplyFromReader(l->c, &reply) != REDIS_OK)
        goto fail;
    if (!reply) {
        pfd = (struct pollfd){ .fd = l->c->fd, .events = POLLIN };
        if ((n = poll(&pfd, 1, timeout_ms)) <= 0)
            return n < 0 && errno != EINTR ? (snprintf(err, errlen, "poll failed"), -1) : 0;
        if (redisBufferRead(l->c) != REDIS_OK || redisGetReplyFromReader(l->c, &reply) != REDIS_OK)
            goto fail;
        if (!reply)
            return 0;
    }
    r = reply;
    n = r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "message") == 0 &&
        r->element[2]->type == REDIS_REPLY_STRING;
    if (n)
        snprintf(out, outlen, "%.*s", (int)r->element[2]->len, r->element[2]->str);
    freeReplyObject(r);
    return n;
fail:
    snprintf(err, errlen, "%s", l->c->errstr[0] ? l->c->errstr : "the connection closed");
    link_drop(l);
    return -1;
}

int conn_ping(struct conn *db, char *err, size_t errlen)
{
    struct conn_reply *r = conn_command(db, err, errlen, "PING", NULL);

    conn_reply_free(r);
    return r ? 0 : -1;
}

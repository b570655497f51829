/* leases: the Redis side of partition-group leases: claim, renew and release scripts, the
 * instances' heartbeats, operators' hand-back requests, the status owners publish, and the view
 * of all of it that GET /delay-queue/api/claims answers. The contract is in include/redis/leases.h. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "redis/leases.h"
#include "lib/clock.h"
#include "lib/fnv.h"
#include "core/job.h"
#include "lib/log.h"
#include "redis/conn.h"

#define LOG_MODULE "claims"
#define KEY_MAX (CONFIG_STR_MAX + 32)
#define RELEASE_REQUEST_TTL_S 60  /* an operator's request not taken up by then is void */

struct leases {
    const struct config *cfg;
    struct conn *db;
    char token[LEASES_TOKEN_MAX];
    size_t identity_len;        /* the token's first identity_len characters: "<host>/<listen>/" */
};

/* ARGV: token, ttl ms. Renews only one's own lease. */
static const char renew_lua[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "end\n"
    "return 0\n";

/* ARGV: token. Deletes only one's own lease. */
static const char release_lua[] =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('DEL', KEYS[1])\n"
    "end\n"
    "return 0\n";

/* ARGV: token, identity, ttl ms. Takes the lease when nobody holds it, or when a process of
 * this identity holds it: this one before a restart, dead (only one process can listen where the
 * identity says, and this one does). Returns 1 taken, 2 taken over, 0 held by another. */
static const char acquire_lua[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if v and string.sub(v, 1, #ARGV[2]) ~= ARGV[2] then return 0 end\n"
    "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])\n"
    "if v and v ~= ARGV[1] then return 2 end\n"
    "return 1\n";

/* KEYS: the live set, the load hash. ARGV: token, expiry ms, now ms, groups held, identity.
 * Returns {live instances, the fewest groups any live instance holds}. An earlier process of
 * this identity leaves the live set at once: it is dead (see acquire_lua). */
static const char heartbeat_lua[] =
    "for _, t in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do\n"
    "  if t ~= ARGV[1] and string.sub(t, 1, #ARGV[5]) == ARGV[5] then\n"
    "    redis.call('ZREM', KEYS[1], t)\n"
    "    redis.call('HDEL', KEYS[2], t)\n"
    "  end\n"
    "end\n"
    "redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])\n"
    "redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])\n"
    "for _, t in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])) do\n"
    "  redis.call('HDEL', KEYS[2], t)\n"
    "end\n"
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])\n"
    "local live, least = redis.call('ZRANGE', KEYS[1], 0, -1), nil\n"
    "for _, t in ipairs(live) do\n"
    "  local n = tonumber(redis.call('HGET', KEYS[2], t) or '0')\n"
    "  if not least or n < least then least = n end\n"
    "end\n"
    "return {#live, least or 0}\n";

enum script { S_RENEW, S_RELEASE, S_HEARTBEAT, S_ACQUIRE, S_COUNT };
static const char *const script_text[S_COUNT] = { renew_lua, release_lua, heartbeat_lua, acquire_lua };

/* A control key: "<prefix>{ctl}:<what>[:<group>]". The hash tag puts them all in one Redis
 * Cluster slot, so that a script may touch several (the heartbeat does). */
static void key_of(const struct config *cfg, const char *what, int group, char *out, size_t outlen)
{
    if (group < 0)
        snprintf(out, outlen, "%s" LEASES_TAG ":%s", cfg->redis.prefix, what);
    else
        snprintf(out, outlen, "%s" LEASES_TAG ":%s:%d", cfg->redis.prefix, what, group);
}

/* 32 bits of FNV-1a of the kernel's boot id and this process's network namespace: the same
 * for every process of one host and namespace until a reboot, and different between hosts or
 * namespaces that share a hostname. */
static unsigned long place_digest(void)
{
    char boot[64] = "", ns[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    ssize_t n;

    if (f) {
        if (!fgets(boot, sizeof(boot), f))
            boot[0] = '\0';
        fclose(f);
    }
    if ((n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1)) > 0)
        ns[n] = '\0';
    return fnv1a(fnv1a(FNV1A_BASIS, boot), ns);
}

struct leases *leases_new(const struct config *cfg)
{
    struct leases *c = calloc(1, sizeof(*c));
    char host[64] = "host", rnd[JOB_ID_GEN_LEN + 1];
    int n;

    if (!c || !(c->db = conn_new(cfg, script_text, S_COUNT))) {
        free(c);
        return NULL;
    }
    c->cfg = cfg;
    gethostname(host, sizeof(host) - 1);
    job_new_id(rnd);
    /* the listen address is kept whole: the token has room for the longest (LEASES_TOKEN_MAX) */
    n = snprintf(c->token, sizeof(c->token), "%s/%s/%08lx/", host, cfg->http.listen, place_digest());
    c->identity_len = n > 0 && (size_t)n < sizeof(c->token) ? (size_t)n : sizeof(c->token) - 1;
    snprintf(c->token + c->identity_len, sizeof(c->token) - c->identity_len, "%d.%.8s",
             (int)getpid(), rnd);
    return c;
}

void leases_free(struct leases *c)
{
    if (!c)
        return;
    conn_free(c->db);
    free(c);
}

const char *leases_token(const struct leases *c)
{
    return c->token;
}

/* Runs a one-key script whose answer is an integer. Returns it, or -1 with err set: also
 * when confirm asks the replicas and too few confirmed a write it made (an answer above 0). */
static long long eval_int(struct leases *c, enum script script, const char *key, size_t argc,
                          const char *const *argv, enum conn_confirm confirm, char *err, size_t errlen)
{
    const char *a[3] = { key, argc > 0 ? argv[0] : NULL, argc > 1 ? argv[1] : NULL };
    struct conn_call call = { .script = (int)script, .nkeys = 1, .argc = 1 + argc, .argv = a };
    struct conn_reply *r = conn_call(c->db, &call, confirm, err, errlen);
    long long v = -1;

    if (!r)
        return -1;
    if (conn_type(r) == CONN_INT)
        v = conn_int(r);
    else
        snprintf(err, errlen, "redis: unexpected reply");
    if (v > 0 && conn_unconfirmed(c->db)) {
        snprintf(err, errlen, "%s", conn_unconfirmed(c->db));
        v = -1;
    }
    conn_reply_free(r);
    return v;
}

int leases_heartbeat(struct leases *c, int64_t now_ms, int held, int *least, char *err,
                     size_t errlen)
{
    char keys[2][KEY_MAX], expiry[32], now[32], load[16], identity[LEASES_TOKEN_MAX];
    const char *argv[7] = { keys[0], keys[1], c->token, expiry, now, load, identity };
    struct conn_call call = { .script = S_HEARTBEAT, .nkeys = 2, .argc = 7, .argv = argv };
    struct conn_reply *r;
    int live = -1;

    key_of(c->cfg, "instances", -1, keys[0], sizeof(keys[0]));
    key_of(c->cfg, "load", -1, keys[1], sizeof(keys[1]));
    /* Two renew intervals: a dead instance leaves the live set before its leases expire, so
     * an operator can tell a dead owner from a live one (claims.sh force-release). */
    snprintf(expiry, sizeof(expiry), "%lld", (long long)(now_ms + 2 * c->cfg->delay.claim_ttl_ms / 3));
    snprintf(now, sizeof(now), "%lld", (long long)now_ms);
    snprintf(load, sizeof(load), "%d", held);
    snprintf(identity, sizeof(identity), "%.*s", (int)c->identity_len, c->token);
    if (!(r = conn_call(c->db, &call, CONN_NO_WAIT, err, errlen)))
        return -1;
    if (conn_count(r) == 2 && conn_type(conn_at(r, 0)) == CONN_INT && conn_type(conn_at(r, 1)) == CONN_INT) {
        live = conn_int(conn_at(r, 0)) < 1 ? 1 : (int)conn_int(conn_at(r, 0));
        *least = (int)conn_int(conn_at(r, 1));
    } else {
        snprintf(err, errlen, "redis: unexpected reply to the heartbeat");
    }
    conn_reply_free(r);
    return live;
}

void leases_goodbye(struct leases *c)
{
    char key[KEY_MAX], err[256];

    key_of(c->cfg, "instances", -1, key, sizeof(key));
    conn_reply_free(conn_command(c->db, err, sizeof(err), "ZREM", key, c->token, NULL));
    key_of(c->cfg, "load", -1, key, sizeof(key));
    conn_reply_free(conn_command(c->db, err, sizeof(err), "HDEL", key, c->token, NULL));
}

int leases_acquire(struct leases *c, int group, char *err, size_t errlen)
{
    char key[KEY_MAX], ttl[32], identity[LEASES_TOKEN_MAX];
    const char *argv[] = { key, c->token, identity, ttl };
    struct conn_call call = { .script = S_ACQUIRE, .nkeys = 1, .argc = 4, .argv = argv };
    struct conn_reply *r;
    int got;

    key_of(c->cfg, "claim", group, key, sizeof(key));
    snprintf(ttl, sizeof(ttl), "%lld", (long long)c->cfg->delay.claim_ttl_ms);
    snprintf(identity, sizeof(identity), "%.*s", (int)c->identity_len, c->token);
    /* A lease a failover could take back is no lease: with redis.wait_replicas, it counts once
     * the replicas have it, and is given up when they do not confirm it in time. */
    if (!(r = conn_call(c->db, &call, CONN_WAIT_END, err, errlen)))
        return -1;
    got = conn_type(r) == CONN_INT ? (int)conn_int(r) : -1;
    conn_reply_free(r);
    if (got < 0) {
        snprintf(err, errlen, "redis: unexpected reply to the claim");
        return -1;
    }
    if (got == 2)
        log_info("group=%d taken over from an earlier process of this instance (%s)", group,
                 identity);
    got = got > 0;
    if (got && conn_unconfirmed(c->db)) {
        char why[256];
        snprintf(err, errlen, "%s", conn_unconfirmed(c->db));
        if (leases_release(c, group, why, sizeof(why)) < 0)
            snprintf(err + strlen(err), errlen - strlen(err), "; giving it up failed: %s", why);
        return -1;
    }
    return got;
}

void leases_check_old_layout(struct leases *c)
{
    char key[KEY_MAX], err[256];

    for (int g = 0; g < c->cfg->delay.ngroups; g++) {
        struct conn_reply *r;
        int held;
        snprintf(key, sizeof(key), "%sclaim:%d", c->cfg->redis.prefix, g);
        if (!(r = conn_command(c->db, err, sizeof(err), "GET", key, NULL)))
            return;
        if ((held = conn_type(r) == CONN_STR))
            log_error("group %d is leased under the earlier key layout (%s, owner %s): an older "
                      "delayqd runs on these topics; stop every older instance (both may forward "
                      "the group meanwhile)", g, key, conn_str(r, NULL));
        conn_reply_free(r);
        if (held)
            return;
    }
}

int leases_renew(struct leases *c, int group, char *err, size_t errlen)
{
    char key[KEY_MAX], ttl[32];
    const char *argv[2] = { c->token, ttl };
    long long v;

    key_of(c->cfg, "claim", group, key, sizeof(key));
    snprintf(ttl, sizeof(ttl), "%lld", (long long)c->cfg->delay.claim_ttl_ms);
    /* Confirmed like an acquisition: a renewal a failover takes back would let another
     * instance take the group while this one still forwards it. */
    v = eval_int(c, S_RENEW, key, 2, argv, CONN_WAIT_END, err, errlen);
    return v < 0 ? -1 : v > 0;
}

int leases_release(struct leases *c, int group, char *err, size_t errlen)
{
    char key[KEY_MAX];
    const char *argv[1] = { c->token };
    long long v;

    key_of(c->cfg, "claim", group, key, sizeof(key));
    v = eval_int(c, S_RELEASE, key, 1, argv, CONN_NO_WAIT, err, errlen);
    return v < 0 ? -1 : v > 0;
}

int leases_owner(struct leases *c, int group, char *out, size_t outlen, char *err, size_t errlen)
{
    char key[KEY_MAX];
    struct conn_reply *r;

    key_of(c->cfg, "claim", group, key, sizeof(key));
    if (!(r = conn_command(c->db, err, errlen, "GET", key, NULL)))
        return -1;
    snprintf(out, outlen, "%s", conn_type(r) == CONN_STR ? conn_str(r, NULL) : "");
    conn_reply_free(r);
    return 0;
}

int leases_ask_release(struct leases *c, int group, const char *who, char *owner,
                       size_t ownerlen, char *err, size_t errlen)
{
    char key[KEY_MAX];
    struct conn_reply *r;

    if (leases_owner(c, group, owner, ownerlen, err, errlen) < 0)
        return -1;
    if (!owner[0])
        return 0;
    key_of(c->cfg, "release", group, key, sizeof(key));
    if (!(r = conn_command(c->db, err, errlen, "SET", key, who, "EX", "60", NULL)))
        return -1;
    conn_reply_free(r);
    return 0;
}

int leases_release_requested(struct leases *c, int group, char *err, size_t errlen)
{
    char key[KEY_MAX];
    struct conn_reply *r;
    int asked;

    key_of(c->cfg, "release", group, key, sizeof(key));
    if (!(r = conn_command(c->db, err, errlen, "GETDEL", key, NULL)))
        return -1;
    asked = conn_type(r) == CONN_STR;
    conn_reply_free(r);
    return asked;
}

/* Status rows per HSET: a call of bounded size however many partitions and levels a group
 * has. */
#define STATUS_ROWS_PER_CALL 256

/* HSET key with rows [from, from + n) of fields and values, after head[0..nhead). */
static int hset_rows(struct leases *c, const char *key, const char *const *head, size_t nhead,
                     const char *const *fields, const char *const *values, size_t n, char *err,
                     size_t errlen)
{
    size_t argc = 2 + nhead + 2 * n;
    const char **argv = calloc(argc, sizeof(*argv));
    struct conn_call call = { .script = -1, .argc = argc, .argv = argv };
    struct conn_reply *r;

    if (!argv) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    argv[0] = "HSET";
    argv[1] = key;
    for (size_t i = 0; i < nhead; i++)
        argv[2 + i] = head[i];
    for (size_t i = 0; i < n; i++) {
        argv[2 + nhead + 2 * i] = fields[i];
        argv[3 + nhead + 2 * i] = values[i];
    }
    r = conn_call(c->db, &call, CONN_NO_WAIT, err, errlen);
    conn_reply_free(r);
    free(argv);
    return r ? 0 : -1;
}

int leases_publish(struct leases *c, int group, size_t n, const char *const *fields,
                   const char *const *values, char *err, size_t errlen)
{
    char key[KEY_MAX], now[32], ttl[32];
    const char *head[4] = { "owner", c->token, "updated_ms", now };
    struct conn_reply *r;

    key_of(c->cfg, "status", group, key, sizeof(key));
    snprintf(now, sizeof(now), "%lld", (long long)clock_now_ms());
    snprintf(ttl, sizeof(ttl), "%lld", (long long)(3 * c->cfg->delay.claim_ttl_ms));
    for (size_t at = 0; at < n || at == 0; at += STATUS_ROWS_PER_CALL) {
        size_t k = n - at < STATUS_ROWS_PER_CALL ? n - at : STATUS_ROWS_PER_CALL;
        if (hset_rows(c, key, head, at == 0 ? 4 : 0, fields + at, values + at, k, err, errlen) < 0)
            return -1;
    }
    if (!(r = conn_command(c->db, err, errlen, "PEXPIRE", key, ttl, NULL)))
        return -1;
    conn_reply_free(r);
    return 0;
}

/* One field of a group's status hash into g: its publisher, when, or a partition's row. */
static void status_field(struct lease_group *g, const char *f, const char *v)
{
    const char *slash;
    long long committed, end, due;
    struct lease_part *p;

    if (strcmp(f, "owner") == 0) {
        snprintf(g->status_owner, sizeof(g->status_owner), "%s", v);
        return;
    }
    if (strcmp(f, "updated_ms") == 0) {
        g->updated_ms = atoll(v);
        return;
    }
    if (!(slash = strrchr(f, '/')) || sscanf(v, "%lld %lld %lld", &committed, &end, &due) != 3 ||
        !(p = realloc(g->parts, (g->nparts + 1) * sizeof(*p))))
        return;
    g->parts = p;
    p = &g->parts[g->nparts++];
    *p = (struct lease_part){ .partition = atoi(slash + 1), .committed = committed, .end = end,
                              .head_due_ms = due };
    snprintf(p->topic, sizeof(p->topic), "%.*s", (int)(slash - f), f);
}

/* The view's reads, in one pipeline: the live set (with scores), then for each group its lease,
 * the lease's time left and its status hash. The keys share the {ctl} tag: one node. */
enum { VIEW_LIVE, VIEW_PER_GROUP = 3 };

struct view_read {
    const struct config *cfg;
    struct lease_view *v;
    char key[KEY_MAX];          /* the call being built */
    const char *argv[5];
    char error[200];            /* the first error Redis answered, or "" */
};

static void view_build(void *ctx, size_t j, struct conn_call *call)
{
    static const char *const cmd[VIEW_PER_GROUP] = { "GET", "PTTL", "HGETALL" };
    static const char *const live[] = { "ZRANGE", NULL, "0", "-1", "WITHSCORES" };
    struct view_read *v = ctx;
    const char **argv = v->argv;

    if (j == VIEW_LIVE) {
        key_of(v->cfg, "instances", -1, v->key, sizeof(v->key));
        memcpy(v->argv, live, sizeof(live));
        argv[1] = v->key;
        *call = (struct conn_call){ .script = -1, .nkeys = 1, .argc = 5, .argv = argv };
        return;
    }
    key_of(v->cfg, (j - 1) % VIEW_PER_GROUP == 2 ? "status" : "claim",
           (int)((j - 1) / VIEW_PER_GROUP), v->key, sizeof(v->key));
    argv[0] = cmd[(j - 1) % VIEW_PER_GROUP];
    argv[1] = v->key;
    *call = (struct conn_call){ .script = -1, .nkeys = 1, .argc = 2, .argv = argv };
}

/* The live instances' tokens and heartbeat expiries into v. */
static void view_live(struct lease_view *v, const struct conn_reply *r)
{
    size_t n = conn_count(r) / 2;

    if (!n || !(v->live = calloc(n, sizeof(*v->live))))
        return;
    for (size_t i = 0; i < n; i++) {
        const char *tok = conn_str(conn_at(r, 2 * i), NULL);
        const char *score = conn_str(conn_at(r, 2 * i + 1), NULL);
        if (tok && score) {
            snprintf(v->live[v->nlive].token, sizeof(v->live[v->nlive].token), "%s", tok);
            v->live[v->nlive++].until_ms = atoll(score);
        }
    }
}

static void view_reply(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct view_read *v = ctx;
    struct lease_group *g;

    if (fail)
        return;   /* conn_pipeline fails the whole view */
    if (conn_type(r) == CONN_ERR) {   /* an answer all the same: the view fails here */
        if (!v->error[0])
            snprintf(v->error, sizeof(v->error), "redis: %s", conn_str(r, NULL));
        return;
    }
    if (j == VIEW_LIVE) {
        view_live(v->v, r);
        return;
    }
    g = &v->v->groups[(j - 1) / VIEW_PER_GROUP];
    switch ((j - 1) % VIEW_PER_GROUP) {
    case 0:
        if (conn_type(r) == CONN_STR)
            snprintf(g->owner, sizeof(g->owner), "%s", conn_str(r, NULL));
        break;
    case 1:
        g->ttl_ms = conn_type(r) == CONN_INT && conn_int(r) >= 0 ? conn_int(r) : -1;
        break;
    default:
        g->status_read = 1;
        for (size_t i = 0; i + 1 < conn_count(r); i += 2) {
            const char *f = conn_str(conn_at(r, i), NULL), *val = conn_str(conn_at(r, i + 1), NULL);
            if (f && val)
                status_field(g, f, val);
        }
        break;
    }
}

int leases_read_view(struct leases *c, struct lease_view *out, char *err, size_t errlen)
{
    const struct config *cfg = c->cfg;
    struct view_read v = { .cfg = cfg, .v = out };
    int rc;

    memset(out, 0, sizeof(*out));
    if (!(out->groups = calloc((size_t)cfg->delay.ngroups, sizeof(*out->groups)))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    out->ngroups = (size_t)cfg->delay.ngroups;
    for (size_t i = 0; i < out->ngroups; i++)
        out->groups[i] = (struct lease_group){ .group = (int)i, .ttl_ms = -1, .updated_ms = -1 };
    rc = conn_pipeline(c->db, 1 + VIEW_PER_GROUP * out->ngroups, view_build, view_reply, &v,
                       CONN_NO_WAIT, err, errlen);
    if (rc == 0 && v.error[0]) {
        snprintf(err, errlen, "%s", v.error);
        rc = -1;
    }
    if (rc < 0)
        lease_view_release(out);
    return rc;
}

void lease_view_release(struct lease_view *v)
{
    for (size_t i = 0; v->groups && i < v->ngroups; i++)
        free(v->groups[i].parts);
    free(v->groups);
    free(v->live);
    memset(v, 0, sizeof(*v));
}

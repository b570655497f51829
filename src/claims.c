/* claims: the Redis side of partition-group leases: claim, renew and release scripts, the
 * instances' heartbeats, operators' hand-back requests, the status owners publish, and the view
 * of all of it that GET /delay-queue/api/claims answers. The contract is in include/claims.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "api.h"
#include "claims.h"
#include "clock.h"
#include "job.h"
#include "log.h"

#define LOG_MODULE "claims"
#define KEY_MAX (CONFIG_STR_MAX + 32)
#define RELEASE_REQUEST_TTL_S 60  /* an operator's request not taken up by then is void */

struct claims {
    const struct config *cfg;
    struct store *st;
    char token[CLAIMS_TOKEN_MAX];
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

/* KEYS: the live set, the load hash. ARGV: token, expiry ms, now ms, groups held.
 * Returns {live instances, the fewest groups any live instance holds}. */
static const char heartbeat_lua[] =
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

static void key_of(const struct config *cfg, const char *what, int group, char *out, size_t outlen)
{
    if (group < 0)
        snprintf(out, outlen, "%s%s", cfg->redis.prefix, what);
    else
        snprintf(out, outlen, "%s%s:%d", cfg->redis.prefix, what, group);
}

struct claims *claims_new(const struct config *cfg)
{
    struct claims *c = calloc(1, sizeof(*c));
    char host[64] = "host", rnd[JOB_ID_GEN_LEN + 1];

    if (!c || !(c->st = store_new(cfg))) {
        free(c);
        return NULL;
    }
    c->cfg = cfg;
    gethostname(host, sizeof(host) - 1);
    job_new_id(rnd);
    snprintf(c->token, sizeof(c->token), "%s:%d:%.8s", host, (int)getpid(), rnd);
    return c;
}

void claims_free(struct claims *c)
{
    if (!c)
        return;
    store_free(c->st);
    free(c);
}

const char *claims_token(const struct claims *c)
{
    return c->token;
}

/* Runs a one-key script whose answer is an integer. Returns it, or -1 with err set. */
static long long eval_int(struct claims *c, const char *script, const char *key, int argc,
                          const char *const *argv, char *err, size_t errlen)
{
    redisReply *r = store_eval(c->st, script, key, argc, argv, NULL, err, errlen);
    long long v = -1;

    if (!r)
        return -1;
    if (r->type == REDIS_REPLY_INTEGER)
        v = r->integer;
    else
        snprintf(err, errlen, "redis: unexpected reply");
    freeReplyObject(r);
    return v;
}

int claims_heartbeat(struct claims *c, int64_t now_ms, int held, int *least, char *err,
                     size_t errlen)
{
    char keys[2][KEY_MAX], expiry[32], now[32], load[16];
    const char *argv[7] = { "EVAL", heartbeat_lua, "2", keys[0], keys[1], NULL, NULL };
    const char *args[4] = { c->token, expiry, now, load };
    const char *all[11];
    redisReply *r;
    int live = -1;

    key_of(c->cfg, "instances", -1, keys[0], sizeof(keys[0]));
    key_of(c->cfg, "load", -1, keys[1], sizeof(keys[1]));
    /* Two renew intervals: a dead instance leaves the live set before its leases expire, so
     * an operator can tell a dead owner from a live one (claims.sh force-release). */
    snprintf(expiry, sizeof(expiry), "%lld", (long long)(now_ms + 2 * c->cfg->delay.claim_ttl_ms / 3));
    snprintf(now, sizeof(now), "%lld", (long long)now_ms);
    snprintf(load, sizeof(load), "%d", held);
    memcpy(all, argv, 5 * sizeof(*all));
    memcpy(all + 5, args, 4 * sizeof(*all));
    if (!(r = store_argv(c->st, 9, all, err, errlen)))
        return -1;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_INTEGER &&
        r->element[1]->type == REDIS_REPLY_INTEGER) {
        live = r->element[0]->integer < 1 ? 1 : (int)r->element[0]->integer;
        *least = (int)r->element[1]->integer;
    } else {
        snprintf(err, errlen, "redis: unexpected reply to the heartbeat");
    }
    freeReplyObject(r);
    return live;
}

void claims_goodbye(struct claims *c)
{
    char key[KEY_MAX], err[256];
    redisReply *r;

    key_of(c->cfg, "instances", -1, key, sizeof(key));
    if ((r = store_command(c->st, err, sizeof(err), "ZREM %s %s", key, c->token)))
        freeReplyObject(r);
    key_of(c->cfg, "load", -1, key, sizeof(key));
    if ((r = store_command(c->st, err, sizeof(err), "HDEL %s %s", key, c->token)))
        freeReplyObject(r);
}

int claims_acquire(struct claims *c, int group, char *err, size_t errlen)
{
    char key[KEY_MAX], ttl[32];
    redisReply *r;
    int got;

    key_of(c->cfg, "claim", group, key, sizeof(key));
    snprintf(ttl, sizeof(ttl), "%lld", (long long)c->cfg->delay.claim_ttl_ms);
    if (!(r = store_command(c->st, err, errlen, "SET %s %s NX PX %s", key, c->token, ttl)))
        return -1;
    got = r->type == REDIS_REPLY_STATUS;   /* OK; nil when someone holds it */
    freeReplyObject(r);
    /* A lease a failover could take back is no lease: with redis.wait_replicas, it counts once
     * the replicas have it, and is given up when they do not confirm it in time. */
    if (got && store_confirm(c->st, err, errlen) < 0) {
        char why[256];
        if (claims_release(c, group, why, sizeof(why)) < 0)
            snprintf(err + strlen(err), errlen - strlen(err), "; giving it up failed: %s", why);
        return -1;
    }
    return got;
}

int claims_renew(struct claims *c, int group, char *err, size_t errlen)
{
    char key[KEY_MAX], ttl[32];
    const char *argv[2] = { c->token, ttl };
    long long v;

    key_of(c->cfg, "claim", group, key, sizeof(key));
    snprintf(ttl, sizeof(ttl), "%lld", (long long)c->cfg->delay.claim_ttl_ms);
    v = eval_int(c, renew_lua, key, 2, argv, err, errlen);
    return v < 0 ? -1 : v > 0;
}

int claims_release(struct claims *c, int group, char *err, size_t errlen)
{
    char key[KEY_MAX];
    const char *argv[1] = { c->token };
    long long v;

    key_of(c->cfg, "claim", group, key, sizeof(key));
    v = eval_int(c, release_lua, key, 1, argv, err, errlen);
    return v < 0 ? -1 : v > 0;
}

int claims_release_requested(struct claims *c, int group, char *err, size_t errlen)
{
    char key[KEY_MAX];
    redisReply *r;
    int asked;

    key_of(c->cfg, "release", group, key, sizeof(key));
    if (!(r = store_command(c->st, err, errlen, "GETDEL %s", key)))
        return -1;
    asked = r->type == REDIS_REPLY_STRING;
    freeReplyObject(r);
    return asked;
}

int claims_publish(struct claims *c, int group, size_t n, const char *const *fields,
                   const char *const *values, char *err, size_t errlen)
{
    char key[KEY_MAX], now[32], ttl[32];
    size_t argc = 2 * n + 6;
    const char **argv = calloc(argc, sizeof(*argv));
    redisReply *r;
    int rc = -1;

    if (!argv) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    key_of(c->cfg, "status", group, key, sizeof(key));
    snprintf(now, sizeof(now), "%lld", (long long)clock_now_ms());
    snprintf(ttl, sizeof(ttl), "%lld", (long long)(3 * c->cfg->delay.claim_ttl_ms));
    argv[0] = "HSET";
    argv[1] = key;
    argv[2] = "owner";
    argv[3] = c->token;
    argv[4] = "updated_ms";
    argv[5] = now;
    for (size_t i = 0; i < n; i++) {
        argv[6 + 2 * i] = fields[i];
        argv[7 + 2 * i] = values[i];
    }
    if ((r = store_argv(c->st, (int)argc, argv, err, errlen))) {
        freeReplyObject(r);
        if ((r = store_command(c->st, err, errlen, "PEXPIRE %s %s", key, ttl))) {
            freeReplyObject(r);
            rc = 0;
        }
    }
    free(argv);
    return rc;
}

/* The status hash of a group as an array of {topic, partition, committed, end, lag, head_due_ms}. */
static json_t *status_json(const redisReply *h, json_t *out)
{
    json_t *parts = json_array();

    for (size_t i = 0; i + 1 < h->elements; i += 2) {
        const char *f = h->element[i]->str, *slash = strrchr(f, '/');
        long long committed, end, due;
        if (strcmp(f, "owner") == 0 || strcmp(f, "updated_ms") == 0) {
            json_object_set_new(out, strcmp(f, "owner") == 0 ? "status_owner" : "updated_ms",
                                strcmp(f, "owner") == 0 ? json_string(h->element[i + 1]->str)
                                                        : json_integer(atoll(h->element[i + 1]->str)));
            continue;
        }
        if (!slash || sscanf(h->element[i + 1]->str, "%lld %lld %lld", &committed, &end, &due) != 3)
            continue;
        json_array_append_new(parts, json_pack("{s:s%,s:i,s:I,s:I,s:I,s:o}", "topic", f, (size_t)(slash - f),
                                               "partition", atoi(slash + 1), "committed", committed,
                                               "end", end, "lag", committed >= 0 && end >= committed ? end - committed : -1,
                                               "head_due_ms", due >= 0 ? json_integer(due) : json_null()));
    }
    return parts;
}

static json_t *group_json(struct store *st, const struct config *cfg, int g, int64_t now,
                          char *err, size_t errlen)
{
    char key[KEY_MAX], ikey[KEY_MAX];
    json_t *grp = json_object(), *parts = json_array();
    redisReply *owner, *ttl, *alive, *status;

    for (int p = 0; p < cfg->delay.partitions; p++)
        if (cfg->delay.group_of[p] == g)
            json_array_append_new(parts, json_integer(p));
    json_object_set_new(grp, "group", json_integer(g));
    json_object_set_new(grp, "partitions", parts);
    key_of(cfg, "claim", g, key, sizeof(key));
    key_of(cfg, "instances", -1, ikey, sizeof(ikey));
    if (!(owner = store_command(st, err, errlen, "GET %s", key)) ||
        !(ttl = store_command(st, err, errlen, "PTTL %s", key))) {
        if (owner)
            freeReplyObject(owner);
        json_decref(grp);
        return NULL;
    }
    json_object_set_new(grp, "owner", owner->type == REDIS_REPLY_STRING ? json_string(owner->str) : json_null());
    json_object_set_new(grp, "ttl_ms", ttl->type == REDIS_REPLY_INTEGER && ttl->integer >= 0
                                           ? json_integer(ttl->integer) : json_null());
    if (owner->type == REDIS_REPLY_STRING &&
        (alive = store_command(st, err, errlen, "ZSCORE %s %s", ikey, owner->str))) {
        json_object_set_new(grp, "owner_alive", json_boolean(alive->type == REDIS_REPLY_STRING &&
                                                             atoll(alive->str) > now));
        freeReplyObject(alive);
    }
    key_of(cfg, "status", g, key, sizeof(key));
    if ((status = store_command(st, err, errlen, "HGETALL %s", key))) {
        json_object_set_new(grp, "status", status_json(status, grp));
        freeReplyObject(status);
    }
    freeReplyObject(owner);
    freeReplyObject(ttl);
    return grp;
}

char *claims_view(struct store *st, const struct config *cfg, int *status)
{
    json_t *groups = json_array();
    int64_t now = clock_now_ms();
    char err[256], msg[320];

    for (int g = 0; g < cfg->delay.ngroups; g++) {
        json_t *grp = group_json(st, cfg, g, now, err, sizeof(err));
        if (!grp) {
            json_decref(groups);
            snprintf(msg, sizeof(msg), "claims: %s", err);
            *status = 503;
            return api_response(API_UNAVAILABLE, msg, NULL);
        }
        json_array_append_new(groups, grp);
    }
    *status = 200;
    return api_response(API_OK, "ok", json_pack("{s:o}", "groups", groups));
}

/* schedstore: schedules in Redis. The contract is in include/schedules/schedstore.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/conn.h"
#include "lib/fnv.h"
#include "schedules/schedstore.h"

#define KEY_MAX (CONFIG_STR_MAX + 16 + RECUR_ID_MAX)

enum script { S_PUT, S_DELETE, S_PAUSE, S_RESUME, S_ADVANCE, S_TAKE, S_INDEX, S_MIGRATE, S_COUNT };

#define LEGACY (-1)   /* the shard of keys kept before schedules were sharded: "{sched}" */

/* The scripts that change a schedule answer {res, old next, generation, paused, old job}. */

/* KEYS: hash, due, ids. ARGV: id, timing, job, first, first due, now, keep runs (1/0: the
 * timing read before was the same), the timing's signature (schedjson_timing_sig). The timing
 * is the same when the kept signature is this one (read in the script: of concurrent puts of
 * the same timing, all but the one that creates it keep it), or, kept by a version that wrote
 * none, when the read said so. {1, old next, generation, paused}: a paused schedule stays
 * paused, with no occurrence. {2, next, generation, 0, '', runs, kept timing}: the timing
 * unchanged and a fire time planned, only the job is replaced: the generation, the fire time
 * planned and the runs stay, so that the occurrence under way, whatever it carries, moves the
 * schedule on. */
static const char put_lua[] =
    "local old = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')\n"
    "local sig = redis.call('HGET', KEYS[1], 's')\n"
    "local same = (sig and sig == ARGV[8]) or (not sig and ARGV[7] == '1')\n"
    "if redis.call('EXISTS', KEYS[1]) == 0 then same = false end\n"
    "if same and old ~= 0 and redis.call('HGET', KEYS[1], 'p') ~= '1' then\n"
    "  redis.call('HSET', KEYS[1], 'j', ARGV[3], 'u', ARGV[6], 's', ARGV[8])\n"
    "  return {2, old, tonumber(redis.call('HGET', KEYS[1], 'g')), 0, '',\n"
    "          tonumber(redis.call('HGET', KEYS[1], 'r') or '0'), redis.call('HGET', KEYS[1], 't')}\n"
    "end\n"
    "local g = redis.call('HINCRBY', KEYS[1], 'g', 1)\n"
    "redis.call('HSETNX', KEYS[1], 'c', ARGV[6])\n"
    "if not same or ARGV[7] == '1' then redis.call('HSET', KEYS[1], 't', ARGV[2]) end\n"
    "redis.call('HSET', KEYS[1], 'j', ARGV[3], 'u', ARGV[6], 's', ARGV[8])\n"
    "if not same then redis.call('HSET', KEYS[1], 'r', '0') end\n"
    "redis.call('ZADD', KEYS[3], 0, ARGV[1])\n"
    "if redis.call('HGET', KEYS[1], 'p') == '1' then return {1, old, g, 1} end\n"
    "redis.call('HSET', KEYS[1], 'p', '0', 'n', ARGV[4], 'f', '0')\n"
    "if ARGV[4] ~= '0' then redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])\n"
    "else redis.call('ZREM', KEYS[2], ARGV[1]) end\n"
    "return {1, old, g, 0}\n";

/* KEYS: hash, due, ids, runs. ARGV: id. {0} none, or {1, old next, 0, 0, job} */
static const char delete_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end\n"
    "redis.call('DEL', KEYS[4])\n"
    "local old = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')\n"
    "local j = redis.call('HGET', KEYS[1], 'j') or ''\n"
    "redis.call('DEL', KEYS[1])\n"
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "redis.call('ZREM', KEYS[3], ARGV[1])\n"
    "return {1, old, 0, 0, j}\n";

/* KEYS: hash, due. ARGV: id, now. {0} none, {2} paused already, {1, old next, generation, 1,
 * job}; the occurrence it cancels is kept as q, where a resume catches up from. */
static const char pause_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end\n"
    "if redis.call('HGET', KEYS[1], 'p') == '1' then return {2} end\n"
    "local old = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')\n"
    "local g = redis.call('HINCRBY', KEYS[1], 'g', 1)\n"
    "redis.call('HSET', KEYS[1], 'p', '1', 'n', '0', 'f', '0', 'q', old, 'u', ARGV[2])\n"
    "redis.call('ZREM', KEYS[2], ARGV[1])\n"
    "return {1, old, g, 1, redis.call('HGET', KEYS[1], 'j') or ''}\n";

/* KEYS: hash, due. ARGV: id, generation, first, first due, now.
 * {0} none, {2} not paused, {3} changed since read, {1, 0, generation} */
static const char resume_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end\n"
    "if redis.call('HGET', KEYS[1], 'p') ~= '1' then return {2} end\n"
    "if redis.call('HGET', KEYS[1], 'g') ~= ARGV[2] then return {3} end\n"
    "local g = redis.call('HINCRBY', KEYS[1], 'g', 1)\n"
    "redis.call('HSET', KEYS[1], 'p', '0', 'n', ARGV[3], 'f', '0', 'q', '0', 'u', ARGV[5])\n"
    "if ARGV[3] ~= '0' then redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1]) end\n"
    "return {1, 0, g}\n";

/* KEYS: hash, due, ids (unused), runs. ARGV: id, generation, fire, next, next due, ran (0/1),
 * runs kept. The fire time moved on from is pushed on runs ("<fire>:<ran>"), the last ones kept.
 * {0} stale; {1 advanced | 2 before, next, runs, job} */
static const char advance_lua[] =
    "if redis.call('HGET', KEYS[1], 'g') ~= ARGV[2] then return {0} end\n"
    "if redis.call('HGET', KEYS[1], 'n') == ARGV[3] then\n"
    "  redis.call('LPUSH', KEYS[4], ARGV[3] .. ':' .. ARGV[6])\n"
    "  redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[7]) - 1)\n"
    "  local r = redis.call('HINCRBY', KEYS[1], 'r', tonumber(ARGV[6]))\n"
    "  redis.call('HSET', KEYS[1], 'n', ARGV[4], 'f', ARGV[3])\n"
    "  if ARGV[6] == '1' then redis.call('HSET', KEYS[1], 'l', ARGV[3]) end\n"
    "  if ARGV[4] ~= '0' then redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])\n"
    "  else redis.call('ZREM', KEYS[2], ARGV[1]) end\n"
    "  return {1, tonumber(ARGV[4]), r, redis.call('HGET', KEYS[1], 'j')}\n"
    "end\n"
    "if redis.call('HGET', KEYS[1], 'f') == ARGV[3] then\n"
    "  return {2, tonumber(redis.call('HGET', KEYS[1], 'n') or '0'),\n"
    "          tonumber(redis.call('HGET', KEYS[1], 'r') or '0'), redis.call('HGET', KEYS[1], 'j')}\n"
    "end\n"
    "return {0}\n";

/* KEYS: due. ARGV: before, again, max. The ids taken. */
static const char take_lua[] =
    "local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, ARGV[3])\n"
    "for _, id in ipairs(ids) do redis.call('ZADD', KEYS[1], ARGV[2], id) end\n"
    "return ids\n";

/* KEYS: hash, due. ARGV: id, next, index time. 1 when next is still the pending fire time and
 * the schedule is indexed at the time given, else 0. */
static const char index_lua[] =
    "if redis.call('HGET', KEYS[1], 'n') ~= ARGV[2] then return 0 end\n"
    "redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])\n"
    "return 1\n";

/* KEYS: hash, due, ids (a shard's). ARGV: id, due score ('' none), then the hash's fields and
 * values as kept in the legacy layout. Copies them unless the schedule is there already (put
 * since): 1 copied, 0 not. */
static const char migrate_lua[] =
    "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end\n"
    "redis.call('HSET', KEYS[1], unpack(ARGV, 3))\n"
    "redis.call('ZADD', KEYS[3], 0, ARGV[1])\n"
    "if ARGV[2] ~= '' then redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1]) end\n"
    "return 1\n";

static const char *const script_text[S_COUNT] = { put_lua, delete_lua, pause_lua, resume_lua,
                                                  advance_lua, take_lua, index_lua, migrate_lua };

struct schedstore {
    const struct config *cfg;
    struct conn *db;
};

/* Whether the unsharded layout held schedules at the last migration (at start: it may). */
static _Atomic int legacy_left = 1;

struct schedstore *schedstore_new(const struct config *cfg)
{
    struct schedstore *ss = calloc(1, sizeof(*ss));

    if (!ss || !(ss->db = conn_new(cfg, script_text, S_COUNT))) {
        free(ss);
        return NULL;
    }
    ss->cfg = cfg;
    return ss;
}

void schedstore_free(struct schedstore *ss)
{
    if (!ss)
        return;
    conn_free(ss->db);
    free(ss);
}

/* The shard of schedule id: its keys and its entries in the due and ids sets share the hash
 * tag "{sched:<shard>}", so that each change is one script on one Redis Cluster node, and the
 * shards spread over the nodes. */
static int shard_of(const char *id)
{
    return (int)(fnv1a(FNV1A_BASIS, id) % SCHED_SHARDS);
}

/* The key named what (and id) of shard (LEGACY: the unsharded layout). */
static void key_in(const struct schedstore *ss, int shard, const char *what, const char *id,
                   char *out, size_t outlen)
{
    if (shard == LEGACY)
        snprintf(out, outlen, "%s{sched}:%s%s", ss->cfg->redis.prefix, what, id ? id : "");
    else
        snprintf(out, outlen, "%s{sched:%d}:%s%s", ss->cfg->redis.prefix, shard, what,
                 id ? id : "");
}

/* The key named what of schedule id (its hash "h:", its runs "runs:"). */
static void key_of(const struct schedstore *ss, const char *what, const char *id, char *out,
                   size_t outlen)
{
    key_in(ss, shard_of(id), what, id, out, outlen);
}

/* Runs script s with nkeys keys (hash, due, ids, runs of schedule id's shard; S_TAKE: the due
 * set of shard) and then the arguments. */
static struct conn_reply *run_in(struct schedstore *ss, enum script s, const char *id, int shard,
                                 int nkeys, const char *const *args, int nargs, char *err,
                                 size_t errlen)
{
    char keys[4][KEY_MAX];
    const char *argv[4 + 8];
    struct conn_call call = { .script = (int)s, .nkeys = (size_t)nkeys,
                             .argc = (size_t)(nkeys + nargs), .argv = argv };

    if (s == S_TAKE) {
        key_in(ss, shard, "due", NULL, keys[0], sizeof(keys[0]));
    } else {
        shard = shard_of(id);
        key_in(ss, shard, "h:", id, keys[0], sizeof(keys[0]));
        key_in(ss, shard, "due", NULL, keys[1], sizeof(keys[1]));
        key_in(ss, shard, "ids", NULL, keys[2], sizeof(keys[2]));
        key_in(ss, shard, "runs:", id, keys[3], sizeof(keys[3]));
    }
    for (int i = 0; i < nkeys; i++)
        argv[i] = keys[i];
    for (int i = 0; i < nargs && i < 8; i++)
        argv[nkeys + i] = args[i];
    return conn_call(ss->db, &call, CONN_WAIT_END, err, errlen);
}

static struct conn_reply *run(struct schedstore *ss, enum script s, const char *id, int nkeys,
                             const char *const *args, int nargs, char *err, size_t errlen)
{
    return run_in(ss, s, id, 0, nkeys, args, nargs, err, errlen);
}

static int64_t int_at(const struct conn_reply *r, size_t i)
{
    return i < conn_count(r) ? conn_int(conn_at(r, i)) : 0;
}

static char *str_dup(const struct conn_reply *r)
{
    size_t len;
    const char *s = r ? conn_str(r, &len) : NULL;
    char *d;

    if (!s || !(d = malloc(len + 1)))
        return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

static int64_t num(const char *s)
{
    return s ? strtoll(s, NULL, 10) : 0;
}

void sched_kept_release(struct sched_kept *k)
{
    free(k->timing_json);
    free(k->job_json);
    memset(k, 0, sizeof(*k));
}

/* One field of an HGETALL answer into k. */
static void kept_field(struct sched_kept *k, const char *name, const struct conn_reply *v)
{
    char buf[32] = "";
    size_t len;
    const char *s = conn_str(v, &len);

    if (name[0] == 't' && !k->timing_json)
        k->timing_json = str_dup(v);
    else if (name[0] == 'j' && !k->job_json)
        k->job_json = str_dup(v);
    if (!s || len >= sizeof(buf) || name[1])
        return;
    memcpy(buf, s, len);
    switch (name[0]) {
    case 'g': k->st.generation = num(buf); break;
    case 'p': k->st.paused = buf[0] == '1'; break;
    case 'n': k->st.next_ms = num(buf); break;
    case 'f': k->advanced_from = num(buf); break;
    case 'q': k->paused_pending = num(buf); break;
    case 'l': k->st.last_ms = num(buf); break;
    case 'r': k->st.runs = num(buf); break;
    case 'c': k->st.created_ms = num(buf); break;
    case 'u': k->st.updated_ms = num(buf); break;
    default: break;
    }
}


/* The pipeline of schedstore_get_many. */
struct getting {
    struct schedstore *ss;
    const char *const *ids;
    struct sched_kept *outs;
    int *found;
    char key[KEY_MAX];
    const char *argv[2];
    char *err;
    size_t errlen;
    int legacy;                 /* reading the unsharded layout's hashes */
};

static void build_get(void *ctx, size_t j, struct conn_call *call)
{
    struct getting *g = ctx;

    key_in(g->ss, g->legacy ? LEGACY : shard_of(g->ids[j]), "h:", g->ids[j], g->key,
           sizeof(g->key));
    g->argv[0] = "HGETALL";
    g->argv[1] = g->key;
    *call = (struct conn_call){ .script = -1, .nkeys = 1, .argc = 2, .argv = g->argv };
}

static void on_get(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct getting *g = ctx;
    struct sched_kept *out = &g->outs[j];

    if (fail || !r) {
        if (!g->err[0])
            snprintf(g->err, g->errlen, "%s", fail ? fail->text : "no answer");
        return;
    }
    for (size_t i = 0; i + 1 < conn_count(r); i += 2) {
        const char *name = conn_str(conn_at(r, i), NULL);
        if (name)
            kept_field(out, name, conn_at(r, i + 1));
    }
    g->found[j] = out->timing_json && out->job_json;
    if (!g->found[j])
        sched_kept_release(out);
}

/* The schedules of ids not found that the unsharded layout still holds (not yet migrated: an
 * older delayqd may have put them), read there in one pipeline. */
static void get_legacy(struct schedstore *ss, size_t n, const char *const *ids,
                       struct sched_kept *outs, int *found, char *err, size_t errlen)
{
    const char **miss = calloc(n, sizeof(*miss));
    size_t *at = calloc(n, sizeof(*at)), m = 0;
    struct sched_kept *kept = calloc(n, sizeof(*kept));
    int *got = calloc(n, sizeof(*got));

    if (miss && at && kept && got) {
        for (size_t i = 0; i < n; i++)
            if (!found[i])
                miss[m] = ids[i], at[m++] = i;
        struct getting g = { .ss = ss, .ids = miss, .outs = kept, .found = got, .err = err,
                             .errlen = errlen, .legacy = 1 };
        if (m > 0)
            (void)conn_pipeline(ss->db, m, build_get, on_get, &g, CONN_NO_WAIT, err, errlen);
        for (size_t k = 0; k < m; k++) {
            if (got[k] && !err[0]) {
                outs[at[k]] = kept[k];
                found[at[k]] = 1;
            } else if (got[k]) {
                sched_kept_release(&kept[k]);
            }
        }
    }
    free(miss);
    free(at);
    free(kept);
    free(got);
}

int schedstore_get_many(struct schedstore *ss, size_t n, const char *const *ids,
                        struct sched_kept *outs, int *found, char *err, size_t errlen)
{
    struct getting g = { .ss = ss, .ids = ids, .outs = outs, .found = found, .err = err,
                         .errlen = errlen };

    err[0] = '\0';
    memset(outs, 0, n * sizeof(*outs));
    memset(found, 0, n * sizeof(*found));
    if (n > 0)
        (void)conn_pipeline(ss->db, n, build_get, on_get, &g, CONN_NO_WAIT, err, errlen);
    if (!err[0] && legacy_left)
        get_legacy(ss, n, ids, outs, found, err, errlen);
    if (err[0]) {
        for (size_t i = 0; i < n; i++)
            sched_kept_release(&outs[i]);
        return -1;
    }
    return 0;
}

int schedstore_get(struct schedstore *ss, const char *id, struct sched_kept *out, int *found,
                   char *err, size_t errlen)
{
    return schedstore_get_many(ss, 1, &id, out, found, err, errlen);
}

/* Runs a change script; *res its first element, the rest into out. */
static int run_change(struct schedstore *ss, enum script s, const char *id, int nkeys,
                      const char *const *args, int nargs, int64_t *res, struct sched_change *out,
                      char *err, size_t errlen)
{
    struct conn_reply *r = run(ss, s, id, nkeys, args, nargs, err, errlen);
    size_t len;

    memset(out, 0, sizeof(*out));
    if (!r)
        return -1;
    *res = int_at(r, 0);
    out->old_next = int_at(r, 1);
    out->gen = int_at(r, 2);
    out->paused = int_at(r, 3) == 1;
    if (conn_count(r) > 4 && conn_str(conn_at(r, 4), &len) && len)
        out->old_job = str_dup(conn_at(r, 4));
    out->kept = *res == 2;
    out->runs = conn_count(r) > 5 ? int_at(r, 5) : 0;
    if (out->kept && conn_count(r) > 6 && conn_str(conn_at(r, 6), &len) && len)
        out->kept_timing = str_dup(conn_at(r, 6));
    conn_reply_free(r);
    return 0;
}

void sched_change_release(struct sched_change *c)
{
    free(c->old_job);
    free(c->kept_timing);
    c->old_job = c->kept_timing = NULL;
}

int schedstore_put(struct schedstore *ss, const char *id, const char *timing_json,
                   const char *job_json, int64_t first_ms, int64_t first_due_ms, int64_t now_ms,
                   int keep_runs, const char *sig, struct sched_change *out, char *err,
                   size_t errlen)
{
    char first[24], due[24], now[24];
    const char *args[] = { id, timing_json, job_json, first, due, now, keep_runs ? "1" : "0", sig };
    int64_t res;

    snprintf(first, sizeof(first), "%lld", (long long)(first_ms > 0 ? first_ms : 0));
    snprintf(due, sizeof(due), "%lld", (long long)first_due_ms);
    snprintf(now, sizeof(now), "%lld", (long long)now_ms);
    return run_change(ss, S_PUT, id, 3, args, 8, &res, out, err, errlen);
}

int schedstore_delete(struct schedstore *ss, const char *id, int *found,
                      struct sched_change *out, char *err, size_t errlen)
{
    const char *args[] = { id };
    int64_t res;

    if (run_change(ss, S_DELETE, id, 4, args, 1, &res, out, err, errlen) < 0)
        return -1;
    *found = res == 1;
    return 0;
}

int schedstore_pause(struct schedstore *ss, const char *id, int64_t now_ms,
                     enum sched_switch *res, struct sched_change *out, char *err, size_t errlen)
{
    char now[24];
    const char *args[] = { id, now };
    int64_t n;

    snprintf(now, sizeof(now), "%lld", (long long)now_ms);
    if (run_change(ss, S_PAUSE, id, 2, args, 2, &n, out, err, errlen) < 0)
        return -1;
    *res = (enum sched_switch)n;
    return 0;
}

int schedstore_resume(struct schedstore *ss, const char *id, int64_t gen, int64_t first_ms,
                      int64_t first_due_ms, int64_t now_ms, enum sched_switch *res,
                      int64_t *new_gen, char *err, size_t errlen)
{
    char g[24], first[24], due[24], now[24];
    const char *args[] = { id, g, first, due, now };
    struct sched_change c;
    int64_t n;

    snprintf(g, sizeof(g), "%lld", (long long)gen);
    snprintf(first, sizeof(first), "%lld", (long long)(first_ms > 0 ? first_ms : 0));
    snprintf(due, sizeof(due), "%lld", (long long)first_due_ms);
    snprintf(now, sizeof(now), "%lld", (long long)now_ms);
    if (run_change(ss, S_RESUME, id, 2, args, 5, &n, &c, err, errlen) < 0)
        return -1;
    *res = (enum sched_switch)n;
    *new_gen = c.gen;
    return 0;
}

int schedstore_advance(struct schedstore *ss, const char *id, int64_t gen, int64_t fire_ms,
                       int64_t next_ms, int64_t next_due_ms, int ran, struct sched_advance *out,
                       char *err, size_t errlen)
{
    char g[24], fire[24], next[24], due[24], keep[24];
    const char *args[] = { id, g, fire, next, due, ran ? "1" : "0", keep };
    struct conn_reply *r;

    memset(out, 0, sizeof(*out));
    snprintf(g, sizeof(g), "%lld", (long long)gen);
    snprintf(fire, sizeof(fire), "%lld", (long long)fire_ms);
    snprintf(next, sizeof(next), "%lld", (long long)(next_ms > 0 ? next_ms : 0));
    snprintf(due, sizeof(due), "%lld", (long long)next_due_ms);
    snprintf(keep, sizeof(keep), "%d", SCHED_RUNS_KEPT);
    if (!(r = run(ss, S_ADVANCE, id, 4, args, 7, err, errlen)))
        return -1;
    out->res = (int)int_at(r, 0);
    if (out->res > 0) {
        out->next_ms = int_at(r, 1);
        out->runs = int_at(r, 2);
        out->job_json = conn_count(r) > 3 ? str_dup(conn_at(r, 3)) : NULL;
        if (!out->job_json)
            out->res = 0;
    }
    conn_reply_free(r);
    return 0;
}

int schedstore_runs(struct schedstore *ss, const char *id, size_t max, struct sched_run *out,
                    size_t *n, char *err, size_t errlen)
{
    char key[KEY_MAX], stop[24];
    struct conn_reply *r;

    *n = 0;
    key_of(ss, "runs:", id, key, sizeof(key));
    snprintf(stop, sizeof(stop), "%zu", max ? max - 1 : 0);
    if (!(r = conn_command(ss->db, err, errlen, "LRANGE", key, "0", stop, NULL)))
        return -1;
    for (size_t i = 0; i < conn_count(r) && *n < max; i++) {
        char text[48] = "", *colon;
        size_t len;
        const char *s = conn_str(conn_at(r, i), &len);
        if (!s || len >= sizeof(text))
            continue;
        memcpy(text, s, len);
        text[len] = '\0';
        if (!(colon = strchr(text, ':')))
            continue;
        out[*n].fire_ms = strtoll(text, NULL, 10);
        out[(*n)++].ran = colon[1] == '1';
    }
    conn_reply_free(r);
    return 0;
}

int schedstore_index(struct schedstore *ss, const char *id, int64_t next_ms, int64_t index_ms,
                     char *err, size_t errlen)
{
    char next[24], at[24];
    const char *args[] = { id, next, at };
    struct conn_reply *r;

    snprintf(next, sizeof(next), "%lld", (long long)next_ms);
    snprintf(at, sizeof(at), "%lld", (long long)index_ms);
    if (!(r = run(ss, S_INDEX, id, 2, args, 3, err, errlen)))
        return -1;
    conn_reply_free(r);
    return 0;
}

/* A page of each shard's ids (and the unsharded layout's, while it holds any), read in one
 * pipeline and merged. */
struct listing {
    struct schedstore *ss;
    const char *from, *limit;
    char keys[SCHED_SHARDS + 1][KEY_MAX];
    const char *argv[SCHED_SHARDS + 1][7];
    char **all;
    size_t n, cap;
    int failed;
    char *err;
    size_t errlen;
};

static int shard_at(size_t j)
{
    return j < SCHED_SHARDS ? (int)j : LEGACY;
}

static void build_list(void *ctx, size_t j, struct conn_call *call)
{
    struct listing *l = ctx;
    const char **a = l->argv[j];

    key_in(l->ss, shard_at(j), "ids", NULL, l->keys[j], sizeof(l->keys[j]));
    a[0] = "ZRANGEBYLEX", a[1] = l->keys[j], a[2] = l->from, a[3] = "+", a[4] = "LIMIT";
    a[5] = "0", a[6] = l->limit;
    *call = (struct conn_call){ .script = -1, .nkeys = 1, .argc = 7, .argv = a };
}

static void on_list(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct listing *l = ctx;

    (void)j;
    if (fail || !r) {
        if (!l->failed++)
            snprintf(l->err, l->errlen, "%s", fail ? fail->text : "no answer");
        return;
    }
    for (size_t i = 0; i < conn_count(r); i++) {
        char *id = str_dup(conn_at(r, i)), **grown;
        if (id && l->n == l->cap && (grown = realloc(l->all, (l->cap ? 2 * l->cap : 64) *
                                                              sizeof(*grown)))) {
            l->all = grown;
            l->cap = l->cap ? 2 * l->cap : 64;
        }
        if (id && l->n < l->cap)
            l->all[l->n++] = id;
        else
            free(id);
    }
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int schedstore_list(struct schedstore *ss, const char *after, size_t max, char ***ids, size_t *n,
                    int *more, char *err, size_t errlen)
{
    char from[RECUR_ID_MAX + 2], limit[24];
    struct listing l = { .ss = ss, .from = from, .limit = limit, .err = err, .errlen = errlen };
    size_t kept = 0;

    *ids = NULL;
    *n = 0;
    *more = 0;
    err[0] = '\0';
    snprintf(from, sizeof(from), "%s%s", after[0] ? "(" : "-", after);
    snprintf(limit, sizeof(limit), "%zu", max + 1);
    (void)conn_pipeline(ss->db, SCHED_SHARDS + (legacy_left ? 1 : 0), build_list, on_list, &l,
                        CONN_NO_WAIT, err, errlen);
    if (l.failed || err[0]) {
        schedstore_ids_free(l.all, l.n);
        if (!err[0])
            snprintf(err, errlen, "listing failed");
        return -1;
    }
    if (l.n)
        qsort(l.all, l.n, sizeof(*l.all), by_name);
    for (size_t i = 0; i < l.n; i++) {   /* one of each (being migrated: in two layouts) */
        if (kept && !strcmp(l.all[kept - 1], l.all[i]))
            free(l.all[i]);
        else
            l.all[kept++] = l.all[i];
    }
    *more = kept > max;
    for (size_t i = max; i < kept; i++)
        free(l.all[i]);
    *n = kept < max ? kept : max;
    *ids = l.all ? l.all : calloc(1, sizeof(char *));
    return *ids ? 0 : -1;
}

int schedstore_take_overdue(struct schedstore *ss, int first, int shards, int64_t before_ms,
                            int64_t again_ms, size_t max, char ***ids, size_t *n, char *err,
                            size_t errlen)
{
    char before[24], again[24], limit[24];
    const char *args[] = { before, again, limit };
    char **all = calloc(max ? max : 1, sizeof(*all));

    *ids = all;
    *n = 0;
    if (!all) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    snprintf(before, sizeof(before), "%lld", (long long)before_ms);
    snprintf(again, sizeof(again), "%lld", (long long)again_ms);
    for (int shard = first; shard < first + shards && shard < SCHED_SHARDS && *n < max; shard++) {
        struct conn_reply *r;
        snprintf(limit, sizeof(limit), "%zu", max - *n);
        if (!(r = run_in(ss, S_TAKE, NULL, shard, 1, args, 3, err, errlen))) {
            if (*n)
                return 0;   /* the others' next time */
            free(all);
            *ids = NULL;
            return -1;
        }
        for (size_t i = 0; i < conn_count(r) && *n < max; i++)
            if ((all[*n] = str_dup(conn_at(r, i))))
                (*n)++;
        conn_reply_free(r);
    }
    return 0;
}

int schedstore_count(struct schedstore *ss, int64_t *n, char *err, size_t errlen)
{
    char key[KEY_MAX];
    struct conn_reply *r;

    *n = 0;
    for (int shard = 0; shard < SCHED_SHARDS; shard++) {
        key_in(ss, shard, "ids", NULL, key, sizeof(key));
        if (!(r = conn_command(ss->db, err, errlen, "ZCARD", key, NULL)))
            return -1;
        *n += conn_int(r);
        conn_reply_free(r);
    }
    return 0;
}

int schedstore_migrate(struct schedstore *ss, size_t max, size_t *moved, char *err, size_t errlen)
{
    char ids_key[KEY_MAX], due_key[KEY_MAX], stop[24];
    struct conn_reply *r, *h, *d;
    size_t n;

    *moved = 0;
    key_in(ss, LEGACY, "ids", NULL, ids_key, sizeof(ids_key));
    key_in(ss, LEGACY, "due", NULL, due_key, sizeof(due_key));
    snprintf(stop, sizeof(stop), "%zu", max ? max - 1 : 0);
    if (!(r = conn_command(ss->db, err, errlen, "ZRANGE", ids_key, "0", stop, NULL)))
        return -1;
    legacy_left = (n = conn_count(r)) > 0;
    for (size_t i = 0; i < n; i++) {
        char id[RECUR_ID_MAX + 1] = "", hkey[KEY_MAX], keys[3][KEY_MAX], score[32] = "";
        size_t len;
        const char *s = conn_str(conn_at(r, i), &len);
        if (!s || len >= sizeof(id))
            continue;
        memcpy(id, s, len);
        key_in(ss, LEGACY, "h:", id, hkey, sizeof(hkey));
        if (!(h = conn_command(ss->db, err, errlen, "HGETALL", hkey, NULL)))
            break;
        if ((d = conn_command(ss->db, err, errlen, "ZSCORE", due_key, id, NULL))) {
            const char *sc = conn_str(d, &len);
            if (sc && len < sizeof(score))
                memcpy(score, sc, len);
            conn_reply_free(d);
        }
        size_t nf = conn_count(h), argc = 3 + 2 + nf;
        const char **argv = calloc(argc, sizeof(*argv));
        size_t *lens = calloc(argc, sizeof(*lens));
        struct conn_reply *c = NULL;
        if (argv && lens && nf >= 2) {
            int shard = shard_of(id);
            key_in(ss, shard, "h:", id, keys[0], sizeof(keys[0]));
            key_in(ss, shard, "due", NULL, keys[1], sizeof(keys[1]));
            key_in(ss, shard, "ids", NULL, keys[2], sizeof(keys[2]));
            argv[0] = keys[0], argv[1] = keys[1], argv[2] = keys[2], argv[3] = id, argv[4] = score;
            for (size_t k = 0; k < 5; k++)
                lens[k] = strlen(argv[k]);
            for (size_t k = 0; k < nf; k++)
                argv[5 + k] = conn_str(conn_at(h, k), &lens[5 + k]);
            struct conn_call call = { .script = S_MIGRATE, .nkeys = 3, .argc = argc, .argv = argv,
                                      .lens = lens };
            c = conn_call(ss->db, &call, CONN_WAIT_END, err, errlen);
        }
        free(argv);
        free(lens);
        conn_reply_free(h);
        if (nf >= 2 && !c)
            break;   /* the legacy copy stays: tried again next time */
        conn_reply_free(c);
        /* copied (or put since in the new layout, which wins): the legacy copy goes */
        if ((c = conn_command(ss->db, err, errlen, "DEL", hkey, NULL)))
            conn_reply_free(c);
        if ((c = conn_command(ss->db, err, errlen, "ZREM", due_key, id, NULL)))
            conn_reply_free(c);
        if ((c = conn_command(ss->db, err, errlen, "ZREM", ids_key, id, NULL)))
            conn_reply_free(c);
        (*moved)++;
    }
    conn_reply_free(r);
    return 0;
}

void schedstore_ids_free(char **ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
}

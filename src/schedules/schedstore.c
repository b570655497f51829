/* schedstore: schedules in Redis. The contract is in include/schedules/schedstore.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/conn.h"
#include "schedules/schedstore.h"

#define KEY_MAX (CONFIG_STR_MAX + 16 + RECUR_ID_MAX)

enum script { S_PUT, S_DELETE, S_PAUSE, S_RESUME, S_ADVANCE, S_TAKE, S_INDEX, S_COUNT };

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

static const char *const script_text[S_COUNT] = { put_lua, delete_lua, pause_lua, resume_lua,
                                                  advance_lua, take_lua, index_lua };

struct schedstore {
    const struct config *cfg;
    struct conn *db;
};

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

/* The schedule's hash (id non-NULL), or the set named what. */
static void key_of(const struct schedstore *ss, const char *what, const char *id, char *out,
                   size_t outlen)
{
    snprintf(out, outlen, "%s{sched}:%s%s", ss->cfg->redis.prefix, what, id ? id : "");
}

/* Runs script s with nkeys keys (hash, due, ids as named) and then the arguments. */
static struct conn_reply *run(struct schedstore *ss, enum script s, const char *id, int nkeys,
                             const char *const *args, int nargs, char *err, size_t errlen)
{
    char keys[4][KEY_MAX];
    const char *argv[4 + 8];
    struct conn_call call = { .script = (int)s, .nkeys = (size_t)nkeys,
                             .argc = (size_t)(nkeys + nargs), .argv = argv };

    if (s == S_TAKE) {
        key_of(ss, "due", NULL, keys[0], sizeof(keys[0]));
    } else {
        key_of(ss, "h:", id, keys[0], sizeof(keys[0]));
        key_of(ss, "due", NULL, keys[1], sizeof(keys[1]));
        key_of(ss, "ids", NULL, keys[2], sizeof(keys[2]));
        key_of(ss, "runs:", id, keys[3], sizeof(keys[3]));
    }
    for (int i = 0; i < nkeys; i++)
        argv[i] = keys[i];
    for (int i = 0; i < nargs && i < 8; i++)
        argv[nkeys + i] = args[i];
    return conn_call(ss->db, &call, CONN_WAIT_END, err, errlen);
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
};

static void build_get(void *ctx, size_t j, struct conn_call *call)
{
    struct getting *g = ctx;

    key_of(g->ss, "h:", g->ids[j], g->key, sizeof(g->key));
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

/* The first max string elements of array reply r into a malloc'd list; frees r. 0, or -1
 * (err set) out of memory. */
static int ids_of(struct conn_reply *r, size_t max, char ***ids, size_t *n, char *err,
                  size_t errlen)
{
    size_t count = conn_count(r) < max ? conn_count(r) : max;

    *n = 0;
    if (!(*ids = calloc(count ? count : 1, sizeof(**ids)))) {
        conn_reply_free(r);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < count; i++)
        if (((*ids)[*n] = str_dup(conn_at(r, i))))
            (*n)++;
    conn_reply_free(r);
    return 0;
}

int schedstore_list(struct schedstore *ss, const char *after, size_t max, char ***ids, size_t *n,
                    int *more, char *err, size_t errlen)
{
    char key[KEY_MAX], from[RECUR_ID_MAX + 2], limit[24];
    struct conn_reply *r;

    key_of(ss, "ids", NULL, key, sizeof(key));
    snprintf(from, sizeof(from), "%s%s", after[0] ? "(" : "-", after);
    snprintf(limit, sizeof(limit), "%zu", max + 1);
    if (!(r = conn_command(ss->db, err, errlen, "ZRANGEBYLEX", key, from, "+", "LIMIT", "0", limit,
                          NULL)))
        return -1;
    *more = conn_count(r) > max;
    return ids_of(r, max, ids, n, err, errlen);
}

int schedstore_take_overdue(struct schedstore *ss, int64_t before_ms, int64_t again_ms,
                            size_t max, char ***ids, size_t *n, char *err, size_t errlen)
{
    char before[24], again[24], limit[24];
    const char *args[] = { before, again, limit };
    struct conn_reply *r;

    snprintf(before, sizeof(before), "%lld", (long long)before_ms);
    snprintf(again, sizeof(again), "%lld", (long long)again_ms);
    snprintf(limit, sizeof(limit), "%zu", max);
    if (!(r = run(ss, S_TAKE, NULL, 1, args, 3, err, errlen)))
        return -1;
    return ids_of(r, max, ids, n, err, errlen);
}

int schedstore_count(struct schedstore *ss, int64_t *n, char *err, size_t errlen)
{
    char key[KEY_MAX];
    struct conn_reply *r;

    key_of(ss, "ids", NULL, key, sizeof(key));
    if (!(r = conn_command(ss->db, err, errlen, "ZCARD", key, NULL)))
        return -1;
    *n = conn_int(r);
    conn_reply_free(r);
    return 0;
}

void schedstore_ids_free(char **ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
}

/* deadstore: the redriven marks of dead letters. The contract is in include/deadstore.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deadstore.h"
#include "rdb.h"

#define KEY_MAX (CONFIG_STR_MAX + 16)
#define FIELD_MAX 40

/* KEYS: the hash. ARGV: field, job id. {1} taken, or {0, job id of the earlier mark} */
static const char mark_lua[] =
    "if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then return {1} end\n"
    "return {0, redis.call('HGET', KEYS[1], ARGV[1]) or ''}\n";

static const char *const scripts[] = { mark_lua };

struct deadstore {
    const struct config *cfg;
    struct rdb *db;
    char key[KEY_MAX];
};

struct deadstore *deadstore_new(const struct config *cfg)
{
    struct deadstore *ds = calloc(1, sizeof(*ds));

    if (!ds || !(ds->db = rdb_new(cfg, scripts, 1))) {
        free(ds);
        return NULL;
    }
    ds->cfg = cfg;
    snprintf(ds->key, sizeof(ds->key), "%sdead:redriven", cfg->redis.prefix);
    return ds;
}

void deadstore_free(struct deadstore *ds)
{
    if (!ds)
        return;
    rdb_free(ds->db);
    free(ds);
}

static void field_of(int32_t partition, int64_t offset, char out[FIELD_MAX])
{
    snprintf(out, FIELD_MAX, "%d:%lld", (int)partition, (long long)offset);
}

int deadstore_mark(struct deadstore *ds, int32_t partition, int64_t offset, const char *job_id,
                   int *taken, char *before, size_t beforelen, char *err, size_t errlen)
{
    char field[FIELD_MAX];
    const char *argv[] = { ds->key, field, job_id };
    struct rdb_call call = { .script = 0, .nkeys = 1, .argc = 3, .argv = argv };
    struct rdb_reply *r;
    const char *s;
    size_t len = 0;

    field_of(partition, offset, field);
    if (!(r = rdb_call(ds->db, &call, RDB_WAIT_END, err, errlen)))
        return -1;
    *taken = rdb_count(r) > 0 && rdb_int(rdb_at(r, 0)) == 1;
    s = !*taken && rdb_count(r) > 1 ? rdb_str(rdb_at(r, 1), &len) : NULL;
    snprintf(before, beforelen, "%.*s", s ? (int)len : 0, s ? s : "");
    rdb_reply_free(r);
    return 0;
}

int deadstore_unmark(struct deadstore *ds, int32_t partition, int64_t offset, char *err,
                     size_t errlen)
{
    char field[FIELD_MAX];
    struct rdb_reply *r;

    field_of(partition, offset, field);
    if (!(r = rdb_command(ds->db, err, errlen, "HDEL", ds->key, field, NULL)))
        return -1;
    rdb_reply_free(r);
    return 0;
}

int deadstore_marked(struct deadstore *ds, size_t n, const int32_t *partitions,
                     const int64_t *offsets, int *marked, char *err, size_t errlen)
{
    char (*fields)[FIELD_MAX] = calloc(n ? n : 1, sizeof(*fields));
    const char **argv = calloc(n + 2, sizeof(*argv));
    struct rdb_call call = { .script = -1, .argc = n + 2, .argv = NULL };
    struct rdb_reply *r = NULL;
    int rc = -1;

    memset(marked, 0, n * sizeof(*marked));
    if (!fields || !argv) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (n == 0) {
        rc = 0;
        goto out;
    }
    argv[0] = "HMGET";
    argv[1] = ds->key;
    for (size_t i = 0; i < n; i++) {
        field_of(partitions[i], offsets[i], fields[i]);
        argv[i + 2] = fields[i];
    }
    call.argv = argv;
    call.nkeys = 1;
    if (!(r = rdb_call(ds->db, &call, RDB_NO_WAIT, err, errlen)))
        goto out;
    for (size_t i = 0; i < n && i < rdb_count(r); i++)
        marked[i] = rdb_type(rdb_at(r, i)) == RDB_STR;
    rc = 0;
out:
    rdb_reply_free(r);
    free(fields);
    free(argv);
    return rc;
}

/* deadstore: the redriven marks of dead letters. The contract is in include/dead/deadstore.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dead/deadstore.h"
#include "redis/conn.h"

#define KEY_MAX (CONFIG_STR_MAX + 16)
#define FIELD_MAX 40

/* KEYS: the hash. ARGV: field, job id, field, job id, ... For each pair "" (taken), or the job
 * id of the earlier mark. */
static const char mark_lua[] =
    "local out = {}\n"
    "for i = 1, #ARGV, 2 do\n"
    "  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) == 1 then out[#out + 1] = ''\n"
    "  else out[#out + 1] = redis.call('HGET', KEYS[1], ARGV[i]) or '?' end\n"
    "end\n"
    "return out\n";

static const char *const scripts[] = { mark_lua };

struct deadstore {
    const struct config *cfg;
    struct conn *db;
    char key[KEY_MAX];
};

struct deadstore *deadstore_new(const struct config *cfg)
{
    struct deadstore *ds = calloc(1, sizeof(*ds));

    if (!ds || !(ds->db = conn_new(cfg, scripts, 1))) {
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
    conn_free(ds->db);
    free(ds);
}

static void field_of(int32_t partition, int64_t offset, char out[FIELD_MAX])
{
    snprintf(out, FIELD_MAX, "%d:%lld", (int)partition, (long long)offset);
}

int deadstore_mark_many(struct deadstore *ds, size_t n, struct deadstore_mark *marks, char *err,
                        size_t errlen)
{
    char (*fields)[FIELD_MAX] = calloc(n ? n : 1, sizeof(*fields));
    const char **argv = calloc(2 * n + 1, sizeof(*argv));
    struct conn_call call = { .script = 0, .nkeys = 1, .argc = 2 * n + 1, .argv = argv };
    struct conn_reply *r = NULL;
    int rc = -1;

    if (!fields || !argv) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (n == 0) {
        rc = 0;
        goto out;
    }
    argv[0] = ds->key;
    for (size_t i = 0; i < n; i++) {
        field_of(marks[i].partition, marks[i].offset, fields[i]);
        argv[2 * i + 1] = fields[i];
        argv[2 * i + 2] = marks[i].job_id;
    }
    if (!(r = conn_call(ds->db, &call, CONN_WAIT_END, err, errlen)))
        goto out;
    if (conn_count(r) != n) {
        snprintf(err, errlen, "the mark script answered %zu of %zu", conn_count(r), n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *s = conn_str(conn_at(r, i), &len);
        marks[i].taken = s && len == 0;
        snprintf(marks[i].before, sizeof(marks[i].before), "%.*s", s ? (int)len : 0, s ? s : "");
    }
    rc = 0;
out:
    conn_reply_free(r);
    free(argv);
    free(fields);
    return rc;
}

/* Sends "<command> <hash> <field of each of the n > 0 letters>" (HDEL, HMGET): its reply, or
 * NULL with err set. */
static struct conn_reply *on_fields(struct deadstore *ds, const char *command, size_t n,
                                   const int32_t *partitions, const int64_t *offsets, char *err,
                                   size_t errlen)
{
    char (*fields)[FIELD_MAX] = calloc(n, sizeof(*fields));
    const char **argv = calloc(n + 2, sizeof(*argv));
    struct conn_call call = { .script = -1, .nkeys = 1, .argc = n + 2, .argv = argv };
    struct conn_reply *r = NULL;

    if (!fields || !argv) {
        snprintf(err, errlen, "out of memory");
    } else {
        argv[0] = command;
        argv[1] = ds->key;
        for (size_t i = 0; i < n; i++) {
            field_of(partitions[i], offsets[i], fields[i]);
            argv[i + 2] = fields[i];
        }
        r = conn_call(ds->db, &call, CONN_NO_WAIT, err, errlen);
    }
    free(argv);
    free(fields);
    return r;
}

int deadstore_unmark_many(struct deadstore *ds, size_t n, const int32_t *partitions,
                          const int64_t *offsets, char *err, size_t errlen)
{
    struct conn_reply *r;

    if (n == 0)
        return 0;
    if (!(r = on_fields(ds, "HDEL", n, partitions, offsets, err, errlen)))
        return -1;
    conn_reply_free(r);
    return 0;
}

int deadstore_marked(struct deadstore *ds, size_t n, const int32_t *partitions,
                     const int64_t *offsets, int *marked, char *err, size_t errlen)
{
    struct conn_reply *r;

    memset(marked, 0, n * sizeof(*marked));
    if (n == 0)
        return 0;
    if (!(r = on_fields(ds, "HMGET", n, partitions, offsets, err, errlen)))
        return -1;
    for (size_t i = 0; i < n && i < conn_count(r); i++)
        marked[i] = conn_type(conn_at(r, i)) == CONN_STR;
    conn_reply_free(r);
    return 0;
}

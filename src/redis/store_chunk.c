/* store_chunk: a looped script over many records, CHUNK_MAX records to a call and all calls in
 * one pipeline; in a Redis Cluster, the records sorted by hash slot and the calls cut where the
 * slot changes. The adds, claims and marks run on it (include/redis/store_link.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/store_link.h"

/* Records per call: a plain SET NX takes one. */
static size_t per_call(const struct chunked *c)
{
    return c->plain ? 1 : CHUNK_MAX;
}

/* How many script calls the batch takes. */
static size_t chunks_of(const struct chunked *c)
{
    return c->start ? c->nchunks : (c->n + per_call(c) - 1) / per_call(c);
}

size_t chunk_first(const struct chunked *c, size_t j)
{
    return c->start ? c->start[j] : j * per_call(c);
}

size_t chunk_size(const struct chunked *c, size_t j)
{
    size_t first = chunk_first(c, j), end = c->start ? c->start[j + 1] : first + per_call(c);

    return (end < c->n ? end : c->n) - first;
}

size_t record_at(const struct chunked *c, size_t pos)
{
    return c->order ? c->order[pos] : pos;
}

/* Call j as SET <key> <record> PX <ttl> NX: the add script's first step, which is the whole
 * add when the id is new, the usual case; the script runs afterwards only for the few ids whose
 * key was taken. Redis spends less on a pipeline of SETs than on the looped script (8-10 us per
 * add against 12, make bench), and in a Redis Cluster, where a batch's ids rarely share a hash
 * slot and so each would be a script call of its own, a third of it. */
static void build_plain_add(const struct chunked *c, size_t j, struct conn_call *call)
{
    size_t at = record_at(c, chunk_first(c, j)) * ADD_ARGS;

    job_key(c->st, c->ids[at / ADD_ARGS], c->keys[0], KEY_MAX);
    c->a[0] = "SET", c->l[0] = 3;
    c->a[1] = c->keys[0], c->l[1] = strlen(c->keys[0]);
    c->a[2] = c->args[at], c->l[2] = c->argslen[at];
    c->a[3] = "PX", c->l[3] = 2;
    c->a[4] = c->args[at + 1], c->l[4] = c->argslen[at + 1];
    c->a[5] = "NX", c->l[5] = 2;
    *call = (struct conn_call){ .script = -1, .nkeys = 1, .argc = 6, .argv = c->a, .lens = c->l };
}

/* Call j: the script on its records: their keys, the shared arguments, then each record's. */
static void build_chunk(void *ctx, size_t j, struct conn_call *call)
{
    const struct chunked *c = ctx;
    size_t first = chunk_first(c, j), k = chunk_size(c, j), argc = 0;

    if (c->plain) {
        build_plain_add(c, j, call);
        return;
    }
    for (size_t i = 0; i < k; i++) {
        job_key(c->st, c->ids[record_at(c, first + i)], c->keys[i], KEY_MAX);
        c->a[argc] = c->keys[i], c->l[argc++] = strlen(c->keys[i]);
    }
    for (int i = 0; i < c->nshared; i++)
        c->a[argc] = c->shared[i], c->l[argc++] = strlen(c->shared[i]);
    for (size_t i = 0; i < k; i++) {
        size_t at = record_at(c, first + i) * (size_t)c->per;
        for (size_t x = at; x < at + (size_t)c->per; x++)
            c->a[argc] = c->args[x], c->l[argc++] = c->argslen ? c->argslen[x] : strlen(c->args[x]);
    }
    *call = (struct conn_call){ .script = (int)c->script, .nkeys = k, .argc = argc, .argv = c->a,
                               .lens = c->l };
}

struct slotted {
    int slot;
    size_t i;
};

static int by_slot(const void *a, const void *b)
{
    const struct slotted *x = a, *y = b;

    return x->slot != y->slot ? (x->slot > y->slot) - (x->slot < y->slot) : (x->i > y->i) - (x->i < y->i);
}

/* In a cluster: sorts the records by hash slot and cuts the calls where the slot changes or
 * CHUNK_MAX is reached. Out of memory, c keeps the plain order (Redis then refuses the calls
 * that span slots, and those records fail). */
static void plan_chunks(struct chunked *c)
{
    struct slotted *sl;
    char key[KEY_MAX];

    job_key(c->st, c->n ? c->ids[0] : "", key, sizeof(key));
    if (!c->n || c->plain || conn_slot_of(c->st->db, key, strlen(key)) < 0 || !(sl = malloc(c->n * sizeof(*sl))))
        return;
    c->order = malloc(c->n * sizeof(*c->order));
    c->start = malloc((c->n + 1) * sizeof(*c->start));
    if (!c->order || !c->start) {
        free(c->order);
        free(c->start);
        free(sl);
        c->order = c->start = NULL;
        return;
    }
    for (size_t i = 0; i < c->n; i++) {
        job_key(c->st, c->ids[i], key, sizeof(key));
        sl[i] = (struct slotted){ conn_slot_of(c->st->db, key, strlen(key)), i };
    }
    qsort(sl, c->n, sizeof(*sl), by_slot);
    c->nchunks = 0;
    for (size_t p = 0; p < c->n; p++) {
        c->order[p] = sl[p].i;
        if (p == 0 || sl[p].slot != sl[p - 1].slot || p - c->start[c->nchunks - 1] == per_call(c))
            c->start[c->nchunks++] = p;
    }
    c->start[c->nchunks] = c->n;
    free(sl);
}

int run_chunked(struct chunked *c, conn_reply_fn *fn, void *ctx, enum conn_confirm confirm,
                char *err, size_t errlen)
{
    size_t argc = CHUNK_MAX + (size_t)c->nshared + CHUNK_MAX * (size_t)c->per;
    int rc = -1;

    plan_chunks(c);
    c->a = malloc(argc * sizeof(*c->a));
    c->l = malloc(argc * sizeof(*c->l));
    c->keys = malloc(CHUNK_MAX * sizeof(*c->keys));
    if (c->a && c->l && c->keys) {
        rc = conn_pipeline(c->st->db, chunks_of(c), build_chunk, fn, ctx, confirm, err, errlen);
    } else {
        struct conn_fail fail = { CONN_E_MEMORY, "out of memory" };
        snprintf(err, errlen, "out of memory");
        for (size_t j = 0; j < chunks_of(c); j++)
            fn(ctx, j, NULL, &fail);
    }
    free(c->a);
    free(c->l);
    free(c->keys);
    free(c->order);
    free(c->start);
    return rc;
}

const struct conn_reply *item_of(const struct conn_reply *r, size_t k, size_t i)
{
    if (!r || conn_type(r) == CONN_ERR)
        return r;
    return conn_count(r) == k ? conn_at(r, i) : NULL;
}

const char *item_failure(const struct conn_reply *item, const char *err, const char *what)
{
    if (!item)
        return err ? err : what;
    return conn_type(item) == CONN_ERR ? conn_str(item, NULL) : NULL;
}


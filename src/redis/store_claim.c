/* store_claim: the delivery's batches: claims of records for delivery, and marks of the claimed
 * ones as delivered or failed, each a looped script (store_chunk.c). The contract is in
 * include/redis/store.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/store_link.h"

/* A record's claim from its answer r; data points into r. */
static void read_claim(const struct conn_reply *r, struct store_claim *out)
{
    const struct conn_reply *first;

    memset(out, 0, sizeof(*out));
    if (conn_count(r) == 0)
        return;
    out->found = 1;
    first = conn_at(r, 0);
    if (conn_is(first, "other") && conn_count(r) == 2 && conn_type(conn_at(r, 1)) == CONN_STR) {
        out->other = conn_str(conn_at(r, 1), &out->other_len);
        return;
    }
    if (conn_is(first, "moved") && conn_count(r) == 2 && conn_type(conn_at(r, 1)) == CONN_STR) {
        out->moved_due_ms = strtoll(conn_str(conn_at(r, 1), NULL), NULL, 10);
        return;
    }
    if (conn_is(first, "wait")) {
        out->wait = 1;
        return;
    }
    if (conn_is(first, "stale") || conn_is(first, "busy") || conn_is(first, "foreign")) {
        out->stale = conn_is(first, "stale");
        out->busy = conn_is(first, "busy");
        out->foreign = conn_is(first, "foreign");
        return;
    }
    if (parse_state(first, &out->before) < 0)
        out->before = JOB_DELIVERING;   /* no record of ours: claimed, and the value does not decode */
    if (conn_count(r) == 2 && conn_type(conn_at(r, 1)) == CONN_STR) {
        out->data = conn_str(conn_at(r, 1), &out->len);
        out->claimed = 1;
    }
}

struct claim_batch {
    struct chunked c;
    store_claim_fn *fn;
    void *ctx;
};

/* The reply of claim call j: one answer per record of its chunk. */
static void claim_reply(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *f)
{
    const char *err = f ? f->text : NULL;
    const struct claim_batch *b = ctx;
    size_t k = chunk_size(&b->c, j), first = chunk_first(&b->c, j);
    struct store_claim c;
    char why[256];

    for (size_t i = 0; i < k; i++) {
        const struct conn_reply *item = f ? NULL : item_of(r, k, i);   /* unconfirmed: not claimed */
        const char *fail = item_failure(item, err, "unexpected reply to claim");
        if (!fail) {
            read_claim(item, &c);
            b->fn(b->ctx, record_at(&b->c, first + i), &c, NULL);
            continue;
        }
        redis_says(why, sizeof(why), fail);
        b->fn(b->ctx, record_at(&b->c, first + i), NULL, why);
    }
}

int store_claim_batch(struct store *st, size_t n, const char *const *ids, const char *instance,
                      const char *const *args, store_claim_fn *fn, void *ctx, char *err,
                      size_t errlen)
{
    struct claim_batch b = { { .st = st, .script = S_CLAIM, .n = n, .ids = ids, .nshared = 1,
                               .shared = &instance, .per = 4, .args = args }, fn, ctx };

    /* A record must not be delivered on a claim that a failover could take back: each chunk's
     * claims are confirmed before they are answered, while Redis claims the next chunk. */
    return run_chunked(&b.c, claim_reply, &b, CONN_WAIT_EACH, err, errlen);
}

/* A head "<letter><due>|<stamp>|<token>|": two 20-digit numbers and a token of up to 19
 * characters (the forwarder's have 13). */
#define MARK_HEAD_MAX 64

/* The arguments of one record's mark. */
struct mark_args {
    char claimed[MARK_HEAD_MAX];
    char head[MARK_HEAD_MAX];
    char ttl[24];
};

static void mark_args(const struct store_mark *m, int64_t now_ms, int64_t retention_ms,
                      struct mark_args *out)
{
    size_t now_len = (size_t)snprintf(out->ttl, sizeof(out->ttl), "%lld", (long long)now_ms);
    const char *rest = strlen(m->token) > now_len ? m->token + now_len : "";

    snprintf(out->claimed, sizeof(out->claimed), "%c%lld||%s|", job_state_letter(JOB_DELIVERING),
             (long long)m->due_ms, m->token);
    snprintf(out->head, sizeof(out->head), "%c%lld|%lld|%s|", job_state_letter(m->state),
             (long long)m->due_ms, (long long)now_ms, rest);
    out->ttl[0] = '\0';
    if (!m->kept && now_ms - m->due_ms > retention_ms / 64)
        snprintf(out->ttl, sizeof(out->ttl), "%lld", (long long)retention_ms);
}

struct mark_batch {
    struct chunked c;
    char *failed;               /* per record: 1 when it was not marked */
    char first_err[256];        /* why the first record not marked was not */
};

static void mark_reply(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *f)
{
    struct mark_batch *b = ctx;
    size_t k = chunk_size(&b->c, j);

    for (size_t i = 0; i < k; i++) {
        const char *why = item_failure(f ? NULL : item_of(r, k, i), f ? f->text : NULL,
                                       "unexpected reply to mark");
        if (!why)
            continue;
        b->failed[record_at(&b->c, chunk_first(&b->c, j) + i)] = 1;
        if (!b->first_err[0])
            redis_says(b->first_err, sizeof(b->first_err), why);
    }
}

int store_mark_batch(struct store *st, size_t n, const struct store_mark *marks, int64_t now_ms,
                     int64_t retention_ms, char *failed, char *err, size_t errlen)
{
    struct mark_args *a = malloc((n ? n : 1) * sizeof(*a));
    const char **ids = malloc((n ? n : 1) * sizeof(*ids));
    const char **argv = malloc((n ? n : 1) * 5 * sizeof(*argv));
    size_t *lens = malloc((n ? n : 1) * 5 * sizeof(*lens));
    struct mark_batch b = { { .st = st, .script = S_MARK, .n = n, .ids = ids, .per = 5, .args = argv,
                              .argslen = lens }, failed, "" };
    int rc = -1;

    memset(failed, 0, n);
    if (!a || !ids || !argv || !lens) {
        memset(failed, 1, n);
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        mark_args(&marks[i], now_ms, retention_ms, &a[i]);
        ids[i] = marks[i].id;
        argv[5 * i] = a[i].claimed;
        argv[5 * i + 1] = a[i].head;
        argv[5 * i + 2] = a[i].ttl;
        argv[5 * i + 3] = marks[i].error ? marks[i].error : "";
        argv[5 * i + 4] = marks[i].tail ? marks[i].tail : "";
        for (int k = 0; k < 4; k++)
            lens[5 * i + k] = strlen(argv[5 * i + k]);
        lens[5 * i + 4] = marks[i].tail ? marks[i].tail_len : 0;
    }
    run_chunked(&b.c, mark_reply, &b, CONN_WAIT_END, err, errlen);
    if (b.first_err[0])
        snprintf(err, errlen, "%s", b.first_err);
    else
        rc = 0;
out:
    free(a);
    free(ids);
    free(argv);
    free(lens);
    return rc;
}

/* store_add: the adds of job records, a SET NX per record and the add script for the ids found
 * taken, and the undo of a failed add: the record it may have written is deleted, at once or
 * once Redis answers again. The contract is in include/redis/store.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/store_link.h"

/* Records of failed adds that Redis may have written while it did not answer: deleted once it
 * answers again (before the next batch of adds). A bound on the memory an outage may take;
 * past it, a record left over expires with its retention (it has no delay message and is
 * never delivered). */
#define UNDO_MAX 4096

struct undo {
    char id[JOB_ID_MAX + 1];
    char tag[JOB_TAG_LEN + 1];
};

struct add_batch {
    struct chunked c;
    struct store_add_answer *out;
    size_t *taken;      /* records whose plain SET NX found their key taken: the script decides */
    size_t ntaken;
};

/* An add's result; for the same job already there, the tag and due time of its record. */
static void read_duplicate(const struct conn_reply *r, int res, struct store_add_answer *out)
{
    size_t len;
    const char *tag;

    out->res = (enum store_add_result)res;
    out->tag[0] = '\0';
    out->due_ms = -1;
    if (res != STORE_DUPLICATE || conn_count(r) < 4 || conn_type(conn_at(r, 2)) != CONN_STR ||
        conn_type(conn_at(r, 3)) != CONN_STR)
        return;
    tag = conn_str(conn_at(r, 2), &len);
    if (len == JOB_TAG_LEN && strcmp(tag, JOB_CLAIM_ROOM) != 0)
        memcpy(out->tag, tag, JOB_TAG_LEN + 1);   /* else a record without one */
    out->due_ms = strtoll(conn_str(conn_at(r, 3), NULL), NULL, 10);
}

/* An add that failed after it may have written its record: the record is dropped (see
 * undo_failed), so that no pending record outlives an add answered as failed. */
static void failed_add(struct store_add_answer *out, const char *why, int wrote)
{
    out->ok = 0;
    out->undo = wrote;   /* 1: it wrote (unconfirmed); -1: it may have (no answer) */
    redis_says(out->err, sizeof(out->err), why);
}

/* The reply to a plain SET NX of record i: added, or its key taken (left to the script). */
static void plain_add_reply(struct add_batch *b, size_t i, const struct conn_reply *r,
                            const struct conn_fail *fail)
{
    struct store_add_answer *out = &b->out[i];

    if (!r) {
        failed_add(out, fail->text, -1);   /* it may have run */
    } else if (conn_type(r) == CONN_NIL) {
        out->ok = 0;
        snprintf(out->err, sizeof(out->err), "redis: the add of a taken id was not run");
        b->taken[b->ntaken++] = i;
    } else if (!conn_is(r, "OK")) {
        failed_add(out, conn_type(r) == CONN_ERR ? conn_str(r, NULL) : "unexpected reply to add", 0);
    } else if (fail) {
        failed_add(out, fail->text, 1);   /* written, but a failover could take it back */
    } else {
        *out = (struct store_add_answer){ .ok = 1, .res = STORE_ADDED, .state = JOB_PENDING,
                                          .due_ms = -1 };
    }
}

static void add_reply(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct add_batch *b = ctx;
    size_t k = chunk_size(&b->c, j);

    if (b->c.plain) {
        plain_add_reply(b, record_at(&b->c, chunk_first(&b->c, j)), r, fail);
        return;
    }
    for (size_t i = 0; i < k; i++) {
        struct store_add_answer *out = &b->out[record_at(&b->c, chunk_first(&b->c, j) + i)];
        const struct conn_reply *item = item_of(r, k, i);
        const char *why = item_failure(item, r ? NULL : fail->text, "unexpected reply to add");
        int res = -1;

        if (!why && read_result(item, &res, &out->state) < 0)
            why = "unexpected reply to add";
        if (why)
            failed_add(out, why, r ? 0 : -1);
        else if (fail)
            failed_add(out, fail->text, res == STORE_ADDED);
        else
            out->ok = 1, out->undo = 0, read_duplicate(item, res, out);
    }
}

/* Deletes the record of a failed add: only a pending record under the add's own tag, so that
 * a record of an earlier add of the same id stays. 0, or -1 when Redis did not answer. */
static int drop_own(struct store *st, const char *id, const char *tag)
{
    char err[256];
    struct conn_reply *r = eval1(st, S_DROP, id, tag[0] ? 1 : 0, &tag, CONN_NO_WAIT, err, sizeof(err));

    conn_reply_free(r);
    return r || conn_code(st->db) == CONN_E_REPLY ? 0 : -1;
}

/* Keeps a failed add's record to delete once Redis answers again. */
static void undo_later(struct store *st, const struct job *job)
{
    if (!st->undo && !(st->undo = malloc(UNDO_MAX * sizeof(*st->undo))))
        return;
    if (st->nundo == UNDO_MAX)
        return;
    snprintf(st->undo[st->nundo].id, sizeof(st->undo[0].id), "%s", job->id);
    memcpy(st->undo[st->nundo++].tag, job->tag, sizeof(job->tag));
}

/* Deletes the records kept by undo_later, while Redis answers. */
static void undo_kept(struct store *st)
{
    size_t done = 0;

    while (done < st->nundo && drop_own(st, st->undo[done].id, st->undo[done].tag) == 0)
        done++;
    memmove(st->undo, st->undo + done, (st->nundo - done) * sizeof(*st->undo));
    st->nundo -= done;
}

/* Drops the records that failed adds may have written. One Redis answered but did not confirm
 * goes at once; one Redis did not answer for is kept to delete when it answers again (asking
 * now would wait for the same timeout). */
static void undo_failed(struct store *st, size_t n, const struct job *const *jobs,
                        struct store_add_answer *out)
{
    for (size_t i = 0; i < n; i++) {
        const char *more = "";
        if (out[i].ok || !out[i].undo)
            continue;
        if (out[i].undo < 0)
            undo_later(st, jobs[i]), more = "; its record, if Redis wrote it, is deleted once Redis answers";
        else if (drop_own(st, jobs[i]->id, jobs[i]->tag) < 0)
            undo_later(st, jobs[i]), more = "; its record is deleted once Redis answers";
        snprintf(out[i].err + strlen(out[i].err), sizeof(out[i].err) - strlen(out[i].err), "%s", more);
    }
}

static int add_records(struct store *st, size_t n, const struct job *const *jobs,
                       int64_t retention_ms, int plain, struct store_add_answer *out,
                       char *err, size_t errlen);

/* The script's add of the records whose plain SET NX found their key taken: the same job sent
 * again, another job with that id, or a key that expired in between (then added after all).
 * Their answers replace the ones the SET NX left; when Redis could not be asked, they say why. */
static void add_taken(struct store *st, const struct add_batch *b, const struct job *const *jobs,
                      int64_t retention_ms)
{
    const struct job **sub = malloc(b->ntaken * sizeof(*sub));
    struct store_add_answer *ans = calloc(b->ntaken, sizeof(*ans));
    char err[sizeof(ans->err)] = "out of memory";
    int rc = -1;

    if (sub && ans) {
        for (size_t i = 0; i < b->ntaken; i++)
            sub[i] = jobs[b->taken[i]];
        rc = add_records(st, b->ntaken, sub, retention_ms, 0, ans, err, sizeof(err));
    }
    for (size_t i = 0; i < b->ntaken; i++) {
        struct store_add_answer *out = &b->out[b->taken[i]];
        if (rc == 0)
            *out = ans[i];
        else
            redis_says(out->err, sizeof(out->err), err);
    }
    free(sub);
    free(ans);
}

/* store_add_batch; plain: each record is first tried with SET NX, the script only where its key
 * was taken. */
static int add_records(struct store *st, size_t n, const struct job *const *jobs,
                       int64_t retention_ms, int plain, struct store_add_answer *out,
                       char *err, size_t errlen)
{
    msgpack_sbuffer *bufs = calloc(n ? n : 1, sizeof(*bufs));
    char (*ttl)[24] = malloc((n ? n : 1) * sizeof(*ttl));
    const char **ids = malloc((n ? n : 1) * sizeof(*ids));
    const char **args = malloc(ADD_ARGS * n * sizeof(*args) + 1);
    size_t *lens = malloc(ADD_ARGS * n * sizeof(*lens) + 1);
    struct add_batch b = { { .st = st, .script = S_ADD, .n = n, .ids = ids, .per = ADD_ARGS, .args = args,
                             .argslen = lens, .plain = plain }, out,
                           malloc((n ? n : 1) * sizeof(*b.taken)), 0 };
    int rc = -1;

    if (!bufs || !ttl || !ids || !args || !lens || !b.taken) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        msgpack_sbuffer_init(&bufs[i]);
    for (size_t i = 0; i < n; i++) {
        const struct job *job = jobs[i];
        if (job_record_pack(job, &bufs[i]) < 0) {
            snprintf(err, errlen, "out of memory packing the record of job %s", job->id);
            goto done;
        }
        snprintf(ttl[i], sizeof(ttl[i]), "%lld", (long long)(job->due_ms - job->created_ms + retention_ms));
        ids[i] = job->id;
        args[ADD_ARGS * i] = bufs[i].data,       lens[ADD_ARGS * i] = bufs[i].size;
        args[ADD_ARGS * i + 1] = ttl[i],         lens[ADD_ARGS * i + 1] = strlen(ttl[i]);
        args[ADD_ARGS * i + 2] = job->override == JOB_OVERRIDE_FAILED ? "2"
                                 : job->override ? "1" : "";
        lens[ADD_ARGS * i + 2] = job->override ? 1 : 0;
    }
    run_chunked(&b.c, add_reply, &b, CONN_WAIT_END, err, errlen);   /* each job its own answer */
    undo_failed(st, n, jobs, out);
    if (b.ntaken)
        add_taken(st, &b, jobs, retention_ms);
    rc = 0;
done:
    for (size_t i = 0; bufs && i < n; i++)
        msgpack_sbuffer_destroy(&bufs[i]);
    free(bufs);
    free(ttl);
    free(ids);
    free(args);
    free(lens);
    free(b.taken);
    return rc;
}

int store_add_batch(struct store *st, size_t n, const struct job *const *jobs, int64_t retention_ms,
                    struct store_add_answer *out, char *err, size_t errlen)
{
    if (st->nundo)
        undo_kept(st);
    return add_records(st, n, jobs, retention_ms, 1, out, err, errlen);
}

int store_drop_pending(struct store *st, const char *id, enum job_state *left, char *err,
                       size_t errlen)
{
    struct conn_reply *r = eval1(st, S_DROP, id, 0, NULL, CONN_NO_WAIT, err, errlen);   /* nothing rests on it */

    if (left && (!r || conn_type(r) != CONN_STR || parse_state(r, left) < 0))
        *left = JOB_PENDING;   /* dropped, or nothing there */
    conn_reply_free(r);
    return r ? 0 : -1;
}

/* store: job records in Redis: the struct and its connection, whose record scripts (store_lua.c)
 * conn loads; the calls of one command or script per record in one pipeline (reads, removes,
 * replaces); the retries planned. Adds are in store_add.c, claims and marks in store_claim.c.
 * The contract is in include/redis/store.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redis/store_link.h"

#define RETRIES_KEPT_MS 60000   /* a planned retry stays listed this long past its due time */

struct store *store_new(const struct config *cfg)
{
    struct store *st = calloc(1, sizeof(*st));

    if (!st || !(st->db = conn_new(cfg, store_script_text, S_COUNT))) {
        free(st);
        return NULL;
    }
    st->cfg = cfg;
    return st;
}

void store_free(struct store *st)
{
    if (!st)
        return;
    free(st->undo);
    conn_free(st->db);
    free(st);
}

void job_key(const struct store *st, const char *id, char *out, size_t outlen)
{
    snprintf(out, outlen, "%sjob:%s", st->cfg->redis.prefix, id);
}

struct conn_reply *eval1(struct store *st, enum script script, const char *id, int argc,
                         const char *const *argv, enum conn_confirm confirm, char *err,
                         size_t errlen)
{
    char key[KEY_MAX];
    const char *a[1 + 4] = { key };
    struct conn_call call = { .script = (int)script, .nkeys = 1, .argc = 1 + (size_t)argc, .argv = a };

    job_key(st, id, key, sizeof(key));
    for (int i = 0; i < argc && i < 4; i++)
        a[1 + i] = argv[i];
    return conn_call(st->db, &call, confirm, err, errlen);
}

int parse_state(const struct conn_reply *r, enum job_state *state)
{
    size_t len;
    const char *s = conn_type(r) == CONN_STR ? conn_str(r, &len) : NULL;

    return s && len == 1 ? job_state_of_letter(s[0], state) : -1;
}

int read_result(const struct conn_reply *r, int *res, enum job_state *state)
{
    const struct conn_reply *letter;

    if (conn_count(r) < 2 || conn_type(conn_at(r, 0)) != CONN_INT)
        return -1;
    *res = (int)conn_int(conn_at(r, 0));
    letter = conn_at(r, 1);
    if (*res < 0 || *res > 3 ||
        (conn_type(letter) == CONN_STR && conn_str(letter, NULL)[0] && parse_state(letter, state) < 0))
        return -1;
    return 0;
}

void redis_says(char *out, size_t outlen, const char *why)
{
    snprintf(out, outlen, "%s%s", strncmp(why, "redis", 5) ? "redis: " : "", why);
}

/* Reads and replacements, one call per record, all in one pipeline. */
struct many {
    struct store *st;
    struct store_read *reads;       /* or */
    struct store_swap *swaps;       /* or */
    struct store_removal *removals;
    char now[32];                   /* the removals' time */
    char key[KEY_MAX], ttl[32];     /* the call being built (ttl: the removals' retention) */
    const char *argv[4];
    size_t lens[4];
};

static void build_read(void *ctx, size_t j, struct conn_call *call)
{
    struct many *m = ctx;

    job_key(m->st, m->reads[j].id, m->key, sizeof(m->key));
    m->argv[0] = "GET";
    m->argv[1] = m->key;
    *call = (struct conn_call){ .script = -1, .nkeys = 1, .argc = 2, .argv = m->argv };
}

static void note_failure(int *failed, char *err, size_t errlen, const char *why)
{
    *failed = 1;
    redis_says(err, errlen, why);
}

static void on_read(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct store_read *rd = &((struct many *)ctx)->reads[j];
    const char *v = "";

    if (fail) {
        note_failure(&rd->failed, rd->err, sizeof(rd->err), fail->text);
        return;
    }
    if (conn_type(r) == CONN_ERR && strncmp(conn_str(r, NULL), "WRONGTYPE", 9) != 0) {
        note_failure(&rd->failed, rd->err, sizeof(rd->err), conn_str(r, NULL));
        return;
    }
    if (conn_type(r) == CONN_STR)
        v = conn_str(r, &rd->len);
    else if (conn_type(r) != CONN_ERR)   /* nil: no record; WRONGTYPE: one that is no record */
        return;
    if (!(rd->data = malloc(rd->len + 1))) {
        rd->len = 0;
        note_failure(&rd->failed, rd->err, sizeof(rd->err), "out of memory");
        return;
    }
    memcpy(rd->data, v, rd->len);
    rd->data[rd->len] = '\0';
    rd->found = 1;
}

int store_read_many(struct store *st, size_t n, struct store_read *reads)
{
    struct many m = { .st = st, .reads = reads };
    char err[256];
    int rc = 0;

    for (size_t i = 0; i < n; i++)
        reads[i] = (struct store_read){ .id = reads[i].id };
    if (n > 0)
        (void)conn_pipeline(st->db, n, build_read, on_read, &m, CONN_NO_WAIT, err, sizeof(err));
    for (size_t i = 0; i < n; i++)
        rc |= reads[i].failed ? -1 : 0;
    return rc;
}

static void build_removal(void *ctx, size_t j, struct conn_call *call)
{
    struct many *m = ctx;

    const struct store_removal *rm = &m->removals[j];

    job_key(m->st, rm->id, m->key, sizeof(m->key));
    m->argv[0] = m->key, m->argv[1] = m->now, m->argv[2] = m->ttl, m->argv[3] = rm->head;
    m->lens[0] = strlen(m->key), m->lens[1] = strlen(m->now), m->lens[2] = strlen(m->ttl);
    m->lens[3] = rm->head_len;
    *call = (struct conn_call){ .script = S_REMOVE, .nkeys = 1, .argc = rm->head ? 4 : 3,
                                .argv = m->argv, .lens = m->lens };
}

static void on_removal(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct store_removal *rm = &((struct many *)ctx)->removals[j];
    int result;

    if (fail && fail->code == CONN_E_UNCONFIRMED) {
        rm->failed = 1;
        snprintf(rm->err, sizeof(rm->err), "%s, so whether the job was removed is not known; "
                 "removing it again is safe", fail->text);
    } else if (fail) {
        note_failure(&rm->failed, rm->err, sizeof(rm->err), fail->text);
    } else if (conn_type(r) == CONN_ERR) {
        note_failure(&rm->failed, rm->err, sizeof(rm->err), conn_str(r, NULL));
    } else if (read_result(r, &result, &rm->state) < 0) {
        note_failure(&rm->failed, rm->err, sizeof(rm->err), "unexpected reply to remove");
    } else {
        rm->res = (enum store_remove_result)result;
    }
}

int store_remove_many(struct store *st, size_t n, struct store_removal *removals, int64_t now_ms,
                      int64_t retention_ms)
{
    struct many m = { .st = st, .removals = removals };
    char err[256];
    int rc = 0;

    snprintf(m.now, sizeof(m.now), "%lld", (long long)now_ms);
    snprintf(m.ttl, sizeof(m.ttl), "%lld", (long long)retention_ms);
    for (size_t i = 0; i < n; i++)
        removals[i] = (struct store_removal){ .id = removals[i].id, .head = removals[i].head,
                                              .head_len = removals[i].head_len,
                                              .state = JOB_PENDING };
    if (n > 0)
        (void)conn_pipeline(st->db, n, build_removal, on_removal, &m, CONN_WAIT_END, err, sizeof(err));
    for (size_t i = 0; i < n; i++)
        rc |= removals[i].failed ? -1 : 0;
    return rc;
}

/* The lifetimes of store_keep_many: PERSIST or PEXPIRE per record. */
struct keeping {
    struct store *st;
    const char *const *ids;
    char *failed;
    char *err;
    size_t errlen;
    char key[KEY_MAX], ttl[24];
    const char *argv[3];
};

static void build_keep(void *ctx, size_t j, struct conn_call *call)
{
    struct keeping *k = ctx;
    int forever = !k->ttl[0], drop = strcmp(k->ttl, "0") == 0;

    job_key(k->st, k->ids[j], k->key, sizeof(k->key));
    k->argv[0] = drop ? "DEL" : forever ? "PERSIST" : "PEXPIRE";
    k->argv[1] = k->key;
    k->argv[2] = k->ttl;
    *call = (struct conn_call){ .script = -1, .nkeys = 1, .argc = forever || drop ? 2 : 3,
                                .argv = k->argv };
}

static void on_keep(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct keeping *k = ctx;
    const char *why = fail ? fail->text : conn_type(r) == CONN_ERR ? conn_str(r, NULL) : NULL;

    if (!why)
        return;
    if (k->failed)
        k->failed[j] = 1;
    if (!k->err[0])
        redis_says(k->err, k->errlen, why);
}

int store_keep_many(struct store *st, size_t n, const char *const *ids, int64_t ttl_ms,
                    char *failed, char *err, size_t errlen)
{
    struct keeping k = { .st = st, .ids = ids, .failed = failed, .err = err, .errlen = errlen };

    err[0] = '\0';
    if (failed)
        memset(failed, 0, n);
    if (ttl_ms >= 0)
        snprintf(k.ttl, sizeof(k.ttl), "%lld", (long long)ttl_ms);
    if (n > 0)
        (void)conn_pipeline(st->db, n, build_keep, on_keep, &k, CONN_NO_WAIT, err, errlen);
    return err[0] ? -1 : 0;
}

static void build_swap(void *ctx, size_t j, struct conn_call *call)
{
    struct many *m = ctx;
    const struct store_swap *sw = &m->swaps[j];

    job_key(m->st, sw->id, m->key, sizeof(m->key));
    snprintf(m->ttl, sizeof(m->ttl), "%lld", (long long)(sw->ttl_ms > 1 ? sw->ttl_ms : 1));
    m->argv[0] = m->key, m->argv[1] = sw->head, m->argv[2] = sw->value, m->argv[3] = m->ttl;
    m->lens[0] = strlen(m->key), m->lens[1] = sw->head_len, m->lens[2] = sw->len;
    m->lens[3] = strlen(m->ttl);
    *call = (struct conn_call){ .script = S_REPLACE, .nkeys = 1, .argc = 4, .argv = m->argv,
                               .lens = m->lens };
}

static void on_swap(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct store_swap *sw = &((struct many *)ctx)->swaps[j];

    if (fail && fail->code != CONN_E_UNCONFIRMED) {
        note_failure(&sw->failed, sw->err, sizeof(sw->err), fail->text);
        return;
    }
    if (conn_type(r) == CONN_ERR) {
        note_failure(&sw->failed, sw->err, sizeof(sw->err), conn_str(r, NULL));
        return;
    }
    sw->replaced = conn_type(r) == CONN_INT && conn_int(r) == 1;
    if (sw->replaced && fail) {   /* too few replicas have it: a failover could undo it */
        sw->failed = 1;
        snprintf(sw->err, sizeof(sw->err), "%s, so whether the record was changed is not known",
                 fail->text);
    }
}

int store_replace_many(struct store *st, size_t n, struct store_swap *swaps)
{
    struct many m = { .st = st, .swaps = swaps };
    char err[256];
    int rc = 0;

    for (size_t i = 0; i < n; i++) {
        swaps[i].replaced = swaps[i].failed = 0;
        swaps[i].err[0] = '\0';
    }
    if (n > 0)
        (void)conn_pipeline(st->db, n, build_swap, on_swap, &m, CONN_WAIT_END, err, sizeof(err));
    for (size_t i = 0; i < n; i++)
        rc |= swaps[i].failed ? -1 : 0;
    return rc;
}

int store_replace(struct store *st, const char *id, const char *head, size_t head_len,
                  const char *value, size_t len, int64_t ttl_ms, int *replaced, char *err,
                  size_t errlen)
{
    struct store_swap sw = { .id = id, .head = head, .head_len = head_len, .value = value,
                             .len = len, .ttl_ms = ttl_ms };

    *replaced = 0;
    if (store_replace_many(st, 1, &sw) < 0) {
        snprintf(err, errlen, "%s", sw.err);
        return -1;
    }
    *replaced = sw.replaced;
    return 0;
}

int store_fail_delivered(struct store *st, const char *id, int64_t due_ms, const char *why,
                         int64_t retention_ms, char *err, size_t errlen)
{
    char due[24], ttl[24];
    const char *argv[3] = { due, why, ttl };
    struct conn_reply *r;

    snprintf(due, sizeof(due), "%lld", (long long)due_ms);
    snprintf(ttl, sizeof(ttl), "%lld", (long long)(retention_ms > 1 ? retention_ms : 1));
    if (!(r = eval1(st, S_FAIL, id, 3, argv, CONN_WAIT_EACH, err, errlen)))
        return -1;
    conn_reply_free(r);
    return 0;
}

/* The retries planned, by due time: a sorted set of job ids, kept a minute past each due time. */
static void retries_key(const struct store *st, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s{cb}:retries", st->cfg->redis.prefix);
}

int store_retries_planned(struct store *st, size_t n, const char *const *ids,
                          const int64_t *at_ms, int64_t now_ms, char *err, size_t errlen)
{
    char key[KEY_MAX], old[24], (*at)[24] = calloc(n ? n : 1, sizeof(*at));
    const char **argv = calloc(2 * n + 2, sizeof(*argv));
    struct conn_reply *r = NULL;
    int rc = -1;

    if (!at || !argv) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    retries_key(st, key, sizeof(key));
    argv[0] = "ZADD";
    argv[1] = key;
    for (size_t i = 0; i < n; i++) {
        snprintf(at[i], sizeof(at[i]), "%lld", (long long)at_ms[i]);
        argv[2 + 2 * i] = at[i];
        argv[3 + 2 * i] = ids[i];
    }
    if (n && !(r = conn_call(st->db, &(struct conn_call){ .script = -1, .nkeys = 1,
                                                         .argc = 2 * n + 2, .argv = argv },
                             CONN_NO_WAIT, err, errlen)))
        goto out;
    conn_reply_free(r);
    snprintf(old, sizeof(old), "(%lld", (long long)(now_ms - RETRIES_KEPT_MS));
    if (!(r = conn_command(st->db, err, errlen, "ZREMRANGEBYSCORE", key, "-inf", old, NULL)))
        goto out;
    conn_reply_free(r);
    rc = 0;
out:
    free(at);
    free(argv);
    return rc;
}

int store_retries_waiting(struct store *st, int64_t now_ms, int64_t *n, char *err, size_t errlen)
{
    char key[KEY_MAX], now[24];
    struct conn_reply *r;

    retries_key(st, key, sizeof(key));
    snprintf(now, sizeof(now), "%lld", (long long)now_ms);
    if (!(r = conn_command(st->db, err, errlen, "ZCOUNT", key, now, "+inf", NULL)))
        return -1;
    *n = conn_int(r);
    conn_reply_free(r);
    return 0;
}

int store_evicts(char *policy, size_t len)
{
    return conn_eviction(policy, len);
}

unsigned store_master_moves(void)
{
    return conn_master_moves();
}

int store_ping(struct store *st, char *err, size_t errlen)
{
    return conn_ping(st->db, err, errlen);
}

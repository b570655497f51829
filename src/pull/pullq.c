/* pullq: the pull queues' keys, the registry of pull topics, and the pipelines that run the
 * scripts (their text is in pullq_lua.c). The contract and the key layout are in
 * include/pull/pullq.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "pull/pullq.h"
#include "pull/pullq_link.h"
#include "redis/conn.h"

#define SWEEP_LIMIT 1000   /* reservations and dead letters one sweep of a topic takes at most */


struct pullq *pullq_new(const struct config *cfg)
{
    struct pullq *q = calloc(1, sizeof(*q));

    if (!q || !(q->db = conn_new(cfg, pullq_script_text, S_COUNT))) {
        free(q);
        return NULL;
    }
    q->cfg = cfg;
    return q;
}

void pullq_free(struct pullq *q)
{
    if (!q)
        return;
    conn_free(q->db);
    for (size_t i = 0; i < q->nnoted; i++)
        free(q->noted[i].topic);
    free(q->noted);
    free(q);
}

/* The key of part ("ready", "reserved", "dead", or "j:" for a job's hash, then id) of topic. */
void pullq_topic_key(const struct pullq *q, const char *topic, const char *part, const char *id,
                     char *out, size_t outlen)
{
    snprintf(out, outlen, "%s{pull:%s}:%s%s", q->cfg->redis.prefix, topic, part, id ? id : "");
}


static void fail_note(int *failed, char *err, size_t errlen, const struct conn_reply *r,
                      const struct conn_fail *fail)
{
    *failed = 1;
    snprintf(err, errlen, "redis: %s", fail ? fail->text : r && conn_str(r, NULL) ? conn_str(r, NULL)
                                                                                 : "unexpected reply");
}

/* 1 when the call has an answer that is no error reply (else its failure is noted). */
static int answered(int *failed, char *err, size_t errlen, const struct conn_reply *r,
                    const struct conn_fail *fail)
{
    if (fail || conn_type(r) == CONN_ERR) {
        fail_note(failed, err, errlen, r, fail);
        return 0;
    }
    return 1;
}

char *pullq_dup_reply(const struct conn_reply *r, size_t *len)
{
    size_t n = 0;
    const char *s = conn_str(r, &n);
    char *out = malloc(n + 1);

    if (out) {
        memcpy(out, s ? s : "", n);
        out[n] = '\0';
    }
    if (len)
        *len = n;
    return out;
}

/* A reply element as a number: integers as they are, strings read as decimals. */
int64_t pullq_num_of(const struct conn_reply *r)
{
    const char *s;

    if (conn_type(r) == CONN_INT)
        return conn_int(r);
    s = conn_str(r, NULL);
    return s ? strtoll(s, NULL, 10) : 0;
}

/* The scratch of one pipeline: keys, number texts and arguments of the call being built. */
struct build {
    struct pullq *q;
    void *items;
    char k[6][KEY_MAX];
    char chan[KEY_MAX];
    char num[6][24];
    const char *argv[16];
    size_t lens[16];
    char tag[JOB_TAG_LEN + 1];
    int64_t now_ms, a, b;
};

/* Points argument i of the call at text. */
static void arg(struct build *b, int i, const char *text)
{
    b->argv[i] = text;
    b->lens[i] = strlen(text);
}

static void arg_num(struct build *b, int i, int slot, int64_t v)
{
    snprintf(b->num[slot], sizeof(b->num[slot]), "%lld", (long long)v);
    arg(b, i, b->num[slot]);
}

static void build_ready(void *ctx, size_t j, struct conn_call *call)
{
    struct build *b = ctx;
    struct pullq_entry *e = &((struct pullq_entry *)b->items)[j];

    pullq_topic_key(b->q, e->topic, "ready", NULL, b->k[0], KEY_MAX);
    pullq_topic_key(b->q, e->topic, "j:", e->id, b->k[1], KEY_MAX);
    pullq_topic_key(b->q, e->topic, "later", NULL, b->k[3], KEY_MAX);
    arg(b, 0, b->k[0]);
    arg(b, 1, b->k[1]);
    arg(b, 2, b->k[3]);
    arg(b, 3, e->id);
    b->argv[4] = e->rec;
    b->lens[4] = e->rec_len;
    arg_num(b, 5, 0, e->due_ms);
    arg_num(b, 6, 1, e->ttr_ms);
    pullq_channel(b->q, b->k[2], KEY_MAX);
    arg(b, 7, b->k[2]);
    arg(b, 8, e->topic);
    arg_num(b, 9, 2, e->max_pops);
    *call = (struct conn_call){ .script = S_READY, .nkeys = 3, .argc = 10, .argv = b->argv,
                               .lens = b->lens };
}

static void on_ready(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct pullq_entry *e = &((struct pullq_entry *)((struct build *)ctx)->items)[j];

    if (!answered(&e->failed, e->err, sizeof(e->err), r, fail))
        return;
    if (conn_type(r) != CONN_INT || conn_int(r) < 0 || conn_int(r) > PULLQ_ID_BUSY)
        fail_note(&e->failed, e->err, sizeof(e->err), NULL, NULL);
    else
        e->res = (enum pullq_ready_result)conn_int(r);
}

static void run(struct pullq *q, struct build *b, size_t n, conn_build_fn *build, conn_reply_fn *fn,
                enum conn_confirm confirm)
{
    char err[256];

    b->q = q;
    if (n)
        (void)conn_pipeline(q->db, n, build, fn, b, confirm, err, sizeof(err));
}

/* Clears the outcome fields every item kind starts with: failed and err. */
#define RESET(items, n)                          \
    for (size_t i_ = 0; i_ < (n); i_++) {        \
        (items)[i_].failed = 0;                  \
        (items)[i_].err[0] = '\0';               \
    }
#define ANY_FAILED(items, n, rc)                 \
    for (size_t i_ = 0; i_ < (n); i_++)          \
        (rc) |= (items)[i_].failed ? -1 : 0

int pullq_ready_many(struct pullq *q, size_t n, struct pullq_entry *entries)
{
    struct build b = { .items = entries };
    int rc = 0;

    RESET(entries, n);
    for (size_t i = 0; i < n; i++) {
        char err[256];
        if (pullq_note_topic(q, entries[i].topic, err, sizeof(err)) < 0) {   /* the sweepers first */
            for (size_t k = 0; k < n; k++) {
                entries[k].failed = 1;
                snprintf(entries[k].err, sizeof(entries[k].err), "registering topic %.60s: %.160s",
                         entries[i].topic, err);
            }
            return -1;
        }
    }
    run(q, &b, n, build_ready, on_ready, CONN_WAIT_END);
    ANY_FAILED(entries, n, rc);
    return rc;
}

static void build_pop(void *ctx, size_t j, struct conn_call *call)
{
    struct build *b = ctx;
    struct pullq_pop *p = &((struct pullq_pop *)b->items)[j];

    pullq_topic_key(b->q, p->topic, "ready", NULL, b->k[0], KEY_MAX);
    pullq_topic_key(b->q, p->topic, "reserved", NULL, b->k[1], KEY_MAX);
    pullq_topic_key(b->q, p->topic, "dead", NULL, b->k[2], KEY_MAX);
    pullq_topic_key(b->q, p->topic, "paused", NULL, b->k[3], KEY_MAX);
    pullq_topic_key(b->q, p->topic, "j:", NULL, b->k[4], KEY_MAX);
    snprintf(b->k[5], KEY_MAX, ":%s", p->topic);
    job_new_tag(b->tag);   /* a fresh start for every call, also one sent again */
    for (int i = 0; i < 4; i++)
        arg(b, i, b->k[i]);
    arg_num(b, 4, 0, b->now_ms);
    arg_num(b, 5, 1, p->max);
    arg_num(b, 6, 2, p->ttr_ms);
    arg_num(b, 7, 3, b->a);
    arg(b, 8, b->tag);
    arg(b, 9, b->k[4]);
    arg(b, 10, b->k[5]);
    arg_num(b, 11, 4, b->b);
    arg_num(b, 12, 5, b->q->cfg->pull.max_attempts);
    *call = (struct conn_call){ .script = S_POP, .nkeys = 4, .argc = 13, .argv = b->argv,
                               .lens = b->lens };
}

#define POP_FIELDS 6   /* id, record, attempt, receipt, until, due */

static void on_pop(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct pullq_pop *p = &((struct pullq_pop *)((struct build *)ctx)->items)[j];
    size_t n;

    /* Reserved is reserved: a pop that answered 503 here would leave its jobs reserved for
     * nobody (a once job finished for nobody), so what the script took is handed out. */
    if (fail && fail->code == CONN_E_UNCONFIRMED && conn_type(r) == CONN_ARR) {
        p->unconfirmed = 1;
        snprintf(p->err, sizeof(p->err), "redis: %s", fail->text);
        fail = NULL;
    }
    if (!answered(&p->failed, p->err, sizeof(p->err), r, fail))
        return;
    n = conn_count(r) ? (conn_count(r) - 1) / POP_FIELDS : 0;
    if (conn_type(r) != CONN_ARR || !conn_count(r) ||
        !(p->jobs = calloc(n ? n : 1, sizeof(*p->jobs)))) {
        fail_note(&p->failed, p->err, sizeof(p->err), NULL, NULL);
        return;
    }
    p->buried = pullq_num_of(conn_at(r, 0));
    for (size_t i = 0; i < n; i++) {
        size_t at = 1 + i * POP_FIELDS;
        struct pullq_popped *o = &p->jobs[p->n];
        const char *rc = conn_str(conn_at(r, at + 3), NULL);

        o->id = pullq_dup_reply(conn_at(r, at), NULL);
        o->rec = pullq_dup_reply(conn_at(r, at + 1), &o->rec_len);
        o->attempt = pullq_num_of(conn_at(r, at + 2));
        snprintf(o->receipt, sizeof(o->receipt), "%s", rc ? rc : "");
        o->until_ms = pullq_num_of(conn_at(r, at + 4));
        o->due_ms = pullq_num_of(conn_at(r, at + 5));
        p->n++;
        if (!o->id || !o->rec) {   /* reserved all the same: it comes back after its ttr */
            fail_note(&p->failed, p->err, sizeof(p->err), NULL, NULL);
            return;
        }
    }
}

void pullq_pop_release(struct pullq_pop *pop)
{
    for (size_t i = 0; i < pop->n; i++) {
        free(pop->jobs[i].id);
        free(pop->jobs[i].rec);
    }
    free(pop->jobs);
    pop->jobs = NULL;
    pop->n = 0;
}

int pullq_pop_many(struct pullq *q, size_t n, struct pullq_pop *pops, int64_t now_ms,
                   int64_t default_ttr_ms, int64_t retention_ms)
{
    struct build b = { .items = pops, .now_ms = now_ms, .a = default_ttr_ms, .b = retention_ms };
    int rc = 0;

    RESET(pops, n);
    for (size_t i = 0; i < n; i++) {
        pops[i].jobs = NULL;
        pops[i].n = 0;
        pops[i].unconfirmed = 0;
        pops[i].buried = 0;
    }
    run(q, &b, n, build_pop, on_pop, CONN_WAIT_END);
    ANY_FAILED(pops, n, rc);
    return rc;
}

static const char *const verb_word[] = {
    [PULLQ_FINISH] = "finish", [PULLQ_RELEASE] = "release", [PULLQ_TOUCH] = "touch",
    [PULLQ_BURY] = "bury", [PULLQ_CANCEL] = "cancel",
};

static void build_op(void *ctx, size_t j, struct conn_call *call)
{
    struct build *b = ctx;
    struct pullq_op *o = &((struct pullq_op *)b->items)[j];

    pullq_topic_key(b->q, o->topic, "ready", NULL, b->k[0], KEY_MAX);
    pullq_topic_key(b->q, o->topic, "reserved", NULL, b->k[1], KEY_MAX);
    pullq_topic_key(b->q, o->topic, "dead", NULL, b->k[2], KEY_MAX);
    pullq_topic_key(b->q, o->topic, "j:", o->id, b->k[3], KEY_MAX);
    for (int i = 0; i < 4; i++)
        arg(b, i, b->k[i]);
    arg(b, 4, verb_word[o->verb]);
    arg(b, 5, o->id);
    arg(b, 6, o->receipt ? o->receipt : "");
    arg_num(b, 7, 0, o->after_ms);
    arg_num(b, 8, 1, b->now_ms);
    arg_num(b, 9, 2, b->a);
    arg(b, 10, o->reason ? o->reason : "");
    arg_num(b, 11, 3, b->q->cfg->pull.ttr_s * 1000);
    pullq_channel(b->q, b->k[4], KEY_MAX);
    arg(b, 12, b->k[4]);
    arg(b, 13, o->topic);
    *call = (struct conn_call){ .script = S_OP, .nkeys = 4, .argc = 14, .argv = b->argv,
                               .lens = b->lens };
}

static void on_op(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct pullq_op *o = &((struct pullq_op *)((struct build *)ctx)->items)[j];
    const char *st;
    int64_t v;

    if (!answered(&o->failed, o->err, sizeof(o->err), r, fail))
        return;
    if (conn_type(r) != CONN_ARR || conn_count(r) < 2) {
        fail_note(&o->failed, o->err, sizeof(o->err), NULL, NULL);
        return;
    }
    v = pullq_num_of(conn_at(r, 0));
    st = conn_str(conn_at(r, 1), NULL);
    o->state = st && st[0] ? st[0] : '-';
    o->res = v >= 1 ? PULLQ_DONE : v == 0 ? PULLQ_NO_JOB : v == -1 ? PULLQ_STALE : PULLQ_NOT_LIVE;
    o->repeated = v == 2;
    if (conn_count(r) > 2)
        o->until_ms = pullq_num_of(conn_at(r, 2));
}

int pullq_run_many(struct pullq *q, size_t n, struct pullq_op *ops, int64_t now_ms,
                   int64_t retention_ms)
{
    struct build b = { .items = ops, .now_ms = now_ms, .a = retention_ms };
    int rc = 0;

    RESET(ops, n);
    for (size_t i = 0; i < n; i++) {
        ops[i].until_ms = -1;
        ops[i].repeated = 0;
    }
    run(q, &b, n, build_op, on_op, CONN_WAIT_END);
    ANY_FAILED(ops, n, rc);
    return rc;
}

static void build_sweep(void *ctx, size_t j, struct conn_call *call)
{
    struct build *b = ctx;
    struct pullq_sweep *sw = &((struct pullq_sweep *)b->items)[j];

    pullq_topic_key(b->q, sw->topic, "ready", NULL, b->k[0], KEY_MAX);
    pullq_topic_key(b->q, sw->topic, "reserved", NULL, b->k[1], KEY_MAX);
    pullq_topic_key(b->q, sw->topic, "dead", NULL, b->k[2], KEY_MAX);
    pullq_topic_key(b->q, sw->topic, "paused", NULL, b->k[3], KEY_MAX);
    pullq_topic_key(b->q, sw->topic, "later", NULL, b->k[4], KEY_MAX);
    pullq_topic_key(b->q, sw->topic, "j:", NULL, b->k[5], KEY_MAX);
    for (int i = 0; i < 5; i++)
        arg(b, i, b->k[i]);
    arg_num(b, 5, 0, b->now_ms);
    arg_num(b, 6, 1, b->a);
    arg_num(b, 7, 2, SWEEP_LIMIT);
    arg(b, 8, b->k[5]);
    arg_num(b, 9, 3, b->b);
    pullq_channel(b->q, b->chan, KEY_MAX);
    arg(b, 10, b->chan);
    arg(b, 11, sw->topic);
    arg_num(b, 12, 4, PULLQ_LATER_FORGET_MS);
    *call = (struct conn_call){ .script = S_SWEEP, .nkeys = 5, .argc = 13, .argv = b->argv,
                               .lens = b->lens };
}

#define DEAD_FIELDS 4   /* id, record, why, attempt */
#define SWEEP_COUNTS 6  /* back, ready, reserved, buried, next, paused */

static void on_sweep(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct pullq_sweep *sw = &((struct pullq_sweep *)((struct build *)ctx)->items)[j];
    size_t n;

    if (!answered(&sw->failed, sw->err, sizeof(sw->err), r, fail))
        return;
    if (conn_type(r) != CONN_ARR || conn_count(r) < SWEEP_COUNTS) {
        fail_note(&sw->failed, sw->err, sizeof(sw->err), NULL, NULL);
        return;
    }
    sw->back = pullq_num_of(conn_at(r, 0));
    sw->ready = pullq_num_of(conn_at(r, 1));
    sw->reserved = pullq_num_of(conn_at(r, 2));
    sw->buried = pullq_num_of(conn_at(r, 3));
    sw->next_ms = pullq_num_of(conn_at(r, 4));
    sw->keep = pullq_num_of(conn_at(r, 5)) == 1;
    n = (conn_count(r) - SWEEP_COUNTS) / DEAD_FIELDS;
    if (!n || !(sw->dead = calloc(n, sizeof(*sw->dead))))
        return;   /* out of memory: handed out again after resend_ms */
    for (size_t i = 0; i < n; i++) {
        struct pullq_dead *d = &sw->dead[sw->ndead++];
        size_t at = SWEEP_COUNTS + i * DEAD_FIELDS;
        d->id = pullq_dup_reply(conn_at(r, at), NULL);
        d->rec = pullq_dup_reply(conn_at(r, at + 1), &d->rec_len);
        d->why = pullq_dup_reply(conn_at(r, at + 2), NULL);
        d->attempt = pullq_num_of(conn_at(r, at + 3));
    }
}

void pullq_sweep_release(struct pullq_sweep *sw)
{
    for (size_t i = 0; i < sw->ndead; i++) {
        free(sw->dead[i].id);
        free(sw->dead[i].rec);
        free(sw->dead[i].why);
    }
    free(sw->dead);
    sw->dead = NULL;
    sw->ndead = 0;
}

int pullq_sweep_many(struct pullq *q, size_t n, struct pullq_sweep *sweeps, int64_t now_ms,
                     int64_t max_attempts, int64_t resend_ms)
{
    struct build b = { .items = sweeps, .now_ms = now_ms, .a = max_attempts, .b = resend_ms };
    int rc = 0;

    RESET(sweeps, n);
    for (size_t i = 0; i < n; i++) {
        sweeps[i].back = sweeps[i].ready = sweeps[i].reserved = sweeps[i].buried = 0;
        sweeps[i].next_ms = -1;
        sweeps[i].keep = 0;
        sweeps[i].dead = NULL;
        sweeps[i].ndead = 0;
    }
    run(q, &b, n, build_sweep, on_sweep, CONN_WAIT_END);
    ANY_FAILED(sweeps, n, rc);
    return rc;
}

int pullq_dead_sent(struct pullq *q, const char *topic, const char *id, int64_t retention_ms,
                    char *err, size_t errlen)
{
    char dead[KEY_MAX], job[KEY_MAX], ttl[24];
    const char *argv[4] = { dead, job, id, ttl };
    struct conn_call call = { .script = S_SENT, .nkeys = 2, .argc = 4, .argv = argv };
    struct conn_reply *r;

    pullq_topic_key(q, topic, "dead", NULL, dead, sizeof(dead));
    pullq_topic_key(q, topic, "j:", id, job, sizeof(job));
    snprintf(ttl, sizeof(ttl), "%lld", (long long)retention_ms);
    if (!(r = conn_call(q->db, &call, CONN_NO_WAIT, err, errlen)))
        return -1;
    conn_reply_free(r);
    return 0;
}

struct counts {
    struct pullq *q;
    const char *const *topics;
    int64_t *counts, *waits;
    char key[2][KEY_MAX];
    const char *argv[2];
};

static void build_count(void *ctx, size_t j, struct conn_call *call)
{
    struct counts *c = ctx;

    pullq_topic_key(c->q, c->topics[j], "ready", NULL, c->key[0], sizeof(c->key[0]));
    pullq_topic_key(c->q, c->topics[j], "paused", NULL, c->key[1], sizeof(c->key[1]));
    c->argv[0] = c->key[0];
    c->argv[1] = c->key[1];
    *call = (struct conn_call){ .script = S_PEEK, .nkeys = 2, .argc = 2, .argv = c->argv };
}

static void on_count(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct counts *c = ctx;

    if (fail || conn_type(r) != CONN_ARR || conn_count(r) != 2)
        return;
    c->counts[j] = pullq_num_of(conn_at(r, 0));
    c->waits[j] = pullq_num_of(conn_at(r, 1));
}

void pullq_ready_now(struct pullq *q, size_t n, const char *const *topics, int64_t *counts,
                     int64_t *waits)
{
    struct counts c = { .q = q, .topics = topics, .counts = counts, .waits = waits };
    char err[256];

    for (size_t i = 0; i < n; i++)
        counts[i] = waits[i] = -1;
    if (n)
        (void)conn_pipeline(q->db, n, build_count, on_count, &c, CONN_NO_WAIT, err, sizeof(err));
}

static void build_look(void *ctx, size_t j, struct conn_call *call)
{
    struct build *b = ctx;
    struct pullq_look *l = &((struct pullq_look *)b->items)[j];

    pullq_topic_key(b->q, l->topic, "j:", l->id, b->k[0], KEY_MAX);
    arg(b, 0, "HMGET");
    arg(b, 1, b->k[0]);
    arg(b, 2, "st");
    arg(b, 3, "att");
    arg(b, 4, "until");
    *call = (struct conn_call){ .script = -1, .argc = 5, .argv = b->argv, .lens = b->lens };
}

static void on_look(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct pullq_look *l = &((struct pullq_look *)((struct build *)ctx)->items)[j];
    const char *st;

    if (!answered(&l->failed, l->err, sizeof(l->err), r, fail))
        return;
    if (conn_type(r) != CONN_ARR || conn_count(r) != 3) {
        fail_note(&l->failed, l->err, sizeof(l->err), NULL, NULL);
        return;
    }
    st = conn_str(conn_at(r, 0), NULL);
    l->found = st && st[0];
    l->state = l->found ? st[0] : '-';
    l->attempt = pullq_num_of(conn_at(r, 1));
    l->until_ms = conn_type(conn_at(r, 2)) == CONN_NIL ? -1 : pullq_num_of(conn_at(r, 2));
}

int pullq_look_many(struct pullq *q, size_t n, struct pullq_look *looks)
{
    struct build b = { .items = looks };
    int rc = 0;

    RESET(looks, n);
    for (size_t i = 0; i < n; i++)
        looks[i].found = 0;
    run(q, &b, n, build_look, on_look, CONN_NO_WAIT);
    ANY_FAILED(looks, n, rc);
    return rc;
}

const char *pullq_state_name(char state)
{
    switch (state) {
    case 'r': return "ready";
    case 'R': return "reserved";
    case 'f': return "finished";
    case 'b': return "dead-letter";
    case 'd': return "dead";
    case 'c': return "removed";
    default: return "unknown";
    }
}

int pullq_receipt_topic(const char *receipt, const char **topic, size_t *len)
{
    const char *colon = strchr(receipt, ':');

    if (!colon || !colon[1])
        return -1;
    *topic = colon + 1;
    *len = strlen(colon + 1);
    return 0;
}

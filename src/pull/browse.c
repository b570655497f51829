/* browse: what an operator reads and changes of one pull topic: its figures (and the jobs added
 * for later that they count), a page of its jobs, pause and resume. Part of pullq; the shared inside is include/pull/pullq_link.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pull/pullq.h"
#include "pull/pullq_link.h"

struct figuring {
    struct pullq *q;
    const char *const *topics;
    struct pull_figures *out;
    char k[5][KEY_MAX];
    const char *argv[5];
};

static const char *const topic_sets[] = { "ready", "reserved", "dead", "paused", "later" };

static void build_figures(void *ctx, size_t j, struct conn_call *call)
{
    struct figuring *c = ctx;

    for (int i = 0; i < 5; i++) {
        pullq_topic_key(c->q, c->topics[j], topic_sets[i], NULL, c->k[i], KEY_MAX);
        c->argv[i] = c->k[i];
    }
    *call = (struct conn_call){ .script = S_FIGURES, .nkeys = 5, .argc = 5, .argv = c->argv };
}

#define FIGURES 7   /* ready, delayed, reserved, buried, oldest, paused, now */

static void on_figures(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct pull_figures *f = &((struct figuring *)ctx)->out[j];
    int64_t v[FIGURES];

    if (fail || conn_type(r) != CONN_ARR || conn_count(r) != FIGURES)
        return;   /* ready stays -1 */
    for (int i = 0; i < FIGURES; i++)
        v[i] = pullq_num_of(conn_at(r, (size_t)i));
    *f = (struct pull_figures){ .ready = v[0], .delayed = v[1], .reserved = v[2], .buried = v[3],
                                .oldest_age_ms = v[4] < 0 ? -1 : v[6] - v[4], .paused = v[5] == 1 };
}

void pullq_figures(struct pullq *q, size_t n, const char *const *topics, struct pull_figures *out)
{
    struct figuring c = { .q = q, .topics = topics, .out = out };
    char err[256];

    for (size_t i = 0; i < n; i++)
        out[i] = (struct pull_figures){ .ready = -1, .oldest_age_ms = -1 };
    if (n)
        (void)conn_pipeline(q->db, n, build_figures, on_figures, &c, CONN_NO_WAIT, err, sizeof(err));
}

int pullq_pause(struct pullq *q, const char *topic, int paused, int *changed, char *err,
                size_t errlen)
{
    char key[KEY_MAX], channel[KEY_MAX];
    const char *argv[4] = { key, paused ? "1" : "0", channel, topic };
    struct conn_call call = { .script = S_PAUSE, .nkeys = 1, .argc = 4, .argv = argv };
    struct conn_reply *r;

    if (pullq_note_topic(q, topic, err, errlen) < 0)
        return -1;
    pullq_topic_key(q, topic, "paused", NULL, key, sizeof(key));
    pullq_channel(q, channel, sizeof(channel));
    if (!(r = conn_call(q->db, &call, CONN_WAIT_END, err, errlen)))
        return -1;
    *changed = conn_type(r) == CONN_INT && conn_int(r) == 1;
    conn_reply_free(r);
    return 0;
}

#define LISTED 7   /* id, score, state, attempt, due, body preview, body bytes */

void pullq_list_release(struct pullq_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->jobs[i].id);
        free(l->jobs[i].body);
    }
    free(l->jobs);
    l->jobs = NULL;
    l->n = 0;
}

int pullq_list(struct pullq *q, struct pullq_list *l)
{
    char zset[KEY_MAX], prefix[KEY_MAX], limit[24], after[24], cut[24];
    const char *argv[7] = { zset, l->state, limit, prefix, after, l->after_id ? l->after_id : "",
                            cut };
    struct conn_call call = { .script = S_LIST, .nkeys = 1, .argc = 7, .argv = argv };
    struct conn_reply *r;
    size_t n;

    l->jobs = NULL;
    l->n = 0;
    l->failed = 0;
    pullq_topic_key(q, l->topic, strcmp(l->state, "reserved") ? "ready" : "reserved", NULL, zset,
                    sizeof(zset));
    pullq_topic_key(q, l->topic, "j:", NULL, prefix, sizeof(prefix));
    snprintf(limit, sizeof(limit), "%d", l->limit);
    snprintf(after, sizeof(after), "%lld", (long long)l->after_ms);
    if (!l->after_id)
        after[0] = '\0';
    snprintf(cut, sizeof(cut), "%d", PULLQ_PREVIEW);
    if (!(r = conn_call(q->db, &call, CONN_NO_WAIT, l->err, sizeof(l->err)))) {
        l->failed = 1;
        return -1;
    }
    n = conn_type(r) == CONN_ARR ? conn_count(r) / LISTED : 0;
    if (n && !(l->jobs = calloc(n, sizeof(*l->jobs)))) {
        snprintf(l->err, sizeof(l->err), "out of memory");
        l->failed = 1;
        conn_reply_free(r);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        struct pull_listed *j = &l->jobs[l->n];
        size_t at = i * LISTED;
        const char *st = conn_str(conn_at(r, at + 2), NULL);
        j->id = pullq_dup_reply(conn_at(r, at), NULL);
        j->body = pullq_dup_reply(conn_at(r, at + 5), &j->body_len);
        if (!j->id || !j->body) {
            free(j->id);
            free(j->body);
            continue;
        }
        j->at_ms = pullq_num_of(conn_at(r, at + 1));
        j->state = pullq_state_name(st && st[0] ? st[0] : '?');
        j->attempt = pullq_num_of(conn_at(r, at + 3));
        j->due_ms = pullq_num_of(conn_at(r, at + 4));
        j->body_size = pullq_num_of(conn_at(r, at + 6));
        l->n++;
    }
    conn_reply_free(r);
    return 0;
}

struct noting {
    struct pullq *q;
    const struct pullq_later *later;
    char key[KEY_MAX], due[24];
    const char *argv[4];
    char *err;
    size_t errlen;
};

static void build_later(void *ctx, size_t j, struct conn_call *call)
{
    struct noting *c = ctx;

    pullq_topic_key(c->q, c->later[j].topic, "later", NULL, c->key, sizeof(c->key));
    snprintf(c->due, sizeof(c->due), "%lld", (long long)c->later[j].due_ms);
    c->argv[0] = "ZADD";
    c->argv[1] = c->key;
    c->argv[2] = c->due;
    c->argv[3] = c->later[j].id;
    *call = (struct conn_call){ .script = -1, .nkeys = 1, .argc = 4, .argv = c->argv };
}

static void on_later(void *ctx, size_t j, const struct conn_reply *r, const struct conn_fail *fail)
{
    struct noting *c = ctx;

    (void)j;
    if ((fail || conn_type(r) == CONN_ERR) && !c->err[0])
        snprintf(c->err, c->errlen, "redis: %s", fail ? fail->text : conn_str(r, NULL));
}

int pullq_note_later(struct pullq *q, size_t n, const struct pullq_later *later, char *err,
                     size_t errlen)
{
    struct noting c = { .q = q, .later = later, .err = err, .errlen = errlen };

    err[0] = '\0';
    for (size_t i = 0; i < n; i++)
        if (pullq_note_topic(q, later[i].topic, err, errlen) < 0)
            return -1;
    if (n)
        (void)conn_pipeline(q->db, n, build_later, on_later, &c, CONN_NO_WAIT, err, errlen);
    return err[0] ? -1 : 0;
}

/* registry: the registry of pull topics (a sorted set, scored with when a topic was last put
 * there, read page by page; empty topics leave it), the channel that announces jobs made ready,
 * the turn of sweeping every topic, and the counts. Part of pullq; the shared inside is
 * include/pull/pullq_link.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/clock.h"
#include "pull/pullq.h"
#include "pull/pullq_link.h"

void pullq_channel(const struct pullq *q, char *out, size_t outlen)
{
    snprintf(out, outlen, "%spull:ready", q->cfg->redis.prefix);
}

int pullq_listen(struct pullq *q, char *err, size_t errlen)
{
    char channel[KEY_MAX];

    pullq_channel(q, channel, sizeof(channel));
    return conn_subscribe(q->db, channel, err, errlen);
}

int pullq_heard(struct pullq *q, int timeout_ms, char *topic, size_t len, char *err,
                size_t errlen)
{
    return conn_message(q->db, timeout_ms, topic, len, err, errlen);
}

/* The registry of pull topics: a sorted set, each topic scored with when it was last put
 * there. The set of an older delayqd, which only grew, is read once and moved into it. */
static void topics_key(const struct pullq *q, char *out, size_t outlen)
{
    snprintf(out, outlen, "%spull:registry", q->cfg->redis.prefix);
}

static void old_topics_key(const struct pullq *q, char *out, size_t outlen)
{
    snprintf(out, outlen, "%spull:topics", q->cfg->redis.prefix);
}

/* Puts topic in the registry (again when this connection put it there over
 * PULLQ_REGISTER_MS ago), its write confirmed as a ready job's is. 0, or -1 with err. */
int pullq_note_topic(struct pullq *q, const char *topic, char *err, size_t errlen)
{
    char key[KEY_MAX], at[24];
    const char *argv[4] = { "ZADD", key, at, topic };
    struct conn_call call = { .script = -1, .argc = 4, .argv = argv };
    int64_t now = clock_mono_ms();
    struct conn_reply *r;
    struct noted *more, *n = NULL;

    for (size_t i = 0; i < q->nnoted && !n; i++)
        if (strcmp(q->noted[i].topic, topic) == 0)
            n = &q->noted[i];
    if (n && now - n->at_ms < PULLQ_REGISTER_MS)
        return 0;
    topics_key(q, key, sizeof(key));
    snprintf(at, sizeof(at), "%lld", (long long)clock_now_ms());
    if (!(r = conn_call(q->db, &call, CONN_WAIT_END, err, errlen)))
        return -1;
    conn_reply_free(r);
    if (conn_unconfirmed(q->db)) {
        snprintf(err, errlen, "%s", conn_unconfirmed(q->db));
        return -1;
    }
    if (n) {
        n->at_ms = now;
    } else if ((more = realloc(q->noted, (q->nnoted + 1) * sizeof(*more)))) {
        q->noted = more;
        if ((q->noted[q->nnoted].topic = strdup(topic)))
            q->noted[q->nnoted++].at_ms = now;
    }
    return 0;
}

/* Moves the topics of an older delayqd's registry (a set) into the sorted set, once. */
static void migrate_registry(struct pullq *q)
{
    char old[KEY_MAX], key[KEY_MAX], at[24], err[256];
    struct conn_reply *r, *z;

    if (q->migrated)
        return;
    old_topics_key(q, old, sizeof(old));
    topics_key(q, key, sizeof(key));
    snprintf(at, sizeof(at), "%lld", (long long)clock_now_ms());
    if (!(r = conn_command(q->db, err, sizeof(err), "SMEMBERS", old, NULL)))
        return;
    for (size_t i = 0; i < conn_count(r); i++) {
        const char *t = conn_str(conn_at(r, i), NULL);
        if (!t || !(z = conn_command(q->db, err, sizeof(err), "ZADD", key, "NX", at, t, NULL))) {
            conn_reply_free(r);
            return;   /* tried again at the next sweep */
        }
        conn_reply_free(z);
    }
    if (conn_count(r) && (z = conn_command(q->db, err, sizeof(err), "DEL", old, NULL)))
        conn_reply_free(z);
    q->migrated = conn_count(r) == 0 || z != NULL;
    conn_reply_free(r);
}

int pullq_topics(struct pullq *q, uint64_t *cursor, char ***topics, int64_t **scores, size_t *n,
                 char *err, size_t errlen)
{
    char key[KEY_MAX], from[24];
    struct conn_reply *r;
    const struct conn_reply *page;
    size_t count;

    *topics = NULL;
    *scores = NULL;
    *n = 0;
    if (*cursor == 0)
        migrate_registry(q);
    topics_key(q, key, sizeof(key));
    snprintf(from, sizeof(from), "%llu", (unsigned long long)*cursor);
    if (!(r = conn_command(q->db, err, errlen, "ZSCAN", key, from, "COUNT", PULLQ_PAGE_TEXT, NULL)))
        return -1;
    if (conn_type(r) != CONN_ARR || conn_count(r) != 2 ||
        conn_type(page = conn_at(r, 1)) != CONN_ARR) {
        snprintf(err, errlen, "ZSCAN answered something else than a page");
        conn_reply_free(r);
        return -1;
    }
    *cursor = strtoull(conn_str(conn_at(r, 0), NULL) ? conn_str(conn_at(r, 0), NULL) : "0",
                       NULL, 10);
    count = conn_count(page) / 2;   /* topic, score */
    if (count && (!(*topics = calloc(count, sizeof(**topics))) ||
                  !(*scores = calloc(count, sizeof(**scores))))) {
        free(*topics);
        *topics = NULL;
        conn_reply_free(r);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < count; i++)
        if (((*topics)[*n] = pullq_dup_reply(conn_at(page, 2 * i), NULL)))
            (*scores)[(*n)++] = pullq_num_of(conn_at(page, 2 * i + 1));
    conn_reply_free(r);
    return 0;
}

int pullq_take_turn(struct pullq *q, int64_t ms)
{
    char key[KEY_MAX], px[24], err[256];
    struct conn_reply *r;
    int mine;

    snprintf(key, sizeof(key), "%s{ctl}:pull:sweeper", q->cfg->redis.prefix);   /* a lease */
    snprintf(px, sizeof(px), "%lld", (long long)ms);
    if (!(r = conn_command(q->db, err, sizeof(err), "SET", key, "1", "NX", "PX", px, NULL)))
        return 0;
    mine = conn_type(r) != CONN_NIL && conn_type(r) != CONN_ERR;
    conn_reply_free(r);
    return mine;
}

#define SIZES_MAX 256   /* topics counted in one pipeline */

int pullq_counts(struct pullq *q, struct pullq_count **out, size_t *n, char *err, size_t errlen)
{
    struct pullq_count *counts = NULL, *c;
    struct pull_figures f[SIZES_MAX];
    int64_t *scores;
    size_t ncounts = 0, cap = 0, k;
    uint64_t cursor = 0;
    char **topics;
    int rc = 0;

    do {
        if (pullq_topics(q, &cursor, &topics, &scores, &k, err, errlen) < 0) {
            rc = -1;
            break;
        }
        for (size_t at = 0; at < k; at += SIZES_MAX) {
            size_t m = k - at < SIZES_MAX ? k - at : SIZES_MAX;
            pullq_figures(q, m, (const char *const *)(topics + at), f);
            if (ncounts + m > cap) {
                cap = 2 * (ncounts + m);
                if (!(c = realloc(counts, cap * sizeof(*c)))) {
                    snprintf(err, errlen, "out of memory");
                    rc = -1;
                    break;
                }
                counts = c;
            }
            for (size_t i = 0; i < m; i++) {
                if (f[i].ready < 0)
                    continue;
                c = &counts[ncounts++];
                snprintf(c->topic, sizeof(c->topic), "%s", topics[at + i]);
                c->f = f[i];
            }
        }
        for (size_t i = 0; i < k; i++)
            free(topics[i]);
        free(topics);
        free(scores);
    } while (rc == 0 && cursor != 0);
    if (rc < 0) {
        free(counts);
        counts = NULL;
        ncounts = 0;
    }
    *out = counts;
    *n = ncounts;
    return rc;
}

int pullq_forget(struct pullq *q, size_t n, const char *const *topics, int64_t before_ms,
                 char *err, size_t errlen)
{
    char key[KEY_MAX], before[24];
    const char **argv = calloc(n + 2, sizeof(*argv));
    struct conn_call call = { .script = S_FORGET, .nkeys = 1, .argc = (int)n + 2, .argv = argv };
    struct conn_reply *r;

    if (!argv) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    topics_key(q, key, sizeof(key));
    snprintf(before, sizeof(before), "%lld", (long long)before_ms);
    argv[0] = key;
    argv[1] = before;
    for (size_t i = 0; i < n; i++)
        argv[i + 2] = topics[i];
    r = n ? conn_call(q->db, &call, CONN_NO_WAIT, err, errlen) : NULL;
    free(argv);
    if (n && !r)
        return -1;
    conn_reply_free(r);
    return 0;
}


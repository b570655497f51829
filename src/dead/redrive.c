/* redrive: adds dead letters again as jobs, at most once per letter. The contract is in
 * include/dead/redrive.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/api.h"
#include "core/envelope.h"
#include "core/metrics.h"
#include "dead/deadstore.h"
#include "core/apidata.h"
#include "core/calljson.h"
#include "dead/redrive.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "redis/store.h"

#define LOG_MODULE "dead"
#define REDRIVE_CHUNK 1000        /* letters whose records and marks one Redis call takes */

struct redrive {
    struct intake *jobs;
    struct api_limits limits;     /* an add's, for a job made from a letter */
    struct deadstore *ds;         /* the marks: which letters were redriven, as which job */
    struct store *st;             /* the job records */
};

struct redrive *redrive_new(const struct config *cfg, struct intake *jobs)
{
    struct redrive *r = calloc(1, sizeof(*r));

    if (!r)
        return NULL;
    r->jobs = jobs;
    r->limits = (struct api_limits){ .levels = &cfg->delay.levels, .dlq_topic = cfg->delay.dlq_topic,
                                     .max_delay_ms = cfg->job.max_delay_s * 1000,
                                     .endpoints = cfg->callbacks.endpoints,
                                     .nendpoints = cfg->callbacks.nendpoints,
                                     .no_urls = cfg->callbacks.raw_urls ? NULL
                                                : "callbacks.raw_urls is false" };
    if (!(r->ds = deadstore_new(cfg)) || !(r->st = store_new(cfg))) {
        redrive_free(r);
        return NULL;
    }
    return r;
}

void redrive_free(struct redrive *r)
{
    if (!r)
        return;
    deadstore_free(r->ds);
    store_free(r->st);
    free(r);
}

/* 1 when s (len bytes) is UTF-8 text. */
static int is_text(const char *s, size_t len)
{
    json_t *j = json_stringn(s, len);

    json_decref(j);
    return j != NULL;
}

/* The job id a redrive of l adds: its dq-id, or dead-<partition>-<offset>. */
static void job_id_of(const struct dead_letter *l, char out[JOB_ID_MAX + 1])
{
    size_t len;
    const char *id = dead_letter_header(l, HDR_ID, &len);
    char why[128];

    if (id && job_id_valid(id, len, why, sizeof(why)) == 0)
        snprintf(out, JOB_ID_MAX + 1, "%.*s", (int)len, id);
    else
        snprintf(out, JOB_ID_MAX + 1, "dead-%d-%lld", (int)l->partition, (long long)l->offset);
}

void redrive_marked(struct redrive *r, const struct dead_letter *ls, size_t n, int *marked)
{
    int32_t *p = calloc(n ? n : 1, sizeof(*p));
    int64_t *o = calloc(n ? n : 1, sizeof(*o));
    char err[256];

    memset(marked, 0, n * sizeof(*marked));
    if (p && o) {
        for (size_t i = 0; i < n; i++)
            p[i] = ls[i].partition, o[i] = ls[i].offset;
        if (deadstore_marked(r->ds, n, p, o, marked, err, sizeof(err)) < 0)
            log_warn("reading which dead letters were redriven failed: %s", err);
    }
    free(p);
    free(o);
}

/* The adds of one redrive, answered from the intake's thread. */
struct gather {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t left;
};

struct letter_add {
    struct gather *g;
    int32_t partition;
    int64_t offset;
    char job_id[JOB_ID_MAX + 1];
    int added;                  /* the add was answered done (or the job was there) */
    char why[256];              /* else its answer's message */
};

static void redrive_added(void *opaque, const struct answer *ans)
{
    struct letter_add *a = opaque;

    pthread_mutex_lock(&a->g->mu);
    a->added = ans->is == ANSWER_DONE || ans->is == ANSWER_ALREADY;
    snprintf(a->why, sizeof(a->why), "%s", ans->message);
    if (--a->g->left == 0)
        pthread_cond_signal(&a->g->cv);
    pthread_mutex_unlock(&a->g->mu);
}

void redrive_skip(json_t *list, int32_t partition, int64_t offset, const char *why)
{
    json_t *o = json_object();

    json_object_set_new(o, "partition", json_integer(partition));
    json_object_set_new(o, "offset", json_integer(offset));
    json_object_set_new(o, "why", json_string(why));
    json_array_append_new(list, o);
}

/* The job a redrive adds, due at due_ms, from its record when rd (NULL: the letter names no
 * job) found one and it failed. 0 (*found 0: no record to start from), or -1 with why it
 * cannot be redriven in why. */
static int job_of_record(const struct store_read *rd, const char *id, int64_t due_ms,
                         struct job *out, int *found, char *why, size_t whylen)
{
    struct job_record rec;
    char err[256];

    *found = 0;
    memset(out, 0, sizeof(*out));
    if (!rd || (!rd->failed && !rd->found))
        return 0;
    if (rd->failed) {
        snprintf(why, whylen, "reading the record of job %s failed: %s", id, rd->err);
        return -1;
    }
    if (job_record_read(id, rd->data, rd->len, out, &rec, err, sizeof(err)) < 0) {
        snprintf(why, whylen, "the record of job %s does not read: %s", id, err);
        return -1;
    }
    if (rec.state != JOB_FAILED) {
        snprintf(why, whylen, "job %s is %s", id, job_state_name(rec.state));
        return -1;
    }
    *found = 1;
    out->created_ms = clock_now_ms();
    out->due_ms = due_ms;
    out->delay_ms = due_ms - out->created_ms > 0 ? due_ms - out->created_ms : 0;
    return 0;
}

/* l's headers that are not control headers and hold text into out (a job's headers). 0, or -1
 * out of memory. */
static int letter_headers(const struct dead_letter *l, struct job *out)
{
    if (!(out->headers = calloc(l->nhdrs + 1, sizeof(*out->headers))))
        return -1;
    for (size_t i = 0; i < l->nhdrs; i++) {
        const struct dead_header *x = &l->hdrs[i];
        struct job_header *h = &out->headers[out->nheaders];
        if (strncmp(x->name, HDR_PREFIX, strlen(HDR_PREFIX)) == 0 || !x->value ||
            !is_text(x->value, x->len) || memchr(x->value, '\0', x->len))
            continue;
        h->name = strdup(x->name);
        h->value = strndup(x->value, x->len);
        out->nheaders++;
        if (!h->name || !h->value)
            return -1;
    }
    return 0;
}

/* The job a redrive of l adds from the letter itself: its dq-topic or dq-callback, dq-deliver
 * and dq-ttr-ms, its body (bytes, whatever they are), key and headers, due at due_ms, checked as
 * an add is (api_check_job). 0, or -1 with why in why. */
static int job_of_letter(struct redrive *r, const struct dead_letter *l, const char *id,
                         int64_t due_ms, struct job *out, char *why, size_t whylen)
{
    const char *topic, *callback, *deliver, *ttr;
    size_t tlen = 0, clen = 0, dlen = 0, ttrlen = 0;
    int64_t now = clock_now_ms();
    struct api_error e;

    memset(out, 0, sizeof(*out));
    topic = dead_letter_header(l, HDR_TOPIC, &tlen);
    callback = dead_letter_header(l, HDR_CALLBACK, &clen);
    deliver = dead_letter_header(l, HDR_DELIVER, &dlen);
    ttr = dead_letter_header(l, HDR_TTR, &ttrlen);
    if (dead_letter_header(l, "dq-body", NULL)) {
        snprintf(why, whylen, "its body was left out of the dead letter and its record is gone");
        return -1;
    }
    if (!topic && !callback) {
        snprintf(why, whylen, "it names no topic (dq-topic) and no callback to deliver to");
        return -1;
    }
    snprintf(out->id, sizeof(out->id), "%s", id);
    if (callback && calljson_parse(callback, clen, &r->limits, &out->callback, &e) < 0) {
        snprintf(why, whylen, "its dq-callback: %s", e.message);
        return -1;
    }
    if (deliver && job_deliver_of(deliver, dlen, &out->deliver) < 0) {
        snprintf(why, whylen, "its dq-deliver is neither pull nor kafka");
        return -1;
    }
    out->ttr_ms = ttr ? strtoll(ttr, NULL, 10) : 0;   /* JOB_TTR_ONCE_MS: a once job */
    out->topic = topic ? strndup(topic, tlen) : strdup("");
    out->body = malloc(l->value_len + 1);
    out->body_len = l->value_len;
    if (l->key && is_text(l->key, l->key_len) && !memchr(l->key, '\0', l->key_len) &&
        (strlen(id) != l->key_len || memcmp(id, l->key, l->key_len) != 0))
        out->key = strndup(l->key, l->key_len);
    if (!out->topic || !out->body || letter_headers(l, out) < 0) {
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    if (l->value_len)
        memcpy(out->body, l->value, l->value_len);
    out->body[l->value_len] = '\0';
    out->created_ms = now;
    out->due_ms = due_ms > now ? due_ms : now;   /* a time in the past is due now */
    out->delay_ms = out->due_ms - now;
    if (api_check_job(out, &r->limits, now, &e) < 0) {
        snprintf(why, whylen, "as an add: %s", e.message);
        return -1;
    }
    return 0;
}

/* Redrives the n (at most REDRIVE_CHUNK) letters ls: their records read in one pipeline,
 * their marks taken in one call, their adds handed to the intake together; counts those added
 * into *done, the others into skips with why. */
static void redrive_chunk(struct redrive *r, const struct dead_letter *ls, size_t n, int64_t due_ms,
                          size_t *done, json_t *skips)
{
    struct gather g = { .left = 1 };
    struct letter_add *rs = calloc(n, sizeof(*rs));
    struct store_read *rd = calloc(n, sizeof(*rd));
    struct deadstore_mark *marks = calloc(n, sizeof(*marks));
    struct job *jobs = calloc(n, sizeof(*jobs));
    size_t *at = calloc(n, sizeof(*at));     /* the letter of each mark */
    int32_t *parts = calloc(n, sizeof(*parts));
    int64_t *offs = calloc(n, sizeof(*offs));
    size_t nread = 0, nmark = 0, nfail = 0;
    char why[512], err[256] = "";

    if (!rs || !rd || !marks || !jobs || !at || !parts || !offs) {
        for (size_t i = 0; i < n; i++)
            redrive_skip(skips, ls[i].partition, ls[i].offset, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        rs[i].partition = ls[i].partition;
        rs[i].offset = ls[i].offset;
        job_id_of(&ls[i], rs[i].job_id);
        if (dead_letter_header(&ls[i], HDR_ID, NULL))
            rd[nread++].id = rs[i].job_id;
    }
    store_read_many(r->st, nread, rd);   /* each read says whether it failed */
    for (size_t i = 0, j = 0; i < n; i++) {
        const struct store_read *own = dead_letter_header(&ls[i], HDR_ID, NULL) ? &rd[j++] : NULL;
        int found = 0;
        if (job_of_record(own, rs[i].job_id, due_ms, &jobs[i], &found, why, sizeof(why)) < 0 ||
            (!found && job_of_letter(r, &ls[i], rs[i].job_id, due_ms, &jobs[i], why,
                                     sizeof(why)) < 0)) {
            job_release(&jobs[i]);
            redrive_skip(skips, ls[i].partition, ls[i].offset, why);
            continue;
        }
        marks[nmark] = (struct deadstore_mark){ .partition = ls[i].partition,
                                                .offset = ls[i].offset, .job_id = rs[i].job_id };
        at[nmark++] = i;
    }
    if (deadstore_mark_many(r->ds, nmark, marks, err, sizeof(err)) < 0) {
        snprintf(why, sizeof(why), "marking it redriven failed: %s", err);
        for (size_t k = 0; k < nmark; k++) {
            job_release(&jobs[at[k]]);
            redrive_skip(skips, marks[k].partition, marks[k].offset, why);
        }
        goto out;
    }
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    for (size_t k = 0; k < nmark; k++) {
        struct letter_add *a = &rs[at[k]];
        if (!marks[k].taken) {
            job_release(&jobs[at[k]]);
            snprintf(why, sizeof(why), "redriven before, as job %s", marks[k].before);
            redrive_skip(skips, a->partition, a->offset, why);
            continue;
        }
        a->g = &g;
        pthread_mutex_lock(&g.mu);
        g.left++;
        pthread_mutex_unlock(&g.mu);
        jobs[at[k]].override = JOB_OVERRIDE_FAILED;
        intake_add_job(r->jobs, &jobs[at[k]], redrive_added, a);
    }
    pthread_mutex_lock(&g.mu);
    g.left--;
    while (g.left > 0)
        pthread_cond_wait(&g.cv, &g.mu);
    pthread_mutex_unlock(&g.mu);
    for (size_t i = 0; i < n; i++) {
        if (!rs[i].g)
            continue;
        if (rs[i].added) {
            (*done)++;
            metrics_inc(M_DEAD_REDRIVEN);
            log_info("dead letter partition=%d offset=%lld redriven as job=%s",
                     (int)rs[i].partition, (long long)rs[i].offset, rs[i].job_id);
        } else {
            redrive_skip(skips, rs[i].partition, rs[i].offset, rs[i].why);
            parts[nfail] = rs[i].partition;
            offs[nfail++] = rs[i].offset;
        }
    }
    if (deadstore_unmark_many(r->ds, nfail, parts, offs, err, sizeof(err)) < 0)
        log_warn("%zu dead letters whose redrive failed keep their marks (%s): they read as "
                 "redriven", nfail, err);
    pthread_cond_destroy(&g.cv);
    pthread_mutex_destroy(&g.mu);
out:
    for (size_t i = 0; rd && i < nread; i++)
        free(rd[i].data);
    free(offs);
    free(parts);
    free(at);
    free(jobs);
    free(marks);
    free(rd);
    free(rs);
}

void redrive_letters(struct redrive *r, const struct dead_letter *ls, size_t n, int64_t due_ms,
                     size_t *done, json_t *skips)
{
    for (size_t i = 0; i < n; i += REDRIVE_CHUNK)
        redrive_chunk(r, ls + i, n - i < REDRIVE_CHUNK ? n - i : REDRIVE_CHUNK, due_ms, done,
                      skips);
}

/* dead: the dead-letter routes. Parses each request on the HTTP thread and queues it to one
 * worker, which reads the letters from Kafka (deadq.h) to list them, show one, or hand them to
 * the redrive (redrive.h). The contract is in include/dead/dead.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/api.h"
#include "core/apijson.h"
#include "lib/clock.h"
#include "core/apidata.h"
#include "dead/dead.h"
#include "dead/deadq.h"
#include "dead/redrive.h"
#include "core/envelope.h"
#include "lib/workers.h"

#define PREFIX "/delay-queue/api/dead"
#define LIST_DEFAULT 50
#define LIST_MAX 500
#define SCAN_MAX 20000            /* letters one list request looks at, at most */
#define PREVIEW_BYTES 200
#define REDRIVE_LIST_MAX 1000     /* letters one redrive names, at most */
#define REDRIVE_FILTER_MAX 10000  /* letters one redrive by filter adds, at most */
#define REDRIVE_SCAN_MAX 200000
#define CLOCK_SKEW_MS 60000       /* letters of other instances may be this much out of order */
#define TASK_WAIT_MS 30000
#define QUEUE_MAX 1000

enum task_kind { T_LIST, T_ONE, T_REDRIVE };

struct filter {
    char *topic, *reason;         /* NULL: any */
    int64_t from_ms, to_ms;       /* 0: any */
};

struct task {
    enum task_kind kind;
    struct filter f;
    size_t limit;
    struct deadq_cursor from;
    int32_t partition;            /* T_ONE */
    int64_t offset;
    int32_t *parts;               /* T_REDRIVE by list: n letters */
    int64_t *offsets;
    size_t n;
    int by_filter;
    int confirmed;                /* by filter: "confirm": true (more than
                                   * dead.redrive_confirm_over letters may be redriven) */
    int64_t deliver_at_ms;        /* 0: now */
    answer_fn done;
    void *opaque;
};

struct dead {
    const struct config *cfg;
    struct workers *w;
    struct deadq *dq;
    struct redrive *r;
};

static void answer(struct task *t, int status, int code, const char *msg, void *data)
{
    answer_send(t->done, t->opaque, status, code, msg, data);
}

static void task_free(struct task *t)
{
    free(t->f.topic);
    free(t->f.reason);
    free(t->parts);
    free(t->offsets);
    free(t);
}

static json_t *header_or_null(const struct dead_letter *l, const char *name)
{
    size_t len;
    const char *v = dead_letter_header(l, name, &len);

    return v ? api_json_text(v, len, len) : json_null();
}

/* A letter as the list shows it (whole: as GET of one shows it). */
static json_t *letter_json(const struct dead_letter *l, int redriven, int whole)
{
    json_t *o = json_object();
    const char *a;
    size_t len;

    json_object_set_new(o, "partition", json_integer(l->partition));
    json_object_set_new(o, "offset", json_integer(l->offset));
    json_object_set_new(o, "job_id", header_or_null(l, HDR_ID));
    json_object_set_new(o, "topic", header_or_null(l, HDR_TOPIC));
    json_object_set_new(o, "reason", header_or_null(l, HDR_ERROR));
    json_object_set_new(o, "dead_ms", json_integer(l->ts_ms));
    a = dead_letter_header(l, HDR_CALL_ATTEMPTS, &len);
    json_object_set_new(o, "attempts", a ? json_integer(strtoll(a, NULL, 10)) : json_null());
    json_object_set_new(o, "body_preview", api_json_text(l->value ? l->value : "", l->value_len,
                                                   PREVIEW_BYTES));
    json_object_set_new(o, "redriven", json_boolean(redriven));
    if (whole) {
        json_t *h = json_object();
        api_body_set(o, l->value, l->value_len);   /* exact: bytes that are not text as base64 */
        json_object_set_new(o, "key", l->key ? api_json_text(l->key, l->key_len, l->key_len)
                                             : json_null());
        for (size_t i = 0; i < l->nhdrs; i++)
            json_object_set_new(h, l->hdrs[i].name,
                                l->hdrs[i].value ? api_json_text(l->hdrs[i].value, l->hdrs[i].len,
                                                           l->hdrs[i].len)
                                                 : json_null());
        json_object_set_new(o, "headers", h);
        json_object_set_new(o, "source", header_or_null(l, "dq-source"));
    }
    return o;
}

/* deadq_match_fn of a filter. */
static int matches(void *ctx, const struct dead_letter *l, int *stop)
{
    const struct filter *f = ctx;
    size_t len;
    const char *v;

    if (f->from_ms && l->ts_ms < f->from_ms - CLOCK_SKEW_MS)
        *stop = 1;   /* older still below: this partition is read */
    if ((f->from_ms && l->ts_ms < f->from_ms) || (f->to_ms && l->ts_ms > f->to_ms))
        return 0;
    if (f->topic && (!(v = dead_letter_header(l, HDR_TOPIC, &len)) || strlen(f->topic) != len ||
                     memcmp(v, f->topic, len) != 0))
        return 0;
    if (f->reason && (!(v = dead_letter_header(l, HDR_ERROR, &len)) ||
                      strlen(f->reason) > len || memcmp(v, f->reason, strlen(f->reason)) != 0))
        return 0;
    return 1;
}

static void kafka_failed(struct task *t, const char *err)
{
    char msg[512];

    snprintf(msg, sizeof(msg), "reading the dead letters failed: %.400s", err);
    answer(t, 503, API_UNAVAILABLE, msg, NULL);
}

/* A page that could not be read: a cursor of no page of this topic (400), or Kafka (503). */
static void page_failed(struct task *t, int rc, const char *err)
{
    if (rc == -2)
        answer(t, 400, API_BAD_REQUEST, err, NULL);
    else
        kafka_failed(t, err);
}

static void run_list(struct dead *d, struct task *t)
{
    struct dead_letter *ls;
    struct deadq_cursor next;
    char err[256], cursor[DEADQ_CURSOR_MAX];
    size_t n;
    int more, *marked, rc;
    json_t *data, *arr;

    if ((rc = deadq_page(d->dq, &t->from, t->f.to_ms, t->limit, SCAN_MAX, matches, &t->f, &ls,
                         &n, &next, &more, err, sizeof(err))) < 0) {
        page_failed(t, rc, err);
        return;
    }
    if (!(marked = calloc(n ? n : 1, sizeof(*marked)))) {
        dead_letters_free(ls, n);
        answer(t, 503, API_UNAVAILABLE, "out of memory", NULL);
        return;
    }
    redrive_marked(d->r, ls, n, marked);
    arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, letter_json(&ls[i], marked[i], 0));
    deadq_cursor_format(&next, cursor, sizeof(cursor));
    data = json_object();
    json_object_set_new(data, "dead", arr);
    json_object_set_new(data, "before", more ? json_string(cursor) : json_null());
    answer(t, 200, API_OK, "ok", data);
    free(marked);
    dead_letters_free(ls, n);
}

static void run_one(struct dead *d, struct task *t)
{
    struct dead_letter l;
    char err[256], msg[96];
    int found, marked = 0;

    if (deadq_one(d->dq, t->partition, t->offset, &l, &found, err, sizeof(err)) < 0) {
        kafka_failed(t, err);
        return;
    }
    if (!found) {
        snprintf(msg, sizeof(msg), "no dead letter at partition %d offset %lld",
                 (int)t->partition, (long long)t->offset);
        answer(t, 404, API_NOT_FOUND, msg, NULL);
        return;
    }
    redrive_marked(d->r, &l, 1, &marked);
    answer(t, 200, API_OK, "ok", letter_json(&l, marked, 1));
    dead_letter_release(&l);
}

/* An unconfirmed redrive by filter that matches more than over letters: none is redriven
 * (none was before these: the first page held them all). */
static void too_many(struct task *t, size_t over, struct dead_letter *ls, size_t n, json_t *skips)
{
    char msg[256];
    json_t *data = json_object();

    dead_letters_free(ls, n);
    json_decref(skips);
    snprintf(msg, sizeof(msg), "the filter matches more than %zu dead letters "
             "(dead.redrive_confirm_over): none was redriven; send it again with \"confirm\": "
             "true to redrive them", over);
    json_object_set_new(data, "matched_over", json_integer((json_int_t)over));
    answer(t, 409, API_CONFLICT, msg, data);
}

static void run_redrive(struct dead *d, struct task *t)
{
    int64_t now = clock_now_ms(), due = t->deliver_at_ms > now ? t->deliver_at_ms : now;
    json_t *skips = json_array(), *data;
    size_t done = 0;
    char err[256], cursor[DEADQ_CURSOR_MAX];
    struct dead_letter *ls;
    size_t n;
    int more = 0;

    if (!t->by_filter) {
        struct dead_letter *found_ls = calloc(t->n ? t->n : 1, sizeof(*found_ls));
        int *found = calloc(t->n ? t->n : 1, sizeof(*found));
        if (!found_ls || !found ||
            deadq_some(d->dq, t->n, t->parts, t->offsets, found_ls, found, err, sizeof(err)) < 0) {
            free(found_ls);
            free(found);
            json_decref(skips);
            kafka_failed(t, found_ls && found ? err : "out of memory");
            return;
        }
        n = 0;   /* the letters found, moved to the front in the list's order */
        for (size_t i = 0; i < t->n; i++) {
            if (found[i] == 1)
                found_ls[n++] = found_ls[i];
            else
                redrive_skip(skips, t->parts[i], t->offsets[i],
                             found[i] == 2 ? "listed before" : "no dead letter there");
        }
        redrive_letters(d->r, found_ls, n, due, &done, skips);
        dead_letters_free(found_ls, n);
        free(found);
        cursor[0] = '\0';
    } else {
        struct deadq_cursor next;
        size_t total = 0, over = (size_t)d->cfg->dead.redrive_confirm_over;
        do {
            /* unconfirmed: one page, and one letter more than may be redriven tells that it is
             * too many (a cursor goes on from a page the scan cut short) */
            size_t max = t->confirmed ? REDRIVE_FILTER_MAX - total : over + 1 - total;
            int rc = deadq_page(d->dq, &t->from, t->f.to_ms, max, REDRIVE_SCAN_MAX, matches,
                                &t->f, &ls, &n, &next, &more, err, sizeof(err));
            if (rc < 0) {
                json_decref(skips);
                page_failed(t, rc, err);
                return;
            }
            if (!t->confirmed && total + n > over) {
                too_many(t, over, ls, n, skips);
                return;
            }
            redrive_letters(d->r, ls, n, due, &done, skips);
            dead_letters_free(ls, n);
            total += n;
            t->from = next;
        } while (t->confirmed && more && n > 0 && total < REDRIVE_FILTER_MAX);
        deadq_cursor_format(&t->from, cursor, sizeof(cursor));
    }
    data = json_object();
    json_object_set_new(data, "redriven", json_integer((json_int_t)done));
    json_object_set_new(data, "skipped", skips);
    json_object_set_new(data, "before", more ? json_string(cursor) : json_null());
    answer(t, 200, API_OK, "ok", data);
}

static void run_tasks(void *ctx, int worker, void **tasks, size_t n)
{
    struct dead *d = ctx;
    char err[512];

    (void)worker;
    for (size_t i = 0; i < n; i++) {
        struct task *t = tasks[i];
        if (!d->dq && !(d->dq = deadq_new(d->cfg, err, sizeof(err)))) {   /* at its first use */
            kafka_failed(t, err);
            task_free(t);
            continue;
        }
        switch (t->kind) {
        case T_LIST: run_list(d, t); break;
        case T_ONE: run_one(d, t); break;
        case T_REDRIVE: run_redrive(d, t); break;
        }
        task_free(t);
    }
}

static void drop_task(void *ctx, void *task, const char *why)
{
    struct task *t = task;
    char msg[256];

    (void)ctx;
    snprintf(msg, sizeof(msg), "dead letters: %s", why);
    answer(t, 503, API_UNAVAILABLE, msg, NULL);
    task_free(t);
}

struct dead *dead_new(const struct config *cfg, struct intake *jobs, char *err, size_t errlen)
{
    struct dead *d = calloc(1, sizeof(*d));

    if (!d) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    d->cfg = cfg;
    if (!(d->r = redrive_new(cfg, jobs)) ||
        !(d->w = workers_new(1, 1, TASK_WAIT_MS, QUEUE_MAX, run_tasks, drop_task, d))) {
        snprintf(err, errlen, d->r ? "cannot start the dead letters' thread" : "out of memory");
        dead_free(d);
        return NULL;
    }
    return d;
}

void dead_free(struct dead *d)
{
    if (!d)
        return;
    if (d->w)
        workers_free(d->w);
    deadq_free(d->dq);
    redrive_free(d->r);
    free(d);
}

/* An optional integer field of o from 0 to hi into *out: 0, or -1 with e set. */
static int int_field(json_t *o, const char *name, int64_t hi, int64_t *out, struct api_error *e)
{
    return api_json_member_int(o, "", name, 0, hi, out, e);
}

/* An optional string field of o into *out (malloc'd): 0, or -1 with e set. */
static int str_field(json_t *o, const char *name, char **out, struct api_error *e)
{
    json_t *v = json_object_get(o, name);

    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v) || !json_string_length(v))
        return api_fail(e, 400, API_BAD_REQUEST, "%s must be a non-empty string", name);
    if (!(*out = strdup(json_string_value(v))))
        return api_fail(e, 503, API_UNAVAILABLE, "out of memory");
    return 0;
}

/* 1 when member name of o is there and not null. */
static int given(json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);

    return v && !json_is_null(v);
}

/* A redrive's body into t: 0, or -1 with e set. */
/* The highest partition a letter's place may name: the dead-letter topic is made with
 * delay.partitions (the description served says so too). */
static int64_t partition_max(const struct dead *d)
{
    return d->cfg->delay.partitions - 1;
}

static int read_redrive(const struct dead *d, const char *body, size_t len, struct task *t,
                        struct api_error *e)
{
    static const char *const members[] = { "dead", "filter", "deliver_at_ms", "before", "confirm" };
    static const char *const criteria[] = { "topic", "reason", "from_ms", "to_ms", "all" };
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL), *list, *f, *v;
    int rc = -1;
    size_t i;

    if (!json_is_object(o)) {
        api_fail(e, 400, API_BAD_REQUEST, "request body must be a JSON object");
        goto out;
    }
    if (api_json_only(o, members, sizeof(members) / sizeof(members[0]), "a redrive", e) < 0)
        goto out;
    v = json_object_get(o, "confirm");
    if (v && !json_is_boolean(v)) {
        api_fail(e, 400, API_BAD_REQUEST, "confirm must be true or false");
        goto out;
    }
    t->confirmed = json_is_true(v);
    list = json_object_get(o, "dead");
    f = json_object_get(o, "filter");
    if (!list == !f) {
        api_fail(e, 400, API_BAD_REQUEST, "give either dead (a list of {partition, offset}) or "
                 "filter");
        goto out;
    }
    if (int_field(o, "deliver_at_ms", 253402300799999LL, &t->deliver_at_ms, e) < 0)
        goto out;
    v = json_object_get(o, "before");
    if (json_is_string(v) && json_string_length(v) == 0)
        v = NULL;   /* no cursor, as in a list's query */
    if (v && !json_is_null(v) && (!json_is_string(v) ||
                                  deadq_cursor_parse(json_string_value(v), &t->from) < 0)) {
        api_fail(e, 400, API_BAD_REQUEST, "before is not a cursor a redrive gave");
        goto out;
    }
    if (f) {
        t->by_filter = 1;
        if (!json_is_object(f)) {
            api_fail(e, 400, API_BAD_REQUEST, "filter must be an object");
            goto out;
        }
        if (api_json_only(f, criteria, sizeof(criteria) / sizeof(criteria[0]), "a filter", e) < 0)
            goto out;
        v = json_object_get(f, "all");
        if (v && !json_is_true(v)) {
            api_fail(e, 400, API_BAD_REQUEST, "all must be true (or left out)");
            goto out;
        }
        if (str_field(f, "topic", &t->f.topic, e) < 0 || str_field(f, "reason", &t->f.reason, e) < 0 ||
            int_field(f, "from_ms", 253402300799999LL, &t->f.from_ms, e) < 0 ||
            int_field(f, "to_ms", 253402300799999LL, &t->f.to_ms, e) < 0)
            goto out;
        if (!v && !t->f.topic && !t->f.reason && !given(f, "from_ms") && !given(f, "to_ms")) {
            api_fail(e, 400, API_BAD_REQUEST, "a filter names at least one of topic, reason, "
                     "from_ms, to_ms, or \"all\": true for every dead letter");
            goto out;
        }
        rc = 0;
        goto out;
    }
    if (!json_is_array(list) || json_array_size(list) == 0 ||
        json_array_size(list) > REDRIVE_LIST_MAX) {
        api_fail(e, 400, API_BAD_REQUEST, "dead must be a list of 1 to %d {partition, offset}",
                 REDRIVE_LIST_MAX);
        goto out;
    }
    t->n = json_array_size(list);
    if (!(t->parts = calloc(t->n, sizeof(*t->parts))) ||
        !(t->offsets = calloc(t->n, sizeof(*t->offsets)))) {
        api_fail(e, 503, API_UNAVAILABLE, "out of memory");
        goto out;
    }
    json_array_foreach(list, i, v) {
        static const char *const place[] = { "partition", "offset" };
        char what[48];
        int64_t p = -1, off = -1;
        snprintf(what, sizeof(what), "dead[%zu]", i);
        if (json_is_object(v) && api_json_only(v, place, 2, what, e) < 0)
            goto out;
        if (!json_is_object(v) || int_field(v, "partition", partition_max(d), &p, e) < 0 ||
            int_field(v, "offset", INT64_MAX, &off, e) < 0 || p < 0 || off < 0) {
            if (e->status == 0 || e->status == 200)
                api_fail(e, 400, API_BAD_REQUEST, "dead[%zu] must be {\"partition\": <int>, "
                         "\"offset\": <int>}", i);
            goto out;
        }
        t->parts[i] = (int32_t)p;
        t->offsets[i] = off;
    }
    rc = 0;
out:
    json_decref(o);
    return rc;
}

/* Whether path is "/<partition>/<offset>" naming a letter's place: 0 with *p and *off set. */
static int letter_path(const char *path, int64_t *p, int64_t *off)
{
    char pbuf[16], obuf[24], extra;

    return sscanf(path, "/%15[0-9]/%23[0-9]%c", pbuf, obuf, &extra) == 2 &&
           api_query_int(pbuf, 0, DEADQ_PARTITIONS_MAX - 1, p) == 0 &&
           api_query_int(obuf, 0, INT64_MAX, off) == 0 ? 0 : -1;
}

const char *dead_allow(const char *path)
{
    int64_t p, off;

    if (path[0] == '\0' || strcmp(path, "/") == 0 || letter_path(path, &p, &off) == 0)
        return "GET";
    return strcmp(path, "/redrive") == 0 ? "POST" : NULL;
}

/* Fills t from r (the HTTP thread's part: parsing, no network). 0, or -1 with e set. */
static int task_of(const struct dead *d, const struct dead_request *r, struct task *t,
                   struct api_error *e)
{
    int get = strcmp(r->method, "GET") == 0;
    int64_t p, off, limit = LIST_DEFAULT;

    if (r->path[0] == '\0' || strcmp(r->path, "/") == 0) {
        if (!get)
            return api_fail(e, 405, API_BAD_REQUEST, PREFIX " takes GET");
        t->kind = T_LIST;
        if (api_query_int(r->limit, 1, LIST_MAX, &limit) < 0)
            return api_fail(e, 400, API_BAD_REQUEST, "limit must be an integer from 1 to %d",
                            LIST_MAX);
        t->limit = (size_t)limit;
        if (r->before && r->before[0] && deadq_cursor_parse(r->before, &t->from) < 0)
            return api_fail(e, 400, API_BAD_REQUEST, "before is not a cursor this list gave");
        if ((r->topic && r->topic[0] && !(t->f.topic = strdup(r->topic))) ||
            (r->reason && r->reason[0] && !(t->f.reason = strdup(r->reason))))
            return api_fail(e, 503, API_UNAVAILABLE, "out of memory");
        return 0;
    }
    if (strcmp(r->path, "/redrive") == 0) {
        if (strcmp(r->method, "POST") != 0)
            return api_fail(e, 405, API_BAD_REQUEST, "redrive takes POST");
        t->kind = T_REDRIVE;
        return read_redrive(d, r->body ? r->body : "", r->len, t, e);
    }
    if (letter_path(r->path, &p, &off) == 0) {
        if (!get)
            return api_fail(e, 405, API_BAD_REQUEST, "a dead letter takes GET");
        if (p > partition_max(d))
            return api_fail(e, 404, API_NOT_FOUND, "no dead letter there: the dead-letter topic "
                            "has partitions 0 to %lld", (long long)partition_max(d));
        t->kind = T_ONE;
        t->partition = (int32_t)p;
        t->offset = off;
        return 0;
    }
    return api_fail(e, 404, API_NOT_FOUND, "no such dead-letter route: %s " PREFIX "%.100s (GET "
                    PREFIX ", GET " PREFIX "/<partition>/<offset>, POST " PREFIX "/redrive)",
                    r->method, r->path);
}

void dead_serve(struct dead *d, const struct dead_request *r, answer_fn done, void *opaque)
{
    struct task *t = calloc(1, sizeof(*t));
    struct api_error e = { 0 };

    if (!t) {
        answer_send(done, opaque, 503, API_UNAVAILABLE, "out of memory", NULL);
        return;
    }
    t->done = done;
    t->opaque = opaque;
    if (task_of(d, r, t, &e) < 0) {
        answer(t, e.status, e.code, e.message, NULL);
        task_free(t);
        return;
    }
    workers_queue(d->w, t);
}

/* schedjson: the JSON of the schedule routes. The contract is in include/schedjson.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "schedjson.h"

#define EVERY_MAX_MS (366LL * 86400 * 1000)   /* an interval of a year at most */
#define JITTER_MAX_MS (86400LL * 1000)
#define TIME_MAX_MS 253402300799999LL        /* 9999-12-31T23:59:59.999Z */
#define GAP_LOOK 100                         /* fire times jitter_ms is checked against */

/* The timing fields: the rest of a PUT body is the job of each occurrence. */
static const char *const timing_fields[] = { "cron", "every_ms", "timezone", "start_at_ms",
                                             "end_at_ms", "max_runs", "catch_up", "catch_up_max",
                                             "jitter_ms", "anchor_ms" };
#define NTIMING (sizeof(timing_fields) / sizeof(timing_fields[0]))

/* Fields of an add that a schedule's occurrence does not take: its id and due time are the
 * schedule's. */
static const char *const refused_fields[] = { "id", "delay", "delay_ms", "deliver_at_ms" };

/* An optional integer field from lo to hi into *out (left as it is when absent). */
static int int_field(json_t *o, const char *name, int64_t lo, int64_t hi, int64_t *out, char *err,
                     size_t errlen)
{
    json_t *v = json_object_get(o, name);
    int64_t n;

    if (!v || json_is_null(v))
        return 0;
    if (api_json_int(v, &n) < 0 || n < lo || n > hi) {
        snprintf(err, errlen, "%s must be an integer from %lld to %lld", name, (long long)lo,
                 (long long)hi);
        return -1;
    }
    *out = n;
    return 0;
}

/* An optional string field into out (NULL when absent). */
static int str_field(json_t *o, const char *name, const char **out, char *err, size_t errlen)
{
    json_t *v = json_object_get(o, name);

    *out = NULL;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v)) {
        snprintf(err, errlen, "%s must be a string", name);
        return -1;
    }
    *out = json_string_value(v);
    return 0;
}

/* cron or every_ms, exactly one. */
static int read_when(json_t *o, struct recur_timing *t, char *err, size_t errlen)
{
    const char *cron;
    char why[200];

    if (str_field(o, "cron", &cron, err, errlen) < 0 ||
        int_field(o, "every_ms", 1, EVERY_MAX_MS, &t->every_ms, err, errlen) < 0)
        return -1;
    if (!cron == !t->every_ms) {
        snprintf(err, errlen, "give either cron or every_ms");
        return -1;
    }
    if (!cron)
        return 0;
    if (strlen(cron) > RECUR_CRON_MAX) {
        snprintf(err, errlen, "cron is over %d characters", RECUR_CRON_MAX);
        return -1;
    }
    if (cron_parse(cron, &t->cron, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "%s", why);   /* "cron: ..." */
        return -1;
    }
    snprintf(t->cron_text, sizeof(t->cron_text), "%s", cron);
    return 0;
}

static int read_timing(json_t *o, int64_t now_ms, struct recur_timing *t, char *err,
                       size_t errlen)
{
    const char *zone, *catch_up;
    char why[200];

    memset(t, 0, sizeof(*t));
    t->catch_up_max = 100;
    if (read_when(o, t, err, errlen) < 0 || str_field(o, "timezone", &zone, err, errlen) < 0 ||
        str_field(o, "catch_up", &catch_up, err, errlen) < 0 ||
        int_field(o, "start_at_ms", 0, TIME_MAX_MS, &t->start_ms, err, errlen) < 0 ||
        int_field(o, "end_at_ms", 0, TIME_MAX_MS, &t->end_ms, err, errlen) < 0 ||
        int_field(o, "max_runs", 1, INT64_MAX, &t->max_runs, err, errlen) < 0 ||
        int_field(o, "catch_up_max", 1, RECUR_CATCH_UP_MAX, &t->catch_up_max, err, errlen) < 0 ||
        int_field(o, "jitter_ms", 0, JITTER_MAX_MS, &t->jitter_ms, err, errlen) < 0 ||
        int_field(o, "anchor_ms", 0, TIME_MAX_MS, &t->anchor_ms, err, errlen) < 0)
        return -1;
    if (!(t->tz = tz_get(zone ? zone : "UTC", why, sizeof(why)))) {
        snprintf(err, errlen, "timezone: %s", why);
        return -1;
    }
    if (catch_up && recur_catch_up_of(catch_up, &t->catch_up) < 0) {
        snprintf(err, errlen, "catch_up must be \"skip\", \"once\" or \"all\"");
        return -1;
    }
    if (t->end_ms && t->start_ms && t->end_ms < t->start_ms) {
        snprintf(err, errlen, "end_at_ms is before start_at_ms");
        return -1;
    }
    if (t->every_ms && !t->anchor_ms)
        t->anchor_ms = t->start_ms ? t->start_ms : now_ms;
    return 0;
}

int schedjson_parse_timing(const char *json, size_t len, struct recur_timing *out, char *err,
                           size_t errlen)
{
    json_t *o = json_loadb(json, len, 0, NULL);
    int rc;

    if (!json_is_object(o)) {
        json_decref(o);
        snprintf(err, errlen, "the kept timing is not a JSON object");
        return -1;
    }
    rc = read_timing(o, 0, out, err, errlen);
    json_decref(o);
    return rc;
}

/* The timing as kept: the fields given, with the interval's anchor. */
static char *timing_json(json_t *o, const struct recur_timing *t)
{
    json_t *k = json_object();
    char *text;

    for (size_t i = 0; i < NTIMING; i++) {
        json_t *v = json_object_get(o, timing_fields[i]);
        if (v && !json_is_null(v))
            json_object_set(k, timing_fields[i], v);
    }
    if (t->every_ms)
        json_object_set_new(k, "anchor_ms", json_integer(t->anchor_ms));
    text = json_dumps(k, JSON_COMPACT);
    json_decref(k);
    return text;
}

int schedjson_same_timing(const char *a, const char *b)
{
    json_t *x = json_loads(a, 0, NULL), *y = json_loads(b, 0, NULL);
    int same;

    json_object_del(x, "anchor_ms");
    json_object_del(y, "anchor_ms");
    same = x && y && json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return same;
}

/* The job fields of o: checked as an add's (due now), and as kept. */
static int read_job(json_t *o, const struct api_limits *lim, int64_t now_ms, char **out,
                    struct api_error *e)
{
    json_t *j = json_object();
    struct job job;
    char *text;
    int id_given, rc;

    for (size_t i = 0; i < sizeof(refused_fields) / sizeof(refused_fields[0]); i++) {
        if (json_object_get(o, refused_fields[i])) {
            json_decref(j);
            return api_fail(e, 400, API_BAD_REQUEST, "%s is not a field of a schedule: its "
                            "occurrences are due at its fire times, with ids <schedule id>@<fire "
                            "time>", refused_fields[i]);
        }
    }
    json_object_update(j, o);
    for (size_t i = 0; i < NTIMING; i++)
        json_object_del(j, timing_fields[i]);
    *out = json_dumps(j, JSON_COMPACT);
    json_object_set_new(j, "delay_ms", json_integer(0));
    text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!*out || !text) {
        free(text);
        return api_fail(e, 500, API_ADD_FAILED, "out of memory");
    }
    rc = api_parse_add(text, strlen(text), lim, now_ms, &job, &id_given, e);
    job_release(&job);
    free(text);
    return rc;
}

/* The shortest time between two of the next GAP_LOOK fire times after now_ms (an interval's is
 * every_ms); INT64_MAX when fewer than two come. */
static int64_t shortest_gap(const struct recur_timing *t, int64_t now_ms)
{
    int64_t gap = INT64_MAX, at, prev = recur_next(t, now_ms);

    if (t->every_ms)
        return t->every_ms;
    for (int i = 0; i < GAP_LOOK && prev >= 0 && (at = recur_next(t, prev)) >= 0; i++) {
        if (at - prev < gap)
            gap = at - prev;
        prev = at;
    }
    return gap;
}

int schedjson_parse_def(const char *body, size_t len, const struct api_limits *lim,
                        int64_t now_ms, struct sched_def *out, struct api_error *e)
{
    json_t *o = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    char err[256];
    int64_t gap;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    if (!json_is_object(o))
        api_fail(e, 400, API_BAD_REQUEST, "request body must be a JSON object");
    else if (json_object_get(o, "anchor_ms"))
        api_fail(e, 400, API_BAD_REQUEST, "anchor_ms is not a field of a schedule: an interval "
                 "starts at start_at_ms, or when it is put");
    else if (read_timing(o, now_ms, &out->timing, err, sizeof(err)) < 0)
        api_fail(e, 400, API_BAD_REQUEST, "%s", err);
    else if (out->timing.every_ms && out->timing.every_ms < lim->levels->ms[0])
        api_fail(e, 400, API_BAD_REQUEST, "every_ms must be at least %lld (the smallest delay "
                 "level)", (long long)lim->levels->ms[0]);
    else if (out->timing.jitter_ms > 0 && out->timing.jitter_ms >= (gap = shortest_gap(
                 &out->timing, now_ms)))
        api_fail(e, 400, API_BAD_REQUEST, "jitter_ms must be less than the shortest time "
                 "between two fire times (%lld ms): an occurrence is due before the next one",
                 (long long)gap);
    else if (read_job(o, lim, now_ms, &out->job_json, e) == 0 &&
             !(out->timing_json = timing_json(o, &out->timing)))
        api_fail(e, 500, API_ADD_FAILED, "out of memory");
    else if (out->timing_json)
        rc = 0;
    json_decref(o);
    return rc;
}

void sched_def_release(struct sched_def *d)
{
    free(d->timing_json);
    free(d->job_json);
    memset(d, 0, sizeof(*d));
}

int schedjson_occurrence(const char *job_json, size_t len, const struct api_limits *lim,
                         int64_t now_ms, int64_t due_ms, struct job *out, struct api_error *e)
{
    json_t *o = json_loadb(job_json, len, 0, NULL);
    char *text;
    int id_given;

    memset(out, 0, sizeof(*out));
    if (!json_is_object(o)) {
        json_decref(o);
        return api_fail(e, 500, API_ADD_FAILED, "the kept job of the schedule is not JSON");
    }
    json_object_set_new(o, "delay_ms", json_integer(0));
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!text)
        return api_fail(e, 500, API_ADD_FAILED, "out of memory");
    if (api_parse_add(text, strlen(text), lim, now_ms, out, &id_given, e) < 0) {
        free(text);
        return -1;
    }
    free(text);
    out->due_ms = due_ms;
    out->created_ms = now_ms;
    out->delay_ms = due_ms > now_ms ? due_ms - now_ms : 0;
    return 0;
}

void *schedjson_preview(const struct recur_timing *t, int n, int64_t from_ms)
{
    json_t *list = json_array();
    char local[64];
    int64_t at = from_ms;

    for (int i = 0; i < n && (at = recur_next(t, at)) >= 0; i++) {
        tz_format(t->tz, at, local, sizeof(local));
        json_array_append_new(list, json_pack("{s:I, s:s}", "at_ms", (json_int_t)at, "local",
                                              local));
    }
    return json_pack("{s:o}", "next", list);
}

static json_t *ms_or_null(int64_t ms)
{
    return ms > 0 ? json_integer(ms) : json_null();
}

void *schedjson_data(const char *id, const char *timing_json, const char *job_json,
                     const struct sched_state *st, int n, int64_t from_ms)
{
    json_t *t = json_loads(timing_json, 0, NULL), *j = json_loads(job_json, 0, NULL), *d, *next;
    struct recur_timing timing;
    char err[256];

    if (!json_is_object(t) || !json_is_object(j) ||
        schedjson_parse_timing(timing_json, strlen(timing_json), &timing, err, sizeof(err)) < 0) {
        json_decref(t);
        json_decref(j);
        return NULL;
    }
    d = json_pack("{s:s}", "id", id);
    json_object_update(d, j);
    json_object_update(d, t);
    json_object_del(d, "anchor_ms");
    json_object_set_new(d, "timezone", json_string(tz_name(timing.tz)));
    json_object_set_new(d, "catch_up", json_string(recur_catch_up_name(timing.catch_up)));
    json_object_set_new(d, "paused", json_boolean(st->paused));
    json_object_set_new(d, "generation", json_integer(st->generation));
    json_object_set_new(d, "runs", json_integer(st->runs));
    json_object_set_new(d, "last_at_ms", ms_or_null(st->last_ms));
    json_object_set_new(d, "next_at_ms", ms_or_null(st->next_ms));
    json_object_set_new(d, "created_ms", ms_or_null(st->created_ms));
    json_object_set_new(d, "updated_ms", ms_or_null(st->updated_ms));
    next = schedjson_preview(&timing, st->paused || !st->next_ms ? 0 : n,
                             st->next_ms ? st->next_ms - 1 : from_ms);
    json_object_set(d, "next", json_object_get(next, "next"));
    json_decref(next);
    json_decref(t);
    json_decref(j);
    return d;
}

void *schedjson_list(void *const *items, size_t n, const char *last, int more)
{
    json_t *list = json_array();

    for (size_t i = 0; i < n; i++)
        if (items[i])
            json_array_append_new(list, (json_t *)items[i]);
    return json_pack("{s:o, s:o}", "schedules", list, "after",
                     more && last ? json_string(last) : json_null());
}

void *schedjson_triggered(const char *id, const char *job_id, int64_t due_ms)
{
    return json_pack("{s:s, s:s, s:I}", "id", id, "job_id", job_id, "exec_time_ms",
                     (json_int_t)due_ms);
}

void *schedjson_id(const char *id)
{
    return json_pack("{s:s}", "id", id);
}

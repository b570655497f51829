/* schedjson: the JSON of the schedule routes. The contract is in include/schedules/schedjson.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/apijson.h"
#include "core/timing.h"
#include "schedules/schedjson.h"

#define GAP_LOOK 100                         /* fire times jitter_ms is checked against */

/* The timing fields: the rest of a PUT body is the job of each occurrence. */
static const char *const timing_fields[] = { "cron", "every_ms", "timezone", "start_at_ms",
                                             "end_at_ms", "max_runs", "catch_up", "catch_up_max",
                                             "jitter_ms", "overlap", "anchor_ms" };
#define NTIMING (sizeof(timing_fields) / sizeof(timing_fields[0]))

/* Fields of an add that a schedule's occurrence does not take: its id and due time are the
 * schedule's. */
static const char *const refused_fields[] = { "id", "delay", "delay_ms", "deliver_at_ms" };

/* The fields of an add that an occurrence takes. */
static const char *const job_fields[] = { "topic", "body", "body_encoding", "key", "headers",
                                          "deliver", "ttr", "ttr_ms", "once", "override",
                                          "callback" };

/* The first member of o that is no field of a schedule (refused_fields are, to be refused with
 * their reason); NULL when none. */
static const char *unknown_field(json_t *o)
{
    const char *k;
    json_t *v;

    json_object_foreach(o, k, v) {
        int known = 0;
        for (size_t i = 0; !known && i < NTIMING; i++)
            known = strcmp(k, timing_fields[i]) == 0;
        for (size_t i = 0; !known && i < sizeof(job_fields) / sizeof(job_fields[0]); i++)
            known = strcmp(k, job_fields[i]) == 0;
        for (size_t i = 0; !known && i < sizeof(refused_fields) / sizeof(refused_fields[0]); i++)
            known = strcmp(k, refused_fields[i]) == 0;
        known = known || strcmp(k, "immediately") == 0;
        if (!known)
            return k;
    }
    return NULL;
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

char *schedjson_timing_sig(const char *timing_json)
{
    json_t *x = json_loads(timing_json, 0, NULL);
    char *sig;

    json_object_del(x, "anchor_ms");
    sig = x ? json_dumps(x, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(x);
    return sig;
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
        return api_fail(e, 503, API_UNAVAILABLE, "out of memory");
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
    const char *unknown = json_is_object(o) ? unknown_field(o) : NULL;
    json_t *now = json_is_object(o) ? json_object_get(o, "immediately") : NULL;
    int bad_now = now && !json_is_boolean(now);

    if (now && !bad_now) {   /* a request of the put, not a field of the schedule */
        out->immediately = json_is_true(now);
        json_object_del(o, "immediately");
    }

    if (!json_is_object(o))
        api_fail(e, 400, API_BAD_REQUEST, "request body must be a JSON object");
    else if (unknown)
        api_fail(e, 400, API_BAD_REQUEST, "%.100s is not a field of a schedule (its timing: cron or "
                 "every_ms, timezone, start_at_ms, end_at_ms, max_runs, catch_up, catch_up_max, "
                 "jitter_ms, overlap; immediately; its job: an add's fields but id and its due time)",
                 unknown);
    else if (bad_now)
        api_fail(e, 400, API_BAD_REQUEST, "immediately must be true or false");
    else if (json_is_integer(json_object_get(o, "end_at_ms")) &&
             json_integer_value(json_object_get(o, "end_at_ms")) <= 0)
        api_fail(e, 400, API_BAD_REQUEST, "end_at_ms must be a time (epoch ms); leave it out for "
                 "a schedule without end");
    else if (json_object_get(o, "anchor_ms"))
        api_fail(e, 400, API_BAD_REQUEST, "anchor_ms is not a field of a schedule: an interval "
                 "starts at start_at_ms, or when it is put");
    else if (timing_from_json(o, now_ms, &out->timing, err, sizeof(err)) < 0)
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
        api_fail(e, 503, API_UNAVAILABLE, "out of memory");
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
        return api_fail(e, 500, API_INTERNAL, "the kept job of the schedule is not JSON");
    }
    json_object_set_new(o, "delay_ms", json_integer(0));
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!text)
        return api_fail(e, 503, API_UNAVAILABLE, "out of memory");
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

void *schedjson_runs(const struct sched_run_seen *runs, size_t n)
{
    json_t *list = json_array();

    for (size_t i = 0; i < n; i++) {
        const struct sched_run_seen *r = &runs[i];
        json_array_append_new(list, json_pack(
            "{s:I, s:s, s:b, s:o, s:o}", "fire_at_ms", (json_int_t)r->fire_ms, "job_id", r->job_id,
            "ran", r->ran, "state", r->found ? json_string(job_state_name(r->state)) : json_null(),
            "error", r->found && r->error[0] ? json_string(r->error) : json_null()));
    }
    return json_pack("{s:o}", "runs", list);
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
        timing_parse(timing_json, strlen(timing_json), &timing, err, sizeof(err)) < 0) {
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

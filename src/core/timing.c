/* timing: a schedule's timing read from its JSON. The contract is in include/core/timing.h. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "core/apijson.h"
#include "core/timing.h"

#define EVERY_MAX_MS (366LL * 86400 * 1000)   /* an interval of a year at most */
#define JITTER_MAX_MS (86400LL * 1000)
#define TIME_MAX_MS 253402300799999LL        /* 9999-12-31T23:59:59.999Z */

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

int timing_from_json(void *obj, int64_t now_ms, struct recur_timing *t, char *err, size_t errlen)
{
    json_t *o = obj;
    const char *zone, *catch_up, *overlap;
    char why[200];

    memset(t, 0, sizeof(*t));
    t->catch_up_max = 100;
    if (read_when(o, t, err, errlen) < 0 || str_field(o, "timezone", &zone, err, errlen) < 0 ||
        str_field(o, "catch_up", &catch_up, err, errlen) < 0 ||
        str_field(o, "overlap", &overlap, err, errlen) < 0 ||
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
    if (overlap && strcmp(overlap, "allow") && strcmp(overlap, "skip")) {
        snprintf(err, errlen, "overlap must be \"allow\" or \"skip\"");
        return -1;
    }
    t->overlap_skip = overlap && !strcmp(overlap, "skip");
    if (t->end_ms && t->start_ms && t->end_ms < t->start_ms) {
        snprintf(err, errlen, "end_at_ms is before start_at_ms");
        return -1;
    }
    if (t->every_ms && !t->anchor_ms)
        t->anchor_ms = t->start_ms ? t->start_ms : now_ms;
    return 0;
}

int timing_parse(const char *json, size_t len, struct recur_timing *out, char *err, size_t errlen)
{
    json_t *o = json_loadb(json, len, 0, NULL);
    int rc;

    if (!json_is_object(o)) {
        json_decref(o);
        snprintf(err, errlen, "the kept timing is not a JSON object");
        return -1;
    }
    rc = timing_from_json(o, 0, out, err, errlen);
    json_decref(o);
    return rc;
}

/* api: the requests of the HTTP API, wire compatible with go-delayqueue: an add (alone or in a
 * batch) read into a job, a job id, a reschedule, a pop, a worker's verbs and a group's release,
 * each checked against the limits of the config. The contract is in include/core/api.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "core/api.h"
#include "lib/base64.h"
#include "core/apijson.h"
#include "core/calljson.h"

#define KEY_MAX 4096     /* a Kafka key is an id, not a payload */

static char *dup_bytes(const char *s, size_t len)
{
    char *d = malloc(len + 1);

    if (d) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

static int parse_id(json_t *v, struct job *out, int *id_given, struct api_error *e)
{
    char why[128];

    *id_given = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return api_fail(e, 400, API_BAD_REQUEST, "id must be a string");
    if (json_string_length(v) == 0)
        return 0;   /* go-delayqueue generates an id for "" too */
    if (strlen(json_string_value(v)) != json_string_length(v))
        return api_fail(e, 400, API_BAD_REQUEST, "id may hold only visible ASCII characters (no spaces)");
    if (job_id_valid(json_string_value(v), json_string_length(v), why, sizeof(why)) < 0)
        return api_fail(e, 400, API_BAD_REQUEST, "%s", why);
    memcpy(out->id, json_string_value(v), json_string_length(v) + 1);
    *id_given = 1;
    return 0;
}

static int parse_topic(json_t *v, const struct api_limits *lim, struct job *out,
                       struct api_error *e)
{
    char why[TOPIC_NAME_MAX + 128];
    enum target_fault f;

    if (!json_is_string(v))
        return api_fail(e, 400, API_BAD_REQUEST, "topic is required and must be a string");
    f = levels_check_target(lim->levels, lim->dlq_topic, json_string_value(v), json_string_length(v),
                            why, sizeof(why));
    if (f == TARGET_INVALID)
        return api_fail(e, 400, API_BAD_REQUEST, "invalid topic: %s", why);
    if (f != TARGET_OK)
        return api_fail(e, 400, API_BAD_REQUEST, "%s", why);
    out->topic = strdup(json_string_value(v));
    return out->topic ? 0 : api_fail(e, 503, API_ADD_FAILED, "out of memory");
}

/* Exactly one of delay (s), delay_ms, deliver_at_ms decides the due time. */
static int parse_when(json_t *root, const struct api_limits *lim, int64_t now_ms, struct job *out,
                      struct api_error *e)
{
    json_t *d = json_object_get(root, "delay"), *dms = json_object_get(root, "delay_ms"),
           *at = json_object_get(root, "deliver_at_ms");
    int given = (d != NULL) + (dms != NULL) + (at != NULL);
    json_t *v = d ? d : dms ? dms : at;
    int64_t n, delay;

    if (given == 0)
        return api_fail(e, 400, API_BAD_REQUEST, "one of delay, delay_ms, deliver_at_ms is required");
    if (given > 1)
        return api_fail(e, 400, API_BAD_REQUEST, "give only one of delay, delay_ms, deliver_at_ms");
    if (api_json_int(v, &n) < 0)
        return api_fail(e, 400, API_BAD_DELAY, "%s must be an integer",
                        d ? "delay" : dms ? "delay_ms" : "deliver_at_ms");
    if (at) {
        delay = n > now_ms ? n - now_ms : 0;   /* a time in the past is due now */
    } else {
        if (n < 0)
            return api_fail(e, 400, API_BAD_DELAY, "delay must not be negative");
        if (d && n > lim->max_delay_ms / 1000)
            return api_fail(e, 400, API_BAD_DELAY, "delay must be at most %lld seconds",
                            (long long)(lim->max_delay_ms / 1000));
        delay = d ? n * 1000 : n;
    }
    if (delay > lim->max_delay_ms)
        return api_fail(e, 400, API_BAD_DELAY, "delay must be at most %lld ms",
                        (long long)lim->max_delay_ms);
    out->delay_ms = delay;
    out->created_ms = now_ms;
    out->due_ms = now_ms + delay;
    return 0;
}

/* A body given as base64 ("body_encoding": "base64"): its bytes, which need not be text. */
static int parse_body_base64(json_t *v, struct job *out, struct api_error *e)
{
    if (!json_is_string(v))
        return api_fail(e, 400, API_BAD_REQUEST, "body must be a string of base64 with "
                        "body_encoding base64");
    out->body = base64_decode(json_string_value(v), json_string_length(v), &out->body_len);
    return out->body ? 0 : api_fail(e, 400, API_BAD_REQUEST, "body is not base64");
}

static int parse_body(json_t *v, json_t *encoding, struct job *out, struct api_error *e)
{
    const char *enc = json_string_value(encoding);

    if (encoding && !json_is_null(encoding) && (!enc || (strcmp(enc, "base64") != 0 &&
                                                         strcmp(enc, "text") != 0)))
        return api_fail(e, 400, API_BAD_REQUEST, "body_encoding must be \"base64\" or \"text\"");
    if (enc && strcmp(enc, "base64") == 0 && v && !json_is_null(v))
        return parse_body_base64(v, out, e);
    if (!v || json_is_null(v)) {
        out->body = strdup("");
        out->body_len = 0;
    } else if (json_is_string(v)) {
        out->body = dup_bytes(json_string_value(v), json_string_length(v));
        out->body_len = json_string_length(v);
    } else if (json_is_object(v) || json_is_array(v)) {
        out->body = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        out->body_len = out->body ? strlen(out->body) : 0;
    } else {
        return api_fail(e, 400, API_BAD_REQUEST, "body must be a string, an object or an array");
    }
    return out->body ? 0 : api_fail(e, 503, API_ADD_FAILED, "out of memory");
}

static int parse_key(json_t *v, struct job *out, struct api_error *e)
{
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > KEY_MAX ||
        strlen(json_string_value(v)) != json_string_length(v))
        return api_fail(e, 400, API_BAD_REQUEST,
                        "key must be a non-empty string of at most %d bytes, without NUL", KEY_MAX);
    out->key = dup_bytes(json_string_value(v), json_string_length(v));
    return out->key ? 0 : api_fail(e, 503, API_ADD_FAILED, "out of memory");
}

static int parse_headers(json_t *v, struct job *out, struct api_error *e)
{
    const char *name;
    json_t *val;

    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return api_fail(e, 400, API_BAD_REQUEST, "headers must be an object of strings");
    if (json_object_size(v) > JOB_HEADERS_MAX)
        return api_fail(e, 400, API_BAD_REQUEST, "at most %d headers", JOB_HEADERS_MAX);
    out->headers = calloc(json_object_size(v) + 1, sizeof(*out->headers));
    if (!out->headers)
        return api_fail(e, 503, API_ADD_FAILED, "out of memory");
    json_object_foreach(v, name, val) {
        struct job_header *h = &out->headers[out->nheaders];
        if (name[0] == '\0' || strlen(name) > JOB_HEADER_NAME_MAX)
            return api_fail(e, 400, API_BAD_REQUEST, "header names must be 1-%d bytes",
                            JOB_HEADER_NAME_MAX);
        if (strncasecmp(name, "dq-", 3) == 0)   /* in any case: a callback sends them as HTTP
                                                 * headers, whose names have none */
            return api_fail(e, 400, API_BAD_REQUEST, "header %s: names starting dq- (in any "
                            "case) are reserved", name);
        if (!json_is_string(val) || json_string_length(val) > API_HEADER_VALUE_MAX ||
            strlen(json_string_value(val)) != json_string_length(val))
            return api_fail(e, 400, API_BAD_REQUEST, "header %s must be a string of at most %d bytes",
                            name, API_HEADER_VALUE_MAX);
        h->name = strdup(name);
        h->value = strdup(json_string_value(val));
        out->nheaders++;
        if (!h->name || !h->value)
            return api_fail(e, 503, API_ADD_FAILED, "out of memory");
    }
    return 0;
}

/* A time to run in seconds (ttr) or milliseconds (ttr_ms) of root into *out: 0 when neither
 * is given. The same bounds for an add and a pop: a second to a day. */
static int parse_ttr(json_t *root, int64_t *out, struct api_error *e)
{
    json_t *s = json_object_get(root, "ttr"), *ms = json_object_get(root, "ttr_ms");
    int64_t v;

    *out = 0;
    if (s && ms)
        return api_fail(e, 400, API_BAD_REQUEST, "give only one of ttr, ttr_ms");
    if (!s && !ms)
        return 0;
    if (api_json_int(s ? s : ms, &v) < 0)
        return api_fail(e, 400, API_BAD_REQUEST, "%s must be an integer", s ? "ttr" : "ttr_ms");
    if (s ? (v < 1 || v > JOB_TTR_MAX_MS / 1000) : (v < 1000 || v > JOB_TTR_MAX_MS))
        return api_fail(e, 400, API_BAD_REQUEST, s ? "ttr must be from 1 to %lld seconds"
                                                   : "ttr_ms must be from 1000 to %lld",
                        s ? (long long)(JOB_TTR_MAX_MS / 1000) : (long long)JOB_TTR_MAX_MS);
    *out = s ? v * 1000 : v;
    return 0;
}

/* "deliver": "pull" | "kafka", and the time to run of a pull job, or "once": true (a pull job
 * handed out by one pop and finished then, never handed out again). */
static int parse_deliver(json_t *root, struct job *out, struct api_error *e)
{
    json_t *d = json_object_get(root, "deliver"), *once = json_object_get(root, "once");
    json_t *over = json_object_get(root, "override");

    if (d && !json_is_null(d) &&
        (!json_is_string(d) ||
         job_deliver_of(json_string_value(d), json_string_length(d), &out->deliver) < 0))
        return api_fail(e, 400, API_BAD_REQUEST, "deliver must be \"pull\" or \"kafka\"");
    if (parse_ttr(root, &out->ttr_ms, e) < 0)
        return -1;
    if (once && !json_is_boolean(once))
        return api_fail(e, 400, API_BAD_REQUEST, "once must be true or false");
    if (json_is_true(once) && out->ttr_ms)
        return api_fail(e, 400, API_BAD_REQUEST, "give either once or a ttr");
    if (json_is_true(once))
        out->ttr_ms = JOB_TTR_ONCE_MS;
    if (over && !json_is_boolean(over))
        return api_fail(e, 400, API_BAD_REQUEST, "override must be true or false");
    out->override = json_is_true(over);
    return 0;
}

/* Fields that each make sense alone but name no target together: refused, naming them. */
static int check_combination(const struct job *j, struct api_error *e)
{
    int pull_fields = j->ttr_ms != 0;

    if (j->deliver == JOB_DELIVER_PULL && !j->topic[0])
        return api_fail(e, 400, API_BAD_REQUEST, "deliver \"pull\" needs a topic to pop from: "
                        "a job with only a callback has none");
    if (pull_fields && j->deliver == JOB_DELIVER_KAFKA)
        return api_fail(e, 400, API_BAD_REQUEST, "once, ttr and ttr_ms are for pull jobs: "
                        "deliver \"kafka\" has none");
    if (pull_fields && !j->topic[0])
        return api_fail(e, 400, API_BAD_REQUEST, "once, ttr and ttr_ms are for pull jobs: a "
                        "job with only a callback has no topic to pop from");
    return 0;
}

int api_check_job(const struct job *j, const struct api_limits *lim, int64_t now_ms,
                  struct api_error *e)
{
    char why[TOPIC_NAME_MAX + 128];
    enum target_fault f;

    if (j->id[0] && job_id_valid(j->id, strlen(j->id), why, sizeof(why)) < 0)
        return api_fail(e, 400, API_BAD_REQUEST, "%s", why);
    if (!j->topic || (!j->topic[0] && !j->callback))
        return api_fail(e, 400, API_BAD_REQUEST, "a job needs a topic or a callback");
    if (j->topic[0] && (f = levels_check_target(lim->levels, lim->dlq_topic, j->topic,
                                                strlen(j->topic), why, sizeof(why))) != TARGET_OK)
        return api_fail(e, 400, API_BAD_REQUEST, "%s%s", f == TARGET_INVALID ? "invalid topic: " : "",
                        why);
    if (j->due_ms - now_ms > lim->max_delay_ms)
        return api_fail(e, 400, API_BAD_DELAY, "delay must be at most %lld ms",
                        (long long)lim->max_delay_ms);
    if (j->key && (!j->key[0] || strlen(j->key) > KEY_MAX))
        return api_fail(e, 400, API_BAD_REQUEST,
                        "key must be a non-empty string of at most %d bytes, without NUL", KEY_MAX);
    if (j->nheaders > JOB_HEADERS_MAX)
        return api_fail(e, 400, API_BAD_REQUEST, "at most %d headers", JOB_HEADERS_MAX);
    for (size_t i = 0; i < j->nheaders; i++) {
        const struct job_header *h = &j->headers[i];
        if (!h->name[0] || strlen(h->name) > JOB_HEADER_NAME_MAX ||
            strncasecmp(h->name, "dq-", 3) == 0 || strlen(h->value) > API_HEADER_VALUE_MAX)
            return api_fail(e, 400, API_BAD_REQUEST, "header %s: a name of 1-%d bytes not "
                            "starting dq-, a value of at most %d bytes", h->name,
                            JOB_HEADER_NAME_MAX, API_HEADER_VALUE_MAX);
    }
    if (j->ttr_ms && j->ttr_ms != JOB_TTR_ONCE_MS && (j->ttr_ms < 1000 || j->ttr_ms > JOB_TTR_MAX_MS))
        return api_fail(e, 400, API_BAD_REQUEST, "ttr_ms must be from 1000 to %lld",
                        (long long)JOB_TTR_MAX_MS);
    return check_combination(j, e);
}

/* The topic, and the callback: at least one; a callback-only job's topic is "". */
static int parse_target(json_t *root, const struct api_limits *lim, struct job *out,
                        struct api_error *e)
{
    json_t *topic = json_object_get(root, "topic"), *cb = json_object_get(root, "callback");

    if (cb && !json_is_null(cb)) {
        if (calljson_read(cb, lim, &out->callback, e) < 0)
            return -1;
        if (!topic || json_is_null(topic)) {
            out->topic = strdup("");
            return out->topic ? 0 : api_fail(e, 503, API_ADD_FAILED, "out of memory");
        }
    }
    return parse_topic(topic, lim, out, e);
}

/* One add from its JSON object (out zeroed by the caller). */
static int parse_add_object(json_t *root, const struct api_limits *lim, int64_t now_ms,
                            struct job *out, int *id_given, struct api_error *e)
{
    if (!json_is_object(root))
        return api_fail(e, 400, API_BAD_REQUEST, "a job must be a JSON object");
    if (parse_id(json_object_get(root, "id"), out, id_given, e) == 0 &&
        parse_target(root, lim, out, e) == 0 &&
        parse_when(root, lim, now_ms, out, e) == 0 &&
        parse_body(json_object_get(root, "body"), json_object_get(root, "body_encoding"), out,
                   e) == 0 &&
        parse_key(json_object_get(root, "key"), out, e) == 0 &&
        parse_headers(json_object_get(root, "headers"), out, e) == 0 &&
        parse_deliver(root, out, e) == 0 && api_check_job(out, lim, now_ms, e) == 0)
        return 0;
    return -1;
}

int api_parse_add(const char *body, size_t len, const struct api_limits *lim, int64_t now_ms,
                  struct job *out, int *id_given, struct api_error *e)
{
    json_t *root;
    int rc;

    memset(out, 0, sizeof(*out));
    *id_given = 0;
    if (!(root = api_json_object(body, len, e)))
        return -1;
    rc = parse_add_object(root, lim, now_ms, out, id_given, e);
    json_decref(root);
    return rc;
}

int api_parse_batch(const char *body, size_t len, size_t max_jobs, const struct api_limits *lim,
                    int64_t now_ms, struct api_batch_job **out, size_t *n, struct api_error *e)
{
    json_t *root, *arr;
    int rc = -1;

    *out = NULL;
    *n = 0;
    if (!(root = api_json_object(body, len, e)))
        return -1;
    arr = json_object_get(root, "jobs");
    if (!json_is_array(arr))
        api_fail(e, 400, API_BAD_REQUEST, "jobs is required and must be an array of jobs");
    else if (json_array_size(arr) == 0)
        api_fail(e, 400, API_BAD_REQUEST, "jobs must hold at least one job");
    else if (json_array_size(arr) > max_jobs)
        api_fail(e, 413, API_TOO_LARGE, "%zu jobs in one batch, over http.max_batch_jobs (%zu)",
                 json_array_size(arr), max_jobs);
    else if (!(*out = calloc(json_array_size(arr), sizeof(**out))))
        api_fail(e, 503, API_ADD_FAILED, "out of memory");
    else
        rc = 0;
    for (size_t i = 0; rc == 0 && i < json_array_size(arr); i++) {
        struct api_batch_job *b = &(*out)[i];
        b->ok = parse_add_object(json_array_get(arr, i), lim, now_ms, &b->job, &b->id_given,
                                 &b->e) == 0;
        (*n)++;
    }
    json_decref(root);
    return rc;
}

void api_batch_free(struct api_batch_job *jobs, size_t n)
{
    for (size_t i = 0; jobs && i < n; i++)
        job_release(&jobs[i].job);
    free(jobs);
}

int api_check_job_id(const char *id, char out[JOB_ID_MAX + 1], struct api_error *e)
{
    char why[128];

    if (!id || id[0] == '\0')
        return api_fail(e, 400, API_BAD_REQUEST, "job_id is required");
    if (job_id_valid(id, strlen(id), why, sizeof(why)) < 0)
        return api_fail(e, 400, API_BAD_REQUEST, "job_id: %s", why);
    memcpy(out, id, strlen(id) + 1);
    return 0;
}

/* The job_id of a request object into out. */
static int job_id_of(json_t *root, char out[JOB_ID_MAX + 1], struct api_error *e)
{
    json_t *v = json_object_get(root, "job_id");

    if (v && !json_is_string(v))
        return api_fail(e, 400, API_BAD_REQUEST, "job_id must be a string");
    if (v && strlen(json_string_value(v)) != json_string_length(v))
        return api_fail(e, 400, API_BAD_REQUEST, "job_id: holds a NUL byte");
    return api_check_job_id(v ? json_string_value(v) : NULL, out, e);
}

int api_parse_job_id(const char *body, size_t len, char out[JOB_ID_MAX + 1], struct api_error *e)
{
    json_t *root = api_json_object(body, len, e);
    int rc;

    if (!root)
        return -1;
    rc = job_id_of(root, out, e);
    json_decref(root);
    return rc;
}

/* The id and the new due time of a reschedule request object. */
static int reschedule_of(json_t *root, const struct api_limits *lim, int64_t now_ms,
                         char id[JOB_ID_MAX + 1], int64_t *due_ms, struct api_error *e)
{
    struct job when = { .id = "" };

    if (job_id_of(root, id, e) < 0 || parse_when(root, lim, now_ms, &when, e) < 0)
        return -1;
    *due_ms = when.due_ms;
    return 0;
}

int api_parse_reschedule(const char *body, size_t len, const struct api_limits *lim,
                         int64_t now_ms, char id[JOB_ID_MAX + 1], int64_t *due_ms,
                         struct api_error *e)
{
    json_t *root = api_json_object(body, len, e);
    int rc;

    if (!root)
        return -1;
    rc = reschedule_of(root, lim, now_ms, id, due_ms, e);
    json_decref(root);
    return rc;
}

/* A query string value as JSON: an integer when it is one in full, else true, which parse_when
 * refuses by name. */
static json_t *query_value(const char *v)
{
    char *end;
    long long n;

    errno = 0;
    n = strtoll(v, &end, 10);
    return v[0] && !*end && errno == 0 ? json_integer(n) : json_true();
}

int api_reschedule_query(const char *const query[API_RESCHEDULE_ARGS],
                         const struct api_limits *lim, int64_t now_ms, char id[JOB_ID_MAX + 1],
                         int64_t *due_ms, struct api_error *e)
{
    static const char *const names[API_RESCHEDULE_ARGS] = { "job_id", "delay", "delay_ms",
                                                            "deliver_at_ms" };
    struct job when = { .id = "" };
    json_t *root;
    int rc;

    if (api_check_job_id(query[0], id, e) < 0)
        return -1;
    if (!(root = json_object()))
        return api_fail(e, 503, API_RESCHEDULE_FAILED, "out of memory");
    for (int i = 1; i < API_RESCHEDULE_ARGS; i++)
        if (query[i])
            json_object_set_new(root, names[i], query_value(query[i]));
    rc = parse_when(root, lim, now_ms, &when, e);
    json_decref(root);
    *due_ms = when.due_ms;
    return rc;
}

int api_parse_group(const char *body, size_t len, int ngroups, int *group, struct api_error *e)
{
    static const char *const members[] = { "group" };
    json_t *root = api_json_object(body, len, e);
    int64_t g;
    int rc = -1;

    if (!root)
        return -1;
    if (api_json_only(root, members, 1, "a release of a group", e) < 0)
        ;
    else if (api_json_int(json_object_get(root, "group"), &g) < 0 || g < 0 || g >= ngroups)
        api_fail(e, 400, API_BAD_REQUEST, "group must be an integer from 0 to %d", ngroups - 1);
    else
        *group = (int)g, rc = 0;
    json_decref(root);
    return rc;
}

int api_parse_pop(const char *body, size_t len, const struct api_limits *lim, struct api_pop *out,
                  struct api_error *e)
{
    static const char *const members[] = { "topic", "topics", "wait_ms", "max", "ttr", "ttr_ms" };
    json_t *root = api_json_object(body, len, e), *w, *m, *list, *t;
    struct job topic = { .id = "" };
    int64_t n;
    size_t i;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    out->max = 1;
    if (!root)
        return -1;
    if (api_json_only(root, members, sizeof(members) / sizeof(members[0]), "a pop", e) < 0)
        goto out;
    list = json_object_get(root, "topics");
    if (list && json_object_get(root, "topic")) {
        api_fail(e, 400, API_BAD_REQUEST, "give either topic or topics");
        goto out;
    }
    if (list && (!json_is_array(list) || json_array_size(list) < 1 ||
                 json_array_size(list) > API_POP_TOPICS_MAX)) {
        api_fail(e, 400, API_BAD_REQUEST, "topics must be an array of 1 to %d topics, the first "
                 "with a ready job serving the pop", API_POP_TOPICS_MAX);
        goto out;
    }
    json_array_foreach(list ? list : NULL, i, t) {
        if (parse_topic(t, lim, &topic, e) < 0)
            goto out;
        snprintf(out->topics[out->ntopics++], sizeof(out->topics[0]), "%s", topic.topic);
        free(topic.topic);
        topic.topic = NULL;
    }
    if (!list) {
        if (parse_topic(json_object_get(root, "topic"), lim, &topic, e) < 0)
            goto out;
        snprintf(out->topics[0], sizeof(out->topics[0]), "%s", topic.topic);
        out->ntopics = 1;
    }
    if (parse_ttr(root, &out->ttr_ms, e) < 0)
        goto out;
    if ((w = json_object_get(root, "wait_ms"))) {
        if (api_json_int(w, &n) < 0 || n < 0 || n > API_POP_WAIT_MAX_MS) {
            api_fail(e, 400, API_BAD_REQUEST, "wait_ms must be an integer from 0 to %d",
                     API_POP_WAIT_MAX_MS);
            goto out;
        }
        out->wait_ms = n;
    }
    if ((m = json_object_get(root, "max"))) {
        if (api_json_int(m, &n) < 0 || n < 1 || n > 100) {
            api_fail(e, 400, API_BAD_REQUEST, "max must be an integer from 1 to 100");
            goto out;
        }
        out->max = (int)n;
    }
    rc = 0;
out:
    free(topic.topic);
    json_decref(root);
    return rc;
}

/* A release's delay: "delay" (s) or "delay_ms", up to job.max_delay_s; 0 when neither. */
static int parse_release_delay(json_t *root, const struct api_limits *lim, int64_t *out,
                               struct api_error *e)
{
    json_t *s = json_object_get(root, "delay"), *ms = json_object_get(root, "delay_ms");
    int64_t v;

    *out = 0;
    if (s && ms)
        return api_fail(e, 400, API_BAD_REQUEST, "give only one of delay, delay_ms");
    if (!s && !ms)
        return 0;
    if (api_json_int(s ? s : ms, &v) < 0)
        v = -1;
    if (v < 0 || (s ? v > lim->max_delay_ms / 1000 : v > lim->max_delay_ms))
        return api_fail(e, 400, API_BAD_REQUEST, "%s must be an integer from 0 to %lld",
                        s ? "delay" : "delay_ms",
                        (long long)(s ? lim->max_delay_ms / 1000 : lim->max_delay_ms));
    *out = s ? v * 1000 : v;
    return 0;
}

static int parse_receipt(json_t *v, char out[API_RECEIPT_MAX + 1], struct api_error *e)
{
    if (!v || json_is_null(v))
        return api_fail(e, 400, API_BAD_REQUEST,
                        "receipt is required: the receipt the pop handed out with the job");
    if (!json_is_string(v) || json_string_length(v) == 0 ||
        json_string_length(v) > API_RECEIPT_MAX || !strchr(json_string_value(v), ':') ||
        strlen(json_string_value(v)) != json_string_length(v))
        return api_fail(e, 400, API_BAD_REQUEST, "receipt is not one a pop hands out (a string "
                        "of at most %d bytes, as the pop gave it)", API_RECEIPT_MAX);
    snprintf(out, API_RECEIPT_MAX + 1, "%s", json_string_value(v));
    return 0;
}

static int parse_reason(json_t *v, char out[API_REASON_MAX + 1], struct api_error *e)
{
    out[0] = '\0';
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v) || json_string_length(v) > API_REASON_MAX ||
        strlen(json_string_value(v)) != json_string_length(v))
        return api_fail(e, 400, API_BAD_REQUEST, "reason must be a string of at most %d bytes",
                        API_REASON_MAX);
    snprintf(out, API_REASON_MAX + 1, "%s", json_string_value(v));
    return 0;
}

/* A member of root that an operation of verb does not have is refused, naming it (a misspelt
 * ttr would leave the default time to run unsaid): 0, or -1 with e set. */
static int known_members(json_t *root, enum api_verb verb, struct api_error *e)
{
    static const char *const plain[] = { "job_id", "receipt" };
    static const char *const release[] = { "job_id", "receipt", "delay", "delay_ms" };
    static const char *const touch[] = { "job_id", "receipt", "ttr", "ttr_ms" };
    static const char *const bury[] = { "job_id", "receipt", "reason" };

    switch (verb) {
    case API_RELEASE: return api_json_only(root, release, 4, "a release", e);
    case API_TOUCH: return api_json_only(root, touch, 4, "a touch", e);
    case API_BURY: return api_json_only(root, bury, 3, "a bury", e);
    default: return api_json_only(root, plain, 2, "a finish", e);
    }
}

/* One operation of verb from the JSON object root. 0, or -1 with e set. */
static int read_pull_op(json_t *root, enum api_verb verb, const struct api_limits *lim,
                        struct api_pull_op *out, struct api_error *e)
{
    memset(out, 0, sizeof(*out));
    if (!json_is_object(root))
        return api_fail(e, 400, API_BAD_REQUEST, "each of jobs must be an object");
    if (known_members(root, verb, e) < 0 || job_id_of(root, out->id, e) < 0 ||
        parse_receipt(json_object_get(root, "receipt"), out->receipt, e) < 0)
        return -1;
    if (verb == API_RELEASE && parse_release_delay(root, lim, &out->delay_ms, e) < 0)
        return -1;
    if (verb == API_TOUCH && parse_ttr(root, &out->ttr_ms, e) < 0)
        return -1;
    if (verb == API_BURY && parse_reason(json_object_get(root, "reason"), out->reason, e) < 0)
        return -1;
    return 0;
}

int api_parse_pull_op(const char *body, size_t len, enum api_verb verb,
                      const struct api_limits *lim, struct api_pull_op *out, struct api_error *e)
{
    json_t *root = api_json_object(body, len, e);
    int rc;

    memset(out, 0, sizeof(*out));
    if (!root)
        return -1;
    rc = read_pull_op(root, verb, lim, out, e);
    json_decref(root);
    return rc;
}

int api_parse_pull_ops(const char *body, size_t len, enum api_verb verb,
                       const struct api_limits *lim, struct api_pull_batch *out,
                       struct api_error *e)
{
    json_t *root = api_json_object(body, len, e), *list, *item;
    size_t i;

    memset(out, 0, sizeof(*out));
    if (!root)
        return -1;
    if (!(list = json_object_get(root, "jobs"))) {
        out->n = 1;
        out->ops = calloc(1, sizeof(*out->ops));
        out->errs = calloc(1, sizeof(*out->errs));
        if (!out->ops || !out->errs) {
            api_pull_batch_free(out);
            json_decref(root);
            return api_fail(e, 503, API_UNAVAILABLE, "out of memory");
        }
        out->errs[0].status = read_pull_op(root, verb, lim, &out->ops[0], &out->errs[0]) < 0
                              ? out->errs[0].status : 0;
        json_decref(root);
        if (out->errs[0].status) {
            *e = out->errs[0];
            api_pull_batch_free(out);
            return -1;
        }
        return 0;
    }
    if (json_object_size(root) > 1) {
        static const char *const jobs[] = { "jobs" };
        api_json_only(root, jobs, 1, "a request of many jobs", e);
        json_decref(root);
        return -1;
    }
    if (!json_is_array(list) || json_array_size(list) < 1 ||
        json_array_size(list) > API_PULL_OPS_MAX) {
        json_decref(root);
        return api_fail(e, 400, API_BAD_REQUEST, "jobs must be an array of 1 to %d jobs, each "
                        "{\"job_id\", \"receipt\", ...}", API_PULL_OPS_MAX);
    }
    json_array_foreach(list, i, item)
        if (!json_is_object(item)) {
            json_decref(root);
            return api_fail(e, 400, API_BAD_REQUEST, "jobs[%zu] must be an object "
                            "{\"job_id\", \"receipt\", ...}", i);
        }
    out->batch = 1;
    out->n = json_array_size(list);
    out->ops = calloc(out->n, sizeof(*out->ops));
    out->errs = calloc(out->n, sizeof(*out->errs));
    if (!out->ops || !out->errs) {
        api_pull_batch_free(out);
        json_decref(root);
        return api_fail(e, 503, API_UNAVAILABLE, "out of memory");
    }
    json_array_foreach(list, i, item)
        if (read_pull_op(item, verb, lim, &out->ops[i], &out->errs[i]) == 0)
            out->errs[i].status = 0;   /* no fault: the job's own answer comes from the pull */
    json_decref(root);
    return 0;
}

void api_pull_batch_free(struct api_pull_batch *b)
{
    free(b->ops);
    free(b->errs);
    memset(b, 0, sizeof(*b));
}

/* calljson: the JSON of a job's callback: the "callback" object of an add or a dq-callback
 * header read and checked (its target, method, headers, timeout and retry bounds), written back
 * in the same form, and shown by get. The contract is in include/core/calljson.h. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/apijson.h"
#include "core/calljson.h"
#include "core/envelope.h"

#define CALLBACK_URL_MAX 2048  /* as callbacks.h's CB_URL_MAX: browsers' common bound */

/* A header of a callback: a token name (RFC 9110) that is none of those delayqd sets or that
 * frame the request, a value without line breaks. NULL when fine, else what is wrong. */
static const char *callback_header_fault(const char *name, json_t *val)
{
    static const char *const reserved[] = { "webhook-id", "webhook-timestamp", "webhook-signature",
                                            "webhook-attempt",
                                            "host", "content-length", "transfer-encoding",
                                            "connection", "expect", "user-agent" };
    const char *v;

    if (!name[0] || strlen(name) > JOB_HEADER_NAME_MAX ||
        strspn(name, "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != strlen(name))
        return "its name must be 1 to 256 token characters";
    for (size_t i = 0; i < sizeof(reserved) / sizeof(reserved[0]); i++)
        if (strcasecmp(name, reserved[i]) == 0)
            return "delayqd sets it";
    if (!json_is_string(val) || json_string_length(val) > API_HEADER_VALUE_MAX)
        return "its value must be a string of at most 4096 bytes";
    for (v = json_string_value(val); *v; v++)
        if ((unsigned char)*v < 0x20 && *v != '\t')
            return "its value may not hold control characters";
    return strlen(json_string_value(val)) == json_string_length(val) ? NULL
           : "its value may not hold NUL";
}

static int parse_callback_headers(json_t *v, struct job_callback *cb, struct api_error *e)
{
    const char *name, *fault;
    json_t *val;

    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v) || json_object_size(v) > JOB_HEADERS_MAX)
        return api_fail(e, 400, API_BAD_REQUEST, "callback.headers must be an object of at most "
                        "%d strings", JOB_HEADERS_MAX);
    if (!(cb->headers = calloc(json_object_size(v) + 1, sizeof(*cb->headers))))
        return api_fail(e, 503, API_ADD_FAILED, "out of memory");
    json_object_foreach(v, name, val) {
        struct job_header *h = &cb->headers[cb->nheaders];
        if ((fault = callback_header_fault(name, val)))
            return api_fail(e, 400, API_BAD_REQUEST, "callback.headers %.256s: %s", name, fault);
        h->name = strdup(name);
        h->value = strdup(json_string_value(val));
        cb->nheaders++;
        if (!h->name || !h->value)
            return api_fail(e, 503, API_ADD_FAILED, "out of memory");
    }
    return 0;
}

/* "retry": {max_attempts, min_backoff_ms, max_backoff_ms, max_retry_duration_ms}: a job's own
 * lower bounds (callplan.h takes the lower of the job's and the config's). */
static int parse_callback_retry(json_t *v, struct job_callback *cb, struct api_error *e)
{
    const char *name;
    json_t *val;

    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return api_fail(e, 400, API_BAD_REQUEST, "callback.retry must be an object");
    json_object_foreach(v, name, val) {
        if (strcmp(name, "max_attempts") && strcmp(name, "min_backoff_ms") &&
            strcmp(name, "max_backoff_ms") && strcmp(name, "max_retry_duration_ms"))
            return api_fail(e, 400, API_BAD_REQUEST, "callback.retry.%.64s: unknown field (max_attempts, "
                            "min_backoff_ms, max_backoff_ms, max_retry_duration_ms)", name);
    }
    return api_json_member_int(v, "callback.retry.", "max_attempts", 1, CALL_ATTEMPTS_MAX, &cb->max_attempts, e) < 0 ||
           api_json_member_int(v, "callback.retry.", "min_backoff_ms", 10, CALL_BACKOFF_MAX_MS, &cb->min_backoff_ms, e) < 0 ||
           api_json_member_int(v, "callback.retry.", "max_backoff_ms", 10, CALL_BACKOFF_MAX_MS, &cb->max_backoff_ms, e) < 0 ||
           api_json_member_int(v, "callback.retry.", "max_retry_duration_ms", 1, CALL_RETRY_DURATION_MAX_MS,
                      &cb->max_retry_duration_ms, e) < 0 ? -1 : 0;
}

/* 1 when an http:// or https:// url names a user (user@ or user:password@ before its host).
 * get, schedules and dead letters show a callback's URL to the read token, never its headers'
 * values: credentials belong in the headers. */
static int url_has_userinfo(const char *url)
{
    const char *authority = strstr(url, "://") + 3;

    return memchr(authority, '@', strcspn(authority, "/?#")) != NULL;
}

/* The URL or the endpoint's name, exactly one. */
static int parse_callback_target(json_t *o, const struct api_limits *lim, struct job_callback *cb,
                                 struct api_error *e)
{
    json_t *url = json_object_get(o, "url"), *ep = json_object_get(o, "endpoint");
    const char *u;
    int i;

    if (!url == !ep)
        return api_fail(e, 400, API_BAD_REQUEST, "callback needs exactly one of url, endpoint");
    if (ep) {
        if (!json_is_string(ep))
            return api_fail(e, 400, API_BAD_REQUEST, "callback.endpoint must be a string");
        for (i = 0; i < lim->nendpoints && strcmp(lim->endpoints[i].name, json_string_value(ep)); i++)
            ;
        if (i == lim->nendpoints)
            return api_fail(e, 400, API_BAD_REQUEST, "callback.endpoint %.64s is not one of "
                            "callbacks.endpoints in the config", json_string_value(ep));
        cb->endpoint = strdup(json_string_value(ep));
        return cb->endpoint ? 0 : api_fail(e, 503, API_ADD_FAILED, "out of memory");
    }
    if (lim->no_urls)
        return api_fail(e, 400, API_BAD_REQUEST, "callback.url: only a named endpoint may be "
                        "called (%s); give \"endpoint\"", lim->no_urls);
    u = json_is_string(url) ? json_string_value(url) : "";
    if ((strncasecmp(u, "http://", 7) != 0 && strncasecmp(u, "https://", 8) != 0) ||
        json_string_length(url) > CALLBACK_URL_MAX || strlen(u) != json_string_length(url) ||
        strcspn(u, " \t\r\n") != strlen(u))
        return api_fail(e, 400, API_BAD_REQUEST, "callback.url must be an http:// or https:// URL "
                        "of at most %d characters, without spaces", CALLBACK_URL_MAX);
    if (url_has_userinfo(u))
        return api_fail(e, 400, API_BAD_REQUEST, "callback.url may not hold credentials "
                        "(user:password@): give them in callback.headers, which the read token "
                        "does not see");
    cb->url = strdup(u);
    return cb->url ? 0 : api_fail(e, 503, API_ADD_FAILED, "out of memory");
}

int calljson_read(void *obj, const struct api_limits *lim, struct job_callback **out,
                  struct api_error *e)
{
    static const char *const fields[] = { "url", "endpoint", "method", "headers", "timeout_ms",
                                          "retry", NULL };
    json_t *o = obj, *method, *val;
    const char *name;
    struct job_callback *cb;

    *out = NULL;
    if (!json_is_object(o))
        return api_fail(e, 400, API_BAD_REQUEST, "callback must be an object {\"url\": ...}");
    json_object_foreach(o, name, val) {
        const char *const *f = fields;
        while (*f && strcmp(*f, name))
            f++;
        if (!*f)
            return api_fail(e, 400, API_BAD_REQUEST, "callback.%.64s: unknown field (url, endpoint, "
                            "method, headers, timeout_ms, retry)", name);
    }
    if (!(*out = cb = calloc(1, sizeof(*cb))))
        return api_fail(e, 503, API_ADD_FAILED, "out of memory");
    method = json_object_get(o, "method");
    if (method && !json_is_null(method)) {
        const char *m = json_is_string(method) ? json_string_value(method) : "";
        if (strcmp(m, "POST") && strcmp(m, "PUT"))
            return api_fail(e, 400, API_BAD_REQUEST, "callback.method must be \"POST\" or \"PUT\"");
        cb->put = strcmp(m, "PUT") == 0;
    }
    return parse_callback_target(o, lim, cb, e) < 0 ||
           parse_callback_headers(json_object_get(o, "headers"), cb, e) < 0 ||
           api_json_member_int(o, "callback.", "timeout_ms", CALL_TIMEOUT_MIN_MS, CALL_TIMEOUT_MAX_MS,
                      &cb->timeout_ms, e) < 0 ||
           parse_callback_retry(json_object_get(o, "retry"), cb, e) < 0 ? -1 : 0;
}

int calljson_parse(const char *text, size_t len, const struct api_limits *lim,
                   struct job_callback **out, struct api_error *e)
{
    json_error_t je;
    json_t *o = json_loadb(text, len, 0, &je);
    int rc;

    *out = NULL;
    if (!o)
        return api_fail(e, 400, API_BAD_REQUEST, "callback is not JSON: %s", je.text);
    rc = calljson_read(o, lim, out, e);
    json_decref(o);
    return rc;
}

char *calljson_text(const struct job_callback *cb)
{
    json_t *o = json_object(), *h = json_object(), *r = json_object();
    char *text;

    json_object_set_new(o, cb->url ? "url" : "endpoint", json_string(cb->url ? cb->url : cb->endpoint));
    if (cb->put)
        json_object_set_new(o, "method", json_string("PUT"));
    for (size_t i = 0; i < cb->nheaders; i++)
        json_object_set_new(h, cb->headers[i].name, api_json_str(cb->headers[i].value));
    if (cb->timeout_ms)
        json_object_set_new(o, "timeout_ms", json_integer(cb->timeout_ms));
    if (cb->max_attempts)
        json_object_set_new(r, "max_attempts", json_integer(cb->max_attempts));
    if (cb->min_backoff_ms)
        json_object_set_new(r, "min_backoff_ms", json_integer(cb->min_backoff_ms));
    if (cb->max_backoff_ms)
        json_object_set_new(r, "max_backoff_ms", json_integer(cb->max_backoff_ms));
    if (cb->max_retry_duration_ms)
        json_object_set_new(r, "max_retry_duration_ms", json_integer(cb->max_retry_duration_ms));
    json_object_set_new(o, "headers", h);
    json_object_set_new(o, "retry", r);
    if (!json_object_size(h))
        json_object_del(o, "headers");
    if (!json_object_size(r))
        json_object_del(o, "retry");
    text = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return text;
}

void *calljson_view(const struct job_callback *cb, enum job_state state, int64_t due_ms)
{
    json_t *o = json_object();

    json_object_set_new(o, cb->url ? "url" : "endpoint", json_string(cb->url ? cb->url : cb->endpoint));
    json_object_set_new(o, "method", json_string(cb->put ? "PUT" : "POST"));
    json_object_set_new(o, "attempts", json_integer(cb->attempts));
    json_object_set_new(o, "last_status", cb->last_status ? json_integer(cb->last_status) : json_null());
    json_object_set_new(o, "last_error", cb->last_error ? api_json_str(cb->last_error) : json_null());
    json_object_set_new(o, "next_attempt_ms", cb->attempts && state == JOB_PENDING
                                              ? json_integer(due_ms) : json_null());
    return o;
}

int calljson_body_is_json(const char *body, size_t len)
{
    json_t *v;

    while (len && (*body == ' ' || *body == '\t' || *body == '\r' || *body == '\n'))
        body++, len--;
    if (!len || (*body != '{' && *body != '['))
        return 0;
    if (!(v = json_loadb(body, len, 0, NULL)))
        return 0;
    json_decref(v);
    return 1;
}

/* Hides the header values of the callback object cb (null each). */
static void hide_in_callback(json_t *cb)
{
    json_t *h = json_object_get(cb, "headers"), *v;
    const char *name;

    if (json_is_object(h))
        json_object_foreach(h, name, v)
            json_object_set_new(h, name, json_null());
}

/* Walks v: every "callback" object's headers, and every "dq-callback" text (a dead letter's
 * header) read, hidden and written again. */
static void hide_walk(json_t *v)
{
    const char *key;
    json_t *x;
    size_t i;

    if (json_is_array(v)) {
        json_array_foreach(v, i, x)
            hide_walk(x);
        return;
    }
    if (!json_is_object(v))
        return;
    json_object_foreach(v, key, x) {
        if (strcmp(key, "callback") == 0 && json_is_object(x)) {
            hide_in_callback(x);
        } else if (strcmp(key, HDR_CALLBACK) == 0 && json_is_string(x)) {
            json_t *cb = json_loadb(json_string_value(x), json_string_length(x), 0, NULL);
            char *text;
            hide_in_callback(cb);
            text = cb ? json_dumps(cb, JSON_COMPACT) : NULL;
            json_object_set_new(v, key, text ? json_string(text) : json_null());
            free(text);
            json_decref(cb);
        } else {
            hide_walk(x);
        }
    }
}

void *calljson_hidden(void *data)
{
    json_t *copy = data ? json_deep_copy(data) : NULL;

    hide_walk(copy);
    return copy;
}

/* api: the JSON of the HTTP API, wire compatible with go-delayqueue: add and id requests
 * parsed into a job, answers and job data built with jansson. Owns the UTF-8 cleaning of every
 * message text. The contract is in include/core/api.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/api.h"
#include "core/envelope.h"
#include "core/pending.h"

#define KEY_MAX 4096     /* a Kafka key is an id, not a payload */
#define HEADER_VALUE_MAX 4096
#define CALLBACK_URL_MAX 2048  /* as callbacks.h's CB_URL_MAX: browsers' common bound */

/* Length of the valid UTF-8 sequence at s (1-4, within the avail >= 1 bytes there), or 0 when
 * the bytes there are not one: no overlong form, no surrogate, nothing above U+10FFFF
 * (RFC 3629), as jansson requires. */
static size_t utf8_seq_len(const unsigned char *s, size_t avail)
{
    size_t n = s[0] < 0x80 ? 1 : s[0] >= 0xC2 && s[0] <= 0xDF ? 2 : (s[0] & 0xF0) == 0xE0 ? 3
             : s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : 0;
    unsigned char lo = 0x80, hi = 0xBF;   /* the range of the second byte */

    if (n > avail)
        return 0;
    if (s[0] == 0xE0)
        lo = 0xA0;
    else if (s[0] == 0xED)
        hi = 0x9F;
    else if (s[0] == 0xF0)
        lo = 0x90;
    else if (s[0] == 0xF4)
        hi = 0x8F;
    if (n > 1 && (s[1] < lo || s[1] > hi))
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

/* Replaces every byte that is not part of valid UTF-8 with '?': a message may quote client text
 * or a library's, cut by snprintf anywhere, and must stay a JSON string. */
static void utf8_sanitize(char *s)
{
    size_t left = strlen(s);

    while (*s) {
        size_t n = utf8_seq_len((const unsigned char *)s, left);
        if (n == 0)
            n = 1, *s = '?';
        s += n;
        left -= n;
    }
}

void *api_json_text(const char *s, size_t len, size_t max)
{
    size_t at = 0, i = 0, n;
    char *buf = malloc((len < max ? len : max) * 3 + 1);
    json_t *j;

    if (!buf)
        return json_null();
    for (; i < len && i < max; i += n ? n : 1) {
        n = utf8_seq_len((const unsigned char *)s + i, len - i);
        if (n && i + n > max)
            break;   /* the cut falls inside a character */
        memcpy(buf + at, n ? s + i : "\xEF\xBF\xBD", n ? n : 3);
        at += n ? n : 3;
    }
    j = json_stringn(buf, at);
    free(buf);
    return j ? j : json_null();
}

int api_fail(struct api_error *e, int status, int code, const char *fmt, ...)
{
    va_list ap;

    e->status = status;
    e->code = code;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    utf8_sanitize(e->message);
    return -1;
}

static json_t *load_object(const char *body, size_t len, struct api_error *e)
{
    json_error_t jerr;
    /* NUL is allowed as JSON allows it (in a body); names and ids refuse it below. */
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);

    if (!root) {
        api_fail(e, 400, API_BAD_REQUEST, "malformed JSON at line %d column %d: %s", jerr.line,
                 jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        api_fail(e, 400, API_BAD_REQUEST, "request body must be a JSON object");
        return NULL;
    }
    return root;
}

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
    return out->topic ? 0 : api_fail(e, 500, API_ADD_FAILED, "out of memory");
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

static int parse_body(json_t *v, struct job *out, struct api_error *e)
{
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
    return out->body ? 0 : api_fail(e, 500, API_ADD_FAILED, "out of memory");
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
    return out->key ? 0 : api_fail(e, 500, API_ADD_FAILED, "out of memory");
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
        return api_fail(e, 500, API_ADD_FAILED, "out of memory");
    json_object_foreach(v, name, val) {
        struct job_header *h = &out->headers[out->nheaders];
        if (name[0] == '\0' || strlen(name) > JOB_HEADER_NAME_MAX)
            return api_fail(e, 400, API_BAD_REQUEST, "header names must be 1-%d bytes",
                            JOB_HEADER_NAME_MAX);
        if (envelope_is_control(name))
            return api_fail(e, 400, API_BAD_REQUEST, "header %s: names starting dq- are reserved",
                            name);
        if (!json_is_string(val) || json_string_length(val) > HEADER_VALUE_MAX ||
            strlen(json_string_value(val)) != json_string_length(val))
            return api_fail(e, 400, API_BAD_REQUEST, "header %s must be a string of at most %d bytes",
                            name, HEADER_VALUE_MAX);
        h->name = strdup(name);
        h->value = strdup(json_string_value(val));
        out->nheaders++;
        if (!h->name || !h->value)
            return api_fail(e, 500, API_ADD_FAILED, "out of memory");
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

static json_t *text_value(const char *text)
{
    return api_json_text(text, strlen(text), strlen(text));
}

/* A header of a callback: a token name (RFC 9110) that is none of those delayqd sets or that
 * frame the request, a value without line breaks. NULL when fine, else what is wrong. */
static const char *callback_header_fault(const char *name, json_t *val)
{
    static const char *const reserved[] = { "webhook-id", "webhook-timestamp", "webhook-signature",
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
    if (!json_is_string(val) || json_string_length(val) > HEADER_VALUE_MAX)
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
        return api_fail(e, 500, API_ADD_FAILED, "out of memory");
    json_object_foreach(v, name, val) {
        struct job_header *h = &cb->headers[cb->nheaders];
        if ((fault = callback_header_fault(name, val)))
            return api_fail(e, 400, API_BAD_REQUEST, "callback.headers %.256s: %s", name, fault);
        h->name = strdup(name);
        h->value = strdup(json_string_value(val));
        cb->nheaders++;
        if (!h->name || !h->value)
            return api_fail(e, 500, API_ADD_FAILED, "out of memory");
    }
    return 0;
}

int api_json_member_int(const void *obj, const char *what, const char *name, int64_t lo,
                        int64_t hi, int64_t *out, struct api_error *e)
{
    json_t *v = json_object_get(obj, name);
    int64_t n;

    if (!v || json_is_null(v))
        return 0;
    if (api_json_int(v, &n) < 0 || n < lo || n > hi)
        return api_fail(e, 400, API_BAD_REQUEST, "%s%s must be an integer from %lld to %lld", what,
                        name, (long long)lo, (long long)hi);
    *out = n;
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
        return cb->endpoint ? 0 : api_fail(e, 500, API_ADD_FAILED, "out of memory");
    }
    u = json_is_string(url) ? json_string_value(url) : "";
    if ((strncasecmp(u, "http://", 7) != 0 && strncasecmp(u, "https://", 8) != 0) ||
        json_string_length(url) > CALLBACK_URL_MAX || strlen(u) != json_string_length(url) ||
        strcspn(u, " \t\r\n") != strlen(u))
        return api_fail(e, 400, API_BAD_REQUEST, "callback.url must be an http:// or https:// URL "
                        "of at most %d characters, without spaces", CALLBACK_URL_MAX);
    cb->url = strdup(u);
    return cb->url ? 0 : api_fail(e, 500, API_ADD_FAILED, "out of memory");
}

static int parse_callback_object(json_t *o, const struct api_limits *lim, struct job_callback **out,
                                 struct api_error *e)
{
    static const char *const fields[] = { "url", "endpoint", "method", "headers", "timeout_ms",
                                          "retry", NULL };
    json_t *method, *val;
    const char *name;
    struct job_callback *cb;

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
        return api_fail(e, 500, API_ADD_FAILED, "out of memory");
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

int api_parse_callback(const char *text, size_t len, const struct api_limits *lim,
                       struct job_callback **out, struct api_error *e)
{
    json_error_t je;
    json_t *o = json_loadb(text, len, 0, &je);
    int rc;

    *out = NULL;
    if (!o)
        return api_fail(e, 400, API_BAD_REQUEST, "callback is not JSON: %s", je.text);
    rc = parse_callback_object(o, lim, out, e);
    json_decref(o);
    return rc;
}

char *api_callback_json(const struct job_callback *cb)
{
    json_t *o = json_object(), *h = json_object(), *r = json_object();
    char *text;

    json_object_set_new(o, cb->url ? "url" : "endpoint", json_string(cb->url ? cb->url : cb->endpoint));
    if (cb->put)
        json_object_set_new(o, "method", json_string("PUT"));
    for (size_t i = 0; i < cb->nheaders; i++)
        json_object_set_new(h, cb->headers[i].name, text_value(cb->headers[i].value));
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

int api_is_json(const char *body, size_t len)
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

/* The topic, and the callback: at least one; a callback-only job's topic is "". */
static int parse_target(json_t *root, const struct api_limits *lim, struct job *out,
                        struct api_error *e)
{
    json_t *topic = json_object_get(root, "topic"), *cb = json_object_get(root, "callback");

    if (cb && !json_is_null(cb)) {
        if (parse_callback_object(cb, lim, &out->callback, e) < 0)
            return -1;
        if (!topic || json_is_null(topic)) {
            out->topic = strdup("");
            return out->topic ? 0 : api_fail(e, 500, API_ADD_FAILED, "out of memory");
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
        parse_body(json_object_get(root, "body"), out, e) == 0 &&
        parse_key(json_object_get(root, "key"), out, e) == 0 &&
        parse_headers(json_object_get(root, "headers"), out, e) == 0 &&
        parse_deliver(root, out, e) == 0)
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
    if (!(root = load_object(body, len, e)))
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
    if (!(root = load_object(body, len, e)))
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
        api_fail(e, 500, API_ADD_FAILED, "out of memory");
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
    json_t *root = load_object(body, len, e);
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
    json_t *root = load_object(body, len, e);
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
        return api_fail(e, 500, API_BAD_REQUEST, "out of memory");
    for (int i = 1; i < API_RESCHEDULE_ARGS; i++)
        if (query[i])
            json_object_set_new(root, names[i], query_value(query[i]));
    rc = parse_when(root, lim, now_ms, &when, e);
    json_decref(root);
    *due_ms = when.due_ms;
    return rc;
}

char *api_response(int code, const char *message, void *data)
{
    json_t *root = json_object();
    char *text, *msg = strdup(message);

    /* A message may quote client or library text: keep it a JSON string whatever it holds. */
    if (msg)
        utf8_sanitize(msg);
    json_object_set_new(root, "code", json_integer(code));
    json_object_set_new(root, "message", json_string(msg ? msg : "out of memory"));
    json_object_set_new(root, "data", data ? (json_t *)data : json_null());
    text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    free(msg);
    return text;
}

void api_data_free(void *data)
{
    json_decref((json_t *)data);
}

void *api_job_id_data(const char *id)
{
    return json_pack("{s:s}", "job_id", id);
}

void *api_rescheduled_data(const char *id, int64_t due_ms)
{
    return json_pack("{s:s, s:I, s:I}", "job_id", id, "exec_time", (json_int_t)(due_ms / 1000),
                     "exec_time_ms", (json_int_t)due_ms);
}

/* A JSON string of text that may hold anything (a record's bytes): invalid UTF-8 becomes '?'. */

static json_t *headers_object(const struct job *job);

/* A job's callback as get shows it: the target, and how its calls went (next_attempt_ms: when
 * a failed call is made again, while the job waits for it). */
static json_t *callback_object(const struct job_callback *cb, enum job_state state, int64_t due_ms)
{
    json_t *o = json_object();

    json_object_set_new(o, cb->url ? "url" : "endpoint", json_string(cb->url ? cb->url : cb->endpoint));
    json_object_set_new(o, "method", json_string(cb->put ? "PUT" : "POST"));
    json_object_set_new(o, "attempts", json_integer(cb->attempts));
    json_object_set_new(o, "last_status", cb->last_status ? json_integer(cb->last_status) : json_null());
    json_object_set_new(o, "last_error", cb->last_error ? text_value(cb->last_error) : json_null());
    json_object_set_new(o, "next_attempt_ms", cb->attempts && state == JOB_PENDING
                                              ? json_integer(due_ms) : json_null());
    return o;
}

void *api_job_data(const struct job *job, enum job_state state, int64_t delivered_ms,
                   const char *error)
{
    json_t *d = json_object(), *h = headers_object(job);
    json_object_set_new(d, "id", json_string(job->id));
    json_object_set_new(d, "topic", json_string(job->topic));
    json_object_set_new(d, "delay", json_integer(job->delay_ms / 1000));
    json_object_set_new(d, "exec_time", json_integer(job->due_ms / 1000));
    json_object_set_new(d, "body", json_stringn(job->body, job->body_len));
    json_object_set_new(d, "key", json_string(job->key ? job->key : job->id));
    json_object_set_new(d, "headers", h);
    json_object_set_new(d, "state", json_string(job_state_name(state)));
    json_object_set_new(d, "delay_ms", json_integer(job->delay_ms));
    json_object_set_new(d, "exec_time_ms", json_integer(job->due_ms));
    json_object_set_new(d, "created_ms", json_integer(job->created_ms));
    json_object_set_new(d, "delivered_ms", delivered_ms >= 0 ? json_integer(delivered_ms) : json_null());
    json_object_set_new(d, "error", error && error[0] ? text_value(error) : json_null());
    if (job->deliver != JOB_DELIVER_AUTO)
        json_object_set_new(d, "deliver", json_string(job->deliver == JOB_DELIVER_PULL ? "pull"
                                                                                        : "kafka"));
    if (job->ttr_ms == JOB_TTR_ONCE_MS)
        json_object_set_new(d, "once", json_true());
    else if (job->ttr_ms > 0)
        json_object_set_new(d, "ttr_ms", json_integer(job->ttr_ms));
    if (job->callback)
        json_object_set_new(d, "callback", callback_object(job->callback, state, job->due_ms));
    if (job->sched)
        json_object_set_new(d, "schedule", json_pack("{s:s, s:I}", "id", job->sched->id,
                                                     "generation", (json_int_t)job->sched->gen));
    return d;
}

void *api_batch_data(const struct api_job_answer *answers, size_t n)
{
    json_t *list = json_array();
    size_t added = 0, ok = 0;

    for (size_t i = 0; i < n; i++) {
        const struct api_job_answer *a = &answers[i];
        char *msg = strdup(a->message);
        if (msg)
            utf8_sanitize(msg);
        json_array_append_new(list, json_pack("{s:i, s:i, s:s, s:o}", "status", a->status,
                                              "code", a->code, "message", msg ? msg : "out of memory",
                                              "job_id", a->job_id[0] ? json_string(a->job_id)
                                                                     : json_null()));
        free(msg);
        ok += a->code == API_OK;
        added += a->code == API_OK && a->fresh;
    }
    return json_pack("{s:I, s:I, s:I, s:o}", "added", (json_int_t)added, "already",
                     (json_int_t)(ok - added), "failed", (json_int_t)(n - ok), "jobs", list);
}

void *api_stats_data(const struct pending_view *v, const struct levels *lv)
{
    json_t *d = json_object(), *level = json_object(), *due = json_object();

    for (int i = 0; i < lv->n; i++)
        json_object_set_new(level, lv->name[i], json_integer(v->by_level[i]));
    for (int k = 0; k < PENDING_DUES; k++)
        json_object_set_new(due, pending_due_names[k], json_integer(v->by_due[k]));
    json_object_set_new(d, "pending", json_integer(v->pending));
    json_object_set_new(d, "by_level", level);
    json_object_set_new(d, "by_due", due);
    json_object_set_new(d, "overdue_ms", json_integer(v->overdue_ms));
    return d;
}

int api_json_int(const void *json, int64_t *out)
{
    const json_t *v = json;
    double d;

    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return 0;
    }
    if (!json_is_real(v))
        return -1;
    d = json_real_value(v);
    if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0) || d != (double)(int64_t)d)
        return -1;
    *out = (int64_t)d;
    return 0;
}

int api_query_int(const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    long long n;

    if (!v)
        return 0;
    errno = 0;
    n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < lo || n > hi)
        return -1;
    *out = n;
    return 0;
}

int api_parse_group(const char *body, size_t len, int ngroups, int *group, struct api_error *e)
{
    json_t *root = load_object(body, len, e);
    int64_t g;
    int rc = -1;

    if (!root)
        return -1;
    if (api_json_int(json_object_get(root, "group"), &g) < 0 || g < 0 || g >= ngroups)
        api_fail(e, 400, API_BAD_REQUEST, "group must be an integer from 0 to %d", ngroups - 1);
    else
        *group = (int)g, rc = 0;
    json_decref(root);
    return rc;
}

void *api_release_data(int group, const char *owner)
{
    return json_pack("{s:i, s:s?}", "group", group, "owner", owner[0] ? owner : NULL);
}

int api_parse_pop(const char *body, size_t len, const struct api_limits *lim, struct api_pop *out,
                  struct api_error *e)
{
    json_t *root = load_object(body, len, e), *w, *m;
    struct job topic = { .id = "" };
    int64_t n;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    out->max = 1;
    if (!root)
        return -1;
    if (parse_topic(json_object_get(root, "topic"), lim, &topic, e) < 0 ||
        parse_ttr(root, &out->ttr_ms, e) < 0)
        goto out;
    snprintf(out->topics[0], sizeof(out->topics[0]), "%s", topic.topic);
    out->ntopics = 1;
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
    if (!json_is_string(v) || json_string_length(v) == 0 ||
        json_string_length(v) > API_RECEIPT_MAX || !strchr(json_string_value(v), ':'))
        return api_fail(e, 400, API_BAD_REQUEST,
                        "receipt is required: the receipt the pop handed out with the job");
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

int api_parse_pull_op(const char *body, size_t len, enum api_verb verb,
                      const struct api_limits *lim, struct api_pull_op *out, struct api_error *e)
{
    json_t *root = load_object(body, len, e);
    int rc = -1;

    memset(out, 0, sizeof(*out));
    if (!root)
        return -1;
    if (job_id_of(root, out->id, e) < 0 ||
        parse_receipt(json_object_get(root, "receipt"), out->receipt, e) < 0)
        goto out;
    if (verb == API_RELEASE && parse_release_delay(root, lim, &out->delay_ms, e) < 0)
        goto out;
    if (verb == API_TOUCH && parse_ttr(root, &out->ttr_ms, e) < 0)
        goto out;
    if (verb == API_BURY && parse_reason(json_object_get(root, "reason"), out->reason, e) < 0)
        goto out;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

static json_t *headers_object(const struct job *job)
{
    json_t *h = json_object();

    for (size_t i = 0; i < job->nheaders; i++)
        json_object_set_new(h, job->headers[i].name, json_string(job->headers[i].value));
    return h;
}

void *api_pop_data(const struct api_popped *jobs, size_t n)
{
    json_t *list = json_array();

    for (size_t i = 0; i < n; i++) {
        const struct job *job = jobs[i].job;
        json_t *j = json_object();
        json_object_set_new(j, "id", json_string(job->id));
        json_object_set_new(j, "topic", json_string(job->topic));
        json_object_set_new(j, "body", json_stringn(job->body, job->body_len));
        json_object_set_new(j, "key", json_string(job->key ? job->key : job->id));
        json_object_set_new(j, "headers", headers_object(job));
        json_object_set_new(j, "due_ms", json_integer(job->due_ms));
        json_object_set_new(j, "attempt", json_integer(jobs[i].attempt));
        json_object_set_new(j, "receipt", json_string(jobs[i].receipt));
        json_object_set_new(j, "reserved_until_ms", json_integer(jobs[i].until_ms));
        json_array_append_new(list, j);
    }
    return json_pack("{s:o}", "jobs", list);
}

void *api_pull_op_data(const char *id, const char *state, int64_t until_ms)
{
    json_t *d = json_pack("{s:s, s:s}", "job_id", id, "state", state);

    if (d && until_ms >= 0)
        json_object_set_new(d, "reserved_until_ms", json_integer(until_ms));
    return d;
}

void api_job_pull_state(void *data, const char *state, int64_t attempt, int64_t until_ms)
{
    json_t *p = json_pack("{s:s, s:I}", "state", state, "attempt", (json_int_t)attempt);

    if (!p)
        return;
    json_object_set_new(p, "reserved_until_ms", until_ms >= 0 ? json_integer(until_ms) : json_null());
    json_object_set_new((json_t *)data, "pull", p);
    json_object_set_new((json_t *)data, "state", json_string(state));
}

void api_stats_callbacks(void *data, int64_t waiting)
{
    json_object_set_new(data, "callbacks", json_pack("{s:I}", "waiting_for_retry", (json_int_t)waiting));
}

void api_stats_schedules(void *data, int64_t count)
{
    json_object_set_new(data, "schedules", json_pack("{s:I}", "count", (json_int_t)count));
}

void api_stats_redis(void *data, const char *policy, int evicts)
{
    json_object_set_new(data, "redis", json_pack("{s:s?, s:b}", "maxmemory_policy",
                                                 policy[0] ? policy : NULL, "evicts", evicts));
}

void api_stats_pull(void *data, const char *topic, int64_t ready, int64_t reserved)
{
    json_t *pull = json_object_get(data, "pull");

    if (!pull) {
        pull = json_object();
        json_object_set_new(data, "pull", pull);
    }
    json_object_set_new(pull, topic, json_pack("{s:I, s:I}", "ready", (json_int_t)ready,
                                               "reserved", (json_int_t)reserved));
}

/* apijson: the ground of the HTTP API's JSON: a request's error (api_fail), the
 * {"code","message","data"} envelope, a request's object and its integers read, and the UTF-8
 * cleaning of every text an answer quotes. The contract is in include/core/apijson.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/apijson.h"

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

void api_json_clean(char *s)
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

void *api_json_str(const char *s)
{
    return api_json_text(s, strlen(s), strlen(s));
}

int api_fail(struct api_error *e, int status, int code, const char *fmt, ...)
{
    va_list ap;

    e->status = status;
    e->code = code;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    api_json_clean(e->message);
    return -1;
}

void *api_json_object(const char *body, size_t len, struct api_error *e)
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

char *api_response(int code, const char *message, void *data)
{
    json_t *root = json_object();
    char *text, *msg = strdup(message);

    /* A message may quote client or library text: keep it a JSON string whatever it holds. */
    if (msg)
        api_json_clean(msg);
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

void *api_data_ref(void *data)
{
    return json_incref((json_t *)data);
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

/* The first member of the JSON object obj whose name is none of known[0..n), or NULL. */
static const char *unknown_member(const void *obj, const char *const *known, size_t n)
{
    const char *k;
    json_t *v;

    json_object_foreach((json_t *)obj, k, v) {
        size_t i = 0;
        while (i < n && strcmp(k, known[i]) != 0)
            i++;
        if (i == n)
            return k;
    }
    return NULL;
}

int api_json_only(const void *obj, const char *const *known, size_t n, const char *what,
                  struct api_error *e)
{
    const char *unknown = unknown_member(obj, known, n);
    char list[160] = "";
    size_t at = 0;

    if (!unknown)
        return 0;
    for (size_t i = 0; i < n && at < sizeof(list); i++)
        at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%s", i ? ", " : "", known[i]);
    return api_fail(e, 400, API_BAD_REQUEST, "%.64s is not a member of %s (%s)", unknown, what,
                    list);
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

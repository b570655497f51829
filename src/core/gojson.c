/* gojson: JSON text as Go's encoding/json writes it. The contract is in include/core/gojson.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gojson.h"

struct out {
    char *s;
    size_t len, cap;
    int failed;
};

static void put(struct out *o, const char *s, size_t n)
{
    char *grown;

    if (o->failed)
        return;
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 256;
        while (cap < o->len + n + 1)
            cap *= 2;
        if (!(grown = realloc(o->s, cap))) {
            o->failed = 1;
            return;
        }
        o->s = grown;
        o->cap = cap;
    }
    memcpy(o->s + o->len, s, n);
    o->len += n;
    o->s[o->len] = '\0';
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

/* s (n bytes of UTF-8) as a Go string literal. */
static void string(struct out *o, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t from = 0;

    put(o, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[7] = "\\u00";
        const char *with = NULL;
        size_t skip = 1;

        if (c == '"')
            with = "\\\"";
        else if (c == '\\')
            with = "\\\\";
        else if (c == '\n')
            with = "\\n";
        else if (c == '\r')
            with = "\\r";
        else if (c == '\t')
            with = "\\t";
        else if (c == '\b')
            with = "\\b";
        else if (c == '\f')
            with = "\\f";
        else if (c < 0x20 || c == '<' || c == '>' || c == '&') {
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            esc[6] = '\0';
            with = esc;
        } else if (c == 0xe2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
                   ((unsigned char)s[i + 2] == 0xa8 || (unsigned char)s[i + 2] == 0xa9)) {
            with = (unsigned char)s[i + 2] == 0xa8 ? "\\u2028" : "\\u2029";
            skip = 3;
        }
        if (!with)
            continue;
        put(o, s + from, i - from);
        puts_(o, with);
        from = i + skip;
        i += skip - 1;
    }
    put(o, s + from, n - from);
    put(o, "\"", 1);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void value(struct out *o, const json_t *v, int sort_keys);

static void object(struct out *o, const json_t *v, int sort_keys)
{
    size_t n = json_object_size(v), k = 0;
    const char **names = n ? malloc(n * sizeof(*names)) : NULL;
    const char *name;
    json_t *m;

    if (n && !names) {
        o->failed = 1;
        return;
    }
    json_object_foreach((json_t *)v, name, m)
        names[k++] = name;
    if (sort_keys)
        qsort(names, n, sizeof(*names), by_name);
    put(o, "{", 1);
    for (size_t i = 0; i < n; i++) {
        if (i)
            put(o, ",", 1);
        string(o, names[i], strlen(names[i]));
        put(o, ":", 1);
        value(o, json_object_get(v, names[i]), sort_keys);
    }
    put(o, "}", 1);
    free(names);
}

static void value(struct out *o, const json_t *v, int sort_keys)
{
    char num[64];

    switch (json_typeof(v)) {
    case JSON_OBJECT:
        object(o, v, sort_keys);
        break;
    case JSON_ARRAY:
        put(o, "[", 1);
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                put(o, ",", 1);
            value(o, json_array_get(v, i), sort_keys);
        }
        put(o, "]", 1);
        break;
    case JSON_STRING:
        string(o, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER:
        snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        puts_(o, num);
        break;
    case JSON_REAL:
        snprintf(num, sizeof(num), "%.17g", json_real_value(v));
        puts_(o, num);
        break;
    case JSON_TRUE:
        puts_(o, "true");
        break;
    case JSON_FALSE:
        puts_(o, "false");
        break;
    default:
        puts_(o, "null");
        break;
    }
}

char *gojson_dumps(const json_t *v, int sort_keys)
{
    struct out o = { 0 };

    if (v)
        value(&o, v, sort_keys);
    else
        puts_(&o, "null");
    if (o.failed) {
        free(o.s);
        return NULL;
    }
    return o.s;
}

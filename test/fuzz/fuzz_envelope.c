/* fuzz_envelope: the dq-* control headers of a delay-topic message (envelope_parse) and the
 * times they imply (envelope_times).
 *
 * An input is text, one header per line: "name=value", or "name" alone for a header without
 * value. Names are raw (the dictionary offers dq-topic, dq-id, dq-due-ms, dq-hops). Each value
 * gets its own buffer of exactly its length, so a read past it is caught by ASan.
 * An optional first line "@<digits>" sets the message's CreateTime (any int64 a producer may
 * send); without it realistic times are used. Invariants checked (abort() on violation):
 *  - act_ms <= due_ms and act_ms <= timestamp + level;
 *  - a direct message (no dq-id, no dq-hops) is never due before timestamp + level;
 *  - a routed message with dq-due-ms is due at it exactly. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/envelope.h"
#include "fuzz.h"

#define MAX_HDRS 64        /* more than any real message carries */
#define NAME_MAX_LEN 64    /* longer names are cut: no control header is that long */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);



/* Realistic CreateTimes: the epoch, now-ish, and the far future of a year-2100 producer. */
static const int64_t times_ms[] = { 0, 1700000000000LL, 4102444800000LL };
/* Levels of the default ladder: the smallest, a middle one, the largest. */
static const int64_t levels_ms[] = { 1000, 300000, 86400000 };

struct input {
    struct hdr hdrs[MAX_HDRS];
    char names[MAX_HDRS][NAME_MAX_LEN + 1];
    size_t n;
    int has_ts;
    int64_t ts_ms;
};

static const char *find_byte(const char *p, const char *end, char c)
{
    const char *q = memchr(p, c, (size_t)(end - p));
    return q ? q : end;
}

/* "@<digits>": a CreateTime given by the input. Anything else is not one. */
static int parse_ts_line(const char *p, size_t len, int64_t *out)
{
    return len >= 2 && p[0] == '@' ? parse_int64(p + 1, len - 1, out) : -1;
}

static void add_header(struct input *in, const char *p, size_t len)
{
    const char *eq = memchr(p, '=', len);
    size_t nlen = eq ? (size_t)(eq - p) : len;
    struct hdr *h = &in->hdrs[in->n];
    char *value;

    if (nlen > NAME_MAX_LEN)
        nlen = NAME_MAX_LEN;
    memcpy(in->names[in->n], p, nlen);
    in->names[in->n][nlen] = '\0';
    h->name = in->names[in->n];
    h->value = NULL;
    h->len = 0;
    if (eq) {
        h->len = len - (size_t)(eq + 1 - p);
        value = malloc(h->len ? h->len : 1);
        ASSERT(value != NULL);
        memcpy(value, eq + 1, h->len);
        h->value = value;
    }
    in->n++;
}

static void split(struct input *in, const char *data, size_t size)
{
    const char *p = data, *end = data + size;
    int first = 1;

    memset(in, 0, sizeof(*in));
    while (p < end && in->n < MAX_HDRS) {
        const char *nl = find_byte(p, end, '\n');
        if (first && parse_ts_line(p, (size_t)(nl - p), &in->ts_ms) == 0)
            in->has_ts = 1;
        else
            add_header(in, p, (size_t)(nl - p));
        first = 0;
        p = nl + 1;
    }
}

static void release(struct input *in)
{
    for (size_t i = 0; i < in->n; i++)
        free((void *)in->hdrs[i].value);
}

/* The parsed strings point into the headers they came from. */
static int points_into_headers(const struct input *in, const char *s, size_t len)
{
    for (size_t i = 0; i < in->n; i++)
        if (s == in->hdrs[i].value && len == in->hdrs[i].len)
            return 1;
    return 0;
}

static void check_parsed(const struct input *in, const struct envelope *env)
{
    ASSERT(env->topic != NULL && env->topic_len > 0);
    ASSERT(points_into_headers(in, env->topic, env->topic_len));
    ASSERT(env->id == NULL || (env->id_len > 0 && points_into_headers(in, env->id, env->id_len)));
    ASSERT(!env->has_due || env->due_ms >= 0);
    ASSERT(env->hops >= 0 && env->hops <= 1000000);
}

/* timestamp + level, saturated: the harness itself must not overflow. */
static int64_t hop_of(int64_t ts_ms, int64_t level_ms)
{
    return ts_ms > INT64_MAX - level_ms ? INT64_MAX : ts_ms + level_ms;
}

static void check_times(const struct envelope *env, int64_t ts_ms, int64_t level_ms)
{
    int64_t act_ms, due_ms, hop_ms = hop_of(ts_ms, level_ms);
    int routed = env->id != NULL || env->hops > 0;

    envelope_times(env, ts_ms, level_ms, &act_ms, &due_ms);
    ASSERT(act_ms <= due_ms);
    ASSERT(act_ms <= hop_ms);
    if (!routed)
        ASSERT(due_ms >= hop_ms);
    if (routed && env->has_due)
        ASSERT(due_ms == env->due_ms);
    if (!env->has_due)
        ASSERT(due_ms == hop_ms);
}

static void check_all_times(const struct input *in, const struct envelope *env)
{
    for (size_t l = 0; l < sizeof(levels_ms) / sizeof(levels_ms[0]); l++) {
        if (in->has_ts) {
            check_times(env, in->ts_ms, levels_ms[l]);
            continue;
        }
        for (size_t t = 0; t < sizeof(times_ms) / sizeof(times_ms[0]); t++)
            check_times(env, times_ms[t], levels_ms[l]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in;
    struct envelope env;
    char err[256];

    split(&in, (const char *)data, size);
    for (size_t i = 0; i < in.n; i++)
        ASSERT(envelope_is_control(in.hdrs[i].name) == (strncmp(in.hdrs[i].name, "dq-", 3) == 0));
    err[0] = '\0';
    if (envelope_parse(in.hdrs, in.n, &env, err, sizeof(err)) == 0) {
        check_parsed(&in, &env);
        check_all_times(&in, &env);
    } else {
        ASSERT(err[0] != '\0');
    }
    release(&in);
    return 0;
}

/* apitopic: the requests of one pull topic's routes, /delay-queue/api/pull/{topic} (its
 * figures), .../jobs (a page of its jobs) and .../pause, .../resume. The contract is in
 * include/core/api.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/api.h"
#include "core/apijson.h"

static const struct {
    const char *tail;
    enum api_topic_ask ask;
    int post;
} asks[] = {
    { "", API_TOPIC_FIGURES, 0 },
    { "/jobs", API_TOPIC_JOBS, 0 },
    { "/pause", API_TOPIC_PAUSE, 1 },
    { "/resume", API_TOPIC_RESUME, 1 },
};

const char *api_pull_topic_allow(const char *path)
{
    const char *slash = strchr(path, '/');

    return slash && (strcmp(slash, "/pause") == 0 || strcmp(slash, "/resume") == 0) ? "POST"
                                                                                   : "GET";
}

/* A decimal of digits only into *v: 0, or -1. */
static int decimal(const char *s, int64_t *v)
{
    char *end;

    if (!s[0] || strspn(s, "0123456789") != strlen(s) || strlen(s) > 18)
        return -1;
    errno = 0;
    *v = strtoll(s, &end, 10);
    return errno ? -1 : 0;
}

/* The query of a jobs page: state, limit and after. */
static int parse_page(const char *state, const char *limit, const char *after,
                      struct api_pull_topic *out, struct api_error *e)
{
    const char *colon;
    int64_t n = API_TOPIC_LIMIT_DEFAULT;

    if (!state || !state[0])
        state = "ready";
    if (strcmp(state, "ready") && strcmp(state, "delayed") && strcmp(state, "reserved"))
        return api_fail(e, 400, API_BAD_REQUEST, "state must be ready, delayed or reserved");
    snprintf(out->state, sizeof(out->state), "%s", state);
    if (limit && (decimal(limit, &n) < 0 || n < 1 || n > API_TOPIC_LIMIT_MAX))
        return api_fail(e, 400, API_BAD_REQUEST, "limit must be an integer from 1 to %d",
                        API_TOPIC_LIMIT_MAX);
    out->limit = (int)n;
    out->after_id[0] = '\0';
    out->has_after = 0;
    if (!after)
        return 0;
    colon = strchr(after, ':');
    if (!colon || colon == after || strlen(colon + 1) > JOB_ID_MAX || !colon[1])
        return api_fail(e, 400, API_BAD_REQUEST, "after must be the next of a page before "
                        "(<ms>:<job id>)");
    {
        char ms[24];
        snprintf(ms, sizeof(ms), "%.*s", (int)(colon - after < 23 ? colon - after : 23), after);
        if (decimal(ms, &out->after_ms) < 0)
            return api_fail(e, 400, API_BAD_REQUEST, "after must be the next of a page before "
                            "(<ms>:<job id>)");
    }
    snprintf(out->after_id, sizeof(out->after_id), "%s", colon + 1);
    out->has_after = 1;
    return 0;
}

int api_parse_pull_topic(const char *path, int post, const char *state, const char *limit,
                         const char *after, const struct api_limits *lim,
                         struct api_pull_topic *out, struct api_error *e)
{
    const char *slash = strchr(path, '/');
    size_t len = slash ? (size_t)(slash - path) : strlen(path);
    char why[TOPIC_NAME_MAX + 128];
    enum target_fault f;
    size_t i;

    for (i = 0; i < sizeof(asks) / sizeof(asks[0]); i++)
        if (strcmp(slash ? slash : "", asks[i].tail) == 0)
            break;
    if (i == sizeof(asks) / sizeof(asks[0]))
        return api_fail(e, 404, API_NOT_FOUND, "no such path: a pull topic has /jobs, /pause "
                        "and /resume");
    if (asks[i].post != post)
        return api_fail(e, 405, API_BAD_REQUEST, "this path takes %s", post ? "GET" : "POST");
    if (!len || len > TOPIC_NAME_MAX)
        return api_fail(e, 400, API_BAD_REQUEST, "invalid topic: 1 to %d characters",
                        TOPIC_NAME_MAX);
    snprintf(out->topic, sizeof(out->topic), "%.*s", (int)len, path);
    f = levels_check_target(lim->levels, lim->dlq_topic, out->topic, len, why, sizeof(why));
    if (f == TARGET_INVALID)
        return api_fail(e, 400, API_BAD_REQUEST, "invalid topic: %s", why);
    if (f != TARGET_OK)   /* a delay topic, the dead-letter topic: no pull topic has its name */
        return api_fail(e, 404, API_NOT_FOUND, "no such pull topic: %s", why);
    out->ask = asks[i].ask;
    return out->ask == API_TOPIC_JOBS ? parse_page(state, limit, after, out, e) : 0;
}

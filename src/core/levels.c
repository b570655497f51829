/* levels: durations, the delay levels and their topic names, the choice of level for a
 * remaining time, and the checks of a job's target topic. The contract is in include/core/levels.h. */
#include <stdio.h>
#include <string.h>

#include "core/levels.h"

static const struct { const char *suffix; int64_t ms; } units[] = {
    { "ms", 1 }, { "s", 1000 }, { "m", 60 * 1000 }, { "h", 3600 * 1000 }, { "d", 86400 * 1000 },
};

int duration_parse_ms(const char *text, int64_t *out_ms)
{
    const char *p = text;
    int64_t v = 0;

    if (*p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (INT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (*p - '0');
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(p, units[i].suffix) == 0) {
            if (v > INT64_MAX / units[i].ms)
                return -1;
            *out_ms = v * units[i].ms;
            return 0;
        }
    }
    return -1;
}

int topic_name_valid(const char *topic, char *err, size_t errlen)
{
    size_t len = strlen(topic);

    if (len == 0) {
        snprintf(err, errlen, "topic is empty");
        return -1;
    }
    if (len > TOPIC_NAME_MAX) {
        snprintf(err, errlen, "topic is longer than %d characters", TOPIC_NAME_MAX);
        return -1;
    }
    if (strcmp(topic, ".") == 0 || strcmp(topic, "..") == 0) {
        snprintf(err, errlen, "topic cannot be \"%s\"", topic);
        return -1;
    }
    for (const char *p = topic; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-')) {
            snprintf(err, errlen, "topic may hold only letters, digits, '.', '_' and '-'");
            return -1;
        }
    }
    return 0;
}

int topic_format_expand(const char *format, const char *value, char *out, size_t outlen)
{
    const char *at = strstr(format, "%s");
    int n;

    if (!at)
        return -1;
    n = snprintf(out, outlen, "%.*s%s%s", (int)(at - format), format, value, at + 2);
    return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

int topic_format_valid(const char *format, char *err, size_t errlen)
{
    const char *at = strstr(format, "%s");
    char sample[TOPIC_NAME_MAX + 2], why[128];

    if (!at || strchr(at + 2, '%') || memchr(format, '%', (size_t)(at - format))) {
        snprintf(err, errlen, "topic format must contain exactly one %%s and no other %%");
        return -1;
    }
    if (topic_format_expand(format, "30m", sample, sizeof(sample)) < 0 ||
        topic_name_valid(sample, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "topic format does not make a valid topic name");
        return -1;
    }
    return 0;
}

int levels_init(struct levels *lv, const char *const *names, int n, const char *format,
                char *err, size_t errlen)
{
    char why[128];

    if (n < 1 || n > LEVELS_MAX) {
        snprintf(err, errlen, "between 1 and %d levels are needed, not %d", LEVELS_MAX, n);
        return -1;
    }
    if (topic_format_valid(format, err, errlen) < 0)
        return -1;
    memset(lv, 0, sizeof(*lv));
    lv->n = n;
    for (int i = 0; i < n; i++) {
        if (strlen(names[i]) > LEVEL_NAME_MAX || duration_parse_ms(names[i], &lv->ms[i]) < 0 ||
            lv->ms[i] <= 0) {
            snprintf(err, errlen, "level \"%s\" is not a positive duration like 500ms, 5s, 1m, 2h, 1d",
                     names[i]);
            return -1;
        }
        if (i > 0 && lv->ms[i] <= lv->ms[i - 1]) {
            snprintf(err, errlen, "levels must be strictly ascending: \"%s\" follows \"%s\"",
                     names[i], names[i - 1]);
            return -1;
        }
        snprintf(lv->name[i], sizeof(lv->name[i]), "%s", names[i]);
        if (topic_format_expand(format, names[i], lv->topic[i], sizeof(lv->topic[i])) < 0 ||
            topic_name_valid(lv->topic[i], why, sizeof(why)) < 0) {
            snprintf(err, errlen, "level \"%s\" makes an invalid topic name", names[i]);
            return -1;
        }
    }
    return 0;
}

int levels_route(const struct levels *lv, int64_t remaining_ms)
{
    int lo = 0, hi = lv->n - 1;

    /* Binary search for the largest ms[i] <= remaining_ms; 0 when none is. */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (lv->ms[mid] <= remaining_ms)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

int64_t levels_ceil_ms(const struct levels *lv, int64_t ms)
{
    for (int i = 0; i < lv->n; i++)
        if (lv->ms[i] >= ms)
            return lv->ms[i];
    return ms;
}

int levels_find_topic(const struct levels *lv, const char *topic)
{
    for (int i = 0; i < lv->n; i++)
        if (strcmp(lv->topic[i], topic) == 0)
            return i;
    return -1;
}

enum target_fault levels_check_target(const struct levels *lv, const char *dlq, const char *topic,
                                      size_t len, char *err, size_t errlen)
{
    char name[TOPIC_NAME_MAX + 1], why[128];

    if (len > TOPIC_NAME_MAX) {
        snprintf(err, errlen, "topic is longer than %d characters", TOPIC_NAME_MAX);
        return TARGET_INVALID;
    }
    memcpy(name, topic, len);
    name[len] = '\0';
    if (strlen(name) != len) {
        snprintf(err, errlen, "topic holds a NUL byte");
        return TARGET_INVALID;
    }
    if (topic_name_valid(name, why, sizeof(why)) < 0) {
        snprintf(err, errlen, "%s", why);
        return TARGET_INVALID;
    }
    if (levels_find_topic(lv, name) >= 0) {
        snprintf(err, errlen, "topic %s is a delay topic; a job must target a business topic", name);
        return TARGET_DELAY_TOPIC;
    }
    if (strcmp(name, dlq) == 0) {
        snprintf(err, errlen, "topic %s is the dead-letter topic; a job must target a business topic",
                 name);
        return TARGET_DEAD_LETTER;
    }
    return TARGET_OK;
}

/* levels: durations, the fixed delay levels, their topic names and the choice of level.
 * Pure logic: no network library. */
#ifndef DQ_LEVELS_H
#define DQ_LEVELS_H

#include <stddef.h>
#include <stdint.h>

#define LEVELS_MAX 32           /* far more than any sensible ladder (the default has 13) */
#define LEVEL_NAME_MAX 15       /* "500ms", "30m", "1d": short by nature */
#define TOPIC_NAME_MAX 249      /* Kafka's own limit on topic names */

struct levels {
    int n;                                    /* number of levels, >= 1 */
    int64_t ms[LEVELS_MAX];                   /* delay of each level, strictly ascending */
    char name[LEVELS_MAX][LEVEL_NAME_MAX + 1];   /* as written in the config: "5s" */
    char topic[LEVELS_MAX][TOPIC_NAME_MAX + 1];  /* topic_format with %s replaced by name */
};

/* Parses a duration "<digits><unit>" with unit ms, s, m, h or d into milliseconds.
 * Returns 0, or -1 for anything else (no unit, sign, overflow, trailing text). */
int duration_parse_ms(const char *text, int64_t *out_ms);

/* Checks a topic format: exactly one "%s", no other '%', a valid topic name once expanded. */
int topic_format_valid(const char *format, char *err, size_t errlen);

/* Expands format (checked by topic_format_valid) with value into out. Returns 0 or -1 if long. */
int topic_format_expand(const char *format, const char *value, char *out, size_t outlen);

/* Fills lv from level names (as in the config) and the topic format. Levels must be strictly
 * ascending and positive. Returns 0, or -1 with the reason in err. */
int levels_init(struct levels *lv, const char *const *names, int n, const char *format,
                char *err, size_t errlen);

/* The level for a job with remaining_ms to go: the largest level not above it, or level 0 when
 * remaining_ms is below the smallest level (that topic's messages are read ahead, see holder). */
int levels_route(const struct levels *lv, int64_t remaining_ms);

/* The smallest level at or above ms (ms itself when above every level): a wait that can be
 * stretched, rounded up so that its message is held once, in one level, not moved down through
 * several. */
int64_t levels_ceil_ms(const struct levels *lv, int64_t ms);

/* Index of the level whose topic is named topic, or -1 when it is not a delay topic. */
int levels_find_topic(const struct levels *lv, const char *topic);

/* What may keep a job from being delivered to a topic. */
enum target_fault {
    TARGET_OK = 0,
    TARGET_INVALID,       /* not a valid topic name */
    TARGET_DELAY_TOPIC,   /* one of the delay topics: the job would loop */
    TARGET_DEAD_LETTER,   /* the dead-letter topic: a job would land there without dq-error */
};

/* Checks a job's target topic (len bytes, no NUL needed) against Kafka's rules, the delay
 * topics of lv and the dead-letter topic dlq. Returns TARGET_OK, or the fault with the reason
 * always written to err (it names the topic, cut to TOPIC_NAME_MAX characters). */
enum target_fault levels_check_target(const struct levels *lv, const char *dlq, const char *topic,
                                      size_t len, char *err, size_t errlen);

/* Kafka's rules for a topic name: 1-249 characters of [a-zA-Z0-9._-], not "." or "..".
 * Returns 0, or -1 with the reason in err. */
int topic_name_valid(const char *topic, char *err, size_t errlen);

#endif

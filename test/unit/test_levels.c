#include <stdio.h>

#include "core/levels.h"
#include "unit.h"

static const char *const three[] = { "1s", "5s", "10s" };

/* Fills lv with 1s, 5s, 10s under the default format; 0 or -1. */
static int init_three(struct levels *lv)
{
    char err[256];

    return levels_init(lv, three, 3, "delay_topic_%s", err, sizeof(err));
}

static int64_t dur(const char *text)
{
    int64_t ms = -7;

    return duration_parse_ms(text, &ms) == 0 ? ms : -1;
}

static void duration_units(void)
{
    CHECK_EQ_INT(dur("500ms"), 500);
    CHECK_EQ_INT(dur("5s"), 5000);
    CHECK_EQ_INT(dur("30m"), 1800000);
    CHECK_EQ_INT(dur("2h"), 7200000);
    CHECK_EQ_INT(dur("1d"), 86400000);
    CHECK_EQ_INT(dur("0s"), 0);
    CHECK_EQ_INT(dur("007s"), 7000);
}

static void duration_rejects_bad_text(void)
{
    CHECK_EQ_INT(dur(""), -1);
    CHECK_EQ_INT(dur("5"), -1);
    CHECK_EQ_INT(dur("s"), -1);
    CHECK_EQ_INT(dur("-5s"), -1);
    CHECK_EQ_INT(dur("+5s"), -1);
    CHECK_EQ_INT(dur("5sx"), -1);
    CHECK_EQ_INT(dur("5s "), -1);
    CHECK_EQ_INT(dur(" 5s"), -1);
    CHECK_EQ_INT(dur("5 s"), -1);
    CHECK_EQ_INT(dur("5S"), -1);
    CHECK_EQ_INT(dur("5w"), -1);
    CHECK_EQ_INT(dur("1.5s"), -1);
}

static void duration_rejects_overflow(void)
{
    CHECK_EQ_INT(dur("9223372036854775808ms"), -1);
    CHECK_EQ_INT(dur("99999999999999999999ms"), -1);
    CHECK_EQ_INT(dur("9223372036854775807s"), -1);
    CHECK_EQ_INT(dur("106751991167301d"), -1);
    CHECK_EQ_INT(dur("106751991167d"), 106751991167LL * 86400000);
}

static void levels_init_fills_names_and_topics(void)
{
    struct levels lv;

    CHECK_EQ_INT(init_three(&lv), 0);
    CHECK_EQ_INT(lv.n, 3);
    CHECK_EQ_INT(lv.ms[0], 1000);
    CHECK_EQ_INT(lv.ms[2], 10000);
    CHECK_STR(lv.name[1], "5s");
    CHECK_STR(lv.topic[0], "delay_topic_1s");
    CHECK_STR(lv.topic[2], "delay_topic_10s");
}

static void levels_init_custom_format(void)
{
    static const char *const names[] = { "500ms", "1m" };
    struct levels lv;
    char err[256];

    CHECK_EQ_INT(levels_init(&lv, names, 2, "dq.%s.delay", err, sizeof(err)), 0);
    CHECK_STR(lv.topic[0], "dq.500ms.delay");
    CHECK_STR(lv.topic[1], "dq.1m.delay");
}

/* levels_init on names must fail with an error containing want. */
static int init_fails(const char *const *names, int n, const char *format, const char *want)
{
    struct levels lv;
    char err[256] = "";

    if (levels_init(&lv, names, n, format, err, sizeof(err)) != -1)
        return 0;
    if (!strstr(err, want)) {
        fprintf(stderr, "levels_init error \"%s\" lacks \"%s\"\n", err, want);
        return 0;
    }
    return 1;
}

static void levels_init_requires_ascending(void)
{
    static const char *const down[] = { "5s", "1s" };
    static const char *const same[] = { "1s", "5s", "5s" };
    static const char *const equal[] = { "60s", "1m" };

    CHECK(init_fails(down, 2, "t_%s", "ascending"));
    CHECK(init_fails(same, 3, "t_%s", "ascending"));
    CHECK(init_fails(equal, 2, "t_%s", "ascending"));
}

static void levels_init_rejects_bad_names(void)
{
    static const char *const zero[] = { "0s" };
    static const char *const nounit[] = { "5" };
    static const char *const junk[] = { "1s", "5x" };
    static const char *const longname[] = { "0000000000000001s" };

    CHECK(init_fails(zero, 1, "t_%s", "\"0s\""));
    CHECK(init_fails(nounit, 1, "t_%s", "\"5\""));
    CHECK(init_fails(junk, 2, "t_%s", "\"5x\""));
    CHECK(init_fails(longname, 1, "t_%s", "0000000000000001s"));
}

static void levels_init_rejects_count(void)
{
    const char *names[LEVELS_MAX + 1];
    char buf[LEVELS_MAX + 1][16];

    for (int i = 0; i <= LEVELS_MAX; i++) {
        snprintf(buf[i], sizeof(buf[i]), "%ds", i + 1);
        names[i] = buf[i];
    }
    CHECK(init_fails(names, 0, "t_%s", "levels"));
    CHECK(init_fails(names, LEVELS_MAX + 1, "t_%s", "levels"));
    CHECK(!init_fails(names, LEVELS_MAX, "t_%s", "levels"));
}

static void levels_init_rejects_bad_format(void)
{
    CHECK(init_fails(three, 3, "delay_topic", "%s"));
    CHECK(init_fails(three, 3, "delay topic %s", "topic"));
}

static void levels_init_rejects_too_long_topic(void)
{
    static const char *const names[] = { "1s", "100000000000ms" };
    char format[TOPIC_NAME_MAX + 1];

    /* 236 + "%s": "30m" fits in 249 characters, "100000000000ms" does not. */
    memset(format, 'a', 236);
    memcpy(format + 236, "%s", 3);
    CHECK(init_fails(names, 2, format, "100000000000ms"));
}

static void route_exact_level(void)
{
    struct levels lv;

    CHECK_EQ_INT(init_three(&lv), 0);
    CHECK_EQ_INT(levels_route(&lv, 1000), 0);
    CHECK_EQ_INT(levels_route(&lv, 5000), 1);
    CHECK_EQ_INT(levels_route(&lv, 10000), 2);
}

static void ceil_rounds_a_wait_up_to_one_level(void)
{
    struct levels lv;

    CHECK_EQ_INT(init_three(&lv), 0);   /* 1s, 5s, 10s */
    CHECK_EQ_INT((int)levels_ceil_ms(&lv, 300), 1000);
    CHECK_EQ_INT((int)levels_ceil_ms(&lv, 1000), 1000);
    CHECK_EQ_INT((int)levels_ceil_ms(&lv, 1001), 5000);
    CHECK_EQ_INT((int)levels_ceil_ms(&lv, 9999), 10000);
    CHECK_EQ_INT((int)levels_ceil_ms(&lv, 10001), 10001);   /* above every level: as it is */
}

static void route_between_picks_lower(void)
{
    struct levels lv;

    CHECK_EQ_INT(init_three(&lv), 0);
    CHECK_EQ_INT(levels_route(&lv, 7000), 1);
    CHECK_EQ_INT(levels_route(&lv, 4999), 0);
    CHECK_EQ_INT(levels_route(&lv, 9999), 1);
    CHECK_EQ_INT(levels_route(&lv, 1001), 0);
}

static void route_below_smallest_and_above_largest(void)
{
    struct levels lv;

    CHECK_EQ_INT(init_three(&lv), 0);
    CHECK_EQ_INT(levels_route(&lv, 999), 0);
    CHECK_EQ_INT(levels_route(&lv, 0), 0);
    CHECK_EQ_INT(levels_route(&lv, -5000), 0);
    CHECK_EQ_INT(levels_route(&lv, 10001), 2);
    CHECK_EQ_INT(levels_route(&lv, INT64_MAX), 2);
}

static void route_single_and_default_ladder(void)
{
    static const char *const one[] = { "5s" };
    static const char *const ladder[] = { "1s", "5s", "10s", "30s", "1m", "5m", "10m", "30m",
                                          "1h", "2h", "6h", "12h", "1d" };
    struct levels lv;
    char err[256];

    CHECK_EQ_INT(levels_init(&lv, one, 1, "t_%s", err, sizeof(err)), 0);
    CHECK_EQ_INT(levels_route(&lv, 1), 0);
    CHECK_EQ_INT(levels_route(&lv, 60000), 0);
    CHECK_EQ_INT(levels_init(&lv, ladder, 13, "t_%s", err, sizeof(err)), 0);
    CHECK_EQ_INT(levels_route(&lv, 45 * 60000), 7);          /* 45m -> 30m */
    CHECK_EQ_INT(levels_route(&lv, 2 * 86400000LL), 12);     /* 2d -> 1d */
    CHECK_EQ_INT(levels_route(&lv, 59999), 3);               /* just under 1m -> 30s */
}

static void find_topic(void)
{
    struct levels lv;

    CHECK_EQ_INT(init_three(&lv), 0);
    CHECK_EQ_INT(levels_find_topic(&lv, "delay_topic_1s"), 0);
    CHECK_EQ_INT(levels_find_topic(&lv, "delay_topic_10s"), 2);
    CHECK_EQ_INT(levels_find_topic(&lv, "delay_topic_2s"), -1);
    CHECK_EQ_INT(levels_find_topic(&lv, "delay_topic_1"), -1);
    CHECK_EQ_INT(levels_find_topic(&lv, "orders"), -1);
    CHECK_EQ_INT(levels_find_topic(&lv, ""), -1);
}

/* The reason is always written, whatever the fault: a 300-character topic once left it unset. */
static void check_target(void)
{
    struct levels lv;
    char err[512], long_topic[301];

    CHECK_EQ_INT(init_three(&lv), 0);
    memset(long_topic, 'a', 300);
    long_topic[300] = '\0';
    strcpy(err, "untouched");
    CHECK_EQ_INT(levels_check_target(&lv, "dlq", long_topic, 300, err, sizeof(err)), TARGET_INVALID);
    CHECK_STR(err, "topic is longer than 249 characters");
    CHECK_EQ_INT(levels_check_target(&lv, "dlq", "a b", 3, err, sizeof(err)), TARGET_INVALID);
    CHECK_STR(err, "topic may hold only letters, digits, '.', '_' and '-'");
    CHECK_EQ_INT(levels_check_target(&lv, "dlq", "ab\0cd", 5, err, sizeof(err)), TARGET_INVALID);
    CHECK_STR(err, "topic holds a NUL byte");
    CHECK_EQ_INT(levels_check_target(&lv, "dlq", "", 0, err, sizeof(err)), TARGET_INVALID);
    CHECK_STR(err, "topic is empty");
    CHECK_EQ_INT(levels_check_target(&lv, "dlq", "delay_topic_5sXX", 14, err, sizeof(err)),
                 TARGET_DELAY_TOPIC);
    CHECK_STR(err, "topic delay_topic_5s is a delay topic; a job must target a business topic");
    CHECK_EQ_INT(levels_check_target(&lv, "dlq", "dlq", 3, err, sizeof(err)), TARGET_DEAD_LETTER);
    CHECK_STR(err, "topic dlq is the dead-letter topic; a job must target a business topic");
    CHECK_EQ_INT(levels_check_target(&lv, "dlq", "orders", 6, err, sizeof(err)), TARGET_OK);
    CHECK_EQ_INT(levels_check_target(&lv, "dlq", "dlq2", 4, err, sizeof(err)), TARGET_OK);
}

static int name_ok(const char *topic)
{
    char err[128] = "";

    if (topic_name_valid(topic, err, sizeof(err)) == 0)
        return 1;
    return err[0] ? 0 : -1;   /* -1: refused without a reason */
}

static void topic_name_rules(void)
{
    char max[TOPIC_NAME_MAX + 2];

    CHECK_EQ_INT(name_ok("orders"), 1);
    CHECK_EQ_INT(name_ok("a.b_c-D9"), 1);
    CHECK_EQ_INT(name_ok("x"), 1);
    CHECK_EQ_INT(name_ok("..."), 1);
    memset(max, 'a', TOPIC_NAME_MAX);
    max[TOPIC_NAME_MAX] = '\0';
    CHECK_EQ_INT(name_ok(max), 1);
    max[TOPIC_NAME_MAX] = 'a';
    max[TOPIC_NAME_MAX + 1] = '\0';
    CHECK_EQ_INT(name_ok(max), 0);
}

static void topic_name_refusals(void)
{
    CHECK_EQ_INT(name_ok(""), 0);
    CHECK_EQ_INT(name_ok("."), 0);
    CHECK_EQ_INT(name_ok(".."), 0);
    CHECK_EQ_INT(name_ok("has space"), 0);
    CHECK_EQ_INT(name_ok("a/b"), 0);
    CHECK_EQ_INT(name_ok("a:b"), 0);
    CHECK_EQ_INT(name_ok("caf\xc3\xa9"), 0);
    CHECK_EQ_INT(name_ok("tab\t"), 0);
}

static int format_ok(const char *format)
{
    char err[128] = "";

    return topic_format_valid(format, err, sizeof(err)) == 0 ? 1 : err[0] ? 0 : -1;
}

static void topic_format_rules(void)
{
    char big[TOPIC_NAME_MAX + 8];

    CHECK_EQ_INT(format_ok("delay_topic_%s"), 1);
    CHECK_EQ_INT(format_ok("%s"), 1);
    CHECK_EQ_INT(format_ok("%s.delay"), 1);
    CHECK_EQ_INT(format_ok("delay_topic"), 0);
    CHECK_EQ_INT(format_ok("d_%s_%s"), 0);
    CHECK_EQ_INT(format_ok("d_%d_%s"), 0);
    CHECK_EQ_INT(format_ok("%%s"), 0);
    CHECK_EQ_INT(format_ok("d_%s%"), 0);
    CHECK_EQ_INT(format_ok("d_%S"), 0);
    CHECK_EQ_INT(format_ok("bad topic %s"), 0);
    CHECK_EQ_INT(format_ok(""), 0);
    memset(big, 'a', TOPIC_NAME_MAX);
    memcpy(big + TOPIC_NAME_MAX - 2, "%s", 3);   /* 247 + "30m" is 250 characters */
    CHECK_EQ_INT(format_ok(big), 0);
}

static void topic_format_expand_fits(void)
{
    char out[16];

    CHECK_EQ_INT(topic_format_expand("d_%s_x", "5s", out, sizeof(out)), 0);
    CHECK_STR(out, "d_5s_x");
    CHECK_EQ_INT(topic_format_expand("delay_topic_%s", "10s", out, sizeof(out)), 0);
    CHECK_STR(out, "delay_topic_10s");
    CHECK_EQ_INT(topic_format_expand("delay_topic_%s", "100s", out, sizeof(out)), -1);
    CHECK_EQ_INT(topic_format_expand("no_placeholder", "5s", out, sizeof(out)), -1);
}

void unit_levels(void)
{
    RUN(duration_units);
    RUN(duration_rejects_bad_text);
    RUN(duration_rejects_overflow);
    RUN(levels_init_fills_names_and_topics);
    RUN(levels_init_custom_format);
    RUN(levels_init_requires_ascending);
    RUN(levels_init_rejects_bad_names);
    RUN(levels_init_rejects_count);
    RUN(levels_init_rejects_bad_format);
    RUN(levels_init_rejects_too_long_topic);
    RUN(route_exact_level);
    RUN(ceil_rounds_a_wait_up_to_one_level);
    RUN(route_between_picks_lower);
    RUN(route_below_smallest_and_above_largest);
    RUN(route_single_and_default_ladder);
    RUN(find_topic);
    RUN(check_target);
    RUN(topic_name_rules);
    RUN(topic_name_refusals);
    RUN(topic_format_rules);
    RUN(topic_format_expand_fits);
}

/* cron: what parses and what is refused, the next matching wall time, and fire instants across
 * daylight-saving changes (the 2027 changes as zdump -v -c 2027,2028 lists them). */
#include <stdio.h>
#include <stdlib.h>

#include "lib/cron.h"
#include "unit.h"

/* Seconds since the epoch of a civil time: a UTC instant, or local seconds. */
static int64_t at(int64_t y, unsigned mo, unsigned d, int h, int mi)
{
    return tz_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60;
}

static int parse(const char *expr, struct cron *c)
{
    char err[256];
    int rc = cron_parse(expr, c, err, sizeof(err));

    if (rc < 0)
        fprintf(stderr, "cron_parse(\"%s\"): %s\n", expr, err);
    return rc;
}


static int same(const struct cron *a, const struct cron *b)
{
    return a->sec == b->sec && a->min == b->min && a->hour == b->hour && a->dom == b->dom &&
           a->month == b->month && a->dow == b->dow && a->dom_any == b->dom_any &&
           a->dow_any == b->dow_any && a->hour_any == b->hour_any && a->seconds == b->seconds;
}

static void fields_parse(void)
{
    struct cron c;

    CHECK_EQ_INT(parse("*/15 9-17 * * MON-FRI", &c), 0);
    CHECK(c.sec == 1 && c.min == (1 | 1 << 15 | 1ULL << 30 | 1ULL << 45));
    CHECK_EQ_INT(c.hour, 0x3fe00);
    CHECK(c.dom == 0xfffffffe && c.month == 0x1ffe && c.dow == 0x3e);
    CHECK(c.dom_any && !c.dow_any && !c.hour_any && !c.seconds);
    CHECK_EQ_INT(parse("  0 0 1,15 jan,Jul,DEC sun  ", &c), 0);
    CHECK(c.dom == (1 << 1 | 1 << 15) && c.month == (1 << 1 | 1 << 7 | 1 << 12) && c.dow == 1);
    CHECK_EQ_INT(parse("0 0 * * 7", &c), 0);           /* 7 is Sunday too */
    CHECK_EQ_INT(c.dow, 1);
    CHECK_EQ_INT(parse("0 0 * * 5-7", &c), 0);
    CHECK_EQ_INT(c.dow, 0x61);
    CHECK_EQ_INT(parse("0 0 ? * ?", &c), 0);
    CHECK(c.dom_any && c.dow_any && c.dom == 0xfffffffe && c.dow == 0x7f);
    CHECK_EQ_INT(parse("5/20 */6 1-10/3 2/5 *", &c), 0);   /* a/n: a to the end */
    CHECK(c.min == (1 << 5 | 1 << 25 | 1ULL << 45) && c.hour == (1 | 1 << 6 | 1 << 12 | 1 << 18));
    CHECK(c.dom == (1 << 1 | 1 << 4 | 1 << 7 | 1 << 10) && c.month == (1 << 2 | 1 << 7 | 1 << 12));
    CHECK(c.hour_any);
    CHECK_EQ_INT(parse("*/10 * * * * *", &c), 0);
    CHECK(c.seconds && c.sec == (1 | 1 << 10 | 1 << 20 | 1ULL << 30 | 1ULL << 40 | 1ULL << 50));
    CHECK(c.min == (1ULL << 60) - 1);
}

static void macros(void)
{
    static const char *const pairs[][2] = {
        { "@yearly", "0 0 1 1 *" }, { "@annually", "0 0 1 1 *" }, { "@monthly", "0 0 1 * *" },
        { "@weekly", "0 0 * * 0" }, { "@daily", "0 0 * * *" },    { "@midnight", "0 0 * * *" },
        { "@hourly", "0 * * * *" }, { " @DAILY ", "0 0 * * *" },
    };
    struct cron a, b;

    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        CHECK_EQ_INT(parse(pairs[i][0], &a), 0);
        CHECK_EQ_INT(parse(pairs[i][1], &b), 0);
        CHECK(same(&a, &b));
    }
}

static void refused_with_reasons(void)
{
    static const char *const cases[][2] = {
        { "0 24 * * *", "cron: field \"hour\" (the 2nd of 5): 24 is out of range 0-23" },
        { "60 * * * *", "cron: field \"minute\" (the 1st of 5): 60 is out of range 0-59" },
        { "0 0 0 * *", "cron: field \"day-of-month\" (the 3rd of 5): 0 is out of range 1-31" },
        { "0 0 * 13 *", "cron: field \"month\" (the 4th of 5): 13 is out of range 1-12" },
        { "0 0 * * 8", "cron: field \"day-of-week\" (the 5th of 5): 8 is out of range 0-7" },
        { "60 * * * * *", "cron: field \"second\" (the 1st of 6): 60 is out of range 0-59" },
        { "0 0 99999999999 * *", "99999999999 is out of range 1-31" },
        { "0 0 L * *", "cron: \"L\" (last day) is not supported" },
        { "0 0 LW * *", "cron: \"L\" (last day) is not supported" },
        { "0 0 * * 5L", "cron: \"L\" (last day) is not supported" },
        { "0 0 15W * *", "cron: \"W\" (nearest weekday) is not supported" },
        { "0 0 * * FRI#3", "cron: \"#\" (nth weekday) is not supported" },
        { "0 0 1 1 * 2027 x", "cron: 7 fields (a year field is not supported); expected 5" },
        { "0 0 0 1 1 * 2027", "a year field is not supported" },
        { "@reboot", "cron: @reboot is not supported" },
        { "@fortnightly", "cron: unknown macro \"@fortnightly\"" },
        { "@daily 5", "cron: @daily takes nothing after it" },
        { "*/0 * * * *", "cron: field \"minute\" (the 1st of 5): step 0 is out of range 1-60" },
        { "0 0 1-5/0 * *", "step 0 is out of range 1-31" },
        { "*/ * * * *", "a step needs a number after \"/\"" },
        { "1,,2 * * * *", "(the 1st of 5): an element of the list is empty" },
        { "0 0 * * 1,", "an element of the list is empty" },
        { "5-3 * * * *", "cron: field \"minute\" (the 1st of 5): range 5-3 runs backwards" },
        { "0 0 * * FRI-MON", "range FRI-MON runs backwards" },
        { "* * * *", "cron: 4 fields; expected 5 (minute hour day-of-month month day-of-week)" },
        { "", "cron: the expression is empty" },
        { "   ", "cron: the expression is empty" },
        { "0 ? * * *", "(the 2nd of 5): \"?\" is only allowed in day-of-month and day-of-week" },
        { "0 0 ?/2 * *", "\"?\" takes no range or step" },
        { "0 0 * FOO *", "cron: field \"month\" (the 4th of 5): \"FOO\" is not a month name" },
        { "0 0 * * Monday", "\"Monday\" is not a weekday name" },
        { "x * * * *", "cron: field \"minute\" (the 1st of 5): \"x\" is not a number" },
        { "0 JAN * * *", "\"JAN\" is not a number" },
        { "1-2-3 * * * *", "unexpected \"-3\"" },
        { "-5 * * * *", "expected a number at \"-5\"" },
    };
    struct cron c;
    char err[256];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        err[0] = '\0';
        CHECK_EQ_INT(cron_parse(cases[i][0], &c, err, sizeof(err)), -1);
        CHECK_HAS(err, cases[i][1]);
    }
}

/* The next matches of expr after local, as local wall times. */
static int matches(const char *expr, int64_t local, const int64_t *want, size_t n)
{
    struct cron c;

    if (parse(expr, &c) < 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        local = cron_next_local(&c, local);
        if (local != want[i]) {
            fprintf(stderr, "\"%s\": match %zu is %lld, not %lld\n", expr, i, (long long)local,
                    (long long)want[i]);
            return 0;
        }
    }
    return 1;
}

/* Both restricted: either matches (2027-01-01 is a Friday). One a "*": only the other. */
static void day_of_month_or_day_of_week(void)
{
    const int64_t or[] = { at(2027, 1, 8, 0, 0), at(2027, 1, 13, 0, 0), at(2027, 1, 15, 0, 0),
                           at(2027, 1, 22, 0, 0) };
    const int64_t fridays[] = { at(2027, 1, 8, 0, 0), at(2027, 1, 15, 0, 0) };
    const int64_t thirteenths[] = { at(2027, 1, 13, 0, 0), at(2027, 2, 13, 0, 0) };
    /* "*" with a step counts as unrestricted (Vixie): odd days that are Mondays. */
    const int64_t odd_mondays[] = { at(2027, 1, 11, 0, 0), at(2027, 1, 25, 0, 0),
                                    at(2027, 2, 1, 0, 0), at(2027, 2, 15, 0, 0) };

    CHECK(matches("0 0 13 * FRI", at(2027, 1, 1, 0, 0), or, 4));
    CHECK(matches("0 0 * * 5", at(2027, 1, 1, 0, 0), fridays, 2));
    CHECK(matches("0 0 ? * FRI", at(2027, 1, 1, 0, 0), fridays, 2));
    CHECK(matches("0 0 13 * *", at(2027, 1, 1, 0, 0), thirteenths, 2));
    CHECK(matches("0 0 */2 * MON", at(2027, 1, 1, 0, 0), odd_mondays, 4));
}

static void next_local_times(void)
{
    const int64_t leap[] = { at(2028, 2, 29, 0, 0), at(2032, 2, 29, 0, 0) };
    const int64_t leap2100[] = { at(2104, 2, 29, 0, 0) };   /* 2100 is no leap year */
    const int64_t tens[] = { at(2027, 5, 5, 10, 0) + 10, at(2027, 5, 5, 10, 0) + 20,
                             at(2027, 5, 5, 10, 1) };
    const int64_t yearly[] = { at(2028, 1, 1, 0, 0), at(2029, 1, 1, 0, 0) };
    const int64_t last[] = { at(2028, 12, 31, 23, 59), at(2029, 12, 31, 23, 59) };
    const int64_t jumps[] = { at(2027, 5, 5, 9, 5), at(2027, 5, 5, 9, 59), at(2027, 5, 5, 17, 5) };
    const int64_t epoch[] = { -3600, 0 };

    CHECK(matches("0 0 29 2 *", at(2027, 1, 1, 0, 0), leap, 2));
    CHECK(matches("0 0 29 2 *", at(2096, 3, 1, 0, 0), leap2100, 1));
    CHECK(matches("*/10 * * * * *", at(2027, 5, 5, 10, 0) + 5, tens, 2));
    CHECK(matches("*/10 * * * * *", at(2027, 5, 5, 10, 0) + 55, tens + 2, 1));
    CHECK(matches("0 0 1 1 *", at(2027, 1, 1, 0, 0), yearly, 2));   /* strictly after */
    CHECK(matches("59 23 31 12 *", at(2027, 12, 31, 23, 59), last, 2));
    CHECK(matches("5,59 9,17 * * *", at(2027, 5, 5, 8, 0), jumps, 3));
    CHECK(matches("@hourly", at(1969, 12, 31, 22, 30), epoch, 2));   /* before 1970 */
}

static void never_fires(void)
{
    static const char *const never[] = { "0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2 *",
                                         "0 0 30-31 2 *" };
    struct cron c;

    for (size_t i = 0; i < sizeof(never) / sizeof(never[0]); i++) {
        CHECK_EQ_INT(parse(never[i], &c), 0);
        CHECK_EQ_INT(cron_next_local(&c, at(2027, 1, 1, 0, 0)), -1);
        CHECK_EQ_INT(cron_next(&c, unit_zone("UTC"), at(2027, 1, 1, 0, 0)), -1);
    }
    CHECK_EQ_INT(parse("0 0 31 4,6,9,11,12 *", &c), 0);
    CHECK_EQ_INT(cron_next_local(&c, at(2027, 1, 1, 0, 0)), at(2027, 12, 31, 0, 0));
}

/* The fires of expr in zone after after_utc, chained, are want. */
static int fires(const char *zname, const char *expr, int64_t after_utc, const int64_t *want,
                 size_t n)
{
    const struct tz *z = unit_zone(zname);
    struct cron c;

    if (!z || parse(expr, &c) < 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        after_utc = cron_next(&c, z, after_utc);
        if (after_utc != want[i]) {
            fprintf(stderr, "%s \"%s\": fire %zu is %lld, not %lld\n", zname, expr, i,
                    (long long)after_utc, (long long)want[i]);
            return 0;
        }
    }
    return 1;
}

/* Berlin, 2027: 02:00-02:59 on Mar 28 does not exist (01:00Z the change); 02:00-02:59 on
 * Oct 31 happens twice, 00:00Z-00:59Z and 01:00Z-01:59Z. */
static void berlin_2027(void)
{
    const int64_t spring[] = { at(2027, 3, 28, 1, 0), at(2027, 3, 29, 0, 30) };
    const int64_t autumn[] = { at(2027, 10, 31, 0, 30), at(2027, 11, 1, 1, 30) };
    const int64_t quarters[] = { at(2027, 3, 28, 1, 0), at(2027, 3, 29, 0, 0),
                                 at(2027, 3, 29, 0, 15) };
    const int64_t quarters_back[] = { at(2027, 10, 31, 0, 0), at(2027, 10, 31, 0, 15),
                                      at(2027, 10, 31, 0, 30), at(2027, 10, 31, 0, 45),
                                      at(2027, 11, 1, 1, 0) };
    const int64_t hourly_back[] = { at(2027, 10, 30, 22, 0), at(2027, 10, 30, 23, 0),
                                    at(2027, 10, 31, 0, 0), at(2027, 10, 31, 1, 0),
                                    at(2027, 10, 31, 2, 0), at(2027, 10, 31, 3, 0) };
    const int64_t hourly_fwd[] = { at(2027, 3, 27, 23, 0), at(2027, 3, 28, 0, 0),
                                   at(2027, 3, 28, 1, 0), at(2027, 3, 28, 2, 0) };
    const int64_t two_hourly_back[] = { at(2027, 10, 31, 0, 0), at(2027, 10, 31, 1, 0),
                                        at(2027, 10, 31, 3, 0) };

    CHECK(fires("Europe/Berlin", "30 2 * * *", at(2027, 3, 27, 12, 0), spring, 2));
    CHECK(fires("Europe/Berlin", "30 2 * * *", at(2027, 10, 30, 12, 0), autumn, 2));
    CHECK(fires("Europe/Berlin", "*/15 2 * * *", at(2027, 3, 27, 12, 0), quarters, 3));
    CHECK(fires("Europe/Berlin", "*/15 2 * * *", at(2027, 10, 30, 12, 0), quarters_back, 5));
    CHECK(fires("Europe/Berlin", "0 * * * *", at(2027, 10, 30, 21, 30), hourly_back, 6));
    CHECK(fires("Europe/Berlin", "0 * * * *", at(2027, 3, 27, 22, 30), hourly_fwd, 4));
    CHECK(fires("Europe/Berlin", "0 */2 * * *", at(2027, 10, 30, 23, 0), two_hourly_back, 3));
}

static void other_zones_2027(void)
{
    const int64_t ny_back[] = { at(2027, 11, 7, 5, 30), at(2027, 11, 8, 6, 30) };
    const int64_t ny_fwd[] = { at(2027, 3, 14, 7, 0), at(2027, 3, 15, 6, 30) };
    const int64_t lh_fwd[] = { at(2027, 10, 2, 15, 30), at(2027, 10, 3, 15, 15) };
    const int64_t lh_back[] = { at(2027, 4, 3, 14, 45), at(2027, 4, 4, 15, 15) };
    const int64_t tokyo[] = { at(2027, 3, 28, 0, 0), at(2027, 3, 29, 0, 0), at(2027, 3, 30, 0, 0) };
    const int64_t utc[] = { at(2027, 3, 28, 2, 30), at(2027, 3, 29, 2, 30) };
    const int64_t before_1970[] = { at(1969, 12, 31, 5, 0), at(1970, 1, 1, 5, 0) };

    CHECK(fires("America/New_York", "30 1 * * *", at(2027, 11, 6, 12, 0), ny_back, 2));
    CHECK(fires("America/New_York", "30 2 * * *", at(2027, 3, 13, 12, 0), ny_fwd, 2));
    CHECK(fires("Australia/Lord_Howe", "15 2 * * *", at(2027, 10, 2, 0, 0), lh_fwd, 2));
    CHECK(fires("Australia/Lord_Howe", "45 1 * * *", at(2027, 4, 3, 0, 0), lh_back, 2));
    CHECK(fires("Asia/Tokyo", "0 9 * * *", at(2027, 3, 27, 12, 0), tokyo, 3));
    CHECK(fires("UTC", "30 2 * * *", at(2027, 3, 27, 12, 0), utc, 2));
    CHECK(fires("America/New_York", "0 0 * * *", at(1969, 12, 30, 12, 0), before_1970, 2));
}

/* The rules of cron.h applied to every wall minute of a span, by brute force: what the
 * chained fires must be. */
static size_t reference(const struct cron *c, const struct tz *z, int64_t from, int64_t to,
                        int64_t *out, size_t max)
{
    size_t n = 0;

    for (int64_t local = from; local < to && n + 2 <= max; local += 60) {
        int64_t first, second;
        int k;
        if (cron_next_local(c, local - 1) != local)
            continue;
        k = tz_to_utc(z, local, &first, &second);
        out[n++] = first;
        if (k == 2 && c->hour_any)
            out[n++] = second;
    }
    for (size_t i = 1; i < n; i++)   /* insertion sort, duplicates dropped after */
        for (size_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int64_t t = out[j];
            out[j] = out[j - 1], out[j - 1] = t;
        }
    return n;
}

/* Around each change of several zones, the chained fires of several expressions are the
 * brute-force ones: none missed, none twice, in order. */
static void fires_match_brute_force(void)
{
    static const char *const zones[] = { "Europe/Berlin", "America/New_York",
                                         "Australia/Lord_Howe", "Antarctica/Troll",
                                         "Pacific/Apia", "Asia/Tokyo" };
    static const char *const exprs[] = { "*/15 * * * *", "30 2 * * *", "0 * * * *",
                                         "*/20 1-3 * * *", "45 1 * * *", "15 2 * * *",
                                         "* 2 * * *", "0 0 * * *", "30 0-4 * * *",
                                         "0 */2 * * *", "59 23 * * *" };
    static int64_t want[6000];

    for (size_t zi = 0; zi < sizeof(zones) / sizeof(zones[0]); zi++) {
        const struct tz *z = unit_zone(zones[zi]);
        int64_t t = at(zi == 4 ? 2011 : 2027, 1, 1, 0, 0);
        CHECK(z);
        for (int k = 0; k < 3 && (t = tz_next_change(z, t)) < at(2028, 1, 1, 0, 0); k++) {
            int64_t from = t - 2 * 86400, to = t + 2 * 86400;
            for (size_t ei = 0; ei < sizeof(exprs) / sizeof(exprs[0]); ei++) {
                struct cron c;
                size_t n, i = 0, seen = 0;
                int64_t fire = from + 30 * 3600;
                CHECK_EQ_INT(parse(exprs[ei], &c), 0);
                n = reference(&c, z, from, to, want, sizeof(want) / sizeof(want[0]));
                while (i < n && want[i] <= fire)
                    i++;
                while ((fire = cron_next(&c, z, fire)) < to - 30 * 3600) {
                    if (i >= n || fire != want[i]) {
                        fprintf(stderr, "%s \"%s\": fired at %lld, not %lld\n", zones[zi],
                                exprs[ei], (long long)fire, i < n ? (long long)want[i] : -1LL);
                        CHECK(0);
                    }
                    while (i < n && want[i] <= fire)   /* several wall times, one instant */
                        i++;
                    seen++;
                }
                CHECK(seen > 0 && (i == n || want[i] >= to - 30 * 3600));
            }
        }
    }
}

/* A year of quarter hours chained: strictly increasing, each a matching wall time but at the
 * changes. */
static void chained_through_a_year(void)
{
    const struct tz *z = unit_zone("Europe/Berlin");
    struct cron c;
    int64_t t = at(2027, 1, 1, 0, 0), prev = t;
    int count = 0;

    CHECK(z);
    CHECK_EQ_INT(parse("*/15 * * * *", &c), 0);
    while ((t = cron_next(&c, z, t)) < at(2028, 1, 1, 0, 0)) {
        CHECK(t > prev);
        CHECK_EQ_INT(t % 900, 0);
        prev = t;
        count++;
    }
    CHECK_EQ_INT(count, 365 * 96 - 1);   /* an interval: every quarter hour of UTC */
}

void unit_cron(void)
{
    RUN(fields_parse);
    RUN(macros);
    RUN(refused_with_reasons);
    RUN(day_of_month_or_day_of_week);
    RUN(next_local_times);
    RUN(never_fires);
    RUN(berlin_2027);
    RUN(other_zones_2027);
    RUN(fires_match_brute_force);
    RUN(chained_through_a_year);
}

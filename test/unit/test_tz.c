/* tz: zones from the system's zoneinfo against zdump's and glibc's answers, hand-made TZif
 * files for the POSIX rule forms, and the civil calendar. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "lib/tz.h"
#include "unit.h"

const struct tz *unit_zone(const char *name)
{
    char err[256];
    const struct tz *z = tz_get(name, err, sizeof(err));

    if (!z)
        fprintf(stderr, "tz_get(\"%s\"): %s\n", name, err);
    return z;
}

/* Seconds since the epoch of a civil time: a UTC instant, or local seconds. */
static int64_t at(int64_t y, unsigned mo, unsigned d, int h, int mi)
{
    return tz_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60;
}

/* The value of an environment variable, to put back with restore_env. */
static char *save_env(const char *name)
{
    const char *v = getenv(name);

    return v ? strdup(v) : NULL;
}

static void restore_env(const char *name, char *saved)
{
    if (saved)
        setenv(name, saved, 1);
    else
        unsetenv(name);
    free(saved);
}

static void civil_dates(void)
{
    int64_t y;
    unsigned m, d;

    CHECK_EQ_INT(tz_days_from_civil(1970, 1, 1), 0);
    CHECK_EQ_INT(tz_days_from_civil(1969, 12, 31), -1);
    CHECK_EQ_INT(tz_days_from_civil(2027, 3, 28), 1806192000 / 86400);
    CHECK_EQ_INT(tz_days_from_civil(2028, 2, 29), 1835395200 / 86400);
    CHECK_EQ_INT(tz_days_from_civil(2100, 3, 1) - tz_days_from_civil(2100, 2, 28), 1);
    CHECK_EQ_INT(tz_days_from_civil(2000, 3, 1) - tz_days_from_civil(2000, 2, 28), 2);
    CHECK_EQ_INT(tz_weekday(0), 4);                                    /* Thursday */
    CHECK_EQ_INT(tz_weekday(-1), 3);
    CHECK_EQ_INT(tz_weekday(tz_days_from_civil(2027, 3, 28)), 0);     /* Sunday */
    CHECK_EQ_INT(tz_weekday(tz_days_from_civil(2104, 2, 29)), 5);
    /* Every day of some 5000 years, either side of the epoch and of year 0, both ways. */
    tz_civil_from_days(-800001, &y, &m, &d);
    for (int64_t day = -800000; day <= 1000000; day++) {
        int64_t y2;
        unsigned m2, d2;
        tz_civil_from_days(day, &y2, &m2, &d2);
        CHECK(d2 == d + 1 || (d2 == 1 && (m2 == m + 1 || (m2 == 1 && m == 12 && y2 == y + 1))));
        CHECK_EQ_INT(tz_days_from_civil(y2, m2, d2), day);
        CHECK_EQ_INT(tz_weekday(day), ((day % 7) + 7 + 4) % 7);
        y = y2, m = m2, d = d2;
    }
}

struct wall {
    const char *zone;
    int64_t local;
    int n;
    int64_t first, second;
};

/* Each zdump -v -c 2027,2028 shows the changes these follow. */
static void gaps_and_overlaps_2027(void)
{
    const struct wall w[] = {
        { "Europe/Berlin", at(2027, 3, 28, 2, 30), 0, at(2027, 3, 28, 1, 0), 0 },
        { "Europe/Berlin", at(2027, 3, 28, 2, 0), 0, at(2027, 3, 28, 1, 0), 0 },
        { "Europe/Berlin", at(2027, 3, 28, 3, 0), 1, at(2027, 3, 28, 1, 0), 0 },
        { "Europe/Berlin", at(2027, 3, 28, 1, 59), 1, at(2027, 3, 28, 0, 59), 0 },
        { "Europe/Berlin", at(2027, 10, 31, 2, 30), 2, at(2027, 10, 31, 0, 30),
          at(2027, 10, 31, 1, 30) },
        { "Europe/Berlin", at(2027, 10, 31, 3, 0), 1, at(2027, 10, 31, 2, 0), 0 },
        { "America/New_York", at(2027, 3, 14, 2, 30), 0, at(2027, 3, 14, 7, 0), 0 },
        { "America/New_York", at(2027, 11, 7, 1, 30), 2, at(2027, 11, 7, 5, 30),
          at(2027, 11, 7, 6, 30) },
        { "Australia/Lord_Howe", at(2027, 10, 3, 2, 15), 0, at(2027, 10, 2, 15, 30), 0 },
        { "Australia/Lord_Howe", at(2027, 10, 3, 2, 30), 1, at(2027, 10, 2, 15, 30), 0 },
        { "Australia/Lord_Howe", at(2027, 4, 4, 1, 45), 2, at(2027, 4, 3, 14, 45),
          at(2027, 4, 3, 15, 15) },
        { "Australia/Lord_Howe", at(2027, 4, 4, 1, 29), 1, at(2027, 4, 3, 14, 29), 0 },
        { "Asia/Tokyo", at(2027, 3, 28, 2, 30), 1, at(2027, 3, 27, 17, 30), 0 },
        { "UTC", at(2027, 3, 28, 2, 30), 1, at(2027, 3, 28, 2, 30), 0 },
        /* 2100: long past the tables, the zones' TZ rules answer (zdump -c 2100,2101). */
        { "Europe/Berlin", at(2100, 3, 28, 2, 30), 0, at(2100, 3, 28, 1, 0), 0 },
        { "Europe/Berlin", at(2100, 10, 31, 2, 30), 2, at(2100, 10, 31, 0, 30),
          at(2100, 10, 31, 1, 30) },
        { "America/New_York", at(2100, 11, 7, 1, 30), 2, at(2100, 11, 7, 5, 30),
          at(2100, 11, 7, 6, 30) },
        { "Australia/Lord_Howe", at(2100, 10, 3, 2, 15), 0, at(2100, 10, 2, 15, 30), 0 },
    };

    for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
        const struct tz *z = unit_zone(w[i].zone);
        int64_t first = -1, second = -1;
        CHECK(z);
        CHECK_EQ_INT(tz_to_utc(z, w[i].local, &first, &second), w[i].n);
        CHECK_EQ_INT(first, w[i].first);
        if (w[i].n == 2)
            CHECK_EQ_INT(second, w[i].second);
    }
}

static void offsets_and_format(void)
{
    const struct tz *berlin = unit_zone("Europe/Berlin"), *ny = unit_zone("America/New_York");
    const struct tz *lh = unit_zone("Australia/Lord_Howe"), *utc = unit_zone("UTC");
    char out[64];

    CHECK(berlin && ny && lh && utc);
    CHECK_STR(tz_name(berlin), "Europe/Berlin");
    CHECK_EQ_INT(tz_offset(berlin, at(2027, 3, 28, 0, 59) + 59), 3600);
    CHECK_EQ_INT(tz_offset(berlin, at(2027, 3, 28, 1, 0)), 7200);
    CHECK_EQ_INT(tz_offset(berlin, at(2027, 10, 31, 0, 59) + 59), 7200);
    CHECK_EQ_INT(tz_offset(berlin, at(2027, 10, 31, 1, 0)), 3600);
    CHECK_EQ_INT(tz_offset(lh, at(2027, 6, 1, 0, 0)), 37800);
    CHECK_EQ_INT(tz_format(berlin, at(2027, 3, 28, 1, 0) * 1000, out, sizeof(out)), 29);
    CHECK_STR(out, "2027-03-28T03:00:00.000+02:00");
    tz_format(berlin, at(2027, 3, 28, 0, 59) * 1000 + 59999, out, sizeof(out));
    CHECK_STR(out, "2027-03-28T01:59:59.999+01:00");
    tz_format(ny, at(2027, 11, 7, 6, 30) * 1000 + 5, out, sizeof(out));
    CHECK_STR(out, "2027-11-07T01:30:00.005-05:00");
    tz_format(lh, at(2027, 4, 3, 15, 15) * 1000, out, sizeof(out));
    CHECK_STR(out, "2027-04-04T01:45:00.000+10:30");
    tz_format(utc, -1, out, sizeof(out));
    CHECK_STR(out, "1969-12-31T23:59:59.999+00:00");
    /* Local mean time, before standard time: an offset with seconds (zdump: gmtoff=3208). */
    tz_format(berlin, at(1890, 1, 1, 0, 0) * 1000, out, sizeof(out));
    CHECK_STR(out, "1890-01-01T00:53:28.000+00:53:28");
    CHECK_EQ_INT(tz_format(utc, 0, out, 11), 29);   /* cut short, like snprintf */
    CHECK_STR(out, "1970-01-01");
}

static void names_refused_and_unknown(void)
{
    static const char *const bad[] = { "../etc/passwd", "/etc/passwd", "Europe/../../etc/passwd",
                                       "Europe/./Berlin", "Europe/Berlin/", "Europe//Berlin",
                                       "", "Europe/Berlin\n", "Europe Berlin", ".." };
    char err[256], longname[300];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK(!tz_get(bad[i], err, sizeof(err)));
        CHECK_HAS(err, "invalid time zone name");
    }
    memset(longname, 'A', 256);
    longname[256] = '\0';
    CHECK(!tz_get(longname, err, sizeof(err)));
    CHECK_HAS(err, "invalid time zone name");
    CHECK(!tz_get("Foo/Bar", err, sizeof(err)));
    CHECK_STR(err, "unknown time zone \"Foo/Bar\"");
    CHECK(!tz_get("Europe", err, sizeof(err)));   /* a directory */
    CHECK_STR(err, "unknown time zone \"Europe\"");
    CHECK(unit_zone("Etc/GMT+5"));
    CHECK_EQ_INT(tz_offset(unit_zone("Etc/GMT+5"), 0), -5 * 3600);   /* POSIX signs: west */
    CHECK(tz_get("Europe/Berlin", err, sizeof(err)) == tz_get("Europe/Berlin", err, sizeof(err)));
}

/* ---- Hand-made TZif files ---- */

static unsigned char *put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
    return p + 4;
}

/* A header and data block: n transitions (times of tsize bytes) between types of utoff. */
static unsigned char *put_block(unsigned char *p, int version, size_t tsize, const int64_t *trans,
                                const uint8_t *idx, size_t n, const int32_t *utoff, size_t ntypes)
{
    memcpy(p, "TZif", 4);
    p[4] = version == 1 ? 0 : (unsigned char)('0' + version);
    memset(p + 5, 0, 15);
    p = put32(put32(put32(p + 20, 0), 0), 0);
    p = put32(put32(put32(p, (uint32_t)n), (uint32_t)ntypes), 4);
    for (size_t i = 0; i < n; i++)
        p = tsize == 8 ? put32(put32(p, (uint32_t)((uint64_t)trans[i] >> 32)), (uint32_t)trans[i])
                       : put32(p, (uint32_t)trans[i]);
    for (size_t i = 0; i < n; i++)
        *p++ = idx[i];
    for (size_t i = 0; i < ntypes; i++) {
        p = put32(p, (uint32_t)utoff[i]);
        *p++ = 0;
        *p++ = 0;
    }
    memcpy(p, "ABC", 4);
    return p + 4;
}

static char tmpdir[64];

/* The path of a file in tmpdir. */
static const char *tmp_path(const char *name)
{
    static char path[512];

    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    return path;
}

/* Writes dir/name: a TZif file of the version (1: v1 alone; 2: a v1 block, then the 64-bit
 * block and the footer). */
static int write_zone(const char *name, int version, const int64_t *trans, const uint8_t *idx,
                      size_t n, const int32_t *utoff, size_t ntypes, const char *footer)
{
    unsigned char buf[4096], *p = put_block(buf, version, 4, trans, idx, n, utoff, ntypes);
    FILE *f;

    if (version >= 2) {
        p = put_block(p, version, 8, trans, idx, n, utoff, ntypes);
        p += sprintf((char *)p, "\n%s\n", footer);
    }
    if (!(f = fopen(tmp_path(name), "wb")))
        return -1;
    fwrite(buf, 1, (size_t)(p - buf), f);
    return fclose(f);
}

/* The zone of a file in tmpdir. */
static const struct tz *test_zone(const char *name, char *err, size_t errlen)
{
    char *saved = save_env("TZDIR");
    const struct tz *z;

    setenv("TZDIR", tmpdir, 1);
    z = tz_get(name, err, errlen);
    restore_env("TZDIR", saved);
    return z;
}

/* glibc's offset at t for a TZ value (a zone name or a POSIX rule): the reference. */
static int32_t glibc_offset(const char *tzval, int64_t t)
{
    time_t tt = (time_t)t;
    struct tm tm;

    setenv("TZ", tzval, 1);
    tzset();
    localtime_r(&tt, &tm);
    return (int32_t)tm.tm_gmtoff;
}

/* Compares z with glibc hourly through the years, and checks that every instant is among
 * those tz_to_utc gives for the wall time it shows. */
static int agrees_with_glibc(const struct tz *z, const char *tzval, int64_t from_year,
                             int64_t to_year)
{
    char *saved = save_env("TZ");
    int ok = 1;

    for (int64_t t = at(from_year, 1, 1, 0, 0); ok && t < at(to_year + 1, 1, 1, 0, 0); t += 1800) {
        int32_t off = tz_offset(z, t);
        int64_t first = 0, second = 0;
        int n = tz_to_utc(z, t + off, &first, &second);
        if (off != glibc_offset(tzval, t) || n < 1 || (first != t && (n < 2 || second != t))) {
            fprintf(stderr, "%s at %lld: offset %d, glibc %d; wall time -> %d: %lld %lld\n",
                    tzval, (long long)t, off, glibc_offset(tzval, t), n, (long long)first,
                    (long long)second);
            ok = 0;
        }
    }
    restore_env("TZ", saved);
    tzset();
    return ok;
}

/* The footer forms of RFC 8536, each against glibc reading the same rule from TZ. */
static void footer_rules(void)
{
    static const char *const rules[] = {
        "CET-1CEST,M3.5.0,M10.5.0/3", "EST5EDT,M3.2.0,M11.1.0",
        "<+1030>-10:30<+11>-11,M10.1.0,M4.1.0", "JST-9", "<-03>3",
        "<-02>2<-01>,M3.5.0/-1,M10.5.0/0",          /* negative time */
        "IST-2IDT,M3.4.4/26,M10.5.0",               /* past 24 h */
        "<-04>4<-03>,M9.1.6/24,M4.1.6/24", "IST-1GMT0,M10.5.0,M3.5.0/1",   /* negative DST */
        "XXX3YYY,J60/2,J300/2", "XXX3YYY,59/2,299/2",
        "AAA+3:30:15BBB+2:30:15,M4.5.6/-3:30,M9.1.1/100", "EST5EDT",
    };
    char name[32], err[256];

    for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
        const int32_t utoff = 0;
        const struct tz *z;
        snprintf(name, sizeof(name), "Footer%zu", i);
        CHECK_EQ_INT(write_zone(name, 2, NULL, NULL, 0, &utoff, 1, rules[i]), 0);
        z = test_zone(name, err, sizeof(err));
        CHECK(z);
        CHECK(agrees_with_glibc(z, rules[i], 2027, 2028));
    }
}

/* RFC 8536's example of daylight saving all year. glibc shows standard time in the first five
 * hours of each year (it takes the year from UTC), so the check is by hand. */
static void all_year_daylight_saving(void)
{
    const int32_t utoff = -18000;
    const struct tz *z;
    char err[256];

    CHECK_EQ_INT(write_zone("AllYear", 2, NULL, NULL, 0, &utoff, 1, "EST5EDT,0/0,J365/25"), 0);
    CHECK((z = test_zone("AllYear", err, sizeof(err))));
    for (int64_t t = at(2026, 12, 30, 0, 0); t < at(2029, 1, 2, 0, 0); t += 900)
        CHECK_EQ_INT(tz_offset(z, t), -14400);
}

/* The table answers up to its last transition, the footer after it; a file without a v2
 * block is read from its v1 block. */
static void table_then_footer_and_v1(void)
{
    const int64_t trans[] = { at(2000, 1, 1, 0, 0), at(2026, 10, 25, 1, 0) };
    const uint8_t idx[] = { 1, 0 };
    const int32_t utoff[] = { 3600, 7200 };
    const struct tz *z;
    char err[256];

    CHECK_EQ_INT(write_zone("Table", 2, trans, idx, 2, utoff, 2, "CET-1CEST,M3.5.0,M10.5.0/3"), 0);
    CHECK((z = test_zone("Table", err, sizeof(err))));
    CHECK_EQ_INT(tz_offset(z, at(1999, 7, 1, 0, 0)), 3600);   /* type 0, before the first */
    CHECK_EQ_INT(tz_offset(z, at(2010, 1, 1, 0, 0)), 7200);   /* the table */
    CHECK_EQ_INT(tz_offset(z, at(2027, 1, 1, 0, 0)), 3600);   /* the footer */
    CHECK_EQ_INT(tz_offset(z, at(2027, 7, 1, 0, 0)), 7200);
    CHECK_EQ_INT(tz_next_change(z, at(2010, 1, 1, 0, 0)), at(2026, 10, 25, 1, 0));
    CHECK_EQ_INT(tz_next_change(z, at(2026, 10, 25, 1, 0)), at(2027, 3, 28, 1, 0));
    CHECK_EQ_INT(write_zone("Old", 1, trans, idx, 2, utoff, 2, NULL), 0);
    CHECK((z = test_zone("Old", err, sizeof(err))));
    CHECK_EQ_INT(tz_offset(z, at(2010, 1, 1, 0, 0)), 7200);
    CHECK_EQ_INT(tz_offset(z, at(2027, 7, 1, 0, 0)), 3600);   /* no footer: the last type */
    CHECK_EQ_INT(tz_next_change(z, at(2027, 7, 1, 0, 0)), INT64_MAX);
}

static void files_that_are_not_zones(void)
{
    const int32_t utoff = 0;
    char err[256];
    FILE *f;

    CHECK((f = fopen(tmp_path("Text"), "w")));
    fputs("this is no zone\n", f);
    fclose(f);
    CHECK(!test_zone("Text", err, sizeof(err)));
    CHECK_STR(err, "time zone \"Text\" is not a TZif file");
    CHECK_EQ_INT(write_zone("BadRule", 2, NULL, NULL, 0, &utoff, 1, "CET-1CEST,M13.5.0,M10.5.0"),
                 0);
    CHECK(!test_zone("BadRule", err, sizeof(err)));
    CHECK_STR(err, "time zone \"BadRule\" has a TZ rule that cannot be read");
    CHECK_EQ_INT(write_zone("Cut", 2, NULL, NULL, 0, &utoff, 1, "UTC0"), 0);
    CHECK(!truncate(tmp_path("Cut"), 80));   /* within the second header */
    CHECK(!test_zone("Cut", err, sizeof(err)));
    CHECK_STR(err, "time zone \"Cut\" is a damaged TZif file");
}

/* UTC needs no file; TZDIR is where zones come from. */
static void utc_without_zoneinfo(void)
{
    char *saved = save_env("TZDIR"), err[256];
    const struct tz *z;

    setenv("TZDIR", "/nonexistent", 1);
    z = tz_get("UTC", err, sizeof(err));
    CHECK(!tz_get("Asia/Kolkata", err, sizeof(err)));
    restore_env("TZDIR", saved);
    CHECK_STR(err, "unknown time zone \"Asia/Kolkata\"");
    CHECK(z);
    CHECK_EQ_INT(tz_offset(z, 1800000000), 0);
    CHECK_EQ_INT(tz_next_change(z, 0), INT64_MAX);
}

/* The system's zones hour by hour against glibc: this year's tables, the footers far on. */
static void real_zones_agree_with_glibc(void)
{
    static const char *const zones[] = {
        "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Tokyo",
        "Europe/Dublin", "America/Nuuk", "Asia/Jerusalem", "America/Santiago",
        "Antarctica/Troll", "Africa/Casablanca", "Pacific/Apia",
    };

    for (size_t i = 0; i < sizeof(zones) / sizeof(zones[0]); i++) {
        const struct tz *z = unit_zone(zones[i]);
        CHECK(z);
        CHECK(agrees_with_glibc(z, zones[i], 2027, 2027));
        if (i < 4)
            CHECK(agrees_with_glibc(z, zones[i], 2100, 2100));
    }
    CHECK(agrees_with_glibc(unit_zone("Pacific/Apia"), "Pacific/Apia", 2011, 2011));   /* a lost day */
}

struct lookup {
    const char *name;
    const struct tz *z;
};

static void *lookup(void *arg)
{
    struct lookup *l = arg;
    char err[256];

    for (int i = 0; i < 100; i++)
        l->z = tz_get(l->name, err, sizeof(err));
    return NULL;
}

static void shared_between_threads(void)
{
    struct lookup l[4] = { { "Europe/Paris", NULL }, { "Europe/Paris", NULL },
                           { "America/Chicago", NULL }, { "America/Chicago", NULL } };
    pthread_t th[4];

    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(pthread_create(&th[i], NULL, lookup, &l[i]), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    CHECK(l[0].z && l[0].z == l[1].z && l[2].z && l[2].z == l[3].z);
    CHECK_STR(tz_name(l[2].z), "America/Chicago");
}

/* Removes tmpdir and the files in it. */
static void remove_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    struct dirent *e;

    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.')
            unlink(tmp_path(e->d_name));
    if (d)
        closedir(d);
    rmdir(tmpdir);
}

void unit_tz(void)
{
    RUN(civil_dates);
    RUN(gaps_and_overlaps_2027);
    RUN(offsets_and_format);
    RUN(names_refused_and_unknown);
    RUN(utc_without_zoneinfo);
    RUN(real_zones_agree_with_glibc);
    RUN(shared_between_threads);
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/unit-tz-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return;
    }
    RUN(footer_rules);
    RUN(all_year_daylight_saving);
    RUN(table_then_footer_and_v1);
    RUN(files_that_are_not_zones);
    remove_tmpdir();
}

/* recur: fire times of intervals and crons, and the plan of an occurrence that comes due. */
#include <string.h>

#include "core/recur.h"
#include "schedules/schedjson.h"
#include "unit.h"

/* An interval of every_ms from anchor_ms, catch_up c. */
static struct recur_timing every(int64_t every_ms, int64_t anchor_ms, enum recur_catch_up c)
{
    struct recur_timing t;
    char err[128];

    memset(&t, 0, sizeof(t));
    t.every_ms = every_ms;
    t.anchor_ms = anchor_ms;
    t.catch_up = c;
    t.catch_up_max = 100;
    t.tz = tz_get("UTC", err, sizeof(err));
    return t;
}

static void interval_fire_times(void)
{
    struct recur_timing t = every(1000, 5000, RECUR_SKIP);

    CHECK_EQ_INT(recur_next(&t, 0), 5000);        /* the anchor is the first */
    CHECK_EQ_INT(recur_next(&t, 5000), 6000);     /* strictly after */
    CHECK_EQ_INT(recur_next(&t, 5999), 6000);
    CHECK_EQ_INT(recur_next(&t, 6000), 7000);
    t.start_ms = 9500;
    CHECK_EQ_INT(recur_next(&t, 0), 10000);       /* on the anchor's grid, from the start */
    t.end_ms = 11000;
    CHECK_EQ_INT(recur_next(&t, 10000), 11000);   /* the end itself fires */
    CHECK_EQ_INT(recur_next(&t, 11000), -1);
}

static void on_time_runs_and_plans_the_next(void)
{
    struct recur_timing t = every(1000, 0, RECUR_SKIP);
    struct recur_plan p;

    recur_plan(&t, "s", 5000, 4, 5003, &p);   /* 3 ms late: the current one */
    CHECK_EQ_INT(p.run, 1);
    CHECK_EQ_INT(p.missed, 0);
    CHECK_EQ_INT(p.next_ms, 6000);
}

static void missed_skip_once_all(void)
{
    struct recur_timing t = every(1000, 0, RECUR_SKIP);
    struct recur_plan p;

    recur_plan(&t, "s", 5000, 0, 9500, &p);   /* 6000..9000 passed too */
    CHECK_EQ_INT(p.missed, 1);
    CHECK_EQ_INT(p.run, 0);
    CHECK_EQ_INT(p.next_ms, 10000);
    t.catch_up = RECUR_ONCE;
    recur_plan(&t, "s", 5000, 0, 9500, &p);
    CHECK_EQ_INT(p.run, 1);
    CHECK_EQ_INT(p.next_ms, 10000);
    t.catch_up = RECUR_ALL;
    recur_plan(&t, "s", 5000, 0, 9500, &p);   /* 5 missed, within catch_up_max */
    CHECK_EQ_INT(p.run, 1);
    CHECK_EQ_INT(p.next_ms, 6000);
    t.catch_up_max = 3;                  /* only the last 3 (7000, 8000, 9000) run */
    recur_plan(&t, "s", 5000, 0, 9500, &p);
    CHECK_EQ_INT(p.run, 0);
    CHECK_EQ_INT(p.next_ms, 7000);
    recur_plan(&t, "s", 7000, 0, 9500, &p);
    CHECK_EQ_INT(p.run, 1);
    CHECK_EQ_INT(p.next_ms, 8000);
}

static void cron_catch_up_all_walks_the_calendar(void)
{
    struct recur_timing t = every(1000, 0, RECUR_ALL);
    struct recur_plan p;
    char err[128];

    t.every_ms = 0;
    CHECK(cron_parse("0 * * * *", &t.cron, err, sizeof(err)) == 0);   /* hourly */
    t.catch_up_max = 2;
    recur_plan(&t, "s", 3600000, 0, 5 * 3600000 + 10, &p);   /* 1h..5h due: keep 4h and 5h */
    CHECK_EQ_INT(p.run, 0);
    CHECK_EQ_INT(p.next_ms, 4 * 3600000);
    recur_plan(&t, "s", 4 * 3600000, 0, 5 * 3600000 + 10, &p);
    CHECK_EQ_INT(p.run, 1);
    CHECK_EQ_INT(p.next_ms, 5 * 3600000);
}

static void max_runs_and_end(void)
{
    struct recur_timing t = every(1000, 0, RECUR_SKIP);
    struct recur_plan p;

    t.max_runs = 3;
    recur_plan(&t, "s", 2000, 1, 2001, &p);   /* the 2nd run: one more to come */
    CHECK_EQ_INT(p.next_ms, 3000);
    recur_plan(&t, "s", 3000, 2, 3001, &p);   /* the 3rd: the last */
    CHECK_EQ_INT(p.run, 1);
    CHECK_EQ_INT(p.next_ms, -1);
    t.max_runs = 0;
    t.end_ms = 3500;
    recur_plan(&t, "s", 3000, 2, 3001, &p);
    CHECK_EQ_INT(p.next_ms, -1);
}

static void first_after_a_pause(void)
{
    struct recur_timing t = every(1000, 0, RECUR_SKIP);

    CHECK_EQ_INT(recur_first(&t, 9500, 0), 10000);
    CHECK_EQ_INT(recur_first(&t, 9500, 5000), 10000);   /* skip: what passed is not run */
    t.catch_up = RECUR_ONCE;
    /* the one the pause cancelled, planned as missed; not the one after the last run */
    CHECK_EQ_INT(recur_first(&t, 9500, 6000), 6000);
    CHECK_EQ_INT(recur_first(&t, 9500, 0), 10000);      /* nothing was pending */
    CHECK_EQ_INT(recur_first(&t, 9500, 20000), 10000);  /* pending later than now: the next */
}

static void jitter_is_the_same_everywhere_and_bounded(void)
{
    int64_t a = recur_jitter("s", 1000, 500), b = recur_jitter("s", 2000, 500);

    CHECK_EQ_INT(recur_jitter("s", 1000, 500), a);
    CHECK(a >= 0 && a < 500 && b >= 0 && b < 500);
    CHECK_EQ_INT(recur_jitter("s", 1000, 0), 0);
    CHECK(recur_jitter("s", 1000, 1000000) != recur_jitter("t", 1000, 1000000));
}

/* An occurrence is missed only when the next one is due: its fire time plus its jitter. */
static void jitter_moves_what_counts_as_missed(void)
{
    struct recur_timing t = every(1000, 0, RECUR_SKIP);
    struct recur_plan p;
    int64_t j;

    t.jitter_ms = 900;
    j = recur_jitter("s", 6000, 900);
    CHECK(j > 0);
    recur_plan(&t, "s", 5000, 0, 6000 + j - 1, &p);   /* 6000 passed, not yet due */
    CHECK_EQ_INT(p.missed, 0);
    CHECK_EQ_INT(p.run, 1);
    CHECK_EQ_INT(p.next_ms, 6000);
    recur_plan(&t, "s", 5000, 0, 6000 + j, &p);
    CHECK_EQ_INT(p.missed, 1);
    CHECK_EQ_INT(p.run, 0);
}

/* catch_up all counts only fire times up to end_at_ms, for intervals as for crons. */
static void catch_up_all_stops_at_the_end(void)
{
    struct recur_timing t = every(1000, 0, RECUR_ALL);
    struct recur_plan p;

    t.end_ms = 7000;
    t.catch_up_max = 2;                  /* 5000, 6000, 7000 missed: keep 6000 and 7000 */
    recur_plan(&t, "s", 5000, 0, 9500, &p);
    CHECK_EQ_INT(p.run, 0);
    CHECK_EQ_INT(p.next_ms, 6000);
    recur_plan(&t, "s", 7000, 0, 9500, &p);
    CHECK_EQ_INT(p.run, 1);
    CHECK_EQ_INT(p.next_ms, -1);
}

static void definitions_read_and_refused(void)
{
    static const char *const names[] = { "1s", "5s" };
    struct levels lv;
    struct api_limits lim = { .levels = &lv, .dlq_topic = "dlq", .max_delay_ms = 86400000 };
    struct sched_def def;
    struct recur_timing back;
    struct api_error e;
    char err[256];
    const char *ok = "{\"cron\": \"30 2 * * *\", \"timezone\": \"Europe/Berlin\", \"topic\": "
                     "\"orders\", \"body\": \"x\", \"catch_up\": \"once\", \"jitter_ms\": 100}";

    CHECK(levels_init(&lv, names, 2, "d_%s", err, sizeof(err)) == 0);
    CHECK(schedjson_parse_def(ok, strlen(ok), &lim, 1000, &def, &e) == 0);
    CHECK_STR(def.timing.cron_text, "30 2 * * *");
    CHECK_EQ_INT(def.timing.catch_up, RECUR_ONCE);
    CHECK_HAS(def.job_json, "\"topic\":\"orders\"");
    CHECK(strstr(def.job_json, "cron") == NULL);
    CHECK(timing_parse(def.timing_json, strlen(def.timing_json), &back, err,
                                 sizeof(err)) == 0);
    CHECK_STR(tz_name(back.tz), "Europe/Berlin");
    CHECK_EQ_INT(back.jitter_ms, 100);
    CHECK_EQ_INT(back.overlap_skip, 0);
    CHECK_EQ_INT(def.immediately, 0);
    sched_def_release(&def);

    /* overlap is a timing field, kept; immediately a request of the put, not kept */
    ok = "{\"every_ms\": 5000, \"topic\": \"t\", \"overlap\": \"skip\", \"immediately\": true}";
    CHECK(schedjson_parse_def(ok, strlen(ok), &lim, 1234, &def, &e) == 0);
    CHECK_EQ_INT(def.immediately, 1);
    CHECK(strstr(def.job_json, "immediately") == NULL && strstr(def.timing_json, "immediately") == NULL);
    CHECK(timing_parse(def.timing_json, strlen(def.timing_json), &back, err, sizeof(err)) == 0);
    CHECK_EQ_INT(back.overlap_skip, 1);
    sched_def_release(&def);

    ok = "{\"every_ms\": 5000, \"topic\": \"t\"}";
    CHECK(schedjson_parse_def(ok, strlen(ok), &lim, 1234, &def, &e) == 0);
    CHECK_EQ_INT(def.timing.anchor_ms, 1234);   /* kept, so every instance has the same grid */
    CHECK_HAS(def.timing_json, "\"anchor_ms\":1234");
    sched_def_release(&def);
    ok = "{\"cron\": \"0,30 * * * * *\", \"topic\": \"t\", \"jitter_ms\": 29999}";
    CHECK(schedjson_parse_def(ok, strlen(ok), &lim, 1234, &def, &e) == 0);
    sched_def_release(&def);
    /* the same timing put again, or put at another time, reads as the same */
    CHECK(schedjson_same_timing("{\"every_ms\":5000,\"anchor_ms\":1234}",
                                "{\"every_ms\":5000,\"anchor_ms\":99}"));
    CHECK(!schedjson_same_timing("{\"every_ms\":5000,\"anchor_ms\":1234}",
                                 "{\"every_ms\":6000,\"anchor_ms\":1234}"));
    CHECK(!schedjson_same_timing("{\"cron\":\"* * * * *\"}",
                                 "{\"cron\":\"* * * * *\",\"max_runs\":3}"));

    static const struct { const char *body, *says; } bad[] = {
        { "{\"every_ms\": 500, \"topic\": \"t\"}", "every_ms must be at least 1000" },
        { "{\"cron\": \"0 0 * * * * *\", \"topic\": \"t\"}", "cron" },
        { "{\"cron\": \"0 0 * * *\", \"timezone\": \"../etc/passwd\", \"topic\": \"t\"}", "timezone" },
        { "{\"every_ms\": 1000, \"topic\": \"t\", \"id\": \"x\"}", "id is not a field" },
        { "{\"every_ms\": 1000, \"topic\": \"d_5s\"}", "topic" },
        { "{\"every_ms\": 1000, \"topic\": \"t\", \"catch_up_max\": 0}", "catch_up_max" },
        { "{\"every_ms\": 1000, \"topic\": \"t\", \"anchor_ms\": 5}", "anchor_ms" },
        { "[1]", "JSON object" },
        { "{\"every_ms\": 1000, \"topic\": \"t\", \"jitter_ms\": 1000}",
          "jitter_ms must be less than the shortest time between two fire times (1000 ms)" },
        { "{\"cron\": \"0,30 * * * * *\", \"topic\": \"t\", \"jitter_ms\": 30000}",
          "(30000 ms)" },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&e, 0, sizeof(e));
        CHECK(schedjson_parse_def(bad[i].body, strlen(bad[i].body), &lim, 1000, &def, &e) < 0);
        CHECK_EQ_INT(e.status, 400);
        CHECK_HAS(e.message, bad[i].says);
        sched_def_release(&def);
    }
}


/* An occurrence further off than the longest delay is parked: indexed for the sweep to make it
 * within the longest delay, before it is due, at most a minute after it may. */
static void parked_occurrences_are_made_in_time(void)
{
    const int64_t day = 86400000, now = 1800000000000, lag = 4000;

    CHECK(!recur_parked(now + 30 * day, now, 30 * day));
    CHECK_EQ_INT(recur_index_ms(now + 30 * day, now, 30 * day, lag), now + 30 * day);
    CHECK(recur_parked(now + 365 * day, now, 30 * day));
    CHECK_EQ_INT(recur_index_ms(now + 365 * day, now, 30 * day, lag), now + 335 * day + 60000);
    /* a short longest delay: looked at (index + lag) before it is due, and within it */
    for (int64_t max = 2000; max <= 120000; max += 1000) {
        int64_t due = now + max + 1, at = recur_index_ms(due, now, max, lag);
        CHECK(at + lag < due);
        CHECK(due - (at + lag - 1000) <= max);   /* the earliest look: a sweep period sooner */
    }
}

void unit_recur(void)
{
    RUN(interval_fire_times);
    RUN(on_time_runs_and_plans_the_next);
    RUN(missed_skip_once_all);
    RUN(cron_catch_up_all_walks_the_calendar);
    RUN(max_runs_and_end);
    RUN(first_after_a_pause);
    RUN(jitter_is_the_same_everywhere_and_bounded);
    RUN(jitter_moves_what_counts_as_missed);
    RUN(catch_up_all_stops_at_the_end);
    RUN(definitions_read_and_refused);
    RUN(parked_occurrences_are_made_in_time);
}

#include "lib/log.h"
#include "unit.h"

static void log_parse_level_known_names(void)
{
    enum log_level l = LOG_ERROR;

    CHECK_EQ_INT(log_parse_level("debug", &l), 0);
    CHECK_EQ_INT(l, LOG_DEBUG);
    CHECK_EQ_INT(log_parse_level("info", &l), 0);
    CHECK_EQ_INT(l, LOG_INFO);
    CHECK_EQ_INT(log_parse_level("warn", &l), 0);
    CHECK_EQ_INT(l, LOG_WARN);
    CHECK_EQ_INT(log_parse_level("error", &l), 0);
    CHECK_EQ_INT(l, LOG_ERROR);
}

static void log_parse_level_ignores_case(void)
{
    enum log_level l = LOG_INFO;

    CHECK_EQ_INT(log_parse_level("DEBUG", &l), 0);
    CHECK_EQ_INT(l, LOG_DEBUG);
}

static void log_parse_level_rejects_unknown(void)
{
    enum log_level l = LOG_WARN;

    CHECK_EQ_INT(log_parse_level("", &l), -1);
    CHECK_EQ_INT(log_parse_level("warning", &l), -1);
    CHECK_EQ_INT(log_parse_level("info ", &l), -1);
    CHECK_EQ_INT(log_parse_level("trace", &l), -1);
    CHECK_EQ_INT(l, LOG_WARN);
}

static void log_enabled_follows_level(void)
{
    log_set_level(LOG_WARN);
    CHECK(!log_enabled(LOG_INFO));
    CHECK(log_enabled(LOG_WARN));
    CHECK(log_enabled(LOG_ERROR));
    log_set_level(LOG_INFO);
    CHECK(log_enabled(LOG_INFO));
    CHECK(!log_enabled(LOG_DEBUG));
}

/* A repeating warning: the first passes, the next ones within the interval are counted, and
 * the first after it passes with that count. */
static void log_gate_limits_and_counts(void)
{
    struct log_gate g = { 0, 0 };
    unsigned long held = 99;

    CHECK(log_gate_open(&g, 1000, 5000, &held));
    CHECK_EQ_INT(held, 0);
    CHECK(!log_gate_open(&g, 2000, 5000, &held));
    CHECK(!log_gate_open(&g, 5999, 5000, &held));
    CHECK(log_gate_open(&g, 6000, 5000, &held));
    CHECK_EQ_INT(held, 2);
    CHECK(!log_gate_open(&g, 6001, 5000, &held));
    CHECK(log_gate_open(&g, 20000, 5000, &held));
    CHECK_EQ_INT(held, 1);
}

void unit_log(void)
{
    RUN(log_gate_limits_and_counts);
    RUN(log_parse_level_known_names);
    RUN(log_parse_level_ignores_case);
    RUN(log_parse_level_rejects_unknown);
    RUN(log_enabled_follows_level);
}

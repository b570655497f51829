/* unit: a tiny test harness for the pure modules. A test is a static void function of no
 * arguments; a CHECK that fails reports file and line, marks the test failed and returns from it.
 * Each test file exports one group function that RUNs its tests; main.c calls every group. */
#ifndef DQ_UNIT_H
#define DQ_UNIT_H

#include <stdint.h>
#include <string.h>

/* Reports a failed check of the running test on stderr and marks it failed. */
void unit_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Runs one test and counts it; prints "FAIL name" when it failed, "ok name" with UNIT_VERBOSE. */
void unit_run(const char *name, void (*fn)(void));

#define RUN(fn) unit_run(#fn, fn)

#define CHECK(cond) do { \
    if (!(cond)) { \
        unit_fail(__FILE__, __LINE__, "CHECK failed: %s", #cond); \
        return; \
    } \
} while (0)

#define CHECK_EQ_INT(a, b) do { \
    long long unit_a_ = (long long)(a), unit_b_ = (long long)(b); \
    if (unit_a_ != unit_b_) { \
        unit_fail(__FILE__, __LINE__, "CHECK_EQ_INT failed: %s == %s (%lld != %lld)", #a, #b, \
                  unit_a_, unit_b_); \
        return; \
    } \
} while (0)

#define CHECK_STR(a, b) do { \
    const char *unit_a_ = (a), *unit_b_ = (b); \
    if (!unit_a_ || !unit_b_ || strcmp(unit_a_, unit_b_) != 0) { \
        unit_fail(__FILE__, __LINE__, "CHECK_STR failed: %s == %s (\"%s\" != \"%s\")", #a, #b, \
                  unit_a_ ? unit_a_ : "(null)", unit_b_ ? unit_b_ : "(null)"); \
        return; \
    } \
} while (0)

/* hay contains needle. */
#define CHECK_HAS(hay, needle) do { \
    const char *unit_a_ = (hay), *unit_b_ = (needle); \
    if (!unit_a_ || !strstr(unit_a_, unit_b_)) { \
        unit_fail(__FILE__, __LINE__, "CHECK_HAS failed: %s contains %s (\"%s\" lacks \"%s\")", \
                  #hay, #needle, unit_a_ ? unit_a_ : "(null)", unit_b_); \
        return; \
    } \
} while (0)

/* One group per module, defined in test_<module>.c. */
void unit_levels(void);
void unit_route(void);
void unit_envelope(void);
void unit_job(void);
void unit_heap(void);
void unit_offsets(void);
void unit_api(void);
void unit_pending(void);
void unit_sign(void);
void unit_callplan(void);
void unit_config(void);
void unit_log(void);
void unit_share(void);
void unit_metrics(void);
void unit_sentinel(void);
void unit_slots(void);
void unit_rpipe(void);
void unit_addrs(void);
void unit_workers(void);
void unit_netaddr(void);
void unit_ratelimit(void);
void unit_gojson(void);
void unit_stats_kafka(void);
void unit_fnv(void);
void unit_kafka_offsets(void);
void unit_cron(void);
void unit_tz(void);
void unit_recur(void);

struct tz;
/* A zone that must load (test_tz.c); NULL, and its error on stderr, when it does not. */
const struct tz *unit_zone(const char *name);

#endif

/* Runs every unit test group and prints one summary line: "N passed, M failed". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "unit.h"

static int passed, failed;
static int current_failed;

void unit_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    current_failed = 1;
}

void unit_run(const char *name, void (*fn)(void))
{
    current_failed = 0;
    fn();
    if (current_failed) {
        failed++;
        printf("FAIL %s\n", name);
    } else {
        passed++;
        if (getenv("UNIT_VERBOSE"))
            printf("ok %s\n", name);
    }
    fflush(stdout);
}

int main(void)
{
    unit_log();
    unit_share();
    unit_metrics();
    unit_sentinel();
    unit_slots();
    unit_rpipe();
    unit_addrs();
    unit_workers();
    unit_levels();
    unit_route();
    unit_envelope();
    unit_job();
    unit_heap();
    unit_fnv();
    unit_offsets();
    unit_api();
    unit_config();
    unit_pending();
    unit_sign();
    unit_callplan();
    unit_tz();
    unit_cron();
    unit_recur();
    unit_netaddr();
    unit_ratelimit();
    unit_gojson();
    unit_stats_kafka();
    unit_kafka_offsets();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

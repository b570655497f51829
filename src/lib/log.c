/* log: one line per event on stderr, with time, level and module, filtered by level; gates that
 * turn a repeating failure into one line per interval. The contract is in include/lib/log.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "lib/log.h"

static volatile enum log_level min_level = LOG_INFO;

static const char *const level_names[] = { "debug", "info", "warn", "error" };

void log_set_level(enum log_level level)
{
    min_level = level;
}

int log_enabled(enum log_level level)
{
    return level >= min_level;
}

int log_parse_level(const char *name, enum log_level *out)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (strcasecmp(name, level_names[i]) == 0) {
            *out = (enum log_level)i;
            return 0;
        }
    }
    return -1;
}

void log_write(enum log_level level, const char *module, int errnum, const char *fmt, ...)
{
    char line[2048], stamp[32];
    struct timespec ts;
    struct tm tm;
    va_list ap;
    int n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);

    n = snprintf(line, sizeof(line), "%s.%03ldZ %-5s %s: ", stamp, ts.tv_nsec / 1000000L,
                 level_names[level], module);
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof(line))
        n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (errnum && n >= 0 && (size_t)n < sizeof(line)) {
        char ebuf[128];
        snprintf(line + n, sizeof(line) - (size_t)n, ": %s",
                 strerror_r(errnum, ebuf, sizeof(ebuf)));
    }
    /* One fprintf per line keeps lines whole when several threads log. */
    fprintf(stderr, "%s\n", line);
}

int log_gate_open(struct log_gate *g, int64_t now_ms, int64_t interval_ms, unsigned long *suppressed)
{
    if (g->last_ms && now_ms - g->last_ms < interval_ms) {
        g->held++;
        return 0;
    }
    *suppressed = g->held;
    g->held = 0;
    g->last_ms = now_ms;
    return 1;
}

/* log: levelled, one line per event, greppable key=value text on stderr. */
#ifndef DQ_LOG_H
#define DQ_LOG_H

#include <errno.h>
#include <stdint.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };

/* Only messages at or above the level are written. Default LOG_INFO. */
void log_set_level(enum log_level level);
int log_enabled(enum log_level level);

/* Parses "debug" | "info" | "warn" | "error". Returns 0, or -1 when unknown. */
int log_parse_level(const char *name, enum log_level *out);

/* Writes one line: time, level, module, message and, when errnum != 0, its strerror text. */
void log_write(enum log_level level, const char *module, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A gate for a warning that may repeat many times a second (a retry per message during an
 * outage): log_gate_open is 1 at most once every interval_ms; *suppressed then tells how many
 * were held back since the last time. */
struct log_gate {
    int64_t last_ms;        /* monotonic ms of the last line let through; 0: never */
    unsigned long held;     /* held back since */
};
int log_gate_open(struct log_gate *g, int64_t now_ms, int64_t interval_ms, unsigned long *suppressed);

/* Each .c file defines LOG_MODULE before including this header. */
#define log_at(lvl, errnum, ...) \
    do { if (log_enabled(lvl)) log_write((lvl), LOG_MODULE, (errnum), __VA_ARGS__); } while (0)
#define log_debug(...) log_at(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...)  log_at(LOG_INFO, 0, __VA_ARGS__)
#define log_warn(...)  log_at(LOG_WARN, 0, __VA_ARGS__)
#define log_error(...) log_at(LOG_ERROR, 0, __VA_ARGS__)
/* As log_error, with the current errno's text appended. */
#define log_syserr(...) log_at(LOG_ERROR, errno, __VA_ARGS__)

#endif

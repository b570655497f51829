/* cron: cron expressions with Vixie/cronie semantics, and when they fire in a time zone.
 * "min hour dom month dow", or six fields with seconds first. A field is a list (",") of "*",
 * n or a-b, each optionally stepped with "/s" ("a/s": from a to the field's end); months
 * JAN-DEC and weekdays SUN-SAT by name too (any case), weekday 0 and 7 both Sunday; "?" is "*"
 * in day-of-month and day-of-week. Macros: @yearly (@annually) "0 0 1 1 *", @monthly
 * "0 0 1 * *", @weekly "0 0 * * 0", @daily (@midnight) "0 0 * * *", @hourly "0 * * * *".
 * Not supported, and refused with a message that says so: L, W, #, a year field, @reboot.
 * Days: when day-of-month and day-of-week are both restricted, a day matches when either
 * does. A field that starts with "*" or "?" (a stepped "*" too) does not count as restricted:
 * then both must match (Vixie). Pure logic. */
#ifndef DQ_CRON_H
#define DQ_CRON_H

#include <stddef.h>
#include <stdint.h>

#include "lib/tz.h"

struct cron {
    uint64_t sec, min;   /* bits 0..59; sec is bit 0 alone for five fields */
    uint32_t hour;       /* bits 0..23 */
    uint32_t dom;        /* bits 1..31 */
    uint16_t month;      /* bits 1..12 */
    uint8_t dow;         /* bits 0..6, 0 Sunday */
    int dom_any, dow_any;   /* the field starts with "*" or "?": days need both to match */
    int hour_any;        /* the hour field starts with "*": an hour that the clock repeats
                          * (going back from daylight saving) fires in both passes */
    int seconds;         /* six fields were given: the first is seconds */
};

/* Parses expr into *out: 0, or -1 with err naming the field and the reason:
 * "cron: field \"hour\" (the 2nd of 5): 24 is out of range 0-23",
 * "cron: \"L\" (last day) is not supported". */
int cron_parse(const char *expr, struct cron *out, char *err, size_t errlen);

/* The next local wall-clock second strictly after local (local seconds as in tz.h) that
 * matches; -1 when none does in 400 years (the calendar's whole cycle: it never fires). */
int64_t cron_next_local(const struct cron *c, int64_t local);

/* The next fire instant (UTC epoch seconds) strictly after after_utc, in zone z. A wall time
 * that does not exist (clocks going forward) fires at the first instant after it (the
 * transition), however many of the missing wall times match: once. A wall time that occurs
 * twice (clocks going back) fires once, at the earlier instant, unless hour_any: then the
 * repeated hour fires in both passes, as an interval would (cronie's rule: fixed-time jobs
 * are not repeated, wildcard jobs run normally). Chained calls (next = cron_next(c, z, prev))
 * give strictly increasing instants. -1 when it never fires. (Instants before 1970 are
 * negative: -1 among them reads as none.) */
int64_t cron_next(const struct cron *c, const struct tz *z, int64_t after_utc);

#endif

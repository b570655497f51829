/* tz: IANA time zones read from the system's zoneinfo (TZif files, RFC 8536), without the
 * process-global TZ of libc: a zone is an immutable value that any thread may use. The zone's
 * table of transitions answers for the instants it covers; after its last transition the
 * POSIX TZ rule at the file's end (its footer, e.g. "CET-1CEST,M3.5.0,M10.5.0/3") does, so
 * far-future instants follow the zone's current daylight-saving rules. Leap-second ("right/")
 * zones are refused: every time here is POSIX time. Also the civil-calendar arithmetic that
 * cron uses (proleptic Gregorian, any year). Pure logic but for reading the zone files. */
#ifndef DQ_TZ_H
#define DQ_TZ_H

#include <stddef.h>
#include <stdint.h>

struct tz;   /* immutable once loaded; safe to share between threads */

/* The zone of IANA name ("Europe/Berlin", "UTC", "Etc/GMT+5"), read from $TZDIR (when set at
 * the zone's first load) or /usr/share/zoneinfo. Names are refused unless they are 1..255
 * chars of [A-Za-z0-9_+-/], not starting with '/', with no "." path component or "..".
 * Zones are cached for the life of the process (thread-safe); the caller never frees.
 * NULL with err naming the reason ("unknown time zone \"Foo/Bar\"", "time zone \"X\" is not a
 * TZif file", ...). "UTC" is built in: it works without the zoneinfo files. */
const struct tz *tz_get(const char *name, char *err, size_t errlen);

/* The name the zone was asked for by. */
const char *tz_name(const struct tz *z);

/* The offset from UTC, seconds east, in effect at UTC instant t (epoch seconds). */
int32_t tz_offset(const struct tz *z, int64_t t);

/* The first instant after t at which the zone's rules change, whether or not the offset does
 * with them; INT64_MAX when there is none (a zone without daylight saving, past its table).
 * For scanning a span of time: the offset is the same from t + 1 until the instant returned. */
int64_t tz_next_change(const struct tz *z, int64_t t);

/* Local wall-clock time -> UTC. local is "local seconds": seconds since 1970-01-01T00:00:00
 * of the local wall clock (as if it were UTC). Returns how many instants show that wall time:
 * 1 (*first set), 2 (an overlap when clocks go back: *first the earlier, *second the later),
 * or 0 (a gap when clocks go forward: *first set to the transition instant, the first valid
 * instant after the missing time). */
int tz_to_utc(const struct tz *z, int64_t local, int64_t *first, int64_t *second);

/* Formats UTC instant t_ms (epoch ms) as local ISO 8601 with offset:
 * "2027-03-28T03:00:00.000+02:00" ("+00:00" for UTC, never "Z"; an offset with seconds, only
 * in local mean time before standard time, as "+00:53:28"). Returns the length of the text
 * (like snprintf: more than outlen - 1 when it did not fit). */
int tz_format(const struct tz *z, int64_t t_ms, char *out, size_t outlen);

/* Days since 1970-01-01 of proleptic Gregorian date y-m-d (m 1..12, d 1..31), and back. */
int64_t tz_days_from_civil(int64_t y, unsigned m, unsigned d);
void tz_civil_from_days(int64_t days, int64_t *y, unsigned *m, unsigned *d);

/* The weekday of a day since 1970-01-01: 0 Sunday .. 6 Saturday. */
unsigned tz_weekday(int64_t days);

#endif

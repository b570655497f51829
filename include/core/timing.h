/* timing: a schedule's timing (when it fires, recur.h) read from its JSON: the fields of a
 * schedule's PUT, and the same fields as kept in Redis and in each occurrence's record, which
 * delivery reads when an occurrence comes due. Pure logic: jansson only. */
#ifndef DQ_TIMING_H
#define DQ_TIMING_H

#include <stddef.h>
#include <stdint.h>

#include "core/recur.h"

/* Reads the timing fields of obj (a jansson json_t * object) into *t: cron or every_ms, and
 * timezone, start_at_ms, end_at_ms, max_runs, catch_up, catch_up_max, jitter_ms, anchor_ms.
 * An interval without anchor_ms is anchored at its start, else at now_ms (epoch ms). 0, or -1
 * with err naming the field that is wrong. */
int timing_from_json(void *obj, int64_t now_ms, struct recur_timing *t, char *err, size_t errlen);

/* Reads a timing as kept (len bytes of JSON text). 0, or -1 with err set. */
int timing_parse(const char *json, size_t len, struct recur_timing *out, char *err, size_t errlen);

#endif

/* redrive: adds dead letters again as jobs, at most once per letter. A letter's job comes from
 * its record when that is still there and failed, else from the letter's own topic, body, key,
 * headers and callback, checked as an add; the mark that it was redriven (deadstore.h) is taken
 * before the add and given back when the add fails. A struct redrive holds its own Redis
 * connections: use it from one thread at a time (the dead-letter worker). */
#ifndef DQ_REDRIVE_H
#define DQ_REDRIVE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/config.h"
#include "dead/deadq.h"
#include "intake/intake.h"

struct redrive;

/* Opens the Redis connections of the marks and the job records; jobs (not owned) must outlive
 * it. NULL when out of memory. */
struct redrive *redrive_new(const struct config *cfg, struct intake *jobs);
void redrive_free(struct redrive *r);

/* Whether each of the n letters ls was redriven, into marked[i] (1 or 0; all 0, logged, when
 * Redis did not answer). */
void redrive_marked(struct redrive *r, const struct dead_letter *ls, size_t n, int *marked);

/* Redrives the n letters ls as jobs due at due_ms (epoch milliseconds), 1000 at a time, and
 * waits for their adds: counts those added into *done, and appends each other one to skips
 * with why (redrive_skip). The letters stay the caller's. */
void redrive_letters(struct redrive *r, const struct dead_letter *ls, size_t n, int64_t due_ms,
                     size_t *done, json_t *skips);

/* Appends {partition, offset, why} to the JSON array skips (not owned; why is copied). */
void redrive_skip(json_t *skips, int32_t partition, int64_t offset, const char *why);

#endif

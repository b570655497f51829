/* deadstore: which dead letters were redriven, in Redis: one hash <prefix>dead:redriven, field
 * "<partition>:<offset>", value the id of the job the redrive added. A mark is taken before the
 * add (so two redrives of one letter cannot both add it) and given back when the add fails.
 * A struct deadstore is one connection: use it from one thread at a time. */
#ifndef DQ_DEADSTORE_H
#define DQ_DEADSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

struct deadstore;

struct deadstore *deadstore_new(const struct config *cfg);
void deadstore_free(struct deadstore *ds);

/* Every call returns 0, or -1 with err set when Redis did not answer. */

/* Marks the letter at partition/offset as redriven as job_id: *taken 1, or 0 when it was
 * marked before (its job id into before, "" if unknown). */
int deadstore_mark(struct deadstore *ds, int32_t partition, int64_t offset, const char *job_id,
                   int *taken, char *before, size_t beforelen, char *err, size_t errlen);

/* Gives a mark back (its add failed). */
int deadstore_unmark(struct deadstore *ds, int32_t partition, int64_t offset, char *err,
                     size_t errlen);

/* Whether each of n letters (partitions[i], offsets[i]) was redriven, into marked[i]. */
int deadstore_marked(struct deadstore *ds, size_t n, const int32_t *partitions,
                     const int64_t *offsets, int *marked, char *err, size_t errlen);

#endif

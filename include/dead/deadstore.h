/* deadstore: which dead letters were redriven, in Redis: one hash <prefix>dead:redriven, field
 * "<partition>:<offset>", value the id of the job the redrive added. A mark is taken before the
 * add (so two redrives of one letter cannot both add it) and given back when the add fails.
 * A struct deadstore is one connection: use it from one thread at a time. */
#ifndef DQ_DEADSTORE_H
#define DQ_DEADSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/job.h"

struct deadstore;

struct deadstore *deadstore_new(const struct config *cfg);
void deadstore_free(struct deadstore *ds);

/* Every call returns 0, or -1 with err set when Redis did not answer. */

/* One mark of deadstore_mark_many: partition, offset and job_id in; taken out: 1, or 0 when
 * the letter was marked before, as the job in before. */
struct deadstore_mark {
    int32_t partition;
    int64_t offset;
    const char *job_id;
    int taken;
    char before[JOB_ID_MAX + 1];
};

/* Marks n letters as redriven, each as its job, in one call: a letter marked already keeps
 * its mark (at most one redrive, whoever asks). */
int deadstore_mark_many(struct deadstore *ds, size_t n, struct deadstore_mark *marks, char *err,
                        size_t errlen);

/* Gives the marks of n letters back (their adds failed). */
int deadstore_unmark_many(struct deadstore *ds, size_t n, const int32_t *partitions,
                          const int64_t *offsets, char *err, size_t errlen);

/* Whether each of n letters (partitions[i], offsets[i]) was redriven, into marked[i]. */
int deadstore_marked(struct deadstore *ds, size_t n, const int32_t *partitions,
                     const int64_t *offsets, int *marked, char *err, size_t errlen);

#endif

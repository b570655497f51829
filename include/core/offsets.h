/* offsets: which offsets of one partition are taken but not yet finished, and so how far the
 * consumer may commit. Messages are taken in ascending offset order and finish in any order;
 * the commit point is the lowest unfinished offset, or the next offset to read when none is.
 * Pure logic. */
#ifndef DQ_OFFSETS_H
#define DQ_OFFSETS_H

#include <stddef.h>
#include <stdint.h>

struct offsets {
    int64_t *off;           /* ring of taken offsets, ascending from head */
    unsigned char *done;    /* done[i] for off[i] */
    size_t head, len, cap;
    int64_t next;           /* next offset to read; -1 until known */
};

void offsets_init(struct offsets *o);
void offsets_release(struct offsets *o);
/* Records offset as taken (unfinished); it must be above every offset taken before.
 * Returns 0, or -1 when out of memory or out of order. */
int offsets_take(struct offsets *o, int64_t offset);
/* Marks a taken offset finished. Returns 0, or -1 when it was not taken. */
int offsets_finish(struct offsets *o, int64_t offset);
/* The next offset to read is offset (a head held back, not taken), unless already past it. */
void offsets_hold_at(struct offsets *o, int64_t offset);
/* The offset up to which a commit is safe, or -1 when nothing is known yet. */
int64_t offsets_commit_point(const struct offsets *o);
/* How many taken offsets are unfinished. */
size_t offsets_unfinished(const struct offsets *o);
/* Forgets everything (the partition is given up or re-read from a commit). */
void offsets_reset(struct offsets *o);

#endif

/* offsets: the taken-but-unfinished offsets of one partition and the commit point they allow.
 * The contract is in include/core/offsets.h. */
#include <stdlib.h>
#include <string.h>

#include "core/offsets.h"

#define AT(o, i) ((o)->head + (i)) % (o)->cap

void offsets_init(struct offsets *o)
{
    memset(o, 0, sizeof(*o));
    o->next = -1;
}

void offsets_release(struct offsets *o)
{
    free(o->off);
    free(o->done);
    offsets_init(o);
}

void offsets_reset(struct offsets *o)
{
    o->head = o->len = 0;
    o->next = -1;
}

static int grow(struct offsets *o)
{
    size_t cap = o->cap ? o->cap * 2 : 64;
    int64_t *off = malloc(cap * sizeof(*off));
    unsigned char *done = malloc(cap);

    if (!off || !done) {
        free(off);
        free(done);
        return -1;
    }
    for (size_t i = 0; i < o->len; i++) {
        off[i] = o->off[AT(o, i)];
        done[i] = o->done[AT(o, i)];
    }
    free(o->off);
    free(o->done);
    o->off = off;
    o->done = done;
    o->cap = cap;
    o->head = 0;
    return 0;
}

int offsets_take(struct offsets *o, int64_t offset)
{
    /* Below next is either taken already or before the held head: never again. */
    if ((o->next >= 0 && offset < o->next) || (o->len > 0 && offset <= o->off[AT(o, o->len - 1)]))
        return -1;
    if (o->len == o->cap && grow(o) < 0)
        return -1;
    o->off[AT(o, o->len)] = offset;
    o->done[AT(o, o->len)] = 0;
    o->len++;
    if (offset + 1 > o->next)
        o->next = offset + 1;
    return 0;
}

int offsets_finish(struct offsets *o, int64_t offset)
{
    size_t lo = 0, hi = o->len;

    /* Binary search: the ring holds ascending offsets. */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (o->off[AT(o, mid)] < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == o->len || o->off[AT(o, lo)] != offset)
        return -1;
    o->done[AT(o, lo)] = 1;
    while (o->len > 0 && o->done[o->head]) {
        o->head = (o->head + 1) % o->cap;
        o->len--;
    }
    return 0;
}

void offsets_hold_at(struct offsets *o, int64_t offset)
{
    if (offset > o->next)
        o->next = offset;
}

int64_t offsets_commit_point(const struct offsets *o)
{
    return o->len > 0 ? o->off[o->head] : o->next;
}

size_t offsets_unfinished(const struct offsets *o)
{
    return o->len;
}

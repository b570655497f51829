/* fnv: the 32-bit FNV-1a hash of text, for spreading names over buckets and shards. Where it
 * picks a Redis key (a schedule's shard), its value is part of the stored layout: it never
 * changes. Pure logic. */
#ifndef DQ_FNV_H
#define DQ_FNV_H

#include <stdint.h>

#define FNV1A_BASIS 2166136261u

/* The hash of the NUL-terminated s, going on from h (FNV1A_BASIS to begin). */
static inline uint32_t fnv1a(uint32_t h, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

#endif

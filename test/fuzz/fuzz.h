/* Shared by the fuzz targets: invariant checks that abort, so that libFuzzer reports them. */
#ifndef DQ_FUZZ_H
#define DQ_FUZZ_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/job.h"

#define ASSERT(cond) do { if (!(cond)) fuzz_fail(__FILE__, __LINE__, #cond); } while (0)

static inline void fuzz_fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "%s:%d: invariant broken: %s\n", file, line, what);
    abort();
}

static inline int same_str(const char *a, const char *b)
{
    return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

/* Strings are compared as the NUL-terminated text the struct holds; the body by its bytes. */
static inline void check_same_job(const struct job *a, const struct job *b)
{
    ASSERT(strcmp(a->id, b->id) == 0);
    ASSERT(same_str(a->topic, b->topic));
    ASSERT(same_str(a->key, b->key));
    ASSERT(a->body_len == b->body_len && memcmp(a->body, b->body, a->body_len) == 0);
    ASSERT(a->nheaders == b->nheaders);
    for (size_t i = 0; i < a->nheaders; i++) {
        ASSERT(strcmp(a->headers[i].name, b->headers[i].name) == 0);
        ASSERT(strcmp(a->headers[i].value, b->headers[i].value) == 0);
    }
    ASSERT(a->delay_ms == b->delay_ms && a->due_ms == b->due_ms && a->created_ms == b->created_ms);
}

#endif

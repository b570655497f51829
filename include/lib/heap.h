/* heap: a binary min-heap of items keyed by a time, first-in first-out among equal times.
 * Used for due messages and for partition resume timers. Pure logic. */
#ifndef DQ_HEAP_H
#define DQ_HEAP_H

#include <stddef.h>
#include <stdint.h>

struct heap_entry {
    int64_t at;      /* key: epoch ms */
    uint64_t seq;    /* insertion order, breaks ties */
    void *item;      /* not owned by the heap */
};

struct heap {
    struct heap_entry *v;
    size_t n, cap;
    uint64_t next_seq;
};

void heap_init(struct heap *h);
/* Frees the array; the items are the caller's. */
void heap_release(struct heap *h);
/* Returns 0, or -1 when out of memory. */
int heap_push(struct heap *h, int64_t at, void *item);
/* The earliest item without removing it, or NULL when empty; *at gets its time. */
void *heap_peek(const struct heap *h, int64_t *at);
/* Removes and returns the earliest item, or NULL when empty. */
void *heap_pop(struct heap *h, int64_t *at);
/* Brings every item pick(item, ctx) chooses that is due after at forward to at (among them,
 * the order they were pushed in holds). Returns how many moved. */
size_t heap_advance(struct heap *h, int64_t at, int (*pick)(const void *item, void *ctx),
                    void *ctx);
static inline size_t heap_len(const struct heap *h) { return h->n; }

#endif

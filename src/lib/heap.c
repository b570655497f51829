/* heap: a binary min-heap keyed by time, FIFO among equal keys (an insertion counter breaks
 * ties). The contract is in include/lib/heap.h. */
#include <stdlib.h>

#include "lib/heap.h"

static int before(const struct heap_entry *a, const struct heap_entry *b)
{
    return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static void swap(struct heap *h, size_t i, size_t j)
{
    struct heap_entry t = h->v[i];
    h->v[i] = h->v[j];
    h->v[j] = t;
}

void heap_init(struct heap *h)
{
    h->v = NULL;
    h->n = h->cap = 0;
    h->next_seq = 0;
}

void heap_release(struct heap *h)
{
    free(h->v);
    heap_init(h);
}

int heap_push(struct heap *h, int64_t at, void *item)
{
    size_t i;

    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct heap_entry *v = realloc(h->v, cap * sizeof(*v));
        if (!v)
            return -1;
        h->v = v;
        h->cap = cap;
    }
    i = h->n++;
    h->v[i] = (struct heap_entry){ .at = at, .seq = h->next_seq++, .item = item };
    while (i > 0 && before(&h->v[i], &h->v[(i - 1) / 2])) {
        swap(h, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    return 0;
}

void *heap_peek(const struct heap *h, int64_t *at)
{
    if (h->n == 0)
        return NULL;
    if (at)
        *at = h->v[0].at;
    return h->v[0].item;
}

static void sift_down(struct heap *h, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && before(&h->v[l], &h->v[m]))
            m = l;
        if (r < h->n && before(&h->v[r], &h->v[m]))
            m = r;
        if (m == i)
            break;
        swap(h, i, m);
        i = m;
    }
}

void *heap_pop(struct heap *h, int64_t *at)
{
    void *item;

    if (h->n == 0)
        return NULL;
    item = h->v[0].item;
    if (at)
        *at = h->v[0].at;
    h->v[0] = h->v[--h->n];
    sift_down(h, 0);
    return item;
}

size_t heap_advance(struct heap *h, int64_t at, int (*pick)(const void *item, void *ctx),
                    void *ctx)
{
    size_t moved = 0;

    for (size_t i = 0; i < h->n; i++)
        if (h->v[i].at > at && pick(h->v[i].item, ctx)) {
            h->v[i].at = at;
            moved++;
        }
    for (size_t i = h->n / 2; moved && i-- > 0;)
        sift_down(h, i);
    return moved;
}

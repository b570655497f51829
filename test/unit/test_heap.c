#include <stdlib.h>

#include "lib/heap.h"
#include "unit.h"

/* Items are small integers stored in the pointer's place. */
#define ITEM(n) ((void *)(uintptr_t)(n))
#define NUM(p) ((int)(uintptr_t)(p))

static void empty_heap(void)
{
    struct heap h;
    int64_t at = 77;

    heap_init(&h);
    CHECK_EQ_INT(heap_len(&h), 0);
    CHECK(heap_peek(&h, &at) == NULL);
    CHECK(heap_pop(&h, &at) == NULL);
    CHECK_EQ_INT(at, 77);
    heap_release(&h);
}

static void pops_in_time_order(void)
{
    static const int64_t times[] = { 50, 10, 40, 30, 20 };
    struct heap h;
    int64_t at = 0, prev = -1;

    heap_init(&h);
    for (int i = 0; i < 5; i++)
        CHECK_EQ_INT(heap_push(&h, times[i], ITEM(i + 1)), 0);
    CHECK_EQ_INT(heap_len(&h), 5);
    CHECK_EQ_INT(NUM(heap_peek(&h, &at)), 2);
    CHECK_EQ_INT(at, 10);
    CHECK_EQ_INT(heap_len(&h), 5);
    for (int i = 0; i < 5; i++) {
        CHECK(heap_pop(&h, &at) != NULL);
        CHECK(at > prev);
        prev = at;
    }
    CHECK_EQ_INT(prev, 50);
    CHECK(heap_pop(&h, NULL) == NULL);
    heap_release(&h);
}

static void fifo_among_equal_times(void)
{
    struct heap h;

    heap_init(&h);
    for (int i = 1; i <= 100; i++)
        CHECK_EQ_INT(heap_push(&h, i % 2 ? 5 : 9, ITEM(i)), 0);
    for (int i = 1; i <= 99; i += 2)
        CHECK_EQ_INT(NUM(heap_pop(&h, NULL)), i);
    for (int i = 2; i <= 100; i += 2)
        CHECK_EQ_INT(NUM(heap_pop(&h, NULL)), i);
    heap_release(&h);
}

static void negative_and_extreme_times(void)
{
    struct heap h;
    int64_t at;

    heap_init(&h);
    CHECK_EQ_INT(heap_push(&h, INT64_MAX, ITEM(1)), 0);
    CHECK_EQ_INT(heap_push(&h, 0, ITEM(2)), 0);
    CHECK_EQ_INT(heap_push(&h, INT64_MIN, ITEM(3)), 0);
    CHECK_EQ_INT(heap_push(&h, -1, ITEM(4)), 0);
    CHECK_EQ_INT(NUM(heap_pop(&h, &at)), 3);
    CHECK_EQ_INT(at, INT64_MIN);
    CHECK_EQ_INT(NUM(heap_pop(&h, &at)), 4);
    CHECK_EQ_INT(NUM(heap_pop(&h, &at)), 2);
    CHECK_EQ_INT(NUM(heap_pop(&h, &at)), 1);
    CHECK_EQ_INT(at, INT64_MAX);
    heap_release(&h);
}

/* Pops every entry: times never go down, equal times come out in push order. */
static int drains_sorted(struct heap *h)
{
    int64_t at, prev_at = INT64_MIN;
    int item, prev_item = -1;

    while (heap_len(h) > 0) {
        item = NUM(heap_pop(h, &at));
        if (at < prev_at || (at == prev_at && item < prev_item))
            return 0;
        prev_at = at;
        prev_item = item;
    }
    return 1;
}

static void many_random_sorted(void)
{
    struct heap h;

    srand(12345);
    heap_init(&h);
    for (int i = 0; i < 5000; i++)
        CHECK_EQ_INT(heap_push(&h, rand() % 1000, ITEM(i)), 0);
    CHECK_EQ_INT(heap_len(&h), 5000);
    CHECK(drains_sorted(&h));
    CHECK_EQ_INT(heap_len(&h), 0);
    heap_release(&h);
}

static void push_after_pops(void)
{
    struct heap h;
    int64_t at;

    heap_init(&h);
    for (int i = 0; i < 200; i++)
        CHECK_EQ_INT(heap_push(&h, 1000 + i, ITEM(i)), 0);
    for (int i = 0; i < 150; i++)
        CHECK_EQ_INT(NUM(heap_pop(&h, NULL)), i);
    CHECK_EQ_INT(heap_push(&h, 5, ITEM(999)), 0);
    CHECK_EQ_INT(heap_push(&h, 1175, ITEM(998)), 0);
    CHECK_EQ_INT(NUM(heap_peek(&h, &at)), 999);
    CHECK_EQ_INT(at, 5);
    CHECK_EQ_INT(heap_len(&h), 52);
    CHECK_EQ_INT(NUM(heap_pop(&h, NULL)), 999);
    CHECK_EQ_INT(NUM(heap_pop(&h, NULL)), 150);
    heap_release(&h);
}

static void interleaved_random(void)
{
    struct heap h;
    int next = 0;

    srand(777);
    heap_init(&h);
    for (int round = 0; round < 50; round++) {
        for (int i = rand() % 40; i > 0; i--)
            CHECK_EQ_INT(heap_push(&h, rand() % 100, ITEM(next++)), 0);
        for (int i = rand() % 30; i > 0 && heap_len(&h) > 0; i--)
            heap_pop(&h, NULL);
    }
    CHECK(drains_sorted(&h));
    heap_release(&h);
}

static void release_then_reuse(void)
{
    struct heap h;

    heap_init(&h);
    CHECK_EQ_INT(heap_push(&h, 1, ITEM(1)), 0);
    heap_release(&h);
    CHECK_EQ_INT(heap_len(&h), 0);
    CHECK(heap_peek(&h, NULL) == NULL);
    CHECK_EQ_INT(heap_push(&h, 2, ITEM(2)), 0);
    CHECK_EQ_INT(NUM(heap_pop(&h, NULL)), 2);
    heap_release(&h);
}

static int odd(const void *item, void *ctx)
{
    (void)ctx;
    return NUM(item) % 2 == 1;
}

/* Advanced items come first, in the order they were pushed; the others keep their times. */
static void advance_brings_picked_items_forward(void)
{
    struct heap h;
    int64_t at;

    srand(4242);
    heap_init(&h);
    for (int i = 0; i < 300; i++)
        CHECK_EQ_INT(heap_push(&h, 100 + rand() % 1000, ITEM(i)), 0);
    CHECK_EQ_INT(heap_advance(&h, 50, odd, NULL), 150);
    for (int i = 1; i < 300; i += 2) {
        CHECK_EQ_INT(NUM(heap_pop(&h, &at)), i);
        CHECK_EQ_INT(at, 50);
    }
    CHECK_EQ_INT(heap_advance(&h, 50, odd, NULL), 0);
    CHECK_EQ_INT(heap_len(&h), 150);
    CHECK(drains_sorted(&h));
    heap_release(&h);
}

void unit_heap(void)
{
    RUN(advance_brings_picked_items_forward);
    RUN(empty_heap);
    RUN(pops_in_time_order);
    RUN(fifo_among_equal_times);
    RUN(negative_and_extreme_times);
    RUN(many_random_sorted);
    RUN(push_after_pops);
    RUN(interleaved_random);
    RUN(release_then_reuse);
}

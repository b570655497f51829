#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "lib/workers.h"

struct tally {
    atomic_int ran, dropped, stale, full, stopping, running;
    atomic_int hold;               /* tasks spin while set */
    atomic_int seen[4];            /* runs per worker index */
    atomic_int widest;             /* the most tasks run together */
};

static void run(void *ctx, int worker, void **tasks, size_t n)
{
    struct tally *t = ctx;

    (void)tasks;
    if ((int)n > atomic_load(&t->widest))
        atomic_store(&t->widest, (int)n);
    atomic_fetch_add(&t->running, (int)n);
    atomic_fetch_add(&t->seen[worker], (int)n);
    while (atomic_load(&t->hold))
        usleep(1000);
    atomic_fetch_add(&t->ran, (int)n);
    atomic_fetch_sub(&t->running, (int)n);
}

static void drop(void *ctx, void *task, const char *why)
{
    struct tally *t = ctx;

    (void)task;
    atomic_fetch_add(&t->dropped, 1);
    if (strstr(why, "not started within"))
        atomic_fetch_add(&t->stale, 1);
    else if (strstr(why, "too many"))
        atomic_fetch_add(&t->full, 1);
    else if (strstr(why, "shutting down"))
        atomic_fetch_add(&t->stopping, 1);
}

static void wait_for(atomic_int *v, int want)
{
    for (int i = 0; i < 5000 && atomic_load(v) != want; i++)
        usleep(1000);
}

/* Every task is run once, spread over the workers, each with its own index; tasks queued
 * while the workers are busy are taken together, a batch at most at a time. */
static void runs_every_task(void)
{
    struct tally t = { 0 };
    struct workers *w = workers_new(4, 5, 10000, 1000, run, drop, &t);

    CHECK(w != NULL);
    for (int i = 0; i < 200; i++)
        workers_queue(w, &t);
    wait_for(&t.ran, 200);
    atomic_store(&t.hold, 1);
    workers_queue(w, &t);
    wait_for(&t.running, 1);
    for (int i = 0; i < 12; i++)     /* the three others take 5, 5 and 2, or so */
        workers_queue(w, &t);
    atomic_store(&t.hold, 0);
    wait_for(&t.ran, 213);
    workers_free(w);
    CHECK_EQ_INT(atomic_load(&t.ran), 213);
    CHECK_EQ_INT(atomic_load(&t.dropped), 0);
    CHECK(atomic_load(&t.widest) > 1 && atomic_load(&t.widest) <= 5);
}

/* While every worker is held: tasks past the queue bound are dropped at once; those that
 * waited past the wait bound are dropped, not run, when a worker comes free; the ones still
 * queued at shutdown are dropped too. Each task ends exactly once. */
static void bounds_and_shutdown(void)
{
    struct tally t = { 0 };
    struct workers *w = workers_new(2, 1, 50, 5, run, drop, &t);

    CHECK(w != NULL);
    atomic_store(&t.hold, 1);
    workers_queue(w, &t);
    workers_queue(w, &t);
    wait_for(&t.running, 2);          /* both workers busy */
    for (int i = 0; i < 8; i++)
        workers_queue(w, &t);
    CHECK_EQ_INT(atomic_load(&t.full), 3);   /* 5 queued, 3 refused */
    usleep(120 * 1000);                      /* the 5 are now stale */
    atomic_store(&t.hold, 0);
    wait_for(&t.stale, 5);
    wait_for(&t.ran, 2);
    CHECK_EQ_INT(atomic_load(&t.stale), 5);
    CHECK_EQ_INT(atomic_load(&t.ran), 2);
    atomic_store(&t.hold, 1);
    workers_queue(w, &t);
    workers_queue(w, &t);
    wait_for(&t.running, 2);
    workers_queue(w, &t);             /* queued behind the two held ones */
    atomic_store(&t.hold, 0);
    workers_free(w);
    CHECK_EQ_INT(atomic_load(&t.ran) + atomic_load(&t.dropped), 13);
    CHECK_EQ_INT(atomic_load(&t.ran) + atomic_load(&t.stopping), 5);
}

/* A worker that finds only stale tasks drops them and goes on: the next task still runs. */
static void only_stale_tasks_leave_the_worker_running(void)
{
    struct tally t = { 0 };
    struct workers *w = workers_new(1, 1, 50, 100, run, drop, &t);

    CHECK(w != NULL);
    atomic_store(&t.hold, 1);
    workers_queue(w, &t);
    wait_for(&t.running, 1);
    workers_queue(w, &t);             /* waits past the bound behind the held one */
    usleep(120 * 1000);
    atomic_store(&t.hold, 0);
    wait_for(&t.stale, 1);
    wait_for(&t.ran, 1);
    workers_queue(w, &t);             /* the worker found only a stale one last time */
    wait_for(&t.ran, 2);
    CHECK_EQ_INT(atomic_load(&t.stale), 1);
    CHECK_EQ_INT(atomic_load(&t.ran), 2);
    workers_free(w);
    CHECK_EQ_INT(atomic_load(&t.stopping), 0);
}

void unit_workers(void)
{
    RUN(runs_every_task);
    RUN(bounds_and_shutdown);
    RUN(only_stale_tasks_leave_the_worker_running);
}

/* workers: a queue of tasks and the threads that run them. The contract is in
 * include/lib/workers.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/clock.h"
#include "lib/workers.h"

struct item {
    void *task;
    int64_t queued_ms;          /* monotonic */
    struct item *next;
};

struct worker {
    struct workers *pool;
    int index;
    void **tasks;               /* the batch it runs: pool->batch places */
    pthread_t thread;
};

struct workers {
    workers_run_fn *run;
    workers_drop_fn *drop;
    void *ctx;
    int64_t wait_ms;
    size_t batch;
    size_t max_queued;
    pthread_mutex_t mu;
    pthread_cond_t more;        /* a task was queued, or the pool is stopping */
    struct item *head, **tail;
    size_t queued;
    int stop;
    int n;
    struct worker *ws;
};

/* The next tasks for a worker, up to w->batch of them into tasks: how many (0 when all it
 * found had waited too long), or -1 once stopping. Those that waited too long are handed back
 * in *stale, to be dropped outside the lock. */
static long take(struct workers *w, void **tasks, struct item **stale)
{
    int64_t now;
    long n = 0;

    pthread_mutex_lock(&w->mu);
    while (!w->stop && !w->head)
        pthread_cond_wait(&w->more, &w->mu);
    if (w->stop) {
        pthread_mutex_unlock(&w->mu);
        return -1;
    }
    now = clock_mono_ms();
    while (w->head && (size_t)n < w->batch) {
        struct item *it = w->head;
        if (!(w->head = it->next))
            w->tail = &w->head;
        w->queued--;
        if (now - it->queued_ms <= w->wait_ms) {
            tasks[n++] = it->task;
            free(it);
        } else {
            it->next = *stale;
            *stale = it;
        }
    }
    if (w->head)   /* more than this worker takes: another one may */
        pthread_cond_signal(&w->more);
    pthread_mutex_unlock(&w->mu);
    return n;
}

static void drop_list(struct workers *w, struct item *list, const char *why)
{
    while (list) {
        struct item *next = list->next;
        w->drop(w->ctx, list->task, why);
        free(list);
        list = next;
    }
}

static void *worker_main(void *arg)
{
    struct worker *me = arg;
    struct workers *w = me->pool;
    char why[96];
    long n;

    snprintf(why, sizeof(why), "not started within %lld ms (the workers are busy)",
             (long long)w->wait_ms);
    for (;;) {
        struct item *stale = NULL;
        n = take(w, me->tasks, &stale);
        drop_list(w, stale, why);
        if (n < 0)
            return NULL;
        if (n > 0)
            w->run(w->ctx, me->index, me->tasks, (size_t)n);
    }
}

struct workers *workers_new(int n, size_t batch, int64_t wait_ms, size_t max_queued,
                            workers_run_fn *run, workers_drop_fn *drop, void *ctx)
{
    struct workers *w = calloc(1, sizeof(*w));

    if (!w || n < 1 || !(w->ws = calloc((size_t)n, sizeof(*w->ws)))) {
        free(w);
        return NULL;
    }
    *w = (struct workers){ .run = run, .drop = drop, .ctx = ctx, .wait_ms = wait_ms,
                           .batch = batch > 0 ? batch : 1, .max_queued = max_queued, .ws = w->ws };
    w->tail = &w->head;
    pthread_mutex_init(&w->mu, NULL);
    cond_init_monotonic(&w->more);
    for (; w->n < n; w->n++) {
        w->ws[w->n] = (struct worker){ .pool = w, .index = w->n,
                                       .tasks = malloc(w->batch * sizeof(void *)) };
        if (!w->ws[w->n].tasks ||
            pthread_create(&w->ws[w->n].thread, NULL, worker_main, &w->ws[w->n]) != 0) {
            free(w->ws[w->n].tasks);
            workers_free(w);
            return NULL;
        }
    }
    return w;
}

void workers_queue(struct workers *w, void *task)
{
    struct item *it = malloc(sizeof(*it));
    const char *why = NULL;

    pthread_mutex_lock(&w->mu);
    if (!it)
        why = "out of memory";
    else if (w->stop)
        why = "shutting down";
    else if (w->queued >= w->max_queued)
        why = "too many requests waiting for a worker";
    if (!why) {
        *it = (struct item){ .task = task, .queued_ms = clock_mono_ms() };
        *w->tail = it;
        w->tail = &it->next;
        w->queued++;
        pthread_cond_signal(&w->more);
    }
    pthread_mutex_unlock(&w->mu);
    if (why) {
        free(it);
        w->drop(w->ctx, task, why);
    }
}

void workers_free(struct workers *w)
{
    struct item *left;

    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    left = w->head;
    w->head = NULL;
    w->tail = &w->head;
    w->queued = 0;
    pthread_cond_broadcast(&w->more);
    pthread_mutex_unlock(&w->mu);
    drop_list(w, left, "shutting down");
    for (int i = 0; i < w->n; i++) {
        pthread_join(w->ws[i].thread, NULL);
        free(w->ws[i].tasks);
    }
    pthread_cond_destroy(&w->more);
    pthread_mutex_destroy(&w->mu);
    free(w->ws);
    free(w);
}

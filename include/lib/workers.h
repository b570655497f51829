/* workers: a fixed set of threads that run queued tasks in order, for the requests whose
 * answers need Redis round trips, so that no HTTP thread waits on the network. A task waits
 * in the queue for at most the pool's wait bound; one that waited longer, or that is queued
 * past the queue bound or at shutdown, is dropped instead of run. Exactly one of run and drop
 * is called for every task queued. */
#ifndef DELAYQ_WORKERS_H
#define DELAYQ_WORKERS_H

#include <stddef.h>
#include <stdint.h>

struct workers;

/* Runs n tasks (1 <= n <= the pool's batch size, in the order queued) on worker number `worker`
 * (0 <= worker < the pool's size; the caller may keep per-worker state, such as a connection,
 * indexed by it): together, so that their Redis calls can share round trips. */
typedef void workers_run_fn(void *ctx, int worker, void **tasks, size_t n);
/* Drops a task that will never run, saying why ("shutting down", ...). */
typedef void workers_drop_fn(void *ctx, void *task, const char *why);

/* n threads, each taking up to batch tasks at a time; a task waits at most wait_ms in the
 * queue, which holds at most max_queued tasks. NULL when the threads cannot be made. */
struct workers *workers_new(int n, size_t batch, int64_t wait_ms, size_t max_queued,
                            workers_run_fn *run, workers_drop_fn *drop, void *ctx);

/* Queues task: it is run, or dropped (possibly at once, on the calling thread). */
void workers_queue(struct workers *w, void *task);

/* Drops every queued task, waits for the running ones to end and frees the pool. */
void workers_free(struct workers *w);

#endif

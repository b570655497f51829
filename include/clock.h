/* clock: the two time sources. Due times are wall-clock epoch milliseconds (they travel between
 * machines in headers and Redis); timeouts inside one process use the monotonic clock. */
#ifndef DQ_CLOCK_H
#define DQ_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

static inline int64_t clock_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int64_t clock_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int64_t clock_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Initialises c so that its timed waits take CLOCK_MONOTONIC deadlines: a change of the wall
 * clock neither shortens nor stretches them. */
static inline void cond_init_monotonic(pthread_cond_t *c)
{
    pthread_condattr_t ca;

    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
}

#endif

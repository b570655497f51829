/* clock: the two time sources. Due times are wall-clock epoch milliseconds (they travel between
 * machines in headers and Redis); timeouts inside one process use the monotonic clock. */
#ifndef DQ_CLOCK_H
#define DQ_CLOCK_H

#include <errno.h>
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

/* Sleeps ms milliseconds (less when a signal cuts it short). */
static inline void clock_sleep_ms(int64_t ms)
{
    nanosleep(&(struct timespec){ (time_t)(ms / 1000), (long)(ms % 1000) * 1000000L }, NULL);
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

/* With mu held: waits on c (cond_init_monotonic's) until the monotonic time until_ms at most.
 * Returns pthread_cond_timedwait's answer, or ETIMEDOUT at once when until_ms has passed. */
static inline int cond_wait_until(pthread_cond_t *c, pthread_mutex_t *mu, int64_t until_ms)
{
    struct timespec ts;
    int64_t ms = until_ms - clock_mono_ms();

    if (ms <= 0)
        return ETIMEDOUT;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return pthread_cond_timedwait(c, mu, &ts);
}

#endif

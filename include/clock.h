/* clock: the two time sources. Due times are wall-clock epoch milliseconds (they travel between
 * machines in headers and Redis); timeouts inside one process use the monotonic clock. */
#ifndef DQ_CLOCK_H
#define DQ_CLOCK_H

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

#endif

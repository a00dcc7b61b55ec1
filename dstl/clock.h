/*
 * dstl/clock.h — the one monotonic clock the library measures with (bounds, latencies, leases).
 */
#ifndef DSTL_CLOCK_H
#define DSTL_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds. Any thread. */
static inline uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif

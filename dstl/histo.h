/*
 * dstl/histo.h — a latency histogram with bounded relative error, for persist p50/p99/max.
 * Log-linear buckets: 16 linear sub-buckets per power of two, so a percentile is within
 * 1/16 (6.25 %) of the true value, from 1 us to ~2^40 us, in 41 * 16 slots.
 * Not thread-safe: the owner's lock protects it.
 */
#ifndef DSTL_HISTO_H
#define DSTL_HISTO_H

#include <stdint.h>

#define HISTO_SUB   16
#define HISTO_POW   41
typedef struct {
    uint64_t count[HISTO_POW * HISTO_SUB];
    uint64_t n, max;
    uint64_t sum;               /* of every value added, exact (a Prometheus _sum) */
} histo;

void histo_add(histo *h, uint64_t v);
/* The largest value bucket b holds (its upper edge). */
uint64_t histo_bucket_upper(unsigned b);

/* The value at quantile q (0..1): the upper bound of its bucket, capped at max; 0 if empty. */
uint64_t histo_quantile(const histo *h, double q);

#endif

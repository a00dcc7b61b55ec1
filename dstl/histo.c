/*
 * dstl/histo.c — see histo.h.
 */
#include "dstl/histo.h"

static unsigned bucket(uint64_t v)
{
    if (v < HISTO_SUB) return (unsigned)v;
    unsigned p = 63u - (unsigned)__builtin_clzll(v);           /* v in [2^p, 2^(p+1)) */
    unsigned sub = (unsigned)((v >> (p - 4)) & (HISTO_SUB - 1)); /* next 4 bits */
    unsigned b = (p - 3) * HISTO_SUB + sub;
    return b < HISTO_POW * HISTO_SUB ? b : HISTO_POW * HISTO_SUB - 1;
}

uint64_t histo_bucket_upper(unsigned b)
{
    if (b < HISTO_SUB) return b;
    unsigned p = b / HISTO_SUB + 3, sub = b % HISTO_SUB;
    return ((uint64_t)(HISTO_SUB + sub + 1) << (p - 4)) - 1;
}

void histo_add(histo *h, uint64_t v)
{
    h->count[bucket(v)]++;
    h->n++;
    h->sum += v;
    if (v > h->max) h->max = v;
}

uint64_t histo_quantile(const histo *h, double q)
{
    if (!h->n) return 0;
    uint64_t rank = (uint64_t)(q * (double)h->n);
    if (rank >= h->n) rank = h->n - 1;
    uint64_t seen = 0;
    for (unsigned b = 0; b < HISTO_POW * HISTO_SUB; b++) {
        seen += h->count[b];
        if (seen > rank) {
            uint64_t u = histo_bucket_upper(b);
            return u < h->max ? u : h->max;
        }
    }
    return h->max;
}

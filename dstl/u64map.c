/*
 * dstl/u64map.c — linear-probing hash map, power-of-two capacity, load factor <= 1/2
 * (counting tombstones), so a lookup touches a couple of slots.
 */
#include "dstl/u64map.h"

#include <errno.h>
#include <stdlib.h>

static char tomb_;
#define TOMB ((void *)&tomb_)

static size_t hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

void u64map_init(u64map *m) { *m = (u64map){0}; }

void u64map_destroy(u64map *m)
{
    free(m->keys);
    free(m->vals);
    *m = (u64map){0};
}

static size_t find(const u64map *m, uint64_t key)
{
    size_t mask = m->cap - 1;
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
        if (!m->vals[i]) return m->cap;
        if (m->vals[i] != TOMB && m->keys[i] == key) return i;
    }
}

void *u64map_get(const u64map *m, uint64_t key)
{
    if (!m->cap) return NULL;
    size_t i = find(m, key);
    return i == m->cap ? NULL : m->vals[i];
}

static int grow(u64map *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 16;
    while (m->len * 4 >= ncap) ncap *= 2;      /* after dropping tombstones: <= 1/4 full */
    uint64_t *nk = calloc(ncap, sizeof *nk);
    void **nv = calloc(ncap, sizeof *nv);
    if (!nk || !nv) {
        free(nk);
        free(nv);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->vals[i] || m->vals[i] == TOMB) continue;
        size_t j = hash(m->keys[i]) & (ncap - 1);
        while (nv[j]) j = (j + 1) & (ncap - 1);
        nk[j] = m->keys[i];
        nv[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = nk;
    m->vals = nv;
    m->cap = ncap;
    m->used = m->len;
    return 0;
}

int u64map_put(u64map *m, uint64_t key, void *val)
{
    if (m->cap) {
        size_t i = find(m, key);
        if (i != m->cap) {
            m->vals[i] = val;
            return 0;
        }
    }
    if ((m->used + 1) * 2 > m->cap && grow(m) < 0) return -ENOMEM;
    size_t mask = m->cap - 1, i = hash(key) & mask;
    while (m->vals[i] && m->vals[i] != TOMB) i = (i + 1) & mask;
    if (!m->vals[i]) m->used++;
    m->keys[i] = key;
    m->vals[i] = val;
    m->len++;
    return 0;
}

void *u64map_del(u64map *m, uint64_t key)
{
    if (!m->cap) return NULL;
    size_t i = find(m, key);
    if (i == m->cap) return NULL;
    void *v = m->vals[i];
    m->vals[i] = TOMB;
    m->len--;
    return v;
}

size_t u64map_next(const u64map *m, size_t i)
{
    while (i < m->cap && (!m->vals[i] || m->vals[i] == TOMB)) i++;
    return i;
}

/*
 * dstl/u64map.c — linear-probing hash map, power-of-two capacity, load factor <= 1/2
 * (counting tombstones), so a lookup touches a couple of slots. A slot holds its key and value
 * together: one cache line per probe (the registry's map of live handles is looked up twice
 * per persist, its lines long gone from cache by then).
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
    free(m->slots);
    *m = (u64map){0};
}

static size_t find(const u64map *m, uint64_t key)
{
    size_t mask = m->cap - 1;
    for (size_t i = hash(key) & mask;; i = (i + 1) & mask) {
        if (!m->slots[i].val) return m->cap;
        if (m->slots[i].val != TOMB && m->slots[i].key == key) return i;
    }
}

void *u64map_get(const u64map *m, uint64_t key)
{
    if (!m->cap) return NULL;
    size_t i = find(m, key);
    return i == m->cap ? NULL : m->slots[i].val;
}

static int grow(u64map *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 16;
    while (m->len * 4 >= ncap) ncap *= 2;      /* after dropping tombstones: <= 1/4 full */
    u64slot *ns = calloc(ncap, sizeof *ns);
    if (!ns) return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].val || m->slots[i].val == TOMB) continue;
        size_t j = hash(m->slots[i].key) & (ncap - 1);
        while (ns[j].val) j = (j + 1) & (ncap - 1);
        ns[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    m->used = m->len;
    return 0;
}

int u64map_put(u64map *m, uint64_t key, void *val)
{
    if (m->cap) {
        size_t i = find(m, key);
        if (i != m->cap) {
            m->slots[i].val = val;
            return 0;
        }
    }
    if ((m->used + 1) * 2 > m->cap && grow(m) < 0) return -ENOMEM;
    size_t mask = m->cap - 1, i = hash(key) & mask;
    while (m->slots[i].val && m->slots[i].val != TOMB) i = (i + 1) & mask;
    if (!m->slots[i].val) m->used++;
    m->slots[i] = (u64slot){key, val};
    m->len++;
    return 0;
}

void *u64map_del(u64map *m, uint64_t key)
{
    if (!m->cap) return NULL;
    size_t i = find(m, key);
    if (i == m->cap) return NULL;
    void *v = m->slots[i].val;
    m->slots[i].val = TOMB;
    m->len--;
    return v;
}

size_t u64map_next(const u64map *m, size_t i)
{
    while (i < m->cap && (!m->slots[i].val || m->slots[i].val == TOMB)) i++;
    return i;
}

/*
 * dstl/u64map.h — an open-addressing hash map from uint64_t keys to pointers.
 * Used by the registry (segment number -> segment, handle identity hash -> entries).
 * Not thread-safe: the owner's lock protects it. Key 0 is allowed; NULL values are not.
 */
#ifndef DSTL_U64MAP_H
#define DSTL_U64MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t key;
    void *val;            /* NULL = empty slot; TOMB = deleted */
} u64slot;

typedef struct {
    u64slot *slots;
    size_t cap, len, used;
} u64map;

void u64map_init(u64map *m);
void u64map_destroy(u64map *m);
void *u64map_get(const u64map *m, uint64_t key);
/* Inserts or replaces; 0 or -ENOMEM. */
int u64map_put(u64map *m, uint64_t key, void *val);
/* Removes key; returns its value or NULL. */
void *u64map_del(u64map *m, uint64_t key);
/* Iteration: i from 0; returns the next index with a value, or m->cap at the end. */
size_t u64map_next(const u64map *m, size_t i);
/* The value at an index u64map_next returned. */
static inline void *u64map_at(const u64map *m, size_t i) { return m->slots[i].val; }

#endif

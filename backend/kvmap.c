/*
 * backend/kvmap.c — the task's keyed state: open addressing, linear probing, tombstones,
 * grown at 70 % use (kvmap.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kvmap.h"

#define KV_TOMB ((kv_entry *)(uintptr_t)1)

/* Empty fields may come as NULL: memcpy and memcmp want a pointer even for 0 bytes. */
#define NONNULL(p) ((p) ? (const void *)(p) : (const void *)"")

static uint32_t hash_of(uint8_t state, const void *key, size_t klen, const void *uk, size_t uklen)
{
    uint32_t h = 2166136261u ^ state;      /* FNV-1a: fine for a table, not for key groups */
    const unsigned char *p = key;
    for (size_t i = 0; i < klen; i++) h = (h ^ p[i]) * 16777619u;
    h = (h ^ 0xffu) * 16777619u;
    p = uk;
    for (size_t i = 0; i < uklen; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

void kv_init(kv_map *m) { memset(m, 0, sizeof *m); }

void kv_free(kv_map *m)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i] && m->slots[i] != KV_TOMB) free(m->slots[i]);
    free(m->slots);
    kv_init(m);
}

static int same(const kv_entry *e, uint32_t h, uint8_t state, const void *key, size_t klen,
                const void *uk, size_t uklen)
{
    return e->hash == h && e->state == state && e->key_len == klen && e->user_key_len == uklen &&
           memcmp(e->data, key, klen) == 0 && memcmp(e->data + klen, uk, uklen) == 0;
}

/* The slot holding the entry, or (found = 0) the slot to insert it into. */
static size_t find(const kv_map *m, uint32_t h, uint8_t state, const void *key, size_t klen,
                   const void *uk, size_t uklen, int *found)
{
    size_t mask = m->cap - 1, i = h & mask, insert = SIZE_MAX;
    for (;; i = (i + 1) & mask) {
        kv_entry *e = m->slots[i];
        if (!e) {
            *found = 0;
            return insert != SIZE_MAX ? insert : i;
        }
        if (e == KV_TOMB) {
            if (insert == SIZE_MAX) insert = i;
        } else if (same(e, h, state, key, klen, uk, uklen)) {
            *found = 1;
            return i;
        }
    }
}

static int grow(kv_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 1024;
    if (m->count * 4 < m->cap) cap = m->cap;      /* mostly tombstones: rehash in place */
    kv_entry **s = calloc(cap, sizeof *s);
    if (!s) return -ENOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        kv_entry *e = m->slots[i];
        if (!e || e == KV_TOMB) continue;
        size_t j = e->hash & (cap - 1);
        while (s[j]) j = (j + 1) & (cap - 1);
        s[j] = e;
    }
    free(m->slots);
    m->slots = s;
    m->cap = cap;
    m->used = m->count;
    return 0;
}

int kv_put(kv_map *m, uint8_t state, uint32_t key_group, const void *key, size_t klen,
           const void *uk, size_t uklen, const void *value, size_t vlen)
{
    if (klen > UINT16_MAX || uklen > UINT16_MAX || vlen > UINT32_MAX) return -EINVAL;
    key = NONNULL(key);
    uk = NONNULL(uk);
    value = NONNULL(value);
    if ((m->used + 1) * 10 >= m->cap * 7 && grow(m) < 0) return -ENOMEM;
    uint32_t h = hash_of(state, key, klen, uk, uklen);
    int found;
    size_t i = find(m, h, state, key, klen, uk, uklen, &found);
    kv_entry *e = found ? m->slots[i] : NULL;
    if (e && e->value_len == vlen) {              /* the common update: same size, in place */
        memcpy(e->data + klen + uklen, value, vlen);
        return 0;
    }
    kv_entry *n = malloc(sizeof *n + klen + uklen + vlen);
    if (!n) return -ENOMEM;
    *n = (kv_entry){.hash = h, .key_group = key_group, .state = state, .key_len = (uint16_t)klen,
                    .user_key_len = (uint16_t)uklen, .value_len = (uint32_t)vlen};
    memcpy(n->data, key, klen);
    memcpy(n->data + klen, uk, uklen);
    memcpy(n->data + klen + uklen, value, vlen);
    if (e) {
        m->bytes -= e->value_len;
        m->bytes += vlen;
        free(e);
    } else {
        if (m->slots[i] != KV_TOMB) m->used++;
        m->count++;
        m->bytes += klen + uklen + vlen;
    }
    m->slots[i] = n;
    return 0;
}

int kv_del(kv_map *m, uint8_t state, const void *key, size_t klen, const void *uk, size_t uklen)
{
    if (!m->count) return 0;
    key = NONNULL(key);
    uk = NONNULL(uk);
    int found;
    size_t i = find(m, hash_of(state, key, klen, uk, uklen), state, key, klen, uk, uklen, &found);
    if (!found) return 0;
    kv_entry *e = m->slots[i];
    m->bytes -= (uint64_t)e->key_len + e->user_key_len + e->value_len;
    free(e);
    m->slots[i] = KV_TOMB;
    m->count--;
    return 1;
}

const kv_entry *kv_get(const kv_map *m, uint8_t state, const void *key, size_t klen,
                       const void *uk, size_t uklen)
{
    if (!m->count) return NULL;
    key = NONNULL(key);
    uk = NONNULL(uk);
    int found;
    size_t i = find(m, hash_of(state, key, klen, uk, uklen), state, key, klen, uk, uklen, &found);
    return found ? m->slots[i] : NULL;
}

const kv_entry *kv_next(const kv_map *m, size_t *pos)
{
    while (*pos < m->cap) {
        kv_entry *e = m->slots[(*pos)++];
        if (e && e != KV_TOMB) return e;
    }
    return NULL;
}

/*
 * backend/kvmap.h — the in-memory keyed state of one task: an open-addressing hash map from
 * (state id, key, user key) to a value. ValueState entries have an empty user key; MapState
 * entries name the map's key in it. Entries are single allocations (key | user key | value).
 * One thread at a time (the task's).
 */
#ifndef BACKEND_KVMAP_H
#define BACKEND_KVMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t hash;
    uint32_t key_group;
    uint8_t state;             /* state id */
    uint16_t key_len, user_key_len;
    uint32_t value_len;
    unsigned char data[];      /* key, user key, value */
} kv_entry;

static inline const void *kv_key(const kv_entry *e) { return e->data; }
static inline const void *kv_user_key(const kv_entry *e) { return e->data + e->key_len; }
static inline const void *kv_value(const kv_entry *e) { return e->data + e->key_len + e->user_key_len; }

typedef struct {
    kv_entry **slots;          /* NULL = empty, KV_TOMB = deleted */
    size_t cap, count, used;   /* used = count + tombstones */
    uint64_t bytes;            /* key + user key + value bytes of every entry */
} kv_map;

void kv_init(kv_map *m);
void kv_free(kv_map *m);
/* Sets (state, key, user key) := value; key_group is kept with the entry. 0 or -ENOMEM,
 * -EINVAL for a key or user key over 65535 bytes. */
int kv_put(kv_map *m, uint8_t state, uint32_t key_group, const void *key, size_t key_len,
           const void *user_key, size_t user_key_len, const void *value, size_t value_len);
/* Removes it; 1 removed, 0 absent. */
int kv_del(kv_map *m, uint8_t state, const void *key, size_t key_len, const void *user_key, size_t user_key_len);
const kv_entry *kv_get(const kv_map *m, uint8_t state, const void *key, size_t key_len,
                       const void *user_key, size_t user_key_len);
/* Iteration: *pos = 0 to start; NULL at the end. The map must not change meanwhile. */
const kv_entry *kv_next(const kv_map *m, size_t *pos);

#endif

/*
 * tests/payload.c — see payload.h. Every value comes from splitmix64's finalizer (a bijection
 * on 64 bits with full avalanche): the record's base is mix(mix(seed) ^ index), its length a
 * mix of the base, and word k of a PAYLOAD_RANDOM record mix(base + (k + 1) * golden), so any
 * byte can be made (or checked) on its own without running a stream up to it.
 */
#include "tests/payload.h"

#define GOLDEN    0x9E3779B97F4A7C15ull
#define LEN_SALT  0xD1B54A32D192ED03ull
#define FILL_SALT 0x8CB92BA72F3D8DD7ull

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t base_of(uint64_t seed, uint64_t index) { return mix(mix(seed + GOLDEN) ^ index); }

size_t payload_len(uint64_t seed, uint64_t index, size_t max_len)
{
    uint64_t x = mix(base_of(seed, index) ^ LEN_SALT);
    if (max_len == SIZE_MAX) return (size_t)x;
    return (size_t)(x % ((uint64_t)max_len + 1));
}

/* Word k (bytes 8k .. 8k+7, little-endian) of record `base` of kind. */
static uint64_t word(payload_kind kind, uint64_t seed, uint64_t base, size_t k)
{
    if (kind == PAYLOAD_RANDOM) return mix(base + (uint64_t)(k + 1) * GOLDEN);
    if (k == 0) return base;                                 /* PAYLOAD_FILL: the stamp */
    uint64_t b = mix(seed ^ FILL_SALT) & 0xff;
    return b * 0x0101010101010101ull;
}

void payload_fill(payload_kind kind, uint64_t seed, uint64_t index, void *buf, size_t len)
{
    uint8_t *p = buf;
    uint64_t base = base_of(seed, index);
    for (size_t off = 0, k = 0; off < len; off += 8, k++) {
        uint64_t w = word(kind, seed, base, k);
        size_t n = len - off < 8 ? len - off : 8;
        for (size_t i = 0; i < n; i++) p[off + i] = (uint8_t)(w >> (8 * i));
    }
}

size_t payload_make(payload_kind kind, uint64_t seed, uint64_t index, size_t max_len, void *buf)
{
    size_t len = payload_len(seed, index, max_len);
    payload_fill(kind, seed, index, buf, len);
    return len;
}

size_t payload_check(payload_kind kind, uint64_t seed, uint64_t index, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint64_t base = base_of(seed, index);
    for (size_t off = 0, k = 0; off < len; off += 8, k++) {
        uint64_t w = word(kind, seed, base, k);
        size_t n = len - off < 8 ? len - off : 8;
        for (size_t i = 0; i < n; i++)
            if (p[off + i] != (uint8_t)(w >> (8 * i))) return off + i;
    }
    return len;
}

/*
 * dstl/statechange_api.c — the public face of the canonical state change (wire/statechange.c)
 * and Flink's key-group assignment, for state backends that link only include/dstl.h.
 *
 * The state change is wire/'s encoder and decoder behind the public struct (same fields, same
 * meaning), so a backend writes exactly the bytes `dstl cat` renders. Key groups follow Flink's
 * KeyGroupRangeAssignment and MathUtils.murmurHash bit for bit (32-bit two's-complement
 * arithmetic, done here in uint32_t), so keys land in the key groups a Flink job would give them.
 *
 * Pure; any thread.
 */
#include <errno.h>

#include "dstl/err.h"
#include "wire/wire.h"

/* Flink's bounds: KeyGroupRangeAssignment.UPPER_BOUND_MAX_PARALLELISM = 2^15. */
#define MAX_PARALLELISM_LIMIT 32768u

static wire_state_change to_wire(const dstl_state_change *sc)
{
    return (wire_state_change){.op = sc->op, .state_id = sc->state_id, .state_name = sc->state_name,
                               .state_name_len = sc->state_name_len, .key = sc->key,
                               .key_len = sc->key_len, .ns = sc->ns, .ns_len = sc->ns_len,
                               .user_key = sc->user_key, .user_key_len = sc->user_key_len,
                               .value = sc->value, .value_len = sc->value_len};
}

size_t dstl_state_change_size(const dstl_state_change *sc)
{
    if (!sc) return 0;
    wire_state_change w = to_wire(sc);
    return wire_sc_encoded_size(&w);
}

int dstl_state_change_encode(const dstl_state_change *sc, void *buf, size_t cap)
{
    if (!sc || !buf) return err_fail(-EINVAL, "state change encode: NULL argument");
    if (sc->op < DSTL_SC_PUT || sc->op > DSTL_SC_METADATA)
        return err_fail(-EINVAL, "state change encode: op %d is not DSTL_SC_PUT..DSTL_SC_METADATA", sc->op);
    wire_state_change w = to_wire(sc);
    size_t need = wire_sc_encoded_size(&w);
    if (need > cap)
        return err_fail(-EINVAL, "state change encode: needs %zu bytes, buffer has %zu", need, cap);
    int n = wire_sc_encode(&w, buf, cap);
    if (n < 0) return err_fail(n, "state change encode: a field has a length but no pointer");
    return n;
}

int dstl_state_change_decode(const void *buf, size_t len, dstl_state_change *out)
{
    if (!out || (!buf && len)) return err_fail(-EINVAL, "state change decode: NULL argument");
    wire_state_change w;
    wire_err e = {{0}};
    int rc = wire_sc_decode(buf, len, &w, &e);
    if (rc < 0) return err_fail(rc, "%s", e.msg);
    *out = (dstl_state_change){.op = w.op, .state_id = w.state_id, .state_name = w.state_name,
                               .state_name_len = w.state_name_len, .key = w.key,
                               .key_len = w.key_len, .ns = w.ns, .ns_len = w.ns_len,
                               .user_key = w.user_key, .user_key_len = w.user_key_len,
                               .value = w.value, .value_len = w.value_len};
    return 0;
}

static uint32_t rotl32(uint32_t x, unsigned r) { return x << r | x >> (32 - r); }

/* MathUtils.murmurHash(int): a MurmurHash3_x86_32 round over one int, length 4, finalized. */
static uint32_t flink_murmur(uint32_t code)
{
    code *= 0xcc9e2d51u;
    code = rotl32(code, 15);
    code *= 0x1b873593u;
    code = rotl32(code, 13);
    code = code * 5u + 0xe6546b64u;
    code ^= 4u;
    code ^= code >> 16;           /* bitMix: MurmurHash3's fmix32 */
    code *= 0x85ebca6bu;
    code ^= code >> 13;
    code *= 0xc2b2ae35u;
    code ^= code >> 16;
    /* non-negative as Java: a negative int is negated, Integer.MIN_VALUE becomes 0 */
    if (code & 0x80000000u) code = code == 0x80000000u ? 0 : 0u - code;
    return code;
}

uint32_t dstl_key_group_of_hash(int32_t hash_code, uint32_t max_parallelism)
{
    if (max_parallelism < 1 || max_parallelism > MAX_PARALLELISM_LIMIT) return UINT32_MAX;
    return flink_murmur((uint32_t)hash_code) % max_parallelism;
}

uint32_t dstl_key_group(const void *key, size_t len, uint32_t max_parallelism)
{
    const uint8_t *p = key;
    uint32_t h = 0;               /* String.hashCode over ISO-8859-1 chars: s[0]*31^(n-1) + ... */
    for (size_t i = 0; i < len; i++) h = 31u * h + p[i];
    return dstl_key_group_of_hash((int32_t)h, max_parallelism);
}

int dstl_key_group_range(uint32_t max_parallelism, uint32_t parallelism, uint32_t index,
                         uint32_t *first, uint32_t *last)
{
    if (!first || !last || parallelism < 1 || parallelism > max_parallelism ||
        max_parallelism > MAX_PARALLELISM_LIMIT || index >= parallelism)
        return err_fail(-EINVAL, "key group range: index %u of parallelism %u, max parallelism %u "
                        "(want index < parallelism <= max parallelism <= %u)",
                        index, parallelism, max_parallelism, MAX_PARALLELISM_LIMIT);
    uint64_t mp = max_parallelism, p = parallelism, i = index;
    *first = (uint32_t)((i * mp + p - 1) / p);
    *last = (uint32_t)(((i + 1) * mp - 1) / p);
    return 0;
}

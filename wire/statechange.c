/*
 * wire/statechange.c — the canonical state change (dstl.proto message StateChange).
 *
 * FLIP-41's idea: one backend-neutral encoding of a state change (op, state, key, namespace,
 * user key, value) that any backend can write as a record payload, `dstl cat` can render and
 * a recovering backend can replay. The bytes are exactly protobuf's for StateChange (tests
 * cross-check with protobuf-c), but written and read here by hand: the message is flat, and
 * decoding without allocating lets a replay point into the record bytes it iterates.
 *
 * Decoding follows protobuf rules (unknown fields skipped, the last of a repeated scalar
 * wins) and rejects what protobuf would reject (bad varints, lengths past the end, groups,
 * a known field with the wrong wire type) plus an op outside PUT..METADATA.
 *
 * Pure; any thread.
 */
#include <errno.h>
#include <limits.h>

#include "wire/wire_int.h"

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };
enum { F_OP = 1, F_STATE_ID = 2, F_STATE_NAME = 3, F_KEY = 4, F_NS = 5, F_USER_KEY = 6, F_VALUE = 7 };

static const uint8_t empty_bytes[1];

static size_t len_field_size(size_t n) { return n ? 1 + wire_varint_len(n) + n : 0; }

size_t wire_sc_encoded_size(const wire_state_change *sc)
{
    return 1 + wire_varint_len((uint64_t)sc->op) +
           (sc->state_id ? 1 + wire_varint_len(sc->state_id) : 0) +
           len_field_size(sc->state_name ? sc->state_name_len : 0) + len_field_size(sc->key_len) +
           len_field_size(sc->ns_len) + len_field_size(sc->user_key_len) +
           len_field_size(sc->value_len);
}

static uint8_t *put_len_field(uint8_t *p, unsigned field, const void *data, size_t n)
{
    if (!n) return p;
    *p++ = (uint8_t)(field << 3 | WT_LEN);
    p = wire_varint_put(p, n);
    memcpy(p, data, n);
    return p + n;
}

int wire_sc_encode(const wire_state_change *sc, void *buf, size_t cap)
{
    if (!sc || !buf || sc->op < WIRE_SC_PUT || sc->op > WIRE_SC_METADATA) return -EINVAL;
    if ((sc->key_len && !sc->key) || (sc->ns_len && !sc->ns) ||
        (sc->user_key_len && !sc->user_key) || (sc->value_len && !sc->value))
        return -EINVAL;
    size_t n = wire_sc_encoded_size(sc);
    if (n > cap || n > INT_MAX) return -EINVAL;
    uint8_t *p = buf;
    *p++ = F_OP << 3 | WT_VARINT;
    p = wire_varint_put(p, (uint64_t)sc->op);
    if (sc->state_id) {
        *p++ = F_STATE_ID << 3 | WT_VARINT;
        p = wire_varint_put(p, sc->state_id);
    }
    p = put_len_field(p, F_STATE_NAME, sc->state_name, sc->state_name ? sc->state_name_len : 0);
    p = put_len_field(p, F_KEY, sc->key, sc->key_len);
    p = put_len_field(p, F_NS, sc->ns, sc->ns_len);
    p = put_len_field(p, F_USER_KEY, sc->user_key, sc->user_key_len);
    p = put_len_field(p, F_VALUE, sc->value, sc->value_len);
    return (int)(p - (uint8_t *)buf);
}

int wire_sc_decode(const void *buf, size_t len, wire_state_change *sc, wire_err *err)
{
    if (!sc || (!buf && len)) return wire_fail(err, -EINVAL, "state change decode: NULL argument");
    const uint8_t *b = buf ? buf : empty_bytes, *p = b, *end = b + len;
    wire_state_change r = {.key = empty_bytes, .ns = empty_bytes, .user_key = empty_bytes,
                           .value = empty_bytes};
    uint64_t op = 0;
    while (p < end) {
        size_t at = (size_t)(p - b);
        uint64_t tag, v;
        if (wire_varint_get(&p, end, &tag) < 0 || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff)
            return wire_fail(err, DSTL_ECORRUPT, "state change offset %zu: bad field tag", at);
        unsigned field = (unsigned)(tag >> 3), wt = (unsigned)(tag & 7);
        int known = field >= F_OP && field <= F_VALUE;
        int want_wt = field <= F_STATE_ID ? WT_VARINT : WT_LEN;
        if (known && (int)wt != want_wt)
            return wire_fail(err, DSTL_ECORRUPT, "state change offset %zu: field %u has wire type %u",
                             at, field, wt);
        switch (wt) {
        case WT_VARINT:
            if (wire_varint_get(&p, end, &v) < 0)
                return wire_fail(err, DSTL_ECORRUPT, "state change offset %zu: bad varint", at);
            if (field == F_OP) op = v;
            else if (field == F_STATE_ID) r.state_id = (uint32_t)v;
            break;
        case WT_I64:
        case WT_I32: {
            size_t n = wt == WT_I64 ? 8 : 4;
            if ((size_t)(end - p) < n)
                return wire_fail(err, DSTL_ECORRUPT, "state change offset %zu: truncated field", at);
            p += n;
            break;
        }
        case WT_LEN: {
            if (wire_varint_get(&p, end, &v) < 0 || v > (uint64_t)(end - p))
                return wire_fail(err, DSTL_ECORRUPT, "state change offset %zu: length runs past the end", at);
            const uint8_t *d = p;
            size_t n = (size_t)v;
            p += n;
            switch (field) {
            case F_STATE_NAME: r.state_name = (const char *)d; r.state_name_len = n; break;
            case F_KEY: r.key = d; r.key_len = n; break;
            case F_NS: r.ns = d; r.ns_len = n; break;
            case F_USER_KEY: r.user_key = d; r.user_key_len = n; break;
            case F_VALUE: r.value = d; r.value_len = n; break;
            default: break;
            }
            break;
        }
        default:
            return wire_fail(err, DSTL_ECORRUPT, "state change offset %zu: wire type %u not allowed", at, wt);
        }
    }
    if (op < WIRE_SC_PUT || op > WIRE_SC_METADATA)
        return wire_fail(err, DSTL_ECORRUPT, "state change: op %llu is not PUT..METADATA",
                         (unsigned long long)op);
    r.op = (int)op;
    *sc = r;
    return 0;
}

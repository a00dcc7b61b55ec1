/*
 * tests/test_wire_statechange.c — the canonical state change: round trips, byte-for-byte
 * agreement with protobuf-c on dstl.proto's StateChange (both directions), protobuf's rules
 * for unknown fields, and rejection of malformed bytes.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tests/payload.h"
#include "wire/dstl.pb-c.h"
#include "wire/wire.h"

static wire_state_change sample(int op)
{
    return (wire_state_change){.op = op, .state_id = 300, .state_name = "counts",
                               .state_name_len = 6, .key = "user-17", .key_len = 7,
                               .ns = "window-5", .ns_len = 8, .user_key = "k", .user_key_len = 1,
                               .value = "\x00\x01\x02", .value_len = 3};
}

static void assert_bytes(const void *a, size_t alen, const void *b, size_t blen)
{
    cr_assert_eq(alen, blen);
    cr_assert(alen == 0 || memcmp(a, b, alen) == 0);
}

static void assert_same(const wire_state_change *a, const wire_state_change *b)
{
    cr_assert_eq(a->op, b->op);
    cr_assert_eq(a->state_id, b->state_id);
    assert_bytes(a->state_name, a->state_name ? a->state_name_len : 0, b->state_name,
                 b->state_name ? b->state_name_len : 0);
    assert_bytes(a->key, a->key_len, b->key, b->key_len);
    assert_bytes(a->ns, a->ns_len, b->ns, b->ns_len);
    assert_bytes(a->user_key, a->user_key_len, b->user_key, b->user_key_len);
    assert_bytes(a->value, a->value_len, b->value, b->value_len);
}

Test(wire_statechange, round_trips_every_op)
{
    for (int op = WIRE_SC_PUT; op <= WIRE_SC_METADATA; op++) {
        wire_state_change sc = sample(op), d;
        uint8_t buf[128];
        size_t want = wire_sc_encoded_size(&sc);
        int n = wire_sc_encode(&sc, buf, sizeof buf);
        cr_assert_eq(n, (int)want);
        wire_err err = {{0}};
        cr_assert_eq(wire_sc_decode(buf, (size_t)n, &d, &err), 0, "%s", err.msg);
        assert_same(&sc, &d);
        cr_assert(d.key >= (const void *)buf && d.key < (const void *)(buf + n), "points into the input");
    }
}

Test(wire_statechange, known_bytes)
{
    /* PUT, state 300 "s", key "k", value "v": proto3 field order, defaults omitted */
    wire_state_change sc = {.op = WIRE_SC_PUT, .state_id = 300, .state_name = "s", .state_name_len = 1,
                            .key = "k", .key_len = 1, .value = "v", .value_len = 1};
    const uint8_t want[] = {0x08, 0x01, 0x10, 0xac, 0x02, 0x1a, 0x01, 's', 0x22, 0x01, 'k', 0x3a, 0x01, 'v'};
    uint8_t buf[64];
    int n = wire_sc_encode(&sc, buf, sizeof buf);
    assert_bytes(buf, (size_t)n, want, sizeof want);
}

Test(wire_statechange, empty_fields)
{
    wire_state_change sc = {.op = WIRE_SC_CLEAR}, d;
    uint8_t buf[8];
    int n = wire_sc_encode(&sc, buf, sizeof buf);
    cr_assert_eq(n, 2, "only the op");
    cr_assert_eq(wire_sc_decode(buf, 2, &d, NULL), 0);
    cr_assert_eq(d.op, WIRE_SC_CLEAR);
    cr_assert_null(d.state_name);
    cr_assert_not_null(d.key);
    cr_assert_not_null(d.value);
    cr_assert_eq(d.key_len + d.ns_len + d.user_key_len + d.value_len + d.state_id, 0);
}

Test(wire_statechange, agrees_with_protobuf_c)
{
    uint64_t st = 5;
    for (int i = 0; i < 200; i++) {
        uint8_t blobs[4][300];
        size_t lens[4];
        for (int k = 0; k < 4; k++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            lens[k] = (st >> 33) % (k == 3 ? 300 : 40);
            payload_fill(PAYLOAD_RANDOM, (uint64_t)i, (uint64_t)k, blobs[k], lens[k]);
        }
        char name[16] = "state-xyz";
        wire_state_change sc = {.op = 1 + i % 6, .state_id = (uint32_t)(st >> 5),
                                .state_name = i % 3 ? name : NULL, .state_name_len = strlen(name),
                                .key = blobs[0], .key_len = lens[0], .ns = blobs[1], .ns_len = lens[1],
                                .user_key = blobs[2], .user_key_len = lens[2], .value = blobs[3],
                                .value_len = lens[3]};
        uint8_t ours[1024], theirs[1024];
        int n = wire_sc_encode(&sc, ours, sizeof ours);
        cr_assert_gt(n, 0);
        Dstl__StateChange m;
        dstl__state_change__init(&m);
        m.op = (Dstl__StateOp)sc.op;
        m.state_id = sc.state_id;
        m.state_name = sc.state_name ? name : (char *)"";
        m.key = (ProtobufCBinaryData){sc.key_len, blobs[0]};
        m.namespace_ = (ProtobufCBinaryData){sc.ns_len, blobs[1]};
        m.user_key = (ProtobufCBinaryData){sc.user_key_len, blobs[2]};
        m.value = (ProtobufCBinaryData){sc.value_len, blobs[3]};
        size_t tn = dstl__state_change__pack(&m, theirs);
        assert_bytes(ours, (size_t)n, theirs, tn);
        Dstl__StateChange *u = dstl__state_change__unpack(NULL, (size_t)n, ours);
        cr_assert_not_null(u);
        cr_assert_eq((int)u->op, sc.op);
        cr_assert_eq(u->state_id, sc.state_id);
        assert_bytes(u->value.data, u->value.len, blobs[3], lens[3]);
        dstl__state_change__free_unpacked(u, NULL);
    }
}

Test(wire_statechange, skips_unknown_fields_and_takes_the_last_value)
{
    wire_state_change sc = sample(WIRE_SC_MERGE), d;
    uint8_t buf[256];
    int n = wire_sc_encode(&sc, buf, sizeof buf);
    const uint8_t extra[] = {
        0xc8, 0x06, 0x96, 0x01,               /* field 105 varint 150 */
        0x49, 1, 2, 3, 4, 5, 6, 7, 8,         /* field 9 fixed64 */
        0x55, 1, 2, 3, 4,                     /* field 10 fixed32 */
        0x5a, 0x02, 'z', 'z',                 /* field 11 bytes */
        0x3a, 0x01, 'V',                      /* value again: last one wins */
    };
    memcpy(buf + n, extra, sizeof extra);
    cr_assert_eq(wire_sc_decode(buf, (size_t)n + sizeof extra, &d, NULL), 0);
    cr_assert_eq(d.op, WIRE_SC_MERGE);
    assert_bytes(d.value, d.value_len, "V", 1);
    assert_bytes(d.key, d.key_len, sc.key, sc.key_len);
}

Test(wire_statechange, rejects_malformed_bytes)
{
    struct {
        const char *name;
        uint8_t b[16];
        size_t n;
    } cases[] = {
        {"no op", {0x10, 0x01}, 2},
        {"op 0", {0x08, 0x00}, 2},
        {"op 7", {0x08, 0x07}, 2},
        {"varint overflow", {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, 11},
        {"truncated varint", {0x08, 0x81}, 2},
        {"length past end", {0x08, 0x01, 0x22, 0x05, 'a'}, 5},
        {"group start", {0x08, 0x01, 0x0b}, 3},
        {"wire type 7", {0x08, 0x01, 0x0f}, 3},
        {"key as varint", {0x08, 0x01, 0x20, 0x01}, 4},
        {"op as bytes", {0x0a, 0x01, 0x01}, 3},
        {"field 0", {0x08, 0x01, 0x00, 0x00}, 4},
        {"truncated fixed64", {0x08, 0x01, 0x49, 1, 2, 3}, 6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wire_state_change d;
        wire_err err = {{0}};
        uint8_t *copy = malloc(cases[i].n);   /* exact size for ASan */
        memcpy(copy, cases[i].b, cases[i].n);
        cr_assert_eq(wire_sc_decode(copy, cases[i].n, &d, &err), DSTL_ECORRUPT, "%s", cases[i].name);
        cr_assert_neq(err.msg[0], '\0');
        free(copy);
    }
    wire_state_change d;
    cr_assert_eq(wire_sc_decode(NULL, 0, &d, NULL), DSTL_ECORRUPT, "empty: no op");
}

Test(wire_statechange, encode_rejects_bad_arguments)
{
    wire_state_change sc = sample(WIRE_SC_PUT);
    uint8_t buf[128];
    size_t need = wire_sc_encoded_size(&sc);
    cr_assert_eq(wire_sc_encode(&sc, buf, need - 1), -EINVAL, "too small");
    cr_assert_eq(wire_sc_encode(&sc, buf, need), (int)need);
    sc.op = 0;
    cr_assert_eq(wire_sc_encode(&sc, buf, sizeof buf), -EINVAL);
    sc.op = 7;
    cr_assert_eq(wire_sc_encode(&sc, buf, sizeof buf), -EINVAL);
    sc = sample(WIRE_SC_PUT);
    sc.value = NULL;
    cr_assert_eq(wire_sc_encode(&sc, buf, sizeof buf), -EINVAL, "length without bytes");
}

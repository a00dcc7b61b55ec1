/*
 * tests/test_backend_api.c — the public API a state backend builds on (include/dstl.h,
 * "canonical state changes and key groups"): state change round trips and their bytes, errors
 * for bad input, and Flink's key-group assignment checked against values computed by Java
 * (String.hashCode and Flink's MathUtils.murmurHash run on a JVM, golden numbers below).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "dstl.h"

Test(backend_api, state_change_round_trips_every_field)
{
    dstl_state_change sc = {.op = DSTL_SC_PUT, .state_id = 7, .state_name = "count",
                            .state_name_len = 5, .key = "user-17", .key_len = 7, .ns = "w", .ns_len = 1,
                            .user_key = "item", .user_key_len = 4, .value = "\0\1\2", .value_len = 3};
    unsigned char buf[128];
    int n = dstl_state_change_encode(&sc, buf, sizeof buf);
    cr_assert_eq(n, (int)dstl_state_change_size(&sc));
    dstl_state_change d;
    cr_assert_eq(dstl_state_change_decode(buf, (size_t)n, &d), 0, "%s", dstl_last_error());
    cr_assert_eq(d.op, DSTL_SC_PUT);
    cr_assert_eq(d.state_id, 7);
    cr_assert_eq(d.state_name_len, 5);
    cr_assert(memcmp(d.state_name, "count", 5) == 0);
    cr_assert(d.key_len == 7 && memcmp(d.key, "user-17", 7) == 0);
    cr_assert(d.ns_len == 1 && memcmp(d.ns, "w", 1) == 0);
    cr_assert(d.user_key_len == 4 && memcmp(d.user_key, "item", 4) == 0);
    cr_assert(d.value_len == 3 && memcmp(d.value, "\0\1\2", 3) == 0);
    cr_assert((const unsigned char *)d.key >= buf && (const unsigned char *)d.key < buf + n,
              "decoding does not copy");
}

Test(backend_api, state_change_bytes_are_protobufs)
{
    /* the same vector as wire's: PUT, state 300 "s", key "k", value "v" */
    dstl_state_change sc = {.op = DSTL_SC_PUT, .state_id = 300, .state_name = "s", .state_name_len = 1,
                            .key = "k", .key_len = 1, .value = "v", .value_len = 1};
    const unsigned char want[] = {0x08, 0x01, 0x10, 0xac, 0x02, 0x1a, 0x01, 's', 0x22, 0x01, 'k', 0x3a, 0x01, 'v'};
    unsigned char buf[32];
    int n = dstl_state_change_encode(&sc, buf, sizeof buf);
    cr_assert_eq(n, (int)sizeof want);
    cr_assert(memcmp(buf, want, sizeof want) == 0);
}

Test(backend_api, state_change_bad_input_is_named)
{
    unsigned char buf[8];
    dstl_state_change sc = {.op = 9};
    cr_assert_eq(dstl_state_change_encode(&sc, buf, sizeof buf), -EINVAL);
    cr_assert(strstr(dstl_last_error(), "op 9"), "%s", dstl_last_error());
    sc = (dstl_state_change){.op = DSTL_SC_PUT, .value = "0123456789", .value_len = 10};
    cr_assert_eq(dstl_state_change_encode(&sc, buf, sizeof buf), -EINVAL);
    cr_assert(strstr(dstl_last_error(), "needs 14 bytes"), "%s", dstl_last_error());
    sc = (dstl_state_change){.op = DSTL_SC_PUT, .key_len = 3};
    cr_assert_eq(dstl_state_change_encode(&sc, buf, sizeof buf), -EINVAL);

    dstl_state_change d;
    const unsigned char past_end[] = {0x08, 0x01, 0x22, 0x05, 'k'};
    cr_assert_eq(dstl_state_change_decode(past_end, sizeof past_end, &d), DSTL_ECORRUPT);
    cr_assert(strstr(dstl_last_error(), "offset 2"), "%s", dstl_last_error());
    const unsigned char bad_op[] = {0x08, 0x09};
    cr_assert_eq(dstl_state_change_decode(bad_op, sizeof bad_op, &d), DSTL_ECORRUPT);
    cr_assert(strstr(dstl_last_error(), "op 9"), "%s", dstl_last_error());
    cr_assert_eq(dstl_state_change_decode(NULL, 1, &d), -EINVAL);
}

/* Golden values from a JVM: for each key, Java's "key".hashCode(), then Flink's
 * MathUtils.murmurHash(hashCode) % 128 and % 32768. */
static const struct { const char *key; int32_t hash; uint32_t kg128, kg32768; } golden[] = {
    {"", 0, 94, 31198},
    {"a", 97, 81, 19409},
    {"user-17", -147182744, 49, 22321},
    {"key-0", 101943362, 31, 19359},
    {"key-1", 101943363, 54, 23094},
    {"hello world", 1794106052, 92, 28508},
    {"\xff\xe9x", 252398, 59, 18363},   /* the Latin-1 string "ÿéx" */
};

Test(backend_api, key_group_matches_flink)
{
    for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) {
        size_t len = strlen(golden[i].key);
        cr_assert_eq(dstl_key_group(golden[i].key, len, 128), golden[i].kg128, "key \"%s\"", golden[i].key);
        cr_assert_eq(dstl_key_group(golden[i].key, len, 32768), golden[i].kg32768, "key \"%s\"", golden[i].key);
        cr_assert_eq(dstl_key_group_of_hash(golden[i].hash, 128), golden[i].kg128);
    }
    /* ints as keys (Integer.hashCode is the value): murmurHash(i) % 128 and % 1000 from the JVM */
    const struct { int32_t v; uint32_t kg128, kg1000; } ints[] = {
        {0, 94, 54}, {1, 86, 478}, {-1, 80, 648}, {42, 29, 565},
        {INT32_MIN, 108, 732}, {INT32_MAX, 62, 534},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        cr_assert_eq(dstl_key_group_of_hash(ints[i].v, 128), ints[i].kg128, "int %d", ints[i].v);
        cr_assert_eq(dstl_key_group_of_hash(ints[i].v, 1000), ints[i].kg1000, "int %d", ints[i].v);
    }
    cr_assert_eq(dstl_key_group("a", 1, 0), UINT32_MAX);
    cr_assert_eq(dstl_key_group("a", 1, 32769), UINT32_MAX);
}

Test(backend_api, key_group_ranges_cover_every_group_once)
{
    uint32_t seen[128];
    for (uint32_t p = 1; p <= 128; p += 7) {
        memset(seen, 0, sizeof seen);
        for (uint32_t i = 0; i < p; i++) {
            uint32_t f, l;
            cr_assert_eq(dstl_key_group_range(128, p, i, &f, &l), 0);
            cr_assert_leq(f, l);
            for (uint32_t g = f; g <= l; g++) seen[g]++;
        }
        for (uint32_t g = 0; g < 128; g++) cr_assert_eq(seen[g], 1, "p %u group %u", p, g);
    }
    uint32_t f, l;
    cr_assert_eq(dstl_key_group_range(128, 50, 49, &f, &l), 0);
    cr_assert(f == 126 && l == 127, "Flink: operator 49 of 50 owns [126, 127], got [%u, %u]", f, l);
    cr_assert_eq(dstl_key_group_range(128, 50, 50, &f, &l), -EINVAL);
    cr_assert(strstr(dstl_last_error(), "index 50 of parallelism 50"), "%s", dstl_last_error());
    cr_assert_eq(dstl_key_group_range(128, 129, 0, &f, &l), -EINVAL);
}

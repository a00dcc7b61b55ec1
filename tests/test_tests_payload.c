/*
 * tests/test_tests_payload.c — the shared payload generator (tests/payload.h) that the tests,
 * the crash tools and the benchmarks write and check records with: the same name gives the
 * same bytes and different names different ones, a shorter payload is a prefix of a longer
 * one, payload_check finds the first wrong byte, lengths span [0, max], PAYLOAD_RANDOM does
 * not compress and PAYLOAD_FILL compresses like the memset buffers the benchmarks used.
 */
#include <criterion/criterion.h>
#include <lz4.h>
#include <stdlib.h>
#include <string.h>

#include "tests/payload.h"

static const payload_kind kinds[] = {PAYLOAD_RANDOM, PAYLOAD_FILL};

Test(tests_payload, a_name_gives_the_same_bytes_and_other_names_others)
{
    for (size_t k = 0; k < 2; k++) {
        uint8_t a[64], b[64], c[64], d[64];
        payload_fill(kinds[k], 7, 42, a, sizeof a);
        payload_fill(kinds[k], 7, 42, b, sizeof b);
        payload_fill(kinds[k], 7, 43, c, sizeof c);
        payload_fill(kinds[k], 8, 42, d, sizeof d);
        cr_expect_arr_eq(a, b, sizeof a, "kind %zu: not deterministic", k);
        cr_expect(memcmp(a, c, 8) != 0, "kind %zu: index 42 and 43 share their first bytes", k);
        cr_expect(memcmp(a, d, 8) != 0, "kind %zu: seed 7 and 8 share their first bytes", k);
    }
}

Test(tests_payload, a_shorter_payload_is_a_prefix_of_a_longer_one)
{
    for (size_t k = 0; k < 2; k++) {
        uint8_t whole[1000], part[1000];
        payload_fill(kinds[k], 3, 9, whole, sizeof whole);
        for (size_t len = 0; len < 40; len++) {
            memset(part, 0xee, sizeof part);
            payload_fill(kinds[k], 3, 9, part, len);
            cr_assert_arr_eq(part, whole, len, "kind %zu, len %zu", k, len);
            cr_assert_eq(part[len], 0xee, "kind %zu: %zu bytes asked, more written", k, len);
        }
    }
}

Test(tests_payload, check_finds_the_first_wrong_byte)
{
    for (size_t k = 0; k < 2; k++) {
        uint8_t buf[300];
        payload_fill(kinds[k], 11, 5, buf, sizeof buf);
        cr_assert_eq(payload_check(kinds[k], 11, 5, buf, sizeof buf), sizeof buf);
        cr_assert_eq(payload_check(kinds[k], 11, 5, buf, 0), 0);
        static const size_t at[] = {0, 7, 8, 9, 150, 299};
        for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
            buf[at[i]] ^= 0x01;
            cr_expect_eq(payload_check(kinds[k], 11, 5, buf, sizeof buf), at[i], "kind %zu, byte %zu flipped", k,
                         at[i]);
            buf[at[i]] ^= 0x01;
        }
        cr_expect_lt(payload_check(kinds[k], 11, 6, buf, sizeof buf), 8, "kind %zu: another index's bytes pass", k);
    }
}

Test(tests_payload, lengths_span_zero_to_max)
{
    const size_t max = 20;
    int seen[21] = {0};
    for (uint64_t i = 0; i < 5000; i++) {
        size_t len = payload_len(1, i, max);
        cr_assert_leq(len, max);
        seen[len]++;
    }
    for (size_t len = 0; len <= max; len++) cr_expect_gt(seen[len], 100, "length %zu: %d of 5000", len, seen[len]);
    cr_expect_eq(payload_len(1, 2, 0), 0);
    uint8_t buf[64];
    size_t len = payload_make(PAYLOAD_RANDOM, 4, 4, sizeof buf, buf);
    cr_expect_eq(len, payload_len(4, 4, sizeof buf));
    cr_expect_eq(payload_check(PAYLOAD_RANDOM, 4, 4, buf, len), len);
}

/* lz4's bound on a 64 KiB buffer of each kind, in whole records of 1 KiB as the benchmarks
 * append them. */
static int compressed(payload_kind kind, const uint8_t **src_out)
{
    enum { REC = 1024, N = 64 };
    static uint8_t src[REC * N];
    for (size_t i = 0; i < N; i++) payload_fill(kind, 2, i, src + i * REC, REC);
    char *dst = malloc((size_t)LZ4_compressBound(sizeof src));
    int n = LZ4_compress_default((const char *)src, dst, (int)sizeof src, LZ4_compressBound(sizeof src));
    free(dst);
    *src_out = src;
    return n;
}

Test(tests_payload, random_does_not_compress_and_fill_compresses_like_memset)
{
    const uint8_t *src;
    int n = compressed(PAYLOAD_RANDOM, &src);
    cr_expect_gt(n, 64 * 1024, "PAYLOAD_RANDOM compressed to %d of 65536 bytes", n);
    n = compressed(PAYLOAD_FILL, &src);
    cr_expect_lt(n, 64 * 1024 / 20, "PAYLOAD_FILL compressed only to %d of 65536 bytes", n);
    for (size_t i = 1; i < 64; i++) {       /* records of a stream differ only in their stamp */
        cr_assert_arr_eq(src + i * 1024 + 8, src + 8, 1024 - 8, "record %zu", i);
        cr_assert(memcmp(src + i * 1024, src, 8) != 0, "record %zu has record 0's stamp", i);
    }
    for (size_t b = 9; b < 1024; b++) cr_assert_eq(src[b], src[8], "byte %zu of a fill record", b);
}

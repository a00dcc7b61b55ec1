/*
 * tests/test_wire_crc32c.c — CRC32C: published known answers, hardware == portable on every
 * length and alignment that exercises the three-lane joins, chaining and combining.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/wire.h"

/* RFC 3720 (iSCSI) B.4 test vectors and the common "123456789" check value. */
static void kat(uint32_t (*f)(uint32_t, const void *, size_t))
{
    uint8_t buf[32];
    memset(buf, 0, sizeof buf);
    cr_expect_eq(f(0, buf, 32), 0x8A9136AAu, "32 zero bytes");
    memset(buf, 0xff, sizeof buf);
    cr_expect_eq(f(0, buf, 32), 0x62A8AB43u, "32 0xFF bytes");
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)i;
    cr_expect_eq(f(0, buf, 32), 0x46DD794Eu, "ascending 0..31");
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)(31 - i);
    cr_expect_eq(f(0, buf, 32), 0x113FDB5Cu, "descending 31..0");
    cr_expect_eq(f(0, "123456789", 9), 0xE3069283u, "123456789");
    cr_expect_eq(f(0, "", 0), 0u, "empty");
}

Test(wire_crc32c, known_answers_hardware) { kat(wire_crc32c); }
Test(wire_crc32c, known_answers_portable) { kat(wire_crc32c_portable); }

static uint8_t *random_buf(size_t n, unsigned seed)
{
    uint8_t *b = malloc(n + 16);
    cr_assert_not_null(b);
    srand(seed);
    for (size_t i = 0; i < n + 16; i++) b[i] = (uint8_t)rand();
    return b;
}

Test(wire_crc32c, hardware_matches_portable_every_length)
{
    size_t max = 3 * 2048 * 2 + 3 * 256 * 3 + 64;   /* both lane tiers, twice, and tails */
    uint8_t *b = random_buf(max, 1);
    for (size_t n = 0; n <= max; n += n < 1024 ? 1 : 7)
        for (size_t a = 0; a < 8; a += n < 1024 ? 3 : 1)
            cr_assert_eq(wire_crc32c(0, b + a, n), wire_crc32c_portable(0, b + a, n),
                         "length %zu alignment %zu", n, a);
    free(b);
}

/* Each implementation the CPU runs (not only the one in use): the fold's 512-byte threshold,
 * its 256-byte steps and the tails after them. */
Test(wire_crc32c, every_implementation_matches_portable)
{
    size_t max = 8 * 256 + 3 * 2048 + 64;
    uint8_t *b = random_buf(max, 3);
    cr_log_info("CRC32C implementations: %zu, in use: %s", wire_crc32c_impls(),
                wire_crc32c_impl_name(wire_crc32c_impls() - 1));
    for (size_t i = 1; i < wire_crc32c_impls(); i++)
        for (size_t n = 0; n <= max; n += n < 1100 ? 1 : 5)
            for (uint32_t seed = 0; seed < 2; seed++)
                cr_assert_eq(wire_crc32c_impl(i, seed * 0x9e3779b9u, b + n % 8, n),
                             wire_crc32c_portable(seed * 0x9e3779b9u, b + n % 8, n), "%s: length %zu",
                             wire_crc32c_impl_name(i), n);
    free(b);
}

Test(wire_crc32c, hardware_matches_portable_large)
{
    size_t n = (4u << 20) + 13;
    uint8_t *b = random_buf(n, 2);
    cr_assert_eq(wire_crc32c(0, b + 1, n), wire_crc32c_portable(0, b + 1, n));
    cr_assert_eq(wire_crc32c(0x12345678u, b, n), wire_crc32c_portable(0x12345678u, b, n));
    free(b);
}

Test(wire_crc32c, chaining_equals_concatenation)
{
    size_t n = 20000;
    uint8_t *b = random_buf(n, 3);
    uint32_t whole = wire_crc32c(0, b, n);
    for (size_t cut = 0; cut <= n; cut += 997) {
        cr_assert_eq(wire_crc32c(wire_crc32c(0, b, cut), b + cut, n - cut), whole, "cut %zu", cut);
        cr_assert_eq(wire_crc32c_portable(wire_crc32c_portable(0, b, cut), b + cut, n - cut), whole);
    }
    free(b);
}

Test(wire_crc32c, combine_equals_concatenation)
{
    size_t n = 70001;
    uint8_t *b = random_buf(n, 4);
    uint32_t whole = wire_crc32c(0, b, n);
    size_t cuts[] = {0, 1, 7, 8, 255, 4096, 35000, 70000, 70001};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        size_t c = cuts[i];
        cr_assert_eq(wire_crc32c_combine(wire_crc32c(0, b, c), wire_crc32c(0, b + c, n - c), n - c),
                     whole, "cut %zu", c);
    }
    free(b);
}

/* The shift is table-driven below 64 KiB (a low byte and a second byte of the length) and per
 * set bit above: every length up to 1,100 and every edge of those parts, checked against the
 * portable CRC of the concatenation. */
Test(wire_crc32c, combine_equals_concatenation_for_every_part_of_the_length)
{
    size_t max = 300000;
    uint8_t *b = random_buf(max + 64, 6);
    size_t lens[2000], n = 0;
    for (size_t l = 0; l <= 1100; l++) lens[n++] = l;
    size_t edges[] = {2047, 2048, 2049, 4095, 4096, 4100, 65279, 65280, 65535, 65536, 65537, 65541, 65791,
                      65792, 131071, 131072, 131333, 196608, 262143, 299999};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) lens[n++] = edges[i];
    for (size_t i = 0; i < n; i++) {
        size_t a = 1 + i % 61, l = lens[i];
        uint32_t whole = wire_crc32c_portable(0, b, a + l);
        cr_assert_eq(wire_crc32c_combine(wire_crc32c(0, b, a), wire_crc32c(0, b + a, l), l), whole,
                     "first part %zu bytes, second %zu", a, l);
    }
    free(b);
}

Test(wire_crc32c, detects_every_single_bit_flip)
{
    uint8_t b[64];
    for (int i = 0; i < 64; i++) b[i] = (uint8_t)(i * 37);
    uint32_t good = wire_crc32c(0, b, sizeof b);
    for (size_t bit = 0; bit < 8 * sizeof b; bit++) {
        b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        cr_assert_neq(wire_crc32c(0, b, sizeof b), good, "bit %zu", bit);
        b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
}

static void *crc_thread(void *arg)
{
    static const char msg[] = "123456789";
    uint32_t *out = arg;
    *out = wire_crc32c(0, msg, 9);
    return NULL;
}

/* The first calls race to set up the tables and the CPU dispatch: all must see them ready. */
Test(wire_crc32c, first_use_from_many_threads, .timeout = 10)
{
    pthread_t t[8];
    uint32_t got[8];
    for (int i = 0; i < 8; i++) cr_assert_eq(pthread_create(&t[i], NULL, crc_thread, &got[i]), 0);
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(got[i], 0xE3069283u, "thread %d", i);
    }
}

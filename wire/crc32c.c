/*
 * wire/crc32c.c — CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as iSCSI and ext4.
 *
 * Why: every byte DSTL stores is covered by a CRC32C, and the segment encoder checksums every
 * persisted byte, so this must run near memory speed. Three implementations, the fastest the
 * CPU has chosen once:
 *   - folding (AVX-512 VPCLMULQDQ), for buffers of 64 bytes and more: from 512 bytes, four
 *     512-bit accumulators (sixteen 128-bit lanes) are each multiplied forward over 256 bytes
 *     and added into the next 256 bytes, so the loop has no dependency chain longer than one
 *     multiply; the accumulators then fold onto one, 64-byte blocks into it, its lanes onto
 *     one, all in registers, and the last 16 bytes and the tail go through the crc32
 *     instruction. On Zen 4 it runs several times the three-lane rate (bench_wire's encode
 *     spent 24 % in CRC).
 *   - hardware: the SSE4.2 crc32 instruction. It has a latency of 3 cycles and a throughput
 *     of 1 per cycle, so long buffers are cut into three lanes computed in one loop and
 *     joined with a carry-less multiply (PCLMULQDQ) that shifts a CRC over a lane's length.
 *   - portable: slicing-by-8 tables, for CPUs without SSE4.2 (and as the reference in tests).
 * Both take and return the finished CRC (pre- and post-inverted inside), so a CRC over a||b
 * is wire_crc32c(wire_crc32c(0, a, n), b, m).
 *
 * Threads: any. The tables and the CPU dispatch are set up once (pthread_once) and read-only.
 *
 * The lane join: for the raw (non-inverted) register, crc(A||B) = shift(crc(A), |B|) ^
 * crc0(B), where crc0 starts from 0. shift(c, L) multiplies c by x^(8L) modulo P; with
 * reflected operands, clmul(c, K) is c*K*x, and the crc32 instruction on that 64-bit product
 * (from 0) multiplies by x^32 and reduces, so K = x^(8L - 33) mod P. The same shift, applied
 * per set bit of a length, makes wire_crc32c_combine cost a few multiplies, which lets the
 * encoder derive a section's CRC from its runs' CRCs instead of reading the section again.
 *
 * The fold: a 128-bit block A = a_lo * x^64 + a_hi (a_lo its first 8 bytes, in the reflected
 * order) standing D bits before block B contributes a_lo * x^(64+D) + a_hi * x^D to B's
 * position; modulo P that is clmul(a_lo, x^(64+D-33)) ^ clmul(a_hi, x^(D-33)) with the
 * constants as reflected 32-bit values (a clmul of a 64-bit and a 32-bit reflected operand
 * is the product times x^33 in a 128-bit register), 95 bits, so it adds into B unreduced.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "wire/wire_int.h"

#define POLY 0x82f63b78u   /* reflected Castagnoli */

static uint32_t table[8][256];

/* a * b modulo P, both reflected (bit 31 is x^0). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

/* x^n modulo P, reflected. */
static uint32_t xpow(uint64_t n)
{
    uint32_t p = 1u << 31;      /* x^0 */
    uint32_t sq = 1u << 30;     /* x^1, squared at each bit of n */
    while (n) {
        if (n & 1) p = multmodp(sq, p);
        sq = multmodp(sq, sq);
        n >>= 1;
    }
    return p;
}

static void init_tables(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint32_t crc_portable_raw(uint32_t c, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) { c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff]; n--; }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= c;
        c = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
            table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^
            table[2][(w >> 40) & 0xff] ^ table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
    return c;
}

/* The implementation in use, chosen once by init_once, and all this CPU can run (for tests). */
typedef uint32_t (*crc_fn)(uint32_t, const uint8_t *, size_t);
static crc_fn crc_raw = crc_portable_raw;
static struct {
    const char *name;
    crc_fn fn;
} impls[4] = {{"portable", crc_portable_raw}};
static size_t nimpls = 1;

static void impl_add(const char *name, crc_fn fn)
{
    impls[nimpls].name = name;
    impls[nimpls++].fn = fn;
    crc_raw = fn;
}

/* ---- hardware ---- */
#if defined(__x86_64__)
#include <immintrin.h>

/* Lane lengths of the three-way loop, longest first. The join costs about 10 cycles, so a
 * lane of 2 KiB makes it ~1% of a 6 KiB round; 256 B lanes take over for shorter tails (a
 * key-group run is often a few KiB); below three of those a single lane is faster. */
static const size_t lane_len[2] = {2048, 256};
static uint64_t lane_k[2];   /* x^(8L - 33) mod P for each lane length */
static int have_clmul;

__attribute__((target("sse4.2,pclmul")))
static inline uint32_t shift_hw(uint32_t c, uint64_t k)
{
    __m128i prod = _mm_clmulepi64_si128(_mm_cvtsi32_si128((int)c), _mm_cvtsi64_si128((long long)k), 0);
    return (uint32_t)_mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(prod));
}

__attribute__((target("sse4.2")))
static uint32_t crc_hw_1lane(uint32_t c, const uint8_t *p, size_t n)
{
    uint64_t c64 = c;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = _mm_crc32_u64(c64, w);
        p += 8;
        n -= 8;
    }
    c = (uint32_t)c64;
    while (n--) c = _mm_crc32_u8(c, *p++);
    return c;
}

/* c shifted over n zero bytes: c * x^(8n) mod P. Below 64 KiB in at most two multiplies, by
 * the constants of n's low byte and of its second byte; beyond, one more per set bit. The
 * encoder joins one CRC per key-group run: at 1,024 writers a section holds ~64 runs of a few
 * hundred bytes, and one multiply per set bit (plus a crc32 per byte of n mod 8) was 8 % of a
 * load run's samples. */
static uint64_t shift_k[64];    /* x^(8 * 2^k - 33) mod P, for k >= 16 */
static uint32_t shift_lo[256];  /* x^(8i - 33) mod P, for i >= 5 (below, crc32 of zero bytes) */
static uint32_t shift_hi[256];  /* x^(8 * 256j - 33) mod P, for j >= 1 (2 KiB in all: in cache) */

__attribute__((target("sse4.2,pclmul")))
static uint32_t shift_bytes_hw(uint32_t c, uint64_t n)
{
    uint64_t lo = n & 255, hi = (n >> 8) & 255;
    if (lo >= 5) c = shift_hw(c, shift_lo[lo]);
    else for (; lo; lo--) c = _mm_crc32_u8(c, 0);
    if (hi) c = shift_hw(c, shift_hi[hi]);
    n >>= 16;
    for (int k = 16; n; k++, n >>= 1)
        if (n & 1) c = shift_hw(c, shift_k[k]);
    return c;
}

__attribute__((target("sse4.2,pclmul")))
static uint32_t crc_hw_3lane(uint32_t c, const uint8_t *p, size_t n)
{
    for (int t = 0; t < 2; t++) {
        size_t L = lane_len[t];
        while (n >= 3 * L) {
            uint64_t c0 = c, c1 = 0, c2 = 0;
            const uint8_t *q = p;
            for (size_t i = 0; i < L; i += 8, q += 8) {
                uint64_t w0, w1, w2;
                memcpy(&w0, q, 8);
                memcpy(&w1, q + L, 8);
                memcpy(&w2, q + 2 * L, 8);
                c0 = _mm_crc32_u64(c0, w0);
                c1 = _mm_crc32_u64(c1, w1);
                c2 = _mm_crc32_u64(c2, w2);
            }
            c = shift_hw((uint32_t)c0, lane_k[t]) ^ (uint32_t)c1;
            c = shift_hw(c, lane_k[t]) ^ (uint32_t)c2;
            p += 3 * L;
            n -= 3 * L;
        }
    }
    return crc_hw_1lane(c, p, n);
}

#define FOLD_BYTES 256u   /* four 512-bit accumulators */
static uint64_t fold_k_lo, fold_k_hi;   /* x^(64 + 8*FOLD_BYTES - 33), x^(8*FOLD_BYTES - 33) mod P */
/* The same pair for moving a 128-bit lane forward by 192, 128, 64, 48, 32 and 16 bytes
 * ([i][0] for the low 8 bytes, [i][1] for the high), by which the reduction below brings
 * everything onto one lane. */
static const unsigned fold_d[6] = {192, 128, 64, 48, 32, 16};
static uint64_t fold_dk[6][2];

__attribute__((target("avx512f,vpclmulqdq,sse4.2,pclmul")))
static inline __m512i fold512(__m512i a, __m512i k, __m512i next)
{
    __m512i lo = _mm512_clmulepi64_epi128(a, k, 0x00), hi = _mm512_clmulepi64_epi128(a, k, 0x11);
    return _mm512_ternarylogic_epi64(lo, hi, next, 0x96);   /* lo ^ hi ^ next */
}

__attribute__((target("avx512f,vpclmulqdq,sse4.2,pclmul")))
static inline __m512i fold_k(int i)
{
    return _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold_dk[i][1], (long long)fold_dk[i][0]));
}

/* The CRC (from 0) of the 64 bytes a stands for: its first three 128-bit lanes moved forward
 * onto the last (by 48, 32 and 16 bytes, one multiply each, side by side), and the crc32
 * instruction over the 16 bytes that are left. */
__attribute__((target("avx512f,vpclmulqdq,sse4.2,pclmul")))
static inline uint32_t fold512_crc(__m512i a)
{
    __m512i k = _mm512_set_epi64(0, 0, (long long)fold_dk[5][1], (long long)fold_dk[5][0], (long long)fold_dk[4][1],
                                 (long long)fold_dk[4][0], (long long)fold_dk[3][1], (long long)fold_dk[3][0]);
    __m512i f = fold512(a, k, _mm512_setzero_si512());            /* lane 3: 0 */
    f = _mm512_mask_xor_epi64(f, 0xc0, f, a);                     /* lane 3: a's */
    __m256i h = _mm256_xor_si256(_mm512_castsi512_si256(f), _mm512_extracti64x4_epi64(f, 1));
    __m128i x = _mm_xor_si128(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
    return (uint32_t)_mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(x, 1));
}

/* From 64 bytes on. Each call ends in a reduction of a few multiplies (fold512_crc): the
 * encoder checksums every key-group run on its own, ~1 KiB each at 1,024 writers. Storing the
 * accumulators and reading them back through the crc32 instruction, as this first did, cost
 * ~150 ns a call: the 8-byte loads waited for the 64-byte stores (no store forwarding),
 * 15 x the bytes' own time at 1 KiB (perf/README.md, "CRCs of short runs"). */
__attribute__((target("avx512f,vpclmulqdq,sse4.2,pclmul")))
static uint32_t crc_fold512(uint32_t c, const uint8_t *p, size_t n)
{
    if (n < 64) return crc_hw_1lane(c, p, n);
    /* the register's value enters as the first 4 bytes of the message, added in */
    __m512i a = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)c)));
    if (n >= 2 * FOLD_BYTES) {
        __m512i k = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)fold_k_hi, (long long)fold_k_lo));
        __m512i a0 = a, a1 = _mm512_loadu_si512(p + 64), a2 = _mm512_loadu_si512(p + 128),
                a3 = _mm512_loadu_si512(p + 192);
        p += FOLD_BYTES;
        n -= FOLD_BYTES;
        while (n >= FOLD_BYTES) {
            a0 = fold512(a0, k, _mm512_loadu_si512(p));
            a1 = fold512(a1, k, _mm512_loadu_si512(p + 64));
            a2 = fold512(a2, k, _mm512_loadu_si512(p + 128));
            a3 = fold512(a3, k, _mm512_loadu_si512(p + 192));
            p += FOLD_BYTES;
            n -= FOLD_BYTES;
        }
        /* the four onto the last: a0 moves 192 bytes forward, a1 128, a2 64 */
        __m512i zero = _mm512_setzero_si512();
        a = _mm512_ternarylogic_epi64(fold512(a0, fold_k(0), a3), fold512(a1, fold_k(1), zero),
                                      fold512(a2, fold_k(2), zero), 0x96);
    } else {
        p += 64;
        n -= 64;
    }
    /* a stands for everything before p; whole 64-byte blocks fold into it one by one */
    __m512i k64 = fold_k(2);
    for (; n >= 64; p += 64, n -= 64) a = fold512(a, k64, _mm512_loadu_si512(p));
    return crc_hw_1lane(fold512_crc(a), p, n);
}

#endif

/* ---- dispatch ---- */
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init_once(void)
{
    init_tables();
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        if (__builtin_cpu_supports("pclmul")) {
            for (int t = 0; t < 2; t++) {
                /* x^(8L-33) as a reflected 32-bit value, placed in the low 32 bits */
                lane_k[t] = xpow(8 * (uint64_t)lane_len[t] - 33);
            }
            for (int k = 16; k < 64; k++) shift_k[k] = xpow(8 * ((uint64_t)1 << k) - 33);
            /* each entry one multiply from the last: x^8 per byte, x^2048 per 256 bytes */
            uint32_t x8 = xpow(8), x2048 = xpow(8 * 256);
            shift_lo[5] = xpow(8 * 5 - 33);
            for (int i = 6; i < 256; i++) shift_lo[i] = multmodp(shift_lo[i - 1], x8);
            shift_hi[1] = xpow(8 * 256 - 33);
            for (int j = 2; j < 256; j++) shift_hi[j] = multmodp(shift_hi[j - 1], x2048);
            impl_add("sse4.2-3lane", crc_hw_3lane);
            have_clmul = 1;
            fold_k_lo = xpow(64 + 8 * (uint64_t)FOLD_BYTES - 33);
            fold_k_hi = xpow(8 * (uint64_t)FOLD_BYTES - 33);
            for (int i = 0; i < 6; i++) {
                fold_dk[i][0] = xpow(64 + 8 * (uint64_t)fold_d[i] - 33);
                fold_dk[i][1] = xpow(8 * (uint64_t)fold_d[i] - 33);
            }
            if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq"))
                impl_add("avx512-vpclmulqdq-fold", crc_fold512);
        } else {
            impl_add("sse4.2", crc_hw_1lane);
        }
    }
#endif
}

uint32_t wire_crc32c(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&once, init_once);
    return ~crc_raw(~crc, buf, len);
}

uint32_t wire_crc32c_portable(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&once, init_once);
    return ~crc_portable_raw(~crc, buf, len);
}

uint32_t wire_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2)
{
    pthread_once(&once, init_once);
#if defined(__x86_64__)
    if (have_clmul) return shift_bytes_hw(crc1, len2) ^ crc2;
#endif
    return multmodp(xpow(8 * len2), crc1) ^ crc2;
}

size_t wire_crc32c_impls(void)
{
    pthread_once(&once, init_once);
    return nimpls;
}

const char *wire_crc32c_impl_name(size_t i)
{
    pthread_once(&once, init_once);
    return i < nimpls ? impls[i].name : NULL;
}

uint32_t wire_crc32c_impl(size_t i, uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&once, init_once);
    return i < nimpls ? ~impls[i].fn(~crc, buf, len) : 0;
}

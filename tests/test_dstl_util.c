/*
 * Small components: the u64 hash map (registry), the latency histogram (stats), the
 * pipeline's segment buffer pool, the writers' chunk pool and the restore's arena; the object
 * key layout of remote segments.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dstl/histo.h"
#include "dstl/objcache.h"
#include "dstl/pipeline/pipeline_int.h"
#include "dstl/arena.h"
#include "dstl/read/fetch.h"
#include "dstl/remote/remote.h"
#include "dstl/storage.h"
#include "dstl/writer.h"
#include "dstl/u64map.h"
#include "dstl/registry.h"
#include "tests/helpers.h"

Test(dstl_u64map, put_get_delete_against_a_model)
{
    enum { N = 20000 };
    static uint8_t present[N];
    static int vals[N];
    u64map m;
    u64map_init(&m);
    uint64_t rnd = 42;
    for (int step = 0; step < 200000; step++) {
        uint64_t k = t_rand(&rnd) % N;
        int op = (int)(t_rand(&rnd) % 3);
        if (op == 0) {
            cr_assert_eq(u64map_put(&m, k * 0x100000001ull, &vals[k]), 0);
            present[k] = 1;
        } else if (op == 1) {
            void *v = u64map_del(&m, k * 0x100000001ull);
            cr_assert_eq(v, present[k] ? (void *)&vals[k] : NULL);
            present[k] = 0;
        } else {
            cr_assert_eq(u64map_get(&m, k * 0x100000001ull), present[k] ? (void *)&vals[k] : NULL);
        }
    }
    size_t n = 0, want = 0;
    for (size_t i = u64map_next(&m, 0); i < m.cap; i = u64map_next(&m, i + 1)) n++;
    for (int k = 0; k < N; k++) want += present[k];
    cr_expect_eq(n, want);
    cr_expect_eq(m.len, want);
    u64map_destroy(&m);
}

Test(dstl_histo, quantiles_within_one_sixteenth)
{
    static histo h;
    for (uint64_t v = 1; v <= 100000; v++) histo_add(&h, v);
    uint64_t p50 = histo_quantile(&h, 0.5), p99 = histo_quantile(&h, 0.99);
    cr_expect(p50 >= 50000 && p50 <= 50000 + 50000 / 16 + 1, "p50 %lu", (unsigned long)p50);
    cr_expect(p99 >= 99000 && p99 <= 99000 + 99000 / 16 + 1, "p99 %lu", (unsigned long)p99);
    cr_expect_eq(histo_quantile(&h, 1.0), 100000);
    cr_expect_eq(h.max, 100000);
    static histo e;
    cr_expect_eq(histo_quantile(&e, 0.99), 0);
    static histo small;
    histo_add(&small, 3);
    cr_expect_eq(histo_quantile(&small, 0.5), 3);
}

/* ---- segment buffer pool (dstl/pipeline/bufpool.c) ---- */

static int mapped(const void *p)
{
    uintptr_t page = (uintptr_t)p & ~(uintptr_t)(POOL_PAGE - 1);
    return msync((void *)page, POOL_PAGE, MS_ASYNC) == 0;
}

Test(dstl_bufpool, large_buffers_start_on_a_huge_page_and_unmap_whole)
{
    size_t cap = 13u << 20;             /* a segment under load */
    pooled_buf *b = pool_new(cap);
    cr_assert_not_null(b);
    uint8_t *data = (uint8_t *)(b + 1);
    cr_assert_eq((uintptr_t)data % (2u << 20), 0, "a segment buffer's data at %p is not on a 2 MiB boundary", (void *)data);
    cr_assert_eq(b->cap, cap);
    memset(data, 0xab, cap);            /* every byte of cap is writable */
    cr_assert_eq(data[cap - 1], 0xab);
    /* O_DIRECT: a small buffer's data starts on a page */
    pooled_buf *small = pool_new(64u << 10);
    cr_assert_not_null(small);
    cr_assert_eq((uintptr_t)(small + 1) % POOL_PAGE, 0);
    buf_pool p = {0};
    pool_put(&p, data);
    pool_put(&p, small + 1);
    cr_assert_eq(pool_take(&p, cap - 4096), b, "a pooled buffer that fits is reused");
    pool_put(&p, data);
    pool_free(&p);
    /* the whole mapping is gone: the data's first and last pages and the header's page */
    cr_assert(!mapped(data) && !mapped(data + cap - 1) && !mapped(b), "pool_free left part of a buffer mapped");
}

/* Whether any page of [p, p + len) is resident (mincore). */
static int any_resident(const uint8_t *p, size_t len)
{
    size_t pages = (len + POOL_PAGE - 1) / POOL_PAGE;
    unsigned char *v = calloc(pages, 1);
    cr_assert_not_null(v);
    cr_assert_eq(mincore((void *)p, len, v), 0);
    int any = 0;
    for (size_t i = 0; i < pages; i++) any |= v[i] & 1;
    free(v);
    return any;
}

Test(dstl_bufpool, segment_buffers_reuse_the_arenas_pages_and_keep_at_most_its_idle_bound)
{
    const size_t mb = 1u << 20;
    buf_pool p = {.arena_bytes = 128 * mb};
    size_t cap = 0;
    uint8_t *a = pool_get(&p, 13 * mb + 5, &cap);
    cr_assert_not_null(a);
    cr_assert_not_null(p.arena, "the arena is reserved at the first buffer");
    cr_assert(arena_owns(p.arena, a));
    cr_assert_eq((uintptr_t)a % (2u << 20), 0, "O_DIRECT and huge pages: the first buffer starts on one");
    cr_assert_eq(cap, 13 * mb + ARENA_BLOCK_BYTES, "the capacity counted is the blocks taken");
    memset(a, 0x5a, cap);
    pool_put(&p, a);
    cr_assert_eq(pool_idle_bytes(&p), cap, "a segment's pages stay for the next");
    uint8_t *b = pool_get(&p, 11 * mb, &cap);
    cr_assert_eq(b, a, "the next segment takes the same pages");
    cr_assert_eq(b[0], 0x5a, "reused, not faulted in anew");
    /* more than the idle bound held, then given back: what is beyond the bound goes (whole
     * huge pages, from the top), the rest stays */
    const size_t big = POOL_ARENA_IDLE + 16 * mb;
    uint8_t *c = pool_get(&p, big, &cap);
    cr_assert_eq(c, a + 11 * mb, "lowest first: right after the one held");
    memset(c, 1, big);
    pool_put(&p, c);
    cr_assert_leq(pool_idle_bytes(&p), POOL_ARENA_IDLE);
    cr_assert_geq(pool_idle_bytes(&p), POOL_ARENA_IDLE - (2u << 20));
    cr_assert(!any_resident(a + 11 * mb + POOL_ARENA_IDLE + (2u << 20), big - POOL_ARENA_IDLE - (4u << 20)),
              "pages beyond the idle bound are given back");
    /* larger than the arena's free runs: a mapping of its own, unmapped on put */
    uint8_t *d = pool_get(&p, 200 * mb, &cap);
    cr_assert_not_null(d);
    cr_assert(!arena_owns(p.arena, d));
    pool_put(&p, d);
    cr_assert_eq(p.idle_bytes, 0, "a mapping beyond POOL_MAX_BYTES is not kept");
    pool_put(&p, b);
    pool_trim(&p);
    cr_assert_eq(pool_idle_bytes(&p), 0, "idle: every page of the arena goes back");
    cr_assert(!any_resident(a, 64 * mb));
    pool_free(&p);
    cr_assert_null(p.arena);
    buf_pool none = {0};
    uint8_t *e = pool_get(&none, 64u << 10, &cap);
    cr_assert(e && !none.arena, "no arena asked for: the pool's mappings");
    cr_assert_eq((uintptr_t)e % POOL_PAGE, 0);
    pool_put(&none, e);
    cr_assert_eq(pool_kept_bytes(&none), 64u << 10, "a small mapping is kept for the next segment");
    pool_trim(&none);
    cr_assert_eq(pool_kept_bytes(&none), 0, "idle: the pooled mappings go too");
    cr_assert(!mapped(e), "pool_trim left a pooled mapping mapped");
    pool_free(&none);
}

/* ---- writers' chunk pool (dstl/chunks.c) ---- */

Test(dstl_chunks, freed_chunks_are_kept_by_their_touched_pages_within_the_room_given)
{
    chunk_pool p;
    chunk_pool_init(&p);
    chunk *a = chunk_new(&p, 64u << 10, 1, 0);
    cr_assert_not_null(a);
    cr_assert_eq(a->touched, 0);
    memset(a->data, 1, 10000);
    a->used = 10000;
    size_t res = (sizeof *a + 10000 + 4095) & ~(size_t)4095;   /* header + 10,000 bytes: 3 pages */
    chunk_put(&p, a, res);
    cr_assert_eq(p.bytes, res, "the pool counts the pages the records touched, not the capacity");
    chunk *b = chunk_new(&p, 64u << 10, 7, 100);
    cr_assert_eq(b, a, "a chunk of the same size class comes from the pool");
    cr_assert_eq(p.bytes, 0);
    cr_assert_eq(b->used, 0);
    cr_assert_eq(b->seq_first, 7);
    cr_assert_eq(b->touched, 10000, "the pages it touched before stay counted");
    b->used = 200;                                              /* touched stays 10,000 */
    void *page = b;                                             /* a mapped chunk starts a page */
    cr_assert_eq((uintptr_t)page % 4096, 0, "a 64 KiB chunk is mapped, not malloc'd");
    chunk_put(&p, b, res - 1);                                  /* no room for it: freed */
    cr_assert_eq(p.bytes, 0);
    cr_assert_eq(msync(page, 4096, MS_ASYNC), -1, "a chunk the pool refused is still mapped");
    cr_assert_eq(errno, ENOMEM);
    chunk *c = chunk_new(&p, 4u << 10, 1, 0);                   /* another class: fresh */
    cr_assert_not_null(c);
    c->used = 100;
    chunk_put(&p, c, 1u << 20);
    cr_assert_eq(p.bytes, 4096);
    chunk_pool_destroy(&p);
}

Test(dstl_chunks, the_pool_may_fill_the_headroom_under_max_in_flight_and_at_least_its_minimum)
{
    dstl_storage *s = calloc(1, sizeof *s);
    cr_assert_not_null(s);
    s->conf.max_in_flight_bytes = 100u << 20;
    s->locked.pipe.in_flight_bytes = 30u << 20;
    cr_assert_eq(chunk_pool_room(s), 70u << 20);
    s->locked.pipe.in_flight_bytes = 95u << 20;
    cr_assert_eq(chunk_pool_room(s), CHUNK_POOL_MIN);
    s->locked.pipe.in_flight_bytes = 120u << 20;                /* retained sections may exceed it */
    cr_assert_eq(chunk_pool_room(s), CHUNK_POOL_MIN);
    free(s);
}

/* ---- reused memory (dstl/arena.c): a restore's fetched bytes, the pipeline's segments ---- */

Test(dstl_arena, a_released_run_is_taken_again_lowest_first_so_the_touched_memory_stays_at_the_most_held)
{
    const uint64_t mb = 1u << 20;
    mem_arena *a = arena_new(16 * mb);
    cr_assert_not_null(a);
    arena_stats st;
    arena_get_stats(a, &st);
    cr_assert_eq(st.reserved, 16 * mb);
    uint8_t *x = arena_take(a, 3 * mb), *y = arena_take(a, 5 * mb + 1);
    cr_assert(x && y);
    cr_assert_eq((uintptr_t)x % (2u << 20), 0, "the arena starts on a huge page");
    cr_assert_eq(y, x + 3 * mb, "the second run follows the first");
    cr_assert(arena_owns(a, x) && arena_owns(a, y + 5 * mb) && !arena_owns(a, x + 16 * mb) && !arena_owns(a, NULL));
    memset(x, 1, 3 * mb);
    memset(y, 2, 5 * mb + 1);
    arena_get_stats(a, &st);
    uint64_t hw = 8 * mb + ARENA_BLOCK_BYTES;           /* y's last byte takes a block of its own */
    cr_assert_eq(st.high_water, hw);
    cr_assert_eq(st.in_use, hw);
    /* x's blocks given back: a smaller run takes them, not new memory */
    arena_give(a, x, 3 * mb);
    uint8_t *z = arena_take(a, 2 * mb);
    cr_assert_eq(z, x, "the lowest free run is reused");
    uint8_t *w = arena_take(a, 1 * mb);
    cr_assert_eq(w, x + 2 * mb, "and the rest of it next");
    arena_get_stats(a, &st);
    cr_assert_eq(st.high_water, hw, "reuse touched no new memory");
    cr_assert_eq(st.reuses, 2);
    /* a run longer than any hole goes above the high-water mark; one longer than what is left
     * is refused (the caller maps its own) */
    uint8_t *v = arena_take(a, 4 * mb);
    cr_assert_eq(v, x + hw);
    cr_assert_null(arena_take(a, 4 * mb), "16 MiB reserved, 12 MiB + a block taken");
    cr_assert_null(arena_take(a, 17 * mb));
    arena_get_stats(a, &st);
    cr_assert_eq(st.misses, 1);
    cr_assert_eq(st.takes, 5);
    arena_give(a, y, 5 * mb + 1);
    arena_give(a, z, 2 * mb);
    arena_give(a, w, 1 * mb);
    arena_give(a, v, 4 * mb);
    arena_get_stats(a, &st);
    cr_assert_eq(st.in_use, 0);
    cr_assert_eq(arena_take(a, 16 * mb), x, "everything given back: one run of the whole arena");
    uint8_t *base = x;
    arena_free(a);
    cr_assert(!mapped(base) && !mapped(base + 16 * mb - 1), "arena_free left its reservation mapped");
    cr_assert_null(arena_new(0), "no budget, no arena");
    arena_free(NULL);
}

/* A segment built into a buffer larger than it turned out (pipeline/batch.c, finish_built)
 * keeps only the blocks it holds: the rest are free for the next run, and the buffer is given
 * back by its new length. */
Test(dstl_arena, a_shrunk_run_frees_its_tail_blocks_for_the_next_take)
{
    const uint64_t mb = 1u << 20;
    mem_arena *a = arena_new(8 * mb);
    cr_assert_not_null(a);
    uint8_t *x = arena_take(a, 6 * mb);
    cr_assert_not_null(x);
    cr_assert_eq(arena_shrink(a, x, 2 * mb + 1), 2 * mb + ARENA_BLOCK_BYTES, "its first bytes' blocks stay");
    cr_assert_eq(arena_len(a, x), 2 * mb + ARENA_BLOCK_BYTES);
    cr_assert_eq(arena_shrink(a, x, 3 * mb), 2 * mb + ARENA_BLOCK_BYTES, "a shrink never grows the run");
    arena_stats st;
    arena_get_stats(a, &st);
    cr_assert_eq(st.in_use, 2 * mb + ARENA_BLOCK_BYTES);
    uint8_t *y = arena_take(a, 5 * mb);
    cr_assert_eq(y, x + 2 * mb + ARENA_BLOCK_BYTES, "the freed tail is the next run's");
    arena_give(a, x, arena_len(a, x));
    arena_give(a, y, 5 * mb);
    arena_get_stats(a, &st);
    cr_assert_eq(st.in_use, 0);
    arena_free(a);
}

/* A buffer that may grow takes the lowest hole of at least its least, and the free blocks after
 * it up to its most: the hole other runs left, not new memory above them. */
Test(dstl_arena, take_upto_fills_the_lowest_hole_that_holds_the_least_and_grows_into_it)
{
    const uint64_t mb = 1u << 20;
    mem_arena *a = arena_new(32 * mb);
    cr_assert_not_null(a);
    uint8_t *x = arena_take(a, 2 * mb), *y = arena_take(a, 1 * mb), *z = arena_take(a, 6 * mb),
            *w = arena_take(a, 1 * mb);
    cr_assert(x && y && z && w);
    arena_give(a, x, 2 * mb);                 /* holes: 2 MiB at x, 6 MiB at z */
    arena_give(a, z, 6 * mb);
    uint64_t got = 0;
    uint8_t *b = arena_take_upto(a, 4 * mb, 15 * mb, &got);
    cr_assert_eq(b, z, "the 2 MiB hole is too small, the 6 MiB one is the lowest that holds 4 MiB");
    cr_assert_eq(got, 6 * mb, "grown up to the run after it");
    cr_assert_eq(arena_len(a, b), 6 * mb);
    uint8_t *c = arena_take_upto(a, 1 * mb, 1 * mb + 1, &got);
    cr_assert_eq(c, x);
    cr_assert_eq(got, 1 * mb + ARENA_BLOCK_BYTES, "no more than its most, in whole blocks");
    arena_stats st;
    arena_get_stats(a, &st);
    cr_assert_eq(st.high_water, 10 * mb, "nothing taken above the runs before");
    uint8_t *d = arena_take_upto(a, 1 * mb, 64 * mb, &got);
    cr_assert_eq(d, w + 1 * mb, "above the last run: the rest of the arena");
    cr_assert_eq(got, 22 * mb);
    cr_assert_null(arena_take_upto(a, 1 * mb, 2 * mb, &got), "nothing of 1 MiB left");
    arena_free(a);
}

Test(dstl_arena, trim_gives_back_whole_free_huge_pages_from_the_top_and_keeps_what_it_is_told)
{
    const uint64_t mb = 1u << 20, huge = 2u << 20;
    mem_arena *a = arena_new(32 * mb);
    cr_assert_not_null(a);
    uint8_t *x = arena_take(a, 3 * mb), *y = arena_take(a, 9 * mb), *z = arena_take(a, 4 * mb);
    cr_assert(x && y && z);
    memset(x, 1, 16 * mb);
    arena_stats st;
    arena_get_stats(a, &st);
    cr_assert_eq(st.resident, 16 * mb);
    cr_assert_eq(arena_trim(a, 0), 0, "nothing free, nothing given back");
    arena_give(a, y, 9 * mb);           /* free: 3..12 MiB; whole huge pages in it: 4..12 */
    cr_assert_eq(arena_trim(a, 5 * mb), 4 * mb, "the top huge pages until at most 5 MiB idle");
    arena_get_stats(a, &st);
    cr_assert_eq(st.resident - st.in_use, 5 * mb);
    cr_assert(!any_resident(y + 5 * mb, 4 * mb) && any_resident(y + 5 * mb - POOL_PAGE, POOL_PAGE));
    cr_assert_eq(arena_trim(a, 0), 4 * mb, "the huge page x shares (2..4 MiB) stays whole");
    cr_assert(any_resident(x + 2 * mb, huge) && !any_resident(x + 4 * mb, 8 * mb));
    cr_assert_eq(x[0], 1, "a taken run is never trimmed");
    cr_assert_eq(z[4 * mb - 1], 1);
    arena_get_stats(a, &st);
    cr_assert_eq(st.trimmed, 8 * mb);
    cr_assert_eq(st.resident, 8 * mb, "x's 3 MiB and its huge page's last MiB, z's 4 MiB");
    /* trimmed blocks taken again count as resident again */
    uint8_t *w = arena_take(a, 8 * mb);
    cr_assert_eq(w, y);
    cr_assert_eq(arena_len(a, w), 8 * mb);
    arena_get_stats(a, &st);
    cr_assert_eq(st.resident, 15 * mb, "its blocks 4..11 MiB again; 3..4 had kept theirs");
    arena_free(a);
    cr_assert_eq(arena_trim(NULL, 0), 0);
}

Test(dstl_arena, the_prefault_thread_backs_pages_ahead_of_the_high_water_mark_without_changing_a_byte)
{
    const uint64_t mb = 1u << 20;
    mem_arena *small = arena_new(ARENA_PREFAULT_MIN / 2);
    arena_prefault(small);                                  /* too small: no thread */
    mem_arena *a = arena_new(ARENA_PREFAULT_MIN);
    cr_assert(small && a);
    uint8_t *x = arena_take(a, 8 * mb);
    cr_assert_not_null(x);
    for (uint64_t i = 0; i < 8 * mb; i++) x[i] = (uint8_t)(i * 7 + 3);
    arena_prefault(a);
    arena_prefault(a);                                      /* once */
    uint8_t *y = arena_take(a, 4 * mb);                     /* raises the mark while it runs */
    cr_assert_eq(y, x + 8 * mb);
    for (uint64_t i = 0; i < 4 * mb; i++) y[i] = (uint8_t)(i * 13 + 1);
    arena_stats st = {0};
    for (int i = 0; i < 20000 && st.populated < 12 * mb + ARENA_PREFAULT_AHEAD; i++) {
        usleep(1000);
        arena_get_stats(a, &st);
    }
    cr_assert_geq(st.populated, 12 * mb + ARENA_PREFAULT_AHEAD, "faulted in %lu bytes, the mark at %lu",
                  (unsigned long)st.populated, (unsigned long)st.high_water);
    usleep(20000);                                          /* and no further */
    arena_get_stats(a, &st);
    cr_assert_leq(st.populated, 12 * mb + ARENA_PREFAULT_AHEAD + (2u << 20));
    for (uint64_t i = 0; i < 8 * mb; i++)
        if (x[i] != (uint8_t)(i * 7 + 3)) cr_assert_fail("byte %lu of a run written before the thread changed", (unsigned long)i);
    for (uint64_t i = 0; i < 4 * mb; i++)
        if (y[i] != (uint8_t)(i * 13 + 1)) cr_assert_fail("byte %lu of a run written beside the thread changed", (unsigned long)i);
    arena_get_stats(small, &st);
    cr_assert_eq(st.populated, 0, "an arena below ARENA_PREFAULT_MIN is faulted in by its users only");
    arena_free(a);
    arena_free(small);
}

/* The layout objects already in buckets are found by: "[prefix/]hh/name", hh the low byte of
 * the name's folded FNV-1a in lower-case hex. Written by hand (not snprintf) since 2026-12-07. */
static unsigned fnv_folded(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return (h ^ (h >> 16)) & 0xff;
}

Test(dstl_util, remote_keys_keep_their_layout)
{
    const char *prefixes[] = {"", "p", "a/b/c"};
    const char *names[] = {"run1-000000000001.seg", "x", "run-a1b2-000000004096.seg"};
    for (size_t i = 0; i < 3; i++)
        for (size_t k = 0; k < 3; k++) {
            remote_loc loc;
            memset(&loc, 0, sizeof loc);
            snprintf(loc.prefix, sizeof loc.prefix, "%s", prefixes[i]);
            char want[128], got[128];
            size_t n = (size_t)snprintf(want, sizeof want, "%s%s%02x/%s", prefixes[i], *prefixes[i] ? "/" : "",
                                        fnv_folded(names[k]), names[k]);
            cr_assert_eq(remote_key(&loc, names[k], got, sizeof got), 0);
            cr_expect_str_eq(got, want);
            /* exactly the room for the key and its NUL, and one byte less */
            cr_expect_eq(remote_key(&loc, names[k], got, n + 1), 0);
            cr_expect_str_eq(got, want);
            cr_expect_eq(remote_key(&loc, names[k], got, n), -ENAMETOOLONG, "%s in %zu bytes", want, n);
        }
}

/* fetch_sort_by_off (the restore plan's sort of sections by offset): against a stable
 * insertion sort, for sizes across the insertion/radix boundary, many equal offsets, offsets
 * of 1 to 8 bytes, offsets whose middle byte is the same in every one (a radix pass that moves
 * nothing, skipped) or in most, and elements of 16 and 24 bytes. */
typedef struct {
    uint64_t off, tag;
    uint32_t extra;
} sort_el;

Test(dstl_util, the_plan_sorts_sections_by_offset_stably)
{
    uint64_t rnd = 7;
    static sort_el v[3000], want[3000];
    static fetch_span sv[3000];
    const size_t sizes[] = {0, 1, 2, 31, 32, 33, 100, 1024, 3000};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (int bi = 0; bi < 6; bi++) {
            const int bits = (const int[]){4, 24, 44, 64, 65, 66}[bi];
            size_t n = sizes[si];
            for (size_t i = 0; i < n; i++) {
                uint64_t r = t_rand(&rnd);
                /* 65: 24-bit offsets whose middle byte is 0x5a in all; 66: in three of four */
                uint64_t mid = bits == 66 && (r >> 40 & 3) == 0 ? r & 0xff00 : 0x5a00;
                uint64_t off = bits >= 65 ? ((r & 0xff00ff) | mid) : bits == 64 ? r : r & ((1ull << bits) - 1);
                v[i] = (sort_el){off, i, (uint32_t)r};
                sv[i] = (fetch_span){v[i].off, i};
            }
            memcpy(want, v, n * sizeof *v);
            for (size_t i = 1; i < n; i++)      /* the reference: stable by construction */
                for (size_t j = i; j > 0 && want[j - 1].off > want[j].off; j--) {
                    sort_el t = want[j];
                    want[j] = want[j - 1];
                    want[j - 1] = t;
                }
            fetch_sort_by_off(v, n, sizeof *v);
            fetch_sort_by_off(sv, n, sizeof *sv);
            for (size_t i = 0; i < n; i++) {
                cr_assert_eq(v[i].off, want[i].off, "n %zu, %d-bit offsets, at %zu", n, bits, i);
                cr_assert_eq(v[i].tag, want[i].tag, "n %zu: not stable at %zu", n, i);
                cr_assert_eq(v[i].extra, want[i].extra);
                cr_assert_eq(sv[i].off, want[i].off);
                cr_assert_eq(sv[i].end, want[i].tag, "n %zu: 16-byte elements not stable at %zu", n, i);
            }
        }
}

/* The registry tells live handles apart by every field of their identity, not by its hash:
 * identities one field apart (names that run into each other, each number) are each taken
 * back by a handle with their fields, and by no other. */
Test(dstl_registry, a_live_handle_is_taken_back_by_its_exact_identity_only)
{
    registry reg;
    reg_init(&reg, "run0");
    struct {
        const char *sid, *wid;
        uint64_t n[4];
    } ids[] = {
        {"run0", "ab", {1, 2, 3, 4}}, {"run0", "a", {1, 2, 3, 4}},  {"run0a", "b", {1, 2, 3, 4}},
        {"run0", "ab", {2, 2, 3, 4}}, {"run0", "ab", {1, 3, 3, 4}}, {"run0", "ab", {1, 2, 4, 4}},
        {"run0", "ab", {1, 2, 3, 5}}, {"run0", "a-writer-id-longer-than-eight-bytes", {0, 0, 0, 0}},
    };
    enum { N = sizeof ids / sizeof ids[0] };
    run_segment *g = reg_new_segment(&reg);
    cr_assert_not_null(g);
    g->durable = 1;
    reg_section_add(g);           /* the segment stays whatever the handles do */
    for (size_t i = 0; i < N; i++) {
        struct live_handle *l = reg_live_new(ids[i].sid, ids[i].wid, ids[i].n[0], ids[i].n[1], ids[i].n[2], ids[i].n[3]);
        cr_assert_not_null(l);
        run_segment **segs = reg_live_segs(l, 1);
        reg_pin(g);
        segs[0] = g;
        cr_assert_eq(reg_live_insert(&reg, l), 0);
    }
    cr_assert_eq(g->handle_refs, N, "each identity is its own live handle");
    /* a repeated persist's handle: equal identity, its pin dropped */
    struct live_handle *dup = reg_live_new("run0", "ab", 1, 2, 3, 4);
    reg_live_segs(dup, 1)[0] = g;
    reg_pin(g);
    cr_assert_eq(reg_live_insert(&reg, dup), 0);
    cr_assert_eq(g->handle_refs, N, "an equal handle adds no reference");
    for (size_t i = 0; i < N; i++) {
        wire_handle wh = {.storage_id = (char *)ids[i].sid, .writer_id = (char *)ids[i].wid,
                          .writer_incarnation = ids[i].n[0], .checkpoint_id = ids[i].n[1],
                          .from_seq = ids[i].n[2], .to_seq = ids[i].n[3]};
        struct live_handle *l = reg_live_take(&reg, &wh, reg_live_ident(&wh));
        cr_assert_not_null(l, "identity %zu not found", i);
        cr_assert_eq(g->handle_refs, N - 1 - i, "identity %zu: one reference dropped", i);
        reg_live_free(l);
        cr_assert_null(reg_live_take(&reg, &wh, reg_live_ident(&wh)), "identity %zu taken twice", i);
    }
    wire_handle other = {.storage_id = "run0", .writer_id = "ab", .writer_incarnation = 9};
    cr_assert_null(reg_live_take(&reg, &other, reg_live_ident(&other)));
    reg_section_release(&reg, g);
    cr_assert_eq(reg.delete_head, g, "no count left: queued for deletion");
    reg_destroy(&reg);
}

/* ---- per-thread block caches (dstl/objcache.h) ---- */

#if defined(__SANITIZE_ADDRESS__)
#define OC_CACHES 0     /* under ASan every oc_free frees (a use after free still shows) */
#else
#define OC_CACHES 1
#endif

static void *oc_free_on_thread(void *p)
{
    oc_free(p);
    return (void *)oc_kept_bytes();
}

Test(dstl_objcache, a_freed_block_is_taken_again_by_its_thread_for_its_size_class_within_the_bound)
{
    uint8_t *a = oc_alloc(200);
    cr_assert(a && ((uintptr_t)a & 15) == 0, "16-byte aligned");
    memset(a, 0xab, 200);
    size_t k0 = oc_kept_bytes();
    oc_free(a);
    cr_assert_eq(oc_kept_bytes() > k0, OC_CACHES, "kept %zu -> %zu", k0, oc_kept_bytes());
    uint8_t *b = oc_alloc(256);                         /* the same class (up to 256 bytes) */
    cr_assert_eq(b == a, OC_CACHES, "the kept block was %s", b == a ? "taken" : "not taken");
    uint8_t *c = oc_calloc(256);
    for (int i = 0; i < 256; i++) cr_assert_eq(c[i], 0, "oc_calloc zeroes: byte %d", i);
    oc_free(c);
    oc_free(b);
    /* another thread's free goes to that thread's cache, not this one's */
    size_t mine = oc_kept_bytes();
    pthread_t t;
    void *theirs = NULL;
    cr_assert_eq(pthread_create(&t, NULL, oc_free_on_thread, oc_alloc(100)), 0);
    cr_assert_eq(pthread_join(t, &theirs), 0);
    cr_assert_eq(oc_kept_bytes(), mine);
    cr_assert_eq((size_t)theirs > 0, OC_CACHES, "the freeing thread kept %zu bytes", (size_t)theirs);
    /* larger than the largest class: never kept; and never more than the bound */
    void *big = oc_alloc(64u << 10);
    cr_assert(big);
    memset(big, 1, 64u << 10);
    oc_free(big);
    cr_assert_eq(oc_kept_bytes(), mine, "a 64 KiB block was kept");
    enum { N = 2 * OC_KEEP_BYTES / 4096 };
    static void *blocks[N];
    for (int i = 0; i < N; i++) cr_assert((blocks[i] = oc_alloc(4000)));
    for (int i = 0; i < N; i++) oc_free(blocks[i]);
    cr_assert_leq(oc_kept_bytes(), OC_KEEP_BYTES, "kept %zu bytes", oc_kept_bytes());
    cr_assert_eq(oc_kept_bytes() >= OC_KEEP_BYTES - 4096, OC_CACHES, "kept %zu bytes", oc_kept_bytes());
}

static size_t rss_bytes(void)
{
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    cr_assert(f);
    cr_assert_eq(fscanf(f, "%ld %ld", &pages, &rss), 2);
    fclose(f);
    return (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
}

static void *oc_fill_and_exit(void *unused)
{
    (void)unused;
    void *b[OC_KEEP_BYTES / 4096];
    for (size_t i = 0; i < OC_KEEP_BYTES / 4096; i++)
        if ((b[i] = oc_alloc(4000))) memset(b[i], 7, 4000);
    for (size_t i = 0; i < OC_KEEP_BYTES / 4096; i++) oc_free(b[i]);
    return (void *)oc_kept_bytes();
}

/* What a thread keeps is freed when it exits: 400 threads that each keep the bound (512 KiB)
 * would leave 200 MB behind. (Under ASan a thread keeps nothing, which is checked; its RSS
 * then grows by the freed memory ASan quarantines, so the RSS bound is not, and its leak
 * check at exit stands in.) */
Test(dstl_objcache, what_a_thread_keeps_is_freed_when_it_exits)
{
    void *kept = NULL;
    for (int i = 0; i < 20; i++) {          /* the arenas' own growth first */
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, oc_fill_and_exit, NULL), 0);
        cr_assert_eq(pthread_join(t, &kept), 0);
    }
    cr_assert_eq((size_t)kept >= OC_KEEP_BYTES - 4096, OC_CACHES, "a thread kept %zu bytes before it exited",
                 (size_t)kept);
    size_t before = rss_bytes();
    for (int i = 0; i < 400; i++) {
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, oc_fill_and_exit, NULL), 0);
        cr_assert_eq(pthread_join(t, NULL), 0);
    }
    size_t after = rss_bytes();
    if (OC_CACHES) cr_assert_lt(after, before + (32u << 20), "RSS %zu -> %zu bytes over 400 threads", before, after);
}

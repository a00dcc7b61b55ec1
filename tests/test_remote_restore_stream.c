/*
 * tests/test_remote_restore_stream.c — restore plans read bytes as they arrive: a streamed
 * GET hands its body over before it completes (s3_get_object_stream), a winning hedged twin
 * never rewrites what was handed over, the fetch layer serves a read of arrived bytes while its
 * GET is still in flight, and a footer marked first (fetch_first) is requested before the rest
 * of its object.
 *
 * No server: the S3 client runs over the test transport (s3/s3_int.h), which answers a GET
 * with the asked range of a synthetic object (byte i = i * 7 + 3 mod 251) at launch and
 * completes it after a delay. Assertions are on order and state (was the GET complete when
 * the bytes were read?), never on durations.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "dstl.h"
#include "dstl/read/fetch.h"
#include "s3/s3.h"
#include "s3/s3_int.h"
#include "wire/wire.h"

#define OBJ_LEN (1u << 20)
/* an object the fetch layer fetches whole (at most 512 KiB): key "small" */
#define SMALL_LEN (256u << 10)

typedef struct {
    pthread_mutex_t mu;
    uint32_t delay_ms;          /* completion of every GET this long after its start */
    uint8_t fill_xor;           /* answers after the first are XORed with this (0: same bytes) */
    int gets;
    char ranges[16][64];        /* the Range header of each GET, in order */
    uint8_t body[OBJ_LEN];
    char cr[16][64];
} fake_obj;

static fake_obj F = {.mu = PTHREAD_MUTEX_INITIALIZER};
static uint8_t answers[16][OBJ_LEN];

static uint8_t obj_byte(uint64_t i) { return (uint8_t)((i * 7 + 3) % 251); }

static int f_exchange(void *ctx, const s3_http_request *req, s3_http_response *resp)
{
    fake_obj *f = ctx;
    unsigned long long a = 0, b = 0, len = strstr(req->url, "/small") ? SMALL_LEN : OBJ_LEN;
    for (size_t i = 0; i < req->n_headers; i++)
        if (strncasecmp(req->headers[i], "range: bytes=", 13) == 0) sscanf(req->headers[i] + 13, "%llu-%llu", &a, &b);
    pthread_mutex_lock(&f->mu);
    int n = f->gets++;
    cr_assert_lt(n, 16);
    snprintf(f->ranges[n], sizeof f->ranges[n], "%llu-%llu", a, b);
    for (unsigned long long i = a; i <= b && i < len; i++)
        answers[n][i - a] = (uint8_t)(obj_byte(i) ^ (n ? f->fill_xor : 0));
    snprintf(f->cr[n], sizeof f->cr[n], "bytes %llu-%llu/%llu", a, b, len);
    resp->status = 206;
    resp->body = (const char *)answers[n];
    resp->body_len = (size_t)(b - a + 1);
    resp->content_range = f->cr[n];
    resp->etag = "\"e\"";
    resp->request_id = "fake";
    resp->delay_ms = n == 0 ? f->delay_ms : 0;
    pthread_mutex_unlock(&f->mu);
    return 0;
}

static const s3_transport transport = {f_exchange, &F};

static s3_client *fake_client(uint32_t attempt_timeout_ms)
{
    s3_opts o = {.endpoint = "http://s3.test:9000", .path_style = true, .access_key = "AKIDTEST",
                 .secret_key = "secret-test", .attempt_timeout_ms = attempt_timeout_ms,
                 .transfer_timeout_ms = 30000, .max_attempts = 3, .transport = &transport,
                 .crc32c = wire_crc32c};
    s3_client *c;
    s3_result r;
    cr_assert_eq(s3_client_new(&o, &c, &r), 0, "%s", r.error);
    return c;
}

static void reset(uint32_t delay_ms, uint8_t fill_xor)
{
    pthread_mutex_lock(&F.mu);
    F.delay_ms = delay_ms;
    F.fill_xor = fill_xor;
    F.gets = 0;
    pthread_mutex_unlock(&F.mu);
}

/* ---- the S3 client ---- */

typedef struct {
    int calls, done_seen_first;
    size_t final;
    uint64_t size;
    int done;
    s3_result res;
} stream_state;

static void on_progress(void *ctx, size_t n, uint64_t size)
{
    stream_state *st = ctx;
    if (st->done) st->done_seen_first = 1;
    cr_assert_geq(n, st->final, "hand-overs only grow");
    st->final = n;
    st->size = size;
    st->calls++;
}

static void on_done(void *ctx, const s3_result *r)
{
    stream_state *st = ctx;
    st->res = *r;
    st->done = 1;
}

Test(remote_restore_stream, a_streamed_get_hands_its_body_over_before_it_completes_and_a_twin_never_rewrites_it)
{
    /* the first attempt delivers its bytes at once and completes 400 ms later; the attempt
     * timeout (50 ms) starts a hedged twin, which answers different bytes at once and wins */
    reset(400, 0xff);
    s3_client *c = fake_client(50);
    uint8_t *buf = calloc(1, OBJ_LEN);
    stream_state st = {0};
    cr_assert_eq(s3_get_object_stream(c, "b", "k", 0, buf, OBJ_LEN, on_progress, &st, NULL, on_done, &st), 0);
    while (!st.done) cr_assert_geq(s3_client_run(c, NULL, 0, 100), 0);
    cr_assert_eq(st.res.err, 0, "%s", st.res.error);
    s3_stats cs;
    s3_client_stats(c, &cs);
    cr_assert_eq(cs.hedges, 1, "a hedged twin was started");
    cr_assert_geq(st.calls, 1);
    cr_assert_eq(st.done_seen_first, 0, "every hand-over came before the completion");
    cr_assert_eq(st.final, OBJ_LEN, "the first attempt's whole body was handed over");
    cr_assert_eq(st.size, OBJ_LEN, "the object's size from Content-Range");
    for (size_t i = 0; i < OBJ_LEN; i++)
        cr_assert_eq(buf[i], obj_byte(i), "byte %zu was rewritten by the winning twin", i);
    s3_client_free(c);
    free(buf);
}

Test(remote_restore_stream, a_plain_get_keeps_working_without_hand_overs)
{
    reset(0, 0);
    s3_client *c = fake_client(1000);
    uint8_t buf[100];
    s3_result r;
    cr_assert_eq(s3_get_object_sync(c, "b", "k", 1000, buf, sizeof buf, &r), 0, "%s", r.error);
    cr_assert_eq(r.bytes, sizeof buf);
    for (size_t i = 0; i < sizeof buf; i++) cr_assert_eq(buf[i], obj_byte(1000 + i));
    s3_client_free(c);
}

/* ---- the fetch layer ---- */

static fetch_set *fake_set(uint32_t *id)
{
    fetch_opts o = {.cli = fake_client(30000), .budget_bytes = 4u << 20, .max_gets = 4,
                    .merge_gap_bytes = 64u << 10};
    fetch_set *f;
    cr_assert_eq(fetch_new(&o, &f), 0);
    cr_assert_eq(fetch_object(f, "b", "obj", OBJ_LEN, 0, id), 0);
    return f;
}

Test(remote_restore_stream, a_read_is_served_from_arrived_bytes_while_the_get_is_still_in_flight)
{
    reset(3000, 0);          /* the GET completes 3 s after it started */
    uint32_t id;
    fetch_set *f = fake_set(&id);
    cr_assert_eq(fetch_need(f, id, 0, OBJ_LEN), 0);
    cr_assert_eq(fetch_commit(f, id), 0);
    uint8_t dst[4096];
    char msg[256];
    cr_assert_eq(fetch_read(f, id, 1000, sizeof dst, dst, msg, sizeof msg), 1, "%s", msg);
    fetch_stats st;
    fetch_get_stats(f, &st);
    /* the state, not a duration: the object's GET had not completed when the bytes were read */
    cr_assert_eq(st.gets_completed, 0, "the read waited for the whole GET instead of the bytes it needs");
    /* ... and the object counts as fetched already: a reader served as the bytes stream in may
     * be done before its GET ends, and a plan's stats then said it had fetched nothing */
    cr_assert_eq(st.objects_fetched, 1, "bytes of the object were read, and it is not counted fetched");
    for (size_t i = 0; i < sizeof dst; i++) cr_assert_eq(dst[i], obj_byte(1000 + i));
    const uint8_t *p = NULL;
    cr_assert_eq(fetch_borrow(f, id, 0, OBJ_LEN, &p, msg, sizeof msg), 1, "%s", msg);
    cr_assert_eq(p[OBJ_LEN - 1], obj_byte(OBJ_LEN - 1));
    for (int i = 0; i < 100 && st.gets_completed == 0; i++) {      /* it completes later */
        usleep(100 * 1000);
        fetch_get_stats(f, &st);
    }
    cr_assert_eq(st.gets_completed, 1);
    cr_assert_eq(st.objects_fetched, 1, "counted once");
    cr_assert_eq(st.requests, 1, "one GET for the object");
    fetch_release(f, id, 0, OBJ_LEN);
    fetch_free(f);
}

/* A reader's thread that tries a queued range again and again (dstl_reader_try_next in turns)
 * tells the fetch thread once: the first poll is news (the budget may start the extent), the
 * rest change nothing. Each used to wake it (a send() and a pass of its loop): ~15 wake-ups
 * per 32 records at 1,024 readers on 64 threads. */
Test(remote_restore_stream, polling_a_queued_range_again_wakes_the_fetch_thread_once)
{
    reset(3000, 0);          /* the first GET completes 3 s after it started: the other waits */
    fetch_opts o = {.cli = fake_client(30000), .budget_bytes = 4u << 20, .max_gets = 1,
                    .merge_gap_bytes = 64u << 10};
    fetch_set *f;
    uint32_t id;
    cr_assert_eq(fetch_new(&o, &f), 0);
    cr_assert_eq(fetch_object(f, "b", "obj", OBJ_LEN, 0, &id), 0);
    const uint64_t off[2] = {0, OBJ_LEN / 2};       /* far apart: two extents, two GETs */
    for (int k = 0; k < 2; k++) cr_assert_eq(fetch_need(f, id, off[k], 4096), 0);
    cr_assert_eq(fetch_commit(f, id), 0);
    int queued = -1;
    for (int i = 0; i < 200 && queued < 0; i++) {  /* the fetch thread starts one of them */
        pthread_mutex_lock(&F.mu);
        if (F.gets == 1) queued = strncmp(F.ranges[0], "0-", 2) == 0;
        pthread_mutex_unlock(&F.mu);
        if (queued < 0) usleep(10 * 1000);
    }
    cr_assert_geq(queued, 0, "no GET started");
    for (int i = 0; i < 10; i++)
        cr_assert_eq(fetch_poll(f, id, off[queued], 4096), 0, "poll %d: the queued range is in", i);
    fetch_stats st;
    fetch_get_stats(f, &st);
    cr_expect_eq(st.poll_wakeups, 1, "ten polls of the queued range woke the fetch thread %lu times",
                 (unsigned long)st.poll_wakeups);
    for (int k = 0; k < 2; k++) fetch_release(f, id, off[k], 4096);
    fetch_free(f);
}

Test(remote_restore_stream, ranges_marked_first_are_requested_before_the_rest_of_their_object)
{
    /* a footer (the tail) and a section in the middle marked first, as a plan marks its first
     * record's object: four extents, the two marked ones requested first */
    reset(0, 0);
    uint32_t id;
    fetch_set *f = fake_set(&id);
    cr_assert_eq(fetch_first(f, id, OBJ_LEN - 1000, 1000), 0);
    cr_assert_eq(fetch_first(f, id, 20000, 5000), 0);
    cr_assert_eq(fetch_first(f, id, 0, 10), -EINVAL, "at most two per object");
    cr_assert_eq(fetch_need(f, id, 0, OBJ_LEN), 0);
    cr_assert_eq(fetch_commit(f, id), 0);
    uint8_t dst[1000];
    char msg[256];
    cr_assert_eq(fetch_read(f, id, OBJ_LEN - 1000, sizeof dst, dst, msg, sizeof msg), 1, "%s", msg);
    cr_assert_eq(fetch_read(f, id, 0, sizeof dst, dst, msg, sizeof msg), 1, "%s", msg);
    for (size_t i = 0; i < sizeof dst; i++) cr_assert_eq(dst[i], obj_byte(i));
    cr_assert_eq(fetch_read(f, id, 24500, sizeof dst, dst, msg, sizeof msg), 1, "%s", msg);   /* across two */
    for (size_t i = 0; i < sizeof dst; i++) cr_assert_eq(dst[i], obj_byte(24500 + i));
    pthread_mutex_lock(&F.mu);
    cr_assert_eq(F.gets, 4, "the two marked ranges and the two around them");
    char a[64], b[64];
    snprintf(a, sizeof a, "%u-%u", OBJ_LEN - 1000, OBJ_LEN - 1);
    snprintf(b, sizeof b, "%u-%u", 20000, 24999);
    cr_assert(!strcmp(F.ranges[0], a) || !strcmp(F.ranges[0], b), "a marked range first: %s", F.ranges[0]);
    cr_assert(!strcmp(F.ranges[1], a) || !strcmp(F.ranges[1], b), "a marked range second: %s", F.ranges[1]);
    cr_assert_str_neq(F.ranges[0], F.ranges[1]);
    pthread_mutex_unlock(&F.mu);
    fetch_release(f, id, 0, OBJ_LEN);
    fetch_free(f);
}

Test(remote_restore_stream, two_ranges_of_a_small_object_are_one_get_of_the_whole_object)
{
    /* two ranges far apart (the gap beyond the merge gap) of a 256 KiB object: one GET of all
     * of it, not two ranged GETs (a request costs a round trip; the bytes between cost less) */
    reset(0, 0);
    uint32_t id;
    fetch_set *f = fake_set(&id);
    uint32_t small;
    cr_assert_eq(fetch_object(f, "b", "small", SMALL_LEN, 1, &small), 0);
    cr_assert_eq(fetch_need(f, small, 1000, 4000), 0);
    cr_assert_eq(fetch_need(f, small, SMALL_LEN - 5000, 5000), 0);
    cr_assert_eq(fetch_commit(f, small), 0);
    uint8_t dst[5000];
    char msg[256];
    cr_assert_eq(fetch_read(f, small, 1000, 4000, dst, msg, sizeof msg), 1, "%s", msg);
    for (size_t i = 0; i < 4000; i++) cr_assert_eq(dst[i], obj_byte(1000 + i));
    cr_assert_eq(fetch_read(f, small, SMALL_LEN - 5000, 5000, dst, msg, sizeof msg), 1, "%s", msg);
    for (size_t i = 0; i < 5000; i++) cr_assert_eq(dst[i], obj_byte(SMALL_LEN - 5000 + i));
    pthread_mutex_lock(&F.mu);
    cr_assert_eq(F.gets, 1, "one GET for the small object, %d made", F.gets);
    char whole[64];
    snprintf(whole, sizeof whole, "0-%u", SMALL_LEN - 1);
    cr_assert_str_eq(F.ranges[0], whole, "the whole object");
    pthread_mutex_unlock(&F.mu);
    fetch_release(f, small, 1000, 4000);
    fetch_release(f, small, SMALL_LEN - 5000, 5000);
    fetch_free(f);
}

Test(remote_restore_stream, whole_sections_less_than_256_kib_apart_are_one_get)
{
    /* an object whose ranges are whole sections of some writers (fetch_sections), the others'
     * sections between them (100 KB: beyond the merge gap, more than an eighth of the need):
     * one GET reads through them, not one per run */
    reset(0, 0);
    uint32_t id;
    fetch_set *f = fake_set(&id);
    fetch_sections(f, id);
    for (uint32_t k = 0; k < 5; k++) cr_assert_eq(fetch_need(f, id, k * 200000u, 50000), 0);
    cr_assert_eq(fetch_need(f, id, OBJ_LEN - 1000, 1000), 0);      /* the footer: 190 KB on */
    cr_assert_eq(fetch_commit(f, id), 0);
    uint8_t dst[1000];
    char msg[256];
    for (uint32_t k = 0; k < 5; k++) {
        cr_assert_eq(fetch_read(f, id, k * 200000u, sizeof dst, dst, msg, sizeof msg), 1, "%s", msg);
        for (size_t i = 0; i < sizeof dst; i++) cr_assert_eq(dst[i], obj_byte(k * 200000u + i));
    }
    cr_assert_eq(fetch_read(f, id, OBJ_LEN - 1000, sizeof dst, dst, msg, sizeof msg), 1, "%s", msg);
    pthread_mutex_lock(&F.mu);
    cr_assert_eq(F.gets, 1, "one GET through the gaps, %d made", F.gets);
    char all[64];
    snprintf(all, sizeof all, "0-%u", OBJ_LEN - 1);
    cr_assert_str_eq(F.ranges[0], all);
    pthread_mutex_unlock(&F.mu);
    for (uint32_t k = 0; k < 5; k++) fetch_release(f, id, k * 200000u, 50000);
    fetch_release(f, id, OBJ_LEN - 1000, 1000);
    fetch_free(f);
}

Test(remote_restore_stream, a_range_needed_many_times_is_held_until_its_last_use_and_bad_spans_add_nothing)
{
    /* a footer named by three pieces: one range with three uses (fetch_need_uses), held until
     * the third release; a batch of spans with one outside the object is refused whole, naming
     * the object, and none of it is fetched */
    reset(0, 0);
    uint32_t id;
    fetch_set *f = fake_set(&id);
    cr_assert_eq(fetch_need_uses(f, id, OBJ_LEN - 1000, 1000, 0), -EINVAL, "no use at all");
    const fetch_span bad[2] = {{0, 4000}, {OBJ_LEN - 10, OBJ_LEN + 1}};
    cr_assert_eq(fetch_need_spans(f, id, bad, 2), -EINVAL);
    cr_assert(strstr(dstl_last_error(), "obj"), "the detail names the object: %s", dstl_last_error());
    cr_assert_eq(fetch_need_uses(f, id, OBJ_LEN - 1000, 1000, 3), 0);
    cr_assert_eq(fetch_commit(f, id), 0);
    uint8_t dst[1000];
    char msg[256];
    cr_assert_eq(fetch_read(f, id, OBJ_LEN - 1000, sizeof dst, dst, msg, sizeof msg), 1, "%s", msg);
    for (size_t i = 0; i < sizeof dst; i++) cr_assert_eq(dst[i], obj_byte(OBJ_LEN - 1000 + i));
    pthread_mutex_lock(&F.mu);
    cr_assert_eq(F.gets, 1, "%d GETs", F.gets);
    char footer[64];
    snprintf(footer, sizeof footer, "%u-%u", OBJ_LEN - 1000, OBJ_LEN - 1);
    cr_assert_str_eq(F.ranges[0], footer, "the footer alone: the refused spans added nothing");
    pthread_mutex_unlock(&F.mu);
    fetch_stats st;
    /* the bytes are in once read; the GET may still be ending (an extent in flight is freed
     * when it ends): wait for that, so the releases below are all that decides */
    for (int t = 0; t < 5000; t++) {
        fetch_get_stats(f, &st);
        if (st.gets_completed == 1) break;
        usleep(1000);
    }
    cr_assert_eq(st.gets_completed, 1, "the footer's GET did not end");
    for (int k = 0; k < 2; k++) {
        fetch_release(f, id, OBJ_LEN - 1000, 1000);
        fetch_get_stats(f, &st);
        cr_assert_eq(st.held_bytes, 1000, "after release %d of 3 the footer is still held", k + 1);
    }
    fetch_release(f, id, OBJ_LEN - 1000, 1000);
    fetch_get_stats(f, &st);
    cr_assert_eq(st.held_bytes, 0, "the last use released frees it");
    fetch_free(f);
}

/*
 * Local I/O faults through the storage, injected by the I/O engine's fault script:
 * ENOSPC and EIO on write, EIO on fdatasync, short writes. Clear errors, failed futures,
 * nothing acknowledged lost, records retried by the next persist, and fail-stop after an
 * fdatasync (or unknown-outcome write) failure.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dstl.h"
#include "dstl/local/ioeng.h"
#include "dstl/seams.h"
#include "tests/helpers.h"
#include "tests/helpers_dstl.h"
#include "tests/helpers_keys.h"
#include "tests/payload.h"
#include "wire/wire.h"

static char *dir;
static struct ioeng_fault *fault;

static void setup(void)
{
    dir = t_mkdtemp("faults");
    cr_assert_eq(ioeng_fault_new(&fault), 0);
}

static void teardown(void)
{
    ioeng_fault_free(fault);
    t_rm_rf(dir);
    free(dir);
}

TestSuite(dstl_faults, .init = setup, .fini = teardown, .timeout = 60);

/* A storage on `engine` with the fault script, or the test is skipped when the kernel lacks the
 * engine (t_engine_or_skip). */
static dstl_storage *open_faulty(const char *engine)
{
    t_engine_or_skip(engine);
    dstl_config *c = t_config(dir, "dstl.io.engine", engine, "dstl.batch.persist-delay", "0", NULL);
    dstl_storage *s = NULL;
    storage_seams t = {.fault = fault};
    cr_assert_eq(storage_open_with_seams(c, &t, &s), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    return s;
}

static void enospc_then_retry(const char *engine)
{
    dstl_storage *s = open_faulty(engine);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
    t_append_n(w, 1, 200, 0, 8, 500);
    dstl_handle *h1 = t_persist(w, 0, 1);
    t_append_n(w, 1, 200, 0, 8, 500);
    cr_assert_eq(ioeng_fault_add(fault, IOENG_OP_WRITE, ioeng_fault_seen(fault, IOENG_OP_WRITE) + 1, -ENOSPC), 0);
    dstl_handle *h = NULL;
    int rc = t_persist_result(w, 0, 2, &h);
    cr_expect_eq(rc, -ENOSPC, "got %d: %s", rc, dstl_last_error());
    cr_expect(strstr(dstl_last_error(), ".seg") != NULL, "detail names no segment: %s", dstl_last_error());
    /* the acknowledged handle is intact, and the same range goes through on the next try */
    cr_expect_eq(t_verify(s, h1, 1, 0, 8, 0, 7, 500), 200);
    cr_assert_eq(t_persist_result(w, 0, 3, &h), 0, "%s", dstl_last_error());
    cr_expect_eq(dstl_handle_to_seq(h), 400);
    cr_expect_eq(t_verify(s, h, 1, 0, 8, 0, 7, 500), 400);
    dstl_stats st;
    dstl_storage_stats(s, &st);
    cr_expect_eq(st.persist_failures, 1);
    dstl_handle_free(h);
    dstl_handle_free(h1);
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);
}

Test(dstl_faults, enospc_on_write_fails_one_persist_then_retries_io_uring) { enospc_then_retry("io_uring"); }
Test(dstl_faults, enospc_on_write_fails_one_persist_then_retries_libaio) { enospc_then_retry("libaio"); }
Test(dstl_faults, enospc_on_write_fails_one_persist_then_retries_psync) { enospc_then_retry("psync"); }

/* ---- a failed batch's records: rebuilt from its segment, charged until sent again ---- */

/* The pending-record bytes of t_append_n's records [from, to) of writer wid (their charge). */
static uint64_t pending_bytes(uint32_t wid, uint64_t from, uint64_t to, size_t max_len)
{
    uint64_t n = 0;
    for (uint64_t seq = from; seq < to; seq++) n += wire_rec_size(payload_len(wid, seq, max_len));
    return n;
}

/* Reads h back over key groups [kgf, kgl]: the meta record "schema" at seq 0, then t_append_n's
 * records of writer 1 (max_len 700, key group seq % 8). Returns the data records read. */
static long verify_with_meta(dstl_storage *s, const dstl_handle *h, uint32_t kgf, uint32_t kgl)
{
    dstl_reader *r = NULL;
    cr_assert_eq(dstl_reader_open(s, h, kgf, kgl, &r), 0, "%s", dstl_last_error());
    dstl_record rec;
    long n = 0;
    int rc, meta = 0;
    while ((rc = dstl_reader_next(r, &rec)) == 1) {
        if (rec.seq == 0) {
            cr_expect(rec.is_meta && rec.len == 6 && memcmp(rec.data, "schema", 6) == 0, "seq 0 is not the meta record");
            meta++;
            continue;
        }
        size_t len = payload_len(1, rec.seq, 700);
        cr_expect_eq(rec.key_group, (uint32_t)(rec.seq % 8), "seq %llu", (unsigned long long)rec.seq);
        cr_expect(rec.key_group >= kgf && rec.key_group <= kgl);
        cr_expect(rec.len == len && payload_check(PAYLOAD_RANDOM, 1, rec.seq, rec.data, len) == len,
                  "seq %llu: payload differs", (unsigned long long)rec.seq);
        n++;
    }
    cr_expect_eq(rc, 0, "%s", dstl_last_error());
    cr_expect_eq(meta, 1);
    dstl_reader_close(r);
    return n;
}

static uint64_t in_flight(dstl_storage *s)
{
    dstl_stats st;
    cr_assert_eq(dstl_storage_stats(s, &st), 0);
    return st.in_flight_bytes;
}

/* Records are freed from the writer once encoded, so a retry after ENOSPC comes from the failed
 * segment's sections (decompressed, decrypted, rebuilt): the retried handle must read back
 * every record exactly, and the failed records stay charged to max-in-flight until sent again. */
/* built: persist-delay 100 ms and ~350 KB of records, so the batch is encoded as its sections
 * join (pipeline/batch.c, batch_encode_open) and the retry comes from that segment. */
static void retry_from_the_failed_segment(const char *codec, int encrypted, int built)
{
    const char *kf = encrypted ? tk_write(dir, "keys", "k: " TK_HEX_A "\n", 0600) : NULL;
    dstl_config *c = t_config(dir, "dstl.io.engine", "psync", "dstl.batch.persist-delay", built ? "100ms" : "0",
                              "dstl.compression", codec, kf ? "dstl.encryption.key-file" : NULL, kf, NULL);
    dstl_storage *s = NULL;
    storage_seams t = {.fault = fault};
    cr_assert_eq(storage_open_with_seams(c, &t, &s), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
    cr_assert_eq(dstl_append_meta(w, "schema", 6), 0);
    uint64_t end = t_append_n(w, 1, built ? 1000 : 300, 0, 8, 700);
    cr_assert_eq(ioeng_fault_add(fault, IOENG_OP_WRITE, ioeng_fault_seen(fault, IOENG_OP_WRITE) + 1, -ENOSPC), 0);
    dstl_handle *h = NULL;
    cr_assert_eq(t_persist_result(w, 0, 1, &h), -ENOSPC, "%s", dstl_last_error());
    uint64_t want = wire_rec_size(6) + pending_bytes(1, 1, end, 700);
    cr_expect_eq(in_flight(s), want, "%s %s: %llu bytes in flight after the failure, the failed records are %llu",
                 codec, encrypted ? "encrypted" : "plain", (unsigned long long)in_flight(s), (unsigned long long)want);
    /* more records behind the failed ones; the retry covers both */
    end = t_append_n(w, 1, 100, 0, 8, 700);
    cr_assert_eq(t_persist_result(w, 0, 2, &h), 0, "%s", dstl_last_error());
    cr_expect_eq(dstl_handle_to_seq(h), end);
    cr_expect_eq(verify_with_meta(s, h, 0, 7), (long)end - 1);
    long in23 = 0;
    for (uint64_t seq = 1; seq < end; seq++) in23 += seq % 8 == 2 || seq % 8 == 3;
    cr_expect_eq(verify_with_meta(s, h, 2, 3), in23);
    cr_expect_eq(in_flight(s), 0, "durable: nothing charged, %llu", (unsigned long long)in_flight(s));
    dstl_handle_free(h);
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);
    free((char *)kf);
}

Test(dstl_faults, a_failed_batch_is_retried_from_its_segment) { retry_from_the_failed_segment("none", 0, 0); }
Test(dstl_faults, a_failed_batch_is_retried_from_its_segment_lz4) { retry_from_the_failed_segment("lz4", 0, 0); }
Test(dstl_faults, a_failed_batch_is_retried_from_its_segment_zstd) { retry_from_the_failed_segment("zstd", 0, 0); }
Test(dstl_faults, a_failed_batch_is_retried_from_its_segment_encrypted) { retry_from_the_failed_segment("none", 1, 0); }
Test(dstl_faults, a_failed_batch_is_retried_from_its_segment_zstd_encrypted) { retry_from_the_failed_segment("zstd", 1, 0); }
Test(dstl_faults, a_failed_built_batch_is_retried_from_its_segment) { retry_from_the_failed_segment("none", 0, 1); }
Test(dstl_faults, a_failed_built_batch_is_retried_from_its_segment_lz4_encrypted)
{
    retry_from_the_failed_segment("lz4", 1, 1);
}

/* A batch encoded as its sections join (pipeline/batch.c, batch_encode_open) whose next section
 * cannot be encoded (out of memory, injected) fails unwritten: the section already in the
 * segment has had its chunks freed, so its records are rebuilt from that segment (finished in
 * memory, compressed and sealed as asked), the other keeps its chunks, both stay charged, and
 * the retry reads back every record. */
static void built_batch_fails_then_retries(const char *codec, int encrypted)
{
    const char *kf = encrypted ? tk_write(dir, "keys", "k: " TK_HEX_A "\n", 0600) : NULL;
    dstl_config *c = t_config(dir, "dstl.batch.persist-delay", "1s", "dstl.compression", codec,
                              kf ? "dstl.encryption.key-file" : NULL, kf, NULL);
    dstl_storage *s = NULL;
    storage_seams t = {.fault = fault, .fail_build_add = 2};
    cr_assert_eq(storage_open_with_seams(c, &t, &s), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    dstl_writer *a = NULL, *b = NULL;
    cr_assert_eq(dstl_writer_open(s, "a", 0, 7, &a), 0);
    cr_assert_eq(dstl_writer_open(s, "b", 0, 7, &b), 0);
    cr_assert_eq(dstl_append_meta(a, "schema", 6), 0);
    uint64_t end_a = t_append_n(a, 1, 1000, 0, 8, 700);   /* ~350 KB: the batch is built */
    uint64_t end_b = t_append_n(b, 2, 1000, 0, 8, 700);
    dstl_future *fa, *fb;
    cr_assert_eq(dstl_persist(a, 0, 1, &fa), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_persist(b, 0, 1, &fb), 0, "%s", dstl_last_error());
    dstl_handle *ha = NULL, *hb = NULL;
    cr_assert_eq(dstl_future_wait(fa, 20000), 0);
    cr_assert_eq(dstl_future_wait(fb, 20000), 0);
    cr_assert_eq(dstl_future_result(fa, &ha), -ENOMEM, "%s", dstl_last_error());
    cr_assert(strstr(dstl_last_error(), "out of memory (injected)"), "%s", dstl_last_error());
    cr_assert_eq(dstl_future_result(fb, &hb), -ENOMEM, "%s", dstl_last_error());
    dstl_future_free(fa);
    dstl_future_free(fb);
    uint64_t want = wire_rec_size(6) + pending_bytes(1, 1, end_a, 700) + pending_bytes(2, 0, end_b, 700);
    cr_expect_eq(in_flight(s), want, "%s %s: %llu bytes in flight after the failure, the failed records are %llu",
                 codec, encrypted ? "encrypted" : "plain", (unsigned long long)in_flight(s),
                 (unsigned long long)want);
    cr_assert_eq(t_persist_result(a, 0, 2, &ha), 0, "%s", dstl_last_error());
    cr_assert_eq(t_persist_result(b, 0, 2, &hb), 0, "%s", dstl_last_error());
    cr_expect_eq(verify_with_meta(s, ha, 0, 7), (long)end_a - 1);
    cr_expect_eq(t_verify(s, hb, 2, 0, 8, 0, 7, 700), (long)end_b);
    cr_expect_eq(in_flight(s), 0, "durable: nothing charged, %llu", (unsigned long long)in_flight(s));
    dstl_handle_free(ha);
    dstl_handle_free(hb);
    dstl_writer_close(a);
    dstl_writer_close(b);
    cr_assert_eq(dstl_storage_close(s), 0);
    free((char *)kf);
}

Test(dstl_faults, a_built_batch_that_cannot_take_a_section_fails_and_is_retried) { built_batch_fails_then_retries("none", 0); }
Test(dstl_faults, a_built_batch_that_cannot_take_a_section_fails_and_is_retried_zstd_encrypted)
{
    built_batch_fails_then_retries("zstd", 1);
}
Test(dstl_faults, a_built_batch_that_cannot_take_a_section_fails_and_is_retried_lz4)
{
    built_batch_fails_then_retries("lz4", 0);
}

/* A failed persist's records count toward max-in-flight until sent again or truncated: what an
 * outage leaves behind applies backpressure (with nothing else in flight one hand-off still
 * goes, so the retries that free them can run). */
Test(dstl_faults, failed_records_count_toward_max_in_flight_until_truncated)
{
    dstl_config *c = t_config(dir, "dstl.io.engine", "psync", "dstl.batch.persist-delay", "300ms",
                              "dstl.upload.max-in-flight", "200kb", "dstl.backpressure", "fail", NULL);
    dstl_storage *s = NULL;
    storage_seams t = {.fault = fault};
    cr_assert_eq(storage_open_with_seams(c, &t, &s), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    dstl_writer *a, *b, *d;
    cr_assert_eq(dstl_writer_open(s, "a", 0, 7, &a), 0);
    cr_assert_eq(dstl_writer_open(s, "b", 0, 7, &b), 0);
    cr_assert_eq(dstl_writer_open(s, "d", 0, 7, &d), 0);
    uint64_t end = t_append_n(a, 1, 300, 0, 8, 1000);   /* ~150 KB of records */
    cr_assert_eq(ioeng_fault_add(fault, IOENG_OP_WRITE, ioeng_fault_seen(fault, IOENG_OP_WRITE) + 1, -ENOSPC), 0);
    dstl_handle *h = NULL;
    cr_assert_eq(t_persist_result(a, 0, 1, &h), -ENOSPC, "%s", dstl_last_error());
    uint64_t kept = pending_bytes(1, 0, end, 1000);
    cr_assert_eq(in_flight(s), kept);
    /* nothing else in flight: b goes (its batch stays open for persist-delay) */
    t_append_n(b, 2, 20, 0, 8, 1000);
    dstl_future *fb;
    cr_assert_eq(dstl_persist(b, 0, 1, &fb), 0, "%s", dstl_last_error());
    /* now a's kept records and b's hand-off leave no room for d's */
    t_append_n(d, 3, 20, 0, 8, 1000);
    dstl_future *fd = NULL;
    int rc = dstl_persist(d, 0, 1, &fd);
    cr_expect_eq(rc, -EAGAIN, "d was admitted beside %llu kept bytes: %d", (unsigned long long)kept, rc);
    cr_expect(strstr(dstl_last_error(), "dstl.upload.max-in-flight"), "%s", dstl_last_error());
    if (rc == 0) dstl_future_free(fd);
    cr_assert_eq(dstl_future_wait(fb, 20000), 0);
    dstl_future_free(fb);
    /* a truncate that drops a's failed records frees their room */
    cr_assert_eq(dstl_truncate(a, end), 0);
    cr_expect_eq(in_flight(s), 0, "%llu bytes still charged", (unsigned long long)in_flight(s));
    dstl_writer_close(a);
    dstl_writer_close(b);
    dstl_writer_close(d);
    cr_assert_eq(dstl_storage_close(s), 0);
}

static void fail_stop(int kind, const char *engine)
{
    dstl_storage *s = open_faulty(engine);
    dstl_writer *w = NULL;
    cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
    t_append_n(w, 2, 100, 0, 8, 300);
    dstl_handle *h1 = t_persist(w, 0, 1);
    t_append_n(w, 2, 100, 0, 8, 300);
    cr_assert_eq(ioeng_fault_add(fault, kind, ioeng_fault_seen(fault, kind) + 1, -EIO), 0);
    dstl_handle *h = NULL;
    cr_expect_eq(t_persist_result(w, 0, 2, &h), -EIO, "%s", dstl_last_error());
    /* fail-stop: no later persist writes anything, none pretends to succeed */
    t_append_n(w, 2, 10, 0, 8, 300);
    int rc = t_persist_result(w, 0, 3, &h);
    cr_expect_eq(rc, -EIO, "a persist after an fdatasync failure returned %d", rc);
    cr_expect(strstr(dstl_last_error(), "fail") != NULL, "%s", dstl_last_error());
    /* what was acknowledged before stays readable */
    cr_expect_eq(t_verify(s, h1, 2, 0, 8, 0, 7, 300), 100);
    dstl_handle_free(h1);
    dstl_writer_close(w);
    cr_assert_eq(dstl_storage_close(s), 0);
}

Test(dstl_faults, eio_on_fdatasync_makes_the_store_fail_stop) { fail_stop(IOENG_OP_FDATASYNC, "io_uring"); }
Test(dstl_faults, eio_on_fdatasync_makes_the_store_fail_stop_psync) { fail_stop(IOENG_OP_FDATASYNC, "psync"); }
Test(dstl_faults, eio_on_write_makes_the_store_fail_stop) { fail_stop(IOENG_OP_WRITE, "io_uring"); }
Test(dstl_faults, eio_on_write_makes_the_store_fail_stop_libaio) { fail_stop(IOENG_OP_WRITE, "libaio"); }

Test(dstl_faults, short_writes_are_completed_transparently)
{
    static const char *engines[] = {"io_uring", "libaio", "psync"};
    for (int e = 0; e < 3; e++) {
        dstl_storage *s = open_faulty(engines[e]);
        dstl_writer *w = NULL;
        cr_assert_eq(dstl_writer_open(s, "w", 0, 7, &w), 0);
        for (int round = 0; round < 4; round++) {
            unsigned next = ioeng_fault_seen(fault, IOENG_OP_WRITE) + 1;
            cr_assert_eq(ioeng_fault_add(fault, IOENG_OP_WRITE, next, IOENG_FAULT_SHORT), 0);
            t_append_n(w, 3, 300, 0, 8, 4000);
            dstl_handle *h = t_persist(w, 0, (uint64_t)round);
            cr_expect_eq(t_verify(s, h, 3, 0, 8, 0, 7, 4000), 300 * (round + 1));
            dstl_handle_free(h);
        }
        dstl_writer_close(w);
        cr_assert_eq(dstl_storage_close(s), 0);
    }
    cr_expect_geq(ioeng_fault_fired(fault), 12);
}

/*
 * dstl/pipeline/batch.c — a batch's life on the pipeline thread: encoded into one segment
 * (one section per writer range), its local copy written by the local store and its remote
 * copy uploaded from the same buffer, ended at the configured durability point (its ranges
 * become durable or failed, its futures take their pieces), reaped once both copies are done.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "dstl/clock.h"
#include "dstl/err.h"
#include "dstl/future.h"
#include "dstl/local/segstore.h"
#include "dstl/objcache.h"
#include "dstl/pipeline/pipeline_int.h"
#include "dstl/registry.h"
#include "dstl/remote/remote.h"
#include "dstl/storage.h"
#include "s3/s3.h"

/* The in-flight room a hand-off reserves beyond its records for its share of the segment it
 * lands in: the segment's header, trailer and footer fields and its section's index entry
 * with its key-group runs (about 25 bytes each: 4 KiB is ~150 runs). A segment that needs
 * more waits for the room like any hand-off (seg_alloc). */
#define SECTION_RESERVE_BYTES 4096u

uint64_t pipeline_enc_reserve(const dstl_storage *s, uint64_t rec_bytes)
{
    /* Re-framed records are never larger than their pending form (a varint seq gap and length,
     * at most 6 bytes below 2 M records and 2 MiB, against an 8-byte header and padding). */
    return rec_bytes + SECTION_RESERVE_BYTES + (s->conf.compression != CFG_COMP_NONE ? rec_bytes : 0);
}

/* Unlinks a truncated range from its writer's list once the pipeline is done with it. */
static void drop_truncated(dstl_storage *s, dstl_writer *w, range *r)
{
    range *prev = NULL;
    for (range *q = w->ranges; q && q != r; q = q->next) prev = q;
    if (prev) prev->next = r->next;
    else w->ranges = r->next;
    if (w->ranges_tail == r) w->ranges_tail = prev;
    if (r->state == RANGE_DURABLE) reg_section_release(&s->locked.reg, r->seg);
    range_drop(s, r);
}

void range_unaccount(dstl_storage *s, range *r)
{
    if (r->retained) {
        s->locked.pipe.in_flight_bytes -= r->retained;
        s->locked.pipe.retained_bytes -= r->retained;
        r->retained = 0;
        pthread_cond_broadcast(&s->room_cv);
    }
}

void range_free(range *r)
{
    free(r->retry_buf);
    range_spans_free(r);
    free(r->tally);
    oc_free(r);
}

void range_drop(dstl_storage *s, range *r)
{
    if (!r) return;
    range_unaccount(s, r);
    range_free(r);
}

void batch_free(batch *b)
{
    s3_md5_free(b->md5);
    wire_seg_abort(b->bld);
    if (b->bld_buf) pool_put(&b->loop->pool, b->bld_buf);
    if (b->counted_buf) {
        dstl_storage *s = b->s;
        pthread_mutex_lock(&s->mu);
        s->locked.pipe.in_flight_bytes -= b->counted_buf;
        pthread_cond_broadcast(&s->room_cv);
        pthread_mutex_unlock(&s->mu);
    }
    for (pipeline_section *x = b->head, *next; x; x = next) {
        next = x->next;
        free(x);
    }
    wire_index_free(b->ix);
    wire_segment_out_free(&b->out);
    keyring_unref(b->keys);
    free(b);
}

/* s->mu held.
 * DURABILITY: acknowledgements are released here. With res 0 the segment is on stable storage
 * at the configured level — local: written, fdatasync'ed and its directory entry fsync'ed
 * (on_written); remote: the upload acknowledged by S3 while the run's lease was valid
 * (batch_progress) — so every future waiting on its sections may complete. A crash before
 * this point leaves at most an unreferenced file or object that dstl gc removes; one after it
 * loses nothing a completed future points at. */
void batch_end(dstl_storage *s, batch *b, int res, const char *detail)
{
    run_segment *g = b->g;
    b->ended = 1;
    b->end_res = res;
    if (res == 0) {
        g->durable = 1;
        g->has_local = b->local_done && b->local_res == 0;
        g->has_remote = b->remote_done && b->remote_res == 0;
        s->locked.stats.segments++;
        s->locked.stats.segment_bytes += b->out.len;
    } else if (g) {
        /* Never durable, never referenced: forget it. Its file, if any is left (a fail-stop
         * store keeps what it has), is an orphan for dstl gc. */
        reg_forget(&s->locked.reg, g);
        g = b->g = NULL;
        if (res == -EIO) s->locked.store_err = res;
    }
    /* the records (unless encoding released them already); a reserve never encoded */
    s->locked.pipe.in_flight_bytes -= b->bytes - b->released + b->reserve;
    b->reserve = 0;
    if (b->pending_io == 0) {
        /* Both copies are done, so the encoded buffer is free too: release it with the records,
         * before any future sees its completion (a caller that waited for its persist finds the
         * room it left). An upload still running keeps it counted until batch_free. */
        s->locked.pipe.in_flight_bytes -= b->counted_buf;
        b->counted_buf = 0;
    }
    /* Every section takes its reference on the segment before any lets go of one: a section
     * truncated while in flight drops its reference at once, and were it first, the count
     * would reach zero — the segment queued for deletion — while later sections, and the
     * futures waiting on them, still need it. */
    for (pipeline_section *x = b->head; x; x = x->next) {
        range *r = x->r;
        future_prefetch(&x->waiters);   /* for the loop below */
        r->sec = NULL;
        if (res == 0) {
            r->state = RANGE_DURABLE;
            r->seg = g;
            r->sec_index = x->index;
            r->loc = b->out.secs[x->index];
            range_spans_free(r);       /* durable: reads go to the segment from now on */
            writer_tally_return(x->w, r);
            reg_section_add(g);
        } else {
            r->state = RANGE_FAILED;
            if (!r->truncated) batch_retain(s, b, x);
        }
    }
    for (pipeline_section *x = b->head; x; x = x->next) {
        range *r = x->r;
        dstl_writer *w = x->w;
        future_section_ended(&x->waiters, res, detail, g, x->index, res == 0 ? &r->loc : NULL);
        w->inflight_ranges--;
        if (r->truncated) drop_truncated(s, w, r);
    }
    pthread_cond_broadcast(&s->room_cv);
    pthread_cond_broadcast(&s->range_cv);
}

/* The durability point: local = the local copy is durable; remote = the object is complete
 * (the local copy, when it failed, is simply absent: readers go to the object store) and the
 * run's lease still valid then. */
void batch_progress(dstl_storage *s, batch *b)
{
    if (!b->ended) {
        int remote = s->loop.s3 != NULL, durable_remote = s->conf.durability == CFG_DURABILITY_REMOTE;
        int res = 0, decided = 0;
        const char *why = NULL;
        if (!durable_remote && b->local_done) {
            res = b->local_res;
            why = b->local_err;
            decided = 1;
        } else if (durable_remote && b->remote_done && (b->local_done || !remote)) {
            res = b->remote_res;
            why = b->remote_err;
            decided = 1;
            if (res == 0 && lease_check(b->loop, now_ns(), b->remote_err, sizeof b->remote_err) != 0)
                res = DSTL_EREMOTE;   /* fenced meanwhile: not acknowledged; batch_reap deletes the object */
        }
        if (decided) {
            char detail[1200];
            snprintf(detail, sizeof detail, "segment %s: %.1024s", b->g->name,
                     why && *why ? why : dstl_strerror(res));
            pthread_mutex_lock(&s->mu);
            batch_end(s, b, res, detail);
            pthread_mutex_unlock(&s->mu);
        }
    }
}

static void on_written(void *ctx, int res, const char *detail)
{
    batch *b = ctx;
    b->local_done = 1;
    b->local_res = res;
    if (res < 0) snprintf(b->local_err, sizeof b->local_err, "%s", detail && *detail ? detail : dstl_strerror(res));
    if (res == -EIO) {
        pthread_mutex_lock(&b->s->mu);
        if (!b->s->locked.store_err) snprintf(b->s->locked.store_err_msg, sizeof b->s->locked.store_err_msg, "%s", b->local_err);
        b->s->locked.store_err = res;
        pthread_mutex_unlock(&b->s->mu);
    }
    b->pending_io--;
    batch_progress(b->s, b);
}

static void on_uploaded(void *ctx, const s3_result *r)
{
    batch *b = ctx;
    dstl_storage *s = b->s;
    b->op = NULL;
    b->remote_done = 1;
    if (r->err == 0) {
        pthread_mutex_lock(&s->mu);
        histo_add(&s->locked.stats.upload_lat_us, (now_ns() - b->flushed_ns) / 1000);
        pthread_mutex_unlock(&s->mu);
    }
    /* One code for "the remote store failed after every attempt" (include/dstl.h); the detail keeps
     * the cause (refused, timed out, 503 SlowDown, cancelled at the bound, ...). */
    b->remote_res = r->err == 0 ? 0 : r->err == -ENOMEM ? -ENOMEM : DSTL_EREMOTE;
    pthread_mutex_lock(&s->mu);
    if (b->ended && b->end_res == 0) {
        b->g->uploading = 0;          /* ended earlier (durability local): the copy is in now */
        b->g->has_remote = r->err == 0;
    } else if (b->g) {
        b->g->uploading = 0;
    }
    pthread_mutex_unlock(&s->mu);
    if (r->err) {
        if (r->err == -ECANCELED)
            snprintf(b->remote_err, sizeof b->remote_err,
                     "upload s3://%s/%.300s gave up at the bound of dstl.upload.max-attempts x dstl.upload.timeout",
                     s->remote.bucket, b->key);
        else snprintf(b->remote_err, sizeof b->remote_err, "%s", r->error);
        pthread_mutex_lock(&s->mu);
        s->locked.stats.remote_failures++;
        pthread_mutex_unlock(&s->mu);
    }
    b->pending_io--;
    batch_progress(s, b);
}

static void on_orphan_deleted(void *ctx, const s3_result *r)
{
    (void)r;                  /* on failure the object stays as an orphan for dstl gc */
    free(ctx);
}

/* Frees batches whose copies are all done; a failed batch's copies are removed. */
void batch_reap(pipeline_loop *loop)
{
    dstl_storage *s = loop->s;
    for (batch **pp = &loop->inflight_list; *pp;) {
        batch *b = *pp;
        if (b->pending_io > 0 || !b->ended) {
            pp = &b->next_inflight;
            continue;
        }
        *pp = b->next_inflight;
        if (b->end_res != 0 && b->local_done && b->local_res == 0) {
            /* Never acknowledged: its local file is garbage now (the upload removes its own
             * leftovers); a crash before this unlink leaves an orphan for dstl gc. */
            segstore_unlink(s->store, b->name);
        }
        if (b->end_res == 0 && b->local_done && b->local_res != 0) {
            /* Durable in the object store, but the local write failed: whatever the file holds
             * is not to be trusted, so readers must not find it (they go to the object store). */
            segstore_unlink(s->store, b->name);
        }
        if (b->end_res != 0 && b->remote_done && b->remote_res == 0) {
            /* The local copy failed (durability local) but the object landed: nothing refers
             * to it; delete it now rather than leave it to dstl gc. */
            char *key = strdup(b->key);
            if (key && s3_delete_object(s->loop.s3, s->remote.bucket, key, NULL, on_orphan_deleted, key) < 0) free(key);
        }
        batch_free(b);
    }
}

/* The encoder's allocator for batch ctx's segment buffer: it trades the batch's encoding
 * reserves for the bytes the encoder asks for (the segment at most) under s->mu. When they
 * are more than the reserves and dstl.upload.max-in-flight has no room, and other segments
 * are being written (their end brings room), it refuses (NULL) and the flush waits, its need
 * (flush_need) going before any new hand-off; with nothing else being written it goes ahead
 * (it could never get room otherwise).
 * The charge is those bytes, not the buffer's capacity (an arena's 64 KiB blocks, a pooled
 * buffer up to a quarter larger): charged by capacity, a small segment flushed while nothing
 * else was being written went ahead past the bound by its rounding (up to 60 KiB), once the
 * queue had filled the room meanwhile (test_dstl_pipeline in_flight_bytes_never_pass_the_bound,
 * TSan build, about one run in four once large batches freed their records early). */
static void *seg_alloc(void *ctx, size_t len)
{
    batch *b = ctx;
    dstl_storage *s = b->s;
    pipeline_loop *loop = b->loop;
    size_t cap = 0;
    void *buf = pool_get(&loop->pool, len, &cap);
    if (!buf) return NULL;      /* out of memory: the count goes with the batch (batch_end) */
    pthread_mutex_lock(&s->mu);
    uint64_t extra = len > b->reserve ? len - b->reserve : 0;
    if (extra && s->locked.pipe.in_flight_bytes + extra > s->conf.max_in_flight_bytes && loop->inflight_list) {
        s->locked.pipe.flush_need = extra;
        b->deferred = 1;
        pthread_mutex_unlock(&s->mu);
        pool_put(&loop->pool, buf);
        return NULL;
    }
    s->locked.pipe.in_flight_bytes = s->locked.pipe.in_flight_bytes + len - b->reserve;
    b->reserve = 0;
    b->counted_buf = len;
    b->deferred = 0;
    s->locked.pipe.flush_need = 0;
    pthread_cond_broadcast(&s->room_cv);
    pthread_mutex_unlock(&s->mu);
    return buf;
}

static void seg_release(void *ctx, void *ptr)
{
    batch *b = ctx;
    pool_put(&b->loop->pool, ptr);
}

/* Whether the open batch's last flush waited for room and still has none (s->mu held). */
int batch_flush_waits(const pipeline_loop *loop)
{
    const dstl_storage *s = loop->s;
    return loop->open && loop->open->deferred && loop->inflight_list &&
           s->locked.pipe.in_flight_bytes + s->locked.pipe.flush_need > s->conf.max_in_flight_bytes;
}

/* The remote copy of b will not be made: the batch sees it as failed with code and why. */
void batch_remote_fail(batch *b, int code, const char *why)
{
    dstl_storage *s = b->s;
    pthread_mutex_lock(&s->mu);
    if (b->g) b->g->uploading = 0;       /* nothing may wait for an upload that never runs */
    pthread_mutex_unlock(&s->mu);
    b->await_lease = 0;
    b->remote_done = 1;
    b->remote_res = code;
    snprintf(b->remote_err, sizeof b->remote_err, "%.1000s", why);
    b->pending_io--;
}

void batch_upload_start(pipeline_loop *loop, batch *b)
{
    dstl_storage *s = loop->s;
    b->await_lease = 0;
    /* DURABILITY: with dstl.durability remote the batch ends when this upload is acknowledged
     * (PUT, or CompleteMultipartUpload for large segments: s3_upload) and the run's lease is
     * still valid then; a crash before leaves at most an incomplete upload or an unreferenced
     * object, which dstl gc removes once the run's lease is stale. */
    s3_upload_opts uo = {.part_size = s->conf.upload_part_size_bytes,
                         .multipart_threshold = s->conf.upload_multipart_threshold_bytes, .if_none_match = true,
                         .body_md5_etag = b->md5_etag[0] ? b->md5_etag : NULL};
    int rc = remote_key(&s->remote, b->g->name, b->key, sizeof b->key);
    if (rc == 0 && s->seams.fail_upload_start) rc = s->seams.fail_upload_start;
    if (rc == 0) rc = s3_upload(s->loop.s3, s->remote.bucket, b->key, b->out.buf, b->out.len, &uo, &b->op, on_uploaded, b);
    if (rc < 0) {
        char why[800];
        snprintf(why, sizeof why, "upload s3://%.63s/%.300s: %.100s", s->remote.bucket, b->key, dstl_strerror(rc));
        batch_remote_fail(b, rc, why);
    }
}

/* Small segments are padded (wire_seg_opts.pad_*) to the size of the recycled file reserved
 * for them when it is at most 8 KiB more, else to a multiple of 4 KiB, so that most land on a file of exactly their size
 * (segstore_recycle keeps small files' bytes): the write changes no file size, and its
 * fdatasync flushes the data without writing the inode. On this VM's ext4, write + fdatasync of
 * 3 KB: 7,150/s overwriting in place against 3,700/s after a truncate, 3,100/s into a new
 * file; 64 committers 39-61 K commits/s against 28-42 K unpadded (alternating pairs). At most
 * 8 KiB more per segment, and only below SEGMENT_PAD_LIMIT. */
#define SEGMENT_PAD_ALIGN 4096u
#define SEGMENT_PAD_LIMIT (64u << 10)

/* The open batch is encoded as its sections join once its records reach this many bytes
 * (batch_encode_open): a large segment's encode (2.65 ms of the pipeline thread for 12.7 MB
 * here) then happens while the batch fills, not between the segment written before it and its
 * own write. At w16 (bench_local load) the disk had no write 11.9 % of the time, 62 % of that
 * while the next segment was being encoded. Below it a batch is encoded at its flush in one
 * pass, sized exactly: group commit's small segments are flushed at once anyway. */
#define BUILD_MIN_BYTES (256u << 10)

/* Segment b's options: its number, the reserved file's size for padding, the allocator. */
static void seg_opts(dstl_storage *s, batch *b, wire_seg_opts *o)
{
    *o = (wire_seg_opts){.run_id = s->run_id, .segment_no = b->g->no, .created_ms = 0,
                         .compression = s->conf.compression, .alloc = seg_alloc, .release = seg_release,
                         .alloc_ctx = b, .pad_to = segstore_reserved_bytes(s->store, b->g->name),
                         .pad_align = SEGMENT_PAD_ALIGN, .pad_limit = SEGMENT_PAD_LIMIT};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    o->created_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Encryption: the key file's active key now (a rotated file is re-read here), and a fresh data
 * key (dk) for this segment only — a deferred flush encodes anew, so no data key ever seals two
 * segments. The key ring is kept in b->keys: a failed batch's ranges are rebuilt from the
 * segment under the same keys. */
static int seg_seal(dstl_storage *s, batch *b, wire_seg_opts *o, uint8_t dk[WIRE_KEY_LEN], wire_err *e)
{
    keyring *kr = key_source_get(&s->keys);
    keyring_unref(b->keys);
    b->keys = kr;
    if (!kr) return 0;
    o->seal_key = keyring_active(kr);
    o->seal_data_key = dk;
    if (RAND_bytes(dk, WIRE_KEY_LEN) != 1) {
        snprintf(e->msg, sizeof e->msg, "no random bytes for a data key (OpenSSL RAND_bytes failed)");
        return -EIO;
    }
    return 0;
}

/* Encodes the batch's sections into b->out in one pass (a batch below BUILD_MIN_BYTES). */
static int encode_segment(dstl_storage *s, batch *b, const wire_section_in *in, wire_err *e)
{
    wire_seg_opts o;
    seg_opts(s, b, &o);
    uint8_t dk[WIRE_KEY_LEN];
    int rc = seg_seal(s, b, &o, dk, e);
    if (rc == 0) rc = wire_segment_encode(&o, in, b->n, &b->out, e);
    if (rc == 0) b->g->sealed = b->keys != NULL;
    OPENSSL_cleanse(dk, sizeof dk);
    return rc;
}

static wire_section_in section_in(const pipeline_section *x)
{
    return (wire_section_in){x->w->id, x->r->seq_first, x->r->seq_end - x->r->seq_first,
                             x->r->spans, x->r->nspans, x->r->tally};
}

uint64_t section_due_ns(const dstl_storage *s, const pipeline_section *x)
{
    return x->t_enq_ns + s->conf.persist_delay_us * 1000 +
           (s->conf.upload_max_attempts * s->conf.upload_timeout_ms + REMOTE_SLACK_MS - REMOTE_ACT_EARLY_MS) *
               1000000ull;
}

/* Starts b's segment for encoding as its sections join: its number, a buffer, the header and
 * the seal. The buffer holds up to the size threshold and half again (what joins in the turn
 * that crosses it) or twice the sections there already, and at least half the threshold and
 * those sections: the lowest arena hole of that much is taken and grown through the free
 * blocks after it. Asked for the full size instead, a builder under the remote bench's load
 * (segments of 7.5 MB, many in flight) found no hole that large and took new memory above
 * them: zeroing it was 12 % of the pipeline thread's samples. */
static int builder_begin(pipeline_loop *loop, batch *b, wire_err *e)
{
    dstl_storage *s = loop->s;
    pthread_mutex_lock(&s->mu);
    if (!b->g) b->g = reg_new_segment(&s->locked.reg);
    pthread_mutex_unlock(&s->mu);
    if (!b->g) return -ENOMEM;
    uint64_t thr = s->conf.persist_size_threshold_bytes, want = thr + thr / 2, least = thr / 2;
    if (want < 2 * b->reserve) want = 2 * b->reserve;
    if (least < b->reserve + (64u << 10)) least = b->reserve + (64u << 10);
    if (least > want) least = want;
    if (s->seams.build_cap_bytes) want = least = s->seams.build_cap_bytes;
    size_t cap;
    uint8_t *buf = pool_get_upto(&loop->pool, least, want, &cap);
    if (!buf) return -ENOMEM;
    wire_seg_opts o;
    seg_opts(s, b, &o);
    o.pad_align = 0;            /* its length never passes its bound (the charge only falls) */
    uint8_t dk[WIRE_KEY_LEN];
    int rc = seg_seal(s, b, &o, dk, e);
    if (rc == 0) rc = wire_seg_begin(&o, buf, cap, &b->bld, e);
    OPENSSL_cleanse(dk, sizeof dk);
    if (rc < 0) {
        pool_put(&loop->pool, buf);
        b->bld = NULL;
        return rc;
    }
    b->bld_buf = buf;
    b->enc_link = &b->head;
    /* A server that checks writes by their MD5 ETag (RGW 16 with unsigned payloads) has the
     * client hash each body when its answer comes, 1.4 ms per MB here on this thread, on the
     * way to the acknowledgement; hashed as the sections go in, the bytes are still in cache
     * and the batch is still filling. */
    if (s->loop.s3 && s3_client_md5_checks(s->loop.s3)) b->md5 = s3_md5_new();
    return 0;
}

/* Hashes what b's segment holds final since the last call; a segment that will go up in
 * parts (its hash is of the parts') stops. */
static void md5_feed(dstl_storage *s, batch *b, const uint8_t *buf, uint64_t upto)
{
    if (!b->md5) return;
    if (upto >= s->conf.upload_multipart_threshold_bytes) {
        s3_md5_free(b->md5);
        b->md5 = NULL;
        return;
    }
    s3_md5_add(b->md5, buf + b->md5_at, upto - b->md5_at);
    b->md5_at = upto;
}

/* Sections [from, to) of b went into its segment: their encoding reserves become the bytes
 * the segment holds so far (its bound: the footer sized), and their records' chunks go.
 * Takes s->mu. Records, reserve and the new bytes change in one step, so the count falls:
 * a section's encoded bytes are at most its records' (re-framed smaller), and its footer
 * entry passes SECTION_RESERVE_BYTES only with more than ~150 key-group runs, which hold at
 * least as many records' headers; so a built segment never waits for room. Only records of
 * a few bytes each, every one in a key group of its own, could make the footer outweigh
 * them and their reserve.
 * A built segment counts its bytes, not the pages or arena blocks they round up to: its
 * charge never rises after its sections are in, so dstl.upload.max-in-flight stays a hard
 * bound (a flush cannot wait for room it was already given). */
static void builder_account(dstl_storage *s, batch *b, pipeline_section *from, pipeline_section *to)
{
    uint64_t bound = wire_seg_bound(b->bld);
    pthread_mutex_lock(&s->mu);
    s->locked.pipe.in_flight_bytes += bound - b->counted_buf;
    b->counted_buf = bound;
    for (pipeline_section *x = from; x != to; x = x->next) {
        s->locked.pipe.in_flight_bytes -= x->r->enc_reserve;
        b->reserve -= x->r->enc_reserve;
        batch_release_section(s, b, x);
    }
    pthread_cond_broadcast(&s->room_cv);
    pthread_mutex_unlock(&s->mu);
}

/* b's counts from its sections: ranges, records' bytes, the reserves of those not encoded,
 * the futures' bound. */
static void batch_recount(batch *b)
{
    b->n = 0;
    b->bytes = b->reserve = b->remote_deadline_ns = 0;
    for (pipeline_section *x = b->head; x; x = x->next) {
        b->n++;
        b->bytes += x->r->rec_bytes;
        if (!x->encoded) b->reserve += x->r->enc_reserve;
        uint64_t due = section_due_ns(b->s, x);
        if (!b->remote_deadline_ns || due < b->remote_deadline_ns) b->remote_deadline_ns = due;
    }
}

/* Cuts b before section x: x and those after it form a new batch, opened when b was (their
 * persist-delay runs from then) and closing as b would. NULL when out of memory. */
static batch *batch_split(batch *b, pipeline_section *x)
{
    batch *nb = calloc(1, sizeof *nb);
    if (!nb) return NULL;
    nb->s = b->s;
    nb->loop = b->loop;
    nb->opened_ns = b->opened_ns;
    nb->all_in = b->all_in;
    pipeline_section **pp = &b->head;
    while (*pp != x) pp = &(*pp)->next;
    *pp = NULL;
    nb->head = x;
    nb->tail = b->tail;
    b->tail = pp;
    batch_recount(b);
    batch_recount(nb);
    return nb;
}

void batch_fail_open(pipeline_loop *loop, int code, const char *why)
{
    dstl_storage *s = loop->s;
    batch *b = loop->open;
    loop->open = NULL;
    if (b->bld) {
        /* the sections encoded so far become a whole segment in memory: their ranges are
         * rebuilt from it (batch_retain), their chunks being gone */
        wire_err e = {{0}};
        wire_seg_builder *bl = b->bld;
        b->bld = NULL;
        if (wire_seg_sections(bl) == 0) wire_seg_abort(bl);
        else if (wire_seg_finish(bl, &b->out, &e) == 0) b->bld_buf = NULL;    /* b->out's now */
    }
    pthread_mutex_lock(&s->mu);
    s->locked.pipe.q_waiting -= b->n;
    if (b->deferred) s->locked.pipe.flush_need = 0;
    batch_end(s, b, code, why);
    pthread_mutex_unlock(&s->mu);
    batch_free(b);
}

void batch_encode_open(pipeline_loop *loop)
{
    batch *b = loop->open;
    while (b && !b->deferred && !b->no_bld) {
        wire_err e = {{0}};
        int rc = 0;
        if (!b->bld) {
            if (b->bytes < BUILD_MIN_BYTES) return;
            if (builder_begin(loop, b, &e) < 0) {
                b->no_bld = 1;          /* the flush encodes it in one pass, and says why it cannot */
                return;
            }
        }
        pipeline_section *from = *b->enc_link, *x;
        for (; (x = *b->enc_link) != NULL; b->enc_link = &x->next) {
            wire_section_in in = section_in(x);
            x->index = (uint32_t)wire_seg_sections(b->bld);
            if (loop->s->seams.fail_build_add && ++loop->build_adds == loop->s->seams.fail_build_add) {
                rc = -ENOMEM;
                snprintf(e.msg, sizeof e.msg, "segment encode: out of memory (injected)");
                break;
            }
            if ((rc = wire_seg_add(b->bld, &in, &e)) < 0) break;
        }
        if (from != x) {
            builder_account(loop->s, b, from, x);
            md5_feed(loop->s, b, b->bld_buf, wire_seg_written(b->bld));
        }
        if (rc == 0) return;
        if (rc == -ENOSPC && wire_seg_sections(b->bld) == 0) {
            /* not even its first section fits the buffer: encoded in one pass at the flush */
            wire_seg_abort(b->bld);
            b->bld = NULL;
            pool_put(&loop->pool, b->bld_buf);
            b->bld_buf = NULL;
            b->enc_link = NULL;
            b->no_bld = 1;
            return;
        }
        batch *nb = rc == -ENOSPC ? batch_split(b, x) : NULL;
        if (!nb) {
            char why[700];
            snprintf(why, sizeof why, "segment %s: %.600s", b->g->name,
                     rc == -ENOSPC ? "out of memory splitting a full batch" : e.msg);
            batch_fail_open(loop, rc == -ENOSPC ? -ENOMEM : rc, why);
            return;
        }
        /* b is full: it goes now, and the sections from x on open the next batch */
        batch_flush(loop);
        loop->open = b = nb;
    }
}

/* Finishes b's built segment: its footer and trailer; the buffer keeps only the blocks it
 * holds, and the charge becomes the segment's length (at most its bound: unpadded). */
static int finish_built(pipeline_loop *loop, batch *b, wire_err *e)
{
    dstl_storage *s = loop->s;
    if (*b->enc_link) {
        snprintf(e->msg, sizeof e->msg, "a section of the batch was not encoded (a bug)");
        return -EINVAL;
    }
    wire_seg_builder *bl = b->bld;
    b->bld = NULL;
    int rc = wire_seg_finish(bl, &b->out, e);
    if (rc < 0) return rc;      /* the buffer stays b->bld_buf: batch_free gives it back */
    b->bld_buf = NULL;
    pool_shrink(&loop->pool, b->out.buf, b->out.len);
    size_t counted = b->out.len;
    pthread_mutex_lock(&s->mu);
    s->locked.pipe.in_flight_bytes = s->locked.pipe.in_flight_bytes + counted - b->counted_buf - b->reserve;
    b->reserve = 0;
    b->counted_buf = counted;
    pthread_cond_broadcast(&s->room_cv);
    pthread_mutex_unlock(&s->mu);
    b->g->sealed = b->keys != NULL;
    md5_feed(s, b, b->out.buf, b->out.len);
    if (b->md5) {
        s3_md5_end(b->md5, b->md5_etag);
        b->md5 = NULL;
        if (s->seams.spoil_build_md5 && b->md5_etag[1]) b->md5_etag[1] = b->md5_etag[1] == '0' ? '1' : '0';
    }
    return 0;
}

void batch_flush(pipeline_loop *loop)
{
    dstl_storage *s = loop->s;
    batch *b = loop->open;
    loop->open = NULL;

    wire_section_in *in = b->bld ? NULL : calloc(b->n, sizeof *in);
    pthread_mutex_lock(&s->mu);
    if (!b->g) b->g = reg_new_segment(&s->locked.reg);
    /* dstl.batch.close-when-all-in: the next batch counts its own writers (a count carried
     * over would close it on writers whose persists went into this one) */
    if (!b->all_in && b->n) {
        s->locked.pipe.persist_epoch++;
        s->locked.pipe.epoch_writers = 0;
    }
    pthread_mutex_unlock(&s->mu);
    if ((!in && !b->bld) || !b->g) {
        free(in);
        pthread_mutex_lock(&s->mu);
        s->locked.pipe.q_waiting -= b->n;
        batch_end(s, b, -ENOMEM, "out of memory building a segment");
        pthread_mutex_unlock(&s->mu);
        batch_free(b);
        return;
    }
    /* A range's fields are fixed while it is in flight: the writer only reads them. */
    uint32_t i = 0;
    for (pipeline_section *x = in ? b->head : NULL; x; x = x->next, i++) {
        x->index = i;
        in[i] = section_in(x);
    }
    wire_err e = {{0}};
    int rc = in ? encode_segment(s, b, in, &e) : finish_built(loop, b, &e);
    free(in);
    if (rc < 0 && b->deferred) {
        loop->open = b;                 /* waits for room; more ranges may join it meanwhile */
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->locked.pipe.q_waiting -= b->n;             /* written now (or failed): no longer waiting for a batch */
    /* The encoded copy counts against dstl.upload.max-in-flight (seg_alloc) instead of the
     * records it came from, whose chunks go now (a failed batch rebuilds them: retain.c): the
     * bound is on memory, so peak RSS stays near max-in-flight whatever the load. */
    if (rc == 0) batch_release_records(s, b);
    pthread_mutex_unlock(&s->mu);
    if (rc == 0) {
        b->g->size = b->out.len;
        b->g->footer_offset = b->out.footer_offset;
        b->g->footer_len = b->out.footer_len;
        b->g->footer_crc = b->out.footer_crc;
        snprintf(b->name, sizeof b->name, "%s", b->g->name);
        b->flushed_ns = now_ns();
        pthread_mutex_lock(&s->mu);
        histo_add(&s->locked.stats.batch_writers, b->n);
        histo_add(&s->locked.stats.segment_size, b->out.len);
        pthread_mutex_unlock(&s->mu);
        b->g->uploading = s->loop.s3 != NULL;
        b->next_inflight = loop->inflight_list;
        loop->inflight_list = b;
        b->pending_io = 1 + (s->loop.s3 != NULL);
        /* DURABILITY: nothing is durable yet; on_written runs once the store has written,
         * fdatasync'ed and directory-synced the segment (segstore.h). */
        rc = segstore_write(s->store, b->g->name, b->out.buf, b->out.len, on_written, b);
        if (rc < 0) {
            b->local_done = 1;
            b->local_res = rc;
            snprintf(b->local_err, sizeof b->local_err, "%s", dstl_last_error());
            b->pending_io--;
        }
        if (s->loop.s3) {
            char why[600];
            int lrc = lease_check(loop, now_ns(), why, sizeof why);
            if (lrc == -EAGAIN) {
                /* The run's lease is not written yet: the first upload waits for it. */
                b->await_lease = 1;
                lease_start(loop);
            } else if (lrc < 0) {
                batch_remote_fail(b, DSTL_EREMOTE, why);
                loop->lease.next_ns = 0;          /* try a refresh at once */
            } else {
                batch_upload_start(loop, b);
            }
        }
        batch_progress(s, b);
        return;
    }
    char why[600];
    snprintf(why, sizeof why, "segment %s: %s", b->g->name, e.msg);
    pthread_mutex_lock(&s->mu);
    batch_end(s, b, rc, why);
    pthread_mutex_unlock(&s->mu);
    batch_free(b);
}

/*
 * dstl/pipeline.c — the shared pipeline: one thread, one event loop, every writer's ranges
 * grouped into segments.
 *
 * Writer threads queue ranges (pipeline_enqueue, under s->mu) and kick an eventfd. The loop
 * waits on that eventfd and on the local store's completion fd, with the batch deadline as
 * its timeout. It moves queued ranges into the open batch and flushes the batch:
 *   - persist-delay > 0: when the first range in it is persist-delay old;
 *   - persist-delay = 0: leader/follower group commit — at once when no batch is being
 *     written, else as soon as the batch in flight completes; whatever arrives meanwhile
 *     rides along in the next one, so light load costs one write + fdatasync and heavy load
 *     amortizes it over many persists;
 *   - always: when it holds persist-size-threshold bytes, or the storage is closing.
 * A flush encodes the batch into one segment (wire_segment_encode, one section per range)
 * and hands it to the local store; several segments may be in flight at once (bounded by
 * dstl.upload.max-in-flight, enforced on the writer side).
 *
 * Completion (segstore callback, on this thread): every range of the batch becomes durable
 * (or failed: its records stay in the writer for the next persist), and every future waiting
 * on it takes its piece. Completions thus never run inside a writer's submit path.
 *
 * Deleting unreferenced segments also happens here, off the writer threads.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "dstl/clock.h"
#include "dstl/err.h"
#include "dstl/future.h"
#include "dstl/handle.h"
#include "dstl/local/segstore.h"
#include "dstl/metrics.h"
#include "dstl/pipeline.h"
#include "dstl/registry.h"
#include "dstl/remote/remote.h"
#include "dstl/storage.h"
#include "s3/s3.h"

/* Names reserved ahead of the segment being built, so a flush does not wait for a
 * directory fsync. Reservations are made in groups (one shared directory fsync per group)
 * when fewer than RESERVE_LOW are left, up to RESERVE_HIGH: one reservation per flush would
 * put a directory fsync next to every segment's fdatasync. 32 is a few seconds of segments
 * at a 10 ms persist-delay and leaves at most 32 empty files after a crash. */
#define RESERVE_LOW 8u
/* The future's bound (include/dstl.h): persist-delay + max-attempts x upload.timeout + this,
 * from the hand-off. A batch whose upload still runs then is cancelled and fails (its records
 * stay in the writers); one not yet written then fails unwritten. One second covers a slow
 * last response and the loop's turns. */
#define REMOTE_SLACK_MS 1000u
/* The pipeline acts that much before the bound (cancels the upload, fails the batch), so the
 * failure reaches the futures inside it: the cancel's callback comes on the next turn of the
 * loop, and the loop wakes at the deadline itself (not on a coarser tick). */
#define REMOTE_ACT_EARLY_MS 300u
/* With persist-delay 0, a batch flushes while fewer than this many segments are being
 * written: 1 is the leader/follower group commit. Measured here (64 committers, ext4 on a
 * 2-core VM): 1 gives ~29,700 commits/s, 2 ~27,500, 3 ~24,000 — overlapping fdatasyncs on
 * different files only split the groups. */
#define GROUP_COMMIT_DEPTH 1u

/* dstl.metrics.file is rewritten this often: Prometheus scrapes every 10-60 s typically. */
#define METRICS_INTERVAL_NS 1000000000ull
#define RESERVE_HIGH 32u

/* A batch lives from its first range until both of its copies are done: the local write
 * (always: it is the local-recovery copy and the read cache) and the upload (when a remote is
 * configured). It *ends* — its ranges become durable or failed, its futures take their
 * pieces — at the configured durability point, which may come before the other copy is done. */
typedef struct batch {
    dstl_storage *s;
    struct batch *next_inflight;
    pipeline_section *head, **tail;
    size_t n;
    uint64_t bytes;
    uint64_t opened_ns;
    run_segment *g;
    wire_segment_out out;
    int pending_io;             /* copies still being written */
    int local_done, remote_done;
    int local_res, remote_res;
    int ended, end_res;
    uint64_t remote_deadline_ns;  /* the bound of its earliest range's futures (a remote) */
    uint64_t flushed_ns;
    struct s3_op *op;           /* the upload, while it runs */
    char name[64];              /* the segment's name (the seg may be gone when it failed) */
    uint64_t reserve;           /* its ranges' encoding reserves, still charged (until encoded) */
    size_t counted_buf;         /* bytes of the encoded buffer counted in s->locked.pipe.in_flight_bytes */
    struct loop_state *ls;      /* the pipeline's (the segment buffer comes from its pool) */
    int deferred;               /* the last flush waited for room (flush_need is its need) */
    int await_lease;            /* its upload waits for the run's first lease */
    char key[640];
    char local_err[512], remote_err[1024];
} batch;

/* Segment buffers are reused: a fresh page costs a fault (microseconds on a VM), which for a
 * 10 MiB segment costs more than encoding it. Each buffer keeps its capacity in a header; new
 * ones are sized to the page, and a pooled one is reused only when it is at most a quarter
 * larger than asked: every byte of a buffer counts against dstl.upload.max-in-flight while it
 * holds a segment, so a large buffer must not carry a small one. The pool keeps at most
 * POOL_MAX_BYTES idle (about one segment at the default persist-size-threshold; outside the
 * bound, inside the 64 MiB of RSS the design allows beyond it). Pipeline thread only. */
#define POOL_PAGE 4096u
#define POOL_MAX_BYTES (16u << 20)
/* The in-flight room a hand-off reserves beyond its records for its share of the segment it
 * lands in: the segment's header, trailer and footer fields and its section's index entry
 * with its key-group runs (about 25 bytes each: 4 KiB is ~150 runs). A segment that needs
 * more waits for the room like any hand-off (seg_alloc). */
#define SECTION_RESERVE_BYTES 4096u

typedef struct pbuf {
    struct pbuf *next;
    size_t cap;
    max_align_t align_[2];      /* keeps the data after the header aligned */
} pbuf;

typedef struct {
    pbuf *free_list;
    size_t idle_bytes;
} buf_pool;

/* The smallest pooled buffer of len bytes or more, when it is at most a quarter larger. */
static pbuf *pool_take(buf_pool *p, size_t len)
{
    pbuf **best = NULL;
    for (pbuf **pp = &p->free_list; *pp; pp = &(*pp)->next)
        if ((*pp)->cap >= len && (*pp)->cap - len <= len / 4 + POOL_PAGE && (!best || (*pp)->cap < (*best)->cap))
            best = pp;
    if (!best) return NULL;
    pbuf *b = *best;
    *best = b->next;
    p->idle_bytes -= b->cap;
    return b;
}

static void pool_put(buf_pool *p, void *ptr)
{
    if (!ptr) return;
    pbuf *b = (pbuf *)ptr - 1;
    if (p->idle_bytes + b->cap > POOL_MAX_BYTES) {
        free(b);
        return;
    }
    b->next = p->free_list;
    p->free_list = b;
    p->idle_bytes += b->cap;
}

static void pool_free(buf_pool *p)
{
    for (pbuf *b = p->free_list, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    p->free_list = NULL;
    p->idle_bytes = 0;
}

/* The run's lease object (dstl/README.md), pipeline thread only. Times are monotonic: the
 * holder judges its own lease by how long ago its last successful write was *sent*. */
typedef struct {
    struct s3_op *op;           /* a write in flight */
    uint64_t sent_ns;           /* when it was sent */
    uint64_t ok_ns;             /* when the last successful one was sent (0: never) */
    uint64_t next_ns;           /* the next refresh */
    int lapsed;                 /* older than lease-timeout once: fenced for good */
    int cancelled;              /* op was cancelled: its callback is still to come */
    char body[256];
    size_t len;
    char err[512];              /* the last failure */
} lease_state;

/* A failed lease write is tried again after a quarter of lease-refresh, at least this. */
#define LEASE_RETRY_MIN_NS 100000000ull

typedef struct loop_state {
    dstl_storage *s;
    buf_pool pool;
    lease_state lease;
    batch *open;
    batch *inflight_list;       /* flushed, some copy still being written */
    uint64_t reserved_upto;     /* segment numbers below this are reserved or used */
} loop_state;



void pipeline_wake(dstl_storage *s)
{
    uint64_t one = 1;
    ssize_t n = write(s->wake_fd, &one, sizeof one);
    (void)n;                    /* EAGAIN: the counter is already non-zero, the loop will run */
}

int pipeline_enqueue(dstl_storage *s, dstl_writer *w, range *r)
{
    pipeline_section *b = calloc(1, sizeof *b);
    if (!b) return err_fail(-ENOMEM, "writer %s: out of memory", w->id);
    b->w = w;
    b->r = r;
    r->state = RANGE_INFLIGHT;
    r->sec = b;
    w->inflight_ranges++;
    r->enc_reserve = pipeline_enc_reserve(s, r->rec_bytes);
    b->t_enq_ns = now_ns();
    *s->locked.pipe.q_tail = b;
    s->locked.pipe.q_tail = &b->next;
    s->locked.pipe.q_len++;
    s->locked.pipe.q_waiting++;
    return 0;
}

uint64_t pipeline_enc_reserve(const dstl_storage *s, uint64_t rec_bytes)
{
    /* Re-framed records are never larger than their pending form (a varint seq gap and length,
     * at most 6 bytes below 2 M records and 2 MiB, against an 8-byte header and padding). */
    return rec_bytes + SECTION_RESERVE_BYTES + (s->conf.compression != CFG_COMP_NONE ? rec_bytes : 0);
}

/* ---- completion ---- */

/* Unlinks a truncated range from its writer's list once the pipeline is done with it. */
static void drop_truncated(dstl_storage *s, dstl_writer *w, range *r)
{
    range *prev = NULL;
    for (range *q = w->ranges; q && q != r; q = q->next) prev = q;
    if (prev) prev->next = r->next;
    else w->ranges = r->next;
    if (w->ranges_tail == r) w->ranges_tail = prev;
    if (r->state == RANGE_DURABLE) reg_section_release(&s->locked.reg, r->seg);
    range_free(r);
}

void range_free(range *r)
{
    if (!r) return;
    free(r->spans);
    free(r);
}

static void batch_free(batch *b)
{
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
    wire_segment_out_free(&b->out);
    free(b);
}

/* Ends a batch: res 0 = its segment is durable. s->mu held.
 * DURABILITY: acknowledgements are released here. With res 0 the segment is on stable storage
 * at the configured level — local: written, fdatasync'ed and its directory entry fsync'ed
 * (on_written); remote: the upload acknowledged by S3 while the run's lease was valid
 * (batch_progress) — so every future waiting on its sections may complete. A crash before
 * this point leaves at most an unreferenced file or object that dstl gc removes; one after it
 * loses nothing a completed future points at. */
static void batch_end(dstl_storage *s, batch *b, int res, const char *detail)
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
    s->locked.pipe.in_flight_bytes -= b->bytes + b->reserve;    /* records; a reserve never encoded */
    b->reserve = 0;
    if (b->pending_io == 0) {
        /* Both copies are done, so the encoded buffer is free too: release it with the records,
         * before any future sees its completion (a caller that waited for its persist finds the
         * room it left). An upload still running keeps it counted until batch_free. */
        s->locked.pipe.in_flight_bytes -= b->counted_buf;
        b->counted_buf = 0;
    }
    for (pipeline_section *x = b->head; x; x = x->next) {
        range *r = x->r;
        dstl_writer *w = x->w;
        r->sec = NULL;
        if (res == 0) {
            r->state = RANGE_DURABLE;
            r->seg = g;
            r->sec_index = x->index;
            r->loc = b->out.secs[x->index];
            free(r->spans);            /* durable: reads go to the segment from now on */
            r->spans = NULL;
            r->nspans = 0;
            reg_section_add(g);
        } else {
            r->state = RANGE_FAILED;
        }
        future_section_ended(&x->waiters, res, detail, g, x->index, res == 0 ? &r->loc : NULL);
        w->inflight_ranges--;
        if (r->truncated) drop_truncated(s, w, r);
    }
    pthread_cond_broadcast(&s->room_cv);
    pthread_cond_broadcast(&s->range_cv);
}

/* The durability point: local = the local copy is durable; remote = the object is complete
 * (the local copy, when it failed, is simply absent: readers go to the object store). */
static int lease_check(struct loop_state *ls, uint64_t now, char *why, size_t cap);

static void batch_progress(dstl_storage *s, batch *b)
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
            if (res == 0 && lease_check(b->ls, now_ns(), b->remote_err, sizeof b->remote_err) != 0)
                res = DSTL_EREMOTE;   /* fenced meanwhile: not acknowledged; reap_batches deletes the object */
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
static void reap_batches(loop_state *ls)
{
    dstl_storage *s = ls->s;
    for (batch **pp = &ls->inflight_list; *pp;) {
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

/* ---- flush ---- */

/* The encoder's allocator for batch ctx's segment buffer: it trades the batch's encoding
 * reserves for the buffer's real size under s->mu. When the buffer needs more room than the
 * reserves and dstl.upload.max-in-flight has none, and other segments are being written
 * (their end brings room), it refuses (NULL) and the flush waits, its need (flush_need)
 * going before any new hand-off; with nothing else being written it goes ahead (it could
 * never get room otherwise). */
static void *seg_alloc(void *ctx, size_t len)
{
    batch *b = ctx;
    dstl_storage *s = b->s;
    loop_state *ls = b->ls;
    pbuf *buf = pool_take(&ls->pool, len);
    size_t cap = buf ? buf->cap : (len + POOL_PAGE - 1) / POOL_PAGE * POOL_PAGE;
    pthread_mutex_lock(&s->mu);
    uint64_t extra = cap > b->reserve ? cap - b->reserve : 0;
    if (extra && s->locked.pipe.in_flight_bytes + extra > s->conf.max_in_flight_bytes && ls->inflight_list) {
        s->locked.pipe.flush_need = extra;
        b->deferred = 1;
        pthread_mutex_unlock(&s->mu);
        pool_put(&ls->pool, buf ? buf + 1 : NULL);
        return NULL;
    }
    s->locked.pipe.in_flight_bytes = s->locked.pipe.in_flight_bytes + cap - b->reserve;
    b->reserve = 0;
    b->counted_buf = cap;
    b->deferred = 0;
    s->locked.pipe.flush_need = 0;
    pthread_cond_broadcast(&s->room_cv);
    pthread_mutex_unlock(&s->mu);
    if (!buf && (buf = malloc(sizeof *buf + cap))) buf->cap = cap;
    return buf ? buf + 1 : NULL;   /* out of memory: the count goes with the batch (batch_end) */
}

static void seg_release(void *ctx, void *ptr)
{
    batch *b = ctx;
    pool_put(&b->ls->pool, ptr);
}

/* Whether the open batch's last flush waited for room and still has none (s->mu held). */
static int flush_waits(const loop_state *ls)
{
    const dstl_storage *s = ls->s;
    return ls->open && ls->open->deferred && ls->inflight_list &&
           s->locked.pipe.in_flight_bytes + s->locked.pipe.flush_need > s->conf.max_in_flight_bytes;
}

/* The remote copy of b will not be made: the batch sees it as failed with code and why. */
static void remote_fail(batch *b, int code, const char *why)
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

static void upload_start(loop_state *ls, batch *b)
{
    dstl_storage *s = ls->s;
    b->await_lease = 0;
    /* DURABILITY: with dstl.durability remote the batch ends when this upload is acknowledged
     * (PUT, or CompleteMultipartUpload for large segments: s3_upload) and the run's lease is
     * still valid then; a crash before leaves at most an incomplete upload or an unreferenced
     * object, which dstl gc removes once the run's lease is stale. */
    s3_upload_opts uo = {.part_size = s->conf.upload_part_size_bytes,
                         .multipart_threshold = s->conf.upload_multipart_threshold_bytes, .if_none_match = true};
    int rc = remote_key(&s->remote, b->g->name, b->key, sizeof b->key);
    if (rc == 0 && s->seams.fail_upload_start) rc = s->seams.fail_upload_start;
    if (rc == 0) rc = s3_upload(s->loop.s3, s->remote.bucket, b->key, b->out.buf, b->out.len, &uo, &b->op, on_uploaded, b);
    if (rc < 0) {
        char why[800];
        snprintf(why, sizeof why, "upload s3://%.63s/%.300s: %.100s", s->remote.bucket, b->key, dstl_strerror(rc));
        remote_fail(b, rc, why);
    }
}

/* ---- the run's lease (dstl/README.md: who may delete what) ---- */

/* Whether uploads of this run may be acknowledged at now: 0; -EAGAIN when the lease was
 * never written yet; DSTL_EREMOTE with why when the run is fenced: its last successful
 * refresh is older than lease-timeout - 2 x lease-refresh, so a gc elsewhere may soon (after
 * lease-timeout) take the run for dead; past lease-timeout it stays fenced for good (such a
 * gc may have deleted objects this run still uses: reopen the storage). */
static int lease_check(struct loop_state *ls, uint64_t now, char *why, size_t cap)
{
    dstl_storage *s = ls->s;
    lease_state *l = &ls->lease;
    if (!l->ok_ns) return -EAGAIN;
    uint64_t age_ms = (now - l->ok_ns) / 1000000, t = s->conf.lease_timeout_ms, r = s->conf.lease_refresh_ms;
    if (age_ms > t) l->lapsed = 1;
    if (!l->lapsed && age_ms <= t - 2 * r) return 0;
    snprintf(why, cap, "the run's lease s3://%.63s/%.300s was last refreshed %llu ms ago (%s%.200s): %s", s->remote.bucket,
             s->loop.lease_key, (unsigned long long)age_ms, l->err[0] ? "last attempt: " : "", l->err,
             l->lapsed ? "past dstl.remote.lease-timeout another machine's gc may have taken this run for dead; "
                         "persists stay fenced: reopen the storage"
                       : "persists are fenced until a refresh succeeds (dstl.remote.lease-timeout - 2 x "
                         "dstl.remote.lease-refresh)");
    return DSTL_EREMOTE;
}

static void on_lease_put(void *ctx, const s3_result *r)
{
    loop_state *ls = ctx;
    dstl_storage *s = ls->s;
    lease_state *l = &ls->lease;
    l->op = NULL;
    l->cancelled = 0;
    uint64_t now = now_ns();
    if (r->err == 0) {
        /* A write sent after the last one had gone stale comes too late: gc elsewhere may
         * have taken the run for dead meanwhile (fenced for good: lease_check). */
        if (l->ok_ns && (l->sent_ns - l->ok_ns) / 1000000 > s->conf.lease_timeout_ms) l->lapsed = 1;
        /* Valid from when it was sent: the server's LastModified can only be later. */
        l->ok_ns = l->sent_ns;
        l->err[0] = '\0';
        l->next_ns = l->sent_ns + s->conf.lease_refresh_ms * 1000000ull;
    } else {
        snprintf(l->err, sizeof l->err, "%.500s", r->error);
        uint64_t retry = s->conf.lease_refresh_ms / 4 * 1000000ull;
        l->next_ns = now + (retry < LEASE_RETRY_MIN_NS ? LEASE_RETRY_MIN_NS : retry);
    }
    /* The batches that waited for the first lease: their uploads go now, or fail. */
    for (batch *b = ls->inflight_list; b; b = b->next_inflight) {
        if (!b->await_lease) continue;
        if (r->err == 0) {
            upload_start(ls, b);
        } else {
            char why[900];
            snprintf(why, sizeof why, "the run's lease s3://%.63s/%.300s could not be written: %.400s",
                     s->remote.bucket, s->loop.lease_key, r->error);
            remote_fail(b, DSTL_EREMOTE, why);
        }
        batch_progress(s, b);
    }
}

/* Writes (or rewrites) the run's lease object, unless a write is under way. */
static void lease_start(loop_state *ls)
{
    dstl_storage *s = ls->s;
    lease_state *l = &ls->lease;
    if (l->op) return;
    if (!s->loop.lease_key[0]) {
        if (remote_lease_key(&s->remote, s->run_id, s->conf.lease_timeout_ms, s->loop.lease_key, sizeof s->loop.lease_key) < 0) {
            snprintf(l->err, sizeof l->err, "lease key under s3://%.63s/%.300s: too long", s->remote.bucket,
                     s->remote.prefix);
            s->loop.lease_key[0] = '\0';
            return;
        }
        char host[128] = "";
        gethostname(host, sizeof host - 1);
        int n = snprintf(l->body, sizeof l->body, "dstl lease\nrun %s\nhost %.100s\npid %ld\nrefresh_ms %llu\n"
                         "timeout_ms %llu\n", s->run_id, host, (long)getpid(),
                         (unsigned long long)s->conf.lease_refresh_ms, (unsigned long long)s->conf.lease_timeout_ms);
        l->len = n > 0 && (size_t)n < sizeof l->body ? (size_t)n : 0;
    }
    l->sent_ns = now_ns();
    s->loop.lease_tried = 1;
    int rc = s3_put_object(s->loop.s3, s->remote.bucket, s->loop.lease_key, l->body, l->len, false, &l->op, on_lease_put, ls);
    if (rc < 0) {
        s3_result r = {.err = rc};
        snprintf(r.error, sizeof r.error, "PUT s3://%.63s/%.300s could not start: %.100s", s->remote.bucket,
                 s->loop.lease_key, dstl_strerror(rc));
        on_lease_put(ls, &r);
    }
}

/* Encodes the open batch into a segment and starts its copies; or, when its buffer must wait
 * for in-flight room (seg_alloc), leaves it open to try again on a later turn. */
static void flush(loop_state *ls)
{
    dstl_storage *s = ls->s;
    batch *b = ls->open;
    ls->open = NULL;

    wire_section_in *in = calloc(b->n, sizeof *in);
    pthread_mutex_lock(&s->mu);
    if (!b->g) b->g = reg_new_segment(&s->locked.reg);
    pthread_mutex_unlock(&s->mu);
    if (!in || !b->g) {
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
    for (pipeline_section *x = b->head; x; x = x->next, i++) {
        x->index = i;
        in[i] = (wire_section_in){x->w->id, x->r->seq_first, x->r->seq_end - x->r->seq_first,
                                  x->r->spans, x->r->nspans};
    }
    wire_seg_opts o = {.run_id = s->run_id, .segment_no = b->g->no, .created_ms = 0,
                       .compression = s->conf.compression, .alloc = seg_alloc, .release = seg_release,
                       .alloc_ctx = b};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    o.created_ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
    wire_err e = {{0}};
    int rc = wire_segment_encode(&o, in, b->n, &b->out, &e);
    free(in);
    if (rc < 0 && b->deferred) {
        ls->open = b;                 /* waits for room; more ranges may join it meanwhile */
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->locked.pipe.q_waiting -= b->n;             /* written now (or failed): no longer waiting for a batch */
    pthread_mutex_unlock(&s->mu);
    if (rc == 0) {
        /* The encoded copy now counts against dstl.upload.max-in-flight (seg_alloc) as well
         * as the records it came from (they stay in the writers until durable, for a retry):
         * the bound is on memory, so peak RSS stays near max-in-flight whatever the load. */
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
        b->next_inflight = ls->inflight_list;
        ls->inflight_list = b;
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
            int lrc = lease_check(ls, now_ns(), why, sizeof why);
            if (lrc == -EAGAIN) {
                /* The run's lease is not written yet: the first upload waits for it. */
                b->await_lease = 1;
                lease_start(ls);
            } else if (lrc < 0) {
                remote_fail(b, DSTL_EREMOTE, why);
                ls->lease.next_ns = 0;          /* try a refresh at once */
            } else {
                upload_start(ls, b);
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

static void reserve_ahead(loop_state *ls)
{
    dstl_storage *s = ls->s;
    pthread_mutex_lock(&s->mu);
    uint64_t next = s->locked.reg.next_seg_no;
    pthread_mutex_unlock(&s->mu);
    if (ls->reserved_upto < next) ls->reserved_upto = next;
    if (ls->reserved_upto >= next + RESERVE_LOW) return;
    while (ls->reserved_upto < next + RESERVE_HIGH) {
        char name[64];
        segment_name_format(s->run_id, ls->reserved_upto, name, sizeof name);
        if (segstore_reserve(s->store, name) < 0) break;   /* the write creates it then */
        ls->reserved_upto++;
    }
}

typedef struct {
    dstl_storage *s;
    char **keys;
    size_t n;
} remote_delete;

static void on_remote_deleted(void *ctx, const s3_result *r)
{
    remote_delete *d = ctx;
    if (r->err) {
        /* The objects stay as orphans that dstl gc removes; nothing refers to them. */
        pthread_mutex_lock(&d->s->mu);
        d->s->locked.stats.remote_failures++;
        pthread_mutex_unlock(&d->s->mu);
    }
    for (size_t i = 0; i < d->n; i++) free(d->keys[i]);
    free(d->keys);
    free(d);
}

/* Deletes segments nobody references any more (their counts reached zero under s->mu):
 * the local file now, the remote objects in DeleteObjects batches. A segment whose upload
 * still runs waits for it, so its object cannot appear after its deletion. */
static void run_deletes(dstl_storage *s)
{
    pthread_mutex_lock(&s->mu);
    run_segment *list = s->locked.reg.delete_head, *later = NULL;
    s->locked.reg.delete_head = NULL;
    pthread_mutex_unlock(&s->mu);
    remote_delete *d = NULL;
    while (list) {
        run_segment *g = list;
        list = g->next_delete;
        if (g->uploading) {
            g->next_delete = later;
            later = g;
            continue;
        }
        /* DURABILITY: the unlink becomes durable with the store's next directory fsync; a
         * crash before it may bring the file back as an orphan that dstl gc removes. */
        int rc = segstore_unlink(s->store, g->name);
        if (g->has_remote) {
            if (!d && (d = calloc(1, sizeof *d))) d->s = s;
            char key[640], **k = d ? realloc(d->keys, (d->n + 1) * sizeof *d->keys) : NULL;
            if (k) {
                d->keys = k;
                if (remote_key(&s->remote, g->name, key, sizeof key) == 0 && (k[d->n] = strdup(key))) d->n++;
            }
        }
        pthread_mutex_lock(&s->mu);
        if (rc == 0 || rc == -ENOENT) s->locked.stats.segments_deleted++;
        reg_deleted(&s->locked.reg, g);
        pthread_mutex_unlock(&s->mu);
    }
    if (later) {
        pthread_mutex_lock(&s->mu);
        for (run_segment *g = later, *next; g; g = next) {
            next = g->next_delete;
            g->next_delete = s->locked.reg.delete_head;
            s->locked.reg.delete_head = g;
        }
        pthread_mutex_unlock(&s->mu);
    }
    if (d && d->n && s3_delete_objects(s->loop.s3, s->remote.bucket, (const char *const *)d->keys, d->n, NULL,
                                       on_remote_deleted, d) == 0)
        return;
    if (d) {
        s3_result r = {.err = -ENOMEM};
        on_remote_deleted(d, &r);
    }
}

/* Milliseconds (rounded up) until the next remote deadline the loop must act on, or -1. */
static int64_t next_remote_deadline_ms(const loop_state *ls)
{
    uint64_t next = UINT64_MAX, now = now_ns();
    for (const batch *b = ls->inflight_list; b; b = b->next_inflight)
        if (b->op && b->remote_deadline_ns < next) next = b->remote_deadline_ns;
    if (ls->open && ls->s->conf.durability == CFG_DURABILITY_REMOTE && ls->open->remote_deadline_ns &&
        ls->open->remote_deadline_ns < next)
        next = ls->open->remote_deadline_ns;
    if (ls->lease.sent_ns && !ls->lease.op && ls->lease.next_ns < next) next = ls->lease.next_ns;
    uint64_t lease_due = ls->lease.sent_ns + (ls->s->conf.upload_max_attempts * ls->s->conf.upload_timeout_ms +
                                              REMOTE_SLACK_MS) * 1000000ull;
    if (ls->lease.op && !ls->lease.cancelled && lease_due < next) next = lease_due;
    if (next == UINT64_MAX) return -1;
    return next <= now ? 0 : (int64_t)((next - now + 999999) / 1000000);
}

/* Cancels uploads that passed their bound; copies the client's counters into the stats. */
static void remote_tick(loop_state *ls)
{
    dstl_storage *s = ls->s;
    uint64_t now = now_ns();
    for (batch *b = ls->inflight_list; b; b = b->next_inflight)
        if (b->op && now >= b->remote_deadline_ns) {
            s3_op_cancel(b->op);          /* on_uploaded runs on the next turn, -ECANCELED */
            b->op = NULL;
        }
    for (batch *b = ls->inflight_list; b; b = b->next_inflight)
        if (b->await_lease && now >= b->remote_deadline_ns) {
            char why[900];
            snprintf(why, sizeof why, "the run's lease s3://%.63s/%.300s was not written within the bound (%.400s)",
                     s->remote.bucket, s->loop.lease_key, ls->lease.err[0] ? ls->lease.err : "no answer");
            remote_fail(b, DSTL_EREMOTE, why);
            batch_progress(s, b);
        }
    pthread_mutex_lock(&s->mu);
    int closing = s->locked.pipe.closing;
    pthread_mutex_unlock(&s->mu);
    lease_state *l = &ls->lease;
    uint64_t lease_bound = (s->conf.upload_max_attempts * s->conf.upload_timeout_ms + REMOTE_SLACK_MS) * 1000000ull;
    if (l->op && !l->cancelled && (closing || now >= l->sent_ns + lease_bound)) {
        /* A lease write has the bound of an upload; at close none is waited for (close
         * removes the lease anyway). on_lease_put runs on the next turn, -ECANCELED; no new
         * write starts before it. */
        s3_op_cancel(l->op);
        l->cancelled = 1;
    }
    if (l->sent_ns && !l->op && now >= l->next_ns && !closing) lease_start(ls);
    batch *o = ls->open;
    if (o && s->conf.durability == CFG_DURABILITY_REMOTE && o->remote_deadline_ns && now >= o->remote_deadline_ns) {
        /* Still not written at its futures' bound (it waited for room, or behind a segment
         * being written): it fails unwritten; its records stay for the next persist. */
        ls->open = NULL;
        char why[300];
        snprintf(why, sizeof why, "not written within the bound of dstl.batch.persist-delay + "
                 "dstl.upload.max-attempts x dstl.upload.timeout + %u ms", REMOTE_SLACK_MS);
        pthread_mutex_lock(&s->mu);
        s->locked.pipe.q_waiting -= o->n;
        if (o->deferred) s->locked.pipe.flush_need = 0;
        batch_end(s, o, DSTL_EREMOTE, why);
        pthread_mutex_unlock(&s->mu);
        batch_free(o);
    }
    s3_stats st;
    s3_client_stats(s->loop.s3, &st);
    pthread_mutex_lock(&s->mu);
    s->locked.stats.remote_requests = st.requests;
    s->locked.stats.remote_retries = st.retries;
    s->locked.stats.hedged = st.hedges;
    s->locked.stats.remote_bytes_written = st.bytes_sent;
    pthread_mutex_unlock(&s->mu);
}

/* Local segment writes accepted and not yet called back, read now: a completion that ran in
 * this turn's segstore_poll must count at once, or group commit would wait for a write that
 * is over, with nothing left to wake the loop (the open batch would never flush). */
static unsigned local_writes_in_flight(const dstl_storage *s)
{
    struct segstore_stats st;
    segstore_stats(s->store, &st);
    return st.inflight;
}

static int flush_due(const loop_state *ls, int closing, uint64_t now)
{
    const dstl_storage *s = ls->s;
    const batch *b = ls->open;
    if (!b) return 0;
    if (b->deferred) {
        pthread_mutex_lock(&ls->s->mu);
        int waits = flush_waits(ls);
        pthread_mutex_unlock(&ls->s->mu);
        if (waits) return 0;          /* its room comes with a segment's end: a later turn */
        return 1;
    }
    if (closing || b->bytes >= s->conf.persist_size_threshold_bytes) return 1;
    if (s->conf.persist_delay_us == 0) return local_writes_in_flight(s) < GROUP_COMMIT_DEPTH;
    return now >= b->opened_ns + s->conf.persist_delay_us * 1000;
}

static void *pipeline_main(void *arg)
{
    loop_state ls = {.s = arg};
    dstl_storage *s = ls.s;
    /* Names are reserved once there is something to write (a storage opened only to read
     * or sweep creates no files), then kept ahead after every flush. */
    for (;;) {
        int timeout_ms = -1;
        uint64_t wait_ns = UINT64_MAX;      /* the batch deadline, to the nanosecond */
        if (ls.open && s->conf.persist_delay_us > 0) {
            uint64_t due = ls.open->opened_ns + s->conf.persist_delay_us * 1000, now = now_ns();
            wait_ns = due <= now ? 0 : due - now;
            /* libcurl's loop takes milliseconds: round up there, waking early would only spin */
            timeout_ms = (int)((wait_ns + 999999) / 1000000);
        }
        if (*s->conf.metrics_file && (timeout_ms < 0 || timeout_ms > 1000)) timeout_ms = 1000;
        if (s->loop.s3) {
            /* one loop for both: libcurl's sockets and timers, our eventfd, the store's fd;
             * uploads in flight are checked against their bound every 100 ms */
            if ((ls.inflight_list || ls.open) && (timeout_ms < 0 || timeout_ms > 100)) timeout_ms = 100;
            int64_t until = next_remote_deadline_ms(&ls);
            if (until >= 0 && (timeout_ms < 0 || until < timeout_ms)) timeout_ms = (int)until;
            s3_waitfd wf[2] = {{s->wake_fd, POLLIN, 0}, {segstore_event_fd(s->store), POLLIN, 0}};
            s3_client_run(s->loop.s3, wf, 2, timeout_ms);
        } else {
            /* ppoll: a 10 ms persist-delay must not become 11 ms by rounding */
            struct pollfd pf[2] = {{s->wake_fd, POLLIN, 0}, {segstore_event_fd(s->store), POLLIN, 0}};
            if (timeout_ms >= 0 && (uint64_t)timeout_ms * 1000000 < wait_ns) wait_ns = (uint64_t)timeout_ms * 1000000;
            struct timespec ts = {(time_t)(wait_ns / 1000000000), (long)(wait_ns % 1000000000)};
            if (ppoll(pf, 2, wait_ns == UINT64_MAX ? NULL : &ts, NULL) < 0 && errno != EINTR) break;
        }
        uint64_t v;
        ssize_t rn = read(s->wake_fd, &v, sizeof v);   /* non-blocking: EAGAIN when not kicked */
        (void)rn;
        segstore_poll(s->store);
        if (s->loop.s3) remote_tick(&ls);
        reap_batches(&ls);
        if (*s->conf.metrics_file && now_ns() >= s->loop.metrics_due_ns) {
            metrics_write_file(s);
            s->loop.metrics_due_ns = now_ns() + METRICS_INTERVAL_NS;
        }

        pthread_mutex_lock(&s->mu);
        int closing = s->locked.pipe.closing;
        if (s->locked.pipe.q_head) {
            if (!ls.open) {
                ls.open = calloc(1, sizeof *ls.open);
                if (ls.open) {
                    ls.open->s = s;
                    ls.open->tail = &ls.open->head;
                    ls.open->opened_ns = now_ns();
                    ls.open->ls = &ls;
                }
            }
            /* Memory for the batch is one small struct; if even that fails the queue waits
             * for the next round. */
            while (ls.open && s->locked.pipe.q_head) {
                pipeline_section *x = s->locked.pipe.q_head;
                s->locked.pipe.q_head = x->next;
                x->next = NULL;
                *ls.open->tail = x;
                ls.open->tail = &x->next;
                ls.open->n++;
                ls.open->bytes += x->r->rec_bytes;
                ls.open->reserve += x->r->enc_reserve;
                uint64_t due = x->t_enq_ns + s->conf.persist_delay_us * 1000 +
                               (s->conf.upload_max_attempts * s->conf.upload_timeout_ms + REMOTE_SLACK_MS -
                                REMOTE_ACT_EARLY_MS) * 1000000ull;
                if (!ls.open->remote_deadline_ns || due < ls.open->remote_deadline_ns) ls.open->remote_deadline_ns = due;
                s->locked.pipe.q_len--;
            }
            if (!s->locked.pipe.q_head) s->locked.pipe.q_tail = &s->locked.pipe.q_head;
        }
        int has_deletes = s->locked.reg.delete_head != NULL;
        pthread_mutex_unlock(&s->mu);
        /* Reserve names while the disk is idle, so the directory fsync does not queue beside a
         * segment's fdatasync; under constant load, when almost none are left. */
        if (ls.open && ls.reserved_upto == 0) reserve_ahead(&ls);
        else if (ls.reserved_upto && ((!ls.open && local_writes_in_flight(s) == 0) || ls.reserved_upto < s->locked.reg.next_seg_no + 2))
            reserve_ahead(&ls);

        if (has_deletes) run_deletes(s);
        if (flush_due(&ls, closing, now_ns())) flush(&ls);
        if (closing && !ls.open && !ls.inflight_list && (!s->loop.s3 || s3_client_pending(s->loop.s3) == 0)) {
            pthread_mutex_lock(&s->mu);
            int idle = !s->locked.pipe.q_head && !s->locked.reg.delete_head;
            pthread_mutex_unlock(&s->mu);
            if (idle) break;
        }
    }
    pool_free(&ls.pool);
    return NULL;
}

int pipeline_start(dstl_storage *s)
{
    int rc = pthread_create(&s->loop.thread, NULL, pipeline_main, s);
    if (rc != 0) return err_fail(-rc, "storage: cannot start the pipeline thread: %s", strerror(rc));
    s->loop.thread_started = 1;
    return 0;
}

void pipeline_stop(dstl_storage *s)
{
    if (!s->loop.thread_started) return;
    pthread_mutex_lock(&s->mu);
    s->locked.pipe.closing = 1;
    pthread_cond_broadcast(&s->room_cv);
    pthread_mutex_unlock(&s->mu);
    pipeline_wake(s);
    pthread_join(s->loop.thread, NULL);
    s->loop.thread_started = 0;
}

/*
 * dstl/read/reader.c — recovery readers: a handle's records, in seq order, verified, filtered.
 *
 * Each piece of the handle is read as a *job* in two stages:
 *  1. footer: the bytes [footer_offset, object_len) of its segment (footer + trailer, in one
 *     read or ranged GET; a GET reads at least the last TAIL_READ_BYTES, whose section bytes
 *     the next stage uses), checked against what the handle recorded (offsets, lengths, CRCs),
 *     then parsed into the segment's index;
 *  2. section: only the bytes of the piece's section that hold the asked key groups
 *     (wire_section_ranges: the selected key-group runs and the meta run; a compressed section
 *     whole), laid out as their covering range, then opened with wire's iterator, which checks
 *     every CRC (and decompresses) before a record leaves it.
 *
 * Where the bytes come from, per segment: the local copy in dstl.local.dir when it exists with
 * the length the handle names (local recovery; blocking preads); otherwise, when the handle has
 * a remote_uri, the object s3://bucket/<remote_key(name)>: first the reader cache (cache.h),
 * then ranged GETs on the reader's own S3 client. Remote pieces are fetched ahead: up to
 * READ_WINDOW_PIECES jobs / READ_WINDOW_BYTES run at once, their GETs progressing whenever the
 * reader drives its client (while waiting for the current piece, and every few records while
 * the current piece is consumed). Bytes fetched from S3 enter the cache only after they
 * passed their CRC check; cached bytes are checked again when read, and a mismatch there
 * drops the entry and fetches from S3 once more before anything is reported.
 *
 * Falling back: with a remote_uri, a local copy is only the faster of two copies. When it is
 * there but unusable — a length other than the handle's, unreadable, or any check failing
 * (trailer, footer, the handle's section, a run's CRC, a record that does not parse, at open or
 * in the middle of the piece's iteration) — the reader switches that segment to the object for
 * the rest of the read, restarts the current piece there from the first seq it has not returned
 * yet (the seqs of a piece come in increasing order, so nothing is repeated or skipped), and
 * counts one local_read_fallbacks. So DSTL_ECORRUPT is reported only when no copy holds good
 * bytes; an error when the object fails too names both (the local file and offset, and
 * s3://bucket/key). A handle without remote_uri has one copy: its failures are reported as
 * they are.
 *
 * Errors are per job, reported when the reader reaches that piece (earlier records are still
 * returned), then sticky. A remote failure names s3://bucket/key; a missing object is -ENOENT
 * (unless a bad local copy exists: then the local copy's error). A successful call leaves the
 * thread's dstl_last_error() as it found it: probes of the local copy that fail (a segment
 * that is only remote, a copy the reader falls back from) put back the detail they replaced.
 *
 * Threads: a reader is used by one thread at a time; its S3 client is driven only from
 * dstl_reader_next/close (GET callbacks run there too). The cache and the client pool are
 * shared by all readers of the storage and are thread-safe.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstl/read/cache.h"
#include "dstl/read/restore.h"
#include "dstl/read/segread.h"
#include "dstl/err.h"
#include "dstl/handle.h"
#include "dstl/storage.h"
#include "dstl/remote/remote.h"
#include "dstl/local/segstore.h"

/* Pieces fetched at once per reader. Each remote piece costs two round trips (footer, then
 * its section); with 8 in flight those hide behind the consumption of earlier pieces even at
 * S3's 20-50 ms first-byte latency, and 8 matches the client's default connection count
 * (dstl.upload.connections), beyond which GETs would only queue. */
#define READ_WINDOW_PIECES 8
/* Bytes of pieces ahead of the current one that a reader may hold: about a third of a second
 * of a fast link keeps the GETs streaming, and bounds a reader's memory (recovery opens a few
 * readers per task). The current piece is fetched whatever its size. */
#define READ_WINDOW_BYTES (32ull << 20)
/* The first GET of a remote segment reads at least this much of its tail, not just footer and
 * trailer: a segment this small then costs one GET instead of two, and a larger one brings the
 * end of its last section along (the meta run every reader needs). A request costs a round
 * trip (about 1 ms on a LAN store, 20-50 ms first byte on S3); 64 KiB cost about 0.5 ms of a
 * 1 Gbit/s link. */
#define TAIL_READ_BYTES (64u << 10)
/* While a piece is consumed, the client is driven (without waiting) every this many records so
 * the prefetch GETs keep reading their sockets: a turn costs a poll, a few microseconds. */
#define DRIVE_EVERY_RECORDS 256u

enum { SRC_UNKNOWN = 0, SRC_LOCAL = 1, SRC_REMOTE = 2 };
enum { J_IDLE = 0, J_FOOTER, J_SECTION, J_READY, J_FAILED };

typedef struct job job;

typedef struct {
    job *j;
    int part;
} get_ctx;

struct job {
    dstl_reader *r;
    size_t piece;
    int state;
    int remote;
    char where[1100];               /* "s3://bucket/key" or "<local dir>/<name>": for messages */
    const char *key;                /* remote: the key inside where */
    cache_entry *ce;                /* remote: the object's cache entry (referenced) */
    int64_t pobj;                   /* remote: the restore plan's object, or -1 */
    int no_cache;                   /* cached bytes failed their check: use S3 only */
    uint64_t next_seq;              /* the piece's first seq not yet returned (a restart's start) */
    int gets;                       /* GETs in flight */
    s3_op *ops[2];
    get_ctx gctx[2];
    uint8_t *buf;                   /* this stage's bytes: object offsets [buf_off, buf_off + buf_len) */
    int buf_borrowed;               /* buf points into the restore plan's bytes (not freed here) */
    uint64_t buf_off;
    size_t buf_len;
    int nparts;                     /* the ranges to fill in buf (object offsets) */
    uint64_t part_off[2], part_len[2];
    uint64_t get_off[2], get_len[2];  /* what a part's GET asked for */
    uint8_t *tail;                  /* the footer stage's buffer, kept for the section stage: */
    uint64_t tail_off, tail_lo;     /* object offset of tail[0]; S3 bytes start at tail_lo */
    size_t tail_len;
    unsigned cached, fetched;       /* parts served by the cache / by S3 */
    wire_index *ix;
    int ix_shared;                  /* ix is the restore plan's (not freed here) */
    wire_iter *it;
    int err;
    char errmsg[512];
};

/* Per segment of the handle: where its bytes come from, and why not from the local copy. */
typedef struct {
    uint8_t src;                    /* SRC_* */
    int local_code;                 /* the local copy's failure, when the reader fell back */
    char *local_err;                /* its detail (malloc'd; NULL when none or out of memory) */
} seg_src;

struct dstl_reader {
    dstl_storage *s;
    const wire_handle *wh;          /* ref's, or a plan's handle (valid until the reader closes) */
    dstl_handle *ref;               /* dstl_reader_open's, a reference of our own; NULL: a plan's */
    dstl_restore *plan;             /* a reader of a restore plan: (entry pe, handle ph) of it */
    int took_one;                   /* it has returned a record (restore_first_record told) */
    size_t pe, ph;
    uint64_t own_requests, own_bytes, plan_declined;   /* for the plan's counters */
    uint32_t kg_first, kg_last;
    size_t piece;                   /* the piece being read: jobs[piece % READ_WINDOW_PIECES] */
    size_t next_start, held;        /* the next piece to start a job for; one that waits to be current */
    job jobs[READ_WINDOW_PIECES];
    seg_src *src;                   /* per segment of the handle */
    remote_loc loc;                 /* of wh->remote_uri, once loc_state is 1 */
    int loc_state;                  /* 0 not parsed, 1 ok, < 0 the parse error */
    char loc_err[512];
    s3_client *cli;                 /* taken on the first remote piece */
    s3_stats counted;               /* cli's counters already added to the storage's */
    read_cache *cache;
    keyring *keys;                  /* the key file's keys at open (NULL: none configured) */
    unsigned since_drive;
    int err;                        /* sticky */
    char errmsg[1024];              /* room for both copies' details */
};

static int fail(dstl_reader *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(dstl_reader *r, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errmsg, sizeof r->errmsg, fmt, ap);
    va_end(ap);
    r->err = code;
    return err_fail(code, "%s", r->errmsg);
}

static void stage_done(job *j);

/* Fails the job (its error is reported when the reader reaches it); its other GETs are
 * cancelled (their callbacks still come, and find the job failed). */
static void job_fail(job *j, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void job_fail(job *j, int code, const char *fmt, ...)
{
    if (j->state == J_FAILED) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->errmsg, sizeof j->errmsg, fmt, ap);
    va_end(ap);
    j->err = code;
    j->state = J_FAILED;
    for (int i = 0; i < 2; i++)
        if (j->ops[i]) s3_op_cancel(j->ops[i]);
}

static const wire_seg_ref *job_seg(const job *j)
{
    return &j->r->wh->segs[j->r->wh->pieces[j->piece].seg];
}

/* Adds what the client did since last time to the storage's counters. */
static void account(dstl_reader *r)
{
    if (!r->cli) return;
    s3_stats now;
    s3_client_stats(r->cli, &now);
    dstl_storage *s = r->s;
    atomic_fetch_add_explicit(&s->rd.requests, now.requests - r->counted.requests, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->rd.retries, now.retries - r->counted.retries, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->rd.hedges, now.hedges - r->counted.hedges, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->rd.bytes, now.bytes_received - r->counted.bytes_received, memory_order_relaxed);
    r->own_requests += now.requests - r->counted.requests;
    r->own_bytes += now.bytes_received - r->counted.bytes_received;
    r->counted = now;
}

/* ---- the thread's failure detail across probes ---- */

/* A probe of the local copy that fails is not the call's failure (the reader goes to the object,
 * or reports its own error later): the detail it set is put back, so a call that succeeds leaves
 * dstl_last_error() as it found it. */
typedef struct {
    char msg[1024];
} saved_detail;

static void detail_save(saved_detail *d) { snprintf(d->msg, sizeof d->msg, "%s", dstl_last_error()); }
static void detail_restore(const saved_detail *d) { (void)err_fail(0, "%s", d->msg); }

/* ---- where a segment is ---- */

/* Segment i is read from the object from now on: its local copy failed with code (detail msg),
 * or was not the handle's. Counted once per segment and reader. */
static void use_remote(dstl_reader *r, uint32_t i, int code, const char *msg)
{
    seg_src *ss = &r->src[i];
    ss->src = SRC_REMOTE;
    if (ss->local_err) return;
    ss->local_code = code;
    ss->local_err = strdup(msg);
    atomic_fetch_add_explicit(&r->s->rd.local_fallbacks, 1, memory_order_relaxed);
}

static int seg_source(dstl_reader *r, uint32_t i)
{
    if (r->src[i].src != SRC_UNKNOWN) return r->src[i].src;
    if (r->plan && restore_no_local_copy(r->plan, r->pe, r->ph, i)) return r->src[i].src = SRC_REMOTE;
    const wire_seg_ref *g = &r->wh->segs[i];
    uint64_t size = 0;
    saved_detail before;
    detail_save(&before);
    int rc = segstore_size(r->s->local_dir, g->name, &size);
    char why[600];
    snprintf(why, sizeof why, "%s", rc < 0 ? dstl_last_error() : "");
    detail_restore(&before);
    /* A 0-byte file is a name reserved and never written; a copy of another length is not
     * the one the handle names (a torn local write): S3 has the object when there is one. */
    if ((rc == 0 && size == g->object_len) || !*r->wh->remote_uri) {
        r->src[i].src = SRC_LOCAL;
    } else if (rc == -ENOENT || (rc == 0 && size == 0)) {
        r->src[i].src = SRC_REMOTE;             /* no local copy: not a fallback */
    } else if (rc == 0) {
        char m[600];
        snprintf(m, sizeof m, "local copy %s/%s is %llu bytes, the handle names %llu", r->s->local_dir, g->name,
                 (unsigned long long)size, (unsigned long long)g->object_len);
        use_remote(r, i, DSTL_ECORRUPT, m);
    } else {
        use_remote(r, i, rc, why);              /* there, but unreadable */
    }
    return r->src[i].src;
}

/* ---- fetching parts ---- */

static void on_get(void *ctx, const s3_result *res)
{
    get_ctx *g = ctx;
    job *j = g->j;
    int i = g->part;
    j->ops[i] = NULL;
    j->gets--;
    if (j->state == J_FAILED) return;
    const wire_seg_ref *sg = job_seg(j);
    if (res->err < 0) {
        atomic_fetch_add_explicit(&j->r->s->rd.failures, 1, memory_order_relaxed);
        if (res->err == -ENOENT)
            job_fail(j, -ENOENT, "segment %s: not found in the remote store (%s)", j->where, res->error);
        else
            job_fail(j, res->err, "segment %s: %s", j->where, res->error);
        return;
    }
    if (res->object_size != sg->object_len) {
        job_fail(j, DSTL_ECORRUPT, "segment %s: the object is %llu bytes, the handle names %llu", j->where,
                 (unsigned long long)res->object_size, (unsigned long long)sg->object_len);
        return;
    }
    if (res->bytes != j->get_len[i]) {
        job_fail(j, DSTL_ECORRUPT, "segment %s: GET of %llu bytes at offset %llu gave %llu", j->where,
                 (unsigned long long)j->get_len[i], (unsigned long long)j->get_off[i],
                 (unsigned long long)res->bytes);
        return;
    }
    if (j->gets == 0) stage_done(j);
}

/* Takes the reader's S3 client, once per reader (on its first GET). */
static int client_ready(dstl_reader *r, job *j)
{
    if (r->cli) return 0;
    int rc = cache_client_take(r->s, &r->cli);
    if (rc < 0) {
        job_fail(j, rc, "reader: %s", dstl_last_error());
        return -1;
    }
    s3_client_stats(r->cli, &r->counted);
    return 0;
}

/* Part i from the restore plan: 1 done (copied, or the job failed), 0 the plan does not hold
 * it (the reader fetches it itself). */
static int plan_part(job *j, int i, uint8_t *dst, size_t len)
{
    dstl_reader *r = j->r;
    if (j->pobj < 0 || j->no_cache) return 0;
    char msg[sizeof j->errmsg];
    int rc = restore_read(r->plan, j->pobj, j->part_off[i], len, dst, msg, sizeof msg);
    if (rc == 1) j->cached |= 1u << i;     /* checked like cached bytes: refetched from S3 if bad */
    else if (rc < 0) job_fail(j, rc, "%s", msg);
    else r->plan_declined++;
    return rc != 0;
}

/* Fills part i of the job's buffer: a pread of the local copy, the cache, or S3 — a footer
 * GET from buf_off (the speculative tail), a section part from the tail where it overlaps. */
static void part_fetch(job *j, int i)
{
    dstl_reader *r = j->r;
    uint8_t *dst = j->buf + (j->part_off[i] - j->buf_off);
    size_t len = (size_t)j->part_len[i];
    if (!j->remote) {
        saved_detail before;
        detail_save(&before);
        ssize_t n = segstore_read_at(r->s->local_dir, job_seg(j)->name, j->part_off[i], dst, len);
        if (n < 0) {
            job_fail(j, (int)n, "%s", dstl_last_error());
            detail_restore(&before);    /* reported (or fallen back from) through the job */
        } else if ((size_t)n < len)
            job_fail(j, DSTL_ECORRUPT, "segment %s: %zu bytes at offset %llu, file ends after %zd", j->where, len,
                     (unsigned long long)j->part_off[i], n);
        return;
    }
    if (plan_part(j, i, dst, len)) return;
    if (!j->no_cache && cache_read(r->cache, j->ce, j->part_off[i], len, dst)) {
        j->cached |= 1u << i;
        return;
    }
    j->fetched |= 1u << i;
    j->get_off[i] = j->part_off[i];
    j->get_len[i] = len;
    if (j->state == J_FOOTER) {
        j->get_len[i] += j->part_off[i] - j->buf_off;
        j->get_off[i] = j->buf_off;
        dst = j->buf;
    } else if (j->tail && j->part_off[i] + len > j->tail_lo) {
        uint64_t from = j->part_off[i] > j->tail_lo ? j->part_off[i] : j->tail_lo;
        memcpy(dst + (from - j->part_off[i]), j->tail + (from - j->tail_off), (size_t)(j->part_off[i] + len - from));
        j->get_len[i] = from - j->part_off[i];
        if (j->get_len[i] == 0) return;
    }
    if (client_ready(r, j) < 0) return;
    int rc = s3_get_object(r->cli, r->loc.bucket, j->key, j->get_off[i], dst, (size_t)j->get_len[i], &j->ops[i],
                           on_get, &j->gctx[i]);
    if (rc < 0) {
        job_fail(j, rc, "segment %s: GET of %llu bytes at offset %llu could not start: %s", j->where,
                 (unsigned long long)j->get_len[i], (unsigned long long)j->get_off[i], dstl_strerror(rc));
        return;
    }
    j->gets++;
}

/* Fills every part of the current stage; the stage ends here when nothing went to S3. */
static void stage_run(job *j)
{
    j->cached = j->fetched = 0;
    for (int i = 0; i < j->nparts && j->state != J_FAILED; i++) part_fetch(j, i);
    if (j->state != J_FAILED && j->gets == 0) stage_done(j);
}

/* Cached bytes failed a check: forget them and fetch this stage from S3. Returns 1 when it
 * did (the caller stops), 0 when the bytes were not from the cache. */
static int refetch_uncached(job *j)
{
    if (!j->cached || j->no_cache) return 0;
    if (j->buf_borrowed) {              /* the plan's bytes are read-only: fetch into our own */
        j->buf_borrowed = 0;
        if (!(j->buf = malloc(j->buf_len ? j->buf_len : 1))) {
            job_fail(j, -ENOMEM, "segment %s: out of memory for %zu bytes", j->where, j->buf_len);
            return 1;
        }
    }
    cache_invalidate(j->r->cache, j->ce);
    j->no_cache = 1;
    stage_run(j);
    return 1;
}

static void cache_fetched(job *j)
{
    for (int i = 0; i < j->nparts; i++)
        if (j->fetched & (1u << i))
            cache_insert(j->r->cache, j->ce, j->part_off[i], (size_t)j->part_len[i],
                         j->buf + (j->part_off[i] - j->buf_off));
}

static void section_begin(job *j);

static void footer_done(job *j)
{
    const wire_seg_ref *g = job_seg(j);
    char msg[sizeof j->errmsg];
    int rc = segread_index(g, j->r->keys ? keyring_wire(j->r->keys) : NULL, j->buf, j->buf_off, j->buf_len,
                           j->where, &j->ix, msg, sizeof msg);
    if (rc < 0) {
        if (!refetch_uncached(j)) job_fail(j, rc, "%s", msg);
        return;
    }
    if (j->remote) {
        cache_fetched(j);       /* the footer and trailer: the bytes before them are not checked yet */
        j->tail = j->buf;
        j->tail_off = j->buf_off;
        j->tail_len = j->buf_len;
        j->tail_lo = j->fetched ? j->buf_off : g->footer_offset;
    } else {
        free(j->buf);
    }
    j->buf = NULL;
    section_begin(j);
}

static void section_done(job *j);

/* A plan's section bytes without a copy, when they lie in one of its extents: 1 when that
 * settled the stage (done, or failed), 0 to fill the buffer the usual way. */
static int section_borrow(job *j)
{
    if (j->no_cache) return 0;
    const uint8_t *b = NULL;
    char msg[sizeof j->errmsg];
    int rc = restore_borrow(j->r->plan, j->pobj, j->buf_off, j->buf_len, &b, msg, sizeof msg);
    if (rc == 0) return 0;
    if (rc < 0) {
        job_fail(j, rc, "%s", msg);
        return 1;
    }
    j->buf = (uint8_t *)b;              /* read only: the iterator reads, never writes */
    j->buf_borrowed = 1;
    j->cached = (1u << j->nparts) - 1;  /* checked like cached bytes: refetched from S3 if bad */
    j->fetched = 0;
    section_done(j);
    return 1;
}

static void section_begin(job *j)
{
    dstl_reader *r = j->r;
    const wire_piece *p = &r->wh->pieces[j->piece];
    char msg[sizeof j->errmsg];
    const wire_section_info *sec = segread_piece_section(j->ix, p, r->wh->writer_id, j->where, msg, sizeof msg);
    if (!sec) {
        job_fail(j, DSTL_ECORRUPT, "%s", msg);
        return;
    }
    uint64_t off[2], len[2];
    int n = segread_ranges(sec, r->kg_first, r->kg_last, off, len);
    j->nparts = n;
    for (int i = 0; i < n; i++) {
        j->part_off[i] = off[i];
        j->part_len[i] = len[i];
    }
    j->buf_off = n ? off[0] : sec->offset;
    j->buf_len = n ? (size_t)(off[n - 1] + len[n - 1] - off[0]) : 0;
    j->state = J_SECTION;
    if (j->pobj >= 0 && n && section_borrow(j)) return;
    if (!(j->buf = malloc(j->buf_len ? j->buf_len : 1))) {
        job_fail(j, -ENOMEM, "segment %s section %u: out of memory for %zu bytes", j->where, p->section, j->buf_len);
        return;
    }
    stage_run(j);
}

static void section_done(job *j)
{
    dstl_reader *r = j->r;
    const wire_piece *p = &r->wh->pieces[j->piece];
    const wire_section_info *sec = wire_index_section(j->ix, p->section);
    char msg[sizeof j->errmsg];
    int rc = segread_section(sec, p->section, j->buf, j->buf_off, j->buf_len, j->next_seq, p->seq_end, r->kg_first,
                             r->kg_last, j->where, &j->it, msg, sizeof msg);
    if (rc < 0) {
        if (!refetch_uncached(j)) job_fail(j, rc, "%s", msg);
        return;
    }
    if (j->remote && j->nparts) {
        cache_fetched(j);
        if (j->fetched) atomic_fetch_add_explicit(&r->s->rd.cache_misses, 1, memory_order_relaxed);
        else atomic_fetch_add_explicit(&r->s->rd.cache_hits, 1, memory_order_relaxed);
    }
    if (!j->ix_shared) wire_index_free(j->ix);      /* the iterator copied what it needs */
    j->ix = NULL;
    free(j->tail);
    j->tail = NULL;
    j->tail_len = 0;
    j->state = J_READY;
}

static void stage_done(job *j)
{
    if (j->state == J_FOOTER) footer_done(j);
    else if (j->state == J_SECTION) section_done(j);
}

/* ---- jobs ---- */

/* Resolves the handle's remote location, once per reader. */
static int remote_ready(dstl_reader *r, job *j)
{
    if (r->loc_state == 0) {
        if (remote_parse_uri(r->wh->remote_uri, "handle remote uri", &r->loc) < 0) {
            snprintf(r->loc_err, sizeof r->loc_err, "%s", dstl_last_error());
            r->loc_state = DSTL_ECORRUPT;
        } else {
            r->loc_state = 1;
        }
    }
    if (r->loc_state < 0) {
        job_fail(j, r->loc_state, "handle of writer %s: %s", r->wh->writer_id, r->loc_err);
        return -1;
    }
    return 0;
}

/* Starts piece's job from src; records below from_seq (when above the piece's first) are not
 * returned again (a restart after a fallback). */
static void job_start(dstl_reader *r, job *j, size_t piece, int src, uint64_t from_seq)
{
    uint64_t first = r->wh->pieces[piece].seq_first;
    *j = (job){.r = r, .piece = piece, .remote = src == SRC_REMOTE, .state = J_FOOTER, .pobj = -1,
               .next_seq = from_seq > first ? from_seq : first};
    j->gctx[0] = (get_ctx){j, 0};
    j->gctx[1] = (get_ctx){j, 1};
    const wire_seg_ref *g = job_seg(j);
    if (j->remote) {
        if (r->plan) j->pobj = restore_object(r->plan, r->pe, r->ph, r->wh->pieces[piece].seg);
        if (remote_ready(r, j) < 0) return;
        size_t n = strlen(r->loc.bucket) + 6;    /* "s3://" bucket "/", by hand (remote_key) */
        if (n < sizeof j->where) {
            memcpy(j->where, "s3://", 5);
            memcpy(j->where + 5, r->loc.bucket, n - 6);
            j->where[n - 1] = '/';
        }
        if (n >= sizeof j->where || remote_key(&r->loc, g->name, j->where + n, sizeof j->where - n) < 0) {
            job_fail(j, -ENAMETOOLONG, "segment %s: object key too long", g->name);
            return;
        }
        j->key = j->where + n;
        if (j->pobj < 0) j->ce = cache_acquire(r->cache, j->where);   /* a plan's bytes are the plan's */
    } else {
        snprintf(j->where, sizeof j->where, "%s/%s", r->s->local_dir, g->name);
    }
    /* The handle's decoder checked that the footer ends WIRE_SEG_TRAILER_LEN bytes before the
     * object's end, so this is footer + trailer. */
    j->nparts = 1;
    j->part_off[0] = j->buf_off = g->footer_offset;
    j->part_len[0] = (size_t)(g->object_len - g->footer_offset);
    if (j->remote && j->pobj < 0 && g->object_len - g->footer_offset < TAIL_READ_BYTES)
        j->buf_off = g->object_len > TAIL_READ_BYTES ? g->object_len - TAIL_READ_BYTES : 0;
    j->buf_len = (size_t)(g->object_len - j->buf_off);
    if (j->part_len[0] < WIRE_SEG_TRAILER_LEN) {
        job_fail(j, DSTL_ECORRUPT, "handle: segment %s length %llu leaves no room for a trailer", g->name,
                 (unsigned long long)g->object_len);
        return;
    }
    if (j->pobj >= 0 && (j->ix = (wire_index *)restore_index(r->plan, j->pobj))) {
        j->ix_shared = 1;               /* the plan parsed (and checked) this index once for all */
        section_begin(j);
        return;
    }
    if (!(j->buf = malloc(j->buf_len))) {
        job_fail(j, -ENOMEM, "segment %s: out of memory for a %zu-byte footer", j->where, j->buf_len);
        return;
    }
    stage_run(j);
}

/* Frees what a job holds; it has no GET in flight. */
static void job_clear(dstl_reader *r, job *j)
{
    wire_iter_free(j->it);
    if (!j->ix_shared) wire_index_free(j->ix);
    if (!j->buf_borrowed) free(j->buf);
    free(j->tail);
    cache_release(r->cache, j->ce);
    *j = (job){0};
}

/* Starts jobs for the pieces ahead while the window has room. A local piece is read only when
 * it is the current one (a blocking pread gains nothing by going early). With nowait, a
 * current piece of the restore plan whose bytes are not in yet is not started: -EAGAIN. */
static int fill(dstl_reader *r, int nowait)
{
    while (r->next_start < r->wh->npieces && r->next_start - r->piece < READ_WINDOW_PIECES) {
        size_t p = r->next_start;
        if (p == r->held && p != r->piece) break;
        if (p > r->piece) {
            uint64_t ahead = 0;
            for (size_t q = r->piece + 1; q < p; q++) {
                const job *a = &r->jobs[q % READ_WINDOW_PIECES];
                ahead += a->buf_len + a->tail_len;
            }
            if (ahead >= READ_WINDOW_BYTES) break;
        }
        uint32_t seg = r->wh->pieces[p].seg;
        int src = seg_source(r, seg);
        /* a piece of a restore plan waits for the plan's fetch: it too starts when current */
        int now = src != SRC_REMOTE || (r->plan && restore_object(r->plan, r->pe, r->ph, seg) >= 0);
        if (now && p != r->piece && (r->held = p)) break;
        if (nowait && src == SRC_REMOTE && r->plan && !restore_piece_ready(r->plan, r->pe, r->ph, p)) return -EAGAIN;
        job_start(r, &r->jobs[p % READ_WINDOW_PIECES], p, src, 0);
        r->next_start++;
    }
    return 0;
}

/* Whether the local copy's failure err of job j may be repaired from the object: the handle
 * names one, and the failure is the copy's, not the reader's memory. */
static int can_fall_back(const dstl_reader *r, const job *j, int err)
{
    return !j->remote && *r->wh->remote_uri && err != -ENOMEM;
}

/* The current piece's local copy failed with err (detail msg): its segment is read from the
 * object from now on, and the piece restarts there from its first seq not yet returned. */
static void fall_back(dstl_reader *r, job *j, int err, const char *msg)
{
    size_t piece = j->piece;
    uint64_t from = j->next_seq;
    use_remote(r, r->wh->pieces[piece].seg, err, msg);
    job_clear(r, j);                    /* a local job: no GET in flight */
    job_start(r, j, piece, SRC_REMOTE, from);
}

/* Reports job j's failure code (detail msg), naming the local copy's failure too when the job
 * reads the object because of it. A missing object beside a bad local copy is the local
 * copy's error: the bytes exist, but no copy holds them intact. */
static int job_report(dstl_reader *r, const job *j, int code, const char *msg)
{
    const seg_src *ss = &r->src[r->wh->pieces[j->piece].seg];
    if (!j->remote || !ss->local_err) return fail(r, code, "%s", msg);
    if (code == -ENOENT) code = ss->local_code;
    return fail(r, code, "segment %s has no intact copy: %.480s; and the local copy: %.480s", job_seg(j)->name,
                msg, ss->local_err);
}

/* Drives the client until job j is ready or failed; with nowait, one turn that does not wait,
 * then -EAGAIN when it is still not. */
static int wait_job(dstl_reader *r, job *j, int nowait)
{
    while (j->state == J_FOOTER || j->state == J_SECTION) {
        if (!r->cli || s3_client_pending(r->cli) == 0)
            return fail(r, -EIO, "reader: piece %zu waits for a GET that is not in flight", j->piece);
        int n = s3_client_run(r->cli, NULL, 0, nowait ? 0 : 1000);
        account(r);
        if (n < 0) return fail(r, n, "reader: S3 client loop failed: %s", dstl_strerror(n));
        if (nowait && (j->state == J_FOOTER || j->state == J_SECTION)) return -EAGAIN;
    }
    return 0;
}

/* ---- API ---- */

/* A reader of wh over [kg_first, kg_last]: of handle ref's (the reader takes a reference), or
 * with ref NULL of a handle a plan holds, which outlives its readers. */
static int reader_new(dstl_storage *s, const wire_handle *wh, const dstl_handle *ref, uint32_t kg_first,
                      uint32_t kg_last, dstl_reader **out)
{
    dstl_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->src = calloc(wh->nsegs + 1, sizeof *r->src))) {
        free(r);
        return err_fail(-ENOMEM, "dstl_reader_open: out of memory");
    }
    r->wh = wh;
    r->ref = ref ? handle_ref((dstl_handle *)ref) : NULL;
    r->s = s;
    r->kg_first = kg_first;
    r->kg_last = kg_last;
    if (*r->wh->remote_uri) r->cache = cache_get(s);
    r->keys = key_source_get(&s->keys);   /* a rotated key file is re-read here */
    *out = r;
    return 0;
}

int dstl_reader_open(dstl_storage *s, const dstl_handle *h, uint32_t key_group_first,
                     uint32_t key_group_last, dstl_reader **out)
{
    if (!s || !h || !out) return err_fail(-EINVAL, "dstl_reader_open: NULL argument");
    if (key_group_first > key_group_last)
        return err_fail(-EINVAL, "dstl_reader_open: key group range %u-%u is empty", key_group_first,
                        key_group_last);
    return reader_new(s, h->wh, h, key_group_first, key_group_last, out);
}

int dstl_restore_reader_open(dstl_restore *p, size_t entry, size_t handle, dstl_reader **out)
{
    if (!p || !out) return err_fail(-EINVAL, "dstl_restore_reader_open: NULL argument");
    const wire_handle *wh;
    uint32_t first, last;
    int rc = restore_claim(p, entry, handle, &wh, &first, &last);
    if (rc < 0) return rc;
    if ((rc = reader_new(restore_storage(p), wh, NULL, first, last, out)) < 0) {
        restore_reader_closed(p, entry, handle, 0, 0, 0);
        return rc;
    }
    (*out)->plan = p;
    (*out)->pe = entry;
    (*out)->ph = handle;
    return 0;
}

/* dstl_reader_next (nowait 0) and dstl_reader_try_next (1: -EAGAIN instead of waiting for
 * bytes; nothing is consumed then, and the reader's state is as before but for GETs started). */
static int reader_next(dstl_reader *r, dstl_record *rec, int nowait)
{
    if (r->err) return err_fail(r->err, "%s", r->errmsg);
    for (;;) {
        if (r->piece >= r->wh->npieces) return 0;
        if (fill(r, nowait) < 0) return -EAGAIN;
        job *j = &r->jobs[r->piece % READ_WINDOW_PIECES];
        int rc = wait_job(r, j, nowait);
        if (rc < 0) return rc;
        if (j->state == J_FAILED) {
            if (!can_fall_back(r, j, j->err)) return job_report(r, j, j->err, j->errmsg);
            fall_back(r, j, j->err, j->errmsg);
            continue;
        }
        if (r->cli && ++r->since_drive >= DRIVE_EVERY_RECORDS) {
            r->since_drive = 0;
            if (s3_client_pending(r->cli)) {
                int n = s3_client_run(r->cli, NULL, 0, 0);
                account(r);
                if (n < 0) return fail(r, n, "reader: S3 client loop failed: %s", dstl_strerror(n));
            }
        }
        wire_record wr;
        wire_err e = {{0}};
        rc = wire_iter_next(j->it, &wr, &e);
        if (rc == 1) {
            j->next_seq = wr.seq + 1;
            *rec = (dstl_record){wr.seq, wr.key_group, wr.is_meta, wr.data, wr.len};
            if (r->plan && !r->took_one) {
                r->took_one = 1;
                restore_first_record(r->plan);
            }
            return 1;
        }
        if (rc < 0) {
            char msg[600];
            snprintf(msg, sizeof msg, "segment %s section %u: %s", j->where, r->wh->pieces[r->piece].section, e.msg);
            if (!can_fall_back(r, j, rc)) return job_report(r, j, rc, msg);
            fall_back(r, j, rc, msg);   /* mid-piece: continues after the last record returned */
            continue;
        }
        job_clear(r, j);
        r->piece++;
        if (r->plan) restore_pieces_done(r->plan, r->pe, r->ph, r->piece);
    }
}

int dstl_reader_next(dstl_reader *r, dstl_record *rec)
{
    if (!r || !rec) return err_fail(-EINVAL, "dstl_reader_next: NULL argument");
    return reader_next(r, rec, 0);
}

int dstl_reader_try_next(dstl_reader *r, dstl_record *rec)
{
    if (!r || !rec) return err_fail(-EINVAL, "dstl_reader_try_next: NULL argument");
    return reader_next(r, rec, 1);
}

void dstl_reader_close(dstl_reader *r)
{
    if (!r) return;
    if (r->cli) {
        for (size_t i = 0; i < READ_WINDOW_PIECES; i++)
            for (int k = 0; k < 2; k++)
                if (r->jobs[i].ops[k]) s3_op_cancel(r->jobs[i].ops[k]);
        /* Cancelled GETs complete on the next turns; a client that still has some is freed
         * (its free runs their callbacks, while the jobs are still here). */
        for (int turn = 0; turn < 50 && s3_client_pending(r->cli); turn++) s3_client_run(r->cli, NULL, 0, 100);
        account(r);
        if (s3_client_pending(r->cli)) {
            s3_client_free(r->cli);
            r->cli = NULL;
        }
    }
    for (size_t i = 0; i < READ_WINDOW_PIECES; i++) job_clear(r, &r->jobs[i]);
    for (size_t i = 0; r->src && i < r->wh->nsegs; i++) free(r->src[i].local_err);
    /* the last use of r->wh: a plan's handle may go once the plan knows this reader closed */
    if (r->plan) restore_reader_closed(r->plan, r->pe, r->ph, r->own_requests, r->own_bytes, r->plan_declined);
    cache_client_give(r->s, r->cli);
    dstl_handle_free(r->ref);
    keyring_unref(r->keys);
    free(r->src);
    free(r);
}

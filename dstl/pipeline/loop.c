/*
 * dstl/pipeline/loop.c — the shared pipeline's thread and event loop: every writer's ranges
 * grouped into segments (the files of dstl/pipeline/: pipeline_int.h).
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
#include <sys/prctl.h>
#include <unistd.h>

#include "dstl/clock.h"
#include "dstl/err.h"
#include "dstl/future.h"
#include "dstl/handle.h"
#include "dstl/local/segstore.h"
#include "dstl/metrics.h"
#include "dstl/pipeline/pipeline_int.h"
#include "dstl/registry.h"
#include "dstl/remote/remote.h"
#include "dstl/storage.h"
#include "s3/s3.h"

/* Names reserved ahead of the segment being built, so a flush does not wait for a
 * directory fsync. reserve_ahead tops the reservations up to RESERVE_HIGH once fewer than
 * RESERVE_LOW are left, in one group (one shared directory fsync): one reservation per flush
 * would put a directory fsync next to every segment's fdatasync. The loop calls it when the
 * disk is idle, and under constant load only when fewer than 2 are left (so the group's fsync
 * rarely queues beside a segment's fdatasync). 32 is a few seconds of segments at a 10 ms
 * persist-delay and leaves at most 32 empty files after a crash. */
#define RESERVE_LOW 8u
#define RESERVE_HIGH 32u

/* Spare files (remove_local): only segments up to SPARE_FILE_MAX bytes, whose directory write
 * is a large part of their fdatasync, and at most SPARE_BYTES_MAX in all stay on disk so. */
#define SPARE_FILE_MAX (1ull << 20)
#define SPARE_BYTES_MAX (32ull << 20)

/* With persist-delay 0, a batch flushes while fewer than this many segments are being
 * written: 1 is the leader/follower group commit. Measured here (64 committers, ext4 on a
 * 2-core VM): 1 gives ~29,700 commits/s, 2 ~27,500, 3 ~24,000 — overlapping fdatasyncs on
 * different files only split the groups. */
#define GROUP_COMMIT_DEPTH 1u

/* dstl.metrics.file is rewritten this often: Prometheus scrapes every 10-60 s typically. */
#define METRICS_INTERVAL_NS 1000000000ull

void pipeline_wake(dstl_storage *s)
{
    uint64_t one = 1;
    ssize_t n = write(s->wake_fd, &one, sizeof one);
    (void)n;                    /* EAGAIN: the counter is already non-zero, the loop will run */
}

int pipeline_kick(dstl_storage *s)
{
    if (s->locked.pipe.kicked) return 0;
    s->locked.pipe.kicked = 1;
    return 1;
}

int pipeline_kick_deletes(dstl_storage *s) { return s->locked.reg.delete_head ? pipeline_kick(s) : 0; }

int pipeline_enqueue(dstl_storage *s, dstl_writer *w, range *r)
{
    pipeline_section *b = w->spare_sec ? w->spare_sec : calloc(1, sizeof *b);
    if (!b) return err_fail(-ENOMEM, "writer %s: out of memory", w->id);
    w->spare_sec = NULL;       /* dstl_persist's, made before s->mu: a fresh calloc */
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

/* Local segment writes accepted and not yet called back, read now: a completion that ran in
 * this turn's segstore_poll must count at once, or group commit would wait for a write that
 * is over, with nothing left to wake the loop (the open batch would never flush). */
static unsigned local_writes_in_flight(const dstl_storage *s)
{
    struct segstore_stats st;
    segstore_stats(s->store, &st);
    return st.inflight;
}

/* Recycles the newest spare file into name (a reservation); 0, or -1 when none could be. A
 * spare that cannot be recycled (removed under the store) is unlinked and the next tried. */
static int spare_recycle(pipeline_loop *loop, const char *name)
{
    while (loop->n_spare) {
        pipeline_spare *p = &loop->spare[--loop->n_spare];
        loop->spare_bytes -= p->size;
        if (segstore_recycle(loop->s->store, p->name, name) == 0) return 0;
        (void)segstore_unlink(loop->s->store, p->name);
    }
    return -1;
}

/* The storage has been idle for a while, or closes: the spare files go. DURABILITY: like every
 * unlink, durable with the store's next directory fsync (segstore_close makes one); a crash
 * before it may bring the files back as orphans for gc. */
static void spares_unlink(pipeline_loop *loop)
{
    while (loop->n_spare) (void)segstore_unlink(loop->s->store, loop->spare[--loop->n_spare].name);
    loop->spare_bytes = 0;
}

static void reserve_ahead(pipeline_loop *loop)
{
    dstl_storage *s = loop->s;
    pthread_mutex_lock(&s->mu);
    uint64_t next = s->locked.reg.next_seg_no;
    pthread_mutex_unlock(&s->mu);
    if (loop->reserved_upto < next) loop->reserved_upto = next;
    if (loop->reserved_upto < next + RESERVE_LOW) {
        while (loop->reserved_upto < next + RESERVE_HIGH) {
            char name[64];
            segment_name_format(s->run_id, loop->reserved_upto, name, sizeof name);
            if (spare_recycle(loop, name) < 0 && segstore_reserve(s->store, name) < 0)
                break; /* the write creates it then */
            loop->reserved_upto++;
        }
    }
    /* The names reserved and recycled so far (their directory fsync waits until something
     * asks: segstore.h) become durable now, while the disk is idle or ahead of their writes. */
    segstore_sync_reserved(s->store);
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

/* Removes the local file of a deleted segment g.
 *
 * While segments are being written, a small one's file is kept as a spare (within SPARE_MAX
 * files and SPARE_BYTES_MAX bytes) for reserve_ahead to recycle with the next group of names.
 * The directory then changes in groups, once per ~RESERVE_HIGH segments, not once per segment.
 * That matters on ext4 without a journal: a file given a new name (created or recycled) makes
 * its first fsync write its directory too when the directory is dirty. A rename per deletion
 * kept it dirty, so every segment's fdatasync wrote a directory block: ~100 us more per
 * segment here (perf/README.md, "Spare files"). Spares go when the storage has been idle for
 * CHUNK_POOL_IDLE_NS (idle_trim) or closes.
 *
 * Otherwise the file is recycled into the next name to reserve while fewer than RESERVE_HIGH
 * are reserved ahead (no inode to create for that segment, none to free for this one), else
 * unlinked. 0 or -ENOENT when it is gone (or kept as a spare), else -errno. */
static int remove_local(pipeline_loop *loop, const run_segment *g, uint64_t next)
{
    dstl_storage *s = loop->s;
    if (loop->reserved_upto && loop->reserved_upto < next) loop->reserved_upto = next;
    if (loop->reserved_upto && g->has_local && g->size <= SPARE_FILE_MAX && loop->n_spare < SPARE_MAX &&
        loop->spare_bytes + g->size <= SPARE_BYTES_MAX && (loop->open || local_writes_in_flight(s))) {
        /* DURABILITY: nothing refers to the segment any more; its file stays under its own name
         * until recycled or unlinked. A crash leaves it as an orphan for gc. */
        pipeline_spare *p = &loop->spare[loop->n_spare++];
        snprintf(p->name, sizeof p->name, "%s", g->name);
        p->size = g->size;
        loop->spare_bytes += g->size;
        return 0;
    }
    if (loop->reserved_upto && loop->reserved_upto < next + RESERVE_HIGH) {
        char to[64];
        segment_name_format(s->run_id, loop->reserved_upto, to, sizeof to);
        if (segstore_recycle(s->store, g->name, to) == 0) {
            loop->reserved_upto++;
            return 0;
        }
    }
    /* DURABILITY: the unlink becomes durable with the store's next directory fsync; a crash
     * before it may bring the file back as an orphan that dstl gc removes. */
    return segstore_unlink(s->store, g->name);
}

/* Deletes segments nobody references any more (their counts reached zero under s->mu):
 * the local file now, the remote objects in DeleteObjects batches. A segment whose upload
 * still runs waits for it, so its object cannot appear after its deletion. */
static void run_deletes(pipeline_loop *loop)
{
    dstl_storage *s = loop->s;
    pthread_mutex_lock(&s->mu);
    uint64_t next_no = s->locked.reg.next_seg_no;
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
        int rc = remove_local(loop, g, next_no);
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
    /* Files recycled while no segment is being written become durable names now, ahead of
     * the next write: until then the directory is dirty, and that write's fdatasync would
     * write it (ext4 without a journal: remove_local). At light load the next write came
     * ~10 ms later with the directory still dirty, every other segment. */
    if (!loop->open && local_writes_in_flight(s) == 0) segstore_sync_reserved(s->store);
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
static int64_t next_remote_deadline_ms(const pipeline_loop *loop)
{
    uint64_t next = UINT64_MAX, now = now_ns();
    for (const batch *b = loop->inflight_list; b; b = b->next_inflight)
        if (b->op && b->remote_deadline_ns < next) next = b->remote_deadline_ns;
    if (loop->open && loop->s->conf.durability == CFG_DURABILITY_REMOTE && loop->open->remote_deadline_ns &&
        loop->open->remote_deadline_ns < next)
        next = loop->open->remote_deadline_ns;
    uint64_t lease_due = lease_next_deadline(loop);
    if (lease_due < next) next = lease_due;
    if (next == UINT64_MAX) return -1;
    return next <= now ? 0 : (int64_t)((next - now + 999999) / 1000000);
}

/* Cancels uploads that passed their bound; copies the client's counters into the stats. */
static void remote_tick(pipeline_loop *loop)
{
    dstl_storage *s = loop->s;
    uint64_t now = now_ns();
    for (batch *b = loop->inflight_list; b; b = b->next_inflight)
        if (b->op && now >= b->remote_deadline_ns) {
            s3_op_cancel(b->op);          /* on_uploaded runs on the next turn, -ECANCELED */
            b->op = NULL;
        }
    for (batch *b = loop->inflight_list; b; b = b->next_inflight)
        if (b->await_lease && now >= b->remote_deadline_ns) {
            char why[900];
            snprintf(why, sizeof why, "the run's lease s3://%.63s/%.300s was not written within the bound (%.400s)",
                     s->remote.bucket, s->loop.lease_key, loop->lease.err[0] ? loop->lease.err : "no answer");
            batch_remote_fail(b, DSTL_EREMOTE, why);
            batch_progress(s, b);
        }
    pthread_mutex_lock(&s->mu);
    int closing = s->locked.pipe.closing;
    pthread_mutex_unlock(&s->mu);
    lease_tick(loop, now, closing);
    batch *o = loop->open;
    if (o && s->conf.durability == CFG_DURABILITY_REMOTE && o->remote_deadline_ns && now >= o->remote_deadline_ns) {
        /* Still not written at its futures' bound (it waited for room, or behind a segment
         * being written): it fails unwritten; its records stay for the next persist. */
        char why[300];
        snprintf(why, sizeof why, "not written within the bound of dstl.batch.persist-delay + "
                 "dstl.upload.max-attempts x dstl.upload.timeout + %u ms", REMOTE_SLACK_MS);
        batch_fail_open(loop, DSTL_EREMOTE, why);
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

static int flush_due(const pipeline_loop *loop, int closing, uint64_t now)
{
    const dstl_storage *s = loop->s;
    const batch *b = loop->open;
    if (!b) return 0;
    if (b->deferred) {
        pthread_mutex_lock(&loop->s->mu);
        int waits = batch_flush_waits(loop);
        pthread_mutex_unlock(&loop->s->mu);
        if (waits) return 0;          /* its room comes with a segment's end: a later turn */
        return 1;
    }
    if (closing || b->all_in || b->bytes >= s->conf.persist_size_threshold_bytes) return 1;
    if (s->conf.persist_delay_us == 0) return local_writes_in_flight(s) < GROUP_COMMIT_DEPTH;
    return now >= b->opened_ns + s->conf.persist_delay_us * 1000;
}

/* A lease write ended: the batches that waited for the run's first lease upload now, or fail. */
static void lease_written(pipeline_loop *loop, const s3_result *r)
{
    dstl_storage *s = loop->s;
    for (batch *b = loop->inflight_list; b; b = b->next_inflight) {
        if (!b->await_lease) continue;
        if (r->err == 0) {
            batch_upload_start(loop, b);
        } else {
            char why[900];
            snprintf(why, sizeof why, "the run's lease s3://%.63s/%.300s could not be written: %.400s",
                     s->remote.bucket, s->loop.lease_key, r->error);
            batch_remote_fail(b, DSTL_EREMOTE, why);
        }
        batch_progress(s, b);
    }
}

/* Waits for work: the eventfd, the store's completions, libcurl's sockets and timers, with the
 * open batch's deadline (and the remote deadlines) as timeout. -1 when polling itself failed. */
static int wait_for_work(pipeline_loop *loop)
{
    dstl_storage *s = loop->s;
    int timeout_ms = -1;
    uint64_t wait_ns = UINT64_MAX;      /* the batch deadline, to the nanosecond */
    if (loop->open && s->conf.persist_delay_us > 0) {
        uint64_t due = loop->open->opened_ns + s->conf.persist_delay_us * 1000, now = now_ns();
        wait_ns = due <= now ? 0 : due - now;
        /* libcurl's loop takes milliseconds: round up there, waking early would only spin */
        timeout_ms = (int)((wait_ns + 999999) / 1000000);
    }
    if (*s->conf.metrics_file && (timeout_ms < 0 || timeout_ms > 1000)) timeout_ms = 1000;
    if (loop->idle_since_ns &&
        (chunk_pool_bytes(&s->chunks) > CHUNK_POOL_MIN || pool_kept_bytes(&loop->pool) || loop->n_spare)) {
        /* idle: wake to trim the chunk pool and the free segment buffers, and to unlink the
         * spare files (idle_trim) */
        uint64_t due = loop->idle_since_ns + CHUNK_POOL_IDLE_NS, now = now_ns();
        int ms = due <= now ? 0 : (int)((due - now + 999999) / 1000000);
        if (timeout_ms < 0 || ms < timeout_ms) {
            timeout_ms = ms;
            wait_ns = (uint64_t)ms * 1000000;
        }
    }
    if (s->loop.s3) {
        /* one loop for both: libcurl's sockets and timers, our eventfd, the store's fd;
         * uploads in flight are checked against their bound every 100 ms */
        if ((loop->inflight_list || loop->open) && (timeout_ms < 0 || timeout_ms > 100)) timeout_ms = 100;
        int64_t until = next_remote_deadline_ms(loop);
        if (until >= 0 && (timeout_ms < 0 || until < timeout_ms)) timeout_ms = (int)until;
        s3_waitfd wf[2] = {{s->wake_fd, POLLIN, 0}, {segstore_event_fd(s->store), POLLIN, 0}};
        s3_client_run(s->loop.s3, wf, 2, timeout_ms);
    } else {
        /* ppoll: a 10 ms persist-delay must not become 11 ms by rounding */
        struct pollfd pf[2] = {{s->wake_fd, POLLIN, 0}, {segstore_event_fd(s->store), POLLIN, 0}};
        if (timeout_ms >= 0 && (uint64_t)timeout_ms * 1000000 < wait_ns) wait_ns = (uint64_t)timeout_ms * 1000000;
        struct timespec ts = {(time_t)(wait_ns / 1000000000), (long)(wait_ns % 1000000000)};
        if (ppoll(pf, 2, wait_ns == UINT64_MAX ? NULL : &ts, NULL) < 0 && errno != EINTR) return -1;
    }
    uint64_t v;
    ssize_t rn = read(s->wake_fd, &v, sizeof v);   /* non-blocking: EAGAIN when not kicked */
    (void)rn;
    return 0;
}

/* Moves every queued section into the open batch (opened if needed) and returns whether the
 * storage is closing. *has_deletes: segments wait to be deleted. Takes s->mu. */
static int take_queue(pipeline_loop *loop, int *has_deletes)
{
    dstl_storage *s = loop->s;
    pthread_mutex_lock(&s->mu);
    /* Whatever is queued from here on kicks again (it is not taken in this turn). */
    s->locked.pipe.kicked = 0;
    int closing = s->locked.pipe.closing;
    if (s->locked.pipe.q_head && !loop->open && (loop->open = calloc(1, sizeof *loop->open))) {
        loop->open->s = s;
        loop->open->tail = &loop->open->head;
        /* its age is its first range's: the persist that handed it off waits persist-delay
         * from its hand-off, not from whenever this thread got to run (a loaded machine can
         * take milliseconds to wake it) */
        loop->open->opened_ns = s->locked.pipe.q_head->t_enq_ns;
        loop->open->loop = loop;
    }
    /* Memory for the batch is one small struct; if even that fails the queue waits for the
     * next round. */
    batch *b = loop->open;
    while (b && s->locked.pipe.q_head) {
        pipeline_section *x = s->locked.pipe.q_head;
        s->locked.pipe.q_head = x->next;
        x->next = NULL;
        *b->tail = x;
        b->tail = &x->next;
        b->n++;
        b->bytes += x->r->rec_bytes;
        b->reserve += x->r->enc_reserve;
        uint64_t due = section_due_ns(s, x);
        if (!b->remote_deadline_ns || due < b->remote_deadline_ns) b->remote_deadline_ns = due;
        s->locked.pipe.q_len--;
    }
    if (!s->locked.pipe.q_head) s->locked.pipe.q_tail = &s->locked.pipe.q_head;
    /* Every writer's persist counted in this epoch is in b now (a persist queues its ranges
     * before it counts, under this lock). All in: b closes this turn, and persists from here
     * on count for the next batch. Without b (every persist had nothing to send) the epoch
     * starts over too, so a later batch does not close on stale counts. */
    if (s->conf.close_when_all_in && s->locked.nwriters > 0 &&
        s->locked.pipe.epoch_writers >= s->locked.nwriters) {
        if (b) b->all_in = 1;
        s->locked.pipe.persist_epoch++;
        s->locked.pipe.epoch_writers = 0;
    }
    *has_deletes = s->locked.reg.delete_head != NULL;
    pthread_mutex_unlock(&s->mu);
    return closing;
}

/* A pipeline with nothing open or in flight for CHUNK_POOL_IDLE_NS trims the writers' chunk
 * pool to CHUNK_POOL_MIN: the pool may hold up to the headroom under max-in-flight while
 * records flow (dstl/chunks.c), not while the storage has nothing to do. */
static void idle_trim(pipeline_loop *loop)
{
    if (loop->open || loop->inflight_list) {
        loop->idle_since_ns = 0;
        return;
    }
    uint64_t now = now_ns();
    if (!loop->idle_since_ns) loop->idle_since_ns = now;
    else if (now - loop->idle_since_ns >= CHUNK_POOL_IDLE_NS) {
        chunk_pool_trim(&loop->s->chunks, CHUNK_POOL_MIN);
        pool_trim(&loop->pool);
        spares_unlink(loop);
    }
}

/* Whether a closing storage is done: nothing open, in flight, queued or to delete. */
static int drained(const pipeline_loop *loop)
{
    dstl_storage *s = loop->s;
    if (loop->open || loop->inflight_list || (s->loop.s3 && s3_client_pending(s->loop.s3) > 0)) return 0;
    pthread_mutex_lock(&s->mu);
    int idle = !s->locked.pipe.q_head && !s->locked.reg.delete_head;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

static void *pipeline_main(void *arg)
{
    pipeline_loop loop = {.s = arg, .lease = {.written = lease_written}};
    dstl_storage *s = loop.s;
    /* segment buffers: what is in flight at once, twice (a run may not fit in the free ones) */
    loop.pool.arena_bytes = 2 * s->conf.max_in_flight_bytes;
    /* A batch's deadline is a ppoll timeout, and Linux lets a timer fire up to the thread's
     * timer slack late (50 us by default) to coalesce wake-ups. This thread sleeps on a
     * deadline only while a batch is open, and that lateness is every persist's: at light
     * load (bench_local light) it woke 109 us after the deadline at the median with the
     * default slack, 70 us with 1 us. Best effort: a refusal only leaves the default. */
    (void)prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
    while (wait_for_work(&loop) == 0) {
        segstore_poll(s->store);
        if (s->loop.s3) remote_tick(&loop);
        /* Waiters of the batches these steps ended wake now, before this turn encodes the
         * next segment: their next persists then ride in the segment after it. */
        future_signal_completed();
        batch_reap(&loop);
        if (*s->conf.metrics_file && now_ns() >= s->loop.metrics_due_ns) {
            metrics_write_file(s);
            s->loop.metrics_due_ns = now_ns() + METRICS_INTERVAL_NS;
        }
        int has_deletes;
        int closing = take_queue(&loop, &has_deletes);
        /* Names are reserved once there is something to write (a storage opened only to read
         * or sweep creates no files), then kept ahead: while the disk is idle, so the directory
         * fsync does not queue beside a segment's fdatasync; under constant load, when almost
         * none are left. */
        if (loop.open && loop.reserved_upto == 0) reserve_ahead(&loop);
        else if (loop.reserved_upto && ((!loop.open && local_writes_in_flight(s) == 0) ||
                                        loop.reserved_upto < s->locked.reg.next_seg_no + 2))
            reserve_ahead(&loop);
        if (has_deletes) run_deletes(&loop);
        /* A large batch is encoded as its sections join (batch_encode_open); one due now
         * that has not started is encoded in one pass by its flush. */
        if (loop.open && (loop.open->bld || !flush_due(&loop, closing, now_ns()))) batch_encode_open(&loop);
        if (flush_due(&loop, closing, now_ns())) batch_flush(&loop);
        /* The callbacks of the futures this turn completed: no lock is held here, so they may
         * persist again (include/dstl.h, dstl_future_on_done). */
        future_run_callbacks();
        idle_trim(&loop);
        atomic_store_explicit(&s->rd.seg_buffers_idle, pool_kept_bytes(&loop.pool), memory_order_relaxed);
        if (closing && drained(&loop)) break;
    }
    spares_unlink(&loop);
    future_run_callbacks();
    /* The run's final totals, so the file does not stop up to a second short of them. */
    if (*s->conf.metrics_file) metrics_write_file(s);
    pool_free(&loop.pool);
    return NULL;
}

int pipeline_start(dstl_storage *s)
{
    int rc = pthread_create(&s->loop.thread, NULL, pipeline_main, s);
    if (rc != 0) return err_fail(-rc, "storage: cannot start the pipeline thread: %s", strerror(rc));
    s->loop.thread_started = 1;
    /* named before anyone can look (top -H, perf, gdb tell it from the application's) */
    (void)pthread_setname_np(s->loop.thread, "dstl-pipeline");
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

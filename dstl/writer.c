/*
 * dstl/writer.c — writers: append, persist, truncate, close.
 *
 * A writer is used by one thread at a time. Appends copy the record into the writer's own
 * chunk (wire's pending-record format) with no lock and no syscall. A *hand-off* gives the
 * records from the unsent position to next_seq to the pipeline as one `range`; it happens at
 * persist, or ahead of it when the writer holds dstl.preemptive-persist-threshold bytes.
 *
 * Range states (under s->mu): INFLIGHT (in a batch) -> DURABLE (in a segment) or FAILED (its
 * batch failed: the next persist over it sends its records again, from the chunks when the
 * batch failed before encoding, else rebuilt from the failed segment: pipeline/retain.c).
 * Chunks are freed once every record in them is durable, truncated or encoded.
 *
 * persist(from) builds a future from the ranges over [from, next_seq): durable ones become
 * pieces at once (pinned, so no truncate can delete them: FLINK-28440), in-flight ones add a
 * waiter to their section, failed ones and the unsent tail are sent. With nothing to wait
 * for, the future is complete when persist returns, and no I/O happens.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dstl/err.h"
#include "dstl/future.h"
#include "dstl/objcache.h"
#include "dstl/pipeline.h"
#include "dstl/registry.h"
#include "dstl/storage.h"
#include "dstl/writer.h"

/* ---- chunks (the pool and the pipeline's release: dstl/chunks.c) ---- */

/* chunks_release reads the tail chunk's header under s->mu; at 1,024 writers on 8 threads it
 * is out of this core's cache by then (the thread has filled 127 other writers' chunks since),
 * and the miss lengthened everyone's wait for s->mu. The tail is the writer thread's: asked
 * for before the lock. */
static inline void tail_prefetch(const dstl_writer *w)
{
    if (w->tail) __builtin_prefetch(w->tail);
}

/* Frees leading chunks whose records are no longer needed; writer thread, s->mu held. */
static void chunks_release(dstl_writer *w)
{
    writer_release_sent_chunks(w);
    /* The last chunk too, once all of it is sent and no longer needed: the next append starts
     * a chunk sized to what the writer appends now, so memory stays flat in the number of
     * writers (1,000 writers each keeping a grown 1 MiB chunk would hold 1 GiB). */
    chunk *t = w->tail;
    if (t && w->head == t && w->sent_chunk == t && w->sent_off == t->used && t->seq_first + t->nrec <= chunk_floor(w)) {
        chunk_put(&w->s->chunks, t, chunk_pool_room(w->s));
        w->head = w->tail = w->sent_chunk = NULL;
        w->sent_off = 0;
    }
}

static int chunk_grow(dstl_writer *w, size_t need)
{
    /* Sized to what this writer holds unsent (it grows geometrically while records pile up
     * between hand-offs), or to what its last hand-off held beyond that (a writer persisting
     * at a steady rate fills about as much between hand-offs each time: starting small again
     * after one made each round's chunks 4 + 4 + 8 + ... KiB, twice its records in memory and
     * a malloc per doubling), within CHUNK_MIN..CHUNK_MAX. The cost, measured (bench_local
     * load, 3 alternating pairs): at 1,024 writers peak RSS 195-205 -> 128-131 MB for 6-8 %
     * more CPU per MB, glibc now trimming the arena tops the larger chunks free and faulting
     * them in again (page faults 68 K -> 690 K in 4 s); at 256 writers RSS 173-180 -> 152-163
     * MB at the same CPU. The pool (chunks.c) now keeps freed chunks up to the headroom under
     * max-in-flight, counting their touched pages: at 1,024 writers (2026-12-06, 4 s runs)
     * CPU per MB 3,418-4,923 -> 984-1,243 us and RSS 126-142 -> 158-176 MB (161-162 since
     * chunks of 32 KiB and more are mapped: chunks.c, CHUNK_MAP_MIN, which has the dead ends). */
    size_t want = w->unsent_bytes > need ? (size_t)w->unsent_bytes : need, cap = CHUNK_MIN;
    uint64_t hint = w->last_handoff_bytes > w->unsent_bytes ? w->last_handoff_bytes - w->unsent_bytes : 0;
    if (hint > CHUNK_HINT_MAX) hint = CHUNK_HINT_MAX;
    if (hint > want) want = (size_t)hint;
    while (cap < want && cap < CHUNK_MAX) cap *= 2;
    if (cap < need) cap = need;
    chunk *c = chunk_new(&w->s->chunks, cap, w->next_seq, w->payload_total);
    if (!c) return err_fail(-ENOMEM, "writer %s: out of memory for a %zu-byte chunk", w->id, cap);
    if (w->tail) {
        w->tail->next = c;
        w->tail = c;
        return 0;
    }
    /* A new list: head and sent_chunk are read by the pipeline (writer_release_sent_chunks) */
    pthread_mutex_lock(&w->s->mu);
    w->head = w->tail = w->sent_chunk = c;
    w->sent_off = 0;
    pthread_mutex_unlock(&w->s->mu);
    return 0;
}

/* ---- open / close ---- */

int dstl_writer_open(dstl_storage *s, const char *writer_id, uint32_t key_group_first,
                     uint32_t key_group_last, dstl_writer **out)
{
    if (!s || !writer_id || !out) return err_fail(-EINVAL, "dstl_writer_open: NULL argument");
    size_t idlen = strlen(writer_id);
    if (idlen == 0 || idlen > 255)
        return err_fail(-EINVAL, "dstl_writer_open: writer id must be 1 to 255 bytes, got %zu", idlen);
    if (key_group_first > key_group_last)
        return err_fail(-EINVAL, "dstl_writer_open %s: key group range %u-%u is empty", writer_id,
                        key_group_first, key_group_last);
    dstl_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->id = strdup(writer_id))) {
        free(w);
        return err_fail(-ENOMEM, "dstl_writer_open: out of memory");
    }
    w->s = s;
    w->persist_epoch = UINT64_MAX;          /* counted in no epoch yet */
    w->kg_first = key_group_first;
    w->kg_last = key_group_last;
    w->preempt_bytes = s->conf.preemptive_persist_threshold_bytes;
    w->tally_lo = UINT32_MAX;
    if ((uint64_t)key_group_last - key_group_first < WRITER_TALLY_MAX_KG)   /* else the encoder counts */
        w->tally = calloc((size_t)(key_group_last - key_group_first) + 1, sizeof *w->tally);

    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->locked.pipe.closing) rc = err_fail(DSTL_ECLOSED, "dstl_writer_open %s: storage is closing", writer_id);
    for (dstl_writer *o = s->locked.writers; o && rc == 0; o = o->next_open)
        if (strcmp(o->id, writer_id) == 0)
            rc = err_fail(-EBUSY, "dstl_writer_open: writer '%s' is already open in this storage", writer_id);
    if (rc == 0) {
        w->incarnation = ++s->locked.writer_incarnations;
        w->next_open = s->locked.writers;
        s->locked.writers = w;
        s->locked.nwriters++;
    }
    pthread_mutex_unlock(&s->mu);
    if (rc < 0) {
        free(w->tally);
        free(w->id);
        free(w);
        return rc;
    }
    *out = w;
    return 0;
}

uint64_t dstl_writer_next_seq(const dstl_writer *cw)
{
    /* The answer is often the backend's next materialization point (a later persist's
     * `from`): remember the payload total there so that persist knows its size exactly.
     * The writer object is never const-defined (malloc'd), so this write is well-defined,
     * and the writer belongs to the calling thread. */
    dstl_writer *w = (dstl_writer *)cw;
    unsigned i = w->mark_i++ % 8;
    w->mark_seq[i] = w->next_seq;
    w->mark_payload[i] = w->payload_total;
    return w->next_seq;
}

int dstl_writer_close(dstl_writer *w)
{
    if (!w) return 0;
    dstl_storage *s = w->s;
    pthread_mutex_lock(&s->mu);
    if (w->inflight_ranges > 0 && future_in_callback()) {
        pthread_mutex_unlock(&s->mu);
        return err_fail(-EAGAIN, "dstl_writer_close %s: records in flight, and a future callback never waits: close "
                                 "it outside the callback", w->id);
    }
    /* The pipeline reads this writer's chunks while a range is in flight: wait for them
     * (bounded by the upload timeouts, like every future). */
    while (w->inflight_ranges > 0) pthread_cond_wait(&s->range_cv, &s->mu);
    for (range *r = w->ranges, *next; r; r = next) {
        next = r->next;
        if (r->state == RANGE_DURABLE) reg_section_release(&s->locked.reg, r->seg);
        range_drop(s, r);
    }
    w->ranges = w->ranges_tail = NULL;
    for (dstl_writer **p = &s->locked.writers; *p; p = &(*p)->next_open)
        if (*p == w) {
            *p = w->next_open;
            break;
        }
    s->locked.nwriters--;
    s->locked.stats.appends_closed += atomic_load_explicit(&w->st_appends, memory_order_relaxed);
    s->locked.stats.append_bytes_closed += atomic_load_explicit(&w->st_append_bytes, memory_order_relaxed);
    int wake = pipeline_kick_deletes(s);
    size_t room = chunk_pool_room(s);
    pthread_mutex_unlock(&s->mu);
    if (wake) pipeline_wake(s);
    for (chunk *c = w->head, *next; c; c = next) {
        next = c->next;
        chunk_put(&s->chunks, c, room);
    }
    free(w->tally);
    oc_free(w->spare_range);
    free(w->spare_sec);
    free(w->spare_tally);
    free(w->returned_tally);
    free(w->id);
    free(w);
    return 0;
}

/* ---- hand-off ---- */

/* A hand-off waiting for room: one per blocked writer, on its stack, in arrival order. */
typedef struct admit_waiter {
    struct admit_waiter *next;
} admit_waiter;

/* Whether cost more bytes fit under dstl.upload.max-in-flight now (s->mu held). A flush the
 * pipeline holds back for room counts as taken: it goes before new hand-offs. The one
 * exception to the bound: a hand-off larger than it is admitted alone, when nothing else is
 * in flight (or it could never go). */
static int room_for(const dstl_storage *s, uint64_t cost)
{
    uint64_t used = s->locked.pipe.in_flight_bytes + s->locked.pipe.flush_need;
    /* "alone": nothing in flight but the retained records of failed batches, which only a
     * retry (the writers' next persists) frees */
    return used == s->locked.pipe.retained_bytes || used + cost <= s->conf.max_in_flight_bytes;
}

static void admit_remove(dstl_storage *s, admit_waiter *me)
{
    for (admit_waiter **pp = &s->locked.pipe.adm_head; *pp; pp = &(*pp)->next)
        if (*pp == me) {
            *pp = me->next;
            return;
        }
}

/* Takes cost bytes of dstl.upload.max-in-flight for a hand-off (s->mu held): at once when
 * nobody waits and they fit, else after every earlier waiting hand-off (arrival order, so a
 * large one is not starved by a stream of small ones), or -EAGAIN (dstl.backpressure: fail),
 * DSTL_ECLOSED. On success the bytes are charged to s->locked.pipe.in_flight_bytes. */
static int wait_room(dstl_storage *s, dstl_writer *w, uint64_t cost)
{
    if (s->locked.pipe.closing) return err_fail(DSTL_ECLOSED, "writer %s: storage is closing", w->id);
    if (s->locked.pipe.adm_head || !room_for(s, cost)) {
        /* inside a future callback nothing blocks (it may run on the pipeline thread, which
         * is what would free the room): -EAGAIN as with backpressure: fail */
        if (s->conf.backpressure == CFG_BACKPRESSURE_FAIL || future_in_callback())
            return err_fail(-EAGAIN, "writer %s: %llu bytes in flight%s, %llu more would pass "
                            "dstl.upload.max-in-flight (%llu)%s", w->id,
                            (unsigned long long)(s->locked.pipe.in_flight_bytes + s->locked.pipe.flush_need),
                            s->locked.pipe.adm_head ? " and hand-offs waiting before this one" : "",
                            (unsigned long long)cost, (unsigned long long)s->conf.max_in_flight_bytes,
                            future_in_callback() ? "; inside a future callback, which never waits" : "");
        admit_waiter me = {NULL}, **tail = &s->locked.pipe.adm_head;
        while (*tail) tail = &(*tail)->next;
        *tail = &me;
        while (s->locked.pipe.adm_head != &me || !room_for(s, cost)) {
            if (s->locked.pipe.closing) {
                admit_remove(s, &me);
                pthread_cond_broadcast(&s->room_cv);
                return err_fail(DSTL_ECLOSED, "writer %s: storage is closing", w->id);
            }
            pthread_cond_wait(&s->room_cv, &s->mu);
        }
        s->locked.pipe.adm_head = me.next;
        pthread_cond_broadcast(&s->room_cv);   /* the next one may fit as well */
    }
    s->locked.pipe.in_flight_bytes += cost;
    return 0;
}

/* Gives back in-flight room taken by wait_room and not used (s->mu held). */
static void room_return(dstl_storage *s, uint64_t cost)
{
    if (!cost) return;
    s->locked.pipe.in_flight_bytes -= cost;
    pthread_cond_broadcast(&s->room_cv);
}

/* Key groups in the unsent records' tally: entries [tally_lo, tally_hi]. Writer thread. */
static uint32_t tally_span(const dstl_writer *w)
{
    return w->tally_lo <= w->tally_hi ? w->tally_hi - w->tally_lo + 1 : 0;
}

/* Hands the unsent records' tally to their range (NULL, and the encoder counts, when there is
 * none or no memory for it) and starts the next one; writer thread. */
static wire_section_tally *take_tally(dstl_writer *w, uint64_t payload_bytes, uint32_t *cap)
{
    *cap = 0;
    if (!w->tally) return NULL;
    uint32_t lo = w->tally_lo, n = tally_span(w);
    wire_section_tally *t = NULL;
    if (!w->tally_bad && w->spare_tally && w->spare_tally_n >= n) {
        t = w->spare_tally;
        *cap = w->spare_tally_n;
        w->spare_tally = NULL;
    } else if (!w->tally_bad && (t = malloc(sizeof *t + n * sizeof *w->tally))) {
        *cap = n;
    }
    if (t) {
        wire_kg_tally *kg = (wire_kg_tally *)(t + 1);
        if (n) memcpy(kg, w->tally + lo, n * sizeof *kg);
        *t = (wire_section_tally){.kg_lo = n ? w->kg_first + lo : 0, .nkg = n, .kg = kg,
                                  .meta = w->tally_meta, .payload_bytes = payload_bytes};
    }
    if (n) memset(w->tally + lo, 0, n * sizeof *w->tally);
    w->tally_meta = (wire_kg_tally){0};
    w->tally_lo = UINT32_MAX;
    w->tally_hi = 0;
    w->tally_bad = 0;
    return t;
}

/* Turns the unsent records into a new in-flight range at the end of w->ranges (s->mu held;
 * writer thread). */
static int handoff_tail(dstl_writer *w, range **out)
{
    range *r = w->spare_range ? w->spare_range : oc_calloc(sizeof *r);
    size_t nspans = 0;
    for (chunk *c = w->sent_chunk; c; c = c->next) nspans++;
    if (r) r->spans = nspans <= 2 ? r->span_buf : malloc(nspans * sizeof *r->spans);
    if (!r || !r->spans) {
        if (r != w->spare_range) oc_free(r);
        return err_fail(-ENOMEM, "writer %s: out of memory", w->id);
    }
    w->spare_range = NULL;
    for (chunk *c = w->sent_chunk; c; c = c->next) {
        size_t off = c == w->sent_chunk ? w->sent_off : 0;
        if (c->used > off) r->spans[r->nspans++] = (wire_span){c->data + off, c->used - off};
    }
    r->seq_first = w->sent_seq;
    r->seq_end = w->next_seq;
    r->payload_first = w->sent_payload;
    r->payload_bytes = w->payload_total - w->sent_payload;
    r->rec_bytes = w->unsent_bytes;
    r->tally = take_tally(w, r->payload_bytes, &r->tally_cap);
    r->in_chunks = 1;
    r->state = RANGE_FAILED;             /* pipeline_enqueue makes it in flight */
    if (w->ranges_tail) w->ranges_tail->next = r;
    else w->ranges = r;
    w->ranges_tail = r;
    w->sent_chunk = w->tail;
    w->sent_off = w->tail->used;
    w->sent_seq = w->next_seq;
    w->sent_payload = w->payload_total;
    w->last_handoff_bytes = w->unsent_bytes;
    w->unsent_bytes = 0;
    *out = r;
    return 0;
}

/* Sends failed ranges that end after `from`, then the unsent tail. s->mu held.
 * Returns the number of ranges queued. */
static int send_ranges(dstl_writer *w, uint64_t from)
{
    dstl_storage *s = w->s;
    /* A failed range's records are still charged (retained): a retry needs room only for its
     * encoding reserve. */
    uint64_t cost = w->unsent_bytes ? w->unsent_bytes + pipeline_enc_reserve(s, w->unsent_bytes) : 0;
    for (range *r = w->ranges; r; r = r->next)
        if (r->state == RANGE_FAILED && r->seq_end > from) {
            if (r->lost)
                return err_fail(r->lost, "writer %s: records [%llu, %llu) are lost: their batch failed and they "
                                "could not be rebuilt from its segment (%s)", w->id, (unsigned long long)r->seq_first,
                                (unsigned long long)r->seq_end, dstl_strerror(r->lost));
            cost += r->rec_bytes + pipeline_enc_reserve(s, r->rec_bytes) - r->retained;
        }
    if (cost == 0) return 0;
    /* A failed local store is fail-stop for local durability; with remote durability the
     * object store still makes persists durable (the local copy is then simply absent). */
    if (s->locked.store_err && s->conf.durability == CFG_DURABILITY_LOCAL)
        return err_fail(-EIO, "writer %s: no further segments are written, the local store failed earlier "
                        "(fail-stop): %s", w->id, s->locked.store_err_msg);
    int rc = wait_room(s, w, cost);
    if (rc < 0) return rc;
    int queued = 0;
    for (range *r = w->ranges; r; r = r->next)
        if (r->state == RANGE_FAILED && r->seq_end > from) {
            uint64_t retained = r->retained;
            if ((rc = pipeline_enqueue(s, w, r)) < 0) break;
            /* its retained charge is now the in-flight range's */
            s->locked.pipe.retained_bytes -= retained;
            r->retained = 0;
            cost -= r->rec_bytes + r->enc_reserve - retained;
            queued++;
        }
    if (rc == 0 && w->sent_seq < w->next_seq) {
        range *r = NULL;
        if ((rc = handoff_tail(w, &r)) == 0 && (rc = pipeline_enqueue(s, w, r)) == 0) {
            cost -= r->rec_bytes + r->enc_reserve;
            queued++;
        }
    }
    room_return(s, cost);                 /* what could not be queued (out of memory) */
    return rc < 0 ? rc : queued;
}

/* Preemptive hand-off from append (writer thread). */
static int preempt(dstl_writer *w)
{
    dstl_storage *s = w->s;
    pthread_mutex_lock(&s->mu);
    int rc = send_ranges(w, 0);
    int wake = rc > 0 && pipeline_kick(s);
    chunks_release(w);
    pthread_mutex_unlock(&s->mu);
    if (wake) pipeline_wake(s);
    return rc < 0 ? rc : 0;
}

/* ---- append ---- */

/* How far ahead of its end an append prefetches its chunk (put_record). */
#define APPEND_PREFETCH 1024u

/* One header, one copy, counters: the writer thread owns all of it (the stats are relaxed
 * atomics only so dstl_storage_stats may read them from another thread). */
static inline void put_record(dstl_writer *w, int meta, uint32_t kg, const void *data, size_t len, size_t need)
{
    chunk *c = w->tail;
    if (w->tally) {   /* the encoder's counts, while the record is at hand (wire_section_tally) */
        uint64_t rel = w->next_seq - w->sent_seq;
        if (meta) {
            wire_tally_add(&w->tally_meta, rel, len);
        } else {
            uint32_t j = kg - w->kg_first;
            wire_tally_add(&w->tally[j], rel, len);
            if (j < w->tally_lo) w->tally_lo = j;
            if (j > w->tally_hi) w->tally_hi = j;
        }
    }
    size_t at = c->used;
    c->used += wire_rec_put(c->data + at, meta, kg, data, len);
    /* The chunk's lines APPEND_PREFETCH bytes ahead, each once, for the records to come: a
     * record's copy into lines not in the cache waited for each line in turn (1,024 writers
     * appending 32 KiB each a round, their chunks cold from the round before) */
    for (size_t o = (at + APPEND_PREFETCH + 63) & ~(size_t)63; o < c->used + APPEND_PREFETCH && o < c->cap; o += 64)
        __builtin_prefetch(c->data + o, 1, 3);
    c->nrec++;
    w->next_seq++;
    w->payload_total += len;
    w->unsent_bytes += need;
    atomic_store_explicit(&w->st_appends, atomic_load_explicit(&w->st_appends, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    atomic_store_explicit(&w->st_append_bytes, atomic_load_explicit(&w->st_append_bytes, memory_order_relaxed) + len,
                          memory_order_relaxed);
}

static int append_slow(dstl_writer *w, int meta, uint32_t kg, const void *data, size_t len, size_t need)
{
    if (w->unsent_bytes >= w->preempt_bytes) {
        int rc = preempt(w);
        if (rc < 0) return rc;
    }
    if (!w->tail || w->tail->cap - w->tail->used < need) {
        if (w->tail) {              /* head is read under s->mu only (the pipeline frees chunks too) */
            dstl_storage *s = w->s;
            pthread_mutex_lock(&s->mu);
            chunks_release(w);
            pthread_mutex_unlock(&s->mu);
        }
        int rc = chunk_grow(w, need);
        if (rc < 0) return rc;
    }
    put_record(w, meta, kg, data, len, need);
    return 0;
}

static inline int append_rec(dstl_writer *w, int meta, uint32_t kg, const void *data, size_t len)
{
    if (len > WIRE_REC_MAX_LEN)
        return err_fail(-EINVAL, "writer %s: record of %zu bytes exceeds the %u-byte limit", w->id, len,
                        WIRE_REC_MAX_LEN);
    if (len && !data) return err_fail(-EINVAL, "writer %s: NULL data with length %zu", w->id, len);
    size_t need = wire_rec_size(len);
    const chunk *c = w->tail;
    if (__builtin_expect(!c || c->cap - c->used < need || w->unsent_bytes >= w->preempt_bytes, 0))
        return append_slow(w, meta, kg, data, len, need);
    put_record(w, meta, kg, data, len, need);
    return 0;
}

int dstl_append(dstl_writer *w, uint32_t key_group, const void *data, size_t len)
{
    if (!w) return err_fail(-EINVAL, "dstl_append: writer is NULL");
    if (key_group < w->kg_first || key_group > w->kg_last)
        return err_fail(-EINVAL, "writer %s: key group %u outside its range %u-%u", w->id, key_group,
                        w->kg_first, w->kg_last);
    return append_rec(w, 0, key_group, data, len);
}

int dstl_append_meta(dstl_writer *w, const void *data, size_t len)
{
    if (!w) return err_fail(-EINVAL, "dstl_append_meta: writer is NULL");
    return append_rec(w, 1, 0, data, len);
}

/* ---- persist ---- */

/* Payload bytes before seq `at` inside range r, or UINT64_MAX when no longer known. */
static uint64_t payload_at(const dstl_writer *w, const range *r, uint64_t at)
{
    if (at == r->seq_first) return r->payload_first;
    if (at == r->seq_end) return r->payload_first + r->payload_bytes;
    for (unsigned i = 0; i < 8; i++)
        if (w->mark_seq[i] == at && (w->mark_i > i || w->mark_i >= 8)) return w->mark_payload[i];
    if (r->state == RANGE_DURABLE) return UINT64_MAX;   /* its chunks may be gone */
    /* Still buffered: walk the record headers from the range's first span. */
    uint64_t seq = r->seq_first, payload = r->payload_first;
    for (size_t i = 0; i < r->nspans; i++) {
        const uint8_t *p = r->spans[i].p, *end = p + r->spans[i].len;
        while (p < end) {
            if (seq == at) return payload;
            uint32_t lf;
            memcpy(&lf, p, 4);
            size_t len = lf & ~WIRE_REC_META;
            payload += len;
            p += wire_rec_size(len);
            seq++;
        }
    }
    return seq == at ? payload : UINT64_MAX;
}

int dstl_persist(dstl_writer *w, uint64_t from_seq, uint64_t checkpoint_id, dstl_future **out)
{
    if (!w || !out) return err_fail(-EINVAL, "dstl_persist: NULL argument");
    dstl_storage *s = w->s;
    if (from_seq > w->next_seq)
        return err_fail(-EINVAL, "writer %s: persist from %llu is above next seq %llu", w->id,
                        (unsigned long long)from_seq, (unsigned long long)w->next_seq);
    /* made before s->mu is taken: every writer thread and the pipeline contend for it, and
     * an allocation under it lengthens everyone's wait */
    dstl_future *f = future_new(&s->fctx, w->id, w->incarnation, checkpoint_id, from_seq, w->next_seq);
    if (w->sent_seq < w->next_seq) {   /* a hand-off: its memory (handoff_tail, pipeline_enqueue) */
        if (!w->spare_range) w->spare_range = oc_calloc(sizeof *w->spare_range);
        if (!w->spare_sec) w->spare_sec = calloc(1, sizeof *w->spare_sec);
        uint32_t n = tally_span(w);
        if (w->tally && !w->tally_bad && (!w->spare_tally || w->spare_tally_n < n)) {
            free(w->spare_tally);
            w->spare_tally = malloc(sizeof *w->spare_tally + n * sizeof *w->tally);
            w->spare_tally_n = w->spare_tally ? n : 0;
        }
        /* take_tally copies the counts into it under s->mu; a spare the pipeline returned
         * was last touched on its core */
        if (w->spare_tally && w->spare_tally_n >= n)
            for (size_t b = 0; b < sizeof *w->spare_tally + n * sizeof *w->tally; b += 64)
                __builtin_prefetch((const char *)w->spare_tally + b, 1);
    }
    tail_prefetch(w);
    pthread_mutex_lock(&s->mu);
    if (from_seq < w->trunc_seq) {
        pthread_mutex_unlock(&s->mu);
        if (f) future_abandon(f);
        return err_fail(DSTL_ETRUNCATED, "writer %s: persist from %llu is below the truncation point %llu",
                        w->id, (unsigned long long)from_seq, (unsigned long long)w->trunc_seq);
    }
    int rc = f ? send_ranges(w, from_seq) : err_fail(-ENOMEM, "dstl_persist: out of memory"), queued = rc;
    if (rc < 0) {
        s->locked.stats.persist_failures++;
        pthread_mutex_unlock(&s->mu);
        if (f) future_abandon(f);
        return rc;
    }
    uint64_t known = 1, size = 0;
    for (range *r = w->ranges; r; r = r->next) {
        if (r->seq_end <= from_seq) continue;
        uint64_t lo = r->seq_first > from_seq ? r->seq_first : from_seq;
        uint64_t p0 = payload_at(w, r, lo);
        if (p0 == UINT64_MAX) known = 0;
        else size += r->payload_first + r->payload_bytes - p0;
        if (r->state == RANGE_DURABLE) rc = future_add_piece(f, r->seg, r->sec_index, &r->loc, lo, r->seq_end);
        else rc = future_wait_on(f, &r->sec->waiters, lo, r->seq_end);   /* in flight (failed ones were just sent) */
        if (rc < 0) break;
    }
    s->locked.stats.persists++;
    if (w->returned_tally && !w->spare_tally) {   /* for the next hand-off: no malloc then */
        w->spare_tally = w->returned_tally;
        w->spare_tally_n = w->returned_tally_n;
        w->returned_tally = NULL;
    }
    future_build_end(f, rc < 0 ? rc : 0, known ? size : UINT64_MAX);
    chunks_release(w);
    /* dstl.batch.close-when-all-in: the last writer in lets the loop close the batch now */
    int all_in = 0;
    if (s->conf.close_when_all_in && w->persist_epoch != s->locked.pipe.persist_epoch) {
        w->persist_epoch = s->locked.pipe.persist_epoch;
        all_in = ++s->locked.pipe.epoch_writers >= s->locked.nwriters;
    }
    int wake = (queued > 0 || all_in) && pipeline_kick(s);
    pthread_mutex_unlock(&s->mu);
    future_signal_completed();          /* f, when nothing was left to wait for */
    if (wake) pipeline_wake(s);
    *out = f;
    return 0;
}

/* ---- truncate ---- */

/* Skips unsent records below `to`: they will never be needed. Writer thread, s->mu held. */
static void skip_unsent(dstl_writer *w, uint64_t to)
{
    while (w->sent_seq < to && w->sent_seq < w->next_seq) {
        chunk *c = w->sent_chunk;
        if (w->sent_off >= c->used) {
            w->sent_chunk = c->next;
            w->sent_off = 0;
            continue;
        }
        uint32_t lf;
        memcpy(&lf, c->data + w->sent_off, 4);
        size_t len = lf & ~WIRE_REC_META, sz = wire_rec_size(len);
        w->sent_off += sz;
        w->sent_seq++;
        w->sent_payload += len;
        w->unsent_bytes -= sz;
        w->tally_bad = 1;   /* it counted these, from the old sent_seq */
    }
}

int dstl_truncate(dstl_writer *w, uint64_t to_seq)
{
    if (!w) return err_fail(-EINVAL, "dstl_truncate: writer is NULL");
    if (to_seq > w->next_seq)
        return err_fail(-EINVAL, "writer %s: truncate to %llu is above next seq %llu", w->id,
                        (unsigned long long)to_seq, (unsigned long long)w->next_seq);
    dstl_storage *s = w->s;
    range *dead = NULL;        /* freed after s->mu is let go */
    tail_prefetch(w);
    pthread_mutex_lock(&s->mu);
    if (to_seq > w->trunc_seq) {
        w->trunc_seq = to_seq;
        /* Ranges wholly below the point go: durable ones release their section (the segment
         * is deleted once no section and no live handle holds it), failed ones are never
         * retried, in-flight ones are marked and dropped by the pipeline when their batch
         * ends (it still reads their chunks). */
        range **pp = &w->ranges, *prev = NULL;
        while (*pp && (*pp)->seq_first < to_seq) {
            range *r = *pp;
            if (r->seq_end > to_seq || r->state == RANGE_INFLIGHT) {
                if (r->seq_end <= to_seq) r->truncated = 1;
                prev = r;
                pp = &r->next;
                continue;
            }
            *pp = r->next;
            if (w->ranges_tail == r) w->ranges_tail = prev;
            if (r->state == RANGE_DURABLE) reg_section_release(&s->locked.reg, r->seg);
            range_unaccount(s, r);
            r->next = dead;
            dead = r;
        }
        if (w->sent_seq < to_seq) skip_unsent(w, to_seq);
        chunks_release(w);
    }
    int wake = pipeline_kick_deletes(s);
    pthread_mutex_unlock(&s->mu);
    if (wake) pipeline_wake(s);
    while (dead) {
        range *next = dead->next;
        range_free(dead);
        dead = next;
    }
    return 0;
}

/*
 * tests/test_remote_restore_gate.c — a reader of a restore plan returns its first record
 * before its object has arrived: the restore storage reaches the RGW through a gate, a TCP
 * relay in this test that, while closed, forwards at most `limit` bytes of answers per
 * connection (half the smallest object) and holds the rest. No object can complete while the
 * gate is closed: a record then can only come from bytes handed over as they streamed in (its
 * section, its segment's footer fetched first), verified.
 *
 * No durations are asserted: the state when the record comes (the plan has fetched less than
 * its objects, and none of them can be complete). A reader that waits for whole objects never gets
 * one while the gate is closed: after 60 s the test opens it and fails.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dstl.h"
#include "helpers.h"
#include "helpers_dstl.h"
#include "helpers_remote.h"
#include "payload.h"
#include "dstl/handle.h"
#include "dstl/seams.h"
#include "wire/wire.h"

#define NW 20u
#define ROUNDS 24u
#define PER_ROUND 16u
#define MAX_LEN 8192u

/* ---- the gate ---- */

typedef struct {
    int lfd, port, up_port;
    pthread_t th;
    _Atomic int stop, live;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int closed;
    uint64_t limit;             /* answer bytes per connection while closed */
    _Atomic int held;           /* connections holding answer bytes back (from reaching the
                                 * limit until the gate opens or they end) */
    int nreq;                   /* ranged GETs seen, in the order they came (under mu) */
    char req_path[64][512];
    unsigned long long req_a[64], req_b[64];
} gate;

/* Notes the ranged GETs in a chunk of requests (a request's head comes in one read). */
static void note_requests(gate *g, char *buf, size_t n)
{
    buf[n] = 0;
    for (char *at = buf; (at = strstr(at, "GET /")) != NULL; at += 5) {
        const char *r = strcasestr(at, "\r\nrange: bytes="), *eoh = strstr(at, "\r\n\r\n");
        const char *sp = strchr(at + 4, ' ');
        if (!r || !sp || (eoh && r > eoh)) continue;
        pthread_mutex_lock(&g->mu);
        if (g->nreq < 64 && sscanf(r + 15, "%llu-%llu", &g->req_a[g->nreq], &g->req_b[g->nreq]) == 2) {
            snprintf(g->req_path[g->nreq], sizeof g->req_path[0], "%.*s", (int)(sp - (at + 4)), at + 4);
            g->nreq++;
        }
        pthread_mutex_unlock(&g->mu);
    }
}

typedef struct {
    gate *g;
    int cfd;
} conn;

static int pump(int from, int to, uint64_t *count, gate *requests)
{
    char buf[16385];
    ssize_t n = read(from, buf, sizeof buf - 1);
    if (n <= 0) return -1;
    if (requests) note_requests(requests, buf, (size_t)n);
    for (ssize_t off = 0; off < n;) {
        ssize_t w = write(to, buf + off, (size_t)(n - off));
        if (w <= 0) return -1;
        off += w;
    }
    if (count) *count += (uint64_t)n;
    return 0;
}

static void *conn_thread(void *arg)
{
    conn *c = arg;
    gate *g = c->g;
    int ufd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g->up_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    uint64_t answered = 0;
    int holding = 0;
    if (ufd >= 0 && connect(ufd, (struct sockaddr *)&a, sizeof a) == 0) {
        while (!atomic_load(&g->stop)) {
            pthread_mutex_lock(&g->mu);
            int hold = g->closed && answered >= g->limit;
            pthread_mutex_unlock(&g->mu);
            if (hold != holding) atomic_fetch_add(&g->held, hold ? 1 : -1);
            holding = hold;
            struct pollfd p[2] = {{c->cfd, POLLIN, 0}, {ufd, hold ? 0 : POLLIN, 0}};
            int n = poll(p, 2, 50);
            if (n < 0) break;
            if ((p[0].revents & (POLLIN | POLLHUP)) && pump(c->cfd, ufd, NULL, g) < 0) break;
            if ((p[1].revents & (POLLIN | POLLHUP)) && pump(ufd, c->cfd, &answered, NULL) < 0) break;
        }
    }
    if (holding) atomic_fetch_sub(&g->held, 1);
    if (ufd >= 0) close(ufd);
    close(c->cfd);
    free(c);
    atomic_fetch_sub(&g->live, 1);
    return NULL;
}

static void *accept_thread(void *arg)
{
    gate *g = arg;
    while (!atomic_load(&g->stop)) {
        struct pollfd p = {g->lfd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0) continue;
        int cfd = accept(g->lfd, NULL, NULL);
        if (cfd < 0) continue;
        conn *c = malloc(sizeof *c);
        *c = (conn){g, cfd};
        atomic_fetch_add(&g->live, 1);
        pthread_t t;
        if (pthread_create(&t, NULL, conn_thread, c) != 0) {
            close(cfd);
            free(c);
            atomic_fetch_sub(&g->live, 1);
            continue;
        }
        pthread_detach(t);
    }
    return NULL;
}

static void gate_start(gate *g, const char *upstream)
{
    *g = (gate){.lfd = -1};
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    const char *colon = strrchr(upstream, ':');
    cr_assert(colon && strncmp(upstream, "http://127.0.0.1:", 17) == 0, "a loopback endpoint: %s", upstream);
    g->up_port = atoi(colon + 1);
    g->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    cr_assert_eq(bind(g->lfd, (struct sockaddr *)&a, sizeof a), 0);
    cr_assert_eq(listen(g->lfd, 64), 0);
    cr_assert_eq(getsockname(g->lfd, (struct sockaddr *)&a, &al), 0);
    g->port = ntohs(a.sin_port);
    cr_assert_eq(pthread_create(&g->th, NULL, accept_thread, g), 0);
}

static void gate_set(gate *g, int closed)
{
    pthread_mutex_lock(&g->mu);
    g->closed = closed;
    pthread_mutex_unlock(&g->mu);
}

static void gate_stop(gate *g)
{
    atomic_store(&g->stop, 1);
    pthread_join(g->th, NULL);
    while (atomic_load(&g->live) > 0) usleep(10000);
    close(g->lfd);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
}

/* ---- the test ---- */

static t_remote fx;
static char *wdir, *rdir;
static gate G;

static void setup(void)
{
    t_remote_init(&fx, "rsgate");
    wdir = t_mkdtemp("rg-w");
    rdir = t_mkdtemp("rg-r");
    gate_start(&G, fx.env.endpoint);
}

static void teardown(void)
{
    gate_stop(&G);
    t_remote_fini(&fx);
    t_rm_rf(wdir);
    t_rm_rf(rdir);
    free(wdir);
    free(rdir);
}

TestSuite(remote_restore_gate, .init = setup, .fini = teardown, .timeout = 240);

/* NW writers, ROUNDS rounds; each round every writer appends PER_ROUND records (the last
 * writer last_factor times as many) and persists from 0, in writer order, and the round's
 * persists make one segment (> 1 MiB). last[] covers everything. */
static void write_job(dstl_handle **last, uint32_t last_factor)
{
    dstl_storage *s = t_remote_open(&fx, wdir, "dstl.batch.persist-delay", "300ms", "dstl.batch.persist-size-threshold", "10mb",
                                    NULL);
    dstl_writer *w[NW];
    uint8_t *buf = malloc(MAX_LEN + 1);
    for (uint32_t i = 0; i < NW; i++) {
        char id[16];
        snprintf(id, sizeof id, "task-%u", i);
        cr_assert_eq(dstl_writer_open(s, id, 0, 15, &w[i]), 0, "%s", dstl_last_error());
    }
    for (uint32_t round = 0; round < ROUNDS; round++) {
        dstl_future *f[NW];
        for (uint32_t i = 0; i < NW; i++) {
            for (uint32_t k = 0; k < PER_ROUND * (i + 1 == NW ? last_factor : 1); k++) {
                uint64_t seq = dstl_writer_next_seq(w[i]);
                size_t len = payload_make(PAYLOAD_RANDOM, i, seq, MAX_LEN, buf);
                cr_assert_eq(dstl_append(w[i], (uint32_t)(seq % 16), buf, len), 0, "%s", dstl_last_error());
            }
            cr_assert_eq(dstl_persist(w[i], 0, round + 1, &f[i]), 0, "%s", dstl_last_error());
        }
        for (uint32_t i = 0; i < NW; i++) {
            cr_assert_eq(dstl_future_wait(f[i], 60000), 0);
            dstl_handle *h = NULL;
            cr_assert_eq(dstl_future_result(f[i], &h), 0, "%s", dstl_last_error());
            dstl_future_free(f[i]);
            if (round + 1 == ROUNDS) last[i] = h;
            else dstl_handle_free(h);
        }
    }
    free(buf);
    for (uint32_t i = 0; i < NW; i++) cr_assert_eq(dstl_writer_close(w[i]), 0);
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());
}

static void write_all(dstl_handle **last) { write_job(last, 1); }

typedef struct {
    dstl_reader *r;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, rc;
    dstl_record rec;
} first_read;

/* The reading storage (its own dir), whose S3 requests all go through the gate G; with key
 * (not NULL) set to val, and key2 (not NULL) to val2. */
static dstl_storage *open_through_gate_with2(const char *key, const char *val, const char *key2, const char *val2)
{
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", G.port);
    dstl_config *c = t_config(rdir, NULL);
    t_remote_set_s3(&fx, c);
    cr_assert_eq(dstl_config_set(c, "dstl.s3.endpoint", ep), 0);
    if (key) cr_assert_eq(dstl_config_set(c, key, val), 0, "%s", dstl_last_error());
    if (key2) cr_assert_eq(dstl_config_set(c, key2, val2), 0, "%s: %s", key2, dstl_last_error());
    dstl_storage *s = NULL;
    cr_assert_eq(dstl_storage_open(c, &s), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    return s;
}

static dstl_storage *open_through_gate_with(const char *key, const char *val)
{
    return open_through_gate_with2(key, val, NULL, NULL);
}

static dstl_storage *open_through_gate(void) { return open_through_gate_with(NULL, NULL); }

/* A plan of NW entries, entry i restoring last[i] over all key groups (a task per writer). */
static dstl_restore *plan_each(dstl_storage *s, dstl_handle **last)
{
    dstl_restore_entry e[NW];
    for (uint32_t i = 0; i < NW; i++) e[i] = (dstl_restore_entry){(const dstl_handle *const *)&last[i], 1, 0, 15};
    dstl_restore *p = NULL;
    cr_assert_eq(dstl_restore_plan(s, e, NW, &p), 0, "%s", dstl_last_error());
    return p;
}

/* Waits up to secs for *done (set under mu, cv signalled); returns it. */
static int wait_done(pthread_mutex_t *mu, pthread_cond_t *cv, const int *done, int secs)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += secs;
    pthread_mutex_lock(mu);
    while (!*done && pthread_cond_timedwait(cv, mu, &until) == 0) {}
    int d = *done;
    pthread_mutex_unlock(mu);
    return d;
}

static void *read_first(void *arg)
{
    first_read *fr = arg;
    dstl_record rec;
    int rc = dstl_reader_next(fr->r, &rec);
    pthread_mutex_lock(&fr->mu);
    fr->rc = rc;
    fr->rec = rec;
    fr->done = 1;
    pthread_cond_signal(&fr->cv);
    pthread_mutex_unlock(&fr->mu);
    return NULL;
}

Test(remote_restore_gate, a_reader_gets_its_first_record_before_its_object_has_arrived)
{
    dstl_handle *last[NW];
    write_all(last);
    uint64_t smallest = UINT64_MAX;
    for (uint32_t i = 0; i < NW; i++)
        for (size_t k = 0; k < last[i]->wh->nsegs; k++)
            if (last[i]->wh->segs[k].object_len < smallest) smallest = last[i]->wh->segs[k].object_len;
    /* about one segment of NW x 64 KiB per round; batches may fall differently (sanitizers) */
    cr_assert_geq(last[0]->wh->nsegs, ROUNDS);
    cr_assert_geq(smallest, 256u << 10, "segments of at least 256 KiB");
    G.limit = smallest / 2;
    dstl_storage *s = open_through_gate();

    gate_set(&G, 1);
    dstl_restore *p = plan_each(s, last);
    first_read fr = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    cr_assert_eq(dstl_restore_reader_open(p, 0, 0, &fr.r), 0, "%s", dstl_last_error());
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, read_first, &fr), 0);
    int got = wait_done(&fr.mu, &fr.cv, &fr.done, 60);
    /* the state when the record came (or when we gave up): bytes held back, objects incomplete */
    int held = atomic_load(&G.held);
    dstl_restore_stats st;
    dstl_restore_get_stats(p, &st);
    gate_set(&G, 0);
    pthread_join(t, NULL);
    cr_assert(got, "no record while the gate held every object back (the reader waited for whole objects)");
    cr_assert_eq(fr.rc, 1, "%s", dstl_last_error());
    /* every connection gets at most half the smallest object while the gate is closed, so no
     * object was complete; the record may even come before any connection reached the limit */
    cr_assert_lt(st.bytes_fetched, st.object_bytes, "the plan had not fetched its objects yet (%d held)", held);
    uint64_t seq = dstl_handle_from_seq(last[0]);
    size_t len = payload_len(0, seq, MAX_LEN);
    cr_assert_eq(fr.rec.seq, seq);
    cr_assert_eq(fr.rec.len, len);
    cr_assert_eq(payload_check(PAYLOAD_RANDOM, 0, seq, fr.rec.data, len), len, "the first record's payload");

    /* the gate open: the rest of that reader, every record, then the others */
    uint64_t n = 1;
    dstl_record rec;
    int rc;
    for (seq++; (rc = dstl_reader_next(fr.r, &rec)) == 1; seq++, n++) {
        cr_assert_eq(rec.seq, seq);
        len = payload_len(0, seq, MAX_LEN);
        cr_assert_eq(payload_check(PAYLOAD_RANDOM, 0, seq, rec.data, rec.len), len, "seq %lu", (unsigned long)seq);
    }
    cr_assert_eq(rc, 0, "%s", dstl_last_error());
    cr_assert_eq(n, (uint64_t)ROUNDS * PER_ROUND);
    dstl_reader_close(fr.r);
    for (uint32_t i = 1; i < NW; i++) {
        dstl_reader *r;
        cr_assert_eq(dstl_restore_reader_open(p, i, 0, &r), 0, "%s", dstl_last_error());
        uint64_t k = 0;
        while ((rc = dstl_reader_next(r, &rec)) == 1) k++;
        cr_assert_eq(rc, 0, "%s", dstl_last_error());
        cr_assert_eq(k, (uint64_t)ROUNDS * PER_ROUND, "writer %u", i);
        dstl_reader_close(r);
    }
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());
    for (uint32_t i = 0; i < NW; i++) dstl_handle_free(last[i]);
}

/* The segment of last[] whose object a request path names (it ends with the segment's name). */
static const wire_seg_ref *seg_of(dstl_handle *const *last, const char *path)
{
    size_t pl = strlen(path);
    for (uint32_t i = 0; i < NW; i++)
        for (size_t k = 0; k < last[i]->wh->nsegs; k++) {
            const wire_seg_ref *g = &last[i]->wh->segs[k];
            size_t nl = strlen(g->name);
            if (pl >= nl && strcmp(path + pl - nl, g->name) == 0 && (pl == nl || path[pl - nl - 1] == '/')) return g;
        }
    return NULL;
}

/* Reads every entry's one handle of plan p in turn: each gives `records` records, the first
 * one `first_records`. */
static void read_entries_but_first(dstl_restore *p, uint32_t n, uint64_t records, uint64_t first_records)
{
    for (uint32_t i = 0; i < n; i++) {
        dstl_reader *r;
        dstl_record rec;
        int rc;
        uint64_t k = 0;
        cr_assert_eq(dstl_restore_reader_open(p, i, 0, &r), 0, "%s", dstl_last_error());
        while ((rc = dstl_reader_next(r, &rec)) == 1) k++;
        cr_assert_eq(rc, 0, "%s", dstl_last_error());
        cr_assert_eq(k, i == 0 ? first_records : records, "entry %u", i);
        dstl_reader_close(r);
    }
}

static void read_entries(dstl_restore *p, uint32_t n, uint64_t records) { read_entries_but_first(p, n, records, records); }

Test(remote_restore_gate, the_first_gets_of_a_plan_are_a_section_and_a_footer_not_an_object)
{
    /* A server may read a GET's whole range before its first byte: the plan's first GETs (the
     * ones every other waits for) must be small — the first record's footer and section (or a
     * small object whole) — not a range to the end of a large object. The gate stays open; it
     * only notes each ranged GET's path and range, in the order they came. */
    dstl_handle *last[NW];
    write_all(last);
    dstl_storage *s = open_through_gate();
    dstl_restore *p = plan_each(s, last);
    read_entries(p, NW, (uint64_t)ROUNDS * PER_ROUND);
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());

    pthread_mutex_lock(&G.mu);
    int n = G.nreq;
    pthread_mutex_unlock(&G.mu);
    cr_assert_geq(n, 3, "ranged GETs noted: %d", n);
    const wire_seg_ref *g0 = seg_of(last, G.req_path[0]);
    cr_assert_not_null(g0, "the first GET names a segment of the handles: %s", G.req_path[0]);
    /* the first GETs: the section and the footer (two, either order), or one from the section
     * to the object's end; each at most half a large object (or a small object whole) */
    int footer = 0;
    for (int i = 0; i < 2 && !(i == 1 && footer); i++) {
        const wire_seg_ref *g = seg_of(last, G.req_path[i]);
        cr_assert_not_null(g, "%s", G.req_path[i]);
        unsigned long long len = G.req_b[i] - G.req_a[i] + 1;
        int small_whole = G.req_a[i] == 0 && len == g->object_len && g->object_len <= (512u << 10);
        cr_assert(small_whole || 2 * len <= g->object_len,
                  "GET %d of the plan is %llu-%llu of %s (%llu bytes): more than half a large object", i, G.req_a[i],
                  G.req_b[i], G.req_path[i], (unsigned long long)g->object_len);
        footer |= g == g0 && (small_whole || (G.req_a[i] <= g->footer_offset && G.req_b[i] + 1 == g->object_len));
    }
    cr_assert(footer, "the first record's footer is among the first GETs (%llu-%llu, %llu-%llu of %s)", G.req_a[0],
              G.req_b[0], G.req_a[1], G.req_b[1], G.req_path[0]);
    for (uint32_t i = 0; i < NW; i++) dstl_handle_free(last[i]);
}

/* The GETs the gate saw, as indices into names (the object each GET's path ends with), each
 * object once, in the order its first GET came; every GET must name one of them. Returns how
 * many objects order holds. */
static int gets_order(const char *const *names, int nn, int *order)
{
    int n = 0;
    pthread_mutex_lock(&G.mu);
    for (int q = 0; q < G.nreq; q++) {
        int wi = -1;
        size_t pl = strlen(G.req_path[q]);
        for (int i = 0; i < nn; i++) {
            size_t nl = strlen(names[i]);
            if (pl >= nl && strcmp(G.req_path[q] + pl - nl, names[i]) == 0) wi = i;
        }
        cr_assert_geq(wi, 0, "GET %d names none of the objects: %s", q, G.req_path[q]);
        int seen = 0;
        for (int k = 0; k < n; k++) seen |= order[k] == wi;
        if (!seen && n < nn) order[n++] = wi;
    }
    pthread_mutex_unlock(&G.mu);
    return n;
}

/* n writers, each with one segment of its own (16 records over key groups 0..15), written
 * one after the other: h[i] is writer i's handle. */
static void write_snaps(dstl_handle **h, uint32_t n)
{
    dstl_storage *ws = t_remote_open(&fx, wdir, NULL);
    uint8_t buf[1024];
    for (uint32_t i = 0; i < n; i++) {                      /* one segment per writer, in turn */
        char id[16];
        snprintf(id, sizeof id, "snap-%u", i);
        dstl_writer *w;
        cr_assert_eq(dstl_writer_open(ws, id, 0, 15, &w), 0, "%s", dstl_last_error());
        for (uint32_t k = 0; k < 16; k++) {
            uint64_t seq = dstl_writer_next_seq(w);
            size_t len = payload_make(PAYLOAD_RANDOM, i, seq, sizeof buf, buf);
            cr_assert_eq(dstl_append(w, k, buf, len), 0, "%s", dstl_last_error());
        }
        dstl_future *f;
        cr_assert_eq(dstl_persist(w, 0, 1, &f), 0, "%s", dstl_last_error());
        cr_assert_eq(dstl_future_wait(f, 60000), 0);
        cr_assert_eq(dstl_future_result(f, &h[i]), 0, "%s", dstl_last_error());
        dstl_future_free(f);
        cr_assert_eq(dstl_writer_close(w), 0);
    }
    cr_assert_eq(dstl_storage_close(ws), 0, "%s", dstl_last_error());
    for (uint32_t i = 1; i < n; i++)
        cr_assert_gt(strcmp(h[i]->wh->segs[0].name, h[i - 1]->wh->segs[0].name), 0, "segment names follow writes");
}

/* write_snaps' writers in the order the GETs of their objects came, each once: n of them. */
static int snaps_order(dstl_handle *const *h, int n, int *order)
{
    const char *names[16];
    cr_assert_leq(n, 16);
    for (int i = 0; i < n; i++) names[i] = h[i]->wh->segs[0].name;
    int got = gets_order(names, n, order);
    cr_assert_eq(got, n, "GETs of %d objects, %d named", got, n);
    return got;
}

Test(remote_restore_gate, objects_are_fetched_in_the_order_of_the_entries_that_need_them)
{
    /* Tasks restore at once and open their readers in about entry order; each task's object
     * was written at its own time (as staggered materializations write snapshots). The plan
     * fetches in the entries' order, not the write order: here the entries are the writers in
     * reverse write order, one GET at a time (dstl.recovery.connections 1), and after the first
     * record's object (fetched first, whichever it is) the objects come in entry order. */
    enum { NO = 6 };
    dstl_handle *h[NO];
    write_snaps(h, NO);

    dstl_storage *s = open_through_gate_with("dstl.recovery.connections", "1");
    dstl_restore_entry e[NO];
    for (uint32_t i = 0; i < NO; i++)                       /* entry i: writer NO - 1 - i */
        e[i] = (dstl_restore_entry){(const dstl_handle *const *)&h[NO - 1 - i], 1, 0, 15};
    dstl_restore *p = NULL;
    cr_assert_eq(dstl_restore_plan(s, e, NO, &p), 0, "%s", dstl_last_error());
    read_entries(p, NO, 16);
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());

    /* the writer of each GET's object, each object once, in the order the GETs came */
    int order[NO];
    int n = snaps_order(h, NO, order);
    for (int k = 2; k < n; k++)   /* after the first record's object: entry order, descending writers */
        cr_assert_lt(order[k], order[k - 1], "object %d fetched was writer %d's, after writer %d's (the entries name "
                     "writers %d..0 in turn)", k, order[k], order[k - 1], NO - 1);
    for (uint32_t i = 0; i < NO; i++) dstl_handle_free(h[i]);
}

/* A plan of n entries, entry i restoring h[i], one GET at a time (s), with every answer held
 * at the gate: returns once the first GET is held. */
static dstl_restore *plan_first_get_held(dstl_storage *s, dstl_handle **h, uint32_t n)
{
    pthread_mutex_lock(&G.mu);
    G.limit = 0;
    pthread_mutex_unlock(&G.mu);
    gate_set(&G, 1);                                        /* every answer held from here */
    dstl_restore_entry e[16];
    cr_assert_leq(n, 16);
    for (uint32_t i = 0; i < n; i++) e[i] = (dstl_restore_entry){(const dstl_handle *const *)&h[i], 1, 0, 15};
    dstl_restore *p = NULL;
    cr_assert_eq(dstl_restore_plan(s, e, n, &p), 0, "%s", dstl_last_error());
    for (int i = 0; i < 10000 && atomic_load(&G.held) == 0; i++) usleep(1000);
    cr_assert_eq(atomic_load(&G.held), 1, "the first GET is held at the gate");
    return p;
}

Test(remote_restore_gate, an_object_a_reader_already_waits_for_is_fetched_before_those_queued_ahead_of_it)
{
    /* Entries in write order, one object each, one GET at a time: the plan queues the objects
     * in entry order. The first GET is held at the gate while the last entry's reader opens
     * and waits for its object: when the gate opens, that object is the next GET, not the
     * last (the queue's order guessed wrong for this reader, and it is idle until it comes). */
    enum { NO = 6 };
    dstl_handle *h[NO];
    write_snaps(h, NO);
    dstl_storage *s = open_through_gate_with("dstl.recovery.connections", "1");
    dstl_restore *p = plan_first_get_held(s, h, NO);
    first_read fr = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    cr_assert_eq(dstl_restore_reader_open(p, NO - 1, 0, &fr.r), 0, "%s", dstl_last_error());
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, read_first, &fr), 0);
    usleep(300000);                                         /* the reader waits for its object */
    pthread_mutex_lock(&G.mu);
    int held_gets = G.nreq;
    pthread_mutex_unlock(&G.mu);
    cr_assert_eq(held_gets, 1, "%d GETs went out while one was held (dstl.recovery.connections 1)", held_gets);
    gate_set(&G, 0);
    cr_assert(wait_done(&fr.mu, &fr.cv, &fr.done, 60), "the last entry's reader got no record");
    pthread_join(t, NULL);
    cr_assert_eq(fr.rc, 1, "%s", dstl_last_error());
    uint64_t got = 1;
    int rc;
    dstl_record rec;
    while ((rc = dstl_reader_next(fr.r, &rec)) == 1) got++;
    cr_assert_eq(rc, 0, "%s", dstl_last_error());
    cr_assert_eq(got, 16);
    dstl_reader_close(fr.r);
    read_entries(p, NO - 1, 16);                            /* the others */
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());

    int order[NO];
    int n = snaps_order(h, NO, order);
    cr_assert_eq(order[1], NO - 1, "after the held GET (writer %d's object) came writer %d's, not the waited-for "
                 "writer %d's (in order: %d %d %d %d %d %d)", order[0], order[1], NO - 1, order[0], order[1], order[2],
                 order[3], order[4], order[5]);
    for (int k = 3; k < n; k++)                             /* and the rest in entry order */
        cr_assert_gt(order[k], order[k - 1], "writer %d's object after writer %d's", order[k], order[k - 1]);
    for (uint32_t i = 0; i < NO; i++) dstl_handle_free(h[i]);
}

Test(remote_restore_gate, a_reader_that_only_tries_neither_blocks_nor_reorders_the_fetches)
{
    /* As above, but the last entry's reader only tries (dstl_reader_try_next), as a thread
     * taking turns on many tasks' readers does: with every answer held at the gate it returns
     * -EAGAIN at once instead of waiting, and its object keeps its place in the queue: after
     * the held GET the objects come in entry order, the tried-for one last. (A blocked reader
     * pulled its object ahead, held until the other readers got there; a thread of many tasks
     * blocked on one of them pulled a late object in for every such thread.) Once the gate
     * opens, dstl_restore_wait wakes the thread when the reader's bytes are in, and its
     * records come whole. */
    enum { NO = 6 };
    dstl_handle *h[NO];
    write_snaps(h, NO);
    dstl_storage *s = open_through_gate_with("dstl.recovery.connections", "1");
    dstl_restore *p = plan_first_get_held(s, h, NO);
    dstl_reader *r = NULL;
    dstl_record rec;
    cr_assert_eq(dstl_restore_reader_open(p, NO - 1, 0, &r), 0, "%s", dstl_last_error());
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(dstl_reader_try_next(r, &rec), -EAGAIN, "a try with every answer held: %s", dstl_last_error());
        usleep(100000);                                     /* as long as a waiting reader had */
    }
    pthread_mutex_lock(&G.mu);
    int held_gets = G.nreq;
    pthread_mutex_unlock(&G.mu);
    cr_assert_eq(held_gets, 1, "%d GETs went out while one was held (dstl.recovery.connections 1)", held_gets);
    uint64_t seen = 0;
    cr_assert_eq(dstl_restore_wait(p, &seen, 0), 1, "a thread's first wait returns at once");
    cr_assert_eq(dstl_restore_wait(p, &seen, 50), 0, "news while every answer is held");
    gate_set(&G, 0);
    uint64_t got = 0, waits = 0;
    int rc;
    for (;;) {
        while ((rc = dstl_reader_try_next(r, &rec)) == 1) got++;
        if (rc != -EAGAIN) break;
        cr_assert_lt(++waits, 100, "no record after %lu waits of up to 1 s", (unsigned long)waits);
        cr_assert_geq(dstl_restore_wait(p, &seen, 1000), 0, "%s", dstl_last_error());
    }
    cr_assert_eq(rc, 0, "%s", dstl_last_error());
    cr_assert_eq(got, 16);
    dstl_reader_close(r);
    read_entries(p, NO - 1, 16);                            /* the others */
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());

    int order[NO];
    int n = snaps_order(h, NO, order);
    for (int k = 1; k < n; k++)
        cr_assert_gt(order[k], order[k - 1], "writer %d's object after writer %d's (in order: %d %d %d %d %d %d)",
                     order[k], order[k - 1], order[0], order[1], order[2], order[3], order[4], order[5]);
    for (uint32_t i = 0; i < NO; i++) dstl_handle_free(h[i]);
}

/* A thread that tries its reader, then sleeps in dstl_restore_wait without a timeout until
 * it has a record or the reader ends. */
typedef struct {
    dstl_restore *p;
    dstl_reader *r;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic int asleep;         /* tried in vain once, now waiting */
    int done, rc;
    uint64_t got;
} try_wait;

static void *try_then_wait(void *arg)
{
    try_wait *tw = arg;
    uint64_t seen = 0;
    dstl_record rec;
    int rc;
    (void)dstl_restore_wait(tw->p, &seen, 0);               /* the thread's count, once */
    while ((rc = dstl_reader_try_next(tw->r, &rec)) == -EAGAIN) {
        atomic_store(&tw->asleep, 1);
        if (dstl_restore_wait(tw->p, &seen, -1) < 0) break;
    }
    uint64_t got = rc == 1;
    while (rc == 1 || rc == -EAGAIN) {
        if (rc == -EAGAIN && dstl_restore_wait(tw->p, &seen, -1) < 0) break;
        if ((rc = dstl_reader_try_next(tw->r, &rec)) == 1) got++;
    }
    pthread_mutex_lock(&tw->mu);
    tw->rc = rc;
    tw->got = got;
    tw->done = 1;
    pthread_cond_signal(&tw->cv);
    pthread_mutex_unlock(&tw->mu);
    return NULL;
}

Test(remote_restore_gate, a_thread_that_tried_and_sleeps_without_a_timeout_is_woken_however_long_the_gets_before_took)
{
    /* One GET at a time, a read-ahead window far below one object: the last entry's reader
     * tries (its object is queued behind the window) and its thread sleeps in
     * dstl_restore_wait with no timeout, while the first GET is held at the gate for 1.5 s.
     * When it completes nothing is in flight, and the tried-for object goes next: the
     * thread's interest lasts until it is told, not for a while. (It lasted a second: the
     * window then held the object back for good, and the thread slept forever.) */
    enum { NO = 6 };
    dstl_handle *h[NO];
    write_snaps(h, NO);
    dstl_storage *s = open_through_gate_with2("dstl.recovery.connections", "1", "dstl.recovery.read-ahead", "1kb");
    dstl_restore *p = plan_first_get_held(s, h, NO);
    try_wait tw = {.p = p, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    cr_assert_eq(dstl_restore_reader_open(p, NO - 1, 0, &tw.r), 0, "%s", dstl_last_error());
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, try_then_wait, &tw), 0);
    for (int i = 0; i < 10000 && !atomic_load(&tw.asleep); i++) usleep(1000);
    cr_assert(atomic_load(&tw.asleep), "the reader's try did not find its bytes missing with every answer held");
    usleep(1500000);                                        /* the first GET held for 1.5 s */
    gate_set(&G, 0);
    int woke = wait_done(&tw.mu, &tw.cv, &tw.done, 30);
    cr_assert(woke, "the thread that tried was never woken (its object stayed behind the window)");
    pthread_join(t, NULL);
    cr_assert_eq(tw.rc, 0, "%s", dstl_last_error());
    cr_assert_eq(tw.got, 16);
    dstl_reader_close(tw.r);
    read_entries(p, NO - 1, 16);                            /* the others, waiting as they go */
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());
    for (uint32_t i = 0; i < NO; i++) dstl_handle_free(h[i]);
}

typedef struct {
    dstl_storage *s;
    const dstl_restore_entry *e;
    size_t n;
    dstl_restore *p;
    int rc;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} plan_call;

static void *plan_thread(void *arg)
{
    plan_call *c = arg;
    int rc = dstl_restore_plan(c->s, c->e, c->n, &c->p);
    pthread_mutex_lock(&c->mu);
    c->rc = rc;
    c->done = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

Test(remote_restore_gate, a_plan_that_cuts_sections_returns_once_their_footers_are_in_not_after_the_rest)
{
    /* A rescaled task cuts some writers' sections and reads others whole: the plan waits for
     * the cut segments' footers (their indexes say which ranges the cut pieces need), so those
     * go first, each on its own GET. Queued behind the whole sections' extents (a footer is an
     * object's last bytes) they made the plan wait for most of the fetch. With the gate closed
     * no extent larger than half the smallest object can complete: the plan must return
     * anyway. */
    dstl_handle *last[NW];
    write_all(last);
    uint64_t smallest = UINT64_MAX, footer = 0;
    for (uint32_t i = 0; i < NW; i++)
        for (size_t k = 0; k < last[i]->wh->nsegs; k++) {
            const wire_seg_ref *g = &last[i]->wh->segs[k];
            if (g->object_len < smallest) smallest = g->object_len;
            if (g->object_len - g->footer_offset > footer) footer = g->object_len - g->footer_offset;
        }
    cr_assert_geq(last[0]->wh->nsegs, 12, "enough objects that whole sections fill every connection");
    G.limit = smallest / 2;
    cr_assert_lt(footer * 4, G.limit, "footers well below what a connection passes while the gate is closed");
    dstl_storage *s = open_through_gate();
    dstl_restore_entry e[2] = {
        {(const dstl_handle *const *)&last[0], NW / 2, 0, 15},        /* writers 0-9 whole */
        {(const dstl_handle *const *)&last[NW / 2], NW / 2, 0, 7},    /* writers 10-19 cut */
    };
    gate_set(&G, 1);
    plan_call c = {.s = s, .e = e, .n = 2, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, plan_thread, &c), 0);
    int returned = wait_done(&c.mu, &c.cv, &c.done, 60);
    gate_set(&G, 0);
    pthread_join(t, NULL);
    cr_assert(returned, "the plan did not return while the gate held back all but the footers");
    cr_assert_eq(c.rc, 0, "%s", dstl_last_error());
    dstl_restore_stats st;
    dstl_restore_get_stats(c.p, &st);
    cr_assert_eq(st.objects, last[0]->wh->nsegs);
    for (uint32_t i = 0; i < NW; i++) {         /* every record of its key groups, verified */
        dstl_reader *r;
        dstl_record rec;
        int rc;
        uint64_t k = 0, seq = dstl_handle_from_seq(last[i]);
        uint32_t kgl = i < NW / 2 ? 15 : 7;
        cr_assert_eq(dstl_restore_reader_open(c.p, i / (NW / 2), i % (NW / 2), &r), 0, "%s", dstl_last_error());
        while ((rc = dstl_reader_next(r, &rec)) == 1) {
            while (seq % 16 > kgl) seq++;
            cr_assert_eq(rec.seq, seq, "writer %u", i);
            size_t len = payload_len(i, seq, MAX_LEN);
            cr_assert_eq(payload_check(PAYLOAD_RANDOM, i, seq, rec.data, rec.len), len, "writer %u seq %lu", i,
                         (unsigned long)seq);
            seq++;
            k++;
        }
        cr_assert_eq(rc, 0, "%s", dstl_last_error());
        cr_assert_eq(k, (uint64_t)ROUNDS * PER_ROUND * (kgl + 1) / 16, "writer %u", i);
        dstl_reader_close(r);
    }
    cr_assert_eq(dstl_restore_close(c.p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());
    for (uint32_t i = 0; i < NW; i++) dstl_handle_free(last[i]);
}

Test(remote_restore_gate, a_first_section_next_to_its_footer_is_fetched_with_it_in_one_get)
{
    /* Two GETs sent together come back slower than one: when a first piece's section ends
     * near its segment's footer, the plan's first GET is that section to the object's end,
     * even when other first pieces are smaller. The writers persist in order each round, so
     * the last writer's section ends each segment, next to the footer; it appends twice as
     * much as the others (a plan choosing by bytes alone took a smaller one, and two GETs).
     * Its handle is the first entry: the plan also prefers the entries whose readers open
     * first (a later entry costs more). */
    dstl_handle *last[NW];
    write_job(last, 2);
    dstl_storage *s = open_through_gate();
    dstl_restore_entry e[NW];
    for (uint32_t i = 0; i < NW; i++)
        e[i] = (dstl_restore_entry){(const dstl_handle *const *)&last[NW - 1 - i], 1, 0, 15};
    dstl_restore *p = NULL;
    cr_assert_eq(dstl_restore_plan(s, e, NW, &p), 0, "%s", dstl_last_error());
    read_entries_but_first(p, NW, (uint64_t)ROUNDS * PER_ROUND, 2ull * ROUNDS * PER_ROUND);
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());

    pthread_mutex_lock(&G.mu);
    int n = G.nreq;
    unsigned long long a = G.req_a[0], b = G.req_b[0];
    char path[512];
    snprintf(path, sizeof path, "%s", G.req_path[0]);
    pthread_mutex_unlock(&G.mu);
    cr_assert_geq(n, 2, "ranged GETs noted: %d", n);
    const wire_seg_ref *g = seg_of(last, path);
    cr_assert_not_null(g, "the first GET names a segment of the handles: %s", path);
    cr_assert_eq(b + 1, g->object_len, "the first GET (%llu-%llu of %s) runs to the object's end", a, b, path);
    const wire_piece *first = NULL;
    for (uint32_t i = 0; i < NW; i++) {
        const wire_piece *pc = &last[i]->wh->pieces[0];
        if (strcmp(last[i]->wh->segs[pc->seg].name, g->name) == 0 && pc->offset == a) first = pc;
    }
    cr_assert_not_null(first, "the first GET starts at a first piece's section (%llu of %s)", a, path);
    cr_assert_lt(g->footer_offset - (first->offset + first->stored_len), 256u << 10, "that section ends near the footer");
    for (uint32_t i = 0; i < NW; i++) dstl_handle_free(last[i]);
}

/* Whether ranged GET q noted by the gate read the section of piece pc of segment `name`
 * (G.mu held). */
static int get_covers(dstl_handle *const *last, int q, const char *name, const wire_piece *pc)
{
    const wire_seg_ref *g = seg_of(last, G.req_path[q]);
    return g && !strcmp(g->name, name) && G.req_a[q] <= pc->offset && G.req_b[q] + 1 >= pc->offset + pc->stored_len;
}

/* A storage reading through the gate whose restore plans keep the fetch gate closed for a
 * minute (a seam): only a record a reader takes opens it. */
static dstl_storage *open_through_gate_held(void)
{
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", G.port);
    dstl_config *c = t_config(rdir, NULL);
    t_remote_set_s3(&fx, c);
    cr_assert_eq(dstl_config_set(c, "dstl.s3.endpoint", ep), 0);
    storage_seams seams = {.restore_gate_ms = 60000};
    dstl_storage *s = NULL;
    cr_assert_eq(storage_open_with_seams(c, &seams, &s), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    return s;
}

/* The plan's bytes fetched once they have stopped growing for half a second (30 s at most). */
static uint64_t fetched_when_still(dstl_restore *p)
{
    dstl_restore_stats st;
    dstl_restore_get_stats(p, &st);
    uint64_t last = st.bytes_fetched;
    for (int still = 0, i = 0; still < 10 && i < 600; i++) {
        usleep(50000);
        dstl_restore_get_stats(p, &st);
        still = st.bytes_fetched == last ? still + 1 : 0;
        last = st.bytes_fetched;
    }
    return last;
}

Test(remote_restore_gate, the_rest_of_a_restore_waits_for_the_first_record_a_reader_takes)
{
    /* The plan's first GETs (a section and its footer) come back first; the reader that parses
     * that footer and checks the section then needs the cores: a 1,024-writer footer took
     * 26 ms to parse, not 2, once the restore's bulk GETs (and the server answering them) ran
     * beside it. So the plan's other GETs wait until a reader has taken a record, or a bound
     * (20 ms; here a seam makes it a minute, so only the record can end the wait). */
    dstl_handle *last[NW];
    write_all(last);
    dstl_storage *s = open_through_gate_held();
    dstl_restore *p = plan_each(s, last);
    dstl_restore_stats st;
    dstl_restore_get_stats(p, &st);
    uint64_t before = fetched_when_still(p);
    cr_assert_gt(before, 0, "the first GETs went out before any reader");
    cr_assert_lt(before * 4, st.object_bytes, "with no record taken the plan fetched %lu of %lu bytes: more than "
                 "its first GETs", (unsigned long)before, (unsigned long)st.object_bytes);
    /* the entry whose first piece the first GETs fetched: its reader takes the first record */
    pthread_mutex_lock(&G.mu);
    int gets_before = G.nreq;
    uint32_t e0 = NW;
    for (uint32_t i = 0; i < NW && e0 == NW; i++) {
        const wire_piece *pc = &last[i]->wh->pieces[0];
        const wire_seg_ref *g = &last[i]->wh->segs[pc->seg];
        for (int q = 0; q < gets_before && e0 == NW; q++)
            if (get_covers(last, q, g->name, pc)) e0 = i;
    }
    pthread_mutex_unlock(&G.mu);
    cr_assert_lt(e0, NW, "no entry's first section among the %d GETs made before any reader", gets_before);

    dstl_reader *r;
    dstl_record rec;
    cr_assert_eq(dstl_restore_reader_open(p, e0, 0, &r), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_reader_next(r, &rec), 1, "%s", dstl_last_error());
    uint64_t after = fetched_when_still(p);
    pthread_mutex_lock(&G.mu);
    int gets_after = G.nreq;
    pthread_mutex_unlock(&G.mu);
    cr_assert_geq(after, st.object_bytes * 9 / 10, "after the first record the plan fetched %lu of %lu bytes "
                  "(%d GETs, %d before it)", (unsigned long)after, (unsigned long)st.object_bytes, gets_after,
                  gets_before);
    uint64_t k = 1;
    int rc;
    while ((rc = dstl_reader_next(r, &rec)) == 1) k++;
    cr_assert_eq(rc, 0, "%s", dstl_last_error());
    cr_assert_eq(k, (uint64_t)ROUNDS * PER_ROUND);
    dstl_reader_close(r);
    for (uint32_t i = 0; i < NW; i++) {
        if (i == e0) continue;
        cr_assert_eq(dstl_restore_reader_open(p, i, 0, &r), 0, "%s", dstl_last_error());
        for (k = 0; (rc = dstl_reader_next(r, &rec)) == 1;) k++;
        cr_assert_eq(rc, 0, "%s", dstl_last_error());
        cr_assert_eq(k, (uint64_t)ROUNDS * PER_ROUND, "writer %u", i);
        dstl_reader_close(r);
    }
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());

    /* without a reader the gate opens by itself at its bound (20 ms by default) */
    s = open_through_gate();
    p = plan_each(s, last);
    dstl_restore_get_stats(p, &st);
    after = fetched_when_still(p);
    cr_assert_geq(after, st.object_bytes * 9 / 10, "no reader: the plan fetched %lu of %lu bytes",
                  (unsigned long)after, (unsigned long)st.object_bytes);
    read_entries(p, NW, (uint64_t)ROUNDS * PER_ROUND);
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());
    for (uint32_t i = 0; i < NW; i++) dstl_handle_free(last[i]);
}

Test(remote_restore_gate, the_first_records_footer_is_parsed_as_it_arrives_before_any_reader_asks)
{
    /* The first reader needs the index of the first record's segment: a 1,024-writer footer
     * took 7 ms to parse in a cold process, after the plan had returned. The fetch thread,
     * idle behind the gate, parses it the moment its bytes are in, while the plan's thread
     * still copies the handles and plans the rest. Here no reader opens at all, and the gate
     * stays closed (a minute, by a seam): the footer must be parsed all the same. */
    dstl_handle *last[NW];
    write_all(last);
    dstl_storage *s = open_through_gate_held();
    dstl_restore *p = plan_each(s, last);
    dstl_restore_stats st = {0};
    for (int i = 0; i < 200 && st.footers_parsed == 0; i++) {     /* 10 s at most */
        usleep(50000);
        dstl_restore_get_stats(p, &st);
    }
    cr_assert_eq(st.footers_parsed, 1, "with no reader, %lu footers parsed (%lu of %lu bytes fetched)",
                 (unsigned long)st.footers_parsed, (unsigned long)st.bytes_fetched, (unsigned long)st.object_bytes);
    /* the readers use that index (no second parse of it) and read everything */
    read_entries(p, NW, (uint64_t)ROUNDS * PER_ROUND);
    dstl_restore_get_stats(p, &st);
    cr_assert_leq(st.footers_parsed, st.objects, "%lu footers parsed for %lu objects", (unsigned long)st.footers_parsed,
                  (unsigned long)st.objects);
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());
    for (uint32_t i = 0; i < NW; i++) dstl_handle_free(last[i]);
}

Test(remote_restore_gate, every_footer_is_parsed_once_as_it_arrives_so_no_reader_waits_on_another)
{
    /* A whole-object GET brings the footer last, and every reader of the object becomes ready
     * with it: the first to get there parsed the index while the others (at w1024, 843-1,611
     * a round) slept until it was done. The fetch thread now parses each footer as it comes
     * in, before any reader can see those bytes. Here no reader opens until the plan has
     * fetched everything: every object's index is parsed all the same, and reading parses
     * none again. */
    dstl_handle *last[NW];
    write_all(last);
    dstl_storage *s = open_through_gate();
    dstl_restore *p = plan_each(s, last);
    dstl_restore_stats st;
    dstl_restore_get_stats(p, &st);
    uint64_t fetched = fetched_when_still(p);
    cr_assert_geq(fetched, st.object_bytes * 9 / 10, "the plan fetched %lu of %lu bytes", (unsigned long)fetched,
                  (unsigned long)st.object_bytes);
    dstl_restore_get_stats(p, &st);
    cr_assert_geq(st.objects, 2);
    cr_assert_eq(st.footers_parsed, st.objects, "with no reader, %lu footers parsed for %lu objects",
                 (unsigned long)st.footers_parsed, (unsigned long)st.objects);
    read_entries(p, NW, (uint64_t)ROUNDS * PER_ROUND);
    dstl_restore_get_stats(p, &st);
    cr_assert_eq(st.footers_parsed, st.objects, "the readers parsed again: %lu footers for %lu objects",
                 (unsigned long)st.footers_parsed, (unsigned long)st.objects);
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());
    for (uint32_t i = 0; i < NW; i++) dstl_handle_free(last[i]);
}

Test(remote_restore_gate, the_first_record_comes_from_an_early_entry_not_a_cheaper_later_one)
{
    /* Readers open in about entry order, on threads that start one after another: a first
     * record taken from a late entry waited for its reader to start (the 64th of a bench's
     * readers, 5-15 ms). Here the last writer's section ends each segment, next to the footer,
     * so its first piece would be one GET instead of two; the entries are in writer order, and
     * the plan's first GETs (each at most half an object) are entry 0's section and footer. */
    dstl_handle *last[NW];
    write_job(last, 2);
    dstl_storage *s = open_through_gate();
    dstl_restore *p = plan_each(s, last);
    (void)fetched_when_still(p);
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());
    const wire_piece *pc = &last[0]->wh->pieces[0];
    const char *name = last[0]->wh->segs[pc->seg].name;
    pthread_mutex_lock(&G.mu);
    int n = G.nreq, found = 0;
    for (int q = 0; q < n && q < 2; q++) {
        const wire_seg_ref *g = seg_of(last, G.req_path[q]);
        found |= get_covers(last, q, name, pc) && 2 * (G.req_b[q] - G.req_a[q] + 1) <= g->object_len;
    }
    pthread_mutex_unlock(&G.mu);
    cr_assert(found, "entry 0's first section (%llu-%llu of %s) is not among the plan's first GETs (%d noted)",
              (unsigned long long)pc->offset, (unsigned long long)(pc->offset + pc->stored_len - 1), name, n);
    for (uint32_t i = 0; i < NW; i++) dstl_handle_free(last[i]);
}

Test(remote_restore_gate, tasks_sharing_segments_get_them_in_written_order_whatever_task_starts_later)
{
    /* Two tasks' handles of one writer share its segments: entry 0 materialized later (its
     * handle: the last two segments), entry 1 earlier (all six). Readers read at once, so the
     * task with the most left to read is the restore's critical path and its first segments
     * go first: the objects are fetched in written order, one GET at a time, while no reader
     * waits for anything (a waiting reader's extent would go first, rightly). Ordered by the
     * first entry naming them, entry 1's first two came last while entry 0's were held. */
    enum { NS = 6, PER = 16 };
    dstl_storage *ws = t_remote_open(&fx, wdir, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(ws, "shared", 0, 15, &w), 0, "%s", dstl_last_error());
    dstl_handle *full = NULL, *late = NULL;
    uint64_t late_from = 0;
    uint8_t buf[1024];
    for (uint32_t r = 0; r < NS; r++) {                     /* a segment per round */
        if (r == NS - 2) late_from = dstl_writer_next_seq(w);
        for (uint32_t k = 0; k < PER; k++) {
            uint64_t seq = dstl_writer_next_seq(w);
            size_t len = payload_make(PAYLOAD_RANDOM, r, seq, sizeof buf, buf);
            cr_assert_eq(dstl_append(w, k, buf, len), 0, "%s", dstl_last_error());
        }
        dstl_future *f;
        cr_assert_eq(dstl_persist(w, r == NS - 1 ? late_from : 0, r + 1, &f), 0, "%s", dstl_last_error());
        cr_assert_eq(dstl_future_wait(f, 60000), 0);
        dstl_handle *h;
        cr_assert_eq(dstl_future_result(f, &h), 0, "%s", dstl_last_error());
        dstl_future_free(f);
        if (r == NS - 1) late = h;
        else dstl_handle_free(h);
    }
    dstl_future *f;                                         /* nothing new: the same six segments */
    cr_assert_eq(dstl_persist(w, 0, NS + 1, &f), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_future_wait(f, 60000), 0);
    cr_assert_eq(dstl_future_result(f, &full), 0, "%s", dstl_last_error());
    dstl_future_free(f);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(ws), 0, "%s", dstl_last_error());
    cr_assert_eq(full->wh->nsegs, NS, "the full handle names %zu segments", full->wh->nsegs);
    cr_assert_eq(late->wh->nsegs, 2, "the late handle names %zu segments", late->wh->nsegs);
    cr_assert_str_eq(late->wh->segs[0].name, full->wh->segs[NS - 2].name);

    dstl_storage *s = open_through_gate_with("dstl.recovery.connections", "1");
    dstl_restore_entry e[2] = {{(const dstl_handle *const *)&late, 1, 0, 15},
                               {(const dstl_handle *const *)&full, 1, 0, 15}};
    dstl_restore *p = NULL;
    cr_assert_eq(dstl_restore_plan(s, e, 2, &p), 0, "%s", dstl_last_error());
    dstl_restore_stats st;
    for (int i = 0; i < 60000; i++) {                       /* no reader: every object fetched */
        cr_assert_eq(dstl_restore_get_stats(p, &st), 0);
        if (st.bytes_fetched >= st.object_bytes) break;
        usleep(1000);
    }
    cr_assert_geq(st.bytes_fetched, st.object_bytes, "the plan fetched %lu of %lu bytes", (unsigned long)st.bytes_fetched,
                  (unsigned long)st.object_bytes);
    read_entries_but_first(p, 2, NS * PER, 2 * PER);        /* entry 1: every round; entry 0: two */
    cr_assert_eq(dstl_restore_close(p), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0, "%s", dstl_last_error());

    /* each GET's segment (its index in the full handle), each once, in the order they came */
    const char *names[NS];
    for (int i = 0; i < NS; i++) names[i] = full->wh->segs[i].name;
    int order[NS];
    int n = gets_order(names, NS, order);
    cr_assert_eq(n, NS, "GETs of %d segments, %d named", n, NS);
    /* after the first record's object (fetched first, whichever it is; objects this small are
     * one GET each, fetch_first included): written order */
    for (int k = 2; k < n; k++)
        cr_assert_gt(order[k], order[k - 1], "segment %d fetched after segment %d (in order: %d %d %d %d %d %d)",
                     order[k], order[k - 1], order[0], order[1], order[2], order[3], order[4], order[5]);
    dstl_handle_free(full);
    dstl_handle_free(late);
}

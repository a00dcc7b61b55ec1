/*
 * dstl/read/fetch_int.h — the fetch set's own types, shared by its files only (fetch.h is what
 * restore plans see):
 *
 *   fetch.c        the set's thread: GETs started within the bounds, streamed in, handed to
 *                  the readers waiting; reading held bytes
 *   fetch_needs.c  what the plan names: objects, needed ranges, and the extents they become
 * Everything here is under the set's mu, except where a field says otherwise.
 */
#ifndef DSTL_FETCH_INT_H
#define DSTL_FETCH_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dstl/arena.h"
#include "dstl/read/fetch.h"
#include "s3/s3.h"

/* An object this small is fetched whole, in one GET, whatever ranges of it are needed or
 * marked first: a request's round trip and overhead cost more than its unneeded bytes. */
#define FETCH_SMALL_WHOLE_BYTES (512u << 10)

enum { X_QUEUED, X_FETCHING, X_READY, X_FAILED, X_DIRECT, X_RELEASED };

typedef struct fetch_set fetch_set;

/* A reader waiting for bytes up to object offset `need` of one extent. */
typedef struct waiter {
    pthread_cond_t cv;
    uint64_t need;
    struct waiter *next;
} waiter;

/* A thread that polls (fetch_poll) ranges of the set and sleeps in fetch_wait_progress: one
 * per thread and set, owned by the set (freed with it), found by the thread's id. */
typedef struct poll_token {
    pthread_t thread;
    pthread_cond_t cv;
    uint64_t count;             /* bumped when bytes it polled for arrive, or their extent's
                                 * state changes */
    struct poll_token *next;
} poll_token;

/* A poller's interest in an extent: bytes up to object offset need. */
typedef struct {
    poll_token *t;
    uint64_t need;
} poll_interest;

typedef struct extent {
    fetch_set *f;
    uint32_t obj;
    int state;
    uint64_t off, len;
    uint64_t obj_len;           /* the object's length (checked against what a GET names) */
    int uses, waiters;
    int reserved;               /* the reserve hook counted len */
    int first;                  /* fetched before the object's other extents (fetch_first) */
    int counted;                /* its object is counted fetched (the set's thread only) */
    int arrived;                /* arrive_cb ran (the set's thread only) */
    uint64_t arrive_end;        /* its object's arrival range, when x holds it whole (from */
    void (*arrive_cb)(void *ctx, uint32_t id, const uint8_t *bytes);   /* extent_add; NULL: */
    void *arrive_ctx;           /* none), and where the range starts in buf */
    uint64_t arrive_at;
    uint64_t started_ms;        /* when its GET started */
    _Atomic uint64_t got;       /* bytes from off on that are final (streamed in) */
    _Atomic uint64_t min_need;  /* the smallest need of wl (UINT64_MAX: none) */
    _Atomic uint64_t poll_need; /* the smallest offset a poller (fetch_poll) found missing and
                                 * has not been told of yet (UINT64_MAX: none) */
    poll_interest *pl;          /* the pollers to tell (one entry per token) */
    size_t npl, cap_pl;
    waiter *wl;
    uint8_t *buf;
    s3_op *op;
    int err;
    char msg[1200];
} extent;

typedef struct {
    uint64_t off, end;
} span;

/* A pending range and the uses it brings (fetch_need_uses). */
typedef struct {
    uint64_t off, end;
    uint32_t uses;
} pend_span;

#define FETCH_FIRST_MAX 2

typedef struct {
    char *bucket, *key;
    uint64_t len;
    int64_t prio;
    pend_span *pend;
    size_t npend, cap_pend;
    extent **ext;               /* sorted by off, disjoint */
    size_t next, cap_ext;
    int fetched;
    span first[FETCH_FIRST_MAX];    /* fetch_first: ranges fetched before the rest */
    int nfirst, sections;           /* fetch_sections */
    span arrive;                    /* fetch_on_arrival's range, hook and argument; an */
    void (*arrive_cb)(void *ctx, uint32_t id, const uint8_t *bytes);   /* extent holding the */
    void *arrive_ctx;               /* range takes them at its creation (extent_add) */
} object;

struct fetch_set {
    pthread_mutex_t mu;
    pthread_t thread;
    int stop;
    fetch_opts o;
    mem_arena *arena;         /* the extents' reused memory (NULL: none could be reserved) */
    uint64_t fresh_bytes;       /* bytes of extent buffers allocated outside the arena */
    object *objs;
    size_t nobj, cap_obj;
    unsigned inflight;
    uint64_t held;
    uint64_t blocked_since_ms;  /* 0: not blocked */
    int gate;                   /* fetch_gate: closed until fetch_gate_open or FETCH_GATE_MS */
    uint64_t gate_since_ms;     /* ... after the first extents were complete (0: not yet) */
    fetch_stats st;
    poll_token *tokens;         /* the threads that polled */
    uint64_t gen;               /* unique per set: a thread's cached token names it (my_token) */
    /* the client's response bytes as of the last hand-over to readers (on_progress, the set's
     * thread): stored before the extent's got, so bytes_fetched never lags bytes delivered */
    _Atomic uint64_t bytes_in;
};

/* Grows *p (of *cap elements of elem bytes) to hold need. 0 or -ENOMEM. */
int fetch_grow(void **p, size_t *cap, size_t need, size_t elem);
/* An extent nobody needs any more gives its bytes back (fetch.c). Under mu. */
void fetch_unused(fetch_set *f, extent *x);

#endif

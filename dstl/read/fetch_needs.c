/*
 * dstl/read/fetch_needs.c — what a restore plan names to its fetch set (fetch.h): objects,
 * the ranges of them its readers need (each a use), the ranges fetched first, the gate, the
 * range whose arrival runs a hook, and the extents all that becomes at commit: whole objects
 * when most is needed, merged runs otherwise.
 * fetch.c's thread fetches the extents; readers release their uses here.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "dstl/read/fetch_int.h"
#include "dstl/err.h"

int fetch_object(fetch_set *f, const char *bucket, const char *key, uint64_t object_len, int64_t prio,
                 uint32_t *id)
{
    pthread_mutex_lock(&f->mu);
    int rc = fetch_grow((void **)&f->objs, &f->cap_obj, f->nobj + 1, sizeof *f->objs);
    object *ob = rc ? NULL : &f->objs[f->nobj];
    if (ob) {
        *ob = (object){.bucket = strdup(bucket), .key = strdup(key), .len = object_len, .prio = prio};
        if (!ob->bucket || !ob->key) {
            free(ob->bucket);
            free(ob->key);
            rc = -ENOMEM;
        } else {
            *id = (uint32_t)f->nobj++;
            f->st.objects++;
        }
    }
    pthread_mutex_unlock(&f->mu);
    return rc < 0 ? err_fail(rc, "restore: out of memory") : 0;
}

int fetch_need_uses(fetch_set *f, uint32_t id, uint64_t off, uint64_t len, uint32_t uses)
{
    pthread_mutex_lock(&f->mu);
    object *ob = &f->objs[id];
    int bad = off + len > ob->len || len == 0 || uses == 0 || uses > INT_MAX;
    int rc = bad ? -EINVAL : fetch_grow((void **)&ob->pend, &ob->cap_pend, ob->npend + 1, sizeof *ob->pend);
    if (rc == 0) ob->pend[ob->npend++] = (pend_span){off, off + len, uses};
    pthread_mutex_unlock(&f->mu);
    if (rc == -EINVAL)
        return err_fail(rc, "restore: range %llu+%llu outside object %s (%llu bytes)", (unsigned long long)off,
                        (unsigned long long)len, ob->key, (unsigned long long)ob->len);
    return rc < 0 ? err_fail(rc, "restore: out of memory") : 0;
}

int fetch_need(fetch_set *f, uint32_t id, uint64_t off, uint64_t len) { return fetch_need_uses(f, id, off, len, 1); }

int fetch_need_spans(fetch_set *f, uint32_t id, const fetch_span *s, size_t n)
{
    pthread_mutex_lock(&f->mu);
    object *ob = &f->objs[id];
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (s[i].end <= s[i].off || s[i].end > ob->len) bad = i;
    int rc = bad < n ? -EINVAL : fetch_grow((void **)&ob->pend, &ob->cap_pend, ob->npend + n, sizeof *ob->pend);
    for (size_t i = 0; rc == 0 && i < n; i++) ob->pend[ob->npend++] = (pend_span){s[i].off, s[i].end, 1};
    pthread_mutex_unlock(&f->mu);
    if (rc == -EINVAL)
        return err_fail(rc, "restore: range %llu-%llu outside object %s (%llu bytes)", (unsigned long long)s[bad].off,
                        (unsigned long long)s[bad].end, ob->key, (unsigned long long)ob->len);
    return rc < 0 ? err_fail(rc, "restore: out of memory") : 0;
}

static int cmp_off(const void *a, const void *b)
{
    uint64_t x, y;
    memcpy(&x, a, sizeof x);
    memcpy(&y, b, sizeof y);
    return x < y ? -1 : x > y;
}

static uint64_t off_of(const uint8_t *e)
{
    uint64_t k;
    memcpy(&k, e, sizeof k);
    return k;
}

_Static_assert(offsetof(pend_span, off) == 0, "fetch_sort_by_off sorts by the first member");
_Static_assert(offsetof(fetch_span, off) == 0, "fetch_sort_by_off sorts by the first member");

/* One LSD pass: src's n elements of size bytes into dst by the byte of their key at shift,
 * count[] the digits' starts. Inlined with size a constant (the common sizes, below), each
 * element's copy is a move of registers, not a call to memcpy: a plan sorts each object's
 * 1,024 sections at w1024. */
static inline __attribute__((always_inline)) void radix_pass(const uint8_t *src, uint8_t *dst, size_t n, size_t size,
                                                             unsigned shift, size_t *count)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t *e = src + i * size;
        memcpy(dst + count[(off_of(e) >> shift) & 0xff]++ * size, e, size);
    }
}

void fetch_sort_by_off(void *v, size_t n, size_t size)
{
    uint8_t *a = v, tmp[64];
    if (n < 2 || size > sizeof tmp) {
        if (n >= 2) qsort(v, n, size, cmp_off);
        return;
    }
    if (n < 32) {                               /* insertion sort: stable, and cheap this small */
        for (size_t i = 1; i < n; i++) {
            uint64_t k = off_of(a + i * size);
            size_t j = i;
            while (j > 0 && off_of(a + (j - 1) * size) > k) j--;
            if (j == i) continue;
            memcpy(tmp, a + i * size, size);
            memmove(a + (j + 1) * size, a + j * size, (i - j) * size);
            memcpy(a + j * size, tmp, size);
        }
        return;
    }
    uint8_t *b = malloc(n * size);
    if (!b) {
        qsort(v, n, size, cmp_off);
        return;
    }
    /* every pass's digit counts in one read of the keys; a pass whose digit is the same for
     * every key moves nothing and is skipped */
    static _Thread_local size_t count[8][256];
    memset(count, 0, sizeof count);
    uint64_t max = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t k = off_of(a + i * size);
        max |= k;
        for (unsigned d = 0; d < 8 && (k >> (8 * d)); d++) count[d][(k >> (8 * d)) & 0xff]++;
    }
    uint8_t *src = a, *dst = b;
    for (unsigned d = 0; d < 8 && (max >> (8 * d)); d++) {
        size_t *c = count[d], zeros = n;   /* keys shorter than this digit were not counted: 0 */
        for (unsigned x = 1; x < 256; x++) zeros -= c[x];
        c[0] = zeros;
        int one = 0;
        for (unsigned x = 0; x < 256; x++) one |= c[x] == n;
        if (one) continue;
        size_t at = 0;
        for (unsigned x = 0; x < 256; x++) {
            size_t k = c[x];
            c[x] = at;
            at += k;
        }
        if (size == sizeof(fetch_span)) radix_pass(src, dst, n, sizeof(fetch_span), 8 * d, c);
        else if (size == sizeof(pend_span)) radix_pass(src, dst, n, sizeof(pend_span), 8 * d, c);
        else radix_pass(src, dst, n, size, 8 * d, c);
        uint8_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, n * size);
    free(b);
}

/* Adds an extent [off, end) to ob, keeping the order. Under mu. */
static int extent_add(fetch_set *f, object *ob, uint32_t id, uint64_t off, uint64_t end)
{
    extent *x = calloc(1, sizeof *x);
    if (!x || fetch_grow((void **)&ob->ext, &ob->cap_ext, ob->next + 1, sizeof *ob->ext) < 0) {
        free(x);
        return -ENOMEM;
    }
    *x = (extent){.f = f, .obj = id, .state = X_QUEUED, .off = off, .len = end - off, .obj_len = ob->len,
                  .min_need = UINT64_MAX, .poll_need = UINT64_MAX};
    if (ob->arrive_cb && ob->arrive.off >= off && ob->arrive.end <= end) {
        x->arrive_cb = ob->arrive_cb;
        x->arrive_ctx = ob->arrive_ctx;
        x->arrive_at = ob->arrive.off - off;
        x->arrive_end = ob->arrive.end;
    }
    size_t i = ob->next;
    while (i > 0 && ob->ext[i - 1]->off > off) {
        ob->ext[i] = ob->ext[i - 1];
        i--;
    }
    ob->ext[i] = x;
    ob->next++;
    return 0;
}

/* Adds extents for [off, end) where ob has none yet. Under mu. */
static int cover(fetch_set *f, object *ob, uint32_t id, uint64_t off, uint64_t end)
{
    for (size_t k = 0; k < ob->next && off < end; k++) {
        const extent *x = ob->ext[k];
        if (x->off + x->len <= off) continue;
        if (x->off >= end) break;
        if (x->off > off && extent_add(f, ob, id, off, x->off) < 0) return -ENOMEM;
        if (x->off > off) k++;             /* the extent just added sits before x */
        off = x->off + x->len;
    }
    return off < end ? extent_add(f, ob, id, off, end) : 0;
}

static int cmp_gap(const void *a, const void *b, void *ctx)
{
    const span *m = ctx;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    uint64_t gx = m[x + 1].off - m[x].end, gy = m[y + 1].off - m[y].end;
    return gx < gy ? -1 : gx > gy;
}

/* Merges the sorted spans m[0..n) in place: overlapping and adjacent ones, then gaps below
 * merge_gap, smallest first, while the gaps read through stay within a share of the needed
 * bytes. Returns the new count; *need gets the needed bytes. */
static size_t merge_spans(span *m, size_t n, uint64_t merge_gap, int sections, uint64_t *need)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k && m[i].off <= m[k - 1].end) {
            if (m[i].end > m[k - 1].end) m[k - 1].end = m[i].end;
        } else {
            m[k++] = m[i];
        }
    }
    *need = 0;
    for (size_t i = 0; i < k; i++) *need += m[i].end - m[i].off;
    size_t *gaps = k > 1 ? malloc((k - 1) * sizeof *gaps) : NULL;
    if (!gaps) return k;                     /* nothing to read through (or no memory for it) */
    unsigned char *join = calloc(k, 1);
    for (size_t i = 0; i + 1 < k; i++) gaps[i] = i;
    qsort_r(gaps, k - 1, sizeof *gaps, cmp_gap, m);
    uint64_t waste = 0, allowed = sections ? UINT64_MAX : *need / FETCH_GAP_SHARE_DEN;
    if (sections) merge_gap = FETCH_SECTION_GAP_BYTES;
    for (size_t g = 0; join && g + 1 < k; g++) {
        uint64_t gap = m[gaps[g] + 1].off - m[gaps[g]].end;
        if (gap >= merge_gap || waste + gap > allowed) break;
        waste += gap;
        join[gaps[g]] = 1;
    }
    size_t out = 0;
    for (size_t i = 0; join && i < k; i++) {
        if (out && join[i - 1]) m[out - 1].end = m[i].end;
        else m[out++] = m[i];
    }
    free(join);
    free(gaps);
    return join ? out : k;
}

int fetch_commit(fetch_set *f, uint32_t id)
{
    pthread_mutex_lock(&f->mu);
    object *ob = &f->objs[id];
    size_t sorted = 1;          /* a plan names an object's sections mostly in offset order */
    while (sorted < ob->npend && ob->pend[sorted - 1].off <= ob->pend[sorted].off) sorted++;
    if (sorted < ob->npend) fetch_sort_by_off(ob->pend, ob->npend, sizeof *ob->pend);
    span *mg = malloc((ob->npend ? ob->npend : 1) * sizeof *mg);
    int rc = mg ? 0 : -ENOMEM;
    uint64_t need = 0, have = 0;
    size_t m = 0;
    if (mg) {
        for (size_t i = 0; i < ob->npend; i++) mg[i] = (span){ob->pend[i].off, ob->pend[i].end};
        m = merge_spans(mg, ob->npend, f->o.merge_gap_bytes, ob->sections, &need);
    }
    /* fetch_first: those ranges are extents of their own, fetched before any other (a small
     * object: the whole of it, one extent) */
    int small = ob->len <= FETCH_SMALL_WHOLE_BYTES;
    for (int i = 0; rc == 0 && i < ob->nfirst; i++) {
        uint64_t a = small ? 0 : ob->first[i].off, b = small ? ob->len : ob->first[i].end;
        rc = cover(f, ob, id, a, b);
        for (size_t k = 0; rc == 0 && k < ob->next; k++)
            if (ob->ext[k]->off >= a && ob->ext[k]->off < b) ob->ext[k]->first = 1;
    }
    for (size_t k = 0; k < ob->next; k++) have += ob->ext[k]->len;
    if (rc == 0 && m && (small || (need + have) * FETCH_WHOLE_DEN >= ob->len * FETCH_WHOLE_NUM))
        rc = cover(f, ob, id, 0, ob->len);
    for (size_t i = 0; i < m && rc == 0; i++) rc = cover(f, ob, id, mg[i].off, mg[i].end);
    free(mg);
    /* each range is one use of every extent it overlaps, as fetch_release will count it */
    for (size_t i = 0; rc == 0 && i < ob->npend; i++)
        for (size_t k = 0; k < ob->next; k++) {
            extent *x = ob->ext[k];
            if (x->off >= ob->pend[i].end || x->off + x->len <= ob->pend[i].off) continue;
            x->uses += (int)ob->pend[i].uses;
            if (x->state == X_RELEASED) x->state = X_QUEUED;     /* needed again: fetched again */
        }
    if (rc == 0) ob->npend = 0;
    pthread_mutex_unlock(&f->mu);
    s3_client_wakeup(f->o.cli);
    return rc < 0 ? err_fail(rc, "restore: out of memory") : 0;
}

void fetch_gate(fetch_set *f)
{
    pthread_mutex_lock(&f->mu);
    f->gate = 1;
    f->gate_since_ms = 0;
    pthread_mutex_unlock(&f->mu);
}

void fetch_gate_open(fetch_set *f)
{
    pthread_mutex_lock(&f->mu);
    int was = f->gate;
    f->gate = 0;
    pthread_mutex_unlock(&f->mu);
    if (was) s3_client_wakeup(f->o.cli);
}

int fetch_on_arrival(fetch_set *f, uint32_t id, uint64_t off, uint64_t len,
                     void (*cb)(void *ctx, uint32_t id, const uint8_t *bytes), void *ctx)
{
    pthread_mutex_lock(&f->mu);
    object *ob = id < f->nobj ? &f->objs[id] : NULL;
    int ok = ob && !ob->arrive_cb && !ob->next && len && off + len <= ob->len;
    if (ok) {
        ob->arrive = (span){off, off + len};
        ob->arrive_ctx = ctx;
        ob->arrive_cb = cb;
    }
    pthread_mutex_unlock(&f->mu);
    return ok ? 0 : -EINVAL;
}

int fetch_first(fetch_set *f, uint32_t id, uint64_t off, uint64_t len)
{
    pthread_mutex_lock(&f->mu);
    object *ob = &f->objs[id];
    int ok = len && off + len <= ob->len && ob->nfirst < FETCH_FIRST_MAX;
    if (ok) ob->first[ob->nfirst++] = (span){off, off + len};
    pthread_mutex_unlock(&f->mu);
    return ok ? 0 : -EINVAL;
}

void fetch_sections(fetch_set *f, uint32_t id)
{
    pthread_mutex_lock(&f->mu);
    f->objs[id].sections = 1;
    pthread_mutex_unlock(&f->mu);
}

void fetch_release(fetch_set *f, uint32_t id, uint64_t off, uint64_t len)
{
    pthread_mutex_lock(&f->mu);
    object *ob = &f->objs[id];
    uint64_t held = f->held;
    for (size_t k = 0; k < ob->next; k++) {
        extent *x = ob->ext[k];
        if (x->off >= off + len || x->off + x->len <= off || x->uses == 0) continue;
        if (--x->uses == 0) fetch_unused(f, x);
    }
    int freed = f->held < held;
    if (freed) f->blocked_since_ms = 0;
    pthread_mutex_unlock(&f->mu);
    if (freed) s3_client_wakeup(f->o.cli);      /* room in the budget: queued extents may start */
}


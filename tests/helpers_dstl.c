/*
 * tests/helpers_dstl.c — see helpers_dstl.h.
 */
#include "tests/helpers_dstl.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/helpers.h"
#include "tests/helpers_remote.h"
#include "tests/payload.h"

static const t_remote *remote;     /* remote mode: t_config_remote */

void t_config_remote(const t_remote *f) { remote = f; }

static dstl_config *config_va(const char *dir, va_list ap)
{
    dstl_config *c = NULL;
    cr_assert_eq(dstl_config_new(&c), 0, "%s", dstl_last_error());
    cr_assert_eq(dstl_config_set(c, "dstl.local.dir", dir), 0);
    cr_assert_eq(dstl_config_set(c, "dstl.durability", "local"), 0);
    if (remote) {
        t_remote_set(remote, c);
        /* RGW 16 ignores checksum headers; a signed body digest it verifies */
        cr_assert_eq(dstl_config_set(c, "dstl.s3.payload-signing", "sha256"), 0);
    }
    const char *k;
    while ((k = va_arg(ap, const char *))) {
        const char *v = va_arg(ap, const char *);
        cr_assert_eq(dstl_config_set(c, k, v), 0, "%s", dstl_last_error());
    }
    return c;
}

dstl_config *t_config(const char *dir, ...)
{
    va_list ap;
    va_start(ap, dir);
    dstl_config *c = config_va(dir, ap);
    va_end(ap);
    return c;
}

dstl_storage *t_storage_open(const char *dir, ...)
{
    va_list ap;
    va_start(ap, dir);
    dstl_config *c = config_va(dir, ap);
    va_end(ap);
    dstl_storage *s = NULL;
    cr_assert_eq(dstl_storage_open(c, &s), 0, "open: %s", dstl_last_error());
    dstl_config_free(c);
    return s;
}

uint64_t t_append_n(dstl_writer *w, uint32_t wid, uint64_t n, uint32_t kg_first, uint32_t nkg, size_t max_len)
{
    uint8_t *buf = malloc(max_len + 1);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t seq = dstl_writer_next_seq(w);
        size_t len = payload_make(PAYLOAD_RANDOM, wid, seq, max_len, buf);
        cr_assert_eq(dstl_append(w, kg_first + (uint32_t)(seq % nkg), buf, len), 0, "%s", dstl_last_error());
    }
    free(buf);
    return dstl_writer_next_seq(w);
}

dstl_handle *t_persist(dstl_writer *w, uint64_t from, uint64_t cp)
{
    dstl_future *f = NULL;
    cr_assert_eq(dstl_persist(w, from, cp, &f), 0, "persist: %s", dstl_last_error());
    cr_assert_eq(dstl_future_wait(f, 30000), 0, "persist wait: %s", dstl_last_error());
    dstl_handle *h = NULL;
    cr_assert_eq(dstl_future_result(f, &h), 0, "persist result: %s", dstl_last_error());
    dstl_future_free(f);
    return h;
}

int t_persist_result(dstl_writer *w, uint64_t from, uint64_t cp, dstl_handle **out)
{
    dstl_future *f = NULL;
    int rc = dstl_persist(w, from, cp, &f);
    if (rc < 0) return rc;
    cr_assert_eq(dstl_future_wait(f, 20000), 0);
    rc = dstl_future_result(f, out);
    dstl_future_free(f);
    return rc;
}

long t_verify(dstl_storage *s, const dstl_handle *h, uint32_t wid, uint32_t kg_first, uint32_t nkg,
              uint32_t kgf, uint32_t kgl, size_t max_len)
{
    dstl_reader *r = NULL;
    int rc = dstl_reader_open(s, h, kgf, kgl, &r);
    if (rc < 0) return rc;
    uint64_t seq = dstl_handle_from_seq(h), to = dstl_handle_to_seq(h);
    long n = 0;
    dstl_record rec;
    for (;;) {
        while (seq < to) {
            uint32_t kg = kg_first + (uint32_t)(seq % nkg);
            if (kg >= kgf && kg <= kgl) break;
            seq++;
        }
        rc = dstl_reader_next(r, &rec);
        if (rc <= 0) break;
        cr_expect_eq(rec.seq, seq, "record seq %lu, expected %lu", (unsigned long)rec.seq, (unsigned long)seq);
        if (rec.seq != seq) {
            rc = -1;
            break;
        }
        cr_expect_eq(rec.key_group, kg_first + (uint32_t)(seq % nkg));
        size_t len = payload_len(wid, seq, max_len);
        cr_expect_eq(rec.len, len, "seq %lu: len %zu, expected %zu", (unsigned long)seq, rec.len, len);
        size_t at = rec.len == len ? payload_check(PAYLOAD_RANDOM, wid, seq, rec.data, len) : 0;
        if (rec.len != len || at != len) {
            if (rec.len == len) cr_expect_fail("seq %lu: payload differs from byte %zu on", (unsigned long)seq, at);
            rc = -1;
            break;
        }
        seq++;
        n++;
    }
    if (rc == 0) {
        while (seq < to) {
            uint32_t kg = kg_first + (uint32_t)(seq % nkg);
            cr_expect(!(kg >= kgf && kg <= kgl), "record seq %lu missing", (unsigned long)seq);
            seq++;
        }
    }
    dstl_reader_close(r);
    return rc < 0 ? rc : n;
}

static size_t count_local(const char *dir);

size_t t_count_segments(const char *dir)
{
    size_t local = count_local(dir);
    if (!remote) return local;
    size_t objects = 0, uploads = 0;
    for (int i = 0; i < 1000; i++) {           /* remote deletes run after the local unlink */
        t_remote_count(remote, &objects, &uploads);
        local = count_local(dir);
        if (objects == local && uploads == 0) break;
        usleep(10000);
    }
    cr_expect_eq(objects, local, "%zu segment objects in %s/, %zu local segments", objects, remote->uri, local);
    cr_expect_eq(uploads, 0, "%zu incomplete multipart uploads left", uploads);
    return local;
}

/* Whether file path (named name, "<run>-<no>.seg") holds segment <no>: its header's magic and
 * segment number. A reserved name holds nothing yet: an empty file, or the bytes of the deleted
 * segment recycled into it (dstl/local/segstore.h). */
static int holds_its_segment(const char *path, const char *name)
{
    const char *dash = strrchr(name, '-');
    if (!dash) return 0;
    unsigned long long no = strtoull(dash + 1, NULL, 10);
    uint8_t h[24];
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t got = fread(h, 1, sizeof h, f);
    fclose(f);
    if (got < sizeof h || memcmp(h, "DSTLSEG\n", 8) != 0) return 0;
    unsigned long long hno = 0;
    for (int i = 7; i >= 0; i--) hno = hno << 8 | h[16 + i];   /* little-endian u64 at 16 */
    return hno == no;
}

static size_t count_local(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 4, ".seg") != 0) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        n += holds_its_segment(p, e->d_name);
    }
    closedir(d);
    return n;
}

void t_engine_or_skip(const char *name)
{
    char *dir = t_mkdtemp("engine");
    cr_assert_not_null(dir, "no scratch dir for probing engine %s", name);
    int rc = 0, control = 0;
    char detail[512] = "";
    for (int pass = 0; pass < 2; pass++) {
        const char *engine = pass == 0 ? name : "psync";
        dstl_config *c = NULL;
        cr_assert_eq(dstl_config_new(&c), 0, "%s", dstl_last_error());
        cr_assert_eq(dstl_config_set(c, "dstl.local.dir", dir), 0, "%s", dstl_last_error());
        cr_assert_eq(dstl_config_set(c, "dstl.durability", "local"), 0, "%s", dstl_last_error());
        cr_assert_eq(dstl_config_set(c, "dstl.io.engine", engine), 0, "engine '%s': %s", engine, dstl_last_error());
        dstl_storage *s = NULL;
        int r = dstl_storage_open(c, &s);
        dstl_config_free(c);
        if (r == 0) cr_assert_eq(dstl_storage_close(s), 0, "closing the %s probe: %s", engine, dstl_last_error());
        if (pass == 0) {
            rc = r;
            if (r == 0) break;                  /* the engine works */
            snprintf(detail, sizeof detail, "%s", dstl_last_error());
        } else {
            control = r;
        }
    }
    t_rm_rf(dir);
    free(dir);
    if (rc == 0) return;
    cr_assert_eq(control, 0, "engine %s: the probe failed (%d: %s), and so did psync (%d: %s): not the engine",
                 name, rc, detail, control, dstl_last_error());
    const char *ename = rc < 0 && rc > -4096 ? strerrorname_np(-rc) : NULL;
    cr_skip_test("I/O engine %s is unavailable here: opening a storage on it failed with %s (%d, %s): %s", name,
                 ename ? ename : "a DSTL code", rc, dstl_strerror(rc), detail);
}

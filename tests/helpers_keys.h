/*
 * tests/helpers_keys.h — key files and byte searches for the encryption tests (tk_ prefix).
 * Static functions: included by test_dstl_encrypt.c and test_remote_encrypt.c.
 */
#ifndef DSTL_TESTS_HELPERS_KEYS_H
#define DSTL_TESTS_HELPERS_KEYS_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dstl.h"
#include "tests/helpers.h"

#define TK_HEX_A "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
#define TK_HEX_B "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
#define TK_MARK  "PAYMENT-CARD-4111-1111-"   /* in every record's payload */

/* Writes text to dir/name with mode (through a temporary file renamed into place, as an
 * operator rotating keys would); returns the path (malloc'd). */
static inline char *tk_write(const char *dir, const char *name, const char *text, mode_t mode)
{
    char *path = malloc(strlen(dir) + strlen(name) + 2), tmp[1024];
    sprintf(path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    cr_assert_eq(t_write_file(tmp, text, strlen(text)), 0, "cannot write %s", tmp);
    cr_assert_eq(chmod(tmp, mode), 0);
    cr_assert_eq(rename(tmp, path), 0);
    return path;
}

/* Appends n records with a marked payload (TK_MARK + writer tag + seq) in key groups seq % nkg. */
static inline uint64_t tk_append(dstl_writer *w, const char *tag, uint64_t first, uint64_t n, uint32_t nkg)
{
    for (uint64_t i = first; i < first + n; i++) {
        char buf[128];
        int len = snprintf(buf, sizeof buf, TK_MARK "%s-%llu-padding-padding-padding", tag, (unsigned long long)i);
        cr_assert_eq(dstl_append(w, (uint32_t)(i % nkg), buf, (size_t)len), 0, "%s", dstl_last_error());
    }
    return first + n;
}

/* Reads h over [kgf, kgl] and checks that exactly the records of [from, to) with key group
 * seq % nkg in range come back with their payloads. Returns the count, or the error. */
static inline long tk_verify(dstl_storage *s, const dstl_handle *h, const char *tag, uint64_t from, uint64_t to,
                             uint32_t nkg, uint32_t kgf, uint32_t kgl)
{
    dstl_reader *r;
    int rc = dstl_reader_open(s, h, kgf, kgl, &r);
    if (rc < 0) return rc;
    uint64_t want = from;
    long n = 0;
    dstl_record rec;
    while ((rc = dstl_reader_next(r, &rec)) == 1) {
        while (want < to && !(want % nkg >= kgf && want % nkg <= kgl)) want++;
        cr_assert_eq(rec.seq, want, "seq %llu, expected %llu", (unsigned long long)rec.seq, (unsigned long long)want);
        char buf[128];
        int len = snprintf(buf, sizeof buf, TK_MARK "%s-%llu-padding-padding-padding", tag, (unsigned long long)want);
        cr_assert_eq(rec.len, (size_t)len);
        cr_assert_eq(memcmp(rec.data, buf, (size_t)len), 0, "payload of seq %llu", (unsigned long long)want);
        want++;
        n++;
    }
    dstl_reader_close(r);
    if (rc < 0) return rc;
    while (want < to && !(want % nkg >= kgf && want % nkg <= kgl)) want++;
    cr_assert_eq(want, to, "records end at %llu, expected %llu", (unsigned long long)want, (unsigned long long)to);
    return n;
}

/* Whether needle occurs in any regular file under dir (recursively); *files counts them. */
static inline int tk_dir_has(const char *dir, const void *needle, size_t n, size_t *files)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[8192];
        if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= sizeof p) continue;
        struct stat st;
        if (lstat(p, &st) < 0) continue;
        if (S_ISDIR(st.st_mode)) {
            found = tk_dir_has(p, needle, n, files);
        } else if (S_ISREG(st.st_mode)) {
            size_t len;
            void *b = t_read_file(p, &len);
            if (b) {
                (*files)++;
                found = memmem(b, len, needle, n) != NULL;
                free(b);
            }
        }
    }
    closedir(d);
    return found;
}

/* The 32 key bytes of a hex key. */
static inline void tk_key_bytes(const char *hex, unsigned char out[32])
{
    for (int i = 0; i < 32; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (unsigned char)v;
    }
}

#endif

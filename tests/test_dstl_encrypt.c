/*
 * tests/test_dstl_encrypt.c — encryption at rest through the storage API (local durability):
 * the key file (format, mode, errors that never echo key bytes, the environment variable),
 * round trips with and without compression and by key-group range, rotation without restart
 * (both keys read, then the retired key's segments refused by name), a wrong key, a storage
 * without a key file meeting an encrypted segment, a tampered segment file, and no plaintext
 * or key bytes in the local dir.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dstl.h"
#include "dstl/local/ioeng.h"
#include "dstl/seams.h"
#include "tests/helpers.h"
#include "tests/helpers_dstl.h"
#include "tests/helpers_keys.h"
#include "wire/wire.h"

#define NKG 8

/* The first segment file a handle names, and its footer's key id. */
static void handle_segment(const char *dir, const dstl_handle *h, char *path, size_t cap, char *key_id)
{
    void *b;
    size_t n;
    cr_assert_eq(dstl_handle_serialize(h, &b, &n), 0);
    wire_handle *wh;
    wire_err e = {{0}};
    cr_assert_eq(wire_handle_decode(b, n, &wh, &e), 0, "%s", e.msg);
    free(b);
    snprintf(path, cap, "%s/%s", dir, wh->segs[0].name);
    size_t len;
    uint8_t *seg = t_read_file(path, &len);
    cr_assert_not_null(seg, "%s", path);
    int rc = wire_footer_key_id(seg + wh->segs[0].footer_offset, wh->segs[0].footer_len, key_id);
    if (rc == 0) snprintf(key_id, WIRE_KEY_ID_MAX + 1, "(plain)");
    free(seg);
    wire_handle_free(wh);
}

static int open_err(const char *dir, const char *keyfile, char *detail, size_t cap)
{
    dstl_config *c = t_config(dir, "dstl.encryption.key-file", keyfile, NULL);
    dstl_storage *s = NULL;
    int rc = dstl_storage_open(c, &s);
    snprintf(detail, cap, "%s", dstl_last_error());
    dstl_config_free(c);
    if (rc == 0) dstl_storage_close(s);
    return rc;
}

Test(dstl_encrypt, a_key_file_readable_by_group_or_others_is_refused_naming_its_mode)
{
    char *dir = t_mkdtemp("enc-mode"), detail[1024];
    char *kf = tk_write(dir, "keys", "a: " TK_HEX_A "\n", 0644);
    cr_assert_eq(open_err(dir, kf, detail, sizeof detail), DSTL_ECRYPTO);
    cr_assert(strstr(detail, kf) && strstr(detail, "mode 0644"), "%s", detail);
    cr_assert_null(strstr(detail, TK_HEX_A));
    cr_assert_eq(chmod(kf, 0640), 0);
    cr_assert_eq(open_err(dir, kf, detail, sizeof detail), DSTL_ECRYPTO, "group-readable: %s", detail);
    cr_assert_eq(chmod(kf, 0600), 0);
    cr_assert_eq(open_err(dir, kf, detail, sizeof detail), 0, "%s", detail);
    cr_assert_eq(chmod(kf, 0400), 0);
    cr_assert_eq(open_err(dir, kf, detail, sizeof detail), 0, "%s", detail);
    free(kf);
    t_rm_rf(dir);
    free(dir);
}

Test(dstl_encrypt, a_malformed_key_file_names_file_and_line_and_never_its_bytes)
{
    static const struct {
        const char *text, *line, *why;
    } cases[] = {
        {"# keys\n\n" TK_HEX_A "\n", ":3:", "no ':'"},
        {"ok: " TK_HEX_B "\nbad id!: " TK_HEX_A "\n", ":2:", "key id"},
        {"a: " TK_HEX_A "00\n", ":1:", "64 hex digits"},
        {"a: " TK_HEX_A "\nb: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeZ\n", ":2:", "not a hex digit"},
        {"a: " TK_HEX_A "\n# rotated\na: " TK_HEX_B "\n", ":3:", "line 1 again"},
        {"# only comments\n\n", "no keys", "no keys"},
        {TK_HEX_A ": " TK_HEX_B "\n", "", ""},   /* id and key swapped: the "id" is valid, the key is too: loads */
        {"a: " TK_HEX_A " # the 2026 key\n", "", ""},   /* a trailing comment */
    };
    char *dir = t_mkdtemp("enc-parse"), detail[1024];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *kf = tk_write(dir, "keys", cases[i].text, 0600);
        int rc = open_err(dir, kf, detail, sizeof detail);
        if (!cases[i].why[0]) {
            cr_assert_eq(rc, 0, "case %zu: %s", i, detail);
        } else {
            cr_assert_eq(rc, DSTL_ECONFIG, "case %zu: %d %s", i, rc, detail);
            cr_assert(strstr(detail, kf) && strstr(detail, cases[i].line) && strstr(detail, cases[i].why),
                      "case %zu: %s", i, detail);
            cr_assert_null(strstr(detail, "0102030405"), "case %zu echoes key bytes: %s", i, detail);
            cr_assert_null(strstr(detail, "a1a2a3a4"), "case %zu echoes key bytes: %s", i, detail);
            cr_assert_null(strstr(detail, "bad id"), "case %zu echoes the line: %s", i, detail);
        }
        free(kf);
    }
    /* a missing file */
    cr_assert_eq(open_err(dir, "/nonexistent/keys", detail, sizeof detail), DSTL_ECONFIG);
    cr_assert(strstr(detail, "dstl.encryption.key-file") && strstr(detail, "/nonexistent/keys"), "%s", detail);
    t_rm_rf(dir);
    free(dir);
}

/* One encrypted storage's round trip; returns after checking the dir holds no plaintext. */
static void round_trip(const char *compression)
{
    char *dir = t_mkdtemp("enc-rt");
    char *kf = tk_write(dir, "keys", "old: " TK_HEX_B "\nk-2026.12: " TK_HEX_A "\n", 0600);
    dstl_storage *s = t_storage_open(dir, "dstl.encryption.key-file", kf, "dstl.compression", compression, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(s, "orders-writer", 0, NKG - 1, &w), 0);
    uint64_t end = tk_append(w, "x", 0, 300, NKG);
    dstl_handle *h1 = t_persist(w, 0, 1);
    uint64_t end2 = tk_append(w, "x", end, 200, NKG);
    dstl_handle *h2 = t_persist(w, 0, 2);
    cr_assert_eq(tk_verify(s, h1, "x", 0, end, NKG, 0, NKG - 1), (long)end, "%s", dstl_last_error());
    cr_assert_eq(tk_verify(s, h2, "x", 0, end2, NKG, 0, NKG - 1), (long)end2, "%s", dstl_last_error());
    for (uint32_t kg = 0; kg < NKG; kg += 3) {   /* key-group-filtered reads of encrypted runs */
        long n = tk_verify(s, h2, "x", 0, end2, NKG, kg, kg + 1 < NKG ? kg + 1 : kg);
        cr_assert_gt(n, 0, "kg %u: %s", kg, dstl_last_error());
    }
    char seg[1024], kid[WIRE_KEY_ID_MAX + 1];
    handle_segment(dir, h2, seg, sizeof seg, kid);
    cr_assert_str_eq(kid, "k-2026.12", "new segments use the last key listed");
    /* nothing readable in the local dir but the key file itself */
    cr_assert_eq(unlink(kf), 0);
    size_t files = 0;
    unsigned char key[32];
    tk_key_bytes(TK_HEX_A, key);
    cr_assert_eq(tk_dir_has(dir, TK_MARK, strlen(TK_MARK), &files), 0, "a payload in clear under %s", dir);
    cr_assert_gt(files, 0);
    cr_assert_eq(tk_dir_has(dir, "orders-writer", 13, &files), 0, "a writer id in clear in a segment");
    cr_assert_eq(tk_dir_has(dir, key, 32, &files), 0, "key bytes under the dir");
    dstl_handle_free(h1);
    dstl_handle_free(h2);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    free(kf);
    t_rm_rf(dir);
    free(dir);
}

Test(dstl_encrypt, round_trip_without_compression) { round_trip("none"); }
Test(dstl_encrypt, round_trip_with_lz4) { round_trip("lz4"); }
Test(dstl_encrypt, round_trip_with_zstd) { round_trip("zstd"); }

Test(dstl_encrypt, the_environment_variable_sets_the_key_file)
{
    char *dir = t_mkdtemp("enc-env");
    char *kf = tk_write(dir, "keys", "env-key: " TK_HEX_A "\n", 0600);
    setenv("DSTL_ENCRYPTION_KEY_FILE", kf, 1);
    dstl_storage *s = t_storage_open(dir, NULL);
    unsetenv("DSTL_ENCRYPTION_KEY_FILE");
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(s, "w", 0, NKG - 1, &w), 0);
    uint64_t end = tk_append(w, "e", 0, 10, NKG);
    dstl_handle *h = t_persist(w, 0, 1);
    char seg[1024], kid[WIRE_KEY_ID_MAX + 1];
    handle_segment(dir, h, seg, sizeof seg, kid);
    cr_assert_str_eq(kid, "env-key");
    cr_assert_eq(tk_verify(s, h, "e", 0, end, NKG, 0, NKG - 1), (long)end);
    dstl_handle_free(h);
    dstl_writer_close(w);
    dstl_storage_close(s);
    free(kf);
    t_rm_rf(dir);
    free(dir);
}

Test(dstl_encrypt, rotation_without_restart_then_retiring_the_old_key)
{
    char *dir = t_mkdtemp("enc-rot");
    char *kf = tk_write(dir, "keys", "A: " TK_HEX_A "\n", 0600);
    dstl_storage *s = t_storage_open(dir, "dstl.encryption.key-file", kf, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(s, "w", 0, NKG - 1, &w), 0);
    uint64_t e1 = tk_append(w, "r", 0, 50, NKG);
    dstl_handle *ha = t_persist(w, 0, 1);
    free(tk_write(dir, "keys", "A: " TK_HEX_A "\nB: " TK_HEX_B "\n", 0600));   /* B becomes active */
    uint64_t e2 = tk_append(w, "r", e1, 50, NKG);
    dstl_handle *hb = t_persist(w, e1, 2);
    char seg_a[1024], seg_b[1024], kid[WIRE_KEY_ID_MAX + 1];
    handle_segment(dir, ha, seg_a, sizeof seg_a, kid);
    cr_assert_str_eq(kid, "A");
    handle_segment(dir, hb, seg_b, sizeof seg_b, kid);
    cr_assert_str_eq(kid, "B", "the rewritten key file was taken without a restart");
    cr_assert_eq(tk_verify(s, ha, "r", 0, e1, NKG, 0, NKG - 1), (long)e1, "%s", dstl_last_error());
    cr_assert_eq(tk_verify(s, hb, "r", e1, e2, NKG, 0, NKG - 1), (long)(e2 - e1), "%s", dstl_last_error());
    dstl_stats st;
    cr_assert_eq(dstl_storage_stats(s, &st), 0);
    cr_assert_geq(st.key_reloads, 1);

    /* A broken rewrite keeps the keys in use, and the explicit reload says what is wrong. */
    free(tk_write(dir, "keys", "A: " TK_HEX_A "\nB: nothex\n", 0600));
    cr_assert_eq(dstl_storage_reload_keys(s), DSTL_ECONFIG);
    cr_assert(strstr(dstl_last_error(), ":2:"), "%s", dstl_last_error());
    uint64_t e3 = tk_append(w, "r", e2, 10, NKG);
    dstl_handle *hc = t_persist(w, e2, 3);
    handle_segment(dir, hc, seg_b, sizeof seg_b, kid);
    cr_assert_str_eq(kid, "B", "a broken key file must not change the active key");
    cr_assert_eq(tk_verify(s, hc, "r", e2, e3, NKG, 0, NKG - 1), (long)(e3 - e2));
    cr_assert_eq(dstl_storage_stats(s, &st), 0);
    cr_assert_geq(st.key_reload_failures, 1);

    /* A retired: its segments are refused, naming the key id; B's still read. */
    free(tk_write(dir, "keys", "B: " TK_HEX_B "\n", 0600));
    cr_assert_eq(tk_verify(s, hb, "r", e1, e2, NKG, 0, NKG - 1), (long)(e2 - e1), "%s", dstl_last_error());
    long n = tk_verify(s, ha, "r", 0, e1, NKG, 0, NKG - 1);
    cr_assert_eq(n, DSTL_ECRYPTO, "%ld %s", n, dstl_last_error());
    cr_assert(strstr(dstl_last_error(), "key id 'A'") && strstr(dstl_last_error(), "segment"), "%s",
              dstl_last_error());
    dstl_handle_free(ha);
    dstl_handle_free(hb);
    dstl_handle_free(hc);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    free(kf);
    t_rm_rf(dir);
    free(dir);
}

Test(dstl_encrypt, wrong_key_missing_key_file_and_tampered_bytes_are_named_errors)
{
    char *dir = t_mkdtemp("enc-err");
    char *kf = tk_write(dir, "keys", "prod: " TK_HEX_A "\n", 0600);
    dstl_storage *s = t_storage_open(dir, "dstl.encryption.key-file", kf, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(s, "w", 0, NKG - 1, &w), 0);
    uint64_t end = tk_append(w, "t", 0, 40, NKG);
    dstl_handle *h = t_persist(w, 0, 1);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);

    /* the same id, other bytes */
    char *kf2 = tk_write(dir, "keys-wrong", "prod: " TK_HEX_B "\n", 0600);
    s = t_storage_open(dir, "dstl.encryption.key-file", kf2, NULL);
    cr_assert_eq(tk_verify(s, h, "t", 0, end, NKG, 0, NKG - 1), DSTL_ECRYPTO);
    cr_assert(strstr(dstl_last_error(), "key id 'prod' does not unwrap"), "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0);

    /* no key file at all */
    s = t_storage_open(dir, NULL);
    cr_assert_eq(tk_verify(s, h, "t", 0, end, NKG, 0, NKG - 1), DSTL_ECRYPTO);
    cr_assert(strstr(dstl_last_error(), "key id 'prod'") && strstr(dstl_last_error(), "no key file"), "%s",
              dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0);

    /* one byte of a run changed in the file: the tag fails, naming segment, section and offset */
    char seg[1024], kid[WIRE_KEY_ID_MAX + 1];
    handle_segment(dir, h, seg, sizeof seg, kid);
    size_t len;
    uint8_t *b = t_read_file(seg, &len);
    b[WIRE_SEG_HEADER_LEN + 3] ^= 0x10;
    cr_assert_eq(t_write_file(seg, b, len), 0);
    free(b);
    s = t_storage_open(dir, "dstl.encryption.key-file", kf, NULL);
    cr_assert_eq(tk_verify(s, h, "t", 0, end, NKG, 0, 0), DSTL_ECRYPTO);
    const char *d = dstl_last_error();
    cr_assert(strstr(d, "section 0") && strstr(d, "authentication failed") && strstr(d, "offset"), "%s", d);
    const char *base = strrchr(seg, '/') + 1;
    cr_assert(strstr(d, base), "names the segment %s: %s", base, d);
    cr_assert_eq(dstl_storage_close(s), 0);
    dstl_handle_free(h);
    free(kf);
    free(kf2);
    t_rm_rf(dir);
    free(dir);
}

/* ---- a failed batch retried into a new segment; a plain segment in an encrypted one's place ---- */

Test(dstl_encrypt, a_failed_batch_is_sealed_anew_in_the_segment_it_is_retried_into)
{
    char *dir = t_mkdtemp("enc-retry");
    char *kf = tk_write(dir, "keys", "k: " TK_HEX_A "\n", 0600);
    struct ioeng_fault *fault;
    cr_assert_eq(ioeng_fault_new(&fault), 0);
    dstl_config *c = t_config(dir, "dstl.encryption.key-file", kf, "dstl.io.engine", "psync", NULL);
    storage_seams t = {.fault = fault};
    dstl_storage *s;
    cr_assert_eq(storage_open_with_seams(c, &t, &s), 0, "%s", dstl_last_error());
    dstl_config_free(c);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(s, "w", 0, NKG - 1, &w), 0);
    uint64_t end = tk_append(w, "f", 0, 100, NKG);
    cr_assert_eq(ioeng_fault_add(fault, IOENG_OP_WRITE, ioeng_fault_seen(fault, IOENG_OP_WRITE) + 1, -ENOSPC), 0);
    dstl_handle *h = NULL;
    cr_assert_eq(t_persist_result(w, 0, 1, &h), -ENOSPC, "%s", dstl_last_error());
    cr_assert_eq(t_persist_result(w, 0, 2, &h), 0, "%s", dstl_last_error());
    char seg[1024], kid[WIRE_KEY_ID_MAX + 1];
    handle_segment(dir, h, seg, sizeof seg, kid);
    cr_assert_str_eq(kid, "k");
    cr_assert(strstr(seg, "-000000000001.seg"), "retried into the next segment: %s", seg);
    cr_assert_eq(tk_verify(s, h, "f", 0, end, NKG, 0, NKG - 1), (long)end, "%s", dstl_last_error());
    cr_assert_eq(tk_verify(s, h, "f", 0, end, NKG, 3, 3), (long)(end / NKG + (end % NKG > 3)), "%s",
                 dstl_last_error());
    dstl_handle_free(h);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    ioeng_fault_free(fault);
    free(kf);
    t_rm_rf(dir);
    free(dir);
}

Test(dstl_encrypt, a_plain_segment_where_the_handle_names_an_encrypted_one_is_refused)
{
    char *dir = t_mkdtemp("enc-down");
    char *kf = tk_write(dir, "keys", "k: " TK_HEX_A "\n", 0600);
    /* handles record whether their segments are encrypted */
    dstl_storage *s = t_storage_open(dir, "dstl.encryption.key-file", kf, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(s, "w", 0, NKG - 1, &w), 0);
    uint64_t end = tk_append(w, "d", 0, 30, NKG);
    dstl_handle *he = t_persist(w, 0, 1);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    s = t_storage_open(dir, NULL);
    cr_assert_eq(dstl_writer_open(s, "w", 0, NKG - 1, &w), 0);
    tk_append(w, "d", 0, 30, NKG);
    dstl_handle *hp = t_persist(w, 0, 1);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    void *b;
    size_t n;
    wire_handle *we, *wp;
    wire_err e = {{0}};
    cr_assert_eq(dstl_handle_serialize(he, &b, &n), 0);
    cr_assert_eq(wire_handle_decode(b, n, &we, &e), 0, "%s", e.msg);
    free(b);
    cr_assert_eq(dstl_handle_serialize(hp, &b, &n), 0);
    cr_assert_eq(wire_handle_decode(b, n, &wp, &e), 0, "%s", e.msg);
    free(b);
    cr_assert_eq(we->segs[0].encrypted, 1);
    cr_assert_eq(wp->segs[0].encrypted, 0);
    /* the plain handle, as if its segment had been the encrypted one: what a reader sees when
     * someone who may write the dir (not the checkpoint metadata) swapped the files */
    wp->segs[0].encrypted = 1;
    cr_assert_eq(wire_handle_encode(wp, &b, &n, &e), 0, "%s", e.msg);
    dstl_handle *forged;
    cr_assert_eq(dstl_handle_parse(b, n, &forged), 0);
    free(b);
    s = t_storage_open(dir, "dstl.encryption.key-file", kf, NULL);
    cr_assert_eq(tk_verify(s, he, "d", 0, end, NKG, 0, NKG - 1), (long)end, "%s", dstl_last_error());
    cr_assert_eq(tk_verify(s, forged, "d", 0, end, NKG, 0, NKG - 1), DSTL_ECRYPTO);
    cr_assert(strstr(dstl_last_error(), "names an encrypted segment, but this one is plain"), "%s", dstl_last_error());
    cr_assert_eq(dstl_storage_close(s), 0);
    wire_handle_free(we);
    wire_handle_free(wp);
    dstl_handle_free(he);
    dstl_handle_free(hp);
    dstl_handle_free(forged);
    free(kf);
    t_rm_rf(dir);
    free(dir);
}

/*
 * The dstl command on encrypted segments: ls shows each segment's key id (with or without the
 * key file), verify decrypts and checks with the configured key file and reports segments
 * that need a key the file lacks (so an operator knows when an old key can be retired), cat
 * decrypts, and no command prints key bytes.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dstl.h"
#include "tests/helpers.h"
#include "tests/helpers_cmd.h"
#include "tests/helpers_dstl.h"
#include "tests/helpers_keys.h"

#define NKG 8

static char *dir, *kf_ab, *kf_b, *kf_a;
static char data[4200], h1[4200], h2[4200];

#define run(status, ...) t_cmd_run(dir, status, __VA_ARGS__)

static void save(const char *path, const dstl_handle *h)
{
    void *b;
    size_t n;
    cr_assert_eq(dstl_handle_serialize(h, &b, &n), 0);
    cr_assert_eq(t_write_file(path, b, n), 0);
    free(b);
}

/* Segment 1 under key A, then A and B listed (B active), segment 2 under B. */
static void setup(void)
{
    dir = t_mkdtemp("cmd-enc");
    snprintf(data, sizeof data, "%s/data", dir);
    snprintf(h1, sizeof h1, "%s/1.handle", dir);
    snprintf(h2, sizeof h2, "%s/2.handle", dir);
    kf_a = tk_write(dir, "keys-a", "A: " TK_HEX_A "\n", 0600);
    kf_b = tk_write(dir, "keys-b", "B: " TK_HEX_B "\n", 0600);
    char *live = tk_write(dir, "keys", "A: " TK_HEX_A "\n", 0600);
    dstl_storage *s = t_storage_open(data, "dstl.encryption.key-file", live, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(s, "op-9", 0, NKG - 1, &w), 0);
    uint64_t e1 = tk_append(w, "c", 0, 30, NKG);
    dstl_handle *a = t_persist(w, 0, 1);
    free(tk_write(dir, "keys", "A: " TK_HEX_A "\nB: " TK_HEX_B "\n", 0600));
    tk_append(w, "c", e1, 20, NKG);
    dstl_handle *b = t_persist(w, e1, 2);
    save(h1, a);
    save(h2, b);
    dstl_handle_free(a);
    dstl_handle_free(b);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(s), 0);
    kf_ab = live;
}

static void teardown(void)
{
    t_rm_rf(dir);
    free(dir);
    free(kf_a);
    free(kf_b);
    free(kf_ab);
}

TestSuite(dstl_cmd_encrypt, .init = setup, .fini = teardown, .timeout = 60);

Test(dstl_cmd_encrypt, ls_shows_each_segments_key_id_with_or_without_the_key_file)
{
    int st;
    char *out = run(&st, "'%s' ls '%s'", t_cmd_bin(), data);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "NEEDS KEY 'A'") && strstr(out, "NEEDS KEY 'B'"), "%s", out);
    cr_expect(strstr(out, "keys: A (1 segment, NOT IN THE KEY FILE) B (1 segment, NOT IN THE KEY FILE)"), "%s", out);
    free(out);
    out = run(&st, "'%s' --set dstl.encryption.key-file='%s' ls '%s'", t_cmd_bin(), kf_ab, data);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "key A") && strstr(out, "key B") && strstr(out, "op-9"), "%s", out);
    cr_expect_null(strstr(out, "0102030405"), "key bytes printed: %s", out);
    free(out);
}

Test(dstl_cmd_encrypt, verify_decrypts_and_reports_keys_the_file_lacks)
{
    int st;
    char *out = run(&st, "'%s' --set dstl.encryption.key-file='%s' verify '%s'", t_cmd_bin(), kf_ab, data);
    cr_expect_eq(st, 0, "%s", out);
    cr_expect(strstr(out, "50 records checked") && strstr(out, "keys: A (1 segment) B (1 segment)"), "%s", out);
    cr_expect(strstr(out, "can be retired"), "%s", out);
    free(out);
    /* B only: A's segment needs a key the file lacks, and verify says so and fails */
    out = run(&st, "DSTL_ENCRYPTION_KEY_FILE='%s' '%s' verify '%s'", kf_b, t_cmd_bin(), data);
    cr_expect_eq(st, 1, "%s", out);
    cr_expect(strstr(out, "NEEDS KEY 'A': the key file does not list it"), "%s", out);
    cr_expect(strstr(out, "A (1 segment, NOT IN THE KEY FILE) B (1 segment)"), "%s", out);
    cr_expect(strstr(out, "1 segment(s) need a key the key file lacks"), "%s", out);
    cr_expect_null(strstr(out, "CORRUPT"), "a missing key is not damage: %s", out);
    free(out);
    /* no key file */
    out = run(&st, "'%s' verify '%s'", t_cmd_bin(), data);
    cr_expect_eq(st, 1, "%s", out);
    cr_expect(strstr(out, "no dstl.encryption.key-file is configured"), "%s", out);
    free(out);
    /* a key file the command must refuse */
    out = run(&st, "chmod 644 '%s'; '%s' --set dstl.encryption.key-file='%s' verify '%s'", kf_a, t_cmd_bin(), kf_a,
              data);
    cr_expect_eq(st, 1, "%s", out);
    cr_expect(strstr(out, "mode 0644"), "%s", out);
    free(out);
}

Test(dstl_cmd_encrypt, cat_decrypts_with_the_configured_key_file)
{
    int st;
    char *out = run(&st, "'%s' --set dstl.encryption.key-file='%s' cat '%s' --dir '%s'", t_cmd_bin(), kf_ab, h2, data);
    cr_assert_eq(st, 0, "%s", out);
    cr_expect_eq(t_cmd_count(out, "\n"), 20, "%s", out);
    cr_expect(strstr(out, TK_MARK "c-30-"), "%s", out);
    free(out);
    out = run(&st, "'%s' --set dstl.encryption.key-file='%s' cat '%s' --dir '%s'", t_cmd_bin(), kf_b, h1, data);
    cr_expect_neq(st, 0, "%s", out);
    cr_expect(strstr(out, "key id 'A'"), "%s", out);
    free(out);
    out = run(&st, "'%s' --set dstl.encryption.key-file='%s' config", t_cmd_bin(), kf_ab);
    cr_expect_null(strstr(out, "0102030405"), "config prints key bytes: %s", out);
    cr_expect_null(strstr(out, "a0a1a2a3"), "config prints key bytes: %s", out);
    free(out);
}

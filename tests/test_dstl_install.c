/*
 * Installation: `make install PREFIX=DIR` gives a library, header, pkg-config file and command
 * that an outside program builds and runs against with `pkg-config --cflags --libs dstl`;
 * the shared library exports only dstl_* symbols.
 */
#include <criterion/criterion.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers.h"

static const char *program =
    "#include <dstl.h>\n"
    "#include <stdio.h>\n"
    "#include <string.h>\n"
    "int main(int argc, char **argv) {\n"
    "  dstl_config *c; dstl_storage *s; dstl_writer *w; dstl_future *f; dstl_handle *h; dstl_reader *r;\n"
    "  dstl_record rec; int n = 0;\n"
    "  if (argc != 2 || dstl_config_new(&c) || dstl_config_set(c, \"dstl.local.dir\", argv[1])) return 1;\n"
    "  if (dstl_storage_open(c, &s) || dstl_writer_open(s, \"outside\", 0, 9, &w)) return 2;\n"
    "  for (int i = 0; i < 100; i++) if (dstl_append(w, (unsigned)i % 10, \"state change\", 12)) return 3;\n"
    "  if (dstl_persist(w, 0, 1, &f) || dstl_future_wait(f, -1) || dstl_future_result(f, &h)) return 4;\n"
    "  if (dstl_reader_open(s, h, 0, 9, &r)) return 5;\n"
    "  while (dstl_reader_next(r, &rec) == 1) n += rec.len == 12 && !memcmp(rec.data, \"state change\", 12);\n"
    "  dstl_reader_close(r); dstl_handle_free(h); dstl_future_free(f); dstl_writer_close(w);\n"
    "  dstl_storage_close(s); dstl_config_free(c);\n"
    "  printf(\"read %d of 100 with dstl %s\\n\", n, dstl_version());\n"
    "  return n == 100 ? 0 : 6;\n"
    "}\n";

Test(dstl_install, outside_program_builds_with_pkg_config_and_runs, .timeout = 300)
{
    const char *bin = getenv("DSTL_TEST_BIN");
    cr_assert(bin && *bin, "DSTL_TEST_BIN (set by tests/run.sh) names the build's dstl command");
    char bdir[4096], root[4096], cmd[16384];
    snprintf(bdir, sizeof bdir, "%s", bin);
    dirname(bdir);                                  /* build or build/<variant> */
    snprintf(root, sizeof root, "%s/../..", t_data_dir());
    const char *variant = strrchr(bdir, '/') ? strrchr(bdir, '/') + 1 : bdir;
    const char *san = !strcmp(variant, "address") || !strcmp(variant, "undefined") || !strcmp(variant, "thread")
                          ? variant : "";
    char sanflag[128] = "";
    if (*san) snprintf(sanflag, sizeof sanflag, "-fsanitize=%.20s", san);
    char *tmp = t_mkdtemp("install");
    snprintf(cmd, sizeof cmd, "make -s -C '%s' install PREFIX='%s/prefix' SANITIZE=%s > '%s/make.log' 2>&1", root, tmp,
             san, tmp);
    cr_assert_eq(system(cmd), 0, "%s failed: see %s/make.log", cmd, tmp);
    char path[4200];
    snprintf(path, sizeof path, "%s/prog.c", tmp);
    cr_assert_eq(t_write_file(path, program, strlen(program)), 0);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && PKG_CONFIG_PATH='%s/prefix/lib/pkgconfig' cc %s -o prog prog.c "
             "$(PKG_CONFIG_PATH='%s/prefix/lib/pkgconfig' pkg-config --cflags --libs dstl) > cc.log 2>&1",
             tmp, tmp, sanflag, tmp);
    cr_assert_eq(system(cmd), 0, "building an outside program failed: %s (see %s/cc.log)", cmd, tmp);
    snprintf(cmd, sizeof cmd, "cd '%s' && ./prog '%s/data' > run.log 2>&1", tmp, tmp);
    cr_assert_eq(system(cmd), 0, "the outside program failed (see %s/run.log)", tmp);
    /* it ran against the installed shared library, not a static copy */
    snprintf(cmd, sizeof cmd, "cd '%s' && ldd ./prog | grep -q '%s/prefix/lib/libdstl.so'", tmp, tmp);
    cr_expect_eq(system(cmd), 0, "prog is not linked to the installed libdstl.so");
    /* only the API is exported: every defined symbol (but the version node) is a function the
     * installed dstl.h declares; nothing internal, such as protobuf-c's dstl__* of wire/ */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && nm -D --defined-only prefix/lib/libdstl.so.0 | awk '{print $3}' | sed 's/@.*//' "
             "| grep -v '^DSTL_0$' | sort -u > exported.txt && test -s exported.txt && "
             "while read -r s; do grep -q \"\\b$s(\" prefix/include/dstl.h || echo \"$s\"; done "
             "< exported.txt > extra.txt; test ! -s extra.txt", tmp);
    cr_expect_eq(system(cmd), 0, "libdstl.so exports symbols dstl.h does not declare: see %s/extra.txt", tmp);
    snprintf(cmd, sizeof cmd, "test -x '%s/prefix/bin/dstl' && test -f '%s/prefix/include/dstl.h' && test -f '%s/prefix/lib/libdstl.a'",
             tmp, tmp, tmp);
    cr_expect_eq(system(cmd), 0, "make install left out the command, the header or the static library");
    t_rm_rf(tmp);
    free(tmp);
}

/* Build output is one short line per step by default (`CC dstl/histo.o`), and every command
 * line in full with V=1. One object, in a build tree of its own. */
Test(dstl_install, build_output_is_quiet_unless_v_1, .timeout = 300)
{
    char root[4096], cmd[16384];
    snprintf(root, sizeof root, "%s/../..", t_data_dir());
    char *tmp = t_mkdtemp("quiet");
    for (int v = 0; v <= 1; v++) {
        snprintf(cmd, sizeof cmd, "make -C '%s' --no-print-directory SANITIZE= BUILD='%s/b%d' V=%d '%s/b%d/obj/dstl/histo.o' "
                 "> '%s/make%d.log' 2>&1", root, tmp, v, v, tmp, v, tmp, v);
        cr_assert_eq(system(cmd), 0, "%s failed: see %s/make%d.log", cmd, tmp, v);
        snprintf(cmd, sizeof cmd, "%s/make%d.log", tmp, v);
        char *log = t_read_text(cmd);
        cr_assert_not_null(log);
        if (v == 0) {
            cr_expect(strstr(log, "  CC     dstl/histo.o\n") != NULL, "no short line: %s", log);
            cr_expect(strstr(log, "-std=c11") == NULL, "a full command line without V=1: %s", log);
        } else {
            cr_expect(strstr(log, "-std=c11") != NULL && strstr(log, "dstl/histo.c") != NULL, "V=1: %s", log);
        }
        free(log);
    }
    t_rm_rf(tmp);
    free(tmp);
}

/*
 * dstl/cmd/cmd_gc.c — `dstl gc`: deleting orphans in a local dir and under the remote prefix.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dstl/cmd/cmd.h"
#include "dstl/tools.h"

/* ---- gc ---- */

/* Segments younger than this are kept unless --min-age says otherwise: an hour is far longer
 * than any upload, batch or checkpoint takes, so a segment another process is still writing,
 * or whose handle is not yet in any checkpoint (so in no live set), is never touched. */
#define GC_DEFAULT_MIN_AGE "1h"

static const char gc_usage[] =
    "usage: dstl gc DIR (--live HANDLE_FILE... | --no-live-handles) [--min-age D] [--dry-run]\n"
    "  --live             the live set: every handle of every storage that shares DIR or its remote prefix\n"
    "  --no-live-handles  there is none: every segment of a dead run older than --min-age is deleted\n"
    "  --min-age D        keep segments younger than D (default " GC_DEFAULT_MIN_AGE ")\n"
    "  --dry-run          count only: nothing is created, changed or deleted, locally or remotely\n";

int cmd_gc(const cmd_globals *g, int argc, char **argv)
{
    const char *dir = NULL, *min_age = GC_DEFAULT_MIN_AGE;
    uint64_t min_age_us = 0;
    int dry = 0, no_live = 0, live_flag = 0, in_live = 0, rc = 0;
    dstl_handle **live = calloc((size_t)argc, sizeof *live);
    size_t nlive = 0;
    if (!live) {
        fprintf(stderr, "dstl gc: out of memory\n");
        return 1;
    }
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--dry-run")) {
            dry = 1;
            in_live = 0;
        } else if (!strcmp(a, "--no-live-handles")) {
            no_live = 1;
            in_live = 0;
        } else if (!strcmp(a, "--min-age") && i + 1 < argc) {
            min_age = argv[++i];
            in_live = 0;
        } else if (!strcmp(a, "--live")) {
            live_flag = in_live = 1;
        } else if (in_live && a[0] != '-') {
            /* A handle that cannot be read is an error, never a smaller live set. */
            if (!(live[nlive++] = cmd_read_handle(a))) rc = 1;
        } else if (!dir && a[0] != '-') {
            dir = a;
        } else {
            fprintf(stderr, "dstl gc: unexpected argument '%s'\n%s", a, gc_usage);
            rc = 2;
        }
    }
    if (rc == 0 && config_parse_duration_us(min_age, &min_age_us) < 0) {
        fprintf(stderr, "dstl gc: --min-age %s: expected a duration such as 10min or 1h\n", min_age);
        rc = 2;
    }
    if (rc == 0 && !dir) {
        fprintf(stderr, "dstl gc: no DIR given\n%s", gc_usage);
        rc = 2;
    }
    if (rc == 0 && no_live && live_flag) {
        fprintf(stderr, "dstl gc: --live and --no-live-handles contradict each other: give one\n");
        rc = 2;
    }
    if (rc == 0 && !no_live && nlive == 0) {
        fprintf(stderr,
                "dstl gc: refusing to run without a live set%s: every segment no live handle references would be "
                "deleted, including the segments of every checkpoint still needed for recovery.\n"
                "Give --live HANDLE_FILE... with every handle of every storage that shares %s or its remote prefix, "
                "or --no-live-handles if there is none: then every segment of a dead run older than --min-age (%s) "
                "is deleted.\n",
                live_flag ? " (--live named no handle file)" : "", dir, min_age);
        rc = 2;
    }
    /* Opening a storage creates a missing dir: check first, so a typo creates nothing. */
    struct stat st;
    if (rc == 0 && stat(dir, &st) < 0) {
        fprintf(stderr, "dstl gc: %s: %s (nothing was created or deleted)\n", dir, strerror(errno));
        rc = 1;
    } else if (rc == 0 && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "dstl gc: %s: not a directory\n", dir);
        rc = 1;
    }
    dstl_config *c = rc == 0 ? cmd_config(g, dir) : NULL;
    if (rc == 0 && !c) rc = 1;
    dstl_storage *s = NULL;
    if (rc == 0 && cmd_open_storage(c, "gc", &s) < 0) rc = 1;
    dstl_gc_report rep;
    if (rc == 0 && dstl_gc(s, (const dstl_handle *const *)live, nlive, min_age_us / 1000, dry, &rep) < 0) {
        fprintf(stderr, "dstl gc: %s\n", dstl_last_error());
        rc = 1;
    }
    if (rc == 0) {
        const char *remote = dstl_config_get(c, "dstl.remote.uri");
        printf("dstl gc %s%s%s: %zu live handle(s), min-age %s%s\n", dir, *remote ? " and " : "", remote, nlive,
               min_age, dry ? ", dry run: nothing was changed" : "");
        printf("%" PRIu64 " scanned, %" PRIu64 " %s (%" PRIu64 " B), %" PRIu64 " kept live, %" PRIu64
               " kept young, %" PRIu64 " kept for running storages\n",
               rep.scanned, rep.deleted, dry ? "would be deleted" : "deleted", rep.bytes_deleted, rep.kept_live,
               rep.kept_young, rep.kept_running);
    }
    dstl_storage_close(s);
    dstl_config_free(c);
    for (size_t i = 0; i < nlive; i++) dstl_handle_free(live[i]);
    free(live);
    return rc;
}

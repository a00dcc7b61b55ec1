/*
 * dstl/cmd/cmd_source.h — a set of segment objects for `dstl ls`, `verify` and `cat`: every
 * "*.seg" under a local dir (recursively: a mirror made by rclone or `aws s3 sync` has the
 * hh/ sub-folders) or under an s3://bucket/prefix (with the configured endpoint and
 * credentials), sorted by run, then by segment number. The commands iterate the set and read
 * each object whole; what they print per segment is theirs (cmd_tools.c).
 *
 * Threads: one thread (the command's).
 */
#ifndef DSTL_CMD_SOURCE_H
#define DSTL_CMD_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "dstl/cmd/common.h"

typedef struct cmd_seg {
    char *rel;            /* the path under the source's root: "x.seg", "a3/x.seg" */
    const char *name;     /* its last component (points into rel) */
    char *dir;            /* local: the directory holding it; NULL for an object */
    char *key;            /* s3: the object key; NULL for a file */
    char run[40];         /* "<run id>" of "<run id>-<number>.seg"; "" when not of that shape */
    uint64_t no;          /* its number (0 when not of that shape) */
    uint64_t size;
    int64_t mtime_ms;     /* the file's mtime, or the object's LastModified (Unix ms) */
} cmd_seg;

typedef struct cmd_source cmd_source;

/* Whether arg names an S3 location (starts with "s3://"). */
int cmd_source_is_remote(const char *arg);

/* Lists the segments under arg (a local dir or s3://bucket/prefix; s3://bucket/key.seg is the
 * one object). The configuration (for an s3:// source: dstl.s3.*) comes from the globals.
 * Returns 0, or -1 after printing "dstl CMD: what went wrong" to stderr. */
int cmd_source_open(const cmd_globals *g, const char *cmd, const char *arg, cmd_source **out);
void cmd_source_free(cmd_source *src);

/* The segments, sorted: runs in the order of their oldest segment, each run's by number. */
size_t cmd_source_count(const cmd_source *src);
const cmd_seg *cmd_source_seg(const cmd_source *src, size_t i);
/* "now" to judge ages by (Unix ms): the server's clock (the listing's Date) for S3, the local
 * one for a dir. */
int64_t cmd_source_now_ms(const cmd_source *src);
/* Where a segment is, for messages: "DIR/rel" or "s3://bucket/key". */
void cmd_source_where(const cmd_source *src, const cmd_seg *sg, char *buf, size_t cap);

/* Reads the whole object into *buf (malloc'd, the caller frees). 0, or -errno with why (one
 * line naming the file or object) in why[]. */
int cmd_source_read(cmd_source *src, const cmd_seg *sg, uint8_t **buf, char *why, size_t cap);

/* "1.2 KiB" (or "1234 B" when exact is set, or below 1 KiB). */
void cmd_fmt_size(uint64_t bytes, int exact, char *buf, size_t cap);
/* "5 s ago", "3 min ago", "2 h ago", "4 d ago"; "in the future" for a clock ahead. */
void cmd_fmt_age(int64_t now_ms, int64_t then_ms, char *buf, size_t cap);

#endif

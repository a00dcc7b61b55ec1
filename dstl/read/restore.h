/*
 * dstl/read/restore.h — restore plans (dstl_restore_plan in include/dstl.h): which objects and
 * byte ranges a job's readers need, handed to the fetch layer (fetch.h); and what the readers
 * of a plan (reader.c) ask of it. Plans call nothing in reader.c: the reader side of
 * dstl_restore_reader_open lives there.
 *
 * Threads: thread-safe (the plan's mutex guards its reader bookkeeping; the fetch set has its
 * own).
 */
#ifndef DSTL_RESTORE_H
#define DSTL_RESTORE_H

#include <stddef.h>
#include <stdint.h>

#include "dstl.h"
#include "wire/wire.h"

/* Marks (entry, handle) opened and gives its handle (the plan's copy) and key groups. -EINVAL
 * for indices out of range, -EBUSY when it is open already (detail set). */
int restore_claim(dstl_restore *p, size_t entry, size_t handle, const wire_handle **wh, uint32_t *kg_first,
                  uint32_t *kg_last);
/* The storage the plan belongs to. */
dstl_storage *restore_storage(const dstl_restore *p);

/* The plan's object for segment seg of (entry, handle), or -1 when the plan does not fetch
 * it (a local copy, no remote). */
int64_t restore_object(const dstl_restore *p, size_t entry, size_t handle, uint32_t seg);

/* Whether the plan fetches segment seg of (entry, handle) and found no local copy of it when
 * it was made: its readers read the object without looking again. A restore of 1,024 tasks
 * from S3 alone otherwise tried ~65,000 opens of missing files (one per reader and segment),
 * 11-15 % of its CPU (perf, 2026-12-07). Segments are immutable: a copy that appears after the
 * plan was made holds the same bytes the plan fetches. A copy the plan found but could not use
 * (torn, unreadable) is looked at by each reader, which counts its fallback. */
int restore_no_local_copy(const dstl_restore *p, size_t entry, size_t handle, uint32_t seg);

/* fetch_read of object obj's bytes (fetch.h): 1 copied, 0 fetch it yourself, < 0 error with
 * its detail in msg. Blocking. */
int restore_read(dstl_restore *p, int64_t obj, uint64_t off, size_t len, void *dst, char *msg, size_t cap);

/* fetch_borrow of object obj's bytes: *out points into the plan's bytes, valid until the
 * reader's piece is done (restore_pieces_done). 1, 0 (copy or fetch it yourself), < 0. */
int restore_borrow(dstl_restore *p, int64_t obj, uint64_t off, size_t len, const uint8_t **out, char *msg,
                   size_t cap);

/* Whether piece `piece` of (entry, handle) can start without waiting for the plan's fetches:
 * its object's index and every range it needs are in (or will not be fetched by the plan:
 * the reader fetches them itself). A 0 registers the reader's interest (fetch_poll):
 * dstl_restore_wait wakes when those bytes come. */
int restore_piece_ready(dstl_restore *p, size_t entry, size_t handle, size_t piece);

/* Object obj's index, parsed and checked (segread_index) once for all the plan's readers from
 * the footer the plan fetched; valid until the plan closes; read-only (any thread). NULL when
 * it cannot be had (the reader then reads the footer itself, and reports what is wrong).
 * Blocking (the first call per object waits for the footer). */
const wire_index *restore_index(dstl_restore *p, int64_t obj);

/* A reader of the plan took its first record: the fetches held back for it go (fetch_gate).
 * Any thread; only the first call does anything. */
void restore_first_record(dstl_restore *p);

/* The reader of (entry, handle) is done with every piece below piece_end: the plan drops
 * their bytes' uses. */
void restore_pieces_done(dstl_restore *p, size_t entry, size_t handle, size_t piece_end);

/* The reader of (entry, handle) closed: the rest of its pieces are dropped, and its own GETs
 * (requests, response bytes) and the reads the plan left to it are counted in the plan. */
void restore_reader_closed(dstl_restore *p, size_t entry, size_t handle, uint64_t requests, uint64_t bytes,
                           uint64_t direct_reads);

#endif

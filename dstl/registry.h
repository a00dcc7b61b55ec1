/*
 * dstl/registry.h — which segments this storage run still needs, and when they go.
 *
 * Owns: the run's segments (`run_segment`, one per segment this run wrote or is writing) and
 * the table of live (not discarded) handles. Every segment has two counts:
 *   section_refs — writer ranges in it that are not truncated and whose writer is open;
 *   handle_refs  — live handles that reference it, plus pins held by futures being built.
 * A segment is queued for deletion (`delete_head`) exactly when both reach zero; the pipeline
 * thread drains that queue. Pins make FLINK-28440 impossible by construction: a piece joins a
 * future only with its pin taken, and the pin becomes the live handle's reference before the
 * future completes, so no truncate or discard in between can drop the last count.
 * Segments that earlier runs wrote are never in the registry: only dstl_gc removes them.
 *
 * Threads: every function and field here is used with the storage mutex (s->mu) held.
 * Depends on wire/ (handle identity) and u64map only.
 */
#ifndef DSTL_REGISTRY_H
#define DSTL_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "dstl/u64map.h"
#include "wire/wire.h"

/* A segment of this run. */
typedef struct run_segment {
    uint64_t no;
    char name[64];
    uint64_t size, footer_offset;
    uint32_t footer_len, footer_crc;
    int durable;
    int sealed;                 /* encrypted (handles say so: wire_seg_ref.encrypted) */
    int has_local, has_remote;  /* where its copies are (set when it became durable) */
    int uploading;              /* its upload still runs: deletion waits */
    int section_refs;           /* untruncated writer ranges in it */
    int handle_refs;            /* live handles and pins of futures under construction */
    int deleting;               /* queued in delete_head, or being deleted */
    struct run_segment *next_delete;
} run_segment;

typedef struct registry {
    const char *run_id;         /* names the segments: "<run id>-<no, 12 digits>.seg" */
    uint64_t next_seg_no;
    u64map segs;                /* no -> run_segment */
    u64map live;                /* handle identity hash -> chain of live handles */
    run_segment *delete_head;   /* counts reached zero: for the pipeline thread to delete */
} registry;

void reg_init(registry *reg, const char *run_id);
/* Frees every segment entry and live handle (the storage is closing). */
void reg_destroy(registry *reg);

/* The next segment of the run, registered (not durable yet). NULL when out of memory. */
run_segment *reg_new_segment(registry *reg);
/* Forgets a segment that never became durable (nothing refers to it). Frees it. */
void reg_forget(registry *reg, run_segment *g);
/* A deleted segment leaves the registry. Frees it. */
void reg_deleted(registry *reg, run_segment *g);

/* A writer range became durable in g / no longer needs it (truncated, writer closed). */
void reg_section_add(run_segment *g);
void reg_section_release(registry *reg, run_segment *g);
/* A future under construction keeps g / lets it go. */
void reg_pin(run_segment *g);
void reg_unpin(registry *reg, run_segment *g);

/* A live handle for the identity (storage, writer, incarnation, checkpoint, from, to) — the
 * fields of the handle built for it — not yet in the registry: made before s->mu is taken
 * (dstl_persist), so the completion under it allocates nothing. NULL when out of memory. */
struct live_handle *reg_live_new(const char *storage_id, const char *writer_id, uint64_t incarnation, uint64_t cp,
                                 uint64_t from, uint64_t to);
/* Room in l for its n segments (set nsegs to n): NULL when out of memory. */
run_segment **reg_live_segs(struct live_handle *l, size_t n);
/* Makes l live (s->mu held): its segments are pinned, and the pins become its references, or
 * are dropped — and l freed — when an equal handle is live already (a repeated persist).
 * 0 (l is the registry's now) or -ENOMEM (l and its pins are still the caller's). */
int reg_live_insert(registry *reg, struct live_handle *l);
/* The hash of wh's identity (its storage, writer, incarnation, checkpoint and range: a handle
 * parsed back from bytes has the persist's); any thread, no lock. */
uint64_t reg_live_ident(const wire_handle *wh);
/* Drops the references of the live handle with wh's identity (ident: reg_live_ident's, made
 * before s->mu is taken) and returns it, to be freed with reg_live_free once s->mu is let go;
 * NULL when none is live (discarded before, or another run's). */
struct live_handle *reg_live_take(registry *reg, const wire_handle *wh, uint64_t ident);
void reg_live_free(struct live_handle *l);

#endif

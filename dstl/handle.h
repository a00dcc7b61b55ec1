/*
 * dstl/handle.h — the handle object behind include/dstl.h, and segment names.
 *
 * A dstl_handle wraps one wire_handle (wire/FORMAT.md); it is immutable after creation and
 * may be shared between threads. Its identity, what dstl_handle_discard matches, is the
 * registry's (reg_live_take). A leaf: depends on wire/ only.
 */
#ifndef DSTL_HANDLE_H
#define DSTL_HANDLE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dstl.h"
#include "wire/wire.h"

/* Immutable, so shared: every dstl_future_result of one future hands out the future's own
 * handle with one more reference (no copy), and dstl_handle_free drops one. */
struct dstl_handle {
    wire_handle *wh;
    _Atomic unsigned refs;
    int wh_inline;              /* wh lies in this handle's own block (handle_wrap_in) */
};
/* Where a handle_wrap_in block's wire handle starts. */
#define HANDLE_HDR_BYTES ((sizeof(struct dstl_handle) + 15) & ~(size_t)15)

/* A handle owning wh (one reference), or NULL when out of memory (wh is then still the
 * caller's). */
dstl_handle *handle_wrap(wire_handle *wh);
/* A handle at mem (a malloc'd block) whose packed wh lies in the same block, at
 * mem + HANDLE_HDR_BYTES: freeing the handle frees the block. */
dstl_handle *handle_wrap_in(void *mem, wire_handle *wh);
/* h with one more reference. */
dstl_handle *handle_ref(dstl_handle *h);

/* Segment names: "<run id>-<segment no, 12 decimal digits>.seg"; the run id is 16 random hex
 * digits chosen at dstl_storage_open, so names are unique per run. */
void segment_name_format(const char *run_id, uint64_t no, char *buf, size_t cap);
/* Splits a name of that shape into run id (cap bytes) and number: 0, or -EINVAL. */
int segment_name_parse(const char *name, char *run_id, size_t cap, uint64_t *no);

#endif

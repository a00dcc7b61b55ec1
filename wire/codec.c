/*
 * wire/codec.c — per-section compression: none, LZ4 (block format) and zstd (one frame).
 *
 * The footer records each section's codec and raw length, so a reader allocates exactly the
 * raw length, bounded by WIRE_SECTION_RAW_MAX and a per-codec expansion ratio (wire_int.h),
 * and checks that the stored bytes decode to exactly that many bytes. Pure; any thread
 * (zstd's one-shot calls allocate their own context).
 */
#include <limits.h>
#include <lz4.h>
#include <zstd.h>

#include "wire/wire_int.h"

size_t wire_codec_bound(int compression, size_t n)
{
    switch (compression) {
    case WIRE_COMP_LZ4:
        return n > (size_t)LZ4_MAX_INPUT_SIZE ? 0 : (size_t)LZ4_compressBound((int)n);
    case WIRE_COMP_ZSTD:
        return ZSTD_compressBound(n);
    default:
        return n;
    }
}

size_t wire_codec_compress(int compression, int level, const void *src, size_t n, void *dst,
                           size_t cap)
{
    switch (compression) {
    case WIRE_COMP_LZ4: {
        if (n > (size_t)LZ4_MAX_INPUT_SIZE || cap > INT_MAX) return 0;
        /* level > 1 means LZ4 "acceleration" is not used; the fast default is level 0/1 */
        int r = LZ4_compress_default(src, dst, (int)n, (int)cap);
        return r > 0 ? (size_t)r : 0;
    }
    case WIRE_COMP_ZSTD: {
        size_t r = ZSTD_compress(dst, cap, src, n, level ? level : ZSTD_CLEVEL_DEFAULT);
        return ZSTD_isError(r) ? 0 : r;
    }
    default:
        return 0;
    }
}

int wire_codec_ratio_ok(int compression, uint64_t stored_len, uint64_t raw_len)
{
    if (raw_len > WIRE_SECTION_RAW_MAX) return 0;
    uint64_t ratio = compression == WIRE_COMP_LZ4 ? WIRE_LZ4_RATIO_MAX : WIRE_ZSTD_RATIO_MAX;
    /* + 64: tiny inputs (an empty or one-record section) have fixed framing overhead */
    return raw_len <= stored_len * ratio + 64;
}

int wire_codec_decompress(int compression, const void *src, size_t n, void *dst, size_t raw_len,
                          wire_err *err)
{
    switch (compression) {
    case WIRE_COMP_LZ4: {
        if (n > INT_MAX || raw_len > INT_MAX)
            return wire_fail(err, DSTL_ECORRUPT, "lz4 section of %zu bytes is too large", n);
        int r = LZ4_decompress_safe(src, dst, (int)n, (int)raw_len);
        if (r < 0 || (size_t)r != raw_len)
            return wire_fail(err, DSTL_ECORRUPT, "lz4 section does not decode to %zu bytes (%d)",
                             raw_len, r);
        return 0;
    }
    case WIRE_COMP_ZSTD: {
        unsigned long long fcs = ZSTD_getFrameContentSize(src, n);
        if (fcs != raw_len)
            return wire_fail(err, DSTL_ECORRUPT, "zstd frame content size %llu != raw length %zu",
                             fcs, raw_len);
        size_t r = ZSTD_decompress(dst, raw_len, src, n);
        if (ZSTD_isError(r) || r != raw_len)
            return wire_fail(err, DSTL_ECORRUPT, "zstd section does not decode to %zu bytes: %s",
                             raw_len, ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short");
        return 0;
    }
    default:
        return wire_fail(err, DSTL_ECORRUPT, "unknown compression %d", compression);
    }
}

/*
 * wire/record.c — the writer's pending-record format (wire.h) and the error helper of wire/.
 *
 * A pending record is an 8-byte header (u32 length|meta flag, u32 key group) and the payload
 * padded to 8 bytes, so a writer appends with one memcpy and the segment encoder walks the
 * buffer without decoding anything but the header. Pure; any thread.
 */
#include <assert.h>
#include <stdarg.h>
#include <stdio.h>

#include "wire/wire_int.h"

size_t wire_rec_put(uint8_t *dst, int is_meta, uint32_t key_group, const void *data, size_t len)
{
    assert(len <= WIRE_REC_MAX_LEN);
    size_t size = wire_rec_size(len);
    wire_put32(dst, (uint32_t)len | (is_meta ? WIRE_REC_META : 0));
    wire_put32(dst + 4, is_meta ? 0 : key_group);
    if (len) memcpy(dst + WIRE_REC_HDR, data, len);
    /* zero padding: the bytes are hashed nowhere, but a deterministic buffer is easier to test */
    memset(dst + WIRE_REC_HDR + len, 0, size - WIRE_REC_HDR - len);
    return size;
}

int wire_fail(wire_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

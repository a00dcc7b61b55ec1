/*
 * tests/fuzz/fuzz_wire_handle.c — libFuzzer target for the handle parser.
 *
 * Each input is decoded as it is and again with its CRC32C trailer recomputed, so mutations
 * reach the protobuf parser and the field validation. A handle that decodes must re-encode,
 * decode again to the same bytes, and survive a dup.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const uint8_t *b, size_t n)
{
    wire_handle *h;
    wire_err err;
    if (wire_handle_decode(b, n, &h, &err) != 0) return;
    void *enc;
    size_t elen;
    if (wire_handle_encode(h, &enc, &elen, &err) != 0) abort();   /* decodes => encodes */
    wire_handle *h2;
    if (wire_handle_decode(enc, elen, &h2, &err) != 0) abort();
    void *enc2;
    size_t elen2;
    if (wire_handle_encode(h2, &enc2, &elen2, &err) != 0 || elen2 != elen || memcmp(enc, enc2, elen))
        abort();   /* canonical after one round */
    wire_handle *d = wire_handle_dup(h2);
    wire_handle_free(d);
    wire_handle_free(h2);
    wire_handle_free(h);
    free(enc);
    free(enc2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(data, size);
    if (size < 12) return 0;
    uint8_t *b = malloc(size);
    if (!b) return 0;
    memcpy(b, data, size);
    uint32_t crc = wire_crc32c(0, b, size - 4);
    memcpy(b + size - 4, &crc, 4);
    check(b, size);
    free(b);
    return 0;
}

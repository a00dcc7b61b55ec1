/*
 * tests/fuzz/fuzz_s3_xml.c — libFuzzer target for the S3 XML response parsing (s3/xml.c):
 * every parser gets the same bytes; none may crash, leak or read out of bounds, and a
 * successful listing must hold consistent counts. Built by `make fuzz` (clang, ASan, UBSan).
 * The first byte picks nothing: all parsers run on every input.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "s3/s3_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *x = (const char *)data;
    char a[64], b[256], c[128];
    s3_xml_parse_error(x, size, a, sizeof a, b, sizeof b, c, sizeof c);
    s3_xml_parse_initiate(x, size, b, sizeof b);
    s3_xml_parse_complete(x, size, c, sizeof c, a, sizeof a, b, sizeof b);
    size_t n = 0;
    s3_xml_parse_delete_result(x, size, &n, b, sizeof b, a, sizeof a);
    s3_list l;
    if (s3_xml_parse_list_objects(x, size, &l) == 0) {
        for (size_t i = 0; i < l.n_objects; i++)
            if (!l.objects[i].key) __builtin_trap();
        s3_list_clear(&l);
    }
    if (s3_xml_parse_list_uploads(x, size, &l) == 0) {
        for (size_t i = 0; i < l.n_uploads; i++)
            if (!l.uploads[i].key || !l.uploads[i].upload_id) __builtin_trap();
        s3_list_clear(&l);
    }
    if (s3_xml_parse_list_parts(x, size, &l) == 0) {
        for (size_t i = 0; i < l.n_parts; i++)
            if (l.parts[i].part_number < 1 || l.parts[i].part_number > 10000) __builtin_trap();
        s3_list_clear(&l);
    }
    return 0;
}

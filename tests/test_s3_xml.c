/*
 * tests/test_s3_xml.c — the XML documents: server differences tolerated (root names,
 * namespaces, RGW's empty ETag), malformed input refused with -EPROTO, bodies escaped.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3/s3_int.h"

#define L(s) s, strlen(s)

Test(s3_xml, error_document)
{
    char code[64], msg[128], rid[64];
    cr_assert_eq(s3_xml_parse_error(L("<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code>"
                                      "<Message>gone</Message><RequestId>tx1</RequestId></Error>"),
                                    code, sizeof code, msg, sizeof msg, rid, sizeof rid), 0);
    cr_assert_str_eq(code, "NoSuchKey");
    cr_assert_str_eq(msg, "gone");
    cr_assert_str_eq(rid, "tx1");
    cr_assert_eq(s3_xml_parse_error(L("<Other/>"), code, 64, msg, 128, rid, 64), -EPROTO);
    cr_assert_eq(s3_xml_parse_error(L("not xml at all"), code, 64, msg, 128, rid, 64), -EPROTO);
    cr_assert_eq(s3_xml_parse_error("", 0, code, 64, msg, 128, rid, 64), -EPROTO);
}

Test(s3_xml, initiate_with_namespace)
{
    char id[64];
    cr_assert_eq(s3_xml_parse_initiate(L("<InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                                         "<Bucket>b</Bucket><UploadId>2~abc</UploadId></InitiateMultipartUploadResult>"),
                                       id, sizeof id), 0);
    cr_assert_str_eq(id, "2~abc");
    cr_assert_eq(s3_xml_parse_initiate(L("<InitiateMultipartUploadResult><UploadId></UploadId>"
                                         "</InitiateMultipartUploadResult>"), id, sizeof id), -EPROTO);
    cr_assert_eq(s3_xml_parse_initiate(L("<Initiate"), id, sizeof id), -EPROTO);
}

Test(s3_xml, complete_tolerates_root_name_and_empty_etag)
{
    char etag[64], code[64], msg[64];
    cr_assert_eq(s3_xml_parse_complete(L("<CompleteMultipartUploadResponse><ETag>\"e-2\"</ETag>"
                                         "</CompleteMultipartUploadResponse>"),
                                       etag, 64, code, 64, msg, 64), 0);
    cr_assert_str_eq(etag, "\"e-2\"");
    cr_assert_eq(s3_xml_parse_complete(L("<CompleteMultipartUploadResult><ETag></ETag>"
                                         "</CompleteMultipartUploadResult>"), etag, 64, code, 64, msg, 64), 0);
    cr_assert_str_eq(etag, "");
    cr_assert_eq(s3_xml_parse_complete(L("<Error><Code>InternalError</Code><Message>m</Message></Error>"),
                                       etag, 64, code, 64, msg, 64), 1, "an error inside a 200");
    cr_assert_str_eq(code, "InternalError");
}

Test(s3_xml, list_objects_page)
{
    s3_list l;
    cr_assert_eq(s3_xml_parse_list_objects(L(
        "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"
        "<IsTruncated>true</IsTruncated><NextContinuationToken>tok/+=</NextContinuationToken>"
        "<Contents><Key>a</Key><Size>10</Size><ETag>&quot;x&quot;</ETag></Contents>"
        "<Contents><Key>b&lt;c</Key><Size>18446744073709551615</Size></Contents>"
        "<CommonPrefixes><Prefix>d/</Prefix></CommonPrefixes></ListBucketResult>"), &l), 0);
    cr_assert_eq(l.n_objects, 2);
    cr_assert_str_eq(l.objects[0].etag, "\"x\"");
    cr_assert_str_eq(l.objects[1].key, "b<c");
    cr_assert_eq(l.objects[1].size, UINT64_MAX);
    cr_assert_eq(l.n_prefixes, 1);
    cr_assert(l.truncated);
    cr_assert_str_eq(l.next_token, "tok/+=");
    s3_list_clear(&l);
    cr_assert_eq(l.n_objects, 0);
    /* truncated without a token, a bad size, a key missing: refused */
    cr_assert_eq(s3_xml_parse_list_objects(L("<R><IsTruncated>true</IsTruncated></R>"), &l), -EPROTO);
    cr_assert_eq(s3_xml_parse_list_objects(L("<R><Contents><Key>a</Key><Size>-1</Size></Contents></R>"), &l), -EPROTO);
    cr_assert_eq(s3_xml_parse_list_objects(L("<R><Contents><Size>1</Size></Contents></R>"), &l), -EPROTO);
    cr_assert_eq(s3_xml_parse_list_objects(L("<Error><Code>AccessDenied</Code></Error>"), &l), -EPROTO);
}

Test(s3_xml, list_uploads_and_parts)
{
    s3_list l;
    cr_assert_eq(s3_xml_parse_list_uploads(L(
        "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated><NextKeyMarker>k2</NextKeyMarker>"
        "<NextUploadIdMarker>u2</NextUploadIdMarker><Upload><Key>k1</Key><UploadId>u1</UploadId></Upload>"
        "<Upload><Key>k2</Key><UploadId>u2</UploadId></Upload></ListMultipartUploadsResult>"), &l), 0);
    cr_assert_eq(l.n_uploads, 2);
    cr_assert_str_eq(l.uploads[1].upload_id, "u2");
    cr_assert_str_eq(l.next_key_marker, "k2");
    s3_list_clear(&l);
    cr_assert_eq(s3_xml_parse_list_parts(L(
        "<ListPartsResult><IsTruncated>false</IsTruncated><Part><PartNumber>3</PartNumber>"
        "<Size>5242880</Size><ETag>\"p\"</ETag></Part></ListPartsResult>"), &l), 0);
    cr_assert_eq(l.n_parts, 1);
    cr_assert_eq(l.parts[0].part_number, 3);
    cr_assert_eq(l.parts[0].size, 5242880);
    s3_list_clear(&l);
    cr_assert_eq(s3_xml_parse_list_parts(L("<R><Part><PartNumber>0</PartNumber><Size>1</Size></Part></R>"), &l), -EPROTO);
}

Test(s3_xml, delete_result_counts_errors)
{
    size_t n;
    char key[32], code[32];
    cr_assert_eq(s3_xml_parse_delete_result(L("<DeleteResult><Deleted><Key>a</Key></Deleted>"
                                              "<Error><Key>b</Key><Code>AccessDenied</Code></Error>"
                                              "<Error><Key>c</Key><Code>X</Code></Error></DeleteResult>"),
                                            &n, key, sizeof key, code, sizeof code), 0);
    cr_assert_eq(n, 2);
    cr_assert_str_eq(key, "b");
    cr_assert_str_eq(code, "AccessDenied");
}

Test(s3_xml, entities_are_not_expanded)
{
    /* an internal entity bomb must neither blow up nor leak text into the key */
    const char *bomb = "<?xml version=\"1.0\"?><!DOCTYPE r [<!ENTITY a \"aaaaaaaaaa\">"
                       "<!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">]>"
                       "<R><Contents><Key>&b;</Key><Size>1</Size></Contents></R>";
    s3_list l;
    int rc = s3_xml_parse_list_objects(bomb, strlen(bomb), &l);
    if (rc == 0) s3_list_clear(&l);
    const char *ext = "<?xml version=\"1.0\"?><!DOCTYPE r [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>"
                      "<Error><Code>&x;</Code></Error>";
    char code[256] = "", msg[8], rid[8];
    s3_xml_parse_error(ext, strlen(ext), code, sizeof code, msg, sizeof msg, rid, sizeof rid);
    cr_assert_null(strstr(code, "root:"), "no external entity is read");
}

Test(s3_xml, bodies_escape_keys)
{
    const char *keys[] = {"a&b", "<c>", "d\"e'"};
    size_t len;
    char *x = s3_xml_build_delete(keys, 3, &len);
    cr_assert(x);
    cr_assert(strstr(x, "<Key>a&amp;b</Key>") && strstr(x, "<Key>&lt;c&gt;</Key>"), "%s", x);
    cr_assert(strstr(x, "<Quiet>true</Quiet>"));
    free(x);
    const char *bad[] = {"ctl\x01"};
    cr_assert_null(s3_xml_build_delete(bad, 1, &len));
    s3_part_info p[2] = {{.part_number = 1, .etag = "\"a\""}, {.part_number = 2, .etag = "\"b\""}};
    x = s3_xml_build_complete(p, 2, &len);
    cr_assert(x);
    cr_assert(strstr(x, "<Part><PartNumber>2</PartNumber><ETag>\"b\"</ETag></Part>"), "%s", x);
    free(x);
}

Test(s3_xml, times_iso8601_utc)
{
    int64_t ms = -1;
    cr_assert_eq(s3_xml_parse_time("2026-11-30T12:00:00.000Z", &ms), 0);
    cr_assert_eq(ms, 1796040000000ll);
    cr_assert_eq(s3_xml_parse_time("1970-01-01T00:00:00Z", &ms), 0);
    cr_assert_eq(ms, 0);
    cr_assert_eq(s3_xml_parse_time("2024-02-29T23:59:59.5Z", &ms), 0, "leap day, short fraction");
    cr_assert_eq(ms, 1709251199500ll);
    cr_assert_eq(s3_xml_parse_time("2000-03-01T00:00:00.123456+02:00", &ms), 0, "long fraction, offset");
    cr_assert_eq(ms, 951861600123ll);
    const char *bad[] = {"", "2026-11-30", "2026-11-30T12:00:00", "2026-13-01T00:00:00Z",
                         "2023-02-29T00:00:00Z", "2026-11-30T24:00:00Z", "2026-11-30T12:00:00.Z",
                         "2026-11-30T12:00:00Zjunk", "Mon, 30 Nov 2026 12:00:00 GMT"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(s3_xml_parse_time(bad[i], &ms), -EPROTO, "'%s' refused", bad[i]);
}

Test(s3_xml, list_entries_carry_their_times)
{
    s3_list l;
    cr_assert_eq(s3_xml_parse_list_objects(L(
        "<ListBucketResult><IsTruncated>false</IsTruncated>"
        "<Contents><Key>a</Key><LastModified>2026-11-30T12:00:00.000Z</LastModified><Size>1</Size></Contents>"
        "<Contents><Key>b</Key><Size>2</Size></Contents></ListBucketResult>"), &l), 0);
    cr_assert_eq(l.n_objects, 2);
    cr_assert_eq(l.objects[0].last_modified_ms, 1796040000000ll);
    cr_assert_eq(l.objects[1].last_modified_ms, 0, "absent: 0");
    s3_list_clear(&l);
    cr_assert_eq(s3_xml_parse_list_objects(L("<R><Contents><Key>a</Key><LastModified>yesterday</LastModified>"
                                             "<Size>1</Size></Contents></R>"), &l), -EPROTO);
    cr_assert_eq(s3_xml_parse_list_uploads(L(
        "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
        "<Upload><Key>k1</Key><UploadId>u1</UploadId><Initiated>2024-02-29T23:59:59.500Z</Initiated></Upload>"
        "<Upload><Key>k2</Key><UploadId>u2</UploadId></Upload></ListMultipartUploadsResult>"), &l), 0);
    cr_assert_eq(l.n_uploads, 2);
    cr_assert_eq(l.uploads[0].initiated_ms, 1709251199500ll);
    cr_assert_eq(l.uploads[1].initiated_ms, 0);
    s3_list_clear(&l);
    cr_assert_eq(s3_xml_parse_list_uploads(L("<R><Upload><Key>k</Key><UploadId>u</UploadId>"
                                             "<Initiated>2026-11-30 12:00</Initiated></Upload></R>"), &l), -EPROTO);
}

/* AWS sends whitespace before the body of some answers (Complete, and its 200-with-<Error>):
 * every parser skips it, before the XML declaration or the root. */
static char wsbuf[1024];

/* doc with whitespace in front, in wsbuf; returns its length. */
static size_t ws(const char *doc)
{
    snprintf(wsbuf, sizeof wsbuf, " \r\n\t \n%s", doc);
    return strlen(wsbuf);
}

Test(s3_xml, leading_whitespace_is_accepted_by_every_parser)
{
    char code[64], msg[64], rid[64], etag[64], id[64];
    size_t n = ws("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>"
                  "<Message>m</Message></Error>");
    cr_assert_eq(s3_xml_parse_error(wsbuf, n, code, 64, msg, 64, rid, 64), 0);
    cr_assert_str_eq(code, "SlowDown");
    n = ws("<Error><Code>X</Code></Error>");
    cr_assert_eq(s3_xml_parse_error(wsbuf, n, code, 64, msg, 64, rid, 64), 0, "without a declaration");
    n = ws("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUploadResult>"
           "<ETag>\"e-2\"</ETag></CompleteMultipartUploadResult>");
    cr_assert_eq(s3_xml_parse_complete(wsbuf, n, etag, 64, code, 64, msg, 64), 0);
    cr_assert_str_eq(etag, "\"e-2\"");
    n = ws("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InternalError</Code>"
           "<Message>We encountered an internal error.</Message></Error>");
    cr_assert_eq(s3_xml_parse_complete(wsbuf, n, etag, 64, code, 64, msg, 64), 1, "a 200 with <Error>");
    cr_assert_str_eq(code, "InternalError");
    n = ws("<?xml version=\"1.0\"?><InitiateMultipartUploadResult><UploadId>u-1</UploadId>"
           "</InitiateMultipartUploadResult>");
    cr_assert_eq(s3_xml_parse_initiate(wsbuf, n, id, sizeof id), 0);
    cr_assert_str_eq(id, "u-1");
    s3_list l;
    n = ws("<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>false</IsTruncated><Contents>"
           "<Key>a</Key><Size>1</Size></Contents></ListBucketResult>");
    cr_assert_eq(s3_xml_parse_list_objects(wsbuf, n, &l), 0);
    cr_assert_eq(l.n_objects, 1);
    s3_list_clear(&l);
    n = ws("<?xml version=\"1.0\"?><ListMultipartUploadsResult><Upload><Key>k</Key><UploadId>u"
           "</UploadId></Upload></ListMultipartUploadsResult>");
    cr_assert_eq(s3_xml_parse_list_uploads(wsbuf, n, &l), 0);
    cr_assert_eq(l.n_uploads, 1);
    s3_list_clear(&l);
    n = ws("<?xml version=\"1.0\"?><ListPartsResult><Part><PartNumber>1</PartNumber><Size>5</Size>"
           "</Part></ListPartsResult>");
    cr_assert_eq(s3_xml_parse_list_parts(wsbuf, n, &l), 0);
    cr_assert_eq(l.n_parts, 1);
    s3_list_clear(&l);
    size_t errors = 9;
    n = ws("<?xml version=\"1.0\"?><DeleteResult></DeleteResult>");
    cr_assert_eq(s3_xml_parse_delete_result(wsbuf, n, &errors, NULL, 0, NULL, 0), 0);
    cr_assert_eq(errors, 0);
    /* whitespace only, or text before the document, is still no document */
    cr_assert_eq(s3_xml_parse_error(L("  \n  "), code, 64, msg, 64, rid, 64), -EPROTO);
    cr_assert_eq(s3_xml_parse_error(L(" x<Error/>"), code, 64, msg, 64, rid, 64), -EPROTO);
}

Test(s3_xml, http_dates_imf_fixdate_only)
{
    int64_t ms = -1;
    cr_assert_eq(s3_http_parse_date("Tue, 01 Dec 2026 19:56:58 GMT", &ms), 0);
    cr_assert_eq(ms, 1796155018000ll);
    cr_assert_eq(s3_http_parse_date("Thu, 01 Jan 1970 00:00:00 GMT", &ms), 0);
    cr_assert_eq(ms, 0);
    cr_assert_eq(s3_http_parse_date("Thu, 29 Feb 2024 23:59:59 GMT", &ms), 0, "leap day");
    cr_assert_eq(ms, 1709251199000ll);
    cr_assert_eq(s3_http_parse_date("Sun, 06 Nov 1994 08:49:37 GMT", &ms), 0, "RFC 7231's example");
    cr_assert_eq(ms, 784111777000ll);
    const char *bad[] = {
        "",
        "Tue, 01 Dec 2026 19:56:58",          /* no zone */
        "Tue, 01 Dec 2026 19:56:58 UTC",      /* GMT only */
        "Tue, 1 Dec 2026 19:56:58 GMT",       /* two-digit day */
        "Wed, 01 Dec 2026 19:56:58 GMT",      /* the weekday does not match */
        "tue, 01 Dec 2026 19:56:58 GMT",      /* case-sensitive */
        "Tue, 01 dec 2026 19:56:58 GMT",
        "Tue, 32 Dec 2026 19:56:58 GMT",
        "Thu, 29 Feb 2023 00:00:00 GMT",      /* not a leap year */
        "Tue, 01 Dec 2026 24:00:00 GMT",
        "Tue, 01 Dec 2026 19:60:00 GMT",
        "Tue, 01 Dec 2026 19:56:58 GMT ",     /* trailing text */
        "Tuesday, 01-Dec-26 19:56:58 GMT",    /* RFC 850 */
        "Tue Dec  1 19:56:58 2026",           /* asctime */
        "2026-12-01T19:56:58Z",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_eq(s3_http_parse_date(bad[i], &ms), -EPROTO, "'%s' refused", bad[i]);
    cr_assert_eq(s3_http_parse_date(NULL, &ms), -EPROTO);
}

/*
 * s3/xml.c — the S3 XML documents: responses parsed with libxml2 (a real parser, no string
 * scanning), request bodies built with it (so keys are escaped correctly).
 *
 * Tolerance (S3-SERVER.md, pitfall 4): the root element's name is not checked, except to
 * recognise <Error>; namespaces are ignored (elements are matched by local name); an empty
 * <ETag> in CompleteMultipartUploadResult is accepted (RGW); whitespace before the document
 * (before the XML declaration or the root) is skipped — AWS sends some before a Complete's
 * answer while it works, and its "200 with <Error>" comes that way too, but libxml2 refuses
 * a declaration that is not at the very start.
 * Also here: the times S3 writes (ISO 8601 in XML, IMF-fixdate in the Date header). Safety: no network access,
 * no entity substitution (XML_PARSE_NOENT is never set), libxml2's default size limits
 * (no XML_PARSE_HUGE), and the caller bounds the input (max_response_bytes). Malformed
 * input is -EPROTO, never a crash: tests/fuzz/fuzz_s3_xml.c feeds these functions.
 *
 * Threads: thread-safe (libxml2 is initialised once, parser state is per call).
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

#include "s3/s3_int.h"

static pthread_once_t xml_once = PTHREAD_ONCE_INIT;

static void xml_init(void)
{
    xmlInitParser();
}

static xmlDocPtr parse(const char *xml, size_t len)
{
    pthread_once(&xml_once, xml_init);
    /* XML's white space (S ::= #x20 | #x9 | #xD | #xA) before the document */
    while (xml && len && (*xml == ' ' || *xml == '\t' || *xml == '\r' || *xml == '\n')) {
        xml++;
        len--;
    }
    if (!xml || len == 0 || len > INT_MAX) return NULL;
    return xmlReadMemory(xml, (int)len, "s3.xml", NULL,
                         XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING |
                             XML_PARSE_NOCDATA);
}

static bool named(const xmlNode *n, const char *name)
{
    return n && n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0;
}

static xmlNode *child(const xmlNode *n, const char *name)
{
    for (xmlNode *c = n ? n->children : NULL; c; c = c->next)
        if (named(c, name)) return c;
    return NULL;
}

/* Copies the text of n into out (truncated to cap - 1); "" when n is NULL. */
static void text_to(const xmlNode *n, char *out, size_t cap)
{
    if (!out || cap == 0) return;
    out[0] = '\0';
    if (!n) return;
    xmlChar *t = xmlNodeGetContent(n);
    if (!t) return;
    size_t l = strlen((const char *)t);
    if (l >= cap) l = cap - 1;
    memcpy(out, t, l);
    out[l] = '\0';
    xmlFree(t);
}

/* A malloc'ed copy of the text of n ("" when NULL); NULL only when out of memory. */
static char *text_dup(const xmlNode *n)
{
    xmlChar *t = n ? xmlNodeGetContent(n) : NULL;
    char *s = strdup(t ? (const char *)t : "");
    if (t) xmlFree(t);
    return s;
}

static int text_u64(const xmlNode *n, uint64_t *out)
{
    char buf[32], *end;
    text_to(n, buf, sizeof buf);
    if (buf[0] < '0' || buf[0] > '9') return -EPROTO;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno || *end) return -EPROTO;
    *out = v;
    return 0;
}

/* Fixed-width decimal digits at s; -1 when one is not a digit. */
static int digits(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* Days from 1970-01-01 to the civil date y-m-d (proleptic Gregorian; H. Hinnant's method). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

int s3_xml_parse_time(const char *s, int64_t *ms)
{
    static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (!s || strlen(s) < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't') ||
        s[13] != ':' || s[16] != ':')
        return -EPROTO;
    int y = digits(s, 4), mo = digits(s + 5, 2), d = digits(s + 8, 2);
    int h = digits(s + 11, 2), mi = digits(s + 14, 2), sec = digits(s + 17, 2);
    if (y < 0 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || h < 0 || h > 23 || mi < 0 ||
        mi > 59 || sec < 0 || sec > 60)
        return -EPROTO;
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (mo == 2 && d == 29 && !leap) return -EPROTO;
    const char *p = s + 19;
    int frac_ms = 0;
    if (*p == '.') {
        int n = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, n++)
            if (n < 3) frac_ms = frac_ms * 10 + (*p - '0');
        if (n == 0) return -EPROTO;
        for (; n < 3; n++) frac_ms *= 10;
    }
    int64_t off_s = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if ((*p == '+' || *p == '-') && p[3] == ':') {
        int oh = digits(p + 1, 2), om = digits(p + 4, 2);
        if (oh < 0 || oh > 23 || om < 0 || om > 59) return -EPROTO;
        off_s = (*p == '+' ? 1 : -1) * (int64_t)(oh * 3600 + om * 60);
        p += 6;
    } else {
        return -EPROTO;
    }
    if (*p) return -EPROTO;
    int64_t t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off_s;
    *ms = t * 1000 + frac_ms;
    return 0;
}

int s3_http_parse_date(const char *s, int64_t *ms)
{
    static const char wdays[] = "SunMonTueWedThuFriSat";
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    /* "Tue, 01 Dec 2026 19:56:58 GMT": 29 characters, every one in its place */
    if (!s || strlen(s) != 29 || s[3] != ',' || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' ||
        s[16] != ' ' || s[19] != ':' || s[22] != ':' || s[25] != ' ' || strcmp(s + 26, "GMT"))
        return -EPROTO;
    int wd = -1, mo = -1;
    for (int i = 0; i < 7; i++)
        if (strncmp(s, wdays + 3 * i, 3) == 0) wd = i;
    for (int i = 0; i < 12; i++)
        if (strncmp(s + 8, months + 3 * i, 3) == 0) mo = i + 1;
    int d = digits(s + 5, 2), y = digits(s + 12, 4);
    int h = digits(s + 17, 2), mi = digits(s + 20, 2), sec = digits(s + 23, 2);
    if (wd < 0 || mo < 0 || y < 0 || d < 1 || d > mdays[mo - 1] || h < 0 || h > 23 || mi < 0 ||
        mi > 59 || sec < 0 || sec > 60)
        return -EPROTO;
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (mo == 2 && d == 29 && !leap) return -EPROTO;
    int64_t days = days_from_civil(y, mo, d);
    /* 1970-01-01 was a Thursday (4, counting from Sunday) */
    if ((int)(((days % 7) + 7 + 4) % 7) != wd) return -EPROTO;
    *ms = (days * 86400 + h * 3600 + mi * 60 + sec) * 1000;
    return 0;
}

/* The time in n (see s3_xml_parse_time) into *ms: 0 when n is absent, -EPROTO when malformed. */
static int text_time(const xmlNode *n, int64_t *ms)
{
    *ms = 0;
    if (!n) return 0;
    char buf[64];
    text_to(n, buf, sizeof buf);
    return s3_xml_parse_time(buf, ms);
}

static bool text_true(const xmlNode *n)
{
    char buf[8];
    text_to(n, buf, sizeof buf);
    return strcmp(buf, "true") == 0;
}

int s3_xml_parse_error(const char *xml, size_t len, char *code, size_t code_cap, char *message,
                       size_t message_cap, char *request_id, size_t request_id_cap)
{
    xmlDocPtr doc = parse(xml, len);
    xmlNode *root = doc ? xmlDocGetRootElement(doc) : NULL;
    int rc = -EPROTO;
    if (named(root, "Error")) {
        text_to(child(root, "Code"), code, code_cap);
        text_to(child(root, "Message"), message, message_cap);
        text_to(child(root, "RequestId"), request_id, request_id_cap);
        rc = 0;
    }
    xmlFreeDoc(doc);
    return rc;
}

int s3_xml_parse_initiate(const char *xml, size_t len, char *upload_id, size_t cap)
{
    xmlDocPtr doc = parse(xml, len);
    xmlNode *root = doc ? xmlDocGetRootElement(doc) : NULL;
    int rc = -EPROTO;
    if (root && !named(root, "Error")) {
        xmlNode *id = child(root, "UploadId");
        text_to(id, upload_id, cap);
        if (id && upload_id[0]) rc = 0;
    }
    xmlFreeDoc(doc);
    return rc;
}

int s3_xml_parse_complete(const char *xml, size_t len, char *etag, size_t etag_cap, char *code,
                          size_t code_cap, char *message, size_t message_cap)
{
    xmlDocPtr doc = parse(xml, len);
    xmlNode *root = doc ? xmlDocGetRootElement(doc) : NULL;
    int rc = -EPROTO;
    if (named(root, "Error")) {
        text_to(child(root, "Code"), code, code_cap);
        text_to(child(root, "Message"), message, message_cap);
        rc = 1;
    } else if (root) {
        text_to(child(root, "ETag"), etag, etag_cap);
        rc = 0;
    }
    xmlFreeDoc(doc);
    return rc;
}

/* Appends to a growing array; returns the new element or NULL. */
static void *grow(void **arr, size_t *n, size_t *cap, size_t elem)
{
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 16;
        void *p = realloc(*arr, nc * elem);
        if (!p) return NULL;
        *arr = p;
        *cap = nc;
    }
    void *e = (char *)*arr + (*n)++ * elem;
    memset(e, 0, elem);
    return e;
}

typedef int (*list_fn)(xmlNode *root, s3_list *out);

static int parse_list(const char *xml, size_t len, s3_list *out, list_fn fn)
{
    memset(out, 0, sizeof *out);
    xmlDocPtr doc = parse(xml, len);
    xmlNode *root = doc ? xmlDocGetRootElement(doc) : NULL;
    int rc = -EPROTO;
    if (root && !named(root, "Error")) {
        out->truncated = text_true(child(root, "IsTruncated"));
        rc = fn(root, out);
    }
    xmlFreeDoc(doc);
    if (rc) s3_list_clear(out);
    return rc;
}

static int objects_fn(xmlNode *root, s3_list *out)
{
    size_t cap = 0, pcap = 0;
    for (xmlNode *c = root->children; c; c = c->next) {
        if (named(c, "Contents")) {
            s3_object_info *o = grow((void **)&out->objects, &out->n_objects, &cap, sizeof *o);
            if (!o) return -ENOMEM;
            xmlNode *k = child(c, "Key");
            if (!k) return -EPROTO;
            o->key = text_dup(k);
            if (!o->key) return -ENOMEM;
            if (text_u64(child(c, "Size"), &o->size)) return -EPROTO;
            if (text_time(child(c, "LastModified"), &o->last_modified_ms)) return -EPROTO;
            text_to(child(c, "ETag"), o->etag, sizeof o->etag);
        } else if (named(c, "CommonPrefixes")) {
            char **p = grow((void **)&out->prefixes, &out->n_prefixes, &pcap, sizeof *p);
            if (!p) return -ENOMEM;
            *p = text_dup(child(c, "Prefix"));
            if (!*p) return -ENOMEM;
        }
    }
    xmlNode *t = child(root, "NextContinuationToken");
    if (t && !(out->next_token = text_dup(t))) return -ENOMEM;
    if (out->truncated && (!out->next_token || !out->next_token[0])) return -EPROTO;
    return 0;
}

static int uploads_fn(xmlNode *root, s3_list *out)
{
    size_t cap = 0;
    for (xmlNode *c = root->children; c; c = c->next) {
        if (!named(c, "Upload")) continue;
        s3_upload_info *u = grow((void **)&out->uploads, &out->n_uploads, &cap, sizeof *u);
        if (!u) return -ENOMEM;
        xmlNode *k = child(c, "Key"), *id = child(c, "UploadId");
        if (!k || !id) return -EPROTO;
        if (text_time(child(c, "Initiated"), &u->initiated_ms)) return -EPROTO;
        u->key = text_dup(k);
        u->upload_id = text_dup(id);
        if (!u->key || !u->upload_id) return -ENOMEM;
    }
    xmlNode *km = child(root, "NextKeyMarker"), *um = child(root, "NextUploadIdMarker");
    if (km && !(out->next_key_marker = text_dup(km))) return -ENOMEM;
    if (um && !(out->next_upload_id_marker = text_dup(um))) return -ENOMEM;
    if (out->truncated && (!out->next_key_marker || !out->next_key_marker[0])) return -EPROTO;
    return 0;
}

static int parts_fn(xmlNode *root, s3_list *out)
{
    size_t cap = 0;
    for (xmlNode *c = root->children; c; c = c->next) {
        if (!named(c, "Part")) continue;
        s3_part_info *p = grow((void **)&out->parts, &out->n_parts, &cap, sizeof *p);
        if (!p) return -ENOMEM;
        uint64_t num = 0;
        if (text_u64(child(c, "PartNumber"), &num) || num < 1 || num > 10000) return -EPROTO;
        p->part_number = (int)num;
        if (text_u64(child(c, "Size"), &p->size)) return -EPROTO;
        text_to(child(c, "ETag"), p->etag, sizeof p->etag);
    }
    xmlNode *m = child(root, "NextPartNumberMarker");
    if (m && !(out->next_token = text_dup(m))) return -ENOMEM;
    if (out->truncated && (!out->next_token || !out->next_token[0])) return -EPROTO;
    return 0;
}

int s3_xml_parse_list_objects(const char *xml, size_t len, s3_list *out)
{
    return parse_list(xml, len, out, objects_fn);
}

int s3_xml_parse_list_uploads(const char *xml, size_t len, s3_list *out)
{
    return parse_list(xml, len, out, uploads_fn);
}

int s3_xml_parse_list_parts(const char *xml, size_t len, s3_list *out)
{
    return parse_list(xml, len, out, parts_fn);
}

int s3_xml_parse_delete_result(const char *xml, size_t len, size_t *n_errors, char *first_key,
                               size_t key_cap, char *first_code, size_t code_cap)
{
    *n_errors = 0;
    if (first_key && key_cap) first_key[0] = '\0';
    if (first_code && code_cap) first_code[0] = '\0';
    xmlDocPtr doc = parse(xml, len);
    xmlNode *root = doc ? xmlDocGetRootElement(doc) : NULL;
    int rc = -EPROTO;
    if (root && !named(root, "Error")) {
        for (xmlNode *c = root->children; c; c = c->next) {
            if (!named(c, "Error")) continue;
            if ((*n_errors)++ == 0) {
                text_to(child(c, "Key"), first_key, key_cap);
                text_to(child(c, "Code"), first_code, code_cap);
            }
        }
        rc = 0;
    }
    xmlFreeDoc(doc);
    return rc;
}

void s3_list_clear(s3_list *l)
{
    if (!l) return;
    for (size_t i = 0; i < l->n_objects; i++) free(l->objects[i].key);
    for (size_t i = 0; i < l->n_uploads; i++) {
        free(l->uploads[i].key);
        free(l->uploads[i].upload_id);
    }
    for (size_t i = 0; i < l->n_prefixes; i++) free(l->prefixes[i]);
    free(l->objects);
    free(l->uploads);
    free(l->parts);
    free(l->prefixes);
    free(l->next_token);
    free(l->next_key_marker);
    free(l->next_upload_id_marker);
    memset(l, 0, sizeof *l);
}

/* ---- request bodies ---- */

/* XML 1.0 cannot carry most control characters; such keys need encoding-type=url, which
 * DSTL's keys never need. */
static bool xml_safe(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 && *p != '\t' && *p != '\n') return false;
    return xmlCheckUTF8((const unsigned char *)s) != 0;
}

static char *dump(xmlDocPtr doc, size_t *len)
{
    xmlChar *mem = NULL;
    int n = 0;
    xmlDocDumpMemoryEnc(doc, &mem, &n, "UTF-8");
    xmlFreeDoc(doc);
    if (!mem) return NULL;
    char *out = malloc((size_t)n + 1);
    if (out) {
        memcpy(out, mem, (size_t)n);
        out[n] = '\0';
        *len = (size_t)n;
    }
    xmlFree(mem);
    return out;
}

/* A new document with an empty root element; NULL when out of memory. */
static xmlDocPtr new_doc(const char *root_name, xmlNodePtr *root)
{
    pthread_once(&xml_once, xml_init);
    xmlDocPtr doc = xmlNewDoc(BAD_CAST "1.0");
    *root = doc ? xmlNewNode(NULL, BAD_CAST root_name) : NULL;
    if (!*root) {
        xmlFreeDoc(doc);
        return NULL;
    }
    xmlDocSetRootElement(doc, *root);
    return doc;
}

char *s3_xml_build_delete(const char *const *keys, size_t n, size_t *len)
{
    xmlNodePtr root;
    xmlDocPtr doc = new_doc("Delete", &root);
    if (!doc) return NULL;
    bool ok = xmlNewTextChild(root, NULL, BAD_CAST "Quiet", BAD_CAST "true") != NULL;
    for (size_t i = 0; i < n && ok; i++) {
        xmlNodePtr o = xml_safe(keys[i]) ? xmlNewChild(root, NULL, BAD_CAST "Object", NULL) : NULL;
        ok = o && xmlNewTextChild(o, NULL, BAD_CAST "Key", BAD_CAST keys[i]);
    }
    if (!ok) {
        xmlFreeDoc(doc);
        return NULL;
    }
    return dump(doc, len);
}

char *s3_xml_build_complete(const s3_part_info *parts, size_t n, size_t *len)
{
    xmlNodePtr root;
    xmlDocPtr doc = new_doc("CompleteMultipartUpload", &root);
    if (!doc) return NULL;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        char num[16];
        snprintf(num, sizeof num, "%d", parts[i].part_number);
        xmlNodePtr p =
            xml_safe(parts[i].etag) ? xmlNewChild(root, NULL, BAD_CAST "Part", NULL) : NULL;
        ok = p && xmlNewTextChild(p, NULL, BAD_CAST "PartNumber", BAD_CAST num) &&
             xmlNewTextChild(p, NULL, BAD_CAST "ETag", BAD_CAST parts[i].etag);
    }
    if (!ok) {
        xmlFreeDoc(doc);
        return NULL;
    }
    return dump(doc, len);
}

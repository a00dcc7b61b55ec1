/*
 * dstl/keys.c — the key file: parse, check, watch (keys.h has the format and thread rules).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "dstl/err.h"
#include "dstl/keys.h"

struct keyring {
    atomic_int refs;
    wire_key *keys;              /* in file order: the last is active */
    size_t n;
    wire_keyring ring;
};

static void keyring_free(keyring *k)
{
    if (!k) return;
    if (k->keys) OPENSSL_cleanse(k->keys, k->n * sizeof *k->keys);
    free(k->keys);
    free(k);
}

keyring *keyring_ref(keyring *k)
{
    if (k) atomic_fetch_add_explicit(&k->refs, 1, memory_order_relaxed);
    return k;
}

void keyring_unref(keyring *k)
{
    if (k && atomic_fetch_sub_explicit(&k->refs, 1, memory_order_acq_rel) == 1) keyring_free(k);
}

const wire_key *keyring_active(const keyring *k) { return &k->keys[k->n - 1]; }
const wire_keyring *keyring_wire(const keyring *k) { return &k->ring; }

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* One line [p, e) without its comment. 0 = blank, 1 = a key into *k, or a static reason. */
static int parse_line(const char *p, const char *e, wire_key *k, const char **why)
{
    const char *hash = memchr(p, '#', (size_t)(e - p));
    if (hash) e = hash;
    while (p < e && is_space(*p)) p++;
    while (e > p && is_space(e[-1])) e--;
    if (p == e) return 0;
    const char *colon = memchr(p, ':', (size_t)(e - p));
    if (!colon) {
        *why = "expected 'KEY_ID: HEX' (no ':')";
        return -1;
    }
    const char *ie = colon;
    while (ie > p && is_space(ie[-1])) ie--;
    if (!wire_key_id_valid(p, (size_t)(ie - p))) {
        *why = "the key id must be 1 to 64 characters of [A-Za-z0-9._-]";
        return -1;
    }
    const char *h = colon + 1;
    while (h < e && is_space(*h)) h++;
    if (e - h != 2 * (long)WIRE_KEY_LEN) {
        *why = "the key must be 64 hex digits (256 bits)";
        return -1;
    }
    for (size_t i = 0; i < WIRE_KEY_LEN; i++) {
        int hi = hexval(h[2 * i]), lo = hexval(h[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            *why = "the key has a character that is not a hex digit";
            return -1;
        }
        k->key[i] = (uint8_t)(hi << 4 | lo);
    }
    memcpy(k->id, p, (size_t)(ie - p));
    k->id[ie - p] = 0;
    return 1;
}

int keyring_parse(const char *path, const char *text, size_t len, keyring **out)
{
    keyring *k = calloc(1, sizeof *k);
    wire_key *keys = calloc(KEYS_MAX, sizeof *keys);
    size_t *lines = calloc(KEYS_MAX, sizeof *lines);
    int rc = 0;
    if (!k || !keys || !lines) {
        rc = err_fail(-ENOMEM, "key file %s: out of memory", path);
        goto fail;
    }
    size_t n = 0, line = 0;
    for (const char *p = text, *end = text + len; p < end && rc == 0;) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e) e = end;
        line++;
        const char *why = NULL;
        wire_key tmp;
        int r = parse_line(p, e, &tmp, &why);
        if (r < 0) {
            rc = err_fail(DSTL_ECONFIG, "key file %s:%zu: %s", path, line, why);
        } else if (r == 1 && n == KEYS_MAX) {
            rc = err_fail(DSTL_ECONFIG, "key file %s:%zu: more than %u keys", path, line, KEYS_MAX);
        } else if (r == 1) {
            for (size_t i = 0; i < n && rc == 0; i++)
                if (strcmp(keys[i].id, tmp.id) == 0)
                    rc = err_fail(DSTL_ECONFIG, "key file %s:%zu: the key id of line %zu again (each id names "
                                  "one key)", path, line, lines[i]);
            if (rc == 0) {
                lines[n] = line;
                keys[n++] = tmp;
            }
        }
        OPENSSL_cleanse(&tmp, sizeof tmp);
        p = e + 1;
    }
    if (rc == 0 && n == 0) rc = err_fail(DSTL_ECONFIG, "key file %s: no keys (one 'KEY_ID: HEX' per line)", path);
    if (rc < 0) goto fail;
    k->keys = keys;
    k->n = n;
    k->ring = (wire_keyring){keys, n};
    atomic_init(&k->refs, 1);
    free(lines);
    *out = k;
    return 0;
fail:
    if (keys) OPENSSL_cleanse(keys, KEYS_MAX * sizeof *keys);
    free(keys);
    free(lines);
    free(k);
    return rc;
}

/* Reads the whole file through fd after checking its mode; st receives its identity. */
static int load_fd(const char *path, int fd, struct stat *st, keyring **out)
{
    if (fstat(fd, st) < 0) return err_fail(DSTL_ECONFIG, "key file %s: %s", path, strerror(errno));
    if (!S_ISREG(st->st_mode)) return err_fail(DSTL_ECONFIG, "key file %s: not a regular file", path);
    if (st->st_mode & 077)
        return err_fail(DSTL_ECRYPTO, "key file %s: mode %04o lets group or others access it; it must be "
                        "private to its owner (chmod 600 %s)", path, (unsigned)(st->st_mode & 07777), path);
    if (st->st_size > (off_t)KEYS_FILE_MAX)
        return err_fail(DSTL_ECONFIG, "key file %s: %lld bytes, larger than %u", path, (long long)st->st_size,
                        KEYS_FILE_MAX);
    size_t cap = (size_t)st->st_size + 1, len = 0;
    char *buf = malloc(cap);
    if (!buf) return err_fail(-ENOMEM, "key file %s: out of memory", path);
    int rc = 0;
    for (;;) {
        ssize_t got = read(fd, buf + len, cap - len);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) rc = err_fail(DSTL_ECONFIG, "key file %s: read: %s", path, strerror(errno));
        if (got <= 0) break;
        len += (size_t)got;
        if (len == cap) {   /* grew while we read it: parse what fits, the next check re-reads */
            rc = err_fail(DSTL_ECONFIG, "key file %s: changed while being read", path);
            break;
        }
    }
    if (rc == 0) rc = keyring_parse(path, buf, len, out);
    OPENSSL_cleanse(buf, cap);
    free(buf);
    return rc;
}

static int load_stat(const char *path, struct stat *st, keyring **out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);   /* through a symlink, the target's mode is checked */
    if (fd < 0) return err_fail(DSTL_ECONFIG, "key 'dstl.encryption.key-file': cannot open %s: %s", path,
                                strerror(errno));
    int rc = load_fd(path, fd, st, out);
    close(fd);
    return rc;
}

int keyring_load(const char *path, keyring **out)
{
    struct stat st;
    return load_stat(path, &st, out);
}

static void remember(key_source *ks, const struct stat *st)
{
    ks->dev = st->st_dev;
    ks->ino = st->st_ino;
    ks->size = st->st_size;
    ks->mtime = st->st_mtim;
    ks->ctime = st->st_ctim;
}

int key_source_open(key_source *ks, const char *path)
{
    memset(ks, 0, sizeof *ks);
    pthread_mutex_init(&ks->mu, NULL);
    if (!path || !*path) return 0;
    struct stat st;
    int rc = load_stat(path, &st, &ks->cur);
    if (rc < 0) return rc;
    if (!(ks->path = strdup(path))) {
        keyring_unref(ks->cur);
        ks->cur = NULL;
        return err_fail(-ENOMEM, "key file %s: out of memory", path);
    }
    remember(ks, &st);
    return 0;
}

void key_source_close(key_source *ks)
{
    keyring_unref(ks->cur);
    ks->cur = NULL;
    free(ks->path);
    ks->path = NULL;
    pthread_mutex_destroy(&ks->mu);
}

static int same_ts(struct timespec a, struct timespec b) { return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec; }

/* Under ks->mu: loads the file and swaps it in. */
static int reload_locked(key_source *ks)
{
    struct stat st;
    keyring *k = NULL;
    int rc = load_stat(ks->path, &st, &k);
    if (rc < 0) {
        ks->reload_failures++;
        /* remember the failed identity: the same broken file is not re-read at every segment */
        if (stat(ks->path, &st) == 0) remember(ks, &st);
        return rc;
    }
    keyring_unref(ks->cur);
    ks->cur = k;
    ks->reloads++;
    remember(ks, &st);
    return 0;
}

keyring *key_source_get(key_source *ks)
{
    if (!ks->path) return NULL;
    struct stat st;
    pthread_mutex_lock(&ks->mu);
    if (stat(ks->path, &st) == 0 && (st.st_dev != ks->dev || st.st_ino != ks->ino || st.st_size != ks->size ||
                                     !same_ts(st.st_mtim, ks->mtime) || !same_ts(st.st_ctim, ks->ctime)))
        (void)reload_locked(ks);
    keyring *k = keyring_ref(ks->cur);
    pthread_mutex_unlock(&ks->mu);
    return k;
}

int key_source_reload(key_source *ks)
{
    if (!ks->path) return err_fail(DSTL_ECONFIG, "dstl_storage_reload_keys: no dstl.encryption.key-file is set");
    pthread_mutex_lock(&ks->mu);
    int rc = reload_locked(ks);
    pthread_mutex_unlock(&ks->mu);
    return rc;
}

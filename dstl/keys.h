/*
 * dstl/keys.h — the encryption key file (dstl.encryption.key-file): parsing, the permission
 * check, and rotation without restart.
 *
 * File format: one key per line `KEY_ID: HEX` (KEY_ID 1..64 of [A-Za-z0-9._-], HEX 64 hex
 * digits = 256 bits); `#` starts a comment; blank lines are skipped; the LAST key listed is
 * the active one (new segments), the others only open older segments. The file must not be
 * accessible by group or others (mode & 077 == 0), as ssh requires of private keys.
 *
 * Errors never contain key material: a malformed line is named by file:line and what is
 * wrong, never by its text.
 *
 * A keyring is immutable and reference-counted: the pipeline thread holds one for the segment
 * it is encoding, each reader for its lifetime; rotation swaps in a new one, and the old is
 * wiped (OPENSSL_cleanse) when its last holder lets go. A key_source watches the file:
 * key_source_get re-reads it when its identity (device, inode, size, mtime, ctime) changed;
 * a file that no longer loads keeps the previous keys in use, and the failure is counted and
 * reported by key_source_reload. Thread-safe (own mutex).
 */
#ifndef DSTL_KEYS_H
#define DSTL_KEYS_H

#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>

#include "wire/wire.h"

#define KEYS_FILE_MAX   (1u << 20)    /* a key file larger than this is refused */
#define KEYS_MAX        4096u

typedef struct keyring keyring;

/* Parses key file text (path only names it in errors). DSTL_ECONFIG "FILE:LINE: ...". */
int keyring_parse(const char *path, const char *text, size_t len, keyring **out);
/* Reads, checks the mode of, and parses the file. DSTL_ECRYPTO naming the file and its mode
 * when group or others may access it; DSTL_ECONFIG when it cannot be read or parsed. */
int keyring_load(const char *path, keyring **out);
keyring *keyring_ref(keyring *k);
void keyring_unref(keyring *k);            /* NULL is fine */
const wire_key *keyring_active(const keyring *k);
const wire_keyring *keyring_wire(const keyring *k);

typedef struct {
    char *path;                  /* NULL: no key file (plain segments) */
    pthread_mutex_t mu;
    keyring *cur;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime, ctime;
    uint64_t reloads, reload_failures;
} key_source;

/* Loads path (NULL or "" = no encryption; *ks is then inert). */
int key_source_open(key_source *ks, const char *path);
void key_source_close(key_source *ks);
/* The current keys, re-read first when the file changed; a reference the caller unrefs.
 * NULL when there is no key file. */
keyring *key_source_get(key_source *ks);
/* Re-reads the file now, whatever its identity: 0, or the load error (and the old keys stay). */
int key_source_reload(key_source *ks);

#endif

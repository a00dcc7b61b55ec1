/*
 * dstl/error.c — error codes to text, the thread-local last-error detail, the version.
 * Thread-safe: the detail is per thread; strerror texts are constants.
 *
 * Invariant: err_fail may be given dstl_last_error() itself as an argument (a layer adding
 * its context to the detail of the layer below: "dstl.local.dir %s: %s", dir,
 * dstl_last_error()). It therefore formats into a buffer of its own and copies the result
 * over the detail only afterwards; formatting straight into the detail would read the
 * argument while overwriting it (undefined behaviour, garbled text).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dstl/err.h"

/* One line, long enough for an S3 error with key, code, message and request id. */
static _Thread_local char last_error[1024];

int err_fail(int code, const char *fmt, ...)
{
    char buf[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) snprintf(buf, sizeof buf, "(error detail could not be formatted)");
    memcpy(last_error, buf, strlen(buf) + 1);
    return code;
}

void err_clear(void) { last_error[0] = '\0'; }

const char *dstl_last_error(void) { return last_error; }

const char *dstl_version(void) { return DSTL_VERSION; }

const char *dstl_strerror(int err)
{
    switch (err) {
    case 0: return "success";
    case DSTL_ECORRUPT: return "data corrupt: checksum, tag or format mismatch";
    case DSTL_ECLOSED: return "object closed or closing";
    case DSTL_ETRUNCATED: return "range starts below the writer's truncation point";
    case DSTL_EREMOTE: return "remote store failed after every attempt";
    case DSTL_ECONFIG: return "unknown configuration key or bad value";
    case DSTL_ECRYPTO: return "encryption key missing or authentication failed";
    case DSTL_EFENCED: return "a newer owner of this writer id exists (reserved: the embedded library never returns it)";
    default: break;
    }
    if (err < 0 && err > -4096) {
        /* strerror() may use a shared buffer only for unknown values; every -errno the
         * library returns is known, and glibc's strerrordesc_np is thread-safe. */
        const char *s = strerrordesc_np(-err);
        if (s) return s;
    }
    return "unknown error";
}

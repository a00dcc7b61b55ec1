/*
 * dstl/err.h — the thread-local failure detail behind dstl_last_error().
 *
 * Every failure site in dstl/ says what failed in one line (object, offset, key, status)
 * and returns the code: `return err_fail(-EIO, "fdatasync %s: %s", path, strerror(e));`.
 * wire/ and s3/ cannot see this (they never include dstl/): they hand their detail back in
 * their own error structs, and the dstl/ caller passes it on with err_fail.
 */
#ifndef DSTL_ERR_H
#define DSTL_ERR_H

#include "dstl.h"

/* Sets the calling thread's detail; returns code (so a failure is one statement). */
int err_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Clears the calling thread's detail. */
void err_clear(void);

#endif

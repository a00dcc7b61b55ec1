/*
 * dstl/local/segfiles.h — helpers the local store shares with its file operations
 * (segfiles.c). Private to dstl/local/.
 */
#ifndef DSTL_LOCAL_SEGFILES_H
#define DSTL_LOCAL_SEGFILES_H

#include <stddef.h>

/* 0, or -EINVAL naming what and the name when name is not one file name (1..NAME_MAX bytes,
 * no '/', not "." or ".."). */
int segfile_check_name(const char *what, const char *name);
/* The lock file name of run owner ("<owner>.lock") into buf: 0, or -EINVAL naming it. */
int segfile_lock_name(const char *owner, char *buf, size_t cap);

#endif

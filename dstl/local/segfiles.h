/*
 * dstl/local/segfiles.h — helpers the local store shares with its file operations
 * (segfiles.c). Private to dstl/local/.
 */
#ifndef DSTL_LOCAL_SEGFILES_H
#define DSTL_LOCAL_SEGFILES_H

#include <stddef.h>
#include <sys/types.h>

/* 0, or -EINVAL naming what and the name when name is not one file name (1..NAME_MAX bytes,
 * no '/', not "." or ".."). */
int segfile_check_name(const char *what, const char *name);
/* The lock file name of run owner ("<owner>.lock") into buf: 0, or -EINVAL naming it. */
int segfile_lock_name(const char *owner, char *buf, size_t cap);
/* Takes run owner's lock file in dir (an exclusive flock on "<owner>.lock", created if needed,
 * retried when a gc removes it in between) into *lock_fd: 0, or an -errno naming the file. */
int segfile_run_lock(int dir_fd, const char *dir, const char *owner, int *lock_fd);
/* Whether synced file fd (dir/name) is still reachable: it has a directory entry, and dir still
 * names the directory (dir_dev, dir_ino) the store opened. 0, or -EIO with the reason in why. */
int segfile_reachable(int fd, const char *dir, dev_t dir_dev, ino_t dir_ino, const char *name, char *why, size_t cap);
/* mkdir -p dir, each new directory's entry made durable by an fsync of its parent; 0 or -errno. */
int segfile_make_dir(const char *dir);
/* Whether dir_fd's file system takes O_DIRECT segment writes: a probe file written with one
 * aligned block and removed. 0; 1 refused; else the -errno of its create or write (*what says
 * which). No error detail. */
int segfile_probe_direct(int dir_fd, const char **what);

#endif

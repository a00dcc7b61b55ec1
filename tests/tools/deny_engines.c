/*
 * tests/tools/deny_engines.c — runs a program on a "kernel" without an asynchronous I/O
 * interface, for the test of t_engine_or_skip (tests/test_dstl_ioeng.c).
 *
 *   deny_engines io_uring|libaio|all PROGRAM [ARG...]
 *
 * Installs a seccomp filter under which io_uring_setup(2) (io_uring), io_setup(2) (libaio) or
 * both fail with ENOSYS, as on a kernel built without them, then execs PROGRAM; every other
 * system call is allowed. The filter is inherited by PROGRAM's children (Criterion's workers)
 * and cannot be removed. Exit status 2 when the filter cannot be installed, 127 when PROGRAM
 * cannot be run.
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define THIS_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define THIS_ARCH AUDIT_ARCH_AARCH64
#else
#error "deny_engines: add this architecture's AUDIT_ARCH_*"
#endif

#define DENY(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
                 BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA))

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: deny_engines io_uring|libaio|all PROGRAM [ARG...]\n");
        return 2;
    }
    int uring = !strcmp(argv[1], "io_uring") || !strcmp(argv[1], "all");
    int aio = !strcmp(argv[1], "libaio") || !strcmp(argv[1], "all");
    if (!uring && !aio) {
        fprintf(stderr, "deny_engines: '%s' is not io_uring, libaio or all\n", argv[1]);
        return 2;
    }
    /* A system call not denied falls through to ALLOW; a denied number never matches -1. */
    struct sock_filter prog[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, THIS_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        DENY(uring ? __NR_io_uring_setup : (unsigned)-1),
        DENY(aio ? __NR_io_setup : (unsigned)-1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog fprog = {.len = (unsigned short)(sizeof prog / sizeof prog[0]), .filter = prog};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0) {
        fprintf(stderr, "deny_engines: installing the seccomp filter: %s\n", strerror(errno));
        return 2;
    }
    execv(argv[2], argv + 2);
    fprintf(stderr, "deny_engines: %s: %s\n", argv[2], strerror(errno));
    return 127;
}

/*
 * perf/first_touch.c — first_touch MB: touches MB of fresh anonymous memory (huge pages where
 * the kernel gives them) twice, each time in a new mapping, and prints how fast:
 *
 *   machine.first_touch_mb_s   the first pass: guest pages the host may not back yet
 *   machine.touch_mb_s         the second, right after: the pages the first pass made it back
 *
 * On a virtual machine whose memory the host backs lazily, the first touch of a guest page
 * costs the host's fault and zeroing, seen in the guest as a slow clear_page: on this kind of
 * machine 0.35-0.45 GB/s against 6-10 GB/s once backed (232 MB: 600 ms against 23 ms). The
 * host takes freed pages back within seconds (virtio_balloon free page reporting: 2 GB touched
 * and freed was fast to touch again at once, slow again 10 s later), so no warm-up lasts:
 * every benchmark that allocates (a restore holding 250 MB, 1,024 writers' chunks) pays it,
 * and a reader of its lines needs this one (perf/run.sh prints it first).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Seconds to touch every page of a new mapping of n bytes (unmapped after). */
static double touch_once(size_t n)
{
    uint8_t *b = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) {
        perror("first_touch: mmap");
        exit(1);
    }
    (void)madvise(b, n, MADV_HUGEPAGE);
    double t0 = now_s();
    for (size_t k = 0; k < n; k += 4096) b[k] = 1;
    double t = now_s() - t0;
    munmap(b, n);
    return t;
}

int main(int argc, char **argv)
{
    long mb = argc > 1 ? atol(argv[1]) : 0;
    if (argc != 2 || mb <= 0 || mb > (1L << 20)) {
        fprintf(stderr, "usage: first_touch MB (1 .. 1048576)\n");
        return 2;
    }
    size_t n = (size_t)mb << 20;
    double first = touch_once(n), second = touch_once(n);
    printf("machine.first_touch_mb_s %.0f MB/s\n", (double)mb / first);
    printf("machine.touch_mb_s %.0f MB/s\n", (double)mb / second);
    return 0;
}

/*
 * The runner of the Criterion-compatible shim (tests/shim/criterion/criterion.h): main() of
 * every test binary of `make SANITIZE=thread`, where Criterion itself cannot run (its boxfort
 * arena collides with TSan's reserved memory, upstream Criterion issue #274).
 *
 * What it does: collects the Test()/TestSuite() registrations made by constructors, sorts them
 * by suite and name, keeps those matching --filter (a glob on "suite/name"), and runs each in a
 * forked child, at most --jobs at a time. The child runs suite .init, test .init, the body, test
 * .fini, suite .fini; a failed cr_assert unwinds (longjmp) to the runner in the child, which
 * still runs the .fini functions. The parent enforces the timeout (SIGKILL), classifies the end
 * (passed, failed, crashed, timed out, the expected .signal / .exit_code), prints Criterion's
 * lines ("[----] file:line: Assertion Failed", "[FAIL] suite::name: (0.00s)", "[====]
 * Synthesis: ...") to stderr and exits 1 when any test failed or crashed.
 *
 * How the child reports: the text of failures and logs goes, one write() per record, to a
 * memfd the parent reads after reaping the child (no pipe to drain, no size limit); counters,
 * the phase and the last passing assertion's location go to a MAP_SHARED slot (atomics: any
 * thread of the test may assert).
 *
 * Threads: the parent is single-threaded (it warns if something started a thread before main,
 * since forking a multi-threaded process is unsafe and TSan refuses threads in such a child).
 * In a child, any thread may assert or log; only the test's own thread unwinds, others end
 * the process.
 *
 * Invariants: a slot's shared state and memfd belong to the child between fork and reap and to
 * the parent otherwise; a test is counted exactly once, when it is reaped; Failing includes
 * Crashing, and Tested excludes disabled and skipped tests, as in Criterion's synthesis.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A bound on concurrent children: more than any machine we run on has cores. */
#define MAX_JOBS 64
/* The parent wakes at least this often to check deadlines, even without a SIGCHLD. */
#define WAIT_SLICE_MS 100
#define DETAIL_MAX 4096
#define SKIP_REASON_MAX 512

enum phase { PHASE_SETUP = 1, PHASE_BODY, PHASE_TEARDOWN, PHASE_DONE };

/* Written by the child (any of its threads), read by the parent after reaping it. */
struct slot_shared {
    atomic_int phase;
    atomic_int failures;
    atomic_int aborted_fixture; /* a cr_assert failed in an .init or .fini */
    atomic_int skipped;
    atomic_int ended_off_thread; /* a cr_assert / cr_skip_test on another thread ended it */
    _Atomic(const char *) last_file;
    atomic_int last_line;
    char skip_reason[SKIP_REASON_MAX];
};

struct job {
    struct cr_shim_test *test;
    struct cr_shim_suite *suite;
    pid_t pid; /* 0: the slot is free */
    int out_fd;
    struct slot_shared *sh;
    double start_s, deadline_s; /* deadline 0: none */
    bool timed_out;
};

struct opts {
    int jobs;
    bool short_filename, list, fail_fast, always_succeed, quiet;
    int verbose;
    const char *filter;
    double timeout_s;
};

struct totals {
    size_t tested, passing, failing, crashing;
};

static struct cr_shim_test *g_tests;
static struct cr_shim_suite *g_suites;
static struct opts g_opts = {.jobs = 0};

/* The child's view: set once after fork, before the test's code runs. */
static struct slot_shared *g_sh;
static int g_out_fd = -1;
static pthread_t g_test_thread;
static jmp_buf g_unwind;

void cr_shim_test_register_(struct cr_shim_test *t)
{
    t->next_ = g_tests;
    g_tests = t;
}

void cr_shim_suite_register_(struct cr_shim_suite *s)
{
    s->next_ = g_suites;
    g_suites = s;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *shown_file(const char *file)
{
    const char *slash = strrchr(file, '/');
    return g_opts.short_filename && slash ? slash + 1 : file;
}

/* ---- the child's side: records -------------------------------------------------------- */

/* Writes all of buf to fd; a record lost to a write error is reported on stderr instead. */
static void write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            fprintf(stderr, "shim: lost a report record (%s): %.*s", strerror(errno), (int)len, buf);
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

/* Appends "<prefix><line>\n" for every line of text to a growing buffer (NULL on ENOMEM). */
static char *append_lines(char *out, size_t *len, const char *prefix, const char *text)
{
    const char *p = text;
    do {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        size_t add = strlen(prefix) + n + 1;
        char *grown = realloc(out, *len + add + 1);
        if (!grown) {
            free(out);
            return NULL;
        }
        out = grown;
        *len += (size_t)snprintf(out + *len, add + 1, "%s%.*s\n", prefix, (int)n, p);
        p = nl ? nl + 1 : NULL;
    } while (p);
    return out;
}

/* Sends one record: to the test's memfd in a child, to stderr outside of a test. */
static void emit(const char *text, size_t len)
{
    write_all(g_out_fd >= 0 ? g_out_fd : STDERR_FILENO, text, len);
}

static char *vformat(const char *fmt, va_list ap)
{
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        return NULL;
    return s;
}

void cr_shim_pass_(const char *file, int line)
{
    if (!g_sh)
        return;
    atomic_store_explicit(&g_sh->last_file, file, memory_order_relaxed);
    atomic_store_explicit(&g_sh->last_line, line, memory_order_relaxed);
}

static void record_failure(const char *file, int line, const char *fmt, va_list ap)
{
    if (g_sh)
        atomic_fetch_add(&g_sh->failures, 1);
    char *msg = vformat(fmt, ap);
    char head[512];
    snprintf(head, sizeof head, "[----] %s:%d: Assertion Failed\n[----]   ", shown_file(file), line);
    size_t len = 0;
    char *out = append_lines(NULL, &len, "", head);
    out = out ? append_lines(out, &len, "[----]   ", msg ? msg : "(no memory for the message)") : NULL;
    out = out ? append_lines(out, &len, "", "[----]   ") : NULL;
    if (out)
        emit(out, len);
    else
        fprintf(stderr, "[----] %s:%d: Assertion Failed (no memory for the report)\n", file, line);
    free(out);
    free(msg);
    cr_shim_pass_(file, line); /* a crash after it is "below this line" too */
}

void cr_shim_expect_fail_(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record_failure(file, line, fmt, ap);
    va_end(ap);
}

/* Leaves the current test: unwind on its own thread, end the process from any other. */
_Noreturn static void leave_test(void)
{
    if (!g_sh) /* an assertion outside any test (a constructor?) */
        abort();
    if (pthread_equal(pthread_self(), g_test_thread))
        longjmp(g_unwind, 1);
    atomic_store(&g_sh->ended_off_thread, 1);
    _exit(1);
}

void cr_shim_assert_fail_(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    record_failure(file, line, fmt, ap);
    va_end(ap);
    leave_test();
}

void cr_shim_skip_(const char *fmt, ...)
{
    if (g_sh) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g_sh->skip_reason, sizeof g_sh->skip_reason, fmt, ap);
        va_end(ap);
        atomic_store(&g_sh->skipped, 1);
    }
    leave_test();
}

void cr_shim_log_(enum criterion_severity severity, const char *fmt, ...)
{
    if (severity == CR_LOG_INFO && !g_opts.verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    char *msg = vformat(fmt, ap);
    va_end(ap);
    const char *prefix = severity == CR_LOG_ERROR     ? "[ERR ] "
                         : severity == CR_LOG_WARNING ? "[WARN] "
                                                      : "[----] ";
    size_t len = 0;
    char *out = append_lines(NULL, &len, prefix, msg ? msg : "(no memory for the log line)");
    if (out)
        emit(out, len);
    free(out);
    free(msg);
}

const char *cr_shim_detail_(const char *fmt, ...)
{
    static _Thread_local char buf[DETAIL_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return buf;
}

/* ---- the child's side: running one test ------------------------------------------------ */

/* Runs the test's phases in the child and exits; a cr_assert in a phase unwinds to here. */
_Noreturn static void child_run(struct cr_shim_test *t, struct cr_shim_suite *s)
{
    atomic_store(&g_sh->phase, PHASE_SETUP);
    if (setjmp(g_unwind) == 0) {
        if (s && s->init)
            s->init();
        if (t->init)
            t->init();
    } else {
        if (!atomic_load(&g_sh->skipped))
            atomic_store(&g_sh->aborted_fixture, 1);
        fflush(NULL);
        exit(0); /* Criterion runs neither the body nor the .fini after a failed .init */
    }
    atomic_store(&g_sh->phase, PHASE_BODY);
    if (setjmp(g_unwind) == 0)
        t->fn_();
    atomic_store(&g_sh->phase, PHASE_TEARDOWN);
    if (setjmp(g_unwind) == 0) {
        if (t->fini)
            t->fini();
        if (s && s->fini)
            s->fini();
    } else if (!atomic_load(&g_sh->skipped)) {
        atomic_store(&g_sh->aborted_fixture, 1);
    }
    atomic_store(&g_sh->phase, PHASE_DONE);
    fflush(NULL);
    exit(0); /* exit(), not _exit(): atexit work and the sanitizer's end-of-run checks run */
}

/* ---- the parent's side ----------------------------------------------------------------- */

static struct cr_shim_suite *suite_of(const struct cr_shim_test *t)
{
    for (struct cr_shim_suite *s = g_suites; s; s = s->next_)
        if (strcmp(s->name_, t->suite_) == 0)
            return s;
    return NULL;
}

static int cmp_tests(const void *a, const void *b)
{
    const struct cr_shim_test *x = *(struct cr_shim_test *const *)a;
    const struct cr_shim_test *y = *(struct cr_shim_test *const *)b;
    int c = strcmp(x->suite_, y->suite_);
    return c ? c : strcmp(x->name_, y->name_);
}

static bool selected(const struct cr_shim_test *t)
{
    if (!g_opts.filter)
        return true;
    char id[512];
    snprintf(id, sizeof id, "%s/%s", t->suite_, t->name_);
    return fnmatch(g_opts.filter, id, 0) == 0;
}

static double timeout_of(const struct cr_shim_test *t, const struct cr_shim_suite *s)
{
    if (t->timeout > 0)
        return t->timeout;
    if (s && s->timeout > 0)
        return s->timeout;
    return g_opts.timeout_s;
}

static int count_threads(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Threads: %d", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

/* Forks the child of job j; returns 0 or -errno (the test is then counted as crashed). */
static int start_job(struct job *j, const sigset_t *child_mask)
{
    memset(j->sh, 0, sizeof *j->sh);
    if (ftruncate(j->out_fd, 0) < 0 || lseek(j->out_fd, 0, SEEK_SET) < 0)
        return -errno;
    j->timed_out = false;
    j->start_s = now_s();
    double timeout_s = timeout_of(j->test, j->suite);
    j->deadline_s = timeout_s > 0 ? j->start_s + timeout_s : 0;
    if (g_opts.verbose) {
        fprintf(stderr, "[RUN ] %s::%s\n", j->test->suite_, j->test->name_);
        if (j->test->description)
            fprintf(stderr, "[----]   %s\n", j->test->description);
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, child_mask, NULL);
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a killed runner takes its tests with it */
        if (getppid() != parent)
            _exit(1);
        g_sh = j->sh;
        g_out_fd = j->out_fd;
        g_test_thread = pthread_self();
        child_run(j->test, j->suite);
    }
    j->pid = pid;
    return 0;
}

/* Copies what the child recorded to stderr. */
static void dump_records(int fd)
{
    char buf[8192];
    ssize_t n;
    if (lseek(fd, 0, SEEK_SET) < 0)
        return;
    while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0)
            fwrite(buf, 1, (size_t)n, stderr);
}

/* Classifies a reaped child, prints its lines and counts it. Returns true if it failed. */
static bool finish_job(struct job *j, int status, struct totals *tot)
{
    const struct cr_shim_test *t = j->test;
    struct slot_shared *sh = j->sh;
    double secs = now_s() - j->start_s;
    int failures = atomic_load(&sh->failures);
    int phase = atomic_load(&sh->phase);
    bool in_fixture = phase == PHASE_SETUP || phase == PHASE_TEARDOWN;
    bool failed = false, crashed = false, skipped = false;
    char why[256] = "";

    dump_records(j->out_fd);
    if (j->timed_out) {
        failed = true;
        fprintf(stderr, "[FAIL] %s::%s: Timed out. (%.2fs)\n", t->suite_, t->name_, secs);
    } else if (WIFSIGNALED(status) && WTERMSIG(status) == t->signal && failures == 0 &&
               phase == PHASE_BODY) {
        /* the expected signal: passed */
    } else if (WIFSIGNALED(status) || atomic_load(&sh->aborted_fixture)) {
        failed = crashed = true;
        if (in_fixture) {
            fprintf(stderr, "[----] Warning! The test `%s::%s` crashed during its setup or teardown.\n",
                    t->suite_, t->name_);
        } else {
            const char *file = atomic_load(&sh->last_file);
            int line = atomic_load(&sh->last_line);
            fprintf(stderr, "[----] %s:%d: Unexpected signal caught below this line!\n",
                    shown_file(file ? file : t->file_), file ? line : t->line_);
            if (t->signal)
                fprintf(stderr, "[----] %s::%s: died of signal %d, expected signal %d\n", t->suite_,
                        t->name_, WTERMSIG(status), t->signal);
            fprintf(stderr, "[FAIL] %s::%s: CRASH!\n", t->suite_, t->name_);
        }
    } else {
        int code = WEXITSTATUS(status);
        if (t->signal)
            snprintf(why, sizeof why, "exited with status %d, expected signal %d", code, t->signal);
        else if (code != t->exit_code && !atomic_load(&sh->ended_off_thread))
            snprintf(why, sizeof why, "exited with status %d, expected %d%s", code, t->exit_code,
                     code == 66 ? " (66: a ThreadSanitizer report?)" : "");
        else if (in_fixture && !atomic_load(&sh->skipped))
            snprintf(why, sizeof why, "exited during its setup or teardown");
        skipped = !why[0] && failures == 0 && atomic_load(&sh->skipped);
        failed = why[0] || failures > 0;
        if (why[0])
            fprintf(stderr, "[----] %s::%s: %s\n", t->suite_, t->name_, why);
        if (failed)
            fprintf(stderr, "[FAIL] %s::%s: (%.2fs)\n", t->suite_, t->name_, secs);
    }
    if (skipped) {
        if (g_opts.verbose)
            fprintf(stderr, "[SKIP] %s::%s: %s\n", t->suite_, t->name_, sh->skip_reason);
        return false;
    }
    tot->tested++;
    if (failed)
        tot->failing++;
    else
        tot->passing++;
    if (crashed)
        tot->crashing++;
    if (!failed && g_opts.verbose)
        fprintf(stderr, "[PASS] %s::%s: (%.2fs)\n", t->suite_, t->name_, secs);
    return failed;
}

/* Waits up to WAIT_SLICE_MS (less if a deadline is nearer) for a SIGCHLD. */
static void wait_a_little(const struct job *jobs, int njobs, const sigset_t *chld)
{
    double now = now_s(), wait_s = WAIT_SLICE_MS / 1000.0;
    for (int i = 0; i < njobs; i++)
        if (jobs[i].pid && jobs[i].deadline_s > 0 && jobs[i].deadline_s - now < wait_s)
            wait_s = jobs[i].deadline_s - now;
    if (wait_s < 0.001)
        wait_s = 0.001;
    struct timespec ts = {(time_t)wait_s, (long)((wait_s - (double)(time_t)wait_s) * 1e9)};
    sigtimedwait(chld, NULL, &ts);
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "%s: tests built against the DSTL Criterion-compatible shim (tests/shim)\n"
            "options: -jN|--jobs N, -S|--short-filename, --verbose[=N], -q|--quiet,\n"
            "         --filter PATTERN (glob on suite/name), --timeout SECONDS, -l|--list,\n"
            "         -f|--fail-fast, --always-succeed; --color, --ascii, --encoding and\n"
            "         --full-stats are accepted and ignored\n",
            prog);
}

/* Parses Criterion's options; returns -1 to exit 0 (help, version), 0 to run. */
static int parse_opts(int argc, char **argv)
{
    enum { O_VERBOSE = 256, O_FILTER, O_TIMEOUT, O_ALWAYS, O_IGNORED };
    static const struct option longs[] = {
        {"jobs", required_argument, NULL, 'j'},
        {"short-filename", no_argument, NULL, 'S'},
        {"verbose", optional_argument, NULL, O_VERBOSE},
        {"quiet", no_argument, NULL, 'q'},
        {"filter", required_argument, NULL, O_FILTER},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"list", no_argument, NULL, 'l'},
        {"fail-fast", no_argument, NULL, 'f'},
        {"always-succeed", no_argument, NULL, O_ALWAYS},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'v'},
        {"color", optional_argument, NULL, O_IGNORED},
        {"ascii", no_argument, NULL, O_IGNORED},
        {"encoding", required_argument, NULL, O_IGNORED},
        {"full-stats", no_argument, NULL, O_IGNORED},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":j:Sqlfhv", longs, NULL)) != -1) {
        switch (c) {
        case 'j': g_opts.jobs = atoi(optarg); break;
        case 'S': g_opts.short_filename = true; break;
        case O_VERBOSE: g_opts.verbose = optarg ? atoi(optarg) : 1; break;
        case 'q': g_opts.quiet = true; break;
        case O_FILTER: g_opts.filter = optarg; break;
        case O_TIMEOUT: g_opts.timeout_s = atof(optarg); break;
        case 'l': g_opts.list = true; break;
        case 'f': g_opts.fail_fast = true; break;
        case O_ALWAYS: g_opts.always_succeed = true; break;
        case O_IGNORED: break;
        case 'h': usage(argv[0]); return -1;
        case 'v': fprintf(stderr, "Tests built against the DSTL Criterion-compatible shim\n"); return -1;
        case ':': fprintf(stderr, "shim: warning: option %s needs a value; ignored\n", argv[optind - 1]); break;
        default: fprintf(stderr, "shim: warning: unknown option %s ignored\n", argv[optind - 1]); break;
        }
    }
    for (int i = optind; i < argc; i++)
        fprintf(stderr, "shim: warning: argument %s ignored\n", argv[i]);
    if (g_opts.quiet)
        g_opts.verbose = 0;
    if (g_opts.jobs <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        g_opts.jobs = n > 0 ? (int)n : 1;
    }
    if (g_opts.jobs > MAX_JOBS)
        g_opts.jobs = MAX_JOBS;
    return 0;
}

/* Collects the selected tests, sorted by suite and name; returns their count or -ENOMEM. */
static int collect(struct cr_shim_test ***out)
{
    size_t n = 0, k = 0;
    for (struct cr_shim_test *t = g_tests; t; t = t->next_)
        n++;
    struct cr_shim_test **v = calloc(n ? n : 1, sizeof *v);
    if (!v)
        return -ENOMEM;
    for (struct cr_shim_test *t = g_tests; t; t = t->next_)
        if (selected(t))
            v[k++] = t;
    qsort(v, k, sizeof *v, cmp_tests);
    *out = v;
    return (int)k;
}

static void list_tests(struct cr_shim_test **v, int n)
{
    for (int i = 0; i < n; i++) {
        if (i == 0 || strcmp(v[i]->suite_, v[i - 1]->suite_) != 0) {
            int k = 0;
            while (i + k < n && strcmp(v[i + k]->suite_, v[i]->suite_) == 0)
                k++;
            printf("%s: %d test%s\n", v[i]->suite_, k, k == 1 ? "" : "s");
        }
        bool last = i + 1 == n || strcmp(v[i + 1]->suite_, v[i]->suite_) != 0;
        printf("%s %s\n", last ? "`--" : "|--", v[i]->name_);
    }
}

int main(int argc, char **argv)
{
    if (parse_opts(argc, argv) < 0)
        return 0;
    struct cr_shim_test **tests;
    int ntests = collect(&tests);
    if (ntests < 0) {
        fprintf(stderr, "shim: out of memory collecting the tests\n");
        return 1;
    }
    if (g_opts.list) {
        list_tests(tests, ntests);
        free(tests);
        return 0;
    }
    int threads = count_threads();
    if (threads > 1)
        fprintf(stderr, "[WARN] shim: %d threads run before the first fork: forked tests may "
                        "deadlock or be refused by TSan\n", threads);

    int njobs = g_opts.jobs < ntests ? g_opts.jobs : (ntests > 0 ? ntests : 1);
    struct job jobs[MAX_JOBS];
    struct slot_shared *shared = mmap(NULL, sizeof *shared * (size_t)njobs, PROT_READ | PROT_WRITE,
                                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        fprintf(stderr, "shim: mmap of %d result slots: %s\n", njobs, strerror(errno));
        return 1;
    }
    for (int i = 0; i < njobs; i++) {
        jobs[i] = (struct job){.sh = &shared[i]};
        jobs[i].out_fd = memfd_create("shim-test-records", MFD_CLOEXEC);
        if (jobs[i].out_fd < 0) {
            fprintf(stderr, "shim: memfd_create for job slot %d: %s\n", i, strerror(errno));
            return 1;
        }
    }

    /* SIGCHLD stays blocked in the parent so sigtimedwait() can wait for it. */
    sigset_t chld, old_mask;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, &old_mask);

    if (g_opts.verbose) {
        fprintf(stderr, "[----] DSTL Criterion-compatible shim (tests/shim), %d job%s\n", njobs,
                njobs == 1 ? "" : "s");
        for (int i = 0; i < ntests; i++)
            if (i == 0 || strcmp(tests[i]->suite_, tests[i - 1]->suite_) != 0) {
                int k = 0;
                while (i + k < ntests && strcmp(tests[i + k]->suite_, tests[i]->suite_) == 0)
                    k++;
                fprintf(stderr, "[====] Running %d test%s from %s:\n", k, k == 1 ? "" : "s",
                        tests[i]->suite_);
            }
    }

    struct totals tot = {0};
    int next = 0, running = 0;
    bool stop = false;
    while ((next < ntests && !stop) || running > 0) {
        for (int i = 0; i < njobs && next < ntests && !stop; i++) {
            if (jobs[i].pid)
                continue;
            struct cr_shim_test *t = tests[next++];
            struct cr_shim_suite *s = suite_of(t);
            if (t->disabled || (s && s->disabled)) {
                if (g_opts.verbose)
                    fprintf(stderr, "[SKIP] %s::%s: Test is disabled\n", t->suite_, t->name_);
                i--; /* this slot is still free */
                continue;
            }
            jobs[i].test = t;
            jobs[i].suite = s;
            int rc = start_job(&jobs[i], &old_mask);
            if (rc < 0) {
                fprintf(stderr, "[----] %s::%s: could not start: %s\n[FAIL] %s::%s: CRASH!\n",
                        t->suite_, t->name_, strerror(-rc), t->suite_, t->name_);
                tot.tested++, tot.failing++, tot.crashing++;
                stop = g_opts.fail_fast;
                i--;
                continue;
            }
            running++;
        }
        if (running == 0)
            continue;
        wait_a_little(jobs, njobs, &chld);
        int status;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int i = 0; i < njobs; i++) {
                if (jobs[i].pid != pid)
                    continue;
                jobs[i].pid = 0;
                running--;
                if (finish_job(&jobs[i], status, &tot) && g_opts.fail_fast)
                    stop = true;
            }
        }
        double now = now_s();
        for (int i = 0; i < njobs; i++)
            if (jobs[i].pid && jobs[i].deadline_s > 0 && now >= jobs[i].deadline_s && !jobs[i].timed_out) {
                jobs[i].timed_out = true;
                kill(jobs[i].pid, SIGKILL);
            }
    }

    fprintf(stderr, "[====] Synthesis: Tested: %zu | Passing: %zu | Failing: %zu | Crashing: %zu \n",
            tot.tested, tot.passing, tot.failing, tot.crashing);
    for (int i = 0; i < njobs; i++)
        close(jobs[i].out_fd);
    munmap(shared, sizeof *shared * (size_t)njobs);
    free(tests);
    return tot.failing > 0 && !g_opts.always_succeed ? 1 : 0;
}

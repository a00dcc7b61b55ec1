/*
 * Remote ownership: leases. A storage on another machine cannot be protected by a local lock,
 * so each run that uploads keeps a lease object under the remote prefix
 * (PREFIX/_leases/<run>-t<ms>.lease), written before its first upload, refreshed every
 * dstl.remote.lease-refresh, removed on a clean close. Another machine's gc (here: a storage
 * on another local dir) never deletes objects of, or aborts uploads of, a run whose lease is
 * fresh — ages on the server's clock, never the local one — and the holder fences itself (its
 * persists fail, naming the lease) once its last refresh is older than lease-timeout minus two
 * refreshes, for good once older than lease-timeout (issue 8).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dstl.h"
#include "dstl/remote/remote.h"
#include "dstl/seams.h"
#include "tests/helpers.h"
#include "tests/helpers_dstl.h"
#include "tests/helpers_remote.h"

#define NKG 8

static t_remote fx;
static t_s3_proxy proxy;

static void setup(void) { t_remote_init(&fx, "lease"); }

static void teardown(void)
{
    t_s3_proxy_stop(&proxy);
    t_remote_fini(&fx);
}

TestSuite(remote_lease, .init = setup, .fini = teardown, .timeout = 120);

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* A storage of the fixture on DIR/<sub> ("a machine") through endpoint (NULL: the server),
 * with the key/value pairs of extra and the test seams t. */
static dstl_storage *machine(const char *sub, const char *endpoint, const char *const *extra,
                             const storage_seams *t)
{
    char ldir[4200];
    snprintf(ldir, sizeof ldir, "%s/%s", fx.dir, sub);
    /* RGW 16 ignores checksum headers; a signed body digest it verifies */
    dstl_config *c = t_remote_config(&fx, ldir, "dstl.s3.endpoint", endpoint ? endpoint : fx.env.endpoint,
                                     "dstl.s3.payload-signing", "sha256", NULL);
    for (size_t i = 0; extra && extra[i]; i += 2)
        cr_assert_eq(dstl_config_set(c, extra[i], extra[i + 1]), 0, "%s", dstl_last_error());
    dstl_storage *s = NULL;
    cr_assert_eq(storage_open_with_seams(c, t, &s), 0, "open: %s", dstl_last_error());
    dstl_config_free(c);
    return s;
}

static size_t objects(void)
{
    size_t o = 0, u = 0;
    t_remote_count(&fx, &o, &u);
    return o;
}

static size_t leases(void) { return t_remote_leases(&fx); }

/* persist; the result (0 and *out, or the error with the detail in err). */
static int persist_rc(dstl_writer *w, uint64_t from, uint64_t cp, dstl_handle **out, char *err, size_t cap)
{
    dstl_future *f = NULL;
    int rc = dstl_persist(w, from, cp, &f);
    if (rc == 0) {
        cr_assert_eq(dstl_future_wait(f, 30000), 0);
        rc = dstl_future_result(f, out);
        dstl_future_free(f);
    }
    if (rc < 0) snprintf(err, cap, "%s", dstl_last_error());
    return rc;
}

/* Machine A persists and keeps its writer open: its segments are held by its writer's
 * sections and its handles, none of which machine B knows. B's gc with no live handle and
 * min_age 0 deletes nothing of A's while A's lease is fresh; once A closes cleanly (its lease
 * removed), the same gc judges A's objects by the live set. */
Test(remote_lease, a_fresh_lease_keeps_another_machines_objects)
{
    dstl_storage *a = machine("a", NULL, NULL, NULL), *b = machine("b", NULL, NULL, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(a, "w", 0, NKG - 1, &w), 0);
    cr_assert_eq(leases(), 0, "no lease before the first upload");
    dstl_handle *h = NULL;
    for (uint64_t cp = 1; cp <= 4; cp++) {
        t_append_n(w, 1, 30, 0, NKG, 400);
        dstl_handle *n = t_persist(w, 0, cp);
        dstl_handle_free(h);
        h = n;
    }
    cr_assert_eq(leases(), 1, "the run keeps one lease");
    size_t before = objects();
    cr_assert_eq(before, 4);
    dstl_gc_report rep;
    cr_assert_eq(dstl_gc(b, NULL, 0, 0, 0, &rep), 0, "%s", dstl_last_error());
    cr_assert_eq(rep.deleted, 0, "gc deleted %llu objects of a run with a fresh lease", (unsigned long long)rep.deleted);
    cr_assert_eq(rep.kept_running, before, "kept_running %llu", (unsigned long long)rep.kept_running);
    cr_assert_eq(objects(), before);
    cr_assert_eq(t_verify(b, h, 1, 0, NKG, 0, NKG - 1, 400), 120, "%s", dstl_last_error());

    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(a), 0);
    cr_assert_eq(leases(), 0, "a clean close removes the lease");
    const dstl_handle *live[] = {h};
    cr_assert_eq(dstl_gc(b, live, 1, 0, 0, &rep), 0, "%s", dstl_last_error());
    cr_assert_eq(rep.kept_running, 0);
    cr_assert_eq(objects(), 4, "every segment is the last handle's (persist from 0)");
    cr_assert_eq(t_verify(b, h, 1, 0, NKG, 0, NKG - 1, 400), 120, "%s", dstl_last_error());
    cr_assert_eq(dstl_handle_discard(b, h), 0);        /* not b's handle: a no-op */
    cr_assert_eq(dstl_gc(b, NULL, 0, 0, 0, &rep), 0, "%s", dstl_last_error());
    cr_assert_eq(objects(), 0, "nothing live, nobody alive: everything goes");
    dstl_handle_free(h);
    cr_assert_eq(dstl_storage_close(b), 0);
}

static const char *tool(void)
{
    static char path[4096];
    const char *d = getenv("DSTL_TEST_TOOLS");
    snprintf(path, sizeof path, "%s/crash_child", d && *d ? d : "build/tools");
    return path;
}

/* A killed run leaves its lease (crash_child: lease-refresh 100 ms, lease-timeout 500 ms): gc
 * elsewhere keeps everything of it until the lease is stale on the server's clock, then
 * sweeps what no live handle needs, and the stale lease with it. */
Test(remote_lease, a_killed_runs_objects_wait_for_its_lease_to_go_stale)
{
    t_engine_or_skip("io_uring");                   /* the child's engine */
    char adir[4200], hdir[4200];
    snprintf(adir, sizeof adir, "%s/a", fx.dir);
    snprintf(hdir, sizeof hdir, "%s/handles", fx.dir);
    cr_assert_eq(mkdir(hdir, 0755), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        execl(tool(), tool(), "run", adir, hdir, "io_uring", "3", fx.uri, "small", (char *)NULL);
        _exit(127);
    }
    char first[4300];
    snprintf(first, sizeof first, "%s/w0.handle", hdir);
    for (int i = 0; i < 500 && access(first, F_OK) != 0; i++) sleep_ms(20);   /* its first checkpoint */
    sleep_ms(600);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFSIGNALED(st), "the child ended on its own (%d)", st);
    static const char *const short_lease[] = {"dstl.remote.lease-refresh", "100ms", "dstl.remote.lease-timeout",
                                              "500ms", NULL};
    dstl_storage *b = machine("b", NULL, short_lease, NULL);
    dstl_gc_report rep;
    cr_assert_eq(dstl_gc(b, NULL, 0, 0, 0, &rep), 0, "%s", dstl_last_error());
    size_t n = objects();
    cr_assert_gt(n, 0);
    cr_assert_eq(rep.deleted, 0, "at once after the kill the lease is fresh: nothing goes");
    cr_assert_eq(rep.kept_running, n, "kept_running %llu of %zu", (unsigned long long)rep.kept_running, n);
    sleep_ms(1800);                          /* 500 ms, and the Date header's whole seconds */
    cr_assert_eq(dstl_gc(b, NULL, 0, 0, 0, &rep), 0, "%s", dstl_last_error());
    cr_assert_eq(rep.kept_running, 0);
    cr_assert_eq(objects(), 0, "the dead run's objects go");
    cr_assert_eq(leases(), 0, "and its stale lease");
    cr_assert_eq(dstl_storage_close(b), 0);
}

/* Puts segment object no i of a dead run (no lease, no lock) where remote_key puts it. */
static void put_orphan(int i)
{
    static const char body[64] = "an orphan of a dead run";
    remote_loc loc;
    cr_assert_eq(remote_parse_uri(fx.uri, "test", &loc), 0);
    char name[64], key[640];
    snprintf(name, sizeof name, "00000000deadbeef-%012d.seg", i);
    cr_assert_eq(remote_key(&loc, name, key, sizeof key), 0);
    s3_result r;
    cr_assert_eq(s3_put_object_sync(fx.s3, fx.bucket, key, body, sizeof body, false, &r), 0, "%s", r.error);
}

/* Orphans of a dead run (no lease, no lock) and a live run's objects, judged by a gc whose
 * local clock is an hour off either way: remote ages are the server's (the listing's Date
 * against LastModified), so the skew changes nothing. */
Test(remote_lease, ages_are_judged_on_the_servers_clock)
{
    for (int i = 0; i < 3; i++) put_orphan(i);
    dstl_storage *a = machine("a", NULL, NULL, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(a, "w", 0, NKG - 1, &w), 0);
    t_append_n(w, 2, 20, 0, NKG, 300);
    dstl_handle *h = t_persist(w, 0, 1);
    const int64_t hour = 3600 * 1000;

    /* an hour ahead: a local clock would see everything an hour old */
    storage_seams ahead = {.wall_clock_skew_ms = hour};
    dstl_storage *b = machine("b", NULL, NULL, &ahead);
    dstl_gc_report rep;
    cr_assert_eq(dstl_gc(b, NULL, 0, 600000, 0, &rep), 0, "%s", dstl_last_error());
    cr_assert_eq(rep.deleted, 0, "+1 h: young orphans (10 min) and a live run's segment are kept");
    cr_assert_eq(rep.kept_young, 3);
    cr_assert_eq(rep.kept_running, 1);
    cr_assert_eq(dstl_gc(b, NULL, 0, 0, 0, &rep), 0, "%s", dstl_last_error());
    cr_assert_eq(rep.kept_running, 1, "+1 h: the live run's lease is fresh on the server's clock");
    cr_assert_eq(rep.deleted, 3);
    cr_assert_eq(dstl_storage_close(b), 0);

    /* an hour behind: a local clock would see everything as not yet made */
    for (int i = 3; i < 5; i++) put_orphan(i);
    sleep_ms(2500);                          /* older than 1 s, with the Date's whole seconds */
    storage_seams behind = {.wall_clock_skew_ms = -hour};
    b = machine("b", NULL, NULL, &behind);
    cr_assert_eq(dstl_gc(b, NULL, 0, 1000, 0, &rep), 0, "%s", dstl_last_error());
    cr_assert_eq(rep.deleted, 2, "-1 h: orphans older than 1 s go (deleted %llu)", (unsigned long long)rep.deleted);
    cr_assert_eq(rep.kept_running, 1, "-1 h: the live run's lease is fresh");
    cr_assert_eq(dstl_storage_close(b), 0);

    cr_assert_eq(t_verify(a, h, 2, 0, NKG, 0, NKG - 1, 300), 20, "%s", dstl_last_error());
    dstl_handle_free(h);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(a), 0);
}

/* The holder fences itself: its lease cannot be refreshed (the proxy answers every lease
 * write 503 after the first); once the last refresh is older than lease-timeout - 2 x
 * lease-refresh its persists fail, naming the lease, although segments still upload fine;
 * when a refresh succeeds again (the proxy comes back clean) persists succeed again. */
Test(remote_lease, a_run_whose_lease_is_not_refreshed_fences_itself)
{
    char why[512], err[1024] = "";
    cr_assert_eq(t_s3_proxy_start(&proxy, fx.env.endpoint, "PUT?_leases pass; PUT?_leases 503 x100000", why,
                                  sizeof why), 0, "%s", why);
    /* A long prefix, as deployments have: the reason must survive the error detail's bounds
     * (it was cut off behind the lease's key once). */
    char uri[400];
    snprintf(uri, sizeof uri, "%s/%s", fx.uri,
             "team-streaming-platform/production/eu-west-1/job-0123456789abcdef0123456789abcdef/"
             "operator-state-changelog/checkpoints/dstl-v1/segments-and-leases/with-a-long-path");
    const char *const lease[] = {"dstl.remote.lease-refresh", "1s", "dstl.remote.lease-timeout", "6s",
                                 "dstl.upload.timeout", "300ms", "dstl.upload.max-attempts", "2",
                                 "dstl.upload.next-attempt-delay", "10ms", "dstl.remote.uri", uri, NULL};
    dstl_storage *a = machine("a", proxy.url, lease, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(a, "w", 0, NKG - 1, &w), 0);
    t_append_n(w, 3, 20, 0, NKG, 300);
    dstl_handle *h = NULL;
    cr_assert_eq(persist_rc(w, 0, 1, &h, err, sizeof err), 0, "%s", err);   /* the lease is written */
    dstl_handle_free(h);
    h = NULL;
    sleep_ms(4400);                          /* past 6 s - 2 x 1 s, before 6 s */
    t_append_n(w, 3, 20, 0, NKG, 300);
    int rc = persist_rc(w, 0, 2, &h, err, sizeof err);
    cr_assert_eq(rc, DSTL_EREMOTE, "a fenced run's persist: %s (%s)", dstl_strerror(rc), err);
    cr_assert(strstr(err, "_leases/") && strstr(err, "fenced until a refresh succeeds"), "%s", err);
    int port = proxy.port;
    t_s3_proxy_stop(&proxy);
    cr_assert_eq(t_s3_proxy_start_on(&proxy, fx.env.endpoint, NULL, port, why, sizeof why), 0, "%s", why);
    rc = -1;
    for (int i = 0; i < 20 && rc != 0; i++) {   /* a refresh comes every 250 ms after a failure */
        sleep_ms(100);
        rc = persist_rc(w, 0, 3 + (uint64_t)i, &h, err, sizeof err);
    }
    cr_assert_eq(rc, 0, "after a successful refresh, persists succeed again: %s", err);
    cr_assert_eq(t_verify(a, h, 3, 0, NKG, 0, NKG - 1, 300), 40, "%s", dstl_last_error());
    dstl_handle_free(h);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(a), 0);
}

/* Past lease-timeout without a refresh, another machine's gc may have taken the run for dead:
 * it stays fenced even once its lease can be written again. */
Test(remote_lease, a_lapsed_lease_fences_for_good)
{
    char why[512], err[1024] = "";
    cr_assert_eq(t_s3_proxy_start(&proxy, fx.env.endpoint, "PUT?_leases pass; PUT?_leases 503 x100000", why,
                                  sizeof why), 0, "%s", why);
    static const char *const lease[] = {"dstl.remote.lease-refresh", "250ms", "dstl.remote.lease-timeout", "1s",
                                        "dstl.upload.timeout", "200ms", "dstl.upload.max-attempts", "2",
                                        "dstl.upload.next-attempt-delay", "10ms", NULL};
    dstl_storage *a = machine("a", proxy.url, lease, NULL);
    dstl_writer *w;
    cr_assert_eq(dstl_writer_open(a, "w", 0, NKG - 1, &w), 0);
    t_append_n(w, 4, 20, 0, NKG, 300);
    dstl_handle *h = NULL;
    cr_assert_eq(persist_rc(w, 0, 1, &h, err, sizeof err), 0, "%s", err);
    dstl_handle_free(h);
    h = NULL;
    sleep_ms(1500);
    int port = proxy.port;
    t_s3_proxy_stop(&proxy);
    cr_assert_eq(t_s3_proxy_start_on(&proxy, fx.env.endpoint, NULL, port, why, sizeof why), 0, "%s", why);
    sleep_ms(600);                           /* refreshes succeed now */
    t_append_n(w, 4, 20, 0, NKG, 300);
    int rc = persist_rc(w, 0, 2, &h, err, sizeof err);
    cr_assert_eq(rc, DSTL_EREMOTE, "%s", dstl_strerror(rc));
    cr_assert(strstr(err, "reopen the storage"), "%s", err);
    cr_assert_eq(dstl_writer_close(w), 0);
    cr_assert_eq(dstl_storage_close(a), 0);
}

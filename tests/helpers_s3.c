/*
 * tests/helpers_s3.c — S3 test helpers: the server's environment, unique buckets, emptying
 * buckets, counting leftovers, and starting/stopping the fault proxy. See helpers_s3.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/helpers_s3.h"
#include "wire/wire.h"

static int env_copy(const char *name, char *out, size_t cap, char *why, size_t why_cap)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        snprintf(why, why_cap,
                 "%s is not set: S3 tests need the server that tests/run.sh starts "
                 "(run them through `make test`)", name);
        return -ENOENT;
    }
    snprintf(out, cap, "%s", v);
    return 0;
}

int t_s3_env_get(t_s3_env *e, char *why, size_t why_cap)
{
    memset(e, 0, sizeof *e);
    int rc = env_copy("DSTL_T_S3_ENDPOINT", e->endpoint, sizeof e->endpoint, why, why_cap);
    if (!rc) rc = env_copy("DSTL_T_S3_ACCESS_KEY", e->access_key, sizeof e->access_key, why, why_cap);
    if (!rc) rc = env_copy("DSTL_T_S3_SECRET_KEY", e->secret_key, sizeof e->secret_key, why, why_cap);
    if (!rc && env_copy("DSTL_T_S3_REGION", e->region, sizeof e->region, why, why_cap))
        snprintf(e->region, sizeof e->region, "us-east-1");
    return rc;
}

s3_opts t_s3_opts(const t_s3_env *e)
{
    s3_opts o = {
        .endpoint = e->endpoint,
        .region = e->region,
        .path_style = true,
        .access_key = e->access_key,
        .secret_key = e->secret_key,
        .connections = 4,
        .connect_timeout_ms = 2000,
        .attempt_timeout_ms = 5000,
        .transfer_timeout_ms = 20000,
        .max_attempts = 3,
        .next_attempt_delay_ms = 20,
        .crc32c = wire_crc32c,
    };
    return o;
}

void t_s3_bucket_name(char *out, size_t cap, const char *tag)
{
    static unsigned n;
    unsigned r = (unsigned)time(NULL) ^ (unsigned)getpid() * 2654435761u;
    snprintf(out, cap, "dstl-t-%.24s-%d-%u-%05u", tag, (int)getpid(), n++, r % 100000);
    for (char *p = out; *p; p++)
        if (*p == '_') *p = '-';
}

int t_s3_setup(t_s3_env *e, s3_client **c, char *bucket, size_t bucket_cap, const char *tag,
               char *why, size_t why_cap)
{
    int rc = t_s3_env_get(e, why, why_cap);
    if (rc) return rc;
    s3_opts o = t_s3_opts(e);
    s3_result r;
    rc = s3_client_new(&o, c, &r);
    t_s3_bucket_name(bucket, bucket_cap, tag);
    if (!rc) rc = s3_create_bucket_sync(*c, bucket, &r);
    if (rc) snprintf(why, why_cap, "%s", r.error);
    return rc;
}

int t_s3_count(s3_client *c, const char *bucket, const char *prefix, size_t *objects,
               size_t *uploads)
{
    s3_list l;
    int rc = s3_list_objects_all_sync(c, bucket, prefix, 0, &l, NULL);
    if (rc) return rc;
    /* a running storage's lease (PREFIX/_leases/...) is not a segment: t_s3_count_leases */
    *objects = 0;
    for (size_t i = 0; i < l.n_objects; i++) *objects += strstr(l.objects[i].key, "_leases/") == NULL;
    s3_list_clear(&l);
    rc = s3_list_multipart_uploads_all_sync(c, bucket, prefix, 0, &l, NULL);
    if (rc) return rc;
    *uploads = l.n_uploads;
    s3_list_clear(&l);
    return 0;
}

int t_s3_count_leases(s3_client *c, const char *bucket, const char *prefix, size_t *leases)
{
    s3_list l;
    int rc = s3_list_objects_all_sync(c, bucket, prefix, 0, &l, NULL);
    if (rc) return rc;
    *leases = 0;
    for (size_t i = 0; i < l.n_objects; i++) *leases += strstr(l.objects[i].key, "_leases/") != NULL;
    s3_list_clear(&l);
    return 0;
}

int t_s3_drop_bucket(s3_client *c, const char *bucket, char *why, size_t why_cap)
{
    s3_result r;
    s3_list l;
    int rc = s3_list_multipart_uploads_all_sync(c, bucket, NULL, 0, &l, &r);
    for (size_t i = 0; !rc && i < l.n_uploads; i++)
        rc = s3_abort_multipart_upload_sync(c, bucket, l.uploads[i].key, l.uploads[i].upload_id, &r);
    if (!rc) s3_list_clear(&l);
    if (!rc) rc = s3_list_objects_all_sync(c, bucket, NULL, 0, &l, &r);
    if (!rc && l.n_objects) {
        const char **keys = calloc(l.n_objects, sizeof *keys);
        if (!keys) rc = -ENOMEM;
        for (size_t i = 0; !rc && i < l.n_objects; i++) keys[i] = l.objects[i].key;
        if (!rc) rc = s3_delete_objects_sync(c, bucket, keys, l.n_objects, &r);
        free(keys);
    }
    if (!rc) s3_list_clear(&l);
    if (!rc) rc = s3_delete_bucket_sync(c, bucket, &r);
    if (rc && why) snprintf(why, why_cap, "%s", r.error);
    return rc;
}

static int tool_path(char *out, size_t cap)
{
    const char *dir = getenv("DSTL_TEST_TOOLS");
    if (dir && *dir) {
        snprintf(out, cap, "%s/s3proxy", dir);
        if (access(out, X_OK) == 0) return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -ENOENT;
    exe[n] = '\0';
    snprintf(out, cap, "%s/../tools/s3proxy", dirname(exe));
    return access(out, X_OK) == 0 ? 0 : -ENOENT;
}

int t_s3_proxy_start(t_s3_proxy *p, const char *upstream, const char *script, char *why,
                     size_t why_cap)
{
    return t_s3_proxy_start_on(p, upstream, script, 0, why, why_cap);
}

int t_s3_proxy_start_on(t_s3_proxy *p, const char *upstream, const char *script, int port, char *why,
                        size_t why_cap)
{
    memset(p, 0, sizeof *p);
    char portbuf[16];
    snprintf(portbuf, sizeof portbuf, "%d", port);
    char path[PATH_MAX + 32];
    if (tool_path(path, sizeof path)) {
        snprintf(why, why_cap, "s3proxy not found (DSTL_TEST_TOOLS or <build>/tools/s3proxy)");
        return -ENOENT;
    }
    int pfd[2];
    if (pipe(pfd)) return -errno;
    pid_t pid = fork();
    if (pid < 0) return -errno;
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        if (port) execl(path, "s3proxy", "--upstream", upstream, "--script", script ? script : "", "--port", portbuf,
                        (char *)NULL);
        else execl(path, "s3proxy", "--upstream", upstream, "--script", script ? script : "", (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    char line[64] = "";
    size_t got = 0;
    while (got < sizeof line - 1) {
        ssize_t r = read(pfd[0], line + got, 1);
        if (r <= 0 || line[got] == '\n') break;
        got++;
    }
    line[got] = '\0';
    close(pfd[0]);
    if (sscanf(line, "port %d", &p->port) != 1 || (port && p->port != port)) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        snprintf(why, why_cap, "s3proxy did not start (script '%s')", script ? script : "");
        return -EIO;
    }
    p->pid = pid;
    snprintf(p->url, sizeof p->url, "http://127.0.0.1:%d", p->port);
    return 0;
}

void t_s3_proxy_stop(t_s3_proxy *p)
{
    if (p->pid <= 0) return;
    kill(p->pid, SIGTERM);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
}

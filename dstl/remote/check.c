/*
 * dstl/remote/check.c — the open-time look at the bucket (remote.h, remote_check): one
 * ListObjectsV2 of at most one key under the prefix, on a client of its own, bounded in time.
 * It creates nothing (a storage opened only to read or sweep writes no object) and reads
 * only what the run will need anyway: the bucket, and that the server takes the credentials.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "dstl/clock.h"
#include "dstl/err.h"
#include "dstl/remote/remote.h"

typedef struct {
    int done;
    s3_result r;
} check_state;

static void on_list(void *ctx, const s3_result *r)
{
    check_state *st = ctx;
    st->r = *r;
    st->r.list = NULL;          /* the client's, valid during the callback only */
    st->done = 1;
}

/* Answers that settle it: the credentials or the bucket are wrong, and no retry or later
 * moment changes that. AccessDenied is not among them: a policy may deny listing and allow
 * what a writer needs (PUT, GET). */
static int definite(const s3_result *r)
{
    return (r->err == -EACCES && (!strcmp(r->s3_code, "SignatureDoesNotMatch") ||
                                  !strcmp(r->s3_code, "InvalidAccessKeyId"))) ||
           (r->err == -ENOENT && !strcmp(r->s3_code, "NoSuchBucket"));
}

int remote_check(const config_values *cv, const remote_loc *loc, uint64_t bound_ms, char *warn, size_t cap)
{
    if (cap) warn[0] = '\0';
    s3_client *cli = NULL;
    int rc = remote_client_new(cv, &cli);
    if (rc < 0) return rc;
    char prefix[600];
    remote_list_prefix(loc, prefix, sizeof prefix);
    check_state st = {0};
    s3_op *op = NULL;
    rc = s3_list_objects(cli, loc->bucket, prefix, NULL, NULL, 1, &op, on_list, &st);
    uint64_t deadline = now_ns() + bound_ms * 1000000ull;
    int cancelled = 0;
    while (rc == 0 && !st.done) {
        if (!cancelled && now_ns() >= deadline) {
            s3_op_cancel(op);   /* its callback runs on the next turn */
            cancelled = 1;
        }
        if (s3_client_run(cli, NULL, 0, 50) < 0 && !cancelled) {
            s3_op_cancel(op);
            cancelled = 1;
        }
    }
    s3_client_free(cli);
    if (rc < 0)
        return err_fail(rc, "dstl.remote.uri s3://%s/%s: the bucket check could not start: %s", loc->bucket,
                        loc->prefix, dstl_strerror(rc));
    if (st.r.err == 0) return 0;
    if (definite(&st.r))
        return err_fail(st.r.err, "dstl.remote.uri s3://%s/%s: %s: %s", loc->bucket, loc->prefix,
                        st.r.err == -ENOENT ? "the bucket does not exist (create it first)"
                                            : "the server refused the credentials (dstl.s3.access-key / secret-key, "
                                              "AWS_* or ~/.aws/credentials: dstl config shows which)",
                        st.r.error);
    snprintf(warn, cap, "warning: the remote s3://%.63s/%.300s did not answer at open (%s: %.400s): opened anyway "
                        "(local recovery works; remote persists and reads fail until it answers)",
             loc->bucket, loc->prefix, cancelled && st.r.err == -ECANCELED ? "no answer in time" : "failed",
             cancelled && st.r.err == -ECANCELED ? "cancelled at the open bound" : st.r.error);
    return 1;
}

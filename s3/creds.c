/*
 * s3/creds.c — where the S3 credentials come from: explicit values (the dstl.s3.* keys),
 * then AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, then the shared
 * credentials file (~/.aws/credentials, profile AWS_PROFILE or "default").
 *
 * Threads: reads the environment (getenv) and one file; call it where the environment is not
 * being changed. Invariant: no secret is ever copied into a message (why[] names places only).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3/s3_int.h"

static int copy_field(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap) return -EINVAL;
    memcpy(dst, src, n + 1);
    return 0;
}

static bool set(const char *s)
{
    return s && *s;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

/* Reads [profile] of an INI file: aws_access_key_id, aws_secret_access_key,
 * aws_session_token. Returns 0 when both keys were found, -ENOENT otherwise. */
static int read_file(const char *path, const char *profile, s3_credentials *out)
{
    FILE *f = fopen(path, "r");
    if (!f) return -ENOENT;
    char line[4608];
    bool in = false, have_ak = false, have_sk = false;
    int rc = 0;
    while (fgets(line, sizeof line, f) && rc == 0) {
        char *s = trim(line);
        if (*s == '#' || *s == ';' || *s == '\0') continue;
        if (*s == '[') {
            char *e = strchr(s, ']');
            if (!e) continue;
            *e = '\0';
            char *name = trim(s + 1);
            /* ~/.aws/config style "[profile x]" is accepted too */
            if (strncmp(name, "profile ", 8) == 0) name = trim(name + 8);
            in = strcmp(name, profile) == 0;
            continue;
        }
        if (!in) continue;
        char *eq = strchr(s, '=');
        if (!eq) continue;
        *eq = '\0';
        char *k = trim(s), *v = trim(eq + 1);
        if (strcmp(k, "aws_access_key_id") == 0) {
            rc = copy_field(out->access_key, sizeof out->access_key, v);
            have_ak = true;
        } else if (strcmp(k, "aws_secret_access_key") == 0) {
            rc = copy_field(out->secret_key, sizeof out->secret_key, v);
            have_sk = true;
        } else if (strcmp(k, "aws_session_token") == 0) {
            rc = copy_field(out->session_token, sizeof out->session_token, v);
        }
    }
    fclose(f);
    if (rc) return rc;
    return have_ak && have_sk ? 0 : -ENOENT;
}

/* The credentials file: path, else AWS_SHARED_CREDENTIALS_FILE, else $HOME/.aws/credentials. */
static const char *file_path(const char *path, char *buf, size_t cap)
{
    if (!set(path)) path = getenv("AWS_SHARED_CREDENTIALS_FILE");
    if (set(path)) return path;
    const char *home = getenv("HOME");
    snprintf(buf, cap, "%s/.aws/credentials", set(home) ? home : ".");
    return buf;
}

/* The profile: profile, else AWS_PROFILE, else "default". */
static const char *profile_name(const char *profile)
{
    if (!set(profile)) profile = getenv("AWS_PROFILE");
    return set(profile) ? profile : "default";
}

int s3_credentials_resolve(const char *access_key, const char *secret_key,
                           const char *session_token, const char *path, const char *profile,
                           s3_credentials *out, char *why, size_t why_cap)
{
    memset(out, 0, sizeof *out);
    if (why && why_cap) why[0] = '\0';
    if (set(access_key) && set(secret_key)) {
        if (copy_field(out->access_key, sizeof out->access_key, access_key) ||
            copy_field(out->secret_key, sizeof out->secret_key, secret_key) ||
            copy_field(out->session_token, sizeof out->session_token,
                       session_token ? session_token : ""))
            return -EINVAL;
        snprintf(out->source, sizeof out->source, "options");
        return 0;
    }
    const char *eak = getenv("AWS_ACCESS_KEY_ID"), *esk = getenv("AWS_SECRET_ACCESS_KEY");
    if (set(eak) && set(esk)) {
        const char *tok = getenv("AWS_SESSION_TOKEN");
        if (copy_field(out->access_key, sizeof out->access_key, eak) ||
            copy_field(out->secret_key, sizeof out->secret_key, esk) ||
            copy_field(out->session_token, sizeof out->session_token, tok ? tok : ""))
            return -EINVAL;
        snprintf(out->source, sizeof out->source, "environment");
        return 0;
    }
    char fpath[1024];
    path = file_path(path, fpath, sizeof fpath);
    profile = profile_name(profile);
    int rc = read_file(path, profile, out);
    if (rc == 0) {
        snprintf(out->source, sizeof out->source, "file [%.40s]", profile);
        return 0;
    }
    memset(out, 0, sizeof *out);
    if (why && why_cap)
        snprintf(why, why_cap,
                 "no S3 credentials: not in the options, not in AWS_ACCESS_KEY_ID/"
                 "AWS_SECRET_ACCESS_KEY, not in profile [%s] of %s",
                 profile, path);
    return rc == -EINVAL ? -EINVAL : -ENOENT;
}

int s3_credentials_source(const s3_opts *o, char *buf, size_t cap)
{
    s3_credentials cr;
    char why[512];
    int rc = s3_credentials_resolve(o->access_key, o->secret_key, o->session_token, o->credentials_file, o->profile,
                                    &cr, why, sizeof why);
    bool token = cr.session_token[0] != '\0';
    /* Only the source leaves this function: the values are wiped here. */
    memset(&cr, 0, sizeof cr);
    if (rc < 0) {
        snprintf(buf, cap, "%s", rc == -EINVAL ? "a credential value is too long" : why);
        return rc;
    }
    char fpath[1024];
    if (set(o->access_key) && set(o->secret_key))
        snprintf(buf, cap, "options%s", token ? " (with a session token)" : "");
    else if (set(getenv("AWS_ACCESS_KEY_ID")) && set(getenv("AWS_SECRET_ACCESS_KEY")))
        snprintf(buf, cap, "environment AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY%s",
                 token ? ", AWS_SESSION_TOKEN" : "");
    else
        snprintf(buf, cap, "profile [%s] of %s%s", profile_name(o->profile),
                 file_path(o->credentials_file, fpath, sizeof fpath), token ? " (with a session token)" : "");
    return 0;
}

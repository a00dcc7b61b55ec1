/*
 * dstl/cmd/cmd_config.c — `dstl config`: every key with its value and where the value came
 * from (comment lines after the keys: the output still loads as a config file), and where
 * the S3 credentials come from (never a value: secrets are "<set, hidden>"). DSTL_*
 * variables that look like a key's but are none are reported by cmd_config (common.c), for
 * every command.
 */
#include <stdio.h>
#include <string.h>

#include "dstl/cmd/cmd.h"
#include "dstl/tools.h"

static void source_text(const cmd_globals *g, const dstl_config *c, const char *key, char *buf, size_t cap)
{
    const char *src = config_source_of(c, key);
    char env[128];
    config_env_name(key, env, sizeof env);
    if (!strcmp(src, "file")) snprintf(buf, cap, "file %s", g->config_file ? g->config_file : "?");
    else if (!strcmp(src, "environment")) snprintf(buf, cap, "environment %s", env);
    else if (!strcmp(src, "set")) snprintf(buf, cap, "--set");
    else snprintf(buf, cap, "default");
}

/* The keys that are not at their default, by where their value came from (comment lines:
 * the output still loads as a config file). */
static void print_sources(const cmd_globals *g, const dstl_config *c)
{
    static const char *const kinds[] = {"file", "environment", "set"};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int n = 0;
        for (size_t i = 0; i < config_nkeys(); i++) {
            const char *key = config_key(i)->key;
            if (strcmp(config_source_of(c, key), kinds[k]) != 0) continue;
            char src[4200];
            source_text(g, c, key, src, sizeof src);
            if (!n++) printf("# from %s:", k == 1 ? "the environment" : k == 0 ? src : "--set");
            if (k == 1) printf(" %s (%s)", key, src + strlen("environment "));
            else printf(" %s", key);
        }
        if (n) putchar('\n');
    }
}

/* Where a client of this config takes its S3 credentials from (remote or not: ls/verify/cat
 * of an s3:// location use them too). */
static void print_credentials(const cmd_globals *g, const dstl_config *c)
{
    config_values cv;
    char where[1200], ak[300], sk[300];
    if (config_resolve(c, &cv) < 0) return;
    int rc = remote_credentials_source(&cv, where, sizeof where);
    if (rc < 0) {
        printf("# S3 credentials: none found: %s\n", where);
        return;
    }
    if (!strcmp(where, "options") || !strncmp(where, "options ", 8)) {
        source_text(g, c, "dstl.s3.access-key", ak, sizeof ak);
        source_text(g, c, "dstl.s3.secret-key", sk, sizeof sk);
        printf("# S3 credentials: config keys dstl.s3.access-key (%s) and dstl.s3.secret-key (%s)%s; values hidden\n",
               ak, sk, where + strlen("options"));
    } else {
        printf("# S3 credentials: %s; values hidden\n", where);
    }
}

int cmd_show_config(const cmd_globals *g, int argc, char **argv)
{
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "usage: dstl config   (dstl config --help)\n");
        return 2;
    }
    dstl_config *c = cmd_config(g, NULL);
    if (!c) return 1;
    for (size_t i = 0; i < config_nkeys(); i++) {
        const config_key_info *k = config_key(i);
        const char *v = dstl_config_get(c, k->key);
        printf("%s: %s\n", k->key, k->secret && v && *v ? "<set, hidden>" : v);
    }
    print_sources(g, c);
    print_credentials(g, c);
    dstl_config_free(c);
    return 0;
}

/*
 * dstl/config_env.c — the DSTL_* environment seen from the key table (config.c): the
 * variables that look like a key's but are none (config.h). A misspelt variable is
 * otherwise silent: dstl_config_new reads only the variables of real keys.
 */
#include <stdlib.h>
#include <string.h>

#include "dstl/config.h"

extern char **environ;

/* Levenshtein distance of a and b (both short: variable names), capped at 99. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 98 || lb > 98) return 99;
    size_t row[100];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

/* Whether var ("DSTL_X_...") starts with the first word of some key's variable. */
static int looks_like_key(const char *var)
{
    for (size_t i = 0; i < config_nkeys(); i++) {
        char name[128];
        config_env_name(config_key(i)->key, name, sizeof name);
        if (!strcmp(name, var)) return 0;                   /* a real key's */
    }
    for (size_t i = 0; i < config_nkeys(); i++) {
        char name[128];
        config_env_name(config_key(i)->key, name, sizeof name);
        const char *word_end = strchr(name + 5, '_');       /* after "DSTL_" */
        size_t wl = word_end ? (size_t)(word_end - name) : strlen(name);
        if (!strncmp(var, name, wl) && (var[wl] == '_' || var[wl] == '\0')) return 1;
    }
    return 0;
}

size_t config_unknown_env(config_env_fn cb, void *ctx)
{
    size_t found = 0;
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (strncmp(*e, "DSTL_", 5) != 0 || !eq || (size_t)(eq - *e) >= 128) continue;
        char var[128];
        memcpy(var, *e, (size_t)(eq - *e));
        var[eq - *e] = '\0';
        if (!looks_like_key(var)) continue;
        size_t best = (size_t)-1;
        const char *nearest = NULL;
        for (size_t i = 0; i < config_nkeys(); i++) {
            char name[128];
            config_env_name(config_key(i)->key, name, sizeof name);
            size_t d = distance(var, name);
            if (d < best) {
                best = d;
                nearest = config_key(i)->key;
            }
        }
        found++;
        if (cb) cb(ctx, var, nearest);
    }
    return found;
}

/* Node list expansion with libslurm's hostlist API (see ctl.h). */
#include "config.h"
#include "ctl.h"
#include "stagehand/log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/slurm.h>
#include <slurm/slurm_version.h>

/* A hostlist handle: slurm.h made hostlist_t the struct itself in 23.11
 * (before: a pointer typedef), so the handle is hostlist_t * from then on. */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 11, 0)
typedef hostlist_t *sh_hostlist;
#else
typedef hostlist_t sh_hostlist;
#endif

void sh_nodelist_free(char **names, uint32_t count)
{
    if (names == NULL)
        return;
    for (uint32_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

int sh_nodelist_expand(const char *expr, uint32_t max, char ***names, uint32_t *count)
{
    sh_hostlist hl;
    char **out = NULL;
    char *host;
    int n;
    uint32_t got = 0;

    *names = NULL;
    *count = 0;
    if (expr == NULL || expr[0] == '\0') {
        sh_error("nodelist", "empty node list");
        errno = EINVAL;
        return -1;
    }
    hl = slurm_hostlist_create(expr);
    if (hl == NULL) {
        sh_error("nodelist", "cannot parse node list '%.512s'", expr);
        errno = EINVAL;
        return -1;
    }
    n = slurm_hostlist_count(hl); /* counts the ranges: nothing expanded yet */
    if (n <= 0) {
        slurm_hostlist_destroy(hl);
        sh_error("nodelist", "node list '%.512s' names no node", expr);
        errno = EINVAL;
        return -1;
    }
    if ((uint32_t)n > max) {
        slurm_hostlist_destroy(hl);
        sh_error("nodelist", "node list '%.512s' names %d nodes, more than %u", expr, n,
                 max);
        errno = E2BIG;
        return -1;
    }
    out = calloc((size_t)n, sizeof(*out));
    if (out == NULL)
        goto nomem;
    while (got < (uint32_t)n && (host = slurm_hostlist_shift(hl)) != NULL) {
        /* slurm.h: the caller frees the shifted name with free(). */
        out[got] = strdup(host);
        free(host);
        if (out[got] == NULL)
            goto nomem;
        got++;
    }
    slurm_hostlist_destroy(hl);
    if (got != (uint32_t)n) {
        sh_nodelist_free(out, got);
        sh_error("nodelist", "node list '%.512s': expanded %u of %d names", expr, got, n);
        errno = EINVAL;
        return -1;
    }
    *names = out;
    *count = got;
    return 0;
nomem:
    slurm_hostlist_destroy(hl);
    sh_nodelist_free(out, got);
    errno = ENOMEM;
    return -1;
}

int sh_nodelist_index(char *const *names, uint32_t count, const char *name,
                      uint32_t *index)
{
    for (uint32_t i = 0; i < count; i++) {
        if (strcmp(names[i], name) == 0) {
            *index = i;
            return 0;
        }
    }
    errno = ENOENT;
    return -1;
}

/* stagehand-agent --prolog: the leader's part of a registry image
 * (docker://) in the per-image protocol (protocol.c): its pinned identity
 * from the source record, the one import (import.c), and whether the
 * imported image fits every node that needs it (their votes' free bytes).
 * See image_run.h. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "image_run.h"
#include "import.h"
#include "stagehand/local.h"
#include "stagehand/log.h"
#include "stagehand/size.h"

/* A registry image's identity from the leader's source record @e: the
 * pinned reference after its newline, into @r->id.path and @r->ref. */
int image_pinned_from(const struct sh_ctl_entry *e, struct image_run *r, char *err,
                      size_t errlen)
{
    const unsigned char *nl = memchr(e->data, '\n', e->len);
    size_t n = nl != NULL ? e->len - (size_t)(nl + 1 - e->data) : 0;

    if (nl == NULL || n == 0 || n >= sizeof(r->id.path)) {
        snprintf(err, errlen, "malformed source record from the leader");
        return -1;
    }
    memcpy(r->id.path, nl + 1, n);
    r->id.path[n] = '\0';
    return sh_ref_parse_canonical(r->id.path, &r->ref, err, errlen);
}

/* Free bytes for an unprivileged user in the filesystem of @dir; 0 when
 * statvfs(2) fails. */
uint64_t image_dir_free_bytes(const char *dir)
{
    struct statvfs vfs;

    if (statvfs(dir, &vfs) != 0)
        return 0;
    return (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
}

/* A registry image's NEED vote ends "\n<free bytes>" (step_vote_plan): the
 * free space of that node's DST filesystem, which the leader holds the
 * imported image's size against. Returns whether @e carries one. */
static bool vote_free(const struct sh_ctl_entry *e, uint64_t *free_bytes)
{
    char num[24];
    const unsigned char *nl;
    size_t n;

    if (e->state != SH_CTL_OK || e->len < 3 || e->data[0] - '0' != SH_VOTE_NEED)
        return false;
    nl = memrchr(e->data, '\n', e->len);
    if (nl == NULL)
        return false;
    n = e->len - (size_t)(nl + 1 - e->data);
    if (n == 0 || n >= sizeof(num))
        return false;
    memcpy(num, nl + 1, n);
    num[n] = '\0';
    return sh_parse_u64(num, free_bytes) == 0;
}

/* Leader, after a successful import: does the Squashfs file fit every node
 * that needs a copy? Node 0's DST filesystem as it is now (the import holds
 * its share already; the engine writes DST's temp file beside it), the
 * others' as they voted. Else a message naming the reference, the image's
 * size and each such node's free space into @err; returns 0 or -1. */
static int import_fits(const struct agent *a, const struct image_run *r,
                       const struct sh_ctl_result *votes, char *err, size_t errlen)
{
    char ref[SH_REF_TEXT_MAX], want[32], have[32];
    struct stat st;
    uint64_t size, free_bytes;
    size_t o = 0;
    int short_nodes = 0;

    if (stat(r->imgfile, &st) != 0)
        return 0; /* the engine reports it */
    size = (uint64_t)st.st_size;
    sh_ref_format(&r->ref, ref, sizeof(ref));
    for (uint32_t i = 0; i < votes->nnodes && o < errlen; i++) {
        if (!vote_free(&votes->entry[i], &free_bytes))
            continue;
        if (i == 0)
            free_bytes = image_dir_free_bytes(r->mdir);
        if (free_bytes >= size)
            continue;
        if (short_nodes++ == 0)
            o += (size_t)snprintf(err + o, errlen - o, "%.600s: the image's Squashfs file is "
                                  "%s (%llu bytes), more than the free space of %.300s's "
                                  "filesystem on ", ref,
                                  sh_format_size(size, want, sizeof(want)),
                                  (unsigned long long)size, r->dst);
        else if (short_nodes <= 8)
            o += (size_t)snprintf(err + o, errlen - o, ", ");
        if (short_nodes <= 8 && o < errlen)
            o += (size_t)snprintf(err + o, errlen - o, "%s (%s, %llu bytes)",
                                  sh_ctl_name(a->ctl, i),
                                  sh_format_size(free_bytes, have, sizeof(have)),
                                  (unsigned long long)free_bytes);
    }
    if (short_nodes > 8 && o < errlen)
        snprintf(err + o, errlen - o, " and %d other nodes", short_nodes - 8);
    return short_nodes > 0 ? -1 : 0;
}

/* Leader, a registry image that some node needs (their votes @votes):
 * import it once, into the private directory beside its own DST
 * (import.c), and check that it fits every node that needs it. On failure
 * the plan becomes "fail <reference>: <reason>" in @r->buf, and nothing of
 * the import is left. Returns 0 or -1. */
int image_plan_import(struct agent *a, struct image_run *r, const struct sh_ctl_result *votes)
{
    char err[SH_IMPORT_ERR_MAX];
    bool ok;

    if (sh_import_paths(r->mdir, sh_image_home(&r->ref, r->dst), a->in.jobid, a->in.stepid,
                        r->workdir, sizeof(r->workdir), r->imgfile, sizeof(r->imgfile)) != 0) {
        char ref[SH_REF_TEXT_MAX];

        sh_ref_format(&r->ref, ref, sizeof(ref));
        snprintf(err, sizeof(err), "%.600s: the import directory's name in %.300s is too long", ref,
                 r->mdir);
        ok = false;
    } else {
        ok = sh_import_run(&a->cfg, a->in.user, &r->ref, r->workdir, r->imgfile, a->deadline,
                           err, sizeof(err)) == 0;
        if (ok && import_fits(a, r, votes, err, sizeof(err)) != 0) {
            ok = false;
            if (sh_import_release(r->workdir) != 0)
                sh_warn("import", "cannot remove %s: %s", r->workdir, strerror(errno));
        }
    }
    if (!ok) {
        r->len = snprintf(r->buf, sizeof(r->buf), "fail %s", err);
        if (r->len >= (int)sizeof(r->buf))
            r->len = (int)sizeof(r->buf) - 1;
        return -1;
    }
    r->imported = true;
    return 0;
}

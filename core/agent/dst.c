/* stagehand-agent --prolog: node-local DST housekeeping, as the job user.
 * The markers that show a destination directory shared between nodes (F02),
 * the job's claim on DST (other jobs of the user must not replace what it
 * runs on), the temp files a killed engine of this node left (through
 * publish.c, which owns their names), and the digest check of a new copy
 * over the authenticated control plane. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "staging.h"
#include "stagehand/hash.h"
#include "stagehand/local.h"
#include "stagehand/log.h"
#include "stagehand/meta.h"
#include "stagehand/publish.h"
#include "stagehand/status.h"

/* Open DST's directory; its last component into @name. Returns the fd or -1. */
static int open_dst_dir(const char *dst, char *name, size_t namelen)
{
    char dir[PATH_MAX];
    char *slash;

    snprintf(dir, sizeof(dir), "%s", dst);
    slash = strrchr(dir, '/');
    if (slash == NULL || strlen(slash + 1) >= namelen)
        return -1;
    snprintf(name, namelen, "%s", slash + 1);
    *slash = '\0';
    return open(dir[0] != '\0' ? dir : "/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}


/* F02: a marker file per node in DST's directory, created before a barrier
 * and looked for after it. statfs alone cannot tell that a bind-mounted
 * local filesystem is shared; seeing another node's marker can. */
static void marker_name(const struct agent *a, size_t img, const char *node,
                        char *out, size_t len)
{
    snprintf(out, len, ".stagehand-marker.%" PRIu64 ".%" PRIu64 ".%zu.%.64s",
             a->in.jobid, a->in.stepid, img, node);
}

/* Remove this node's markers in directory @dfd that jobs no longer on this
 * node left: an agent stopped while its marker stood (scancel during a
 * registry import: every node waits for the plan then) or killed. Only
 * this node's names (another node's may be a live job's on a shared
 * directory), only what the user may remove. */
static void marker_sweep(const struct agent *a, int dfd)
{
    static const char prefix[] = ".stagehand-marker.";
    struct dirent *de;
    DIR *d;
    int fd = dup(dfd);

    if (fd < 0 || (d = fdopendir(fd)) == NULL) {
        if (fd >= 0)
            close(fd);
        return;
    }
    while ((de = readdir(d)) != NULL) {
        uint64_t jobid, stepid;
        size_t img;
        int end = 0;

        if (strncmp(de->d_name, prefix, sizeof(prefix) - 1) != 0 ||
            sscanf(de->d_name + sizeof(prefix) - 1, "%" SCNu64 ".%" SCNu64 ".%zu.%n", &jobid,
                   &stepid, &img, &end) != 3 ||
            end == 0 || strcmp(de->d_name + sizeof(prefix) - 1 + end, a->in.nodename) != 0 ||
            (jobid == a->in.jobid && stepid == a->in.stepid) ||
            sh_job_on_node(SH_RUNTIME_DIR, jobid,
                           stepid == STEP_JOB || stepid > LONG_MAX ? -1 : (long)stepid))
            continue;
        if (unlinkat(dirfd(d), de->d_name, 0) == 0)
            sh_debug("stage", "removed %s, left by job %" PRIu64 " (no longer on this node)",
                     de->d_name, jobid);
    }
    closedir(d);
}

int marker_create(const struct agent *a, size_t img, const char *dir)
{
    char name[NAME_MAX + 1];
    int dfd, fd;

    marker_name(a, img, a->in.nodename, name, sizeof(name));
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -1;
    marker_sweep(a, dfd);
    fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    close(dfd);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

void marker_remove(const struct agent *a, size_t img, const char *dir)
{
    char path[PATH_MAX], name[NAME_MAX + 1];

    marker_name(a, img, a->in.nodename, name, sizeof(name));
    if (snprintf(path, sizeof(path), "%s/%s", dir, name) < (int)sizeof(path))
        unlink(path);
}

/* Another node's marker for this image in @dir: its node name into @who. */
bool marker_foreign(const struct agent *a, size_t img, const char *dir,
                           char *who, size_t wholen)
{
    char prefix[128], mine[NAME_MAX + 1];
    struct dirent *de;
    bool found = false;
    DIR *d;

    marker_name(a, img, "", prefix, sizeof(prefix));
    marker_name(a, img, a->in.nodename, mine, sizeof(mine));
    d = opendir(dir);
    if (d == NULL)
        return false;
    while (!found && (de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0 &&
            strcmp(de->d_name, mine) != 0) {
            snprintf(who, wholen, "%s", de->d_name + strlen(prefix));
            found = true;
        }
    }
    closedir(d);
    return found;
}

/* ------------------------------------------------ destinations in use -- */

/* Record this job's claim (sh_claim_text's @text, @n bytes; n < 0: none) on
 * image @img, whose DST is @dst. A claim that cannot be written only loses
 * the protection: warned, not fatal. */
void claim_write(const struct agent *a, size_t img, const char *dst,
                        const char *text, int n)
{
    if (sh_claim_write(a->rundir, img, text, n) != 0)
        sh_warn("stage", "cannot record the use of %s in %s: %s (other jobs of this "
                "user are not kept from replacing it)", dst, a->rundir, strerror(errno));
}

/* Remove what this node's engine of this job left next to @dst when it was
 * killed (SIGKILL leaves it no chance): its temp files, named by
 * core/common/publish.c (sh_publish_sweep_run), and DST's lock file when
 * there is no DST. Runs as the job user. */
void sweep_own_temps(const struct agent *a, const char *dst)
{
    char name[NAME_MAX + 1], jobid[32];
    unsigned removed = 0;
    int dirfd = open_dst_dir(dst, name, sizeof(name)), lockfd = -1;
    struct stat st;

    if (dirfd < 0)
        return;
    snprintf(jobid, sizeof(jobid), "%" PRIu64, a->in.jobid);
    if (sh_publish_sweep_run(NULL, dirfd, name, jobid, a->in.nodename, &removed) == 0 &&
        removed > 0)
        sh_info("stage", "removed %u temp file%s of %s left by this node's engine", removed,
                removed == 1 ? "" : "s", dst);
    /* ... and its lock file, when it leaves no DST (stagehand(8)): taken
     * without waiting, so one that another run holds now stays. */
    if (sh_publish_lock(dirfd, name, 0, &lockfd) == 0) {
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT)
            sh_publish_unlock_remove(dirfd, name, lockfd);
        else
            sh_publish_unlock(lockfd);
    }
    close(dirfd);
}

/* The digest recorded with this node's DST (hex, with the configured hash)
 * when DST was published at or after @since (realtime seconds: written by
 * this run), or "" (no usable record, or an older copy the engine kept). */
static void dst_digest(const struct agent *a, const char *dst, int64_t since, char *hex)
{
    char name[NAME_MAX + 1];
    struct sh_meta rec;
    int dirfd, fd;

    hex[0] = '\0';
    dirfd = open_dst_dir(dst, name, sizeof(name));
    if (dirfd < 0)
        return;
    fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0 && sh_meta_load(dirfd, name, fd, &rec, NULL) == 0 && rec.algo == a->cfg.hash &&
        rec.dst_mtime.sec >= since)
        sh_hash_hex(rec.digest, sh_hash_len(rec.algo), hex);
    if (fd >= 0)
        close(fd);
    close(dirfd);
}

/* doc/design.md §2 step 4: MPI traffic is not authenticated, so the reader's
 * digest also travels over the authenticated control plane. After an engine
 * phase every node takes part: the leader (the reader) sends the digest it
 * computed while reading; a node whose new copy records another digest
 * removes that copy and reports it in @buf ("fail ..."). @copied: this node
 * ran the engine and it succeeded; @reader_digest: the leader's engine
 * report's (NULL elsewhere, or without one). Returns 0, or -1 after
 * set_failure(). */
int verify_copy_digest(struct agent *a, const char *dst, const char *reader_digest,
                       bool copied, int64_t since, char *buf, size_t buflen, int *len,
                       char *ref_out)
{
    char ref[SH_HASH_HEX_LEN], mine[SH_HASH_HEX_LEN];
    unsigned char *got = NULL;
    uint32_t glen = 0;

    ref[0] = mine[0] = '\0';
    if (copied)
        dst_digest(a, dst, since, mine);
    if (a->index == 0 && copied) {
        snprintf(ref, sizeof(ref), "%s", reader_digest != NULL ? reader_digest : "");
        if (ref[0] == '\0')
            snprintf(ref, sizeof(ref), "%s", mine);
    }
    if (sh_ctl_bcast(a->ctl, ref, a->index == 0 ? (uint32_t)strlen(ref) : 0, &got, &glen,
                     a->deadline) != 0) {
        set_failure(a, false, "lost the control plane (reference digest): %s", strerror(errno));
        return -1;
    }
    if (glen > 0 && glen < sizeof(ref)) {
        memcpy(ref, got, glen);
        ref[glen] = '\0';
    } else {
        ref[0] = '\0';
    }
    free(got);
    snprintf(ref_out, SH_HASH_HEX_LEN, "%s", ref);
    if (!copied || ref[0] == '\0' || mine[0] == '\0' || strcmp(ref, mine) == 0)
        return 0;
    {
        char name[NAME_MAX + 1];
        int dirfd = open_dst_dir(dst, name, sizeof(name));

        if (dirfd >= 0) {
            unlinkat(dirfd, name, 0);
            sh_meta_remove_sidecar(dirfd, name);
            close(dirfd);
        }
    }
    sh_error("stage", "%s: the copy's digest %s differs from the reader's %s: copy removed",
             dst, mine, ref);
    *len = snprintf(buf, buflen, "fail %s: the copy's digest differs from the reader's "
                    "(compared over the authenticated control plane; the data was altered "
                    "in transit): copy removed", a->in.nodename);
    return 0;
}

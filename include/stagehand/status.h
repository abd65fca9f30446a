/* The per-node staging outcome of one job (or job step), written by the
 * plugin's prolog side (root) and read at step start by slurmstepd.
 *
 * File: <runtime>/<jobid>.status (job) or <runtime>/<jobid>.<stepid>.status
 * (step staging), owned by root, mode 0644, replaced atomically. Text, one
 * "key=value" per line, values on one line (control bytes are written as
 * "\xHH"):
 *   version=1
 *   result=ok|fail
 *   node=<this node>
 *   message=<why it failed, or the summary>
 *   image=<DST>             (repeated, in spec order)
 *   summary=<one line>      (repeated, one per image)
 */
#ifndef STAGEHAND_STATUS_H
#define STAGEHAND_STATUS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#define SH_STATUS_VERSION 1
/* Every image a spec may hold (SH_SPEC_MAX_IMAGES), every path a spec may
 * hold (PATH_MAX), and room for a message or summary that names one. */
#define SH_STATUS_MAX_IMAGES 64
#define SH_STATUS_LINE_MAX (PATH_MAX + 1024)
#define SH_RUNTIME_DIR "/run/stagehand"

struct sh_status {
    bool ok;
    char node[256];
    char message[SH_STATUS_LINE_MAX];
    size_t n_images;
    char image[SH_STATUS_MAX_IMAGES][PATH_MAX];
    size_t n_summaries;
    char summary[SH_STATUS_MAX_IMAGES][SH_STATUS_LINE_MAX];
};

/* Make @st an empty status (not ok, no node, message, images or summaries)
 * by resetting its scalar fields and the first byte of each string only: the
 * line arrays (about 0.6 MiB) are never read past n_images/n_summaries, and
 * zeroing them would fault in every page of the struct, which lives in the
 * BSS of a fresh slurmstepd at every prolog and step start (2.5 ms on the
 * test VM). Never fails. */
void sh_status_clear(struct sh_status *st);

/* Path of the status file for @jobid and @stepid (stepid < 0: the job's,
 * written by the prolog) under @runtime_dir. Returns 0, or -1 with
 * errno = ENAMETOOLONG. */
int sh_status_path(const char *runtime_dir, unsigned long jobid, long stepid,
                   char *out, size_t outlen);

/* Write @st to @path atomically: a temp file in the same directory created
 * O_EXCL|O_NOFOLLOW mode 0600 (it names the job's images and nodes; its
 * readers, the task's privileged SPANK hook and the admin, are root), fsync,
 * rename(2). Returns 0, or -1 with errno from open/write/fsync/rename. */
int sh_status_write(const char *path, const struct sh_status *st);

/* Read @path into @st. Opens with O_NOFOLLOW and requires a regular file
 * owned by root (the reader runs as root in slurmstepd: a file planted by
 * anyone else is refused). Returns 0, or -1 with errno = ENOENT (no status:
 * the prolog did not run), EPERM (wrong owner or type), EPROTO (malformed or
 * other version) or an open/read error. */
int sh_status_read(const char *path, struct sh_status *st);

/* Append a line to @st->summary / @st->image (truncated to fit; ignored past
 * SH_STATUS_MAX_IMAGES). */
void sh_status_add_image(struct sh_status *st, const char *dst);
void sh_status_add_summary(struct sh_status *st, const char *line);

#endif

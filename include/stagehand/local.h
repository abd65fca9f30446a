/* This node's part of a staging decision (doc/design.md §2 steps 3-4, §6): the
 * source's identity as the job user sees it, the checks of DST's place, the
 * node's vote (current / needs a copy / cannot take it / shared), and the
 * claims running jobs hold on their destinations.
 *
 * Used by the agent, where the votes of all nodes make the plan, and by the
 * plugin's local check, where a node whose copy is current ends its prolog
 * without waiting for the others. libc only: the plugin links it into
 * slurmstepd. Functions that look at SRC or DST must run as the job user. */
#ifndef STAGEHAND_LOCAL_H
#define STAGEHAND_LOCAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stagehand/config.h"
#include "stagehand/meta.h"

/* A node's vote for one image. SH_VOTE_SHARED: DST's directory is on a
 * filesystem other nodes see too (F01/F02); with allow_shared_dst=yes node
 * 0's copy serves them. */
enum sh_vote { SH_VOTE_CURRENT = 0, SH_VOTE_NEED = 1, SH_VOTE_ERROR = 2, SH_VOTE_SHARED = 3 };

/* Fill @id with the source @src as the caller sees it now (stat(2), then
 * access(2) R_OK with the caller's real ids: the caller must be able to read
 * it). Returns 0, or -1 with the user's error naming @src in @err (ENOENT,
 * EACCES, not a regular file). */
int sh_src_probe(const char *src, struct sh_src_id *id, char *err, size_t errlen);

/* Encode the leader's answer about the source into @buf (@len bytes): "ok
 * <size> <mtime s> <ns> <ctime s> <ns> <mode, octal> <gid>" when @ok, else
 * "err <@err>". Returns the length written (truncated to @len - 1). */
int sh_src_encode(char *buf, size_t len, int ok, const struct sh_src_id *id, const char *err);

/* Decode sh_src_encode's @len bytes at @data for source path @src into @id.
 * A record without mode and gid (an older leader) gives mode 0600, gid
 * unknown. Returns 0, or -1 with the leader's error (or "malformed") in
 * @err. */
int sh_src_decode(const unsigned char *data, uint32_t len, const char *src,
                  struct sh_src_id *id, char *err, size_t errlen);

/* Check @dst's place on this node as the job user @uid, before any data
 * moves (cases F17b, F31): below @cfg's allowed root every existing directory
 * must be a real directory of @uid or root, not writable by others unless
 * sticky; DST itself must not be a directory, nor anyone else's file or link
 * (root's included) in a sticky directory that is not @uid's (rename(2):
 * EPERM). Missing directories are left to the engine. Returns 0, or -1 with
 * the user's error in @why. */
int sh_dest_check_path(const struct sh_config *cfg, uid_t uid, const char *dst, char *why,
                       size_t whylen);

/* The name of a network or cluster filesystem type (statfs(2) f_type), or
 * NULL for a local one. A DST there is the same file on every node (F01). */
const char *sh_shared_fs_name(long type);

/* The deepest existing directory on the way to @dst (its parent, or an
 * ancestor the engine will create the rest under), into @out (@len bytes). */
void sh_nearest_dir(const char *dst, char *out, size_t len);

/* This node's vote for @dst of job user @uid given the source @id, by @cfg's
 * check mode: sh_dest_check_path, then DST's recorded metadata (stagehand/
 * meta.h; content checks are the engine's). A current DST whose mode allows
 * more than a new copy's (sh_copy_mode of @id's mode, the job's umask
 * @umask_bits) is chmod'ed to the stricter bits, or needs a copy when that
 * fails. @why gets "current", "needs a copy" or the reason. Never
 * SH_VOTE_SHARED (the caller's F01/F02 check). */
enum sh_vote sh_dest_vote(const struct sh_config *cfg, uid_t uid, const char *dst,
                          const struct sh_src_id *id, mode_t umask_bits, char *why,
                          size_t whylen);

/* Name of a staging's runtime directory under SH_RUNTIME_DIR: "<jobid>" for
 * the job prolog's (@stepid < 0), "<jobid>.<stepid>" for a job step's.
 * Returns 0, or -1 with errno = ENAMETOOLONG. */
int sh_rundir_name(uint64_t jobid, long stepid, char *out, size_t len);

/* Is job @jobid (its step @stepid; < 0: the job alone) still on this node?
 * Its staging lock, status file or runtime directory under @runtime_dir
 * (SH_RUNTIME_DIR, a per-boot tmpfs, 0755) says so until its epilog (a
 * step's until the step ends); after a reboot or that epilog none is left.
 * lstat(2) only: any user may ask. */
bool sh_job_on_node(const char *runtime_dir, uint64_t jobid, long stepid);

/* Create (if missing) and verify a staging's runtime directory under
 * @runtime_dir (SH_RUNTIME_DIR; its name from sh_rundir_name): the job
 * user's @uid:@gid, mode 0700, never a symlink (sh_make_owned_dir). Run as
 * root; the plugin's local check and the agent both call it. Its path goes
 * to @path (@len bytes) first, also on failure, for the caller's message.
 * Returns 0, or -1 with errno (ENOENT: no @runtime_dir; EPERM: the name
 * exists with another owner or type; ENAMETOOLONG). */
int sh_rundir_make(const char *runtime_dir, uint64_t jobid, long stepid, uid_t uid, gid_t gid,
                   char *path, size_t len);

/* The size of the file system a staging's runtime directory gets
 * (sh_rundir_limit): the PMIx server's and Open MPI's files take well under
 * a megabyte per image. */
#define SH_RUNDIR_TMPFS_OPTS "size=64m,nr_inodes=16384"

/* Give the runtime directory @path (made by sh_rundir_make) a small file
 * system of its own, a tmpfs of SH_RUNDIR_TMPFS_OPTS mounted nosuid, nodev,
 * noexec, owned by @uid:@gid, mode 0700 (mount(2)), unless it is one
 * already: the job user can fill that, not the node's /run, whose other
 * users are root's services. Run as root. Returns 0, or -1 with errno from
 * mount(2) or stat(2) (EPERM without CAP_SYS_ADMIN). */
int sh_rundir_limit(const char *path, uid_t uid, gid_t gid);

/* Undo sh_rundir_limit on @name under the directory @dirfd (the epilog,
 * before it removes the directory): a lazy unmount (umount2(2)
 * MNT_DETACH), never following a symbolic link. Returns 0, also when
 * @name is no mount point, or -1 with errno. */
int sh_rundir_unlimit(int dirfd, const char *name);

/* What stands where root needs a directory of its own (sh_root_dirs_make). */
struct sh_root_dir_problem {
    char path[PATH_MAX];    /* the component's absolute path */
    uid_t uid;              /* its owner */
    const char *what;       /* e.g. "a directory not owned by root" (static) */
};

/* Make, as root, the directories of the normalised absolute @path below the
 * allowed root @root (which must exist: the site's filesystem), each one
 * root-owned with @mode when missing; never follows a symlink and never
 * changes or removes an existing one, which must be a root-owned directory
 * not writable by group or others (a user who made one first, where root
 * had not yet, could otherwise take over every user's directory below it:
 * security issue 30 item 3). Returns an O_DIRECTORY descriptor of @path
 * (the caller closes it), or -1 with errno: EPERM (a component is no such
 * directory: @bad says which, its owner and what is wrong), EINVAL (@path
 * is not @root or below it), or from open/mkdirat/fstatat (ENOENT: @root
 * is missing; ENOSPC, EROFS, EIO: the node's filesystem). */
int sh_root_dirs_make(const char *root, const char *path, mode_t mode,
                      struct sh_root_dir_problem *bad);

/* mkdirat(2) @name in @dirfd with @mode and owner @uid:@gid if missing, then
 * verify it: a directory (never a symlink) owned by @uid, mode @mode. Run as
 * root. Returns an O_DIRECTORY descriptor the caller closes, or -1 with errno
 * (EPERM: it exists with another owner or type). */
int sh_make_owned_dir(int dirfd, const char *name, uid_t uid, gid_t gid, mode_t mode);

/* A job's claim on a destination on this node: the file "claim.<img>" in its
 * runtime directory (owned by the job user, 0700, removed by the epilog)
 * holding DST, SRC and SRC's identity (sh_src_encode). Staging replaces DST
 * atomically, but a running job reopens DST at each step (pyxis imports the
 * image at every srun): another job of the same user that staged other
 * content to the same DST would change the image under it. */

/* The claim text for @dst and @id into @buf (@len bytes). Returns its length
 * or -1 with errno = ENAMETOOLONG. */
int sh_claim_text(const char *dst, const struct sh_src_id *id, char *buf, size_t len);

/* Record claim @text (@n bytes) on image @img in runtime directory @rundir
 * (temp file + rename, so a reader never sees half of it). Returns 0, or -1
 * with errno from open/write/rename (the caller warns: only the protection is
 * lost). */
int sh_claim_write(const char *rundir, size_t img, const char *text, int n);

/* Remove image @img's claim from @rundir (ignores ENOENT). */
void sh_claim_remove(const char *rundir, size_t img);

/* Another running job's claim, in a runtime directory under @runtime_dir
 * (SH_RUNTIME_DIR), on @dst with other content than @claim (its
 * source or the source's identity differs): that job's id into @who and its
 * source into @their. Claims of job @self itself (its steps included) never
 * conflict; other users' runtime directories (0700) are not readable and
 * never conflict. Every job writes its claim before it looks for others', so
 * of two jobs that stage different content to one DST at the same moment at
 * least one sees the other's claim. */
bool sh_claim_conflict(const char *runtime_dir, uint64_t self, const char *dst,
                       const char *claim, char *who, size_t wholen, char *their,
                       size_t theirlen);

#endif

/* The node image cache (doc/design.md §2 "cache mode", §6): with the site key
 * cache=DIR, an image given without DST is staged into DIR, where one copy of
 * each content serves every job and user of the node that proves it may read
 * the content's source.
 *
 * LAYOUT (everything root's unless said otherwise)
 *
 *   DIR/                       0711  the cache
 *   DIR/entries/               0700  no user can list or open what is here
 *   DIR/entries/<key>          0444  one image; <key> = "<digest hex>-<size>"
 *                                    under the site's hash=; its user.stagehand
 *                                    record (stagehand/meta.h), written by root
 *                                    at adoption, names the source it came from;
 *                                    user.stagehand.sources, every further
 *                                    source a later adoption proved it holds
 *   DIR/job/                   0711  the jobs' directories, not listable
 *   DIR/job/<jobid>/           the job user's, 0700 while the job stages into
 *                                    it (or a woken sentinel's agent serves the
 *                                    others), 0500 after; removed by the epilog
 *   DIR/job/<jobid>/<name>     a hard link of the job's entry (one inode:
 *                                    STAGEHAND_IMAGE points here for the job's
 *                                    whole life)
 *
 * A job's request "SRC" without DST becomes, at submit, the DST
 * "DIR/job/<basename of SRC>" (the submit form: the job id is not known yet)
 * and, on the node, "DIR/job/<jobid>/<basename>" (the job form). The staging
 * path (verify, atomic publish, current-copy check) writes and checks that
 * DST like any other; root then adopts a new copy into entries/ (cache_adopt.c)
 * or links an existing entry that the job user proved current.
 *
 * References: the hard links themselves. An entry's link count minus one is
 * the number of jobs that hold it.
 *
 * cache.c, cache_fill.c: libc only (the plugin links them). cache_adopt.c hashes (libcrypto,
 * libxxhash): the agent's and stagehand-cache's library only. */
#ifndef STAGEHAND_CACHE_H
#define STAGEHAND_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stagehand/meta.h"
#include "stagehand/modes.h"

#define SH_CACHE_ENTRIES "entries"
#define SH_CACHE_JOBS "job"
/* "<hex digest>-<size>": 64 hex digits at most, a 20-digit size */
#define SH_CACHE_KEY_MAX (SH_HASH_HEX_LEN + 24)

/* Which kind of cache DST @dst is, for the normalised cache directory
 * @cache: SH_CACHE_DST_SUBMIT "<cache>/job/<name>", SH_CACHE_DST_JOB
 * "<cache>/job/<jobid>/<name>" (its job id into *@jobid when not NULL), or
 * SH_CACHE_DST_NONE (anything else, "<cache>/entries/..." included). */
enum sh_cache_dst { SH_CACHE_DST_NONE = 0, SH_CACHE_DST_SUBMIT, SH_CACHE_DST_JOB };
enum sh_cache_dst sh_cache_dst_kind(const char *cache, const char *dst, uint64_t *jobid);

/* The directory images without DST go to at submit: "<cache>/job", into @out
 * (@len bytes). Returns 0, or -1 with errno = ENAMETOOLONG. */
int sh_cache_submit_dir(const char *cache, char *out, size_t len);

/* The job's own staging path "<cache>/job/<jobid>" into @out. Returns 0, or
 * -1 with errno = ENAMETOOLONG. */
int sh_cache_job_dir(const char *cache, uint64_t jobid, char *out, size_t len);

/* The canonical spec @spec (stagehand/spec.h wire form) with every DST of
 * the submit form turned into job @jobid's form; other images unchanged.
 * Returns a malloc'ed wire form the caller frees, or NULL with errno
 * (EINVAL: @spec is malformed, or a DST of another job's form; ENOMEM) and
 * the reason in @err. */
char *sh_cache_spec_for_job(const char *cache, uint64_t jobid, const char *spec, char *err,
                            size_t errlen);

/* The entry name of content @digest (sh_hash_len(@algo) bytes) of @size
 * bytes: "<hex>-<size>", into @out (SH_CACHE_KEY_MAX bytes). Returns 0, or -1
 * with errno = ENAMETOOLONG. */
int sh_cache_key(enum sh_hash_algo algo, const uint8_t *digest, uint64_t size, char *out,
                 size_t len);

/* As root: make (if missing) and verify the cache's directories for job
 * @jobid of user @uid:@gid: DIR 0711, DIR/entries 0700, DIR/job 0711, all
 * root's, none a symlink; and DIR/job/<jobid> @uid:@gid 0700 (a job step's
 * staging finds it 0500 and opens it again). DIR's parent must exist.
 * Returns 0, or -1 with errno (EPERM: one of them exists with another owner,
 * type or looser mode; from mkdir/open) and the path's reason in @err. */
int sh_cache_prepare(const char *cache, uint64_t jobid, uid_t uid, gid_t gid, char *err,
                     size_t errlen);

/* As root, when job @jobid's staging on this node has ended: its directory
 * becomes 0500 (readable and searchable by the job user only, nothing
 * written any more) and the files the staging path leaves beside a DST (the
 * per-DST lock) are removed. Returns 0, or -1 with errno. */
int sh_cache_job_seal(const char *cache, uint64_t jobid);

/* As root (the epilog): remove job @jobid's directory and its links, never
 * following a symlink. ENOENT is success. Returns 0, or -1 with errno. */
int sh_cache_job_remove(const char *cache, uint64_t jobid);

/* Drop the references of jobs that no longer exist on this node (a node
 * that crashed with the cache on a persistent disk, a killed epilog): every
 * job directory but @self's for which @alive(jobid, @arg) is false is
 * removed like sh_cache_job_remove. As root. Returns the number removed, or
 * -1 with errno (the job directory cannot be read). */
int sh_cache_sweep_jobs(const char *cache, uint64_t self,
                        bool (*alive)(uint64_t jobid, void *arg), void *arg);

/* An entry of the cache as its record says (sh_cache_find). */
struct sh_cache_entry {
    char key[SH_CACHE_KEY_MAX];
    struct sh_meta rec;        /* root's record, written at adoption */
    uint64_t size;             /* bytes */
    nlink_t links;             /* 1 + the jobs that hold it */
    struct sh_ts atime;        /* last use: a job linked it (sh_cache_link) */
};

/* The entry that holds source @src (a normalised absolute path), into @e:
 * one whose record or further sources (stagehand/meta.h) name it, with
 * @src's recorded identity in e->rec.src; of several, the one of @src's
 * newest identity (latest ctime). Run as root. Returns 0, or -1 with errno =
 * ENOENT (none), or from opendir/openat. Only root's regular files with mode
 * 0444, one record each, are entries; anything else there is skipped. */
int sh_cache_find(const char *cache, const char *src, struct sh_cache_entry *e);

/* As root: make @dst (job form, missing) a hard link of entry @key and mark
 * the entry used now. Returns 0, or -1 with errno (ENOENT: no such entry;
 * EEXIST: @dst exists; EINVAL: @dst is not a DST of the job form). */
int sh_cache_link(const char *cache, const char *key, const char *dst);

/* As root: remove entry @key of the open entries directory @efd unless a
 * job holds it. Safe against a concurrent sh_cache_link without a lock: the
 * entry is first renamed to ".evict-<key>" (no linker can find it any more:
 * is_entry skips dot names, linkat fails ENOENT), then its link count is read
 * again; a job that linked it before the rename shows as a second link and
 * the entry is renamed back (or, if a new entry of that key appeared, left to
 * that job's link alone). Returns 1 (removed), 0 (in use: kept), or -1 with
 * errno. */
int sh_cache_evict_entry(int efd, const char *key);

/* As root: remove entries no job holds (link count 1), least recently used
 * first (the atime sh_cache_link sets), until @bytes are freed or none is
 * left. @report (may be NULL) is called with each removed entry. Returns the
 * bytes freed, or -1 with errno (the entries directory cannot be read). */
int64_t sh_cache_evict(const char *cache, uint64_t bytes,
                       void (*report)(const char *key, uint64_t size, void *arg), void *arg);

/* A cache's room for a staging, as sh_cache_usage reads it (bytes). */
struct sh_cache_usage {
    uint64_t fs_free;   /* free on the cache's filesystem for a job user (f_bavail) */
    uint64_t evictable; /* entries no job holds (link count 1) */
    uint64_t held;      /* entries running jobs hold (a job's link: count > 1) */
};

/* As root: fill @u for @cache (its filesystem's free space, its entries'
 * sizes by whether a job holds them). Returns 0, or -1 with errno (statvfs,
 * or the entries directory cannot be read). */
int sh_cache_usage(const char *cache, struct sh_cache_usage *u);

/* The pre-check of a staging of @incoming bytes into @cache (images @what,
 * their SRCs for the message) before anything is evicted or copied: it fits when the
 * filesystem's free space plus the evictable entries hold it and, with
 * @max (cache_max=, 0: none), the entries running jobs hold plus it stay
 * within @max. Returns true, or false with a message for the user in @msg
 * naming the images, the bytes needed, free, evictable and held, and the
 * limit. Never fails otherwise. */
bool sh_cache_fits(const char *cache, const struct sh_cache_usage *u, uint64_t incoming,
                   uint64_t max, const char *what, char *msg, size_t msglen);

/* As root, before a staging into the cache of @incoming bytes (0 when not
 * known): when the cache's filesystem would then be fuller than @high, or
 * its entries together above @max (0: no limit), evict (sh_cache_evict)
 * down to @low, resp. @max. Returns the bytes freed (0: nothing needed), or
 * -1 with errno (statvfs, or the entries directory cannot be read). */
int64_t sh_cache_make_room(const char *cache, uint64_t incoming, uint64_t high_bytes,
                           uint64_t low_bytes, uint64_t max,
                           void (*report)(const char *key, uint64_t size, void *arg),
                           void *arg);

/* Fill locks: one staging per source and node copies it into the cache
 * (the producer); the others wait for its lock and then link its entry
 * (doc/design.md §2 step 11). The lock is flock(2) on
 * entries/.fill-<FNV-1a of SRC>.lock (root's, in the 0700 entries
 * directory: no user can open, hold or plant it); its holder writes its
 * job id and node count into it for the waiters. */
struct sh_cache_filler {
    uint64_t jobid;   /* 0: not known (the lock was taken an instant ago) */
    uint32_t nnodes;  /* the holder's job's (or step's) nodes; 0: not known */
};

/* As root: try to take @src's fill lock in @cache for @me, without waiting.
 * Returns 0 with the lock's descriptor in *@lockfd (close-on-exec; @me
 * recorded in it), 1 when another staging holds it (its record in
 * *@holder, zero when not written yet), or -1 with errno (the entries
 * directory or the lock file cannot be opened). */
int sh_cache_fill_trylock(const char *cache, const char *src, const struct sh_cache_filler *me,
                          int *lockfd, struct sh_cache_filler *holder);

/* As root: let go of @src's fill lock held on @lockfd (< 0: a no-op) and
 * remove its file while still held, so none is left behind. */
void sh_cache_fill_release(const char *cache, const char *src, int lockfd);

/* As root: remove the fill lock files of @cache that no staging holds: their
 * holder died without its release (SIGKILL, a crash). A lock that can be
 * taken without waiting is free, so a live producer's (it holds it until
 * its release) is never touched; each is removed while held, the protocol
 * of sh_publish_lock, so a staging that opened it meanwhile takes the new
 * file's. Returns the number removed, 0 without an entries directory, or
 * -1 with errno (the entries directory cannot be opened or read). */
int sh_cache_fill_sweep(const char *cache);

/* Adopt job @dst (job form), a copy the staging path published as user
 * @uid, into the cache, as root: owner root, mode 0444 (on the descriptor),
 * then a read lease proves no process holds it open for writing; one name
 * only; then root hashes it and the digest must be @ref_digest (hex, the
 * reader's digest the job's agent reported). Root's record (@src's identity
 * @id, the digest) replaces whatever the user wrote, the entry gets its name
 * "<key>" in entries/ (an entry of that key already there, another job's or
 * another source's copy of the same content, is kept and linked instead:
 * @id is added to its sources and its last use set to now; this copy goes;
 * an entry evicted meanwhile is made again from this copy). Returns 0 with the entry's
 * key in @key (SH_CACHE_KEY_MAX bytes), or -1 with errno and the reason in
 * @err; the copy is then removed. */
int sh_cache_adopt(const char *cache, const char *dst, uid_t uid, enum sh_hash_algo algo,
                   const char *ref_digest, const struct sh_src_id *id, char *key,
                   char *err, size_t errlen);

#endif

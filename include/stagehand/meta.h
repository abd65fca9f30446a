/* The metadata record that makes a staged copy "current" (doc/design.md §2 step 4).
 *
 * Written only after a verified publish: the source's path, size, mtime and
 * ctime as the reader saw them, the content digest, and DST's own size and
 * mtime at publish (a later write to DST changes them). Stored in the
 * extended attribute "user.stagehand" on DST (xattr(7)); where the filesystem
 * has no user xattrs, in a sidecar file ".<dstname>.stagehand" in DST's
 * directory, published atomically. The record is versioned text, readable
 * with `getfattr -n user.stagehand DST`. */
#ifndef STAGEHAND_META_H
#define STAGEHAND_META_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "stagehand/hash.h"
#include "stagehand/io.h"
#include "stagehand/modes.h"

#define SH_META_VERSION 1
#define SH_META_XATTR "user.stagehand"
#define SH_META_MAX_LEN (PATH_MAX + 512)    /* bytes of an encoded record */

struct sh_ts {
    int64_t sec;
    uint32_t nsec;
};

/* Identity of the source as the reader sees it now. Inode and device numbers
 * are deliberately absent: they differ between nodes and across remounts. */
struct sh_src_id {
    char path[PATH_MAX];
    uint64_t size;          /* bytes */
    struct sh_ts mtime;
    struct sh_ts ctime;     /* changes on every content write; users cannot set it */
    /* Not part of the record: what a new copy's mode follows (issue 30). */
    uint32_t mode;          /* permission bits (st_mode & 0777) */
    uint32_t gid;           /* group; (uint32_t)-1 unknown */
};

struct sh_meta {
    uint32_t version;       /* SH_META_VERSION */
    struct sh_src_id src;
    enum sh_hash_algo algo;
    uint8_t digest[SH_HASH_MAX_LEN];    /* sh_hash_len(algo) bytes used */
    uint64_t dst_size;      /* bytes, at publish */
    struct sh_ts dst_mtime; /* at publish */
};


/* The further sources of a node image cache entry (stagehand/cache.h): each
 * source identity root proved the entry to hold besides the one its record
 * names (issue 34: one copy per content, whatever its source's name). In
 * the extended attribute "user.stagehand.sources" of the entry, root's like
 * the record; an entry without it (written before) has the record's source
 * only. Versioned text: "stagehand-sources 1\n", then one line per source,
 * oldest first: "src <size> <mtime> <ctime> <path>\n" (times as the record's,
 * sec.nsec). At most SH_META_SOURCES_MAX sources and SH_META_SOURCES_MAX_LEN
 * bytes (with the record, within one 4 KiB block of ext4's xattrs): adding
 * one more drops the oldest. */
#define SH_META_SOURCES_XATTR "user.stagehand.sources"
#define SH_META_SOURCES_MAX 8
#define SH_META_SOURCES_MAX_LEN 3072

struct sh_meta_sources {
    size_t n;
    struct sh_src_id id[SH_META_SOURCES_MAX];
};

/* Encode @s into @buf (@len bytes, NUL-terminated), dropping the oldest
 * sources while the text exceeds SH_META_SOURCES_MAX_LEN (@s is left as
 * encoded). Returns the length, or -1 with errno = EINVAL (a path empty, with
 * a newline, or longer than the limit alone) or ENOBUFS. */
int sh_meta_sources_encode(struct sh_meta_sources *s, char *buf, size_t len);

/* Decode @len bytes of @buf into @s. Strict. Returns 0, or -1 with errno =
 * EINVAL or EPROTONOSUPPORT. */
int sh_meta_sources_decode(const char *buf, size_t len, struct sh_meta_sources *s);

/* Add @id to @s: it replaces the identity of the same path, else is appended
 * (the oldest dropped when @s is full). */
void sh_meta_sources_add(struct sh_meta_sources *s, const struct sh_src_id *id);

/* The identity of path @path in @s, or NULL. */
const struct sh_src_id *sh_meta_sources_find(const struct sh_meta_sources *s, const char *path);

/* Load the further sources of the open file @fd into @s (none: n = 0).
 * Returns 0, or -1 with errno (EINVAL/EPROTONOSUPPORT: unreadable, or
 * fgetxattr(2)'s). */
int sh_meta_sources_load(int fd, struct sh_meta_sources *s);

/* Store @s on the open file @fd (fsetxattr(2); n = 0 removes the attribute).
 * Returns 0, or -1 with errno (ENOSPC/E2BIG, ENOTSUP, encoding's). */
int sh_meta_sources_store(int fd, struct sh_meta_sources *s);

/* The identity of source @path that the root-owned entry @fd with record
 * @rec was proven to hold: the record's own, or one of its further sources
 * (copied into @out). Returns 1 with @out set, or 0 (none of @path). */
int sh_meta_entry_source(int fd, const struct sh_meta *rec, const char *path,
                         struct sh_src_id *out);

/* Convert a struct timespec / stat times. */
struct sh_ts sh_ts_from(const struct timespec *ts);

/* Encode @m into @buf (@len bytes, NUL-terminated). Returns the length
 * without the NUL, or -1 with errno = EINVAL (unknown algo, newline in the
 * source path) or ENOBUFS (@len too small). */
int sh_meta_encode(const struct sh_meta *m, char *buf, size_t len);

/* Decode @len bytes of @buf (NUL not required) into @m. Strict: every field
 * present, in order, nothing after. Returns 0, or -1 with errno = EINVAL
 * (malformed) or EPROTONOSUPPORT (a record version this build cannot read). */
int sh_meta_decode(const char *buf, size_t len, struct sh_meta *m);

/* Sidecar basename for DST @name: ".<name>.stagehand". Returns 0 or -1 with
 * errno = ENAMETOOLONG. */
int sh_meta_sidecar_name(const char *name, char *out, size_t len);

/* Store @m in the user.stagehand xattr of open file @fd (fsetxattr(2)).
 * Returns 0, or -1 with errno: ENOTSUP/EOPNOTSUPP (no user xattrs: use the
 * sidecar), ENOSPC/EDQUOT, E2BIG, or EINVAL/ENOBUFS from encoding. */
int sh_meta_store_fd(int fd, const struct sh_meta *m);

/* Publish @m as the sidecar of @name in @dirfd (sh_publish_buffer, so it is
 * atomic and fsynced; mode 0600). Returns 0 or -1 with errno. */
int sh_meta_store_sidecar(const struct sh_io_ops *io, int dirfd,
                          const char *name, const char *jobid,
                          const char *host, const struct sh_meta *m);

/* Remove the sidecar of @name if present. Returns 0 (also when absent) or -1
 * with unlinkat(2)'s errno. */
int sh_meta_remove_sidecar(int dirfd, const char *name);

/* Load the record of DST @name: first the xattr of @dstfd (an open fd of DST),
 * then the sidecar in @dirfd. Sets *@from_sidecar (may be NULL). Returns 0,
 * or -1 with errno = ENODATA (no record), EINVAL/EPROTONOSUPPORT (record
 * unreadable), or the errno of fgetxattr(2)/openat(2). */
int sh_meta_load(int dirfd, const char *name, int dstfd, struct sh_meta *m,
                 int *from_sidecar);

/* Decide whether DST is current (pure function, no I/O).
 * @src: the source as seen now. @dst: lstat of DST (NULL: DST missing).
 * @uid: the running user; a DST owned by anyone else but root is never
 * trusted. @rec: the loaded record (NULL: none). @dst_digest: for
 * SH_CHECK_CONTENT, the digest of DST's content computed now with rec->algo
 * (NULL otherwise). A zero-length or wrong-size DST is never current
 * (case F07). Returns 1 (current) or 0, and points *@why at a static
 * reason string. */
int sh_meta_is_current(enum sh_check check, const struct sh_src_id *src,
                       const struct stat *dst, uid_t uid,
                       const struct sh_meta *rec, const uint8_t *dst_digest,
                       const char **why);

/* The one decision whether a node's DST is current, shared by the plugin
 * and the agent (sh_dest_vote, before any lock) and the engine (its
 * pre-check, under DST's lock). In: the check mode, SRC as seen now, the
 * running user, the job's umask and, for SH_CHECK_CONTENT, how to hash DST
 * (@digest: DST's digest with @algo over @size bytes of @fd into @out, > 0
 * on success; NULL: content is never found current). Out: DST's record
 * (@have_rec, @sidecar: it came from the sidecar), whether the copy's mode
 * was tightened, and the reason (a static string). */
struct sh_dst_check {
    enum sh_check check;
    const struct sh_src_id *src;
    uid_t uid;
    mode_t umask_bits;
    int (*digest)(int fd, uint64_t size, enum sh_hash_algo algo, uint8_t *out);
    struct sh_meta rec;
    int have_rec;
    int sidecar;
    int tightened;
    const char *why;
    /* DST is a link of a node image cache entry (stagehand/cache.h): root's,
     * 0444, reached only through the job user's own directory; its mode is
     * not the source's and is never tightened */
    int cache_entry;
};

/* Is DST @name in @dirfd current (@st: its lstat, NULL when missing; @fd: it
 * opened read-only, or -1)? Loads its record (not for SH_CHECK_SIZE or
 * SH_CHECK_NEVER), hashes it for SH_CHECK_CONTENT when the record and size
 * allow, decides with sh_meta_is_current, and makes a current copy whose
 * mode allows more than a new copy's (sh_copy_mode) as strict as that
 * (sh_publish_tighten; issue 30): when that fails it is not current.
 * Returns 1 (current) or 0, the details in @c. */
int sh_meta_dst_current(int dirfd, const char *name, int fd, const struct stat *st,
                        struct sh_dst_check *c);

#endif

/* Registry image references: the part of a --stage-image value after
 * "docker://" (issue 36).
 *
 * GRAMMAR (stagehand(8), REGISTRY IMAGES)
 *
 *   image     := "docker://" reference [ ":" DST ]
 *   reference := [ registry "/" ] repo [ ":" tag | "@" digest ]
 *              | registry "#" repo [ ":" tag | "@" digest ]      (pyxis's form)
 *   registry  := host [ ":" port ]        host: labels of [A-Za-z0-9-] joined
 *                                         by '.', or "localhost"; port 1-65535
 *   repo      := component { "/" component }
 *   component := [a-z0-9] [a-z0-9._-]* [a-z0-9], no "..", ".-" or "-."
 *   tag       := [A-Za-z0-9_] [A-Za-z0-9_.-]{0,127}
 *   digest    := "sha256:" 64 hex | "sha512:" 128 hex   (lower-case hex)
 *
 * - Without '#', the first component is the registry when it contains '.' or
 *   ':' or is "localhost" and more components follow (the convention of
 *   docker, podman and skopeo); otherwise the site's default_registry= is the
 *   registry, and without one the reference is refused.
 * - Neither tag nor digest: the tag "latest". Tag and digest together are
 *   refused (say which one is meant).
 * - A tag contains no ':' and a DST is an absolute path, so the first ":/"
 *   after "docker://" starts DST; a registry port ("host:5000/") is followed
 *   by a digit, never by '/'.
 * - Canonical form (the spec's SRC): "docker://" registry "/" repo ":" tag or
 *   "docker://" registry "/" repo "@" digest, registry host in lower case.
 *
 * Messages go to a caller buffer (err, errlen), never include the value: the
 * caller adds the context. Thread-compatible, no global state. */
#ifndef STAGEHAND_REF_H
#define STAGEHAND_REF_H

#include <stdbool.h>
#include <stddef.h>

#define SH_REF_SCHEME "docker://"
#define SH_REF_SCHEME_LEN 9
#define SH_REF_REGISTRY_MAX 256 /* host[:port], NUL included */
#define SH_REF_REPO_MAX 256     /* repository path, NUL included */
#define SH_REF_TAG_MAX 129      /* 128 bytes + NUL */
#define SH_REF_DIGEST_MAX 136   /* "sha512:" + 128 hex + NUL */
/* Longest canonical form, NUL included. */
#define SH_REF_TEXT_MAX                                                        \
    (SH_REF_SCHEME_LEN + SH_REF_REGISTRY_MAX + SH_REF_REPO_MAX + SH_REF_DIGEST_MAX + 2)

struct sh_ref {
    char registry[SH_REF_REGISTRY_MAX]; /* "host[:port]", host lower case */
    char repo[SH_REF_REPO_MAX];
    char tag[SH_REF_TAG_MAX];           /* "" when @digest is set */
    char digest[SH_REF_DIGEST_MAX];     /* "sha256:<hex>", or "" */
};

/* Whether @src names a registry image (starts with "docker://"). */
bool sh_ref_is_image(const char *src);

/* Parse the @len bytes at @text (the reference, after "docker://", without
 * DST) into @ref. @default_registry (may be NULL or "") stands in when the
 * reference names none. Returns 0, or -1 with errno = EINVAL and a message
 * naming the bad part (registry, repository, tag, digest) in @err. */
int sh_ref_parse(const char *text, size_t len, const char *default_registry,
                 struct sh_ref *ref, char *err, size_t errlen);

/* Parse a canonical "docker://..." string (a spec's SRC) into @ref; anything
 * that is not in canonical form is refused (errno = EINVAL, message in
 * @err). */
int sh_ref_parse_canonical(const char *src, struct sh_ref *ref, char *err, size_t errlen);

/* The canonical form of @ref into @out (@outlen bytes; SH_REF_TEXT_MAX is
 * enough). Returns 0, or -1 with errno = ENAMETOOLONG. */
int sh_ref_format(const struct sh_ref *ref, char *out, size_t outlen);

/* The file name a registry image gets in a DST directory: the repository
 * with '/' as '+', then "+<tag>" or "+<algorithm>-<hex>", then ".sqsh"
 * ("nvidia/cuda:12.4" -> "nvidia+cuda+12.4.sqsh", enroot's spelling).
 * Returns 0, or -1 with errno = ENAMETOOLONG (longer than NAME_MAX). */
int sh_ref_file_name(const struct sh_ref *ref, char *out, size_t outlen);

/* Whether @registry ("host[:port]") is in @list: ','-separated entries
 * compared without regard to case, "*" allowing every registry. */
bool sh_ref_registry_listed(const char *list, const char *registry);

/* Check the registry name @registry ("host[:port]") and write it in
 * canonical form (host lower case) into @out. Returns 0, or -1 with errno =
 * EINVAL (message in @err) or ENAMETOOLONG. */
int sh_ref_registry_check(const char *registry, char *out, size_t outlen, char *err,
                          size_t errlen);

/* IMPORTER AND RESOLVER COMMANDS (the importer= and resolver= site keys)
 *
 * A command is its arguments joined by ',' (plugstack.conf splits its
 * arguments at spaces), the first an absolute path. Placeholders:
 *   %r  the reference without "docker://", pinned to the manifest digest
 *       when it is known (REGISTRY/REPO@DIGEST), else REGISTRY/REPO:TAG
 *   %R  the registry    %p  the repository    %t  the tag ("" if pinned)
 *   %d  the digest      %o  the output file   %%  a '%'
 * No shell is involved: each argument is passed as it is. */
#define SH_REF_ARGV_MAX 64 /* arguments of a command, NULL included */

/* Check @cmd: absolute program, no empty argument, placeholders among
 * @letters (e.g. "rRptdo"). Returns 0, or -1 with errno = EINVAL and a
 * message in @err. */
int sh_ref_command_check(const char *cmd, const char *letters, char *err, size_t errlen);

/* The NULL-terminated argument vector of @cmd for @ref (its digest, if set,
 * pins %r) and @out_path (may be NULL). Free it with sh_ref_command_free().
 * Returns NULL with errno = ENOMEM. */
char **sh_ref_command_expand(const char *cmd, const struct sh_ref *ref, const char *out_path);
void sh_ref_command_free(char **argv);

#endif

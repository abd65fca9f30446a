/* Staging specs: the --stage-image option grammar, the accumulated set of
 * images of one job, and its canonical versioned wire form.
 *
 * OPTION GRAMMAR (what users type)
 *
 *   value  := image { "," image }
 *   image  := path [ ":" path ]            SRC[:DST]
 *           | "docker://" reference [ ":" path ]   a registry image, ref.h
 *   path   := { byte | "\\" | "\:" | "\," }
 *
 * - An unescaped "," separates images, an unescaped ":" separates SRC from
 *   DST. Inside a path, write a literal ":" as "\:", a literal "," as "\,"
 *   and a literal backslash as "\\". Any other backslash sequence, a trailing
 *   backslash, or a second unescaped ":" in one image is an error whose
 *   message says how to write the path. So every absolute path can be
 *   written, e.g. the file "/data/run:3,final.sqsh" is
 *   "/data/run\:3\,final.sqsh". (In a shell, quote the value: '...'.)
 * - Paths must be absolute (case F28: a value is evaluated on other hosts,
 *   where the submit directory means nothing; relative paths are rejected
 *   with a message, not resolved). A relative part right after an unescaped
 *   ":" or "," is reported as "probably a ':'/',' inside a path" with the
 *   escaped spelling.
 * - Rejected: empty SRC, DST or image (",,", trailing ","), ".." components,
 *   control characters (bytes 0x01-0x1f and 0x7f), a path of PATH_MAX bytes
 *   or more, a component longer than NAME_MAX, a SRC ending in "/".
 * - Bytes 0x80-0xff are accepted as they are: Linux paths are byte strings and
 *   a site whose file names are Latin-1 (not UTF-8) must still be able to
 *   stage them. They travel percent-encoded in the wire form.
 * - Lexical normalisation: "//" collapses to "/", "." components are dropped,
 *   a trailing "/" is dropped. No symlink is resolved here (that is done by
 *   opening the file as the user, later).
 * - No DST: the image goes to "<default_dir>/<basename of SRC>". A DST that
 *   ends in "/" names a directory: the image goes to "<DST>/<basename of SRC>".
 * - The option is repeatable and each value may list several images. An
 *   image identical to one already in the set is a no-op (case F27); a DST
 *   given again with a different SRC is an error; so is a DST equal to its
 *   own SRC or a DST that is a parent directory of another image's DST.
 *
 * WIRE FORM (plugin -> prolog, via spank_job_control_setenv)
 *
 *   "v1;" enc(SRC) ":" enc(DST) { "," enc(SRC) ":" enc(DST) }
 *
 * enc() keeps the bytes A-Z a-z 0-9 / . _ - + @ = ~ and writes every other
 * byte as "%HH" (two upper-case hex digits), so the string is printable ASCII
 * with no spaces and ":", "," and ";" are always separators. Images keep the
 * order in which they were first given (the first one is the job's primary
 * image). The form is canonical: one set has exactly one encoding, and the
 * parser rejects anything the serialiser would not produce. A reader that
 * meets another version number rejects the spec and says so (case F26).
 *
 * All functions are thread-compatible (no global state). Error messages are
 * written to a caller buffer (err, errlen; truncated, always NUL-terminated
 * when errlen > 0) and never include the "stagehand:" prefix or the option
 * value: the caller adds the context.
 */
#ifndef STAGEHAND_SPEC_H
#define STAGEHAND_SPEC_H

#include <stddef.h>

/* Version of the wire form written by sh_spec_set_serialize(). */
#define SH_SPEC_FORMAT_VERSION 1
/* Most images one job may stage (all values together). */
#define SH_SPEC_MAX_IMAGES 64
/* Longest accepted option value, in bytes. */
#define SH_SPEC_MAX_VALUE ((size_t)256 * 1024)
/* Name passed to spank_job_control_setenv(); the prolog sees it with Slurm's
 * "SPANK_" prefix (measured, doc/design.md §8). */
#define SH_SPEC_ENV "STAGEHAND_SPEC"
#define SH_SPEC_PROLOG_ENV "SPANK_" SH_SPEC_ENV
/* Images given on an srun inside an existing job: staged at step start by
 * slurmstepd (spank_setenv in srun, spank_getenv in the remote context). */
#define SH_STEP_SPEC_ENV "STAGEHAND_STEP_SPEC"
/* The stagehand version of the submitting side, next to the spec (job:
 * SPANK_ prefix in the prolog; step: in the step's environment). A node with
 * another version refuses the job with a clear message (case F26). */
#define SH_VERSION_ENV "STAGEHAND_VERSION"
#define SH_STEP_VERSION_ENV "STAGEHAND_STEP_VERSION"
/* The submitting command's umask, octal ("0077"), next to the spec (job:
 * SPANK_ prefix in the prolog; step: in the step's environment). A staged
 * copy gets SRC's permission bits minus it; when it is missing (an older
 * submitting side) SH_UMASK_DEFAULT applies (issue 30). */
#define SH_UMASK_ENV "STAGEHAND_UMASK"
#define SH_STEP_UMASK_ENV "STAGEHAND_STEP_UMASK"
#define SH_UMASK_DEFAULT 077
/* Set to "1" next to the spec when the user asked for --stage-verbose. */
#define SH_VERBOSE_ENV "STAGEHAND_VERBOSE"
#define SH_VERBOSE_PROLOG_ENV "SPANK_" SH_VERBOSE_ENV

struct sh_spec_set;

/* New empty set. Returns NULL with errno = ENOMEM. Free with
 * sh_spec_set_free(). */
struct sh_spec_set *sh_spec_set_new(void);
/* Free @set and everything it owns; NULL is a no-op. errno is preserved. */
void sh_spec_set_free(struct sh_spec_set *set);

/* The registry for docker:// references that name none (the site's
 * default_registry=, "host[:port]"), or NULL/"" for none: such references
 * are then refused. Set it before sh_spec_add_value(). Returns 0, or -1 with
 * errno = ENAMETOOLONG. */
int sh_spec_set_default_registry(struct sh_spec_set *set, const char *registry);

/* Number of images in @set. */
size_t sh_spec_set_count(const struct sh_spec_set *set);
/* Normalised absolute SRC / DST of image @i (< count); a registry image's
 * SRC is its canonical "docker://REGISTRY/REPO:TAG" or "...@DIGEST" (ref.h). The strings are owned
 * by @set and live until it is freed. */
const char *sh_spec_set_src(const struct sh_spec_set *set, size_t i);
const char *sh_spec_set_dst(const struct sh_spec_set *set, size_t i);
/* The option value that first added image @i (as given, unescaped bytes),
 * or NULL for a set read with sh_spec_set_deserialize(). Owned by @set. */
const char *sh_spec_set_origin(const struct sh_spec_set *set, size_t i);

/* Parse one --stage-image @value (grammar above) and add its images to @set.
 * @default_dir: absolute directory for images without DST (already expanded,
 * see sh_config_default_dir()); NULL makes a missing DST an error.
 * The call is atomic: on error @set is unchanged; adding a value whose images
 * are all present already is a no-op returning 0.
 * Returns 0, or -1 with errno = EINVAL (syntax, path, conflict),
 * ENAMETOOLONG (PATH_MAX / NAME_MAX), E2BIG (value too long, or more than
 * SH_SPEC_MAX_IMAGES images) or ENOMEM, and a message in @err. */
int sh_spec_add_value(struct sh_spec_set *set, const char *value,
                      const char *default_dir, char *err, size_t errlen);

/* Canonical wire form of @set (format above). Returns a malloc'd string the
 * caller frees, or NULL with errno = EINVAL (empty set) or ENOMEM. */
char *sh_spec_set_serialize(const struct sh_spec_set *set);

/* Parse a wire form written by sh_spec_set_serialize(), checking everything
 * sh_spec_add_value() checks (it may come from a user's own client, so a
 * reader must trust nothing: also check each DST against the site policy with
 * sh_config_check_dest()). Returns a new set (free with sh_spec_set_free()),
 * or NULL with errno = ENOTSUP (another format version; the message names
 * both versions and the fix), EINVAL (malformed, not canonical, no image,
 * invalid path, conflict), ENAMETOOLONG, E2BIG or ENOMEM and a message in
 * @err. */
struct sh_spec_set *sh_spec_set_deserialize(const char *text, char *err,
                                            size_t errlen);

/* Lexically normalise the absolute path @in into @out (@outlen bytes):
 * collapse "//", drop "." components and a trailing "/". Returns 0, or -1
 * with errno = EINVAL (not absolute, ".." component, control character;
 * message in @err when @err != NULL) or ENAMETOOLONG (result does not fit
 * @outlen, is PATH_MAX bytes or longer, or a component exceeds NAME_MAX). */
int sh_spec_path_normalize(const char *in, char *out, size_t outlen,
                           char *err, size_t errlen);

/* 1 if the normalised absolute @path lies strictly below the normalised
 * absolute directory @root, compared component by component ("/nvme2/x" is
 * not under "/nvme"; "/nvme" is not under "/nvme"; everything but "/" is
 * under "/"), else 0. */
int sh_spec_path_is_under(const char *path, const char *root);

/* Write @path in option grammar (escape "\", ":" and ",") into @out. Returns
 * 0, or -1 with errno = ENAMETOOLONG when it does not fit (@out then holds a
 * truncated, NUL-terminated prefix). */
int sh_spec_escape_path(const char *path, char *out, size_t outlen);

/* Copy @in into @out for display in a message: control bytes and bytes that
 * are not part of valid UTF-8 become "\xHH", other bytes are kept; a
 * too-long string ends in "...". Returns @out. */
char *sh_spec_display(const char *in, char *out, size_t outlen);

#endif

/* stagehand-agent: registry images on node 0 (import.c, issue 36). Every
 * function runs as the job user. */
#ifndef STAGEHAND_AGENT_IMPORT_H
#define STAGEHAND_AGENT_IMPORT_H

#include <stddef.h>
#include <stdint.h>

#include "stagehand/config.h"
#include "stagehand/ref.h"

#define SH_IMPORT_ERR_MAX 1024

/* Where the image with @pinned's manifest digest lives on this node: the
 * seam a node image cache (issue 34) plugs into. Today DST itself (@dst). */
const char *sh_image_home(const struct sh_ref *pinned, const char *dst);

/* Parse the spec's SRC @src, check its registry against the site's
 * allowed_registries and run the site's resolver (cfg->resolver) as @user
 * until @deadline (sh_now_ns) less a margin, filling @ref with the manifest
 * digest the reference points to (a reference pinned by the user is not
 * resolved). Returns 0, or -1 with a message naming @src and the reason
 * (the resolver's stderr tail) in @err. */
int sh_import_resolve(const struct sh_config *cfg, const char *user, const char *src,
                      int64_t deadline, struct sh_ref *ref, char *err, size_t errlen);

/* The private import directory of a job's (or step's) image to @dst, in the
 * directory @dir (DST's nearest existing one), and the image file in it.
 * Returns 0, or -1 with ENAMETOOLONG (both then empty). */
int sh_import_paths(const char *dir, const char *dst, uint64_t jobid, uint64_t stepid,
                    char *workdir, size_t wlen, char *image, size_t ilen);

/* Make @workdir (0700; one left by an earlier try of the same job is
 * removed first) and run the site's importer (cfg->importer) in it as @user,
 * TMPDIR=@workdir, until @deadline less a margin, writing @image. Returns 0
 * with @workdir holding @image alone, or -1 with a message naming the pinned
 * reference and the reason (the importer's stderr tail, or the deadline) in
 * @err; @workdir is then gone.
 * A stop signal (SIGTERM, SIGINT, SIGHUP: scancel, the epilog) while the
 * importer runs kills its process group, removes @workdir and then ends the
 * agent by that signal; one after a success (until sh_import_release)
 * removes @image and @workdir and is then passed on the same way. */
int sh_import_run(const struct sh_config *cfg, const char *user, const struct sh_ref *pinned,
                  const char *workdir, const char *image, int64_t deadline, char *err,
                  size_t errlen);

/* Remove @workdir and everything in it (it must be a directory of this
 * user's). Returns 0 (also when it is missing), or -1 with errno. */
int sh_import_remove(const char *workdir);

/* After a successful sh_import_run: remove @workdir (sh_import_remove) and
 * give the stop signals back to the agent's own handlers. */
int sh_import_release(const char *workdir);

#endif

/* stagehand-agent --prolog: the root-only set-up. As root, before anything
 * of the user's is touched beyond what is checked here: the per-job runtime
 * directory, the per-user default destination directory, the site's
 * mpi_env file, the control-plane listener and the job key; then the drop
 * to the job user, checked (no way back to root, no capability left). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "staging.h"
#include "stagehand/local.h"
#include "stagehand/log.h"

/* Bind, as root, the job's control-plane listener, unless the sentinel
 * handed one over. It serves the job's tree and then, one after the other,
 * every image's engine tree, so a staging holds one port of the range
 * whatever its number of images. The ports are privileged (stagehand.8
 * CONFIGURATION: port_base), so only root can hold one: no user's process
 * can deny a job its control plane (issue 30), and after the drop the agent
 * keeps no capability. Returns 0, or -1 with the reason in @err and errno
 * (EADDRINUSE: every probed port is held, by root's listeners). */
static int bind_listener(struct agent *a, char *err, size_t errlen)
{
    uint32_t probe = sh_ctl_default_probe(a->cfg.port_range);
    uint16_t port = 0;

    if (a->in.have_listener) {
        a->listener = a->in.listener;
        /* kept across the sentinel's exec; not into the engine's */
        if (fcntl(a->listener, F_SETFD, FD_CLOEXEC) == 0)
            return 0;
        snprintf(err, errlen, "the sentinel's listener: %s", strerror(errno));
        return -1;
    }
    a->listener = sh_ctl_bind(NULL, a->in.jobid, a->in.stepid, a->cfg.port_base,
                              a->cfg.port_range, probe, 128, &port);
    if (a->listener >= 0)
        return 0;
    {
        int e = errno;

        snprintf(err, errlen, "no free control-plane port among %u ports of %u-%u: %s",
                 probe, (unsigned)a->cfg.port_base,
                 (unsigned)a->cfg.port_base + a->cfg.port_range - 1u, strerror(e));
        errno = e;
    }
    return -1;
}

/* Root's part of a staging: the runtime directory, the user's default
 * directory, Open MPI's environment, the control-plane listener and the job
 * key. Without a free control-plane port (every probed port held by other
 * stagings, which users can start and stop) it goes on without a listener,
 * the reason in a->port_error: a leaf of the control trees needs none
 * (needs_listener). Returns 0, or -1 with the reason in @err: a node fault
 * (its runtime directory, disk, site key or mpi_env file). What a user
 * caused is no node fault (security issue 30 item 3): a user's object in the
 * way of the default directory is recorded in @a->dflt_error, logged for the
 * administrator, and becomes this node's vote for the images that use it
 * (protocol.c), so the job fails with it on every node. */
int root_setup(struct agent *a, char *err, size_t errlen)
{
    struct sh_site_key site;
    char dflt[PATH_MAX];
    bool user_fault = false;

    if (sh_rundir_make(SH_RUNTIME_DIR, a->in.jobid,
                       a->in.stepid == STEP_JOB ? -1 : (long)a->in.stepid, a->in.uid,
                       a->in.gid, a->rundir, sizeof(a->rundir)) != 0) {
        snprintf(err, errlen, "runtime directory %s: %s", a->rundir, strerror(errno));
        return -1;
    }
    if (sh_rundir_limit(a->rundir, a->in.uid, a->in.gid) != 0)
        sh_warn("stage", "job %" PRIu64 ": cannot mount a tmpfs on %s: %s (the job user "
                "can fill the file system under it)", a->in.jobid, a->rundir,
                strerror(errno));

    /* The per-user default directory, when some image uses it. */
    if (sh_config_default_dir(&a->cfg, a->in.user, dflt, sizeof(dflt)) == 0) {
        size_t dl = strlen(dflt);

        for (size_t i = 0; i < sh_spec_set_count(a->specs); i++) {
            const char *dst = sh_spec_set_dst(a->specs, i);
            if (strncmp(dst, dflt, dl) == 0 && dst[dl] == '/' &&
                strchr(dst + dl + 1, '/') == NULL) {
                if (make_default_dir(a, dflt, err, errlen, &user_fault) != 0) {
                    if (!user_fault)
                        return -1;
                    /* The job's error: this node still joins, and votes it. */
                    snprintf(a->dflt, sizeof(a->dflt), "%s", dflt);
                    snprintf(a->dflt_error, sizeof(a->dflt_error), "%s", err);
                    sh_error("stage", "job %" PRIu64 " user %s: %s", a->in.jobid,
                             a->in.user, err);
                }
                break;
            }
        }
    }

    if (load_mpi_env(a, err, errlen) != 0)
        return -1;
    if (bind_listener(a, err, errlen) != 0) {
        if (errno != EADDRINUSE)
            return -1;
        snprintf(a->port_error, sizeof(a->port_error), "%.900s (too many stagings on "
                 "this node at once: submit again later, or ask the administrator to "
                 "widen port_range)", err);
        sh_warn("stage", "job %" PRIu64 ": %s", a->in.jobid, a->port_error);
    }
    if (sh_key_load_site(a->cfg.key_file, &site) != 0) {
        snprintf(err, errlen, "site key %.512s: %s", a->cfg.key_file, strerror(errno));
        return -1;
    }
    if (sh_key_derive_job(&site, a->in.cluster, a->in.jobid, a->in.stepid,
                          (uint32_t)a->in.uid, a->kjob) != 0) {
        sh_key_wipe(&site, sizeof(site));
        snprintf(err, errlen, "key derivation failed");
        return -1;
    }
    sh_key_wipe(&site, sizeof(site));
    return 0;
}

/* Does this process hold no capability at all (permitted, effective,
 * inheritable; capget(2))? */
static bool no_capabilities(void)
{
    struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

    memset(data, 0xff, sizeof(data));
    if (syscall(SYS_capget, &hdr, data) != 0)
        return false;
    for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
        if (data[i].permitted != 0 || data[i].effective != 0 || data[i].inheritable != 0)
            return false;
    return true;
}

/* initgroups, setgid, setuid, then verify that root cannot be regained and
 * that no capability is left: every listener was bound before
 * (bind_listener), so the user part needs nothing of root. */
int drop_privileges(const struct agent *a, char *err, size_t errlen)
{
    if (initgroups(a->in.user, a->in.gid) != 0 || setgid(a->in.gid) != 0 ||
        setuid(a->in.uid) != 0) {
        snprintf(err, errlen, "cannot become %s (uid %u): %s", a->in.user,
                 (unsigned)a->in.uid, strerror(errno));
        return -1;
    }
    if (getuid() != a->in.uid || geteuid() != a->in.uid || getgid() != a->in.gid ||
        getegid() != a->in.gid ||
        (a->in.uid != 0 && (setuid(0) == 0 || !no_capabilities()))) {
        snprintf(err, errlen, "privilege drop to uid %u did not take", (unsigned)a->in.uid);
        return -1;
    }
    return 0;
}

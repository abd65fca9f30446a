/* stagehand-agent --prolog: one staging of a job's images on this node
 * (DESIGN.md §2 steps 2-7).
 *
 * Root part: read the inputs from the plugin's pipe, create the per-job
 * runtime directory and the per-user default destination directory, read the
 * site key and derive K_job, expand the node list; then drop to the job user
 * for everything else. User part: join the authenticated control tree, let
 * the leader (node 0) check SRC as the user and broadcast its identity, vote
 * (current / needs a copy / error), and, only when some node needs a copy,
 * run the engine under an embedded PMIx server on the participating nodes.
 * The outcome goes back to the plugin on the pipe (stagehand/agentio.h). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "stage.h"
#include "stagehand/bcast.h"
#include "stagehand/agentio.h"
#include "stagehand/config.h"
#include "stagehand/ctl.h"
#include "stagehand/hash.h"
#include "stagehand/key.h"
#include "stagehand/modes.h"
#include "stagehand/kv.h"
#include "stagehand/local.h"
#include "stagehand/log.h"
#include "stagehand/size.h"
#include "stagehand/meta.h"
#include "stagehand/pmix_host.h"
#include "stagehand/spec.h"
#include "stagehand/status.h"

#define MAX_ARGS 64
#define MAX_MPI_ENV 64
#define MAX_INPUT_LINES 256
#define STEP_JOB SH_AGENT_STEP_JOB

/* The engine's exit code for a source error (SH_EXIT_SOURCE in
 * core/engine/report.h), as its JSON summary reports it ("exit_code"). */
#define ENGINE_EXIT_SOURCE 3
#define ENGINE_EXIT_DEST 4      /* a node could not stage DST (engine report.h) */

/* Control-plane message tags. */
enum { TAG_SRC = 1, TAG_VOTE = 2, TAG_RESULT = 3, TAG_READY = 4, TAG_UNREADY = 5 };

struct agent_in {
    unsigned proto;
    uint64_t jobid;
    uint64_t stepid;        /* STEP_JOB for the job prolog's staging */
    uid_t uid;
    gid_t gid;
    char user[256];
    char nodelist[8192];
    char nodename[256];
    char cluster[256];
    char spec[SH_KV_LINE_MAX];
    uint32_t nnodes;        /* Slurm's node count of the job or step; 0: unknown */
    uint32_t nodeid;        /* this node's index in it (have_nodeid) */
    bool have_nodeid;
    bool detached;          /* local=current: the plugin ended the prolog */
    bool have_listener;     /* listener=<fd>: started by the plugin's sentinel,
                             * which bound the job's control-plane port */
    int listener;
    unsigned umask_bits;    /* the job's umask (umask=; SH_UMASK_DEFAULT) */
    int nargs;
    char *args[MAX_ARGS];
};

struct agent {
    struct agent_in in;
    struct sh_config cfg;
    struct sh_spec_set *specs;
    char **names;
    uint32_t nnodes;
    uint32_t index;
    unsigned char kjob[SH_KEY_LEN];
    char rundir[128];       /* /run/stagehand/<jobid> */
    /* The per-user default directory could not be made because of a user's
     * object (make_default_dir): every image under it votes this error, so
     * that all nodes fail the job at once, naming the node and the reason,
     * instead of waiting for this one (join_timeout). */
    char dflt[PATH_MAX];
    char dflt_error[SH_STATUS_LINE_MAX];
    /* Why there is no listener (every probed port held by other stagings):
     * a node that is a leaf of its trees needs none. */
    char port_error[SH_STATUS_LINE_MAX];
    char *mpi_env[MAX_MPI_ENV];   /* "KEY=VALUE" from the site's mpi_env file */
    int n_mpi_env;
    int64_t deadline;
    struct sh_ctl *ctl;
    /* The job's control-plane listener, bound by root before the privilege
     * drop (bind_listener) or handed over by the sentinel, -1 when none:
     * the job's tree and every image's engine tree take a copy in turn. */
    int listener;
    FILE *out;               /* the pipe to the plugin */
    /* outcome */
    bool failed;
    bool node_fault;
    bool own_fault;          /* this node's own engine crashed (not the known
                              * start-up crash) or a local step failed with
                              * a node-fault errno: on_node_fault applies */
    char message[SH_STATUS_LINE_MAX];
};

static FILE *proto_out;

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Agent log lines travel to the plugin, which puts them in the slurmd log. */
static void pipe_sink(enum sh_log_level level, const char *line)
{
    if (proto_out != NULL) {
        sh_kv_put(proto_out, level == SH_LOG_DEBUG ? SH_AGENT_OUT_DEBUG : SH_AGENT_OUT_LOG,
                  line);
        fflush(proto_out);
    } else {
        fprintf(stderr, "%s\n", line);
    }
}

/* A detached agent's log (local=current): nobody reads its pipe any more, so
 * its lines go to syslog(3), facility daemon, as "stagehand-agent". */
static void syslog_sink(enum sh_log_level level, const char *line)
{
    syslog(level == SH_LOG_DEBUG ? LOG_DEBUG
           : level == SH_LOG_INFO ? LOG_INFO
           : level == SH_LOG_WARN ? LOG_WARNING : LOG_ERR, "%s", line);
}

static void set_failure(struct agent *a, bool node_fault, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_failure(struct agent *a, bool node_fault, const char *fmt, ...)
{
    va_list ap;

    if (a->failed)
        return; /* keep the first cause */
    a->failed = true;
    a->node_fault = node_fault;
    va_start(ap, fmt);
    vsnprintf(a->message, sizeof(a->message), fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------- inputs -- */

static int copy_in(char *dst, size_t len, const char *value)
{
    if (strlen(value) >= len)
        return -1;
    memcpy(dst, value, strlen(value) + 1);
    return 0;
}

static int read_inputs(FILE *f, struct agent_in *in, char *err, size_t errlen)
{
    char line[SH_KV_LINE_MAX];
    int lines = 0;
    bool ended = false;
    uint64_t v = 0;

    memset(in, 0, sizeof(*in));
    in->stepid = STEP_JOB;
    in->uid = (uid_t)-1;
    in->gid = (gid_t)-1;
    in->umask_bits = SH_UMASK_DEFAULT;
    while (!ended && lines++ < MAX_INPUT_LINES && fgets(line, sizeof(line), f) != NULL) {
        char *key, *value;
        int bad = 0;

        if (strcmp(line, SH_AGENT_IN_END "\n") == 0) {
            ended = true;
            break;
        }
        if (sh_kv_split(line, &key, &value) != 0) {
            snprintf(err, errlen, "malformed input line");
            return -1;
        }
        if (strcmp(key, SH_AGENT_IN_VERSION) == 0) {
            bad = sh_parse_u64(value, &v) != 0;
            in->proto = (unsigned)v;
        } else if (strcmp(key, SH_AGENT_IN_JOBID) == 0) {
            bad = sh_parse_u64(value, &in->jobid) != 0;
        } else if (strcmp(key, SH_AGENT_IN_STEPID) == 0) {
            bad = sh_parse_u64(value, &in->stepid) != 0 || in->stepid >= STEP_JOB;
        } else if (strcmp(key, SH_AGENT_IN_UID) == 0) {
            bad = sh_parse_u64(value, &v) != 0 || v >= UINT32_MAX;
            in->uid = (uid_t)v;
        } else if (strcmp(key, SH_AGENT_IN_GID) == 0) {
            bad = sh_parse_u64(value, &v) != 0 || v >= UINT32_MAX;
            in->gid = (gid_t)v;
        } else if (strcmp(key, SH_AGENT_IN_USER) == 0) {
            bad = copy_in(in->user, sizeof(in->user), value);
        } else if (strcmp(key, SH_AGENT_IN_NODELIST) == 0) {
            bad = copy_in(in->nodelist, sizeof(in->nodelist), value);
        } else if (strcmp(key, SH_AGENT_IN_NODENAME) == 0) {
            bad = copy_in(in->nodename, sizeof(in->nodename), value);
        } else if (strcmp(key, SH_AGENT_IN_CLUSTER) == 0) {
            bad = copy_in(in->cluster, sizeof(in->cluster), value);
        } else if (strcmp(key, SH_AGENT_IN_SPEC) == 0) {
            bad = copy_in(in->spec, sizeof(in->spec), value);
        } else if (strcmp(key, SH_AGENT_IN_NNODES) == 0) {
            bad = sh_parse_u64(value, &v) != 0 || v == 0 || v > SH_AGENT_MAX_NODES;
            in->nnodes = (uint32_t)v;
        } else if (strcmp(key, SH_AGENT_IN_NODEID) == 0) {
            bad = sh_parse_u64(value, &v) != 0 || v >= SH_AGENT_MAX_NODES;
            in->nodeid = (uint32_t)v;
            in->have_nodeid = !bad;
        } else if (strcmp(key, SH_AGENT_IN_LOCAL) == 0) {
            bad = strcmp(value, "current") != 0;
            in->detached = !bad;
        } else if (strcmp(key, SH_AGENT_IN_LISTENER) == 0) {
            bad = sh_parse_u64(value, &v) != 0 || v <= STDERR_FILENO || v > 1023;
            in->listener = (int)v;
            in->have_listener = !bad;
        } else if (strcmp(key, SH_AGENT_IN_UMASK) == 0) {
            bad = sh_parse_mode(value, &in->umask_bits) != 0;
        } else if (strcmp(key, SH_AGENT_IN_ARG) == 0) {
            if (in->nargs >= MAX_ARGS || (in->args[in->nargs] = strdup(value)) == NULL)
                bad = 1;
            else
                in->nargs++;
        }
        if (bad) {
            snprintf(err, errlen, "bad input '%s'", key);
            return -1;
        }
    }
    if (!ended) {
        snprintf(err, errlen, "input ended without '%s'", SH_AGENT_IN_END);
        return -1;
    }
    if (in->proto != SH_AGENT_PROTO_VERSION) {
        snprintf(err, errlen, "plugin speaks agent protocol %u, this agent %d: "
                 "install the same stagehand version on every node", in->proto,
                 SH_AGENT_PROTO_VERSION);
        return -1;
    }
    if (in->jobid == 0 || in->uid == (uid_t)-1 || in->gid == (gid_t)-1 ||
        in->user[0] == '\0' || in->nodelist[0] == '\0' || in->nodename[0] == '\0' ||
        in->spec[0] == '\0') {
        snprintf(err, errlen, "incomplete input (jobid, uid, gid, user, "
                 "nodelist, nodename and spec are required)");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------- root set-up -- */

/* "name (uid N)" for @uid into @buf. */
static void owner_name(uid_t uid, char *buf, size_t len)
{
    struct passwd pw, *pwr = NULL;
    char pwbuf[4096];

    if (getpwuid_r(uid, &pw, pwbuf, sizeof(pwbuf), &pwr) == 0 && pwr != NULL)
        snprintf(buf, len, "%.64s (uid %u)", pw.pw_name, (unsigned)uid);
    else
        snprintf(buf, len, "uid %u", (unsigned)uid);
}

/* errno of a node's own failure that means the node is unwell (stagehand(8),
 * FAILURE POLICY: a local I/O error, DST's filesystem read-only or corrupted, a device
 * or mount gone), not the user's doing (permissions, quota, another run
 * holding the lock). A full filesystem or memory pressure is no broken
 * node: a user can fill a node's DST filesystem (or its memory, under
 * tmpfs) with files of their own, so these are the job's errors
 * (resource_errno; security issue 30). */
static bool node_fault_errno(int e)
{
    return e == EROFS || e == EIO || e == EUCLEAN || e == ENODEV || e == ENXIO;
}

/* errno of a resource a node ran out of (DST's filesystem full, a quota,
 * memory): the job's error, which the slurmd log also names for the
 * administrator. */
static bool resource_errno(int e)
{
    return e == ENOSPC || e == EDQUOT || e == ENOMEM;
}

/* Create the per-user default destination directory (e.g. /nvme/stage/alice)
 * as root: the directories above it root-owned 0755 (sh_root_dirs_make; the
 * plugin made the fixed part when slurmd started), the last the user's
 * (0700). Never follows a symlink, never changes another's object. Returns
 * 0, or -1 with the reason in @err; *@user_fault is set when the cause is an
 * object a user made where root's directory goes, or a per-user directory
 * that is not the job user's: a job error that names the path and owner,
 * never a node fault (security issue 30 item 3), and so is a full
 * filesystem or memory pressure (ENOSPC, EDQUOT, ENOMEM: a user can fill
 * it); otherwise (the allowed root missing, EROFS, EIO) the node is at
 * fault. */
static int make_default_dir(const struct agent *a, const char *dir, char *err,
                            size_t errlen, bool *user_fault)
{
    const char *root = sh_config_allowed_root(&a->cfg, dir);
    struct sh_root_dir_problem bad;
    char parent[PATH_MAX], owner[128];
    const char *base;
    struct stat sb;
    char *slash;
    int fd, nfd, e;

    *user_fault = false;
    memset(&sb, 0, sizeof(sb));
    if (root == NULL) {
        snprintf(err, errlen, "default destination %s is not under an allowed root", dir);
        errno = EINVAL;
        return -1;
    }
    snprintf(parent, sizeof(parent), "%s", dir);
    slash = strrchr(parent, '/');
    if (slash == NULL || slash == parent) {
        snprintf(err, errlen, "default destination %s has no parent directory", dir);
        errno = EINVAL;
        return -1;
    }
    *slash = '\0';
    base = dir + (slash - parent) + 1;
    fd = sh_root_dirs_make(root, parent, 0755, &bad);
    if (fd < 0) {
        e = errno;
        if (e == EPERM || e == ENOTDIR || e == ELOOP) {
            *user_fault = true;
            owner_name(bad.uid, owner, sizeof(owner));
            snprintf(err, errlen, "%.512s, where stagehand keeps the default destinations, "
                     "is %s, owner %s: a user may have made it before root did; stagehand "
                     "does not use it: ask the administrator to remove it", bad.path,
                     bad.what != NULL ? bad.what : "not a root-owned directory", owner);
        } else {
            /* full or out of memory: the job's error (a user may fill it) */
            *user_fault = resource_errno(e);
            snprintf(err, errlen, "default destination %s: %s: %s%s", dir,
                     bad.path[0] != '\0' ? bad.path : root, strerror(e),
                     e == ENOMEM ? " (out of memory)" : resource_errno(e) ?
                     " (the filesystem is full)" : "");
        }
        errno = e;
        return -1;
    }
    nfd = sh_make_owned_dir(fd, base, a->in.uid, a->in.gid, 0700);
    e = errno;
    if (nfd < 0 && (e == EPERM || e == ENOTDIR || e == ELOOP || e == EEXIST)) {
        *user_fault = true;
        if (fstatat(fd, base, &sb, AT_SYMLINK_NOFOLLOW) == 0)
            owner_name(sb.st_uid, owner, sizeof(owner));
        else
            snprintf(owner, sizeof(owner), "unknown");
        snprintf(err, errlen, "default destination %s is %s, owner %s, not a directory "
                 "of %s's own: ask the administrator to remove it", dir,
                 S_ISLNK(sb.st_mode) ? "a symbolic link" : S_ISDIR(sb.st_mode) ?
                 "a directory" : "not a directory", owner, a->in.user);
    } else if (nfd < 0) {
        *user_fault = resource_errno(e);
        snprintf(err, errlen, "default destination %s: %s%s", dir, strerror(e),
                 e == ENOMEM ? " (out of memory)" : resource_errno(e) ?
                 " (the filesystem is full)" : "");
    }
    close(fd);
    if (nfd < 0) {
        errno = e;
        return -1;
    }
    close(nfd);
    return 0;
}

/* Read the site's mpi_env file (plugstack mpi_env=; F22: transport and
 * interface selection for the engine): "KEY=VALUE" lines, '#' comments and
 * blank lines. Only OMPI_MCA_*, UCX_* and PMIX_MCA_* keys are accepted, so
 * the file cannot change anything but the MPI stack. Read as root (an
 * admin's file). Returns 0, or -1 with the reason in @err. */
static int load_mpi_env(struct agent *a, char *err, size_t errlen)
{
    static const char *const prefixes[] = { "OMPI_MCA_", "UCX_", "PMIX_MCA_" };
    char line[1024];
    int lineno = 0;
    FILE *f;

    if (a->cfg.mpi_env[0] == '\0')
        return 0;
    f = fopen(a->cfg.mpi_env, "re");
    if (f == NULL) {
        snprintf(err, errlen, "stagehand is misconfigured on this cluster: mpi_env=%.400s: %s",
                 a->cfg.mpi_env, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char *p = line, *eq;
        size_t klen;
        bool known = false;

        lineno++;
        line[strcspn(line, "\n")] = '\0';
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0' || *p == '#')
            continue;
        eq = strchr(p, '=');
        klen = eq != NULL ? (size_t)(eq - p) : 0;
        for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
            known = known || (klen > strlen(prefixes[i]) &&
                              strncmp(p, prefixes[i], strlen(prefixes[i])) == 0);
        for (size_t i = 0; known && i < klen; i++)
            known = (p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= 'a' && p[i] <= 'z') ||
                    (p[i] >= '0' && p[i] <= '9') || p[i] == '_';
        for (const char *v = eq != NULL ? eq + 1 : ""; known && *v != '\0'; v++)
            known = (unsigned char)*v >= 0x20 && *v != 0x7f;
        if (!known || a->n_mpi_env >= MAX_MPI_ENV) {
            snprintf(err, errlen, "stagehand is misconfigured on this cluster: mpi_env=%.400s "
                     "line %d: %s", a->cfg.mpi_env, lineno,
                     a->n_mpi_env >= MAX_MPI_ENV ? "more than 64 settings"
                     : "expected KEY=VALUE with an OMPI_MCA_, UCX_ or PMIX_MCA_ key");
            fclose(f);
            return -1;
        }
        a->mpi_env[a->n_mpi_env] = strdup(p);
        if (a->mpi_env[a->n_mpi_env] == NULL) {
            snprintf(err, errlen, "out of memory");
            fclose(f);
            return -1;
        }
        a->n_mpi_env++;
    }
    fclose(f);
    return 0;
}

/* Is the KEY of "KEY=VALUE" @setting set by the site's mpi_env? */
static bool mpi_env_has(const struct agent *a, const char *setting)
{
    size_t len = strcspn(setting, "=");

    for (int i = 0; i < a->n_mpi_env; i++)
        if (strncmp(a->mpi_env[i], setting, len) == 0 && a->mpi_env[i][len] == '=')
            return true;
    return false;
}

/* The root part of the set-up. Returns 0, or -1 with the reason in @err: a
 * node fault (its runtime directory, disk, site key or mpi_env file). What a
 * user caused is no node fault (security issue 30 item 3): a user's object
 * in the way of the default directory is recorded in @a->dflt_error, logged
 * for the administrator, and becomes this node's vote for the images that
 * use it (stage_image_run), so the job fails with it on every node. */
/* The control-tree step id of image @img's engine tree: a tree of its own
 * per image (its handshakes and frames are its own), on the job's listener. */
static uint64_t image_tree_step(const struct agent *a, size_t img)
{
    return a->in.stepid ^ ((uint64_t)(img + 1) << 40);
}

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

/* Does node @index of @n, in a control tree of fanout @fanout (0: the
 * default), need a listener: has it children? */
static bool needs_listener(uint32_t index, uint32_t n, uint32_t fanout)
{
    uint64_t k = fanout != 0 ? fanout : SH_CTL_FANOUT_DEFAULT;

    return k * index + 1 < n;
}

/* Hand the tree @cc (index and size set) the staging's listener; without one
 * (a->port_error), a leaf joins as a client only, and any other node fails
 * with the reason in @err: the job's failure, never a node fault. Returns
 * 0 or -1. */
static int tree_listener(const struct agent *a, struct sh_ctl_cfg *cc, char *err,
                         size_t errlen)
{
    if (a->listener >= 0) {
        cc->inherit_listener = true;
        cc->listen_fd = dup(a->listener);
        return 0;
    }
    cc->inherit_listener = false;
    cc->listen_fd = -1;
    if (!needs_listener(cc->index, cc->nnodes, cc->fanout))
        return 0;
    snprintf(err, errlen, "%s", a->port_error);
    return -1;
}

/* Root's part of a staging: the runtime directory, the user's default
 * directory, Open MPI's environment, the control-plane listener and the job
 * key. Without a free control-plane port (every probed port held by other
 * stagings, which users can start and stop) it goes on without a listener,
 * the reason in a->port_error: a leaf of the control trees needs none
 * (needs_listener). Returns 0, or -1 with the reason in @err. */
static int root_setup(struct agent *a, char *err, size_t errlen)
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
static int drop_privileges(const struct agent *a, char *err, size_t errlen)
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

/* ---------------------------------------------------------- staging -- */

/* F02: a marker file per node in DST's directory, created before a barrier
 * and looked for after it. statfs alone cannot tell that a bind-mounted
 * local filesystem is shared; seeing another node's marker can. */
static void marker_name(const struct agent *a, size_t img, const char *node,
                        char *out, size_t len)
{
    snprintf(out, len, ".stagehand-marker.%" PRIu64 ".%" PRIu64 ".%zu.%.64s",
             a->in.jobid, a->in.stepid, img, node);
}

static int marker_create(const struct agent *a, size_t img, const char *dir)
{
    char name[NAME_MAX + 1];
    int dfd, fd;

    marker_name(a, img, a->in.nodename, name, sizeof(name));
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return -1;
    fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    close(dfd);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

static void marker_remove(const struct agent *a, size_t img, const char *dir)
{
    char path[PATH_MAX], name[NAME_MAX + 1];

    marker_name(a, img, a->in.nodename, name, sizeof(name));
    if (snprintf(path, sizeof(path), "%s/%s", dir, name) < (int)sizeof(path))
        unlink(path);
}

/* Another node's marker for this image in @dir: its node name into @who. */
static bool marker_foreign(const struct agent *a, size_t img, const char *dir,
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
static void claim_write(const struct agent *a, size_t img, const char *dst,
                        const char *text, int n)
{
    if (sh_claim_write(a->rundir, img, text, n) != 0)
        sh_warn("stage", "cannot record the use of %s in %s: %s (other jobs of this "
                "user are not kept from replacing it)", dst, a->rundir, strerror(errno));
}

/* Remove what this node's engine of this job left next to @dst when it was
 * killed (SIGKILL leaves it no chance): ".<name>.stage.<jobid>.<node>.<pid>
 * .tmp" (the engine's temp names, core/common/publish.c). Runs as the job
 * user; never follows links (unlinkat on names read from the directory). */
static void sweep_own_temps(const struct agent *a, const char *dst)
{
    char dir[PATH_MAX], prefix[NAME_MAX + 1];
    const char *base = strrchr(dst, '/');
    struct dirent *de;
    size_t plen;
    DIR *d;

    if (base == NULL)
        return;
    snprintf(dir, sizeof(dir), "%.*s", (int)(base - dst), dst);
    if (snprintf(prefix, sizeof(prefix), ".%s.stage.%" PRIu64 ".%s.", base + 1,
                 a->in.jobid, a->in.nodename) >= (int)sizeof(prefix))
        return;
    plen = strlen(prefix);
    d = opendir(dir[0] != '\0' ? dir : "/");
    if (d == NULL)
        return;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);

        if (len > plen + 4 && strncmp(de->d_name, prefix, plen) == 0 &&
            strcmp(de->d_name + len - 4, ".tmp") == 0) {
            if (unlinkat(dirfd(d), de->d_name, 0) == 0)
                sh_info("stage", "removed %s/%s left by this node's engine", dir,
                        de->d_name);
        }
    }
    closedir(d);
}

/* PMIx fences Open MPI 4.1's MPI_Init performs (the modex and the closing
 * barrier). The engine's own barrier right after MPI_Init (engine/wireup.c)
 * and MPI_Finalize's come after these. */
#define MPI_INIT_FENCES 2

/* The line our engine wrote to its log (@path) when a user's process sent
 * it a crash signal (SH_ENGINE_EXIT_KILLED): what follows the engine's tag
 * "[signal] ", up to the line's end, into @buf ("" when there is none). */
static void engine_killed_line(const char *path, char *buf, size_t len)
{
    static const char tag[] = "stagehand-bcast: [signal] ";
    char line[512];
    FILE *f = fopen(path, "r");

    buf[0] = '\0';
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *p = strstr(line, tag);

        if (p != NULL) {
            p += sizeof(tag) - 1;
            snprintf(buf, len, "%.*s", (int)strcspn(p, ";\n"), p);
        }
    }
    fclose(f);
}

/* waitpid(2) status @st: killed by a signal that means a crash (not one
 * sent to stop it: SIGTERM/SIGKILL come from the deadline, from a peer's
 * failure, or from outside). */
static bool crash_signal(int st)
{
    return WIFSIGNALED(st) &&
           (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS || WTERMSIG(st) == SIGILL ||
            WTERMSIG(st) == SIGABRT || WTERMSIG(st) == SIGFPE);
}

/* An engine died of a crash signal before MPI_Init completed on every node:
 * nothing was read or written yet, so one retry with a fresh namespace is
 * worth it. Every agent sees the same outcome, so all decide alike. The
 * crash this retry was written for (Open MPI 4.1.4 segfaulting in MPI_Init)
 * was later traced to srun launches, where Slurm 22.05 completes MPI_Init's
 * closing fence on each node alone (engine/wireup.c); this agent's fences
 * span all nodes, so here the retry is a safety net. Returns the crashing
 * node's index or -1. */
static int startup_crash(const struct sh_pmix_outcome *po, int *sig)
{
    if (po->fences >= MPI_INIT_FENCES || po->node_status == NULL)
        return -1;
    for (uint32_t i = 0; i < po->nnodes; i++) {
        int st = po->node_status[i];

        if (st >= 0 && crash_signal(st)) {
            *sig = WTERMSIG(st);
            return (int)i;
        }
    }
    return -1;
}

/* The engine's namespace from the sub-tree's root (@nspace there, NULL
 * elsewhere), and every participant's readiness: @unready is why this node
 * cannot run an engine ("" when it can). Returns 0 with the namespace in *@ns
 * (malloc'ed). Returns -1 with errno 0 when a participant is not ready: @err
 * names it and its reason, the same text on every participant; or -1 with
 * errno as sh_ctl_allgather, or EPROTO for no namespace, and @err saying
 * so. */
static int exchange_nspace(struct sh_ctl *sub, const char *nspace, const char *unready,
                           char **ns, int64_t deadline, char *err, size_t errlen)
{
    struct sh_ctl_result res;
    const char *mine = unready[0] != '\0' ? unready : nspace != NULL ? nspace : "";
    size_t o = 0;
    int e;

    memset(&res, 0, sizeof(res));
    if (sh_ctl_allgather(sub, unready[0] != '\0' ? TAG_UNREADY : TAG_READY, mine,
                         (uint32_t)strlen(mine) + 1, deadline, &res) != 0) {
        e = errno;
        snprintf(err, errlen, "PMIx namespace exchange: %s", strerror(e));
        errno = e;
        return -1;
    }
    err[0] = '\0';
    for (uint32_t i = 0; i < res.nnodes && o + 1 < errlen; i++) {
        const struct sh_ctl_entry *en = &res.entry[i];

        if (en->state == SH_CTL_OK && en->tag == TAG_UNREADY && en->len > 0 &&
            en->data[en->len - 1] == '\0') {
            int n = snprintf(err + o, errlen - o, "%s%s: %s", o > 0 ? "; " : "",
                             sh_ctl_name(sub, i), (const char *)en->data);
            o = n > 0 ? o + (size_t)n : o;
        }
    }
    if (o > 0) {
        sh_ctl_result_free(&res);
        errno = 0;
        return -1;
    }
    if (res.nnodes == 0 || res.entry[0].state != SH_CTL_OK || res.entry[0].len < 2 ||
        res.entry[0].data[res.entry[0].len - 1] != '\0') {
        sh_ctl_result_free(&res);
        snprintf(err, errlen, "PMIx namespace: none from %s", sh_ctl_name(sub, 0));
        errno = EPROTO;
        return -1;
    }
    *ns = (char *)res.entry[0].data;
    res.entry[0].data = NULL;
    res.entry[0].len = 0;
    sh_ctl_result_free(&res);
    return 0;
}

/* Run the engine for one image on the participants. @part lists node
 * indices (node 0 first); this node is @part[mypos]. */
static int run_engine(struct agent *a, size_t img, const uint32_t *part,
                      uint32_t npart, uint32_t mypos, bool *outcome, char *err,
                      size_t errlen)
{
    struct sh_ctl_cfg cc;
    struct sh_ctl *sub = NULL;
    struct sh_pmix_outcome po;
    const struct sh_pmix_ops *px;
    const char **names = NULL;
    char nspace[128] = "", segsz[32], depth[32], tmo[32], ranks[16], stall[32], rahead[16];
    char dirmode[16];
    char env_jobid[64], env_jobid2[64], env_nodelist[8300], env_step[64], env_tmp[PATH_MAX + 8];
    char env_src[PATH_MAX + 32], env_dst[PATH_MAX + 32];
    char outpath[PATH_MAX], logpath[PATH_MAX], pmixdir[PATH_MAX];
    char lerr[512] = "";
    char *ns = NULL;
    int rc = -1, outfd, logfd, saved_out, saved_err, attempt = 0, crashed, sig = 0;
    int run_errno = 0;
    uint64_t secs;

    /* This node runs an engine: now, and only now, the PMIx host. A node
     * that cannot load it still joins the engine's tree and says so in the
     * namespace exchange below, so the others stop at once instead of
     * waiting for its engine until the staging deadline. */
    px = sh_pmix_load(lerr, sizeof(lerr));
    if (px == NULL)
        a->own_fault = true; /* this node's installation */
    names = calloc(npart, sizeof(*names));
    if (names == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < npart; i++)
        names[i] = a->names[part[i]];
    memset(&cc, 0, sizeof(cc));
    cc.nnodes = npart;
    cc.index = mypos;
    cc.fanout = a->cfg.fanout;
    cc.names = names;
    cc.port_base = a->cfg.port_base;
    cc.port_range = a->cfg.port_range;
    cc.jobid = a->in.jobid;
    cc.stepid = image_tree_step(a, img);
    cc.kjob = a->kjob;
    /* The job's listener (bind_listener), with the job's ports. */
    if (tree_listener(a, &cc, err, errlen) != 0) {
        char why[SH_STATUS_LINE_MAX];

        snprintf(why, sizeof(why), "%s", err);
        snprintf(err, errlen, "engine control tree: %.3000s", why);
        goto out;
    }
    cc.port_stepid_set = true;
    cc.port_stepid = a->in.stepid;
    if (sh_ctl_join(&cc, a->deadline, &sub) != 0) {
        snprintf(err, errlen, "engine control tree: %s", strerror(errno));
        goto out;
    }
again:
    free(ns);
    ns = NULL;
    if (mypos == 0 && px != NULL &&
        px->make_nspace(a->in.jobid, nspace, sizeof(nspace)) != 0)
        snprintf(lerr, sizeof(lerr), "PMIx namespace: %s", strerror(errno));
    if (exchange_nspace(sub, mypos == 0 ? nspace : NULL, lerr, &ns, a->deadline, err,
                        errlen) != 0) {
        *outcome = errno == 0; /* the same text on every participant */
        goto out;
    }
    if (px == NULL) { /* its entry reached the root too late: failed all the same */
        snprintf(err, errlen, "%s", lerr);
        goto out;
    }

    snprintf(pmixdir, sizeof(pmixdir), "%s/pmix.%zu.%d", a->rundir, img, attempt);
    if (mkdir(pmixdir, 0700) != 0 && errno != EEXIST) {
        a->own_fault = node_fault_errno(errno);
        snprintf(err, errlen, "%.512s: %s", pmixdir, strerror(errno));
        goto out;
    }
    secs = (uint64_t)((a->deadline - now_ns()) / 1000000000);
    if (secs < 1)
        secs = 1;
    snprintf(segsz, sizeof(segsz), "%" PRIu64, a->cfg.segment_size);
    snprintf(ranks, sizeof(ranks), "%u", npart);
    snprintf(stall, sizeof(stall), "%" PRIu64 "ms", a->cfg.stall_timeout_ns / 1000000);
    snprintf(depth, sizeof(depth), "%u", a->cfg.pipeline_depth);
    snprintf(rahead, sizeof(rahead), "%u", a->cfg.read_ahead);
    snprintf(dirmode, sizeof(dirmode), "%04o", a->cfg.dest_dir_mode);
    snprintf(tmo, sizeof(tmo), "%" PRIu64 "s", secs);
    snprintf(env_jobid, sizeof(env_jobid), "SLURM_JOBID=%" PRIu64, a->in.jobid);
    snprintf(env_jobid2, sizeof(env_jobid2), "SLURM_JOB_ID=%" PRIu64, a->in.jobid);
    snprintf(env_nodelist, sizeof(env_nodelist), "SLURM_NODELIST=%s", a->in.nodelist);
    snprintf(env_step, sizeof(env_step), "SLURM_STEP_ID=%zu", img);
    snprintf(env_tmp, sizeof(env_tmp), "TMPDIR=%s", a->rundir);
    snprintf(env_src, sizeof(env_src), "%s=%s", SH_BCAST_SOURCE_ENV,
             sh_spec_set_src(a->specs, img));
    snprintf(env_dst, sizeof(env_dst), "%s=%s", SH_BCAST_DEST_ENV,
             sh_spec_set_dst(a->specs, img));
    {
        /* SRC and DST in the environment, not on the command line that
         * every user of the node can read (stagehand/bcast.h). */
        const char *argv[] = {
            a->cfg.engine,
            "--check", sh_check_name(a->cfg.check),
            "--hash", sh_hash_name(a->cfg.hash),
            "--segment-size", segsz,
            "--pipeline-depth", depth,
            "--read-ahead", rahead,
            "--timeout", tmo,
            "--json",
            "--expect-ranks", ranks,
            "--stall-timeout", stall,
            "--dir-mode", dirmode,
            "--untraceable",
            NULL,
        };
        /* Open MPI 4.1 needs SLURM_JOBID, SLURM_NODELIST and SLURM_STEP_ID
         * under a foreign PMIx server (measured-facts.md); the site's
         * mpi_env settings come next, then the defaults of the plugstack's
         * pml= that the site did not set. */
        const char *const *pml_env = sh_config_pml_env(a->cfg.pml);
        const char *envp[7 + MAX_MPI_ENV + SH_CONFIG_PML_ENV_MAX + 1];
        size_t ne = 0;

        envp[ne++] = env_src;
        envp[ne++] = env_dst;
        envp[ne++] = env_jobid;
        envp[ne++] = env_jobid2;
        envp[ne++] = env_nodelist;
        envp[ne++] = env_step;
        envp[ne++] = env_tmp;
        for (int i = 0; i < a->n_mpi_env; i++)
            envp[ne++] = a->mpi_env[i];
        for (size_t i = 0; i < SH_CONFIG_PML_ENV_MAX && pml_env[i] != NULL; i++)
            if (!mpi_env_has(a, pml_env[i]))
                envp[ne++] = pml_env[i];
        envp[ne] = NULL;
        struct sh_pmix_cfg pc = {
            .ctl = sub,
            .nspace = (const char *)ns,
            .hosts = names,
            .tmpdir = pmixdir,
            .uid = a->in.uid,
            .gid = a->in.gid,
            .argv = argv,
            .envp = envp,
            .deadline_ns = a->deadline,
            .kill_grace_ns = 0,
            .close_fd = a->listener, /* the host process serves no tree */
        };

        /* The engine's output goes to files in the runtime directory, not
         * into our pipe to the plugin: the JSON summary (stdout) and its log
         * (stderr). PMIx gets a directory of its own (it cleans it up). */
        snprintf(outpath, sizeof(outpath), "%s/engine.%zu.json", a->rundir, img);
        snprintf(logpath, sizeof(logpath), "%s/engine.%zu.log", a->rundir, img);
        outfd = open(outpath, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        saved_out = dup(STDOUT_FILENO);
        saved_err = dup(STDERR_FILENO);
        if (outfd >= 0) {
            dup2(outfd, STDOUT_FILENO);
            close(outfd);
        }
        if (logfd >= 0) {
            dup2(logfd, STDERR_FILENO);
            close(logfd);
        }
        memset(&po, 0, sizeof(po));
        rc = px->run(&pc, &po);
        run_errno = errno;
        if (saved_out >= 0) {
            dup2(saved_out, STDOUT_FILENO);
            close(saved_out);
        }
        if (saved_err >= 0) {
            dup2(saved_err, STDERR_FILENO);
            close(saved_err);
        }
        if (rc != 0 && run_errno == EIO && attempt == 0 &&
            (crashed = startup_crash(&po, &sig)) >= 0 &&
            a->deadline - now_ns() > 10 * (int64_t)1000000000) {
            sh_warn("stage", "%s: the engine on node %s died of signal %d while MPI "
                    "started (before any data moved): starting it again on every node",
                    sh_spec_set_dst(a->specs, img), names[crashed], sig);
            px->outcome_free(&po);
            attempt++;
            goto again;
        }
        if (rc != 0 && po.local_status >= 0 && WIFEXITED(po.local_status) &&
            WEXITSTATUS(po.local_status) == SH_ENGINE_EXIT_KILLED) {
            /* a crash signal from a process of the user (the engine is
             * theirs): the job's error, never a node fault, no restart */
            char line[256];

            engine_killed_line(logpath, line, sizeof(line));
            snprintf(err, errlen, "engine %s", line[0] != '\0' ? line :
                     "killed by a crash signal a user's process sent, not a crash");
            sh_error("stage", "job %" PRIu64 " user %s: %s: the engine on this node was %s "
                     "(a crash signal from a user's process: the job's failure, not the "
                     "node's)", a->in.jobid, a->in.user, sh_spec_set_dst(a->specs, img),
                     line[0] != '\0' ? line : "killed by a crash signal a user's process sent");
            *outcome = false;
        } else if (rc != 0) {
            /* this node's fault (on_node_fault): our own engine crashed, or
             * could not be executed here (exit 127: missing or broken
             * installation); a kill (deadline, a peer's failure) is not */
            if (po.local_status >= 0)
                a->own_fault = a->own_fault ||
                               (run_errno == EIO && crash_signal(po.local_status) &&
                                startup_crash(&po, &sig) < 0) ||
                               (WIFEXITED(po.local_status) &&
                                WEXITSTATUS(po.local_status) == 127);
            /* the outcome names every node already */
            *outcome = po.message[0] != '\0';
            snprintf(err, errlen, "%s", po.message[0] != '\0' ? po.message : strerror(run_errno));
        }
        px->outcome_free(&po);
    }
out:
    free(ns);
    sh_ctl_close(sub);
    free(names);
    return rc;
}

/* The engine's JSON summary has one entry of 200-400 bytes per node: room
 * for some 40,000 nodes, in one buffer (the agent reads one at a time). */
#define ENGINE_JSON_MAX (16u << 20)

/* Read the engine's JSON summary (rank 0 writes it, so only node 0 has it).
 * Returns it in a static buffer, valid until the next call; "" when there is
 * none. */
static const char *engine_json(const struct agent *a, size_t img)
{
    static char buf[ENGINE_JSON_MAX];
    char path[PATH_MAX];
    size_t n;
    FILE *f;

    buf[0] = '\0';
    snprintf(path, sizeof(path), "%s/engine.%zu.json", a->rundir, img);
    f = fopen(path, "r");
    if (f == NULL)
        return buf;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* The number after "key": in @json (first occurrence at or after @from), or
 * @dflt. Our own engine's flat output: no general JSON parser needed. */
static double json_num(const char *json, const char *key, double dflt)
{
    char pat[64];
    const char *p;

    snprintf(pat, sizeof(pat), "\"%s\":", key);
    p = strstr(json, pat);
    return p != NULL ? strtod(p + strlen(pat), NULL) : dflt;
}

/* Copy the string value of "key": found at or after @from into @out. Returns
 * the position after it, or NULL. */
static const char *json_str(const char *from, const char *key, char *out, size_t len)
{
    char pat[64];
    const char *p, *q;
    size_t n;

    snprintf(pat, sizeof(pat), "\"%s\":\"", key);
    p = strstr(from, pat);
    if (p == NULL)
        return NULL;
    p += strlen(pat);
    for (q = p; *q != '\0' && !(*q == '"' && q[-1] != '\\'); q++)
        ;
    n = (size_t)(q - p) < len - 1 ? (size_t)(q - p) : len - 1;
    memcpy(out, p, n);
    out[n] = '\0';
    return *q != '\0' ? q + 1 : q;
}

/* One line per image from the engine's summary: "DST: 2 copied, 1 current of
 * 3 nodes; 1.00 GiB in 4.12 s (248.5 MiB/s)" (or, when every node turned out
 * current, "all 3 nodes current (staged by another run meanwhile), nothing
 * copied"), and, when the engine first waited for another run staging DST
 * (case F03), "; waited 9.8 s for job 57 on n1 staging it". */
static void engine_summary(const char *json, const char *dst, uint32_t nnodes,
                           double secs, char *buf, size_t len)
{
    double copied = json_num(json, "nodes_copied", -1);
    double bytes = json_num(json, "bytes_transferred", 0);
    double waited = json_num(json, "lock_wait_s", 0);
    char size[32], owner[96] = "";
    int n;

    sh_format_size((uint64_t)bytes, size, sizeof(size));
    if (copied < 0) {
        snprintf(buf, len, "%s: staged on %u nodes in %.2f s", dst, nnodes, secs);
        return;
    }
    if (copied == 0)    /* another run staged it since the nodes voted */
        n = snprintf(buf, len, "%s: all %u nodes current (staged by another run "
                     "meanwhile), nothing copied (%.3f s)", dst, nnodes, secs);
    else
        n = snprintf(buf, len, "%s: %.0f copied, %.0f current of %u nodes; %s in %.2f s "
                     "(%.1f MiB/s)", dst, copied, (double)nnodes - copied, nnodes, size,
                     secs, secs > 0 ? bytes / secs / 1048576.0 : 0.0);
    if (waited > 0 && n > 0 && (size_t)n < len) {
        json_str(json, "lock_owner", owner, sizeof(owner));
        snprintf(buf + n, len - (size_t)n, "; waited %.1f s for %s staging it", waited,
                 owner[0] != '\0' ? owner : "another run");
    }
}

/* Debug line with the engine's own phase clock (its JSON "seconds"), so a
 * site at SlurmdDebug=debug sees where a staging's time went. */
static void engine_phases_debug(const char *json)
{
    /* the phase clock is the top-level "seconds" object: "verify" also names
     * an option earlier in the JSON ("verify":"size") */
    const char *sec = strstr(json, "\"seconds\":{");
    char line[256];
    size_t o = 0;

    if (sec == NULL)
        return;
    for (int p = 0; p <= SH_PH_COUNT && o < sizeof(line); p++) {
        const char *name = p < SH_PH_COUNT ? sh_phase_name((enum sh_phase)p) : "total";
        int n = snprintf(line + o, sizeof(line) - o, "%s%s %.3f", p ? ", " : "", name,
                         json_num(sec, name, -1));

        if (n < 0)
            break;
        o += (size_t)n;
    }
    sh_debug("stage", "engine phases (s, reading rank): %s", line);
}

/* Per-node reasons, grouped for a message: nodes with the same reason are
 * named together ("n1, n2: reason; n3: another"), so a cause shared by every
 * node (the source changed, a symlink on every node) is said once. */
#define REASONS_MAX 16

struct reasons {
    size_t n;
    bool more;                      /* distinct reasons beyond REASONS_MAX */
    char nodes[REASONS_MAX][256];
    char text[REASONS_MAX][640];
};

static void reasons_add(struct reasons *r, const char *node, const char *text, size_t tlen)
{
    size_t i, used;

    for (i = 0; i < r->n; i++)
        if (strlen(r->text[i]) == tlen && strncmp(r->text[i], text, tlen) == 0)
            break;
    if (i == r->n) {
        if (r->n == REASONS_MAX) {
            r->more = true;
            return;
        }
        r->nodes[i][0] = '\0';
        snprintf(r->text[i], sizeof(r->text[i]), "%.*s", (int)tlen, text);
        r->n++;
    }
    used = strlen(r->nodes[i]);
    if (used + strlen(node) + 8 < sizeof(r->nodes[i]))
        snprintf(r->nodes[i] + used, sizeof(r->nodes[i]) - used, "%s%s",
                 used > 0 ? ", " : "", node);
    else if (used < 4 || strcmp(r->nodes[i] + used - 4, " ...") != 0)
        snprintf(r->nodes[i] + used, sizeof(r->nodes[i]) - used, " ...");
}

/* "nodes: text; nodes: text" into @buf; returns the length. */
static size_t reasons_format(const struct reasons *r, char *buf, size_t len)
{
    size_t o = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < r->n && o + 1 < len; i++) {
        int n = snprintf(buf + o, len - o, "%s%s: %s", o > 0 ? "; " : "", r->nodes[i],
                         r->text[i]);
        if (n < 0)
            break;
        o = o + (size_t)n < len ? o + (size_t)n : len - 1;
    }
    if (r->more && o + 1 < len) {
        int n = snprintf(buf + o, len - o, "; and other errors (see the slurmd logs)");
        if (n > 0)
            o = o + (size_t)n < len ? o + (size_t)n : len - 1;
    }
    return o;
}

/* "n2: publish: No space left on device; n3: ..." from the engine's per-node
 * results, into @buf (empty when no node reported an error). */
static void engine_failures(const char *json, char *buf, size_t len)
{
    static struct reasons r;
    const char *start = strstr(json, "\"node_results\"");

    memset(&r, 0, sizeof(r));
    buf[0] = '\0';
    /* Pass 0 leaves out nodes that only stopped because another failed ("not
     * copied: another node failed ..."); pass 1, only when no node said why,
     * names them too. */
    for (int pass = 0; pass < 2 && r.n == 0; pass++) {
        const char *p = start;

        while (p != NULL) {
            char node[256], phase[64], error[512], text[640];
            const char *q = json_str(p, "node", node, sizeof(node));
            int n;

            if (q == NULL || json_str(q, "phase", phase, sizeof(phase)) == NULL)
                break;
            p = json_str(q, "error", error, sizeof(error));
            if (p == NULL)
                break;
            if (error[0] == '\0' || (pass == 0 && strncmp(error, "not copied", 10) == 0))
                continue;
            n = snprintf(text, sizeof(text), "%s%s%s", phase, phase[0] != '\0' ? ": " : "",
                         error);
            if (n > 0)
                reasons_add(&r, node, text, strlen(text));
        }
    }
    if (reasons_format(&r, buf, len) == 0) {
        char serr[512];
        if (json_str(json, "source_error", serr, sizeof(serr)) != NULL && serr[0] != '\0')
            snprintf(buf, len, "%s", serr);
    }
}

/* Leader: the participants whose own failure in the engine's summary is a
 * node fault (class DEST with a node-fault errno: a source error or a
 * corrupted stream is never the receiving node's, a full filesystem or
 * memory pressure neither), as node indices "i,j" in @buf ("" for none);
 * the latter are logged as errors naming the node (@names: every node's
 * name by index). Engine rank r is participant @part[r]. */
static void engine_node_faults(const char *json, const uint32_t *part, uint32_t npart,
                               char *const *names, char *buf, size_t len)
{
    const char *q = strstr(json, "\"node_results\"");
    size_t o = 0;

    buf[0] = '\0';
    while (q != NULL && (q = strstr(q, "\"rank\":")) != NULL) {
        /* an entry's fields in the engine's order: rank, errno, exit_class,
         * error (core/engine/report.c) */
        long rank = (long)json_num(q, "rank", -1);
        int err = (int)json_num(q, "errno", 0);
        int cls = (int)json_num(q, "exit_class", -1);
        char error[512];

        q = json_str(q, "error", error, sizeof(error));
        if (q == NULL)
            break;
        if (error[0] != '\0' && cls == ENGINE_EXIT_DEST && resource_errno(err) && rank >= 0 &&
            (uint64_t)rank < npart)
            sh_error("stage", "node %s: %s: %s (the job's error, not a node fault: a "
                     "user's files may fill DST's filesystem, or its memory under tmpfs)",
                     names[part[rank]], err == ENOMEM ? "out of memory" :
                     "DST's filesystem is full", error);
        if (error[0] == '\0' || strncmp(error, "not copied", 10) == 0 ||
            cls != ENGINE_EXIT_DEST || !node_fault_errno(err) || rank < 0 ||
            (uint64_t)rank >= npart)
            continue;
        if (o + 12 >= len) {
            sh_warn("stage", "more nodes at fault than one message lists: only the "
                    "first ones are reported as node faults");
            break;
        }
        o += (size_t)snprintf(buf + o, len - o, "%s%u", o > 0 ? "," : "", part[rank]);
    }
}

/* Is node @index in the comma-separated list @list? */
static bool in_index_list(const char *list, uint32_t index)
{
    for (const char *p = list; *p != '\0';) {
        char *end;
        unsigned long v = strtoul(p, &end, 10);

        if (end == p)
            return false;
        if (v == index)
            return true;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',')
            break;
    }
    return false;
}

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

/* DESIGN.md §2 step 4: MPI traffic is not authenticated, so the reader's
 * digest also travels over the authenticated control plane. After an engine
 * phase every node takes part: the leader (the reader) sends the digest it
 * computed while reading; a node whose new copy records another digest
 * removes that copy and reports it in @buf ("fail ..."). @copied: this node
 * ran the engine and it succeeded. Returns 0, or -1 after set_failure(). */
static int verify_copy_digest(struct agent *a, size_t img, const char *dst, bool copied,
                              int64_t since, char *buf, size_t buflen, int *len)
{
    char ref[SH_HASH_HEX_LEN], mine[SH_HASH_HEX_LEN];
    unsigned char *got = NULL;
    uint32_t glen = 0;

    ref[0] = mine[0] = '\0';
    if (copied)
        dst_digest(a, dst, since, mine);
    if (a->index == 0 && copied) {
        json_str(engine_json(a, img), "digest", ref, sizeof(ref));
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

static void stage_image_run(struct agent *a, size_t img)
{
    const char *src = sh_spec_set_src(a->specs, img);
    const char *dst = sh_spec_set_dst(a->specs, img);
    struct sh_ctl_result votes;
    struct sh_src_id id;
    char buf[SH_STATUS_LINE_MAX], err[SH_STATUS_LINE_MAX], why[1536];
    char claim[2 * PATH_MAX + 128]; /* sh_claim_text: DST, SRC, SRC's identity */
    int clen;
    unsigned char *plan = NULL;
    uint32_t plen = 0, npart = 0, mypos = UINT32_MAX;
    uint32_t *part = NULL;
    enum sh_vote v;
    char mdir[PATH_MAX];
    const char *dir;
    bool made;
    char *planbuf = NULL;
    int rc_plan;
    int64_t t0 = now_ns();
    bool outcome = false, leader_cause = false, source_fault = false, copied = false;
    char faulty[256] = "";   /* leader: node indices at fault ("i,j") */
    int64_t engine_start;
    int len;

    /* 1. every node leaves its marker in DST's directory (F02) while the
     * leader checks SRC as the user; one allgather then gives everyone SRC's
     * identity (the leader's entry) and proves every marker exists. One
     * round trip of the tree instead of a broadcast and an allgather: the
     * no-op path is on every job's start (issue 5). */
    sh_nearest_dir(dst, mdir, sizeof(mdir));
    dir = mdir;
    made = marker_create(a, img, dir) == 0;
    if (a->index == 0) {
        int ok = sh_src_probe(src, &id, err, sizeof(err)) == 0;
        len = sh_src_encode(buf, sizeof(buf), ok, &id, err);
    } else {
        len = 0;
    }
    {
        struct sh_ctl_result first;
        int bad;

        memset(&first, 0, sizeof(first));
        if (sh_ctl_allgather(a->ctl, TAG_SRC, buf, (uint32_t)len, a->deadline, &first) != 0) {
            if (made)
                marker_remove(a, img, dir);
            set_failure(a, false, "lost the control plane (source metadata): %s",
                        strerror(errno));
            return;
        }
        if (first.nnodes == 0 || first.entry[0].state != SH_CTL_OK) {
            snprintf(err, sizeof(err), "no source metadata from the leader node %s",
                     sh_ctl_name(a->ctl, 0));
            bad = 1;
        } else {
            bad = sh_src_decode(first.entry[0].data, first.entry[0].len, src, &id, err,
                             sizeof(err)) != 0;
        }
        sh_ctl_result_free(&first);
        if (bad) {
            if (made)
                marker_remove(a, img, dir);
            set_failure(a, false, "%s", err);
            return;
        }
    }
    clen = sh_claim_text(dst, &id, claim, sizeof(claim));
    claim_write(a, img, dst, claim, clen);

    /* 2. every node votes; first, is DST's directory shared between nodes
     * (F01: a network filesystem; F02: another node's marker is visible)? */
    {
        struct statfs fs;
        char who[256];
        const char *fsname = NULL;

        if (statfs(dir, &fs) == 0)
            fsname = sh_shared_fs_name((long)fs.f_type);
        who[0] = '\0';
        if (a->dflt_error[0] != '\0' && strncmp(dst, a->dflt, strlen(a->dflt)) == 0 &&
            dst[strlen(a->dflt)] == '/') {
            v = SH_VOTE_ERROR; /* make_default_dir: a user's object */
            snprintf(why, sizeof(why), "%.1500s", a->dflt_error);
        } else if (fsname != NULL || marker_foreign(a, img, dir, who, sizeof(who))) {
            v = SH_VOTE_SHARED;
            if (fsname != NULL)
                snprintf(why, sizeof(why), "%.180s is on a %s filesystem", dir, fsname);
            else
                snprintf(why, sizeof(why), "%.150s is shared with node %.40s (its "
                         "marker file is visible here)", dir, who);
        } else {
            char their[PATH_MAX];

            v = sh_dest_vote(&a->cfg, a->in.uid, dst, &id, (mode_t)a->in.umask_bits, why,
                             sizeof(why));
            /* The plugin found DST current for SRC as this node saw it and
             * the job runs on it: this node's copy is not replaced. SRC as
             * the leader saw it differs (it changed in between): fail the
             * image rather than give the nodes different content. */
            if (a->in.detached && v == SH_VOTE_NEED) {
                v = SH_VOTE_ERROR;
                snprintf(why, sizeof(why), "%.400s changed while the job started: this "
                         "node's job runs on the copy that matched it before", src);
            }
            /* Also when DST is current: a job with another claim may be
             * about to replace it (both claims are written before either is
             * looked for, so at least one of two such jobs sees the other). */
            if ((v == SH_VOTE_NEED || v == SH_VOTE_CURRENT) && clen > 0 &&
                sh_claim_conflict(SH_RUNTIME_DIR, a->in.jobid, dst, claim, who,
                                  sizeof(who), their, sizeof(their))) {
                v = SH_VOTE_ERROR;
                snprintf(why, sizeof(why), "%.400s is in use by job %.32s, which staged "
                         "it from %.400s (another source, or the same one before it "
                         "changed): replacing it would change that job's image; stage to "
                         "another destination, or wait until job %.32s ends", dst, who,
                         their, who);
            }
        }
    }
    len = snprintf(buf, sizeof(buf), "%d %s", (int)v, why);
    memset(&votes, 0, sizeof(votes));
    if (sh_ctl_gather(a->ctl, TAG_VOTE, buf, (uint32_t)len, a->deadline, &votes) != 0) {
        if (made)
            marker_remove(a, img, dir);
        set_failure(a, false, "lost the control plane (votes): %s", strerror(errno));
        return;
    }
    /* 3. the leader plans: node 0 reads; nodes that need a copy receive. */
    if (a->index == 0) {
        char missing[512];

        static struct reasons r;

        /* A node that cannot take the copy (sh_dest_vote: DST's place) fails
         * the image, naming the node and the reason. */
        memset(&r, 0, sizeof(r));
        for (uint32_t i = 0; i < votes.nnodes; i++) {
            const struct sh_ctl_entry *e = &votes.entry[i];

            if (e->state == SH_CTL_OK && e->len > 2 &&
                (e->data[0] - '0' == SH_VOTE_ERROR ||
                 (e->data[0] - '0' == SH_VOTE_SHARED && !a->cfg.allow_shared_dst)))
                reasons_add(&r, sh_ctl_name(a->ctl, i), (const char *)e->data + 2,
                            e->len - 2);
        }
        if (r.n > 0) {
            bool shared = false;

            for (uint32_t i = 0; i < votes.nnodes; i++)
                shared = shared || (votes.entry[i].state == SH_CTL_OK &&
                                    votes.entry[i].len > 0 &&
                                    votes.entry[i].data[0] - '0' == SH_VOTE_SHARED);
            memcpy(buf, "fail ", 5);
            len = (int)(5 + reasons_format(&r, buf + 5, sizeof(buf) - 5));
            if (shared && (size_t)len < sizeof(buf) - 1)
                len += snprintf(buf + len, sizeof(buf) - (size_t)len,
                                " (a shared destination would be written by every node "
                                "at once: stage to node-local storage; the site can set "
                                "allow_shared_dst=yes)");
            if (len >= (int)sizeof(buf))
                len = (int)sizeof(buf) - 1;
        } else if (sh_ctl_format_missing(a->ctl, &votes, missing, sizeof(missing)) > 0) {
            /* No other node of a job's prolog ever came: most likely the
             * prolog runs on the batch node only (DESIGN.md §2 step 8). */
            len = snprintf(buf, sizeof(buf), "fail %s%s", missing,
                           a->in.stepid == STEP_JOB && a->nnodes > 1 &&
                                   votes.nmissing == a->nnodes - 1
                               ? " (is PrologFlags=Alloc set in slurm.conf? without it "
                                 "the job prolog runs on the batch node only)"
                               : "");
        } else {
            /* "plan i j ...": every participant's index (node 0 reads); the
             * list grows with N, so it has a buffer of its own. With
             * allow_shared_dst, a shared destination is node 0's copy. */
            size_t cap = 16 + 11 * (size_t)votes.nnodes, o;
            uint32_t needs = 0;

            planbuf = malloc(cap);
            if (planbuf == NULL) {
                len = snprintf(buf, sizeof(buf), "fail out of memory on the leader");
            } else {
                o = (size_t)snprintf(planbuf, cap, "plan");
                for (uint32_t i = 0; i < votes.nnodes; i++) {
                    int vv = votes.entry[i].len > 0 ? votes.entry[i].data[0] - '0'
                                                    : SH_VOTE_NEED;
                    if (vv == SH_VOTE_NEED || (vv == SH_VOTE_SHARED && i == 0))
                        needs++;
                    if (i == 0 || vv == SH_VOTE_NEED)
                        o += (size_t)snprintf(planbuf + o, cap - o, " %u", i);
                }
                if (needs == 0) {
                    free(planbuf);
                    planbuf = NULL;
                    len = snprintf(buf, sizeof(buf), "noop");
                } else {
                    len = (int)o;
                }
            }
        }
        sh_ctl_result_free(&votes);
    } else {
        len = 0;
    }
    rc_plan = sh_ctl_bcast(a->ctl, planbuf != NULL ? planbuf : buf, (uint32_t)len, &plan,
                           &plen, a->deadline);
    free(planbuf);
    /* The root sends the plan only after every vote came in, so every node
     * has looked for markers by now. */
    if (made)
        marker_remove(a, img, dir);
    if (rc_plan != 0) {
        set_failure(a, false, "lost the control plane (plan): %s", strerror(errno));
        return;
    }
    {
        char *text = malloc((size_t)plen + 1);

        if (text == NULL) {
            free(plan);
            set_failure(a, false, "out of memory on %s", a->in.nodename); /* not a node fault */
            return;
        }
        memcpy(text, plan, plen);
        text[plen] = '\0';
        free(plan);
        if (strncmp(text, "fail ", 5) == 0) {
            set_failure(a, false, "image %s: %.900s", dst, text + 5);
            free(text);
            return;
        }
        if (strcmp(text, "noop") == 0) {
            free(text);
            snprintf(buf, sizeof(buf), "%s: all %u nodes current, nothing copied (%.3f s)",
                     dst, a->nnodes, (double)(now_ns() - t0) / 1e9);
            sh_kv_put(a->out, SH_AGENT_OUT_SUMMARY, buf);
            sh_info("stage", "%s", buf);
            return;
        }
        part = calloc(a->nnodes, sizeof(*part));
        if (part == NULL) {
            free(text);
            set_failure(a, false, "out of memory on %s", a->in.nodename); /* not a node fault */
            return;
        }
        for (char *tok = strtok(text + 4, " "); tok != NULL; tok = strtok(NULL, " ")) {
            uint64_t x;
            if (sh_parse_u64(tok, &x) == 0 && x < a->nnodes && npart < a->nnodes) {
                if ((uint32_t)x == a->index)
                    mypos = npart;
                part[npart++] = (uint32_t)x;
            }
        }
        free(text);
    }

    /* 4. participants run the engine; everyone then agrees on the result. */
    err[0] = '\0';
    engine_start = (int64_t)time(NULL) - 1;
    /* A failure travels as "fail <node>: <reason>", or as "failo <outcome>"
     * when it is only the engines' exit statuses (the same text on every
     * participant, naming every node): the leader then keeps the reader's
     * per-node causes from the engine's summary and drops those. */
    if (mypos != UINT32_MAX &&
        run_engine(a, img, part, npart, mypos, &outcome, err, sizeof(err)) != 0) {
        const char *json;
        char reason[SH_STATUS_LINE_MAX / 2];

        sweep_own_temps(a, dst);

        reason[0] = '\0';
        json = engine_json(a, img);
        if (json[0] != '\0') {
            engine_failures(json, reason, sizeof(reason));
            engine_node_faults(json, part, npart, a->names, faulty, sizeof(faulty));
        }
        if (reason[0] != '\0')
            len = snprintf(buf, sizeof(buf), "fail %s", reason);
        else if (outcome)
            len = snprintf(buf, sizeof(buf), "failo %.400s", err);
        else
            len = snprintf(buf, sizeof(buf), "fail %s: %.400s", a->in.nodename, err);
        leader_cause = a->index == 0 && reason[0] != '\0';
        /* The source changed, vanished or became unreadable after submit:
         * the user's error, not the node's (DESIGN.md §3), even though the
         * engine found it. */
        source_fault = leader_cause &&
                       json_num(json, "exit_code", -1) == ENGINE_EXIT_SOURCE;
    } else {
        len = snprintf(buf, sizeof(buf), "ok");
        copied = mypos != UINT32_MAX;
    }
    free(part);
    if (verify_copy_digest(a, img, dst, copied, engine_start, buf, sizeof(buf), &len) != 0)
        return;
    {
        struct sh_ctl_result res;
        unsigned char *fin = NULL;
        uint32_t flen = 0;

        memset(&res, 0, sizeof(res));
        if (sh_ctl_gather(a->ctl, TAG_RESULT, buf, (uint32_t)len, a->deadline, &res) != 0) {
            set_failure(a, false, "lost the control plane (results): %s", strerror(errno));
            return;
        }
        if (a->index == 0) {
            char missing[512];
            size_t o = 0;
            bool others = false;

            buf[0] = '\0';
            for (uint32_t i = 0; i < res.nnodes; i++) {
                const struct sh_ctl_entry *e = &res.entry[i];
                size_t skip;
                bool dup = false;

                if (e->state != SH_CTL_OK || e->len < 5 || memcmp(e->data, "fail", 4) != 0 ||
                    o >= sizeof(buf) - 2)
                    continue;
                if (e->data[4] == 'o' && leader_cause)
                    continue;
                skip = e->data[4] == 'o' ? 6 : 5;
                if (e->len < skip)
                    continue;
                /* the same text from several nodes once */
                for (uint32_t j = 0; j < i && !dup; j++)
                    dup = res.entry[j].state == SH_CTL_OK && res.entry[j].len == e->len &&
                          memcmp(res.entry[j].data, e->data, e->len) == 0;
                if (dup)
                    continue;
                others = others || i != 0;
                o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%.*s",
                                      o > 0 ? "; " : "fail ", (int)(e->len - skip),
                                      (const char *)e->data + skip);
            }
            if (sh_ctl_format_missing(a->ctl, &res, missing, sizeof(missing)) > 0 &&
                o < sizeof(buf) - 2) {
                o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%s",
                                      o > 0 ? "; " : "fail ", missing);
                others = true;
            }
            /* "failu": only the source failed, a user error */
            if (o > 4 && source_fault && !others && faulty[0] == '\0' &&
                o + 1 < sizeof(buf)) {
                memmove(buf + 5, buf + 4, o - 3);
                buf[4] = 'u';
                o++;
            }
            /* "failx <nodes at fault> <text>": every node learns whether
             * it is one of them (on_node_fault=drain drains only those) */
            if (o > 5 && memcmp(buf, "fail ", 5) == 0) {
                char head[sizeof(faulty) + 8];
                size_t hn = (size_t)snprintf(head, sizeof(head), "failx %s ",
                                             faulty[0] != '\0' ? faulty : "-");
                size_t rest = strlen(buf + 5);

                if (hn + rest >= sizeof(buf))
                    rest = sizeof(buf) - 1 - hn;
                memmove(buf + hn, buf + 5, rest);
                memcpy(buf, head, hn);
                buf[hn + rest] = '\0';
                o = hn + rest;
            }
            if (o == 0) {
                char summary[512];
                const char *json = engine_json(a, img);

                engine_phases_debug(json);
                engine_summary(json, dst, a->nnodes, (double)(now_ns() - t0) / 1e9,
                               summary, sizeof(summary));
                o = (size_t)snprintf(buf, sizeof(buf), "ok %s", summary);
            }
            len = (int)(o < sizeof(buf) ? o : sizeof(buf) - 1);
            sh_ctl_result_free(&res);
        } else {
            len = 0;
        }
        if (sh_ctl_bcast(a->ctl, buf, (uint32_t)len, &fin, &flen, a->deadline) != 0) {
            set_failure(a, false, "lost the control plane (outcome): %s", strerror(errno));
            return;
        }
        {
            char text[SH_STATUS_LINE_MAX];
            size_t n = flen < sizeof(text) - 1 ? flen : sizeof(text) - 1;

            memcpy(text, fin, n);
            text[n] = '\0';
            free(fin);
            if (strncmp(text, "ok ", 3) == 0) {
                sh_kv_put(a->out, SH_AGENT_OUT_SUMMARY, text + 3);
                sh_info("stage", "%s", text + 3);
            } else if (strncmp(text, "failu ", 6) == 0) {
                set_failure(a, a->own_fault, "image %s: %s", dst, text + 6);
            } else if (strncmp(text, "failx ", 6) == 0) {
                char *list = text + 6, *sp = strchr(list, ' ');
                bool mine = a->own_fault;

                if (sp != NULL) {
                    *sp = '\0';
                    mine = mine || in_index_list(list, a->index);
                }
                set_failure(a, mine, "image %s: %s", dst, sp != NULL ? sp + 1 : list);
            } else {
                set_failure(a, a->own_fault, "image %s: %s", dst,
                            strncmp(text, "fail ", 5) == 0 ? text + 5 : text);
            }
        }
    }
}

static void report(struct agent *a)
{
    sh_kv_put(a->out, SH_AGENT_OUT_RESULT, a->failed ? "fail" : "ok");
    sh_kv_put(a->out, SH_AGENT_OUT_FAULT, !a->failed ? "none" : a->node_fault ? "node" : "user");
    sh_kv_put(a->out, SH_AGENT_OUT_MESSAGE, a->message);
    fflush(a->out);
}

/* Stage image @img; a failed staging does not use DST, so it drops its claim. */
static void stage_image(struct agent *a, size_t img)
{
    bool failed_before = a->failed;

    stage_image_run(a, img);
    if (!failed_before && a->failed)
        sh_claim_remove(a->rundir, img);
}

int sh_agent_prolog_main(void)
{
    static struct agent a;
    char err[SH_STATUS_LINE_MAX];
    int64_t t_start = now_ns(), t_setup = 0;
    int out_fd, devnull;

    a.listener = -1;

    /* Our stdout is the pipe to the plugin; keep it private to the protocol
     * and give fd 1 to /dev/null so nothing else can write into it. */
    out_fd = dup(STDOUT_FILENO);
    a.out = out_fd >= 0 ? fdopen(out_fd, "w") : NULL;
    if (a.out == NULL)
        return 1;
    devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) {
        dup2(devnull, STDOUT_FILENO);
        close(devnull);
    }
    proto_out = a.out;
    sh_log_set_sink(pipe_sink);
    /* Detail lines go to the plugin, which logs them with slurm_debug(): they
     * appear when the site runs slurmd at SlurmdDebug=debug or higher. */
    sh_log_set_level(SH_LOG_DEBUG);
    sh_log_set_identity("agent", NULL, NULL, -1);

    if (read_inputs(stdin, &a.in, err, sizeof(err)) != 0) {
        set_failure(&a, true, "agent input: %s", err);
        goto done;
    }
    if (a.in.detached) {
        openlog("stagehand-agent", LOG_PID, LOG_DAEMON);
        sh_log_set_sink(syslog_sink);
        sh_log_set_level(SH_LOG_INFO);
    }
    {
        char jobid[32];
        snprintf(jobid, sizeof(jobid), "%" PRIu64, a.in.jobid);
        sh_log_set_identity("agent", jobid, a.in.nodename, -1);
    }
    if (sh_config_parse(&a.cfg, a.in.nargs, (const char *const *)a.in.args, err,
                        sizeof(err)) != 0) {
        set_failure(&a, false, "stagehand is misconfigured on this cluster: %s", err);
        goto done;
    }
    a.deadline = now_ns() + (int64_t)a.cfg.timeout_ns;
    a.specs = sh_spec_set_deserialize(a.in.spec, err, sizeof(err));
    if (a.specs == NULL) {
        set_failure(&a, false, "--stage-image: %s", err);
        goto done;
    }
    for (size_t i = 0; i < sh_spec_set_count(a.specs); i++) {
        if (sh_config_check_dest(&a.cfg, sh_spec_set_dst(a.specs, i), err, sizeof(err)) != 0) {
            set_failure(&a, false, "--stage-image: %s", err);
            goto done;
        }
    }
    if (root_setup(&a, err, sizeof(err)) != 0) {
        set_failure(&a, true, "node %s: %s", a.in.nodename, err);
        goto done;
    }
    if (drop_privileges(&a, err, sizeof(err)) != 0) {
        set_failure(&a, true, "node %s: %s", a.in.nodename, err);
        goto done;
    }
    /* As the job user from here on; the plugin knows that a death of this
     * process now may be the user's doing (the user can signal it). */
    sh_kv_put(a.out, SH_AGENT_OUT_PHASE, "user");
    fflush(a.out);
    /* The node list: work in proportion to its size only now, as the user,
     * and no more names than Slurm gave the job or step (issue 30 item 5). */
    if (sh_nodelist_expand(a.in.nodelist, a.in.nnodes != 0 ? a.in.nnodes : SH_AGENT_MAX_NODES,
                           &a.names, &a.nnodes) != 0) {
        set_failure(&a, errno != E2BIG, "node %s: node list %.512s: %s", a.in.nodename,
                    a.in.nodelist, errno == E2BIG ? "names more nodes than Slurm "
                    "allocated" : strerror(errno));
        goto done;
    }
    if ((a.in.nnodes != 0 && a.nnodes != a.in.nnodes) ||
        sh_nodelist_index(a.names, a.nnodes, a.in.nodename, &a.index) != 0 ||
        (a.in.have_nodeid && a.index != a.in.nodeid)) {
        set_failure(&a, true, "node %s is not node %u of the node list %.512s (%u nodes)",
                    a.in.nodename, a.in.have_nodeid ? a.in.nodeid : a.index,
                    a.in.nodelist, a.in.nnodes != 0 ? a.in.nnodes : a.nnodes);
        goto done;
    }
    /* The job's umask, which the engine inherits: DST and the directories
     * made for it follow it (issue 30). */
    umask((mode_t)a.in.umask_bits);
    t_setup = now_ns();
    {
        struct sh_ctl_cfg cc;
        int64_t join_deadline;

        memset(&cc, 0, sizeof(cc));
        cc.nnodes = a.nnodes;
        cc.index = a.index;
        cc.fanout = a.cfg.fanout;
        cc.names = (const char *const *)a.names;
        cc.port_base = a.cfg.port_base;
        cc.port_range = a.cfg.port_range;
        cc.jobid = a.in.jobid;
        cc.stepid = a.in.stepid;
        cc.kjob = a.kjob;
        /* The listener root bound or the sentinel handed over
         * (bind_listener); the tree closes its copy once it has joined. */
        if (tree_listener(&a, &cc, err, sizeof(err)) != 0) {
            set_failure(&a, false, "node %s: %s", a.in.nodename, err);
            goto done;
        }
        /* A sentinel started us for a connection whatever it was: join
         * only once a peer proves the job key (issue 30 item 7). */
        cc.wait_wake = a.in.have_listener;
        /* The rendezvous has its own, shorter bound: a node whose agent never
         * starts (its prolog did not run: the job was cancelled meanwhile,
         * or slurmd is stuck) must not hold the others for the whole
         * staging timeout. */
        join_deadline = t_start + (int64_t)a.cfg.join_timeout_ns;
        if (join_deadline > a.deadline)
            join_deadline = a.deadline;
        if (sh_ctl_join(&cc, join_deadline, &a.ctl) != 0) {
            int jerr = errno;

            /* Woken for nothing: no node of the job needed this one, and
             * this node's own outcome (current) stands. */
            if (jerr == ENOTCONN && cc.wait_wake)
                goto done;
            /* Only a node other than the leader waits for a parent. */
            if (jerr == ETIMEDOUT && a.index != 0)
                set_failure(&a, false, "node %s: control plane: could not reach node %s "
                            "(its parent in the control tree) within %.0f s: its agent "
                            "did not start (the job was cancelled, or its prolog did not "
                            "run) or the network between them is broken",
                            a.in.nodename,
                            a.names[sh_ctl_parent_of(a.index, a.cfg.fanout)],
                            (double)(join_deadline - t_start) / 1e9);
            else
                set_failure(&a, false, "node %s: control plane: %s", a.in.nodename,
                            strerror(jerr));
            goto done;
        }
        sh_ctl_sync_deadline(a.ctl, &a.deadline);
        sh_debug("stage", "ready after %.3f s: inputs and setup %.3f s, control plane %.3f s",
                 (double)(now_ns() - t_start) / 1e9, (double)(t_setup - t_start) / 1e9,
                 (double)(now_ns() - t_setup) / 1e9);
    }
    for (size_t i = 0; i < sh_spec_set_count(a.specs) && !a.failed; i++)
        stage_image(&a, i);
done:
    if (a.in.detached && a.failed)
        sh_error("stage", "%s", a.message);
    report(&a);
    sh_ctl_close(a.ctl);
    if (a.listener >= 0)
        close(a.listener);
    sh_key_wipe(a.kjob, sizeof(a.kjob));
    sh_spec_set_free(a.specs);
    if (a.names != NULL)
        sh_nodelist_free(a.names, a.nnodes);
    for (int i = 0; i < a.in.nargs; i++)
        free(a.in.args[i]);
    for (int i = 0; i < a.n_mpi_env; i++)
        free(a.mpi_env[i]);
    return a.failed ? 1 : 0;
}

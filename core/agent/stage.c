/* stagehand-agent --prolog: one staging of a job's images on this node
 * (doc/design.md §2 steps 2-7). This file is the process's frame: inputs, log,
 * the job's control tree, the loop over images, the outcome; staging.h
 * lists the files that do the rest.
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

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "stage.h"
#include "staging.h"
#include "stagehand/cache.h"
#include "stagehand/clock.h"
#include "stagehand/local.h"
#include "stagehand/log.h"
#include "stagehand/size.h"

#define MAX_INPUT_LINES 256

static FILE *proto_out;

/* The plugin's process that started this agent and reads its outcome (the
 * job prolog's staging process, or slurmstepd) has ended: nobody will
 * record this node's outcome. Stop this agent's process group (its engine
 * removes its temp file) as the epilog would: the other nodes then see this
 * node gone at once instead of at the end of the copy (issue 35 item 6). */
static void on_plugin_gone(int sig)
{
    (void)sig;
    signal(SIGTERM, SIG_DFL);
    (void)kill(0, SIGTERM);
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

void set_failure(struct agent *a, bool node_fault, const char *fmt, ...)
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
        } else if (strcmp(key, SH_AGENT_IN_REFUSE) == 0) {
            bad = value[0] == '\0' || copy_in(in->refuse, sizeof(in->refuse), value);
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

/* errno of a node's own failure that means the node is unwell (stagehand(8),
 * FAILURE POLICY: a local I/O error, DST's filesystem read-only or corrupted, a device
 * or mount gone), not the user's doing (permissions, quota, another run
 * holding the lock). A full filesystem or memory pressure is no broken
 * node: a user can fill a node's DST filesystem (or its memory, under
 * tmpfs) with files of their own, so these are the job's errors
 * (resource_errno; security issue 30). */
bool node_fault_errno(int e)
{
    return e == EROFS || e == EIO || e == EUCLEAN || e == ENODEV || e == ENXIO;
}

/* errno of a resource a node ran out of (DST's filesystem full, a quota,
 * memory): the job's error, which the slurmd log also names for the
 * administrator. */
bool resource_errno(int e)
{
    return e == ENOSPC || e == EDQUOT || e == ENOMEM;
}

/* The control-tree step id of image @img's engine tree: a tree of its own
 * per image (its handshakes and frames are its own), on the job's listener. */
uint64_t image_tree_step(const struct agent *a, size_t img)
{
    return a->in.stepid ^ ((uint64_t)(img + 1) << 40);
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
int tree_listener(const struct agent *a, struct sh_ctl_cfg *cc, char *err,
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

/* Join the job's control tree (as the job user). Returns 0, or -1: after
 * set_failure(), or woken for nothing (this node's own outcome stands). */
static int join_job_tree(struct agent *a, int64_t t_start, int64_t t_setup)
{
    char err[SH_STATUS_LINE_MAX];
    struct sh_ctl_cfg cc;
    int64_t join_deadline;

    memset(&cc, 0, sizeof(cc));
    cc.nnodes = a->nnodes;
    cc.index = a->index;
    cc.fanout = a->cfg.fanout;
    cc.names = (const char *const *)a->names;
    cc.port_base = a->cfg.port_base;
    cc.port_range = a->cfg.port_range;
    cc.jobid = a->in.jobid;
    cc.stepid = a->in.stepid;
    cc.kjob = a->kjob;
    /* The listener root bound or the sentinel handed over
     * (bind_listener); the tree closes its copy once it has joined. */
    if (tree_listener(a, &cc, err, sizeof(err)) != 0) {
        set_failure(a, false, "node %s: %s", a->in.nodename, err);
        return -1;
    }
    /* A sentinel started us for a connection whatever it was: join
     * only once a peer proves the job key (issue 30 item 7). */
    cc.wait_wake = a->in.have_listener;
    /* The rendezvous has its own, shorter bound: a node whose agent never
     * starts (its prolog did not run: the job was cancelled meanwhile,
     * or slurmd is stuck) must not hold the others for the whole
     * staging timeout. */
    join_deadline = t_start + (int64_t)a->cfg.join_timeout_ns;
    if (join_deadline > a->deadline)
        join_deadline = a->deadline;
    if (sh_ctl_join(&cc, join_deadline, &a->ctl) != 0) {
        int jerr = errno;

        /* Woken for nothing: no node of the job needed this one, and
         * this node's own outcome (current) stands. */
        if (jerr == ENOTCONN && cc.wait_wake)
            return -1;
        /* Only a node other than the leader waits for a parent. */
        if (jerr == ETIMEDOUT && a->index != 0)
            set_failure(a, false, "node %s: control plane: could not reach node %s "
                        "(its parent in the control tree) within %.0f s: its agent "
                        "did not start (the job was cancelled, or its prolog did not "
                        "run) or the network between them is broken",
                        a->in.nodename,
                        a->names[sh_ctl_parent_of(a->index, a->cfg.fanout)],
                        (double)(join_deadline - t_start) / 1e9);
        else
            set_failure(a, false, "node %s: control plane: %s", a->in.nodename,
                        strerror(jerr));
        return -1;
    }
    sh_ctl_sync_deadline(a->ctl, &a->deadline);
    sh_debug("stage", "ready after %.3f s: inputs and setup %.3f s, control plane %.3f s",
             (double)(sh_now_ns() - t_start) / 1e9, (double)(t_setup - t_start) / 1e9,
             (double)(sh_now_ns() - t_setup) / 1e9);
    return 0;
}

int sh_agent_prolog_main(void)
{
    static struct agent a;
    char err[SH_STATUS_LINE_MAX];
    int64_t t_start = sh_now_ns(), t_setup = 0;
    pid_t plugin = getppid();
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
    a.deadline = sh_now_ns() + (int64_t)a.cfg.timeout_ns;
    a.specs = sh_spec_set_deserialize(a.in.spec, err, sizeof(err));
    if (a.specs == NULL) {
        set_failure(&a, false, "--stage-image: %s", err);
        goto done;
    }
    for (size_t i = 0; i < sh_spec_set_count(a.specs); i++) {
        const char *dst = sh_spec_set_dst(a.specs, i);
        uint64_t owner = 0;

        if (sh_config_check_dest(&a.cfg, dst, err, sizeof(err)) != 0) {
            set_failure(&a, false, "--stage-image: %s", err);
            goto done;
        }
        /* the cache: only this job's own directory there (stagehand/cache.h) */
        if (a.cfg.cache[0] != '\0' &&
            sh_cache_dst_kind(a.cfg.cache, dst, &owner) != SH_CACHE_DST_NONE &&
            (sh_cache_dst_kind(a.cfg.cache, dst, NULL) != SH_CACHE_DST_JOB ||
             owner != a.in.jobid)) {
            set_failure(&a, false, "--stage-image: %s: not this job's place in the cache", dst);
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
    /* Told when the plugin's process ends (set here: a change of
     * credentials clears it); a detached agent's plugin side has ended by
     * design. */
    if (!a.in.detached) {
        signal(SIGHUP, on_plugin_gone);
        if (prctl(PR_SET_PDEATHSIG, SIGHUP) != 0 || getppid() != plugin) {
            set_failure(&a, false, "node %s: the plugin's process that started this "
                        "agent has ended", a.in.nodename);
            goto done;
        }
    }
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
    t_setup = sh_now_ns();
    if (join_job_tree(&a, t_start, t_setup) != 0)
        goto done;
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

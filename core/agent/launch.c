/* stagehand-agent --prolog: the engine's launch. On the nodes that take
 * part in an image's copy: join the image's own control tree, agree on a
 * PMIx namespace, and run the engine (stagehand-bcast) under the embedded
 * PMIx server (pmix_host.h) with its command line and environment
 * (engine_cmd.c), its output in the runtime directory; then classify how it
 * ended. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "staging.h"
#include "stagehand/bcast.h"
#include "stagehand/clock.h"
#include "stagehand/log.h"
#include "pmix_host.h"

/* PMIx fences Open MPI 4.1's MPI_Init performs (the modex and the closing
 * barrier). The engine's own barrier right after MPI_Init (engine/wireup.c)
 * and MPI_Finalize's come after these. */
#define MPI_INIT_FENCES 2

/* A rule for engine_log_scan: look at one @line of the engine's log (with
 * its newline, if it has one) and put what it finds into @buf; true ends the
 * scan. */
typedef bool (*engine_log_rule)(const char *line, char *buf, size_t len);

/* Scan our engine's log (@path) line by line (lines of up to 511 bytes)
 * with @rule, into @buf ("" when the log cannot be opened or @rule finds
 * nothing). The log is in the runtime directory, which goes with the job:
 * the line found is what is left. */
static void engine_log_scan(const char *path, engine_log_rule rule, char *buf, size_t len)
{
    char line[512];
    FILE *f = fopen(path, "r");

    buf[0] = '\0';
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (rule(line, buf, len))
            break;
    }
    fclose(f);
}

/* The line our engine wrote when a user's process sent it a crash signal
 * (SH_ENGINE_EXIT_KILLED): what follows the engine's tag "[signal] ", up to
 * a ';' or the line's end (the last such line). */
static bool killed_rule(const char *line, char *buf, size_t len)
{
    static const char tag[] = "stagehand-bcast: [signal] ";
    const char *p = strstr(line, tag);

    if (p != NULL) {
        p += sizeof(tag) - 1;
        snprintf(buf, len, "%.*s", (int)strcspn(p, ";\n"), p);
    }
    return false;
}

/* The first error line our engine wrote, its own account of why it failed
 * ("stagehand-bcast job=J node=N rank=R [phase] error: ..."; later error
 * lines are mostly consequences of the first), without the newline; until
 * one is found, the last line of text (an MPI library that ends the process
 * writes its own message, not ours). */
static bool error_rule(const char *line, char *buf, size_t len)
{
    size_t n = strcspn(line, "\n");

    if (strstr(line, " error: ") != NULL) {
        snprintf(buf, len, "%.*s", (int)n, line);
        return true;
    }
    /* the last line with text: not blank, not a rule of dashes */
    if (line[strspn(line, " \t-")] != '\n' && line[strspn(line, " \t-")] != '\0')
        snprintf(buf, len, "%.*s", (int)n, line);
    return false;
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

/* Did this node's own engine crash in the failed run @po (px->run's errno
 * @run_errno): ended by a crash signal (the kernel's fault, its own abort, or
 * root's: core/engine/guard.c turns one a user's process sent into
 * SH_ENGINE_EXIT_KILLED), and not during MPI start-up on some node (that is
 * retried, startup_crash)? A node fault of this node's own (on_node_fault),
 * in the repair around it too (doc/design.md §5). */
static bool own_crash(const struct sh_pmix_outcome *po, int run_errno)
{
    int sig = 0;

    return po->local_status >= 0 && run_errno == EIO && crash_signal(po->local_status) &&
           startup_crash(po, &sig) < 0;
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

void engine_report_path(const struct agent *a, size_t img, char *buf, size_t len)
{
    snprintf(buf, len, "%s/engine.%zu.json", a->rundir, img);
}

/* Join image @img's engine tree of the @npart participants @names (this
 * node is @mypos) into *@sub; @repair: the tree of the second run, around
 * dead nodes (a step id of its own: no handshake or frame of the first
 * tree's is taken for one of it). Returns 0, or -1 with @err set. */
static int engine_tree_join(struct agent *a, size_t img, const char **names, uint32_t npart,
                            uint32_t mypos, bool repair, struct sh_ctl **sub, char *err,
                            size_t errlen)
{
    struct sh_ctl_cfg cc;

    memset(&cc, 0, sizeof(cc));
    cc.nnodes = npart;
    cc.index = mypos;
    cc.fanout = a->cfg.fanout;
    cc.names = names;
    cc.port_base = a->cfg.port_base;
    cc.port_range = a->cfg.port_range;
    cc.jobid = a->in.jobid;
    cc.stepid = image_tree_step(a, img) ^ (repair ? UINT64_C(1) << 39 : 0);
    cc.kjob = a->kjob;
    /* The job's listener (bind_listener), with the job's ports. */
    if (tree_listener(a, &cc, err, errlen) != 0) {
        char why[SH_STATUS_LINE_MAX];

        snprintf(why, sizeof(why), "%s", err);
        snprintf(err, errlen, "engine control tree: %.3000s", why);
        return -1;
    }
    cc.port_stepid_set = true;
    cc.port_stepid = a->in.stepid;
    if (sh_ctl_join(&cc, a->deadline, sub) != 0) {
        snprintf(err, errlen, "engine control tree: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* Run the engine of @pc once with its stdout (the JSON summary) and stderr
 * (its log) in the files @outpath and @logpath of the runtime directory, not
 * in our pipe to the plugin. Returns px->run's result, its errno in
 * *@run_errno. */
static int engine_exec(const struct sh_pmix_ops *px, const struct sh_pmix_cfg *pc,
                       const char *outpath, const char *logpath,
                       struct sh_pmix_outcome *po, int *run_errno)
{
    int outfd = open(outpath, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    int logfd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    int saved_out = dup(STDOUT_FILENO), saved_err = dup(STDERR_FILENO);
    int rc;

    if (outfd >= 0) {
        dup2(outfd, STDOUT_FILENO);
        close(outfd);
    }
    if (logfd >= 0) {
        dup2(logfd, STDERR_FILENO);
        close(logfd);
    }
    memset(po, 0, sizeof(*po));
    rc = px->run(pc, po);
    *run_errno = errno;
    if (saved_out >= 0) {
        dup2(saved_out, STDOUT_FILENO);
        close(saved_out);
    }
    if (saved_err >= 0) {
        dup2(saved_err, STDERR_FILENO);
        close(saved_err);
    }
    return rc;
}

/* After a failed run (@po, px->run's errno @run_errno): the error into
 * @err, *@outcome when it names every node, and this node's own fault. */
static void engine_failed(struct agent *a, size_t img, const struct sh_pmix_outcome *po,
                          int run_errno, const char *logpath, bool *outcome, char *err,
                          size_t errlen)
{
    if (po->local_status >= 0 && WIFEXITED(po->local_status) &&
        WEXITSTATUS(po->local_status) == SH_ENGINE_EXIT_KILLED) {
        /* a crash signal from a process of the user (the engine is
         * theirs): the job's error, never a node fault, no restart */
        char line[256];

        engine_log_scan(logpath, killed_rule, line, sizeof(line));
        snprintf(err, errlen, "engine %s", line[0] != '\0' ? line :
                 "killed by a crash signal a user's process sent, not a crash");
        sh_error("stage", "job %" PRIu64 " user %s: %s: the engine on this node was %s "
                 "(a crash signal from a user's process: the job's failure, not the "
                 "node's)", a->in.jobid, a->in.user, sh_spec_set_dst(a->specs, img),
                 line[0] != '\0' ? line : "killed by a crash signal a user's process sent");
        *outcome = false;
        return;
    }
    /* this node's fault (on_node_fault): our own engine crashed, or
     * could not be executed here (exit 127: missing or broken
     * installation); a kill (deadline, a peer's failure) is not */
    a->own_fault = a->own_fault || own_crash(po, run_errno) ||
                   (po->local_status >= 0 && WIFEXITED(po->local_status) &&
                    WEXITSTATUS(po->local_status) == 127);
    /* the engine's own reason: in the slurmd log of this node (an exit
     * status alone does not say what failed) */
    if (po->local_status >= 0) {
        char line[512];

        engine_log_scan(logpath, error_rule, line, sizeof(line));
        if (line[0] != '\0')
            sh_error("stage", "job %" PRIu64 ": %s: the engine on this node: %s", a->in.jobid,
                     sh_spec_set_dst(a->specs, img), line);
    }
    /* the outcome names every node already */
    *outcome = po->message[0] != '\0';
    snprintf(err, errlen, "%s", po->message[0] != '\0' ? po->message : strerror(run_errno));
}

/* Is this engine exit status @st with @flags (SH_PMIX_NODE_*) one of a
 * survivor, an engine that ended because a peer died: stopped by its agent
 * after a failure elsewhere, or failed on its own with a communication
 * error (an MPI error, the stall limit) or an abort, or done? */
static bool survivor_status(int32_t st, uint32_t flags)
{
    if (flags & (SH_PMIX_NODE_DEADLINE | SH_PMIX_NODE_MISSING | SH_PMIX_NODE_UNREACHABLE |
                 SH_PMIX_NODE_CLOSED))
        return false;
    if (flags & (SH_PMIX_NODE_STOPPED | SH_PMIX_NODE_ABORTED))
        return st != -1;
    return st != -1 && WIFEXITED(st) &&
           (WEXITSTATUS(st) == SH_EXIT_OK || WEXITSTATUS(st) == SH_EXIT_INTERNAL ||
            WEXITSTATUS(st) == SH_EXIT_TIMEOUT);
}

/* Is this node dead for the run: its agent did not answer or could not be
 * reached, or its engine was killed by a signal its agent did not send (a
 * SIGKILL from outside, the OOM killer, a crash)? Its agent sends SIGTERM
 * after a failure elsewhere, at the deadline, and when the engine calls
 * PMIx_Abort (Open MPI 4.1 does when a peer's connection breaks). */
static bool dead_status(int32_t st, uint32_t flags)
{
    if (flags & (SH_PMIX_NODE_MISSING | SH_PMIX_NODE_UNREACHABLE | SH_PMIX_NODE_CLOSED))
        return true;
    return st != -1 && WIFSIGNALED(st) &&
           !(flags & (SH_PMIX_NODE_STOPPED | SH_PMIX_NODE_DEADLINE | SH_PMIX_NODE_ABORTED));
}

/* After a failed run @po of the @npart participants @names: may the copy go
 * on around dead nodes (doc/design.md §5, "Repair around a dead node")? Yes
 * when every node is either dead or a survivor, at least one is dead and the
 * reader (position 0) is not. Every participant that took part in the last
 * exchange decides from the same statuses, so they all decide alike. Marks
 * the dead in @dead, names them and what ended in @lost. */
static bool repair_split(const struct sh_pmix_outcome *po, const char **names, uint32_t npart,
                         bool *dead, char *lost, size_t lostlen)
{
    uint32_t ndead = 0;
    size_t o = 0;

    if (po->node_flags == NULL || po->node_status == NULL || po->nnodes != npart || npart < 2)
        return false;
    for (uint32_t i = 0; i < npart; i++) {
        int32_t st = po->node_status[i];
        uint32_t fl = po->node_flags[i];

        dead[i] = dead_status(st, fl);
        if (!dead[i] && !survivor_status(st, fl))
            return false;
        if (dead[i]) {
            int n;

            ndead++;
            if (fl & (SH_PMIX_NODE_MISSING | SH_PMIX_NODE_UNREACHABLE | SH_PMIX_NODE_CLOSED))
                n = snprintf(lost + o, lostlen - o, "%s%s: %s", o > 0 ? "; " : "", names[i],
                             fl & SH_PMIX_NODE_MISSING ? "did not answer (its agent or "
                             "its link died during the copy)"
                             : fl & SH_PMIX_NODE_CLOSED ? "its agent closed the control "
                             "connection during the copy (agent ended or link broke)"
                             : "unreachable");
            else
                n = snprintf(lost + o, lostlen - o, "%s%s: engine killed by signal %d",
                             o > 0 ? "; " : "", names[i], WTERMSIG(st));
            if (n > 0 && (size_t)n < lostlen - o)
                o += (size_t)n;
        }
    }
    return ndead > 0 && !dead[0];
}

/* The participants @part of a failed run without the @dead ones, into
 * @rp (part, npart, mypos: this node's place; UINT32_MAX when it is dead),
 * and their names into @names (reused: at least @npart entries). */
static int repair_participants(const struct agent *a, const uint32_t *part, uint32_t npart,
                               uint32_t mypos, const bool *dead, const char **names,
                               struct engine_repair *rp)
{
    rp->part = calloc(npart, sizeof(*rp->part));
    if (rp->part == NULL)
        return -1;
    rp->npart = 0;
    rp->mypos = UINT32_MAX;
    for (uint32_t i = 0; i < npart; i++) {
        if (dead[i])
            continue;
        if (i == mypos)
            rp->mypos = rp->npart;
        names[rp->npart] = a->names[part[i]];
        rp->part[rp->npart++] = part[i];
    }
    return 0;
}

/* Run the engine for one image on the participants. @part lists node
 * indices (node 0 first); this node is @part[mypos]. When the run fails
 * because nodes died (repair_split), the others run it again without them
 * (doc/design.md §5): @rp says so, with the second run's participants;
 * the return value and @err are then the second run's. A dead node that
 * still runs returns -1 with its own cause in @err. */
int run_engine(struct agent *a, size_t img, const uint32_t *part, uint32_t npart,
               uint32_t mypos, bool *outcome, struct engine_repair *rp, char *err,
               size_t errlen)
{
    struct engine_cmd cmd;
    struct sh_ctl *sub = NULL;
    struct sh_pmix_outcome po;
    const struct sh_pmix_ops *px;
    const char **names = NULL;
    bool *dead = NULL;
    char nspace[128] = "", outpath[PATH_MAX], logpath[PATH_MAX], pmixdir[PATH_MAX];
    char lerr[512] = "";
    char *ns = NULL;
    int rc = -1, attempt = 0, crashed, sig = 0, run_errno = 0;
    uint32_t n = npart, me = mypos;

    memset(rp, 0, sizeof(*rp));
    /* This node runs an engine: now, and only now, the PMIx host. A node
     * that cannot load it still joins the engine's tree and says so in the
     * namespace exchange below, so the others stop at once instead of
     * waiting for its engine until the staging deadline. */
    px = sh_pmix_load(lerr, sizeof(lerr));
    if (px == NULL)
        a->own_fault = true; /* this node's installation */
    names = calloc(npart, sizeof(*names));
    dead = calloc(npart, sizeof(*dead));
    if (names == NULL || dead == NULL) {
        free(names);
        free(dead);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (uint32_t i = 0; i < npart; i++)
        names[i] = a->names[part[i]];
    if (engine_tree_join(a, img, names, npart, mypos, false, &sub, err, errlen) != 0)
        goto out;
again:
    free(ns);
    ns = NULL;
    if (me == 0 && px != NULL &&
        px->make_nspace(a->in.jobid, nspace, sizeof(nspace)) != 0)
        snprintf(lerr, sizeof(lerr), "PMIx namespace: %s", strerror(errno));
    if (exchange_nspace(sub, me == 0 ? nspace : NULL, lerr, &ns, a->deadline, err,
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
    engine_cmd_build(a, img, n, &cmd);
    {
        struct sh_pmix_cfg pc = {
            .ctl = sub,
            .nspace = (const char *)ns,
            .hosts = names,
            .tmpdir = pmixdir,
            .uid = a->in.uid,
            .gid = a->in.gid,
            .argv = cmd.argv,
            .envp = cmd.envp,
            .deadline_ns = a->deadline,
            .kill_grace_ns = 0,
            .logpath = logpath,
            .close_fd = a->listener, /* the host process serves no tree */
        };

        /* PMIx gets a directory of its own (it cleans it up). */
        engine_report_path(a, img, outpath, sizeof(outpath));
        snprintf(logpath, sizeof(logpath), "%s/engine.%zu.log", a->rundir, img);
        rc = engine_exec(px, &pc, outpath, logpath, &po, &run_errno);
        if (rc != 0 && run_errno == EIO && attempt == 0 &&
            (crashed = startup_crash(&po, &sig)) >= 0 &&
            a->deadline - sh_now_ns() > 10 * (int64_t)1000000000) {
            sh_warn("stage", "%s: the engine on node %s died of signal %d while MPI "
                    "started (before any data moved): starting it again on every node",
                    sh_spec_set_dst(a->specs, img), names[crashed], sig);
            px->outcome_free(&po);
            attempt++;
            goto again;
        }
        if (rc != 0 && run_errno == EIO && !rp->repaired &&
            a->deadline - sh_now_ns() > 10 * (int64_t)1000000000 &&
            repair_split(&po, names, n, dead, rp->lost, sizeof(rp->lost))) {
            /* Nodes died mid-copy: the others copy again without them, a
             * fresh copy from the reader over a chain that leaves them out.
             * A dead node whose own engine crashed is at fault (drained
             * under on_node_fault=drain); the survivors never are. */
            if (dead[me])
                a->own_fault = a->own_fault || own_crash(&po, run_errno);
            px->outcome_free(&po);
            sweep_own_temps(a, sh_spec_set_dst(a->specs, img));
            if (dead[me]) {
                snprintf(err, errlen, "%s", rp->lost);
                *outcome = true;
                goto out;
            }
            sh_ctl_close(sub);
            sub = NULL;
            if (repair_participants(a, part, npart, mypos, dead, names, rp) != 0) {
                snprintf(err, errlen, "out of memory");
                goto out;
            }
            rp->repaired = true;
            n = rp->npart;
            me = rp->mypos;
            sh_warn("stage", "%s: %s: copying again to the other %u node%s",
                    sh_spec_set_dst(a->specs, img), rp->lost, n, n == 1 ? "" : "s");
            if (engine_tree_join(a, img, names, n, me, true, &sub, err, errlen) != 0) {
                rc = -1;
                goto out;
            }
            attempt++;
            goto again;
        }
        if (rc != 0)
            engine_failed(a, img, &po, run_errno, logpath, outcome, err, errlen);
        px->outcome_free(&po);
    }
out:
    free(ns);
    sh_ctl_close(sub);
    free(names);
    free(dead);
    return rc;
}

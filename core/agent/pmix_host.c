/* Embedded PMIx server hosting the engine (see pmix_host.h): the
 * engine phase, run in a child process, and sh_pmix_run. */
#include "config.h"
#include "pmix_host.h"
#include "stagehand/clock.h"
#include "key.h"
#include "stagehand/log.h"
#include "pmix_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- the engine phase ------------------------------------------------- */

/* One node's engine phase: what its steps share. */
struct phase {
    const struct sh_pmix_cfg *cfg;
    struct sh_pmix_outcome *out;
    struct engine e;
    /* The client registration's completion: it lives as long as the PMIx
     * server, which may still call back after host_wait_op() gave up. */
    struct wait_cb w;
    int64_t grace;                   /* ns between SIGTERM and SIGKILL */
    uint32_t n, me;                  /* nodes, this node's index */
    int timed_out;                   /* the deadline stopped the engine */
};

/* doc/design.md §6: the PMIx server and the engine run as the job user,
 * never as root on the user's behalf. Refusing still takes part in the
 * collective sequence (DONE, "did not start"), so the others learn it. */
static bool runs_as_job_user(const struct sh_pmix_cfg *cfg)
{
    if (geteuid() != cfg->uid || getegid() != cfg->gid) {
        sh_error("pmix", "refusing to host the engine as uid %u/gid %u for job user "
                 "%u/%u: drop privileges first", (unsigned)geteuid(),
                 (unsigned)getegid(), (unsigned)cfg->uid, (unsigned)cfg->gid);
        return false;
    }
    return true;
}

/* Start the PMIx server, register the engine's namespace and client, and
 * fork the engine. A failure is logged and leaves ph->e.pid at -1: the node
 * then contributes DONE(-1) at once. Returns 1 when the server is up (it
 * must be finalized), 0 when it is not. *env: the engine's environment, for
 * the caller to free. */
static int start_engine(struct phase *ph, char ***env)
{
    const struct sh_pmix_cfg *cfg = ph->cfg;
    pmix_proc_t proc;
    pmix_status_t prc;

    if (host_server_init(cfg, cfg->hosts[ph->me]) != 0)
        return 0;
    memset(&proc, 0, sizeof(proc));
    PMIX_LOAD_PROCID(&proc, cfg->nspace, ph->me);
    if (host_register_nspace(cfg, ph->n, ph->me) != 0)
        return 1;
    prc = PMIx_server_register_client(&proc, cfg->uid, cfg->gid, NULL, host_op_done, &ph->w);
    prc = host_wait_op(&ph->w, prc, cfg->deadline_ns);
    *env = host_env_copy(cfg->envp, cfg->tmpdir);
    if (prc != PMIX_SUCCESS) {
        sh_error("pmix", "PMIx_server_register_client: %s", PMIx_Error_string(prc));
    } else if (*env == NULL) {
        sh_error("pmix", "out of memory for the engine environment");
    } else if ((prc = PMIx_server_setup_fork(&proc, env)) != PMIX_SUCCESS) {
        sh_error("pmix", "PMIx_server_setup_fork: %s", PMIx_Error_string(prc));
    } else if (host_spawn_engine(cfg, *env, &ph->e) != 0) {
        sh_error("pmix", "cannot start the engine %s: %s", cfg->argv[0], strerror(errno));
    }
    return 1;
}

/* Wait for the engine's next fence request, its exit or the deadline; an
 * abort request stops the engine. Returns the fence request, or NULL once
 * the engine has ended (or never started). */
static struct request *wait_engine(struct phase *ph)
{
    struct engine *e = &ph->e;
    struct request *req = NULL;

    while (e->pid >= 0 && !e->reaped) {
        struct pollfd pfd[2] = {
            { .fd = sh_pmix_queue.notify[0], .events = POLLIN },
            { .fd = e->pidfd, .events = POLLIN },
        };
        int ms = sh_poll_ms_until(ph->cfg->deadline_ns);

        req = host_pop_request();
        if (req != NULL && req->is_abort) {
            e->why |= DONE_ABORTED;
            e->abort_status = req->abort_status;
            host_kill_engine(e, ph->grace);
            free(req);
            req = NULL;
            continue;
        }
        if (req != NULL)
            break;
        if (sh_now_ns() >= ph->cfg->deadline_ns) {
            sh_error("pmix", "deadline reached while the engine runs: killing it");
            ph->timed_out = 1;
            e->why |= DONE_DEADLINE;
            host_kill_engine(e, ph->grace);
            break;
        }
        /* Without a pidfd, look at the child twice a second. */
        if (e->pidfd < 0 && ms > 500)
            ms = 500;
        if (poll(pfd, e->pidfd >= 0 ? 2 : 1, ms) > 0 && (pfd[0].revents & POLLIN)) {
            char drain[64];

            while (read(sh_pmix_queue.notify[0], drain, sizeof(drain)) > 0)
                ;
        }
        host_reap(e);
    }
    return req;
}

/* Requests that raced with the engine's exit can no longer be served. */
static void drop_requests(void)
{
    struct request *req;

    while ((req = host_pop_request()) != NULL) {
        if (!req->is_abort && req->cbfunc != NULL)
            req->cbfunc(PMIX_ERR_LOST_CONNECTION, NULL, 0, req->cbdata, NULL, NULL);
        free(req->data);
        free(req);
    }
}

/* Answer the engine's fence @req from the exchanged @res: the concatenated
 * contributions when every node fenced (@all_fence), else an error, and the
 * engine is stopped since the others will not come to this fence. */
static void answer_fence(struct phase *ph, struct request *req,
                         const struct sh_ctl_result *res, int all_fence)
{
    struct sh_pmix_outcome *out = ph->out;
    size_t len = 0;
    char *data = all_fence ? host_concat(res, &len) : NULL;

    if (data != NULL) {
        out->fences++;
        sh_debug("pmix", "fence %u done: %zu bytes", out->fences, len);
        req->cbfunc(PMIX_SUCCESS, data, len, req->cbdata, host_release_data, data);
    } else {
        host_describe(ph->cfg, res, out->message, sizeof(out->message));
        sh_error("pmix", "fence failed: %s", out->message[0] ? out->message
                 : "another node's engine has exited");
        req->cbfunc(PMIX_ERROR, NULL, 0, req->cbdata, NULL, NULL);
        /* The others will not come to this fence: stop our engine. */
        if (!ph->e.reaped && ph->e.pid >= 0)
            ph->e.why |= DONE_STOPPED;
        host_kill_engine(&ph->e, ph->grace);
    }
    free(req->data);
    free(req);
}

/* One round of the engine phase: wait for the local engine, then exchange
 * with every node either its fence contribution (FENCE) or its exit status
 * (DONE). Returns 1 while some node still fences, 0 when every node is done
 * (out->nfailed and out->message say how it went), -1 with errno when the
 * control plane is lost. */
static int engine_round(struct phase *ph)
{
    const struct sh_pmix_cfg *cfg = ph->cfg;
    struct sh_pmix_outcome *out = ph->out;
    struct request *req = wait_engine(ph);
    struct sh_ctl_result res;
    int64_t op_deadline;
    uint32_t tag;
    unsigned char status_wire[DONE_LEN];
    const void *blob;
    uint32_t blen;
    int any_fence = 0, all_fence = 1;

    if (req == NULL) {
        drop_requests();
        out->local_status = ph->e.reaped ? ph->e.status : -1;
        if (out->local_status >= 0 && WIFEXITED(out->local_status) &&
            WEXITSTATUS(out->local_status) == SH_EXIT_TIMEOUT && cfg->logpath != NULL)
            host_timeout_cause(cfg->logpath, &ph->e);
        host_put_status(status_wire, out->local_status);
        host_put_status(status_wire + 4, (int32_t)ph->e.why);
        host_put_status(status_wire + 8, ph->e.abort_status);
        host_put_status(status_wire + 12, (int32_t)ph->e.stall_s);
        host_put_status(status_wire + 16, (int32_t)(uint32_t)(ph->e.stall_seg >> 32));
        host_put_status(status_wire + 20, (int32_t)(uint32_t)ph->e.stall_seg);
        tag = TAG_DONE;
        blob = status_wire;
        blen = sizeof(status_wire);
    } else {
        tag = TAG_FENCE;
        blob = req->data;
        blen = (uint32_t)req->ndata;
        if (req->ndata > UINT32_MAX)
            blen = 0;
    }

    /* Past the deadline the engines are dead or being killed everywhere;
     * the closing exchange of exit statuses gets a bounded extension so
     * that every node still learns the outcome. */
    op_deadline = cfg->deadline_ns;
    if (sh_now_ns() >= cfg->deadline_ns)
        op_deadline = sh_now_ns() + 2 * ph->grace;
    if (sh_ctl_allgather(cfg->ctl, tag, blob, blen, op_deadline, &res) != 0) {
        int err = errno;

        if (req != NULL) {
            req->cbfunc(PMIX_ERR_LOST_CONNECTION, NULL, 0, req->cbdata, NULL, NULL);
            free(req->data);
            free(req);
        }
        host_kill_engine(&ph->e, ph->grace);
        out->local_status = ph->e.reaped ? ph->e.status : -1;
        snprintf(out->message, sizeof(out->message),
                 "lost the control plane during the engine phase: %s", strerror(err));
        errno = err;
        return -1;
    }
    for (uint32_t i = 0; i < ph->n; i++) {
        int fence = res.entry[i].state == SH_CTL_OK && res.entry[i].tag == TAG_FENCE;
        any_fence |= fence;
        all_fence &= fence;
        if (res.entry[i].state == SH_CTL_OK && res.entry[i].tag == TAG_DONE &&
            res.entry[i].len == DONE_LEN) {
            out->node_status[i] = host_get_status(res.entry[i].data);
            out->node_flags[i] = (uint32_t)host_get_status(res.entry[i].data + 4) &
                                 (DONE_ABORTED | DONE_DEADLINE | DONE_STOPPED |
                                  DONE_STALLED | DONE_TIMED_OUT);
        } else if (res.entry[i].state != SH_CTL_OK) {
            out->node_flags[i] = res.entry[i].state == SH_CTL_MISSING ? SH_PMIX_NODE_MISSING
                                 : res.entry[i].state == SH_CTL_CLOSED ? SH_PMIX_NODE_CLOSED
                                 : SH_PMIX_NODE_UNREACHABLE;
        }
    }
    if (req != NULL)
        answer_fence(ph, req, &res, all_fence);
    if (!any_fence) {
        host_describe(cfg, &res, out->message, sizeof(out->message));
        out->nfailed = 0;
        for (uint32_t i = 0; i < ph->n; i++) {
            if (res.entry[i].state != SH_CTL_OK || out->node_status[i] != 0)
                out->nfailed++;
        }
        sh_ctl_result_free(&res);
        return 0;
    }
    sh_ctl_result_free(&res);
    return 1;
}

/* The engine phase proper; runs in the host child (see sh_pmix_run). */
static int host_run(const struct sh_pmix_cfg *cfg, struct sh_pmix_outcome *out)
{
    struct phase ph = {
        .cfg = cfg, .out = out,
        .e = { .pid = -1, .pidfd = -1, .status = -1, .stall_seg = DONE_NO_SEGMENT },
        .w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 },
        .grace = cfg->kill_grace_ns > 0 ? cfg->kill_grace_ns : 2 * SH_NS_PER_S,
    };
    char **env = NULL;
    int server_up = 0;
    int refused;
    int lost = 0;
    int round;
    int rc = -1;
    int err = EIO;

    memset(out, 0, sizeof(*out));
    out->local_status = -1;
    if (cfg->ctl == NULL || cfg->nspace == NULL || cfg->hosts == NULL ||
        cfg->tmpdir == NULL || cfg->argv == NULL || cfg->argv[0] == NULL ||
        cfg->argv[0][0] != '/' || strlen(cfg->nspace) > PMIX_MAX_NSLEN) {
        errno = EINVAL;
        return -1;
    }
    refused = !runs_as_job_user(cfg);
    ph.n = sh_ctl_nnodes(cfg->ctl);
    ph.me = sh_ctl_index(cfg->ctl);
    out->nnodes = ph.n;
    out->node_status = calloc(ph.n, sizeof(*out->node_status));
    out->node_flags = calloc(ph.n, sizeof(*out->node_flags));
    if (out->node_status == NULL || out->node_flags == NULL)
        return -1;
    for (uint32_t i = 0; i < ph.n; i++)
        out->node_status[i] = -1;
    if (pipe2(sh_pmix_queue.notify, O_CLOEXEC | O_NONBLOCK) != 0) {
        err = errno;
        goto out;
    }

    /* Until the engine runs, a local failure still takes part in the
     * collective sequence: it simply contributes DONE(-1) at once. */
    if (!refused)
        server_up = start_engine(&ph, &env);
    while ((round = engine_round(&ph)) > 0)
        ;
    if (round < 0) {
        err = errno;
        lost = 1;
        goto out;
    }
    if (out->nfailed == 0 && !ph.timed_out) {
        rc = 0;
    } else {
        err = refused ? EPERM : ph.timed_out ? ETIMEDOUT : EIO;
        if (out->message[0] == '\0')
            snprintf(out->message, sizeof(out->message), "%s",
                     ph.timed_out ? "deadline reached during the engine phase"
                                  : "an engine failed");
    }
out:
    if (lost)
        err = err != 0 ? err : ECONNRESET;
    host_kill_engine(&ph.e, ph.grace);
    if (server_up)
        PMIx_server_finalize();
    host_env_free(env);
    if (sh_pmix_queue.notify[0] >= 0) {
        close(sh_pmix_queue.notify[0]);
        close(sh_pmix_queue.notify[1]);
        sh_pmix_queue.notify[0] = sh_pmix_queue.notify[1] = -1;
    }
    if (rc != 0)
        errno = err;
    return rc;
}

/* ---- the host child ---------------------------------------------------- */

/* What the host child reports to sh_pmix_run, followed by nnodes int32
 * exit statuses, nnodes uint32 node flags and the control-plane session
 * state. Parent and child are
 * the same binary: native layout. */
struct host_report {
    int32_t rc, err, local_status;
    uint32_t fences, nfailed, nnodes, state_len;
    char message[512];
};

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = write(fd, p, len);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void host_child(const struct sh_pmix_cfg *cfg, int fd)
    __attribute__((noreturn));
static void host_child(const struct sh_pmix_cfg *cfg, int fd)
{
    struct sh_pmix_outcome o;
    struct host_report r;
    size_t slen = sh_ctl_state_size(cfg->ctl);
    unsigned char *state = malloc(slen);
    int32_t *st;
    uint32_t *fl;

    if (cfg->close_fd > STDERR_FILENO)
        close(cfg->close_fd);
    memset(&r, 0, sizeof(r));
    r.rc = host_run(cfg, &o);
    r.err = errno;
    r.local_status = o.local_status;
    r.fences = o.fences;
    r.nfailed = o.nfailed;
    r.nnodes = sh_ctl_nnodes(cfg->ctl);
    memcpy(r.message, o.message, sizeof(r.message));
    if (state == NULL || sh_ctl_state_save(cfg->ctl, state, slen) != 0)
        _exit(1);
    r.state_len = (uint32_t)slen;
    st = calloc(r.nnodes, sizeof(*st));
    fl = calloc(r.nnodes, sizeof(*fl));
    if (st == NULL || fl == NULL)
        _exit(1);
    for (uint32_t i = 0; i < r.nnodes; i++) {
        st[i] = o.node_status != NULL ? o.node_status[i] : -1;
        fl[i] = o.node_flags != NULL ? o.node_flags[i] : 0;
    }
    if (write_all(fd, &r, sizeof(r)) != 0 ||
        write_all(fd, st, r.nnodes * sizeof(*st)) != 0 ||
        write_all(fd, fl, r.nnodes * sizeof(*fl)) != 0 ||
        write_all(fd, state, slen) != 0)
        _exit(1);
    _exit(0);
}

/* Read exactly @len bytes before @deadline_ns. */
static int read_report(int fd, void *buf, size_t len, int64_t deadline_ns)
{
    char *p = buf;

    while (len > 0) {
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        ssize_t n;

        if (poll(&pfd, 1, sh_poll_ms_until(deadline_ns)) == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        n = read(fd, p, len);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0) {
            errno = n == 0 ? EPIPE : errno;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int sh_pmix_run(const struct sh_pmix_cfg *cfg, struct sh_pmix_outcome *out)
{
    int64_t grace = cfg->kill_grace_ns > 0 ? cfg->kill_grace_ns : 2 * SH_NS_PER_S;
    struct host_report r;
    unsigned char *state = NULL;
    int64_t limit;
    int fds[2];
    int status;
    pid_t pid, parent;
    int err;

    memset(out, 0, sizeof(*out));
    out->local_status = -1;
    if (cfg->ctl == NULL || cfg->nspace == NULL || cfg->hosts == NULL ||
        cfg->tmpdir == NULL || cfg->argv == NULL || cfg->argv[0] == NULL ||
        cfg->argv[0][0] != '/' || strlen(cfg->nspace) > PMIX_MAX_NSLEN) {
        errno = EINVAL;
        return -1;
    }
    out->nnodes = sh_ctl_nnodes(cfg->ctl);
    out->node_status = calloc(out->nnodes, sizeof(*out->node_status));
    out->node_flags = calloc(out->nnodes, sizeof(*out->node_flags));
    state = malloc(sh_ctl_state_size(cfg->ctl));
    if (out->node_status == NULL || out->node_flags == NULL || state == NULL)
        goto nomem;
    for (uint32_t i = 0; i < out->nnodes; i++)
        out->node_status[i] = -1;
    /* libpmix 4.2 cannot run PMIx_server_init again after a finalize in the
     * same process (measured: a later init aborts in its listener thread,
     * "bit out of range 0 - FD_SETSIZE"), and an agent runs one engine per
     * image. So the server lives in a child process that carries the
     * control-plane session for the phase and hands its state back. */
    if (pipe2(fds, O_CLOEXEC) != 0)
        goto fail;
    fflush(stdout);
    fflush(stderr);
    parent = getpid();
    pid = fork();
    if (pid < 0) {
        err = errno;
        close(fds[0]);
        close(fds[1]);
        errno = err;
        goto fail;
    }
    if (pid == 0) {
        close(fds[0]);
        /* An agent killed (SIGKILL) mid-copy takes its host process with
         * it, and that its engine (host_spawn_engine): its node then leaves
         * the run at once, and the others repair around it (doc/design.md
         * §5), instead of a headless engine finishing a copy nobody
         * records. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(1);
        host_child(cfg, fds[1]);
    }
    close(fds[1]);
    /* The child ends by itself within the deadline plus its kill grace and
     * the closing exchange; this bound only guards against a wedged child. */
    limit = (cfg->deadline_ns > sh_now_ns() ? cfg->deadline_ns : sh_now_ns()) +
            4 * grace + 10 * SH_NS_PER_S;
    if (read_report(fds[0], &r, sizeof(r), limit) != 0 || r.nnodes != out->nnodes ||
        r.state_len != sh_ctl_state_size(cfg->ctl) ||
        read_report(fds[0], out->node_status, r.nnodes * sizeof(int32_t), limit) != 0 ||
        read_report(fds[0], out->node_flags, r.nnodes * sizeof(uint32_t), limit) != 0 ||
        read_report(fds[0], state, r.state_len, limit) != 0) {
        char how[64] = "stopped";
        pid_t ended;

        err = errno;
        /* how it ended, if it did by itself (one of 32 nodes' host
         * processes once ended without a report and without a word) */
        ended = waitpid(pid, &status, WNOHANG);
        if (ended == pid && WIFEXITED(status))
            snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(status));
        else if (ended == pid && WIFSIGNALED(status))
            snprintf(how, sizeof(how), "killed by signal %d", WTERMSIG(status));
        sh_error("pmix", "the PMIx host process failed or did not report: %s (%s)",
                 strerror(err), how);
        if (ended != pid) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
        close(fds[0]);
        snprintf(out->message, sizeof(out->message),
                 "the agent's PMIx host process failed (%s)", strerror(err));
        free(state);
        errno = err == ETIMEDOUT ? ETIMEDOUT : EPROTO;
        return -1;
    }
    close(fds[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (sh_ctl_state_load(cfg->ctl, state, r.state_len) != 0) {
        free(state);
        errno = EPROTO;
        return -1;
    }
    free(state);
    out->local_status = r.local_status;
    out->fences = r.fences;
    out->nfailed = r.nfailed;
    memcpy(out->message, r.message, sizeof(out->message));
    out->message[sizeof(out->message) - 1] = '\0';
    errno = r.err;
    return r.rc == 0 ? 0 : -1;
nomem:
    errno = ENOMEM;
fail:
    err = errno;
    free(state);
    errno = err;
    return -1;
}

/* The module's entry points for the agent (sh_pmix_load). */
__attribute__((visibility("default"))) const struct sh_pmix_ops sh_pmix_module_ops = {
    .run = sh_pmix_run,
    .outcome_free = sh_pmix_outcome_free,
    .make_nspace = sh_pmix_make_nspace,
};

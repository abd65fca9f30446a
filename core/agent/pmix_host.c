/* Embedded PMIx server hosting the engine (see stagehand/pmix_host.h). */
#include "config.h"
#include "stagehand/pmix_host.h"
#include "stagehand/clock.h"
#include "stagehand/key.h"
#include "stagehand/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* The PMIx headers' inline helpers do not build cleanly under our
 * conversion warnings; they are not our code. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-conversion"
#pragma GCC diagnostic ignored "-Wconversion"
#include <pmix.h>
#include <pmix_server.h>
#pragma GCC diagnostic pop

/* Tags of the engine-phase contributions (sh_ctl_entry.tag). */
#define TAG_FENCE  1u
#define TAG_DONE   2u
/* DONE blob: waitpid status, flags, PMIx_Abort status (each be32). */
#define DONE_LEN      12u
#define DONE_ABORTED  1u   /* the engine called PMIx_Abort (status = its code) */
#define DONE_DEADLINE 2u   /* the engine was stopped at the deadline */
#define DONE_STOPPED  4u   /* stopped because the run failed elsewhere */

/* A request handed from the PMIx progress thread to the main thread. */
struct request {
    struct request *next;
    int is_abort;
    int abort_status;
    char *data;                      /* fence contribution (malloc'd) */
    size_t ndata;
    pmix_modex_cbfunc_t cbfunc;
    void *cbdata;
};

static struct {
    pthread_mutex_t lock;
    struct request *head, *tail;
    int notify[2];                   /* progress thread -> main thread */
    char abort_msg[256];
} host = { .lock = PTHREAD_MUTEX_INITIALIZER, .notify = { -1, -1 } };

static void push_request(struct request *req)
{
    char c = 1;

    pthread_mutex_lock(&host.lock);
    if (host.tail != NULL)
        host.tail->next = req;
    else
        host.head = req;
    host.tail = req;
    pthread_mutex_unlock(&host.lock);
    /* A full pipe already means "wake up": ignoring EAGAIN is right. */
    if (write(host.notify[1], &c, 1) < 0 && errno != EAGAIN)
        sh_error("pmix", "cannot wake the agent's main thread: %s", strerror(errno));
}

static struct request *pop_request(void)
{
    struct request *req;

    pthread_mutex_lock(&host.lock);
    req = host.head;
    if (req != NULL) {
        host.head = req->next;
        if (host.head == NULL)
            host.tail = NULL;
    }
    pthread_mutex_unlock(&host.lock);
    return req;
}

/* ---- PMIx server module (called in the PMIx progress thread) ---------- */

static pmix_status_t fence_nb(const pmix_proc_t procs[], size_t nprocs,
                              const pmix_info_t info[], size_t ninfo, char *data,
                              size_t ndata, pmix_modex_cbfunc_t cbfunc, void *cbdata)
{
    struct request *req = calloc(1, sizeof(*req));

    (void)procs;
    (void)nprocs;
    (void)info;
    (void)ninfo;
    if (req == NULL)
        return PMIX_ERR_NOMEM;
    if (ndata > 0) {
        req->data = malloc(ndata);
        if (req->data == NULL) {
            free(req);
            return PMIX_ERR_NOMEM;
        }
        memcpy(req->data, data, ndata);
    }
    req->ndata = ndata;
    req->cbfunc = cbfunc;
    req->cbdata = cbdata;
    push_request(req);
    return PMIX_SUCCESS;
}

static pmix_status_t direct_modex(const pmix_proc_t *proc, const pmix_info_t info[],
                                  size_t ninfo, pmix_modex_cbfunc_t cbfunc,
                                  void *cbdata)
{
    (void)info;
    (void)ninfo;
    (void)cbfunc;
    (void)cbdata;
    /* All modex data travels in the fences (PMIX_COLLECT_DATA). */
    sh_debug("pmix", "direct modex request for rank %u refused", proc->rank);
    return PMIX_ERR_NOT_SUPPORTED;
}

static pmix_status_t abort_fn(const pmix_proc_t *proc, void *server_object,
                              int status, const char msg[], pmix_proc_t procs[],
                              size_t nprocs, pmix_op_cbfunc_t cbfunc, void *cbdata)
{
    struct request *req = calloc(1, sizeof(*req));

    (void)server_object;
    (void)procs;
    (void)nprocs;
    (void)cbfunc;
    (void)cbdata;
    pthread_mutex_lock(&host.lock);
    snprintf(host.abort_msg, sizeof(host.abort_msg), "%s",
             msg != NULL ? msg : "(no message)");
    pthread_mutex_unlock(&host.lock);
    sh_error("pmix", "engine rank %u called abort (status %d): %s", proc->rank,
             status, msg != NULL ? msg : "(no message)");
    if (req != NULL) {
        req->is_abort = 1;
        req->abort_status = status;
        push_request(req);
    }
    /* Done here: the main thread kills the engine's process group. */
    return PMIX_OPERATION_SUCCEEDED;
}

static pmix_server_module_t module = {
    .abort = abort_fn,
    .fence_nb = fence_nb,
    .direct_modex = direct_modex,
};

/* ---- helpers ----------------------------------------------------------- */

int sh_pmix_make_nspace(uint64_t jobid, char *buf, size_t len)
{
    unsigned char rnd[8];
    int n;

    if (sh_random_bytes(rnd, sizeof(rnd)) != 0)
        return -1;
    n = snprintf(buf, len, "stagehand.%llu.%02x%02x%02x%02x%02x%02x%02x%02x",
                 (unsigned long long)jobid, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
                 rnd[5], rnd[6], rnd[7]);
    if (n < 0 || (size_t)n >= len || (size_t)n > PMIX_MAX_NSLEN) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

void sh_pmix_outcome_free(struct sh_pmix_outcome *out)
{
    if (out == NULL)
        return;
    free(out->node_status);
    out->node_status = NULL;
}

struct wait_cb {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
    pmix_status_t status;
};

static void op_done(pmix_status_t status, void *cbdata)
{
    struct wait_cb *w = cbdata;

    pthread_mutex_lock(&w->lock);
    w->status = status;
    w->done = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* Wait for an op_done callback, bounded by @deadline_ns. */
static pmix_status_t wait_op(struct wait_cb *w, pmix_status_t rc, int64_t deadline_ns)
{
    pmix_status_t status;

    if (rc == PMIX_OPERATION_SUCCEEDED)
        return PMIX_SUCCESS;
    if (rc != PMIX_SUCCESS)
        return rc;
    pthread_mutex_lock(&w->lock);
    while (!w->done) {
        struct timespec ts;
        int64_t left = deadline_ns - sh_now_ns();

        if (left <= 0)
            break;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t)(left / SH_NS_PER_S);
        ts.tv_nsec += (long)(left % SH_NS_PER_S);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->cond, &w->lock, &ts);
    }
    status = w->done ? w->status : PMIX_ERR_TIMEOUT;
    pthread_mutex_unlock(&w->lock);
    return status;
}

/* A malloc'd NULL-terminated copy of the "K=V" strings of envp, with
 * "HOME=<home>" added when envp sets no HOME: Open MPI 5's opal_init fails
 * ("Unable to get the user home directory", MPI_Init aborts) without HOME in
 * the environment, where 4.1 fell back to the password database. home is the
 * engine's private, freshly made PMIx directory, so no per-user Open MPI
 * file ($HOME/.openmpi/mca-params.conf) of the job user's real home changes
 * the engine, as none of its environment does (F19). NULL with errno ENOMEM. */
static char **env_copy(const char *const *envp, const char *home)
{
    size_t n = 0, k = 0;
    bool has_home = false;
    char **env;

    while (envp != NULL && envp[n] != NULL) {
        if (strncmp(envp[n], "HOME=", 5) == 0)
            has_home = true;
        n++;
    }
    env = calloc(n + 2, sizeof(*env));
    if (env == NULL)
        return NULL;
    for (; k < n; k++)
        if ((env[k] = strdup(envp[k])) == NULL)
            goto nomem;
    if (!has_home && asprintf(&env[k], "HOME=%s", home) < 0) {
        env[k] = NULL;
        goto nomem;
    }
    return env;
nomem:
    for (size_t j = 0; j < k; j++)
        free(env[j]);
    free(env);
    errno = ENOMEM;
    return NULL;
}

static void env_free(char **env)
{
    if (env == NULL)
        return;
    for (size_t i = 0; env[i] != NULL; i++)
        free(env[i]);
    free(env);
}

/* "a,b,c" or "0;1;2" from the node names / ranks. */
static char *join_hosts(const char *const *hosts, uint32_t n)
{
    size_t len = 1;
    char *s, *p;

    for (uint32_t i = 0; i < n; i++)
        len += strlen(hosts[i]) + 1;
    s = malloc(len);
    if (s == NULL)
        return NULL;
    p = s;
    for (uint32_t i = 0; i < n; i++) {
        size_t l = strlen(hosts[i]);
        if (i > 0)
            *p++ = ',';
        memcpy(p, hosts[i], l);
        p += l;
    }
    *p = '\0';
    return s;
}

static char *join_ranks(uint32_t n)
{
    size_t len = (size_t)n * 11 + 1;
    char *s = malloc(len);
    size_t used = 0;

    if (s == NULL)
        return NULL;
    s[0] = '\0';
    for (uint32_t i = 0; i < n; i++)
        used += (size_t)snprintf(s + used, len - used, "%s%u", i > 0 ? ";" : "", i);
    return s;
}

#define ADD(list, key, val, type)                                              \
    do {                                                                       \
        if (PMIx_Info_list_add((list), (key), (val), (type)) != PMIX_SUCCESS) \
            goto fail;                                                         \
    } while (0)

/* Job-level and per-proc data of the namespace. The maps are what Open MPI
 * 4.1 needs (measured minimal set); the rest is for robustness with other
 * MPI versions. */
static int register_nspace(const struct sh_pmix_cfg *cfg, uint32_t n, uint32_t me)
{
    struct wait_cb w = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };
    pmix_data_array_t darray = { 0 };
    char *hosts = NULL, *ranks = NULL, *nodemap = NULL, *procmap = NULL;
    char peers[16];
    void *list = PMIx_Info_list_start();
    pmix_status_t rc;
    uint32_t zero = 0;
    int ret = -1;

    if (list == NULL)
        return -1;
    hosts = join_hosts(cfg->hosts, n);
    ranks = join_ranks(n);
    if (hosts == NULL || ranks == NULL)
        goto fail;
    rc = PMIx_generate_regex(hosts, &nodemap);
    if (rc != PMIX_SUCCESS) {
        sh_error("pmix", "PMIx_generate_regex(%s): %s", hosts, PMIx_Error_string(rc));
        goto fail;
    }
    rc = PMIx_generate_ppn(ranks, &procmap);
    if (rc != PMIX_SUCCESS) {
        sh_error("pmix", "PMIx_generate_ppn(%s): %s", ranks, PMIx_Error_string(rc));
        goto fail;
    }
    snprintf(peers, sizeof(peers), "%u", me);
    ADD(list, PMIX_NODE_MAP, nodemap, PMIX_REGEX);
    ADD(list, PMIX_PROC_MAP, procmap, PMIX_REGEX);
    ADD(list, PMIX_JOB_SIZE, &n, PMIX_UINT32);
    ADD(list, PMIX_UNIV_SIZE, &n, PMIX_UINT32);
    ADD(list, PMIX_MAX_PROCS, &n, PMIX_UINT32);
    ADD(list, PMIX_NUM_NODES, &n, PMIX_UINT32);
    ADD(list, PMIX_JOBID, cfg->nspace, PMIX_STRING);
    ADD(list, PMIX_LOCAL_SIZE, &(uint32_t){ 1 }, PMIX_UINT32);
    ADD(list, PMIX_LOCAL_PEERS, peers, PMIX_STRING);
    ADD(list, PMIX_LOCALLDR, &me, PMIX_PROC_RANK);
    ADD(list, PMIX_TMPDIR, cfg->tmpdir, PMIX_STRING);
    for (uint32_t r = 0; r < n; r++) {
        void *proc = PMIx_Info_list_start();
        pmix_data_array_t pd = { 0 };
        uint16_t lrank = 0;

        if (proc == NULL)
            goto fail;
        if (PMIx_Info_list_add(proc, PMIX_RANK, &r, PMIX_PROC_RANK) != PMIX_SUCCESS ||
            PMIx_Info_list_add(proc, PMIX_LOCAL_RANK, &lrank, PMIX_UINT16) != PMIX_SUCCESS ||
            PMIx_Info_list_add(proc, PMIX_NODE_RANK, &lrank, PMIX_UINT16) != PMIX_SUCCESS ||
            PMIx_Info_list_add(proc, PMIX_NODEID, &r, PMIX_UINT32) != PMIX_SUCCESS ||
            PMIx_Info_list_add(proc, PMIX_HOSTNAME, cfg->hosts[r], PMIX_STRING) != PMIX_SUCCESS ||
            PMIx_Info_list_add(proc, PMIX_APPNUM, &zero, PMIX_UINT32) != PMIX_SUCCESS ||
            PMIx_Info_list_convert(proc, &pd) != PMIX_SUCCESS) {
            PMIx_Info_list_release(proc);
            goto fail;
        }
        PMIx_Info_list_release(proc);
        rc = PMIx_Info_list_add(list, PMIX_PROC_DATA, &pd, PMIX_DATA_ARRAY);
        PMIx_Data_array_destruct(&pd);
        if (rc != PMIX_SUCCESS)
            goto fail;
    }
    if (PMIx_Info_list_convert(list, &darray) != PMIX_SUCCESS)
        goto fail;
    rc = PMIx_server_register_nspace(cfg->nspace, 1, darray.array, darray.size,
                                     op_done, &w);
    rc = wait_op(&w, rc, cfg->deadline_ns);
    if (rc != PMIX_SUCCESS) {
        sh_error("pmix", "PMIx_server_register_nspace(%s): %s", cfg->nspace,
                 PMIx_Error_string(rc));
        goto fail;
    }
    ret = 0;
fail:
    if (ret != 0 && nodemap != NULL && procmap != NULL && hosts != NULL)
        sh_debug("pmix", "namespace registration failed");
    if (darray.array != NULL)
        PMIx_Data_array_destruct(&darray);
    PMIx_Info_list_release(list);
    free(hosts);
    free(ranks);
    free(nodemap);
    free(procmap);
    if (ret != 0)
        errno = EPROTO;
    return ret;
}

static int server_init(const struct sh_pmix_cfg *cfg, const char *hostname)
{
    pmix_data_array_t darray = { 0 };
    void *list = PMIx_Info_list_start();
    pmix_status_t rc;
    int ret = -1;

    if (list == NULL)
        return -1;
    ADD(list, PMIX_SERVER_TMPDIR, cfg->tmpdir, PMIX_STRING);
    ADD(list, PMIX_SYSTEM_TMPDIR, cfg->tmpdir, PMIX_STRING);
    ADD(list, PMIX_USERID, &cfg->uid, PMIX_UINT32);
    ADD(list, PMIX_GRPID, &cfg->gid, PMIX_UINT32);
    ADD(list, PMIX_HOSTNAME, hostname, PMIX_STRING);
    if (PMIx_Info_list_convert(list, &darray) != PMIX_SUCCESS)
        goto fail;
    rc = PMIx_server_init(&module, darray.array, darray.size);
    if (rc != PMIX_SUCCESS) {
        sh_error("pmix", "PMIx_server_init (tmpdir %s): %s", cfg->tmpdir,
                 PMIx_Error_string(rc));
        goto fail;
    }
    ret = 0;
fail:
    if (darray.array != NULL)
        PMIx_Data_array_destruct(&darray);
    PMIx_Info_list_release(list);
    if (ret != 0)
        errno = EPROTO;
    return ret;
}

/* ---- the engine process ---------------------------------------------- */

struct engine {
    pid_t pid;                       /* -1 when not running */
    int pidfd;                       /* -1 when unavailable: poll on a tick */
    int status;                      /* waitpid status once reaped */
    int reaped;
    int64_t term_at;                 /* SIGTERM sent at (0: not yet) */
    uint32_t why;                    /* DONE_* flags: why we stopped it */
    int abort_status;
};

static int spawn_engine(const struct sh_pmix_cfg *cfg, char **env, struct engine *e)
{
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int errpipe[2];
    int child_errno = 0;
    ssize_t got;
    pid_t pid;

    if (devnull < 0)
        return -1;
    /* exec failure is reported through a close-on-exec pipe, so "cannot
     * execute" is told apart from an engine that exits with status 127. */
    if (pipe2(errpipe, O_CLOEXEC) != 0) {
        close(devnull);
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        int err = errno;
        close(devnull);
        close(errpipe[0]);
        close(errpipe[1]);
        errno = err;
        return -1;
    }
    if (pid == 0) {
        /* Child of a threaded process: async-signal-safe calls only. The
         * engine stays in the agent's process group, so that the plugin's
         * kill of that group on its deadline reaches it too. */
        int err;

        if (devnull != STDIN_FILENO)
            dup2(devnull, STDIN_FILENO);
        if (errpipe[1] > 3)
            dup2(errpipe[1], 3);
        fcntl(3, F_SETFD, FD_CLOEXEC);
        syscall(SYS_close_range, 4U, ~0U, 0U);
        execve(cfg->argv[0], (char *const *)(uintptr_t)cfg->argv, env);
        err = errno;
        if (write(3, &err, sizeof(err)) < 0)
            _exit(127);
        _exit(127);
    }
    close(devnull);
    close(errpipe[1]);
    do {
        got = read(errpipe[0], &child_errno, sizeof(child_errno));
    } while (got < 0 && errno == EINTR);
    close(errpipe[0]);
    e->pid = pid;
    e->pidfd = -1;
    if (got == (ssize_t)sizeof(child_errno)) {
        waitpid(pid, &e->status, 0);
        e->reaped = 1;
        e->status = -1;
        errno = child_errno;
        return -1;
    }
    e->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (e->pidfd < 0)
        sh_debug("pmix", "pidfd_open: %s; checking the engine twice a second",
                 strerror(errno));
    sh_info("pmix", "engine started: %s (pid %d)", cfg->argv[0], (int)pid);
    return 0;
}

static void reap(struct engine *e)
{
    int status;

    if (e->pid < 0 || e->reaped)
        return;
    if (waitpid(e->pid, &status, WNOHANG) == e->pid) {
        e->status = status;
        e->reaped = 1;
        if (e->pidfd >= 0)
            close(e->pidfd);
        e->pidfd = -1;
        if (WIFEXITED(status))
            sh_info("pmix", "engine exited with status %d", WEXITSTATUS(status));
        else if (WIFSIGNALED(status))
            sh_info("pmix", "engine killed by signal %d", WTERMSIG(status));
    }
}

/* Stop the engine: SIGTERM, SIGKILL after the grace period. Bounded:
 * returns once reaped or when the grace ends. */
static void kill_engine(struct engine *e, int64_t grace_ns)
{
    int64_t until;

    reap(e);
    if (e->pid < 0 || e->reaped)
        return;
    if (e->term_at == 0) {
        e->term_at = sh_now_ns();
        kill(e->pid, SIGTERM);
    }
    until = e->term_at + grace_ns;
    while (!e->reaped && sh_now_ns() < until) {
        struct pollfd pfd = { .fd = e->pidfd, .events = POLLIN };
        int ms = sh_poll_ms_until(until);

        poll(&pfd, e->pidfd >= 0 ? 1 : 0, e->pidfd >= 0 ? ms : (ms < 50 ? ms : 50));
        reap(e);
    }
    if (!e->reaped) {
        kill(e->pid, SIGKILL);
        if (waitpid(e->pid, &e->status, 0) == e->pid)
            e->reaped = 1;
        if (e->pidfd >= 0)
            close(e->pidfd);
        e->pidfd = -1;
    }
}

/* Exit statuses travel as 32-bit big-endian two's complement. */
static void put_status(unsigned char p[4], int32_t status)
{
    uint32_t v = (uint32_t)status;

    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static int32_t get_status(const unsigned char p[4])
{
    uint32_t v = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];

    return (int32_t)v;
}

static void release_data(void *cbdata)
{
    free(cbdata);
}

/* Concatenate the FENCE blobs in node order; PMIx owns it until release. */
static char *concat(const struct sh_ctl_result *res, size_t *len)
{
    size_t total = 0, off = 0;
    char *buf;

    for (uint32_t i = 0; i < res->nnodes; i++)
        total += res->entry[i].len;
    buf = malloc(total > 0 ? total : 1);
    if (buf == NULL)
        return NULL;
    for (uint32_t i = 0; i < res->nnodes; i++) {
        if (res->entry[i].len > 0)
            memcpy(buf + off, res->entry[i].data, res->entry[i].len);
        off += res->entry[i].len;
    }
    *len = total;
    return buf;
}

/* Append one node's problem to @msg; @pass 0 lists causes (missing nodes,
 * engines that failed on their own), pass 1 the engines we stopped after a
 * failure elsewhere (killed by SIGTERM/SIGKILL), so a message leads with the
 * cause. */
static size_t describe_node(const struct sh_pmix_cfg *cfg, const struct sh_ctl_entry *e,
                            uint32_t i, int pass, char *msg, size_t len, size_t used)
{
    const char *sep = used > 0 ? "; " : "";
    const char *name = sh_ctl_name(cfg->ctl, i);
    int n = 0;

    if (e->state != SH_CTL_OK) {
        if (pass == 0)
            n = snprintf(msg + used, len - used, "%s%s: %s", sep, name,
                         e->state == SH_CTL_MISSING ? "did not answer" : "unreachable");
    } else if (e->tag == TAG_DONE && e->len == DONE_LEN) {
        int32_t st = get_status(e->data);
        uint32_t flags = (uint32_t)get_status(e->data + 4);
        int stopped;

        stopped = (flags & DONE_STOPPED) != 0;
        if (pass != stopped)
            return used;
        if (flags & DONE_ABORTED)
            n = snprintf(msg + used, len - used, "%s%s: engine aborted (PMIx_Abort "
                         "status %d)", sep, name, get_status(e->data + 8));
        else if (flags & DONE_DEADLINE)
            n = snprintf(msg + used, len - used, "%s%s: engine stopped at the deadline",
                         sep, name);
        else if (st == -1)
            n = snprintf(msg + used, len - used, "%s%s: engine did not start", sep, name);
        else if (WIFSIGNALED(st))
            n = snprintf(msg + used, len - used, "%s%s: engine %s by signal %d", sep,
                         name, stopped ? "stopped" : "killed", WTERMSIG(st));
        else if (WIFEXITED(st) && WEXITSTATUS(st) == SH_ENGINE_EXIT_KILLED)
            n = snprintf(msg + used, len - used, "%s%s: engine killed by a crash signal "
                         "a user's process sent (not a crash)", sep, name);
        else if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
            n = snprintf(msg + used, len - used, "%s%s: engine exited with status %d",
                         sep, name, WEXITSTATUS(st));
    }
    if (n < 0)
        return used;
    used += (size_t)n;
    return used < len ? used : len - 1;
}

static void describe(const struct sh_pmix_cfg *cfg, const struct sh_ctl_result *res,
                     char *msg, size_t len)
{
    size_t used = 0;

    msg[0] = '\0';
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < res->nnodes && used + 1 < len; i++)
            used = describe_node(cfg, &res->entry[i], i, pass, msg, len, used);
    }
}

/* ---- the engine phase ------------------------------------------------- */

/* One node's engine phase: what its steps share. */
struct phase {
    const struct sh_pmix_cfg *cfg;
    struct sh_pmix_outcome *out;
    struct engine e;
    /* The client registration's completion: it lives as long as the PMIx
     * server, which may still call back after wait_op() gave up. */
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

    if (server_init(cfg, cfg->hosts[ph->me]) != 0)
        return 0;
    memset(&proc, 0, sizeof(proc));
    PMIX_LOAD_PROCID(&proc, cfg->nspace, ph->me);
    if (register_nspace(cfg, ph->n, ph->me) != 0)
        return 1;
    prc = PMIx_server_register_client(&proc, cfg->uid, cfg->gid, NULL, op_done, &ph->w);
    prc = wait_op(&ph->w, prc, cfg->deadline_ns);
    *env = env_copy(cfg->envp, cfg->tmpdir);
    if (prc != PMIX_SUCCESS) {
        sh_error("pmix", "PMIx_server_register_client: %s", PMIx_Error_string(prc));
    } else if (*env == NULL) {
        sh_error("pmix", "out of memory for the engine environment");
    } else if ((prc = PMIx_server_setup_fork(&proc, env)) != PMIX_SUCCESS) {
        sh_error("pmix", "PMIx_server_setup_fork: %s", PMIx_Error_string(prc));
    } else if (spawn_engine(cfg, *env, &ph->e) != 0) {
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
            { .fd = host.notify[0], .events = POLLIN },
            { .fd = e->pidfd, .events = POLLIN },
        };
        int ms = sh_poll_ms_until(ph->cfg->deadline_ns);

        req = pop_request();
        if (req != NULL && req->is_abort) {
            e->why |= DONE_ABORTED;
            e->abort_status = req->abort_status;
            kill_engine(e, ph->grace);
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
            kill_engine(e, ph->grace);
            break;
        }
        /* Without a pidfd, look at the child twice a second. */
        if (e->pidfd < 0 && ms > 500)
            ms = 500;
        if (poll(pfd, e->pidfd >= 0 ? 2 : 1, ms) > 0 && (pfd[0].revents & POLLIN)) {
            char drain[64];

            while (read(host.notify[0], drain, sizeof(drain)) > 0)
                ;
        }
        reap(e);
    }
    return req;
}

/* Requests that raced with the engine's exit can no longer be served. */
static void drop_requests(void)
{
    struct request *req;

    while ((req = pop_request()) != NULL) {
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
    char *data = all_fence ? concat(res, &len) : NULL;

    if (data != NULL) {
        out->fences++;
        sh_debug("pmix", "fence %u done: %zu bytes", out->fences, len);
        req->cbfunc(PMIX_SUCCESS, data, len, req->cbdata, release_data, data);
    } else {
        describe(ph->cfg, res, out->message, sizeof(out->message));
        sh_error("pmix", "fence failed: %s", out->message[0] ? out->message
                 : "another node's engine has exited");
        req->cbfunc(PMIX_ERROR, NULL, 0, req->cbdata, NULL, NULL);
        /* The others will not come to this fence: stop our engine. */
        if (!ph->e.reaped && ph->e.pid >= 0)
            ph->e.why |= DONE_STOPPED;
        kill_engine(&ph->e, ph->grace);
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
        put_status(status_wire, out->local_status);
        put_status(status_wire + 4, (int32_t)ph->e.why);
        put_status(status_wire + 8, ph->e.abort_status);
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
        kill_engine(&ph->e, ph->grace);
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
            res.entry[i].len == DONE_LEN)
            out->node_status[i] = get_status(res.entry[i].data);
    }
    if (req != NULL)
        answer_fence(ph, req, &res, all_fence);
    if (!any_fence) {
        describe(cfg, &res, out->message, sizeof(out->message));
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
        .e = { .pid = -1, .pidfd = -1, .status = -1 },
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
    if (out->node_status == NULL)
        return -1;
    for (uint32_t i = 0; i < ph.n; i++)
        out->node_status[i] = -1;
    if (pipe2(host.notify, O_CLOEXEC | O_NONBLOCK) != 0) {
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
    kill_engine(&ph.e, ph.grace);
    if (server_up)
        PMIx_server_finalize();
    env_free(env);
    if (host.notify[0] >= 0) {
        close(host.notify[0]);
        close(host.notify[1]);
        host.notify[0] = host.notify[1] = -1;
    }
    if (rc != 0)
        errno = err;
    return rc;
}

/* ---- the host child ---------------------------------------------------- */

/* What the host child reports to sh_pmix_run, followed by nnodes int32
 * exit statuses and the control-plane session state. Parent and child are
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
    if (st == NULL)
        _exit(1);
    for (uint32_t i = 0; i < r.nnodes; i++)
        st[i] = o.node_status != NULL ? o.node_status[i] : -1;
    if (write_all(fd, &r, sizeof(r)) != 0 ||
        write_all(fd, st, r.nnodes * sizeof(*st)) != 0 ||
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
    pid_t pid;
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
    state = malloc(sh_ctl_state_size(cfg->ctl));
    if (out->node_status == NULL || state == NULL)
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
        read_report(fds[0], state, r.state_len, limit) != 0) {
        err = errno;
        sh_error("pmix", "the PMIx host process failed or did not report: %s",
                 strerror(err));
        kill(pid, SIGKILL);
        close(fds[0]);
        waitpid(pid, &status, 0);
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

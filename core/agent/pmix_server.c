/* Embedded PMIx host (pmix_host.h): the PMIx server's callbacks,
 * which run in the PMIx progress thread and hand requests to the main
 * thread, and the server's set-up (namespace, client). */
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
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

struct request_queue sh_pmix_queue = {
    .lock = PTHREAD_MUTEX_INITIALIZER, .notify = { -1, -1 },
};

static void push_request(struct request *req)
{
    char c = 1;

    pthread_mutex_lock(&sh_pmix_queue.lock);
    if (sh_pmix_queue.tail != NULL)
        sh_pmix_queue.tail->next = req;
    else
        sh_pmix_queue.head = req;
    sh_pmix_queue.tail = req;
    pthread_mutex_unlock(&sh_pmix_queue.lock);
    /* A full pipe already means "wake up": ignoring EAGAIN is right. */
    if (write(sh_pmix_queue.notify[1], &c, 1) < 0 && errno != EAGAIN)
        sh_error("pmix", "cannot wake the agent's main thread: %s", strerror(errno));
}

struct request *host_pop_request(void)
{
    struct request *req;

    pthread_mutex_lock(&sh_pmix_queue.lock);
    req = sh_pmix_queue.head;
    if (req != NULL) {
        sh_pmix_queue.head = req->next;
        if (sh_pmix_queue.head == NULL)
            sh_pmix_queue.tail = NULL;
    }
    pthread_mutex_unlock(&sh_pmix_queue.lock);
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
    pthread_mutex_lock(&sh_pmix_queue.lock);
    snprintf(sh_pmix_queue.abort_msg, sizeof(sh_pmix_queue.abort_msg), "%s",
             msg != NULL ? msg : "(no message)");
    pthread_mutex_unlock(&sh_pmix_queue.lock);
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
    free(out->node_flags);
    out->node_flags = NULL;
}

void host_op_done(pmix_status_t status, void *cbdata)
{
    struct wait_cb *w = cbdata;

    pthread_mutex_lock(&w->lock);
    w->status = status;
    w->done = 1;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

/* Wait for an host_op_done callback, bounded by @deadline_ns. */
pmix_status_t host_wait_op(struct wait_cb *w, pmix_status_t rc, int64_t deadline_ns)
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
char **host_env_copy(const char *const *envp, const char *home)
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

void host_env_free(char **env)
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
int host_register_nspace(const struct sh_pmix_cfg *cfg, uint32_t n, uint32_t me)
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
    /* PMIx 5's gds/shmem2 puts its segment files (jobdata, session) in the
     * namespace's PMIX_NSDIR and, without one, in $TMPDIR or /tmp: never
     * PMIX_TMPDIR, whose look-up it skips once PMIX_NSDIR is not found. In
     * /tmp they outlive an agent stopped before PMIx_server_finalize
     * (scancel, the deadline), so they go into the job's private runtime
     * directory, which the epilog removes. */
    ADD(list, PMIX_NSDIR, cfg->tmpdir, PMIX_STRING);
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
                                     host_op_done, &w);
    rc = host_wait_op(&w, rc, cfg->deadline_ns);
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

int host_server_init(const struct sh_pmix_cfg *cfg, const char *hostname)
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

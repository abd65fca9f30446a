/* What the files of the embedded PMIx host share (pmix_server.c: the PMIx
 * server's callbacks and set-up; pmix_engine.c: the engine process;
 * pmix_host.c: the engine phase and sh_pmix_run). Private to them. */
#ifndef STAGEHAND_AGENT_PMIX_INTERNAL_H
#define STAGEHAND_AGENT_PMIX_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pmix_host.h"

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
/* DONE blob: waitpid status, flags, PMIx_Abort status, stall limit in s,
 * segment where the stall was seen (high, low 32 bits; all ones: none)
 * (each be32). */
#define DONE_LEN      24u
#define DONE_ABORTED  SH_PMIX_NODE_ABORTED  /* the engine called PMIx_Abort (status = its code) */
#define DONE_DEADLINE SH_PMIX_NODE_DEADLINE /* the engine was stopped at the deadline */
#define DONE_STOPPED  SH_PMIX_NODE_STOPPED  /* stopped because the run failed elsewhere */
#define DONE_STALLED  SH_PMIX_NODE_STALLED  /* its log: the stall limit ended it */
#define DONE_TIMED_OUT SH_PMIX_NODE_TIMED_OUT /* its log: its deadline ended it */
#define DONE_NO_SEGMENT UINT64_MAX

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

/* Requests from the progress thread, oldest first; notify wakes the main
 * thread (pmix_server.c fills it, pmix_host.c serves it). */
struct request_queue {
    pthread_mutex_t lock;
    struct request *head, *tail;
    int notify[2];                   /* progress thread -> main thread */
    char abort_msg[256];
};
extern struct request_queue sh_pmix_queue;

/* The completion of one asynchronous PMIx server call (host_op_done). */
struct wait_cb {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
    pmix_status_t status;
};

/* The engine process of this node. */
struct engine {
    pid_t pid;                       /* -1 when not running */
    int pidfd;                       /* -1 when unavailable: poll on a tick */
    int status;                      /* waitpid status once reaped */
    int reaped;
    int64_t term_at;                 /* SIGTERM sent at (0: not yet) */
    uint32_t why;                    /* DONE_* flags: why we stopped it */
    int abort_status;
    uint32_t stall_s;                /* DONE_STALLED: the limit, s (0: unknown) */
    uint64_t stall_seg;              /* ... the segment (DONE_NO_SEGMENT: none) */
};

/* After our engine exited with SH_EXIT_TIMEOUT: which limit ended it, from
 * the first error line of its log @path (DONE_STALLED, with the limit and
 * segment that line names, or DONE_TIMED_OUT) into @e->why; nothing when the
 * log cannot be read or says neither. */
void host_timeout_cause(const char *path, struct engine *e);

/* The oldest request of sh_pmix_queue, or NULL; the caller owns it. */
struct request *host_pop_request(void);

/* PMIx op callback: completes the struct wait_cb @cbdata. */
void host_op_done(pmix_status_t status, void *cbdata);

/* Wait for host_op_done on @w after a call that returned @rc, bounded by
 * @deadline_ns (CLOCK_MONOTONIC); PMIX_ERR_TIMEOUT past it. */
pmix_status_t host_wait_op(struct wait_cb *w, pmix_status_t rc, int64_t deadline_ns);

/* The engine's environment: a malloc'd copy of @envp with HOME=@home added
 * when it sets none (pmix_server.c says why). NULL with errno ENOMEM. */
char **host_env_copy(const char *const *envp, const char *home);

/* Free host_env_copy's result; NULL is a no-op. */
void host_env_free(char **env);

/* Register the engine's namespace: @n ranks, this node's rank @me. 0 or -1. */
int host_register_nspace(const struct sh_pmix_cfg *cfg, uint32_t n, uint32_t me);

/* PMIx_server_init for this node (@hostname) with our callbacks. 0 or -1. */
int host_server_init(const struct sh_pmix_cfg *cfg, const char *hostname);

/* Fork and exec the engine (cfg->argv) with @env into @e. 0, or -1 with errno. */
int host_spawn_engine(const struct sh_pmix_cfg *cfg, char **env, struct engine *e);

/* Reap the engine if it has exited (no wait). */
void host_reap(struct engine *e);

/* Stop the engine: SIGTERM, SIGKILL after @grace_ns; bounded. */
void host_kill_engine(struct engine *e, int64_t grace_ns);

/* Exit statuses travel as 32-bit big-endian two's complement. */
void host_put_status(unsigned char p[4], int32_t status);

int32_t host_get_status(const unsigned char p[4]);

/* PMIx release callback of host_concat's buffer. */
void host_release_data(void *cbdata);

/* The FENCE blobs of @res in node order (malloc'd; *len bytes). */
char *host_concat(const struct sh_ctl_result *res, size_t *len);

/* What went wrong on which nodes, from @res, into @msg of @len bytes. */
void host_describe(const struct sh_pmix_cfg *cfg, const struct sh_ctl_result *res,
                   char *msg, size_t len);

#endif

/* Embedded PMIx server that launches the engine as one MPI rank of a job
 * spanning the agents (doc/design.md §2 step 5; §8 "Wiring up Open MPI
 * from a foreign PMIx server").
 *
 * One rank per node: rank r runs on node r of the control tree @ctl, which
 * must contain exactly the participating nodes (build a tree over the
 * participants with sh_ctl_join when they are a subset). Every fence
 * (fence_nb) is an allgather over the control plane; blobs are concatenated
 * in node order. direct_modex is not supported (all data is collected in the
 * fences). PMIx_Abort from the engine kills the local engine.
 *
 * The engine phase is a sequence of collective operations that every agent
 * runs in the same order: each contributes either FENCE (its engine asked
 * for a fence) or DONE (its engine has exited, with the exit status). A fence
 * succeeds when all contribute FENCE; when some node is DONE or missing, the
 * fence fails on every node at once, the engines are killed, and the next
 * operation collects DONE from everyone. The phase ends when no node is in a
 * fence; every node then knows every node's exit status. Nothing waits past
 * the deadline: the engine is killed (SIGTERM, then SIGKILL) and missing
 * nodes are named.
 *
 * The PMIx server runs in a child process for the duration of one call
 * (libpmix 4.2 cannot be initialised twice in one process), which carries the
 * control-plane session and hands it back: call sh_pmix_run as often as
 * needed (one engine per image), from a single-threaded agent, as the job user
 * (the server and the engine run with the caller's identity). The engine
 * stays in the caller's process group, so a kill of that group (the plugin's
 * deadline) reaches it. */
#ifndef STAGEHAND_PMIX_HOST_H
#define STAGEHAND_PMIX_HOST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stagehand/bcast.h"
#include "ctl.h"

struct sh_pmix_cfg {
    struct sh_ctl *ctl;          /* tree of the participating nodes; rank = index */
    const char *nspace;          /* same on every node: sh_pmix_make_nspace at the
                                    root, then sh_ctl_bcast */
    const char *const *hosts;    /* sh_ctl_nnodes(ctl) node names for PMIX_NODE_MAP;
                                    injectable (tests run N "nodes" on one host) */
    const char *tmpdir;          /* existing per-job directory of the job user:
                                    PMIx server and system tmpdir */
    uid_t uid;                   /* job user: PMIX_USERID/GRPID, register_client */
    gid_t gid;
    const char *const *argv;     /* engine argv, argv[0] an absolute path (F19) */
    const char *const *envp;     /* the engine's whole environment, NULL-terminated
                                    "K=V" (minimal, F19); must carry SLURM_JOBID,
                                    SLURM_NODELIST and SLURM_STEP_ID for Open MPI
                                    4.1 (measured) - PMIx adds its own variables,
                                    and HOME=<tmpdir> unless it sets HOME (Open
                                    MPI 5 aborts in MPI_Init without HOME) */
    int64_t deadline_ns;         /* overall deadline (CLOCK_MONOTONIC) */
    int64_t kill_grace_ns;       /* SIGTERM to SIGKILL; 0: 2 s */
    const char *logpath;         /* the engine's log (its stderr): read after it
                                    exits with SH_EXIT_TIMEOUT, to tell the stall
                                    limit from the deadline; NULL: not read */
    int close_fd;                /* a descriptor of the caller's that the host
                                    process closes first (the agent's control
                                    listener); ignored unless > 2 */
};

/* The engine's exit status for a crash signal another process of a user
 * sent it (stagehand/bcast.h): no crash, never the node's fault (security
 * issue 30). */
#define SH_ENGINE_EXIT_KILLED SH_EXIT_KILLED

/* What the closing exchange said of each node (sh_pmix_outcome.node_flags):
 * why its agent stopped its engine, or that the node never reported. */
#define SH_PMIX_NODE_ABORTED     1u      /* the engine called PMIx_Abort */
#define SH_PMIX_NODE_DEADLINE    2u      /* stopped at the deadline */
#define SH_PMIX_NODE_STOPPED     4u      /* stopped because the run failed elsewhere */
#define SH_PMIX_NODE_STALLED     8u      /* the engine ended for the stall limit */
#define SH_PMIX_NODE_TIMED_OUT   0x10u   /* the engine ended at its deadline */
#define SH_PMIX_NODE_MISSING     0x100u  /* its agent did not answer */
#define SH_PMIX_NODE_UNREACHABLE 0x200u  /* its agent could not be reached */
#define SH_PMIX_NODE_CLOSED      0x400u  /* its agent closed the control connection */

struct sh_pmix_outcome {
    int local_status;            /* waitpid status of our engine, -1 never ran */
    uint32_t fences;             /* fences completed successfully */
    uint32_t nnodes;
    int32_t *node_status;        /* per node: waitpid status, -1 missing (malloc'd) */
    uint32_t *node_flags;        /* per node: SH_PMIX_NODE_* (malloc'd); the same on
                                    every node that took part in the last exchange */
    uint32_t nfailed;            /* nodes missing or not exited with status 0 */
    char message[512];           /* "" on success, else names nodes and reasons */
};

/* Run the engine under an embedded PMIx server. Returns 0 when every node's
 * engine exited with status 0, or -1 with errno: EIO (some engine failed or
 * a node is missing; out->message says which), ETIMEDOUT (deadline; engine
 * killed), EINVAL (configuration), EPERM (not running as cfg->uid/gid: the
 * caller must drop privileges first), ECONNRESET (lost the control plane),
 * EPROTO (PMIx server error, logged). *out is filled in every case once the
 * arguments are valid (after EINVAL it holds nothing to free); free it with
 * sh_pmix_outcome_free. EINVAL returns at once, without taking part in the
 * collective sequence (the others then see this node as missing); every other
 * failure is reported to all nodes through it. */
int sh_pmix_run(const struct sh_pmix_cfg *cfg, struct sh_pmix_outcome *out);

void sh_pmix_outcome_free(struct sh_pmix_outcome *out);

/* "stagehand.<jobid>.<16 random hex digits>": a fresh namespace per run, so
 * that a rerun never meets state of an earlier one. Returns 0 or -1 (EIO from
 * the RNG, ENAMETOOLONG when @len is too small). */
int sh_pmix_make_nspace(uint64_t jobid, char *buf, size_t len);

/* The PMIx host is built as a module of its own, SH_PMIX_MODULE_PATH, the
 * only part of the agent that links libpmix (and through it libevent, hwloc,
 * udev and munge). An agent loads it when its node runs an engine, so the
 * agent of a node that only votes (its copy is current, the no-op) starts
 * without mapping and relocating those libraries (5 of its 12 shared
 * objects; 214 page faults instead of 281 to start and exit), and none of
 * them runs as root: the module is loaded after the drop to the job user.
 * On the emulated cluster this does not shorten the no-op at N=8 measurably
 * (doc/performance.md).
 * The module resolves the control-plane, log and RNG functions it calls
 * (sh_ctl_*, sh_log, sh_random_bytes) from the agent executable, which
 * exports them (core/agent/agent.dynlist). */
struct sh_pmix_ops {
    int (*run)(const struct sh_pmix_cfg *cfg, struct sh_pmix_outcome *out);
    void (*outcome_free)(struct sh_pmix_outcome *out);
    int (*make_nspace)(uint64_t jobid, char *buf, size_t len);
};

/* The module's one exported symbol: the three functions above. */
extern const struct sh_pmix_ops sh_pmix_module_ops;

/* Load the module (dlopen(3) of SH_PMIX_MODULE_PATH, RTLD_NOW | RTLD_LOCAL)
 * on the first call and return its entry points, which stay valid for the
 * life of the process (the module is never unloaded). Returns NULL with the
 * reason (dlerror(3): a missing or broken installation of this node) in
 * @err. Not thread-safe: the agent is single-threaded when it calls it. */
const struct sh_pmix_ops *sh_pmix_load(char *err, size_t errlen);

#endif

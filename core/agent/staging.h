/* stagehand-agent --prolog: what its files share (private to core/agent).
 *
 *   stage.c     the process: inputs, log sinks, the job's control tree, the
 *               loop over images and the outcome on the plugin's pipe
 *   root.c      the root-only set-up, then the privilege drop
 *   default_dir.c  the per-user default destination directory (as root)
 *   protocol.c  the per-image protocol: SRC check, votes, plan, engine
 *               phase, results, outcome (stage_image_run)
 *   dst.c       node-local DST housekeeping: markers, claims, temp files
 *               of a killed engine, the digest check after a copy
 *   launch.c    the engine's launch under the embedded PMIx server, and
 *               the classification of how it ended
 *   engine_cmd.c  the engine's command line and environment (with the
 *               site's mpi_env file, read as root)
 *   outcome.c   the engine's outcome: its --json report, read with json-c
 *               (engine_report.h), as messages and node faults
 *   import.c    registry images on node 0: the digest, the site's importer
 *               (import.h) */
#ifndef STAGEHAND_AGENT_STAGING_H
#define STAGEHAND_AGENT_STAGING_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <limits.h>
#include <sys/types.h>

#include "stagehand/agentio.h"
#include "stagehand/config.h"
#include "ctl.h"
#include "key.h"
#include "stagehand/kv.h"
#include "stagehand/spec.h"
#include "stagehand/status.h"

#define MAX_ARGS 64
#define MAX_MPI_ENV 64
#define STEP_JOB SH_AGENT_STEP_JOB

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
    char refuse[SH_STATUS_LINE_MAX]; /* refuse=: the cache pre-check's message */
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
    /* The image being staged is a registry image (protocol.c, import.c):
     * the engine reads @engine_src (node 0's import) instead of the spec's
     * SRC, and every node records @engine_src_name (the reference pinned
     * to its digest) as the source's identity. Empty otherwise. */
    char engine_src[PATH_MAX];
    char engine_src_name[PATH_MAX];
};

/* stage.c */
/* Record the staging's failure (the first cause is kept). */
void set_failure(struct agent *a, bool node_fault, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* errno of a node's own failure that means the node is unwell. */
bool node_fault_errno(int e);
/* errno of a resource a node ran out of: the job's error. */
bool resource_errno(int e);
/* The control-tree step id of image @img's engine tree. */
uint64_t image_tree_step(const struct agent *a, size_t img);
/* Hand the tree @cc the staging's listener (0), or fail with @err (-1). */
int tree_listener(const struct agent *a, struct sh_ctl_cfg *cc, char *err, size_t errlen);

/* root.c: as root, before the drop; 0, or -1 with the reason in @err. */
int root_setup(struct agent *a, char *err, size_t errlen);
int drop_privileges(const struct agent *a, char *err, size_t errlen);

/* default_dir.c: create the per-user default destination directory @dir as
 * root; *@user_fault: the cause is a user's object or a full filesystem. */
int make_default_dir(const struct agent *a, const char *dir, char *err, size_t errlen,
                     bool *user_fault);

/* protocol.c: stage image @img on every node (set_failure on failure). */
void stage_image_run(struct agent *a, size_t img);

/* dst.c */
int marker_create(const struct agent *a, size_t img, const char *dir);
void marker_remove(const struct agent *a, size_t img, const char *dir);
bool marker_foreign(const struct agent *a, size_t img, const char *dir, char *who,
                    size_t wholen);
void claim_write(const struct agent *a, size_t img, const char *dst, const char *text, int n);
void sweep_own_temps(const struct agent *a, const char *dst);
int verify_copy_digest(struct agent *a, const char *dst, const char *reader_digest,
                       bool copied, int64_t since, char *buf, size_t buflen, int *len,
                       char *ref_out);

/* launch.c: a run repaired around dead nodes (doc/design.md §5). */
struct engine_repair {
    bool repaired;          /* the second run, without the dead nodes, ran */
    uint32_t *part;         /* its participants (node 0 first; malloc'ed) */
    uint32_t npart, mypos;  /* this node is part[mypos] */
    char lost[SH_STATUS_LINE_MAX / 4]; /* the dead nodes and what ended */
};

/* launch.c: run the engine for image @img on the participants @part
 * (node 0 first; this node is @part[mypos]), around dead nodes when some
 * die (@rp; its part is the caller's to free). Returns 0, or -1 with @err
 * set and *@outcome true when @err is the same text on every participant. */
int run_engine(struct agent *a, size_t img, const uint32_t *part, uint32_t npart,
               uint32_t mypos, bool *outcome, struct engine_repair *rp, char *err,
               size_t errlen);
/* Where image @img's engine writes its --json report. */
void engine_report_path(const struct agent *a, size_t img, char *buf, size_t len);

/* engine_cmd.c: the engine's command line and environment, in the buffers
 * of one struct engine_cmd (the caller's, on its stack: ~45 KiB). SRC and
 * DST go in the environment, not on the command line that every user of
 * the node can read (stagehand/bcast.h). */
struct engine_cmd {
    char segsz[32], depth[32], tmo[32], ranks[16], stall[32], rahead[16], dirmode[16];
    char env_jobid[64], env_jobid2[64], env_nodelist[8300], env_step[64];
    char env_tmp[PATH_MAX + 8], env_src[PATH_MAX + 32], env_dst[PATH_MAX + 32];
    char env_srcname[PATH_MAX + 32];
    const char *argv[32];
    const char *envp[8 + MAX_MPI_ENV + SH_CONFIG_PML_ENV_MAX + 1];
};

/* Fill @e for image @img's engine on @npart participants: @e->argv the
 * engine (cfg.engine) with its options from the site's configuration and
 * --timeout the seconds left to @a->deadline (at least 1), @e->envp its
 * whole environment: SRC and DST, SLURM_JOBID, SLURM_JOB_ID, SLURM_NODELIST
 * and SLURM_STEP_ID (= @img) for Open MPI, TMPDIR (the runtime directory),
 * then the site's mpi_env settings and the pml= defaults the site left
 * unset. Both NULL-terminated, pointing into @e and @a (which must outlive
 * them). No I/O, cannot fail. */
void engine_cmd_build(const struct agent *a, size_t img, uint32_t npart, struct engine_cmd *e);
/* Read the site's mpi_env file (cfg.mpi_env; none: nothing to do) into
 * @a->mpi_env, as root (an admin's file): "KEY=VALUE" lines with an
 * OMPI_MCA_, UCX_ or PMIX_MCA_ key, '#' comments and blank lines, at most
 * MAX_MPI_ENV settings (malloc'ed, @a's to free). Returns 0, or -1 with the
 * reason in @err: the file cannot be opened (with strerror(errno)), a line
 * of another form or key, too many settings, or out of memory. */
int load_mpi_env(struct agent *a, char *err, size_t errlen);

/* outcome.c */
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

void reasons_add(struct reasons *r, const char *node, const char *text, size_t tlen);
size_t reasons_format(const struct reasons *r, char *buf, size_t len);

#endif

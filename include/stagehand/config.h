/* Site configuration: the plugstack.conf arguments of stagehand.so
 * (doc/design.md §7), parsed strictly.
 *
 *   required stagehand.so allowed_dest=/nvme:/scratch/local key=value ...
 *
 * Every argument is key=value; each key may appear once; unknown keys, empty
 * values and out-of-range values are errors whose message names the key and
 * the value. Defaults are set first (sh_config_defaults()), so a parsed
 * config is complete. The prolog should hand the same argument vector to the
 * agent and let it call sh_config_parse() too, so both read one config.
 *
 * key             value                                     default
 * allowed_dest    ':'-separated absolute roots DST must     (required)
 *                 lie under (at most SH_CONFIG_MAX_ROOTS,
 *                 each shorter than SH_CONFIG_ROOT_MAX; "/"
 *                 is refused: it would allow every path)
 * default_dest    absolute directory for images given       <first root>/stage/%u
 *                 without DST; "%u" = user name, "%%" = "%";
 *                 must lie under an allowed root
 * key_file        absolute path of the site key             /etc/slurm/stagehand.key
 * agent, engine   absolute paths of the helpers             installed paths
 * port_base       first control-plane port, 1..65535        300
 * port_range      number of ports, >= 1, base+range-1       200
 *                 <= 65535; keep the range below the
 *                 kernel's ip_unprivileged_port_start (1024)
 *                 so no user can take a port (ctlport.h)
 * fanout          control-tree fanout, 1..1024              32
 * segment_size    engine segment, bytes with unit           512K (measured:
 *                 (K/M/G, KiB/...), > 0 and <= 1 GiB (SH_SEGMENT_MAX)
 *                 (case F09: "4G" is refused)
 * pipeline_depth  segments in flight per node, 1..64        8 doc/
 *                                                           performance.md)
 * read_ahead      segments the reading node reads from SRC   4 (or the depth
 *                 at once, 1..pipeline_depth                 if smaller)
 * timeout         overall staging deadline, 1s..24h         600s
 *                 (s/ms/m/h; keep it below PrologEpilogTimeout)
 * check           meta | content | size | never             meta
 * hash            xxh3 | sha256                             xxh3
 * mpi_env         absolute path of a file of OMPI_MCA_* /   (none)
 *                 UCX_* settings for the engine
 * cache           absolute directory of the node image      (none: off)
 *                 cache (stagehand/cache.h); images given
 *                 without DST are staged into it; neither
 *                 under nor above an allowed root
 * pml             ob1 | ucx | auto: the engine's Open MPI   ob1
 *                 point-to-point layer (sh_config_pml_env)
 * on_node_fault   fail | drain                              fail
 * submit_check    yes | no (check SRC is readable at        yes
 *                 submit)
 * verbose         yes | no (per-image summary in job        no
 *                 output by default)
 * stall_timeout   a transfer that moves no data this long    60s
 *                 fails, naming the segment (F22); 0 = off,
 *                 else 1s..1h
 * join_timeout    how long agents wait for each other to      60s
 *                 start (a job cancelled while its prolog
 *                 starts frees its nodes after this), 1s..1h
 * allow_shared_dst yes | no (allow DST on a network         no
 *                 filesystem; case F01)
 * dest_dir_mode   mode of the directories of DST's path that   0700
 *                 stagehand creates for the user (minus the
 *                 job's umask), octal, 0700..0777 (issue 30)
 * allowed_registries ','-separated registries (host[:port]) (none: no
 *                 docker:// image may be staged; "*" allows
 *                 every registry) users may stage from (issue 36)
 * default_registry registry of docker:// references that      (none)
 *                 name none (host[:port])
 * resolver        command printing a reference's manifest      stagehand-import,
 *                 digest (ref.h: ','-joined arguments, %r)     digest,%r
 * importer        command writing a reference's Squashfs       stagehand-import,
 *                 image to %o (ref.h placeholders)             import,%r,%o
 * cache_high      eviction starts when a staging into the      90%
 *                 cache would fill its filesystem past this:
 *                 percent (0%..100%) or bytes with a unit
 * cache_low       eviction removes unused entries, least       80%
 *                 recently used first, down to this mark
 *                 (same forms; not above cache_high)
 * cache_max       evict unused entries when a staging would    0 (no limit)
 *                 bring all entries above this (K/M/G/T)
 *
 * Booleans accept exactly "yes" and "no".
 */
#ifndef STAGEHAND_CONFIG_H
#define STAGEHAND_CONFIG_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stagehand/modes.h"

#define SH_CONFIG_MAX_ROOTS 16
#define SH_CONFIG_ROOT_MAX 256
#define SH_CONFIG_LIST_MAX 1024 /* allowed_registries, resolver, importer */

enum sh_node_fault { SH_FAULT_FAIL = 0, SH_FAULT_DRAIN };

/* A fill mark of the cache's filesystem (cache_high=, cache_low=): a
 * percentage of the filesystem's size or an absolute number of bytes in use. */
struct sh_cache_mark {
    bool percent;   /* value is 0..100 (percent) rather than bytes */
    uint64_t value;
};

/* The engine's point-to-point layer: Open MPI's ob1 over its TCP and
 * shared-memory transports, its UCX layer (InfiniBand, RoCE, or UCX's own
 * TCP), or whatever the site's Open MPI settings choose. */
enum sh_pml { SH_PML_OB1 = 0, SH_PML_UCX, SH_PML_AUTO };

struct sh_config {
    char allowed_dest[SH_CONFIG_MAX_ROOTS][SH_CONFIG_ROOT_MAX]; /* normalised */
    size_t n_allowed_dest;
    char default_dest[PATH_MAX]; /* template, may contain %u */
    char key_file[PATH_MAX];
    char agent[PATH_MAX];
    char engine[PATH_MAX];
    char mpi_env[PATH_MAX];      /* "" = none */
    uint16_t port_base;
    uint16_t port_range;
    unsigned fanout;
    uint64_t segment_size;       /* bytes */
    unsigned pipeline_depth;
    unsigned read_ahead;         /* 1..pipeline_depth after parsing */
    uint64_t timeout_ns;
    uint64_t stall_timeout_ns;   /* transfer without progress fails; 0: off */
    uint64_t join_timeout_ns;    /* agents' rendezvous (control tree) bound, ns */
    enum sh_check check;
    enum sh_hash_algo hash;
    enum sh_node_fault on_node_fault;
    enum sh_pml pml;
    bool submit_check;
    bool verbose;
    bool allow_shared_dst;
    unsigned dest_dir_mode;      /* permission bits, 07xx */
    char allowed_registries[SH_CONFIG_LIST_MAX]; /* ','-separated, or "" */
    char default_registry[256];  /* "" = none */
    char resolver[SH_CONFIG_LIST_MAX];
    char importer[SH_CONFIG_LIST_MAX];
    char cache[SH_CONFIG_ROOT_MAX]; /* node image cache, normalised; "" = off */
    struct sh_cache_mark cache_high; /* eviction trigger (default 90%) */
    struct sh_cache_mark cache_low;  /* eviction target (default 80%) */
    uint64_t cache_max;              /* bytes of all entries; 0 = no limit */
};

/* Bytes of a filesystem of @fs_bytes that @mark allows in use (a percentage
 * rounds down). Never fails. */
uint64_t sh_cache_mark_bytes(const struct sh_cache_mark *mark, uint64_t fs_bytes);

/* Fill @cfg with the defaults of the table above (allowed_dest empty,
 * default_dest empty until sh_config_parse() derives it). */
void sh_config_defaults(struct sh_config *cfg);

/* Parse plugstack arguments @argv[0..argc) into @cfg (defaults first).
 * Returns 0, or -1 with errno = EINVAL (unknown or repeated key, bad value,
 * allowed_dest missing) or ERANGE (value out of bounds) and a message naming
 * the key and value in @err (@errlen bytes, NUL-terminated). On error @cfg
 * holds defaults plus whatever was parsed; do not use it. */
int sh_config_parse(struct sh_config *cfg, int argc, const char *const *argv,
                    char *err, size_t errlen);

/* Expand default_dest for user @user ("%u") into @out (@outlen bytes),
 * normalised. Returns 0, or -1 with errno = EINVAL (user name empty, or
 * containing '/' or a control character, or the result is not a valid path)
 * or ENAMETOOLONG. */
int sh_config_default_dir(const struct sh_config *cfg, const char *user,
                          char *out, size_t outlen);

/* The fixed part of default_dest, the same for every user: the directory
 * above the first component that holds %u (for "/nvme/stage/%u":
 * "/nvme/stage"; without %u, the directory above default_dest), normalised,
 * into @out (@outlen bytes). Root makes it when slurmd starts, so that no
 * user can make it first (security issue 30 item 3). Returns 0, or -1 with
 * errno = EINVAL or ENAMETOOLONG. */
int sh_config_default_fixed(const struct sh_config *cfg, char *out, size_t outlen);

/* The allowed root that the normalised absolute @dst lies strictly under
 * (component-wise: "/nvme2/x" is not under "/nvme"), or NULL. A DST of the
 * node image cache (stagehand/cache.h: "<cache>/job/..."), when a cache is
 * set, has the cache directory as its root. */
const char *sh_config_allowed_root(const struct sh_config *cfg,
                                   const char *dst);

/* Site policy for one DST: 0 if allowed, else -1 with errno = EACCES and a
 * message for the user in @err naming the allowed roots (and, for /tmp and
 * /dev/shm, why those are unsafe: case F23). */
int sh_config_check_dest(const struct sh_config *cfg, const char *dst,
                         char *err, size_t errlen);

/* Site policy for a docker:// image from @registry: 0 if allowed_registries
 * lists it, else -1 with errno = EACCES and a message naming the allowed
 * registries in @err. */
int sh_config_check_registry(const struct sh_config *cfg, const char *registry,
                             char *err, size_t errlen);

/* Static names for log lines: "meta", "xxh3", "fail", ... */
const char *sh_config_fault_name(enum sh_node_fault fault);
const char *sh_config_pml_name(enum sh_pml pml);

/* The engine's default MPI environment for @pml: a NULL-terminated array of
 * static "KEY=VALUE" strings (not to be freed). The agent passes each one
 * whose KEY the site's mpi_env file does not set, so the site can override
 * any of them.
 *   ob1:  OMPI_MCA_pml=ob1, OMPI_MCA_btl=self,vader,tcp and no warning for
 *         unused transports (Open MPI's own choice would be UCX where it
 *         finds InfiniBand);
 *   ucx:  OMPI_MCA_pml=ucx with OMPI_MCA_pml_ucx_tls=any and
 *         OMPI_MCA_pml_ucx_devices=any (Open MPI's pml ucx otherwise declines
 *         a node without an InfiniBand or RoCE device; see ompi_info --all),
 *         and UCX_TLS=tcp,self,sm: UCX's TCP and shared-memory transports,
 *         which every node has; a site with InfiniBand sets UCX_TLS (e.g.
 *         rc,sm,self) in its mpi_env file; and UCX_LOG_FILE=stderr: UCX
 *         logs to stdout by default, and the engine's stdout is its report.
 *         It must be in the environment the engine starts with: Open MPI 5
 *         loads UCX before main(), and a UCX_LOG_FILE set later is only
 *         reported (on stdout) as an unused variable;
 *   auto: nothing: the site's Open MPI settings (openmpi-mca-params.conf,
 *         its mpi_env file) decide.
 * An unknown @pml gives the empty list. */
#define SH_CONFIG_PML_ENV_MAX 8  /* entries sh_config_pml_env() returns, at most */
const char *const *sh_config_pml_env(enum sh_pml pml);

#endif

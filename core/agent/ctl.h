/* Agent control plane: a k-ary tree of authenticated TCP connections between
 * the agents of one job step (doc/design.md §3, F21).
 *
 * Node i (0..N-1, its position in the expanded node list) has parent
 * (i-1)/k and children k*i+1 .. k*i+k; node 0 is the root (a star when
 * N-1 <= k). Nodes with children listen on a port derived from job and step
 * id within [port_base, port_base+port_range), probing upward when it is
 * taken; children probe the same ports and keep the one whose handshake
 * proves the right job, step and node (handshake.h).
 *
 * Every operation is collective: all nodes call the same operations in the
 * same order. Operations are bounded by an absolute deadline; waits are
 * staggered by depth (a node at depth d gives up on its children `margin`
 * earlier than its parent gives up on it), so the root learns exactly which
 * nodes did not answer and can name them. A child that misses a deadline is
 * disconnected for the rest of the session. Nothing here busy-waits: all
 * waiting is poll(2) with a timeout.
 *
 * Deadlines are absolute CLOCK_MONOTONIC times. Give every operation of a
 * session the same deadline (the staging deadline), not "now + x" per call:
 * a node that waited out a missing child must still find its parent waiting.
 * After the join, sh_ctl_sync_deadline aligns the nodes on the root's clock.
 * An allgather needs margin*height before its deadline for the broadcast.
 *
 * Not thread-safe: use one sh_ctl from one thread. */
#ifndef STAGEHAND_CTL_H
#define STAGEHAND_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stagehand/ctlport.h"
#include "key.h"

#define SH_CTL_FANOUT_DEFAULT   32u
#define SH_CTL_MARGIN_DEFAULT   (250 * INT64_C(1000000))   /* ns per tree level */
#define SH_CTL_HS_TIMEOUT       (3 * INT64_C(1000000000))  /* ns per handshake */
/* Handshakes a listener serves at once, and of those at most this many from
 * one address: connections that stall cannot keep a peer out. */
#define SH_CTL_HS_SLOTS         64u
#define SH_CTL_HS_SLOTS_PER_ADDR 8u
/* Retries of an unreachable parent. Agents start tens of milliseconds apart
 * in a prolog, so a child often finds its parent not yet listening; a refused
 * connect costs one round trip, so the delay grows with the time already
 * waited (1/8 of it) between these bounds: a child joins at most ~12 % later
 * than its parent starts listening, with O(log) attempts. */
#define SH_CTL_RETRY_MIN        (2 * INT64_C(1000000))     /* ns */
#define SH_CTL_RETRY_MAX        (1 * INT64_C(1000000000))  /* ns */
/* Bound of one connect that wakes a child's sentinel (sh_ctl_join). */
#define SH_CTL_POKE_TIMEOUT     (100 * INT64_C(1000000))   /* ns */
/* Bound of the authenticated wake-up's handshake with a child's agent until
 * its challenge arrives: an agent a sentinel has just started may not serve
 * yet (the next round wakes it), and a port held by another process that
 * never answers costs no more than this per port and round. */
#define SH_CTL_WAKE_TIMEOUT     (100 * INT64_C(1000000))   /* ns */
/* For this long a round of attempts ends at the first refused port. */
#define SH_CTL_QUICK_PROBE_NS   (1 * INT64_C(1000000000))  /* ns */

struct sh_ctl_cfg {
    uint32_t nnodes;             /* N >= 1 */
    uint32_t index;              /* this node, < N */
    uint32_t fanout;             /* k >= 1; 0 means SH_CTL_FANOUT_DEFAULT */
    const char *const *names;    /* N node names (messages; addresses unless addrs) */
    const char *const *addrs;    /* optional N hosts to connect to (NULL: names) */
    const char *bind_addr;       /* listen address, NULL: all addresses */
    uint16_t port_base;          /* first port of the admin range */
    uint16_t port_range;         /* number of ports, >= 1, base+range <= 65536 */
    uint16_t port_probe;         /* ports tried upward from the derived one;
                                    0: min(range, 64) */
    uint64_t jobid, stepid;
    bool port_stepid_set;        /* derive the ports from port_stepid, not
                                    stepid: a tree that shares another tree's
                                    listener (the agent's engine trees share
                                    the job's) */
    uint64_t port_stepid;
    const unsigned char *kjob;   /* SH_KEY_LEN bytes of K_job (copied) */
    int64_t level_margin_ns;     /* deadline stagger per level; 0: default */
    int64_t hs_timeout_ns;       /* one handshake; 0: SH_CTL_HS_TIMEOUT */
    uint32_t max_payload;        /* frame payload bound; 0: SH_FRAME_MAX_PAYLOAD */
    bool inherit_listener;       /* listen_fd is this node's listener, bound by the
                                    plugin's sentinel on one of this step's probed
                                    ports (taken over, closed after the join) */
    int listen_fd;
    bool wait_wake;              /* started by a sentinel (with inherit_listener):
                                    do nothing but serve the listener until one
                                    peer proves K_job (a child's handshake, or the
                                    parent's wake-up); only then reach the parent
                                    and wake the children */
};

enum sh_ctl_state {
    SH_CTL_OK = 0,           /* the node contributed */
    SH_CTL_MISSING = 1,      /* the node did not answer in time (or its link broke) */
    SH_CTL_UNREACHABLE = 2,  /* behind a missing node: its state is unknown */
    SH_CTL_CLOSED = 3,       /* it joined, then its connection closed before it
                                answered: its agent ended or its link broke */
};

struct sh_ctl_entry {
    uint32_t state;          /* enum sh_ctl_state */
    uint32_t tag;            /* caller-defined word sent with the blob */
    uint32_t len;            /* bytes in data */
    unsigned char *data;     /* malloc'd, NULL when len == 0 */
};

/* Per-node contributions, indexed by node index. */
struct sh_ctl_result {
    uint32_t nnodes;         /* 0 when the result is not filled */
    uint32_t nmissing;       /* entries whose state is not SH_CTL_OK */
    struct sh_ctl_entry *entry;
};

struct sh_ctl;

/* Parent of @index in a @fanout-ary tree (index 0 has none: returns 0). */
uint32_t sh_ctl_parent_of(uint32_t index, uint32_t fanout);

/* Delay (ns) before the next attempt to reach the parent after @waited_ns of
 * trying: waited/8 clamped to [SH_CTL_RETRY_MIN, SH_CTL_RETRY_MAX]. Pure. */
int64_t sh_ctl_retry_delay(int64_t waited_ns);

/* Form the tree: listen (if this node has children, or take over the
 * handed-over listener), connect and authenticate to the parent with bounded
 * retry, and accept the children, until all are there or the
 * (depth-staggered) deadline. Children not yet connected are woken, at the
 * same growing intervals as the parent is retried: a connection to each port
 * of their sequence (a sentinel there starts their agent: spank/sentinel.c),
 * then a handshake as their parent (the agent a sentinel started joins only
 * after such a proof of K_job, cfg.wait_wake), so a node whose copies are
 * current joins only when another node's agent of the job needs it. Children
 * that did not connect are logged and reported as missing by the next gather;
 * failing to reach the parent is an error. Returns 0 with *out set, or -1
 * with errno EINVAL (bad configuration), ETIMEDOUT (parent unreachable by the
 * deadline: logged with its name and the port range), ENOTCONN (wait_wake:
 * no peer proved K_job by the deadline; logged at debug only), EADDRINUSE (no
 * free port to listen on), ENOMEM, EINVAL also for a handed-over descriptor
 * that is not a listener on one of this step's ports. */
int sh_ctl_join(const struct sh_ctl_cfg *cfg, int64_t deadline_ns,
                struct sh_ctl **out);

/* Gather a (@tag, @data, @len) contribution of every node to the root.
 * At the root *res is filled (free with sh_ctl_result_free); elsewhere
 * res->nnodes is 0. Missing nodes are entries with a non-OK state, and the
 * root logs their names. Returns 0 when the operation completed (even with
 * missing nodes), or -1 with errno when this node could not take part (lost
 * its parent: ECONNRESET/ETIMEDOUT/EBADMSG/EPROTO; EMSGSIZE; ENOMEM). */
int sh_ctl_gather(struct sh_ctl *ctl, uint32_t tag, const void *data, uint32_t len,
                  int64_t deadline_ns, struct sh_ctl_result *res);

/* Broadcast @len bytes of @data from the root (ignored elsewhere). Every node,
 * the root included, gets a malloc'd copy in *out / *outlen (NULL when 0).
 * Returns 0, or -1 with errno (as sh_ctl_gather) when this node did not get
 * the data. A child whose link fails is logged and dropped. */
int sh_ctl_bcast(struct sh_ctl *ctl, const void *data, uint32_t len,
                 unsigned char **out, uint32_t *outlen, int64_t deadline_ns);

/* Gather then broadcast: every node gets the same *res (the root's view:
 * missing nodes flagged). The gather part ends margin*height before
 * @deadline_ns to leave the broadcast time. Returns as sh_ctl_gather. */
int sh_ctl_allgather(struct sh_ctl *ctl, uint32_t tag, const void *data,
                     uint32_t len, int64_t deadline_ns, struct sh_ctl_result *res);

/* Align deadlines after the join: the root broadcasts the time it has left
 * until its *deadline_ns, and every node sets *deadline_ns to the earlier of
 * its own and now + the root's remaining time. Agents started seconds apart
 * (F21) then stop together instead of each waiting out its own clock, while no
 * node ever extends the deadline it was given. Returns 0, or -1 with errno as
 * sh_ctl_bcast (*deadline_ns unchanged). */
int sh_ctl_sync_deadline(struct sh_ctl *ctl, int64_t *deadline_ns);

void sh_ctl_result_free(struct sh_ctl_result *res);

/* "n3, n5 did not answer; n4 closed the control connection (agent ended or link broke);
 * n7 unreachable behind them" into @buf (always
 * NUL-terminated, truncated with "..."). Returns the number of non-OK nodes. */
uint32_t sh_ctl_format_missing(const struct sh_ctl *ctl,
                               const struct sh_ctl_result *res, char *buf,
                               size_t len);

uint32_t sh_ctl_index(const struct sh_ctl *ctl);
uint32_t sh_ctl_nnodes(const struct sh_ctl *ctl);
/* Port this node listens on, 0 for a leaf (it never listens). */
uint16_t sh_ctl_listen_port(const struct sh_ctl *ctl);
/* Name of node @index as configured ("?" when out of range). */
const char *sh_ctl_name(const struct sh_ctl *ctl, uint32_t index);

/* Session state (operation counter, per-link sequence numbers, dropped
 * links) for handing a session to a child process and back: the PMIx host
 * runs its collectives in a child (libpmix cannot be initialised twice in one
 * process) and the parent continues the session afterwards. Sizes in bytes.
 * sh_ctl_state_load closes links the child dropped; it fails with EINVAL on a
 * state of another shape. */
size_t sh_ctl_state_size(const struct sh_ctl *ctl);
int sh_ctl_state_save(const struct sh_ctl *ctl, unsigned char *buf, size_t len);
int sh_ctl_state_load(struct sh_ctl *ctl, const unsigned char *buf, size_t len);

/* Close every connection and wipe the keys. NULL is a no-op. */
void sh_ctl_close(struct sh_ctl *ctl);

/* Expand a Slurm hostlist expression ("n[1-3],gpu7") with libslurm's hostlist
 * API into a malloc'd array of *count malloc'd names (free with
 * sh_nodelist_free), at most @max of them: a larger list is refused before
 * any name is made ("n[1-1200000]" is 12 bytes). Returns 0, or -1 with errno
 * EINVAL (unparsable or empty), E2BIG (more than @max names), ENOMEM. */
int sh_nodelist_expand(const char *expr, uint32_t max, char ***names, uint32_t *count);
void sh_nodelist_free(char **names, uint32_t count);
/* Position of @name in @names: 0 with *index set, or -1 with errno ENOENT. */
int sh_nodelist_index(char *const *names, uint32_t count, const char *name,
                      uint32_t *index);

#endif

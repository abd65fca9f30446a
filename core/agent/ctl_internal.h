/* The control-plane tree's state and the helpers its files share (ctl.c:
 * shape and state; ctl_listen.c: accepting children; ctl_join.c: joining the
 * tree; ctl_collective.c: gather, broadcast, allgather). Private to them. */
#ifndef STAGEHAND_AGENT_CTL_INTERNAL_H
#define STAGEHAND_AGENT_CTL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ctl.h"
#include "frame.h"
#include "handshake.h"
#include "key.h"

#define MSG_GATHER  1u
#define MSG_BCAST   2u

/* Gather/allgather payload: op(8) count(4), then per entry
 * index(4) state(4) tag(4) len(4) data(len). */
#define ENTRY_HDR   16u
#define OP_HDR      12u

struct sh_ctl {
    uint32_t n, index, k;
    uint32_t depth, height;
    uint32_t first_child, nchild;
    const char *const *names;
    const char *const *addrs;
    const char *bind_addr;
    uint16_t port_base, port_range, port_probe, listen_port;
    uint64_t jobid, stepid;
    uint64_t port_stepid;        /* the step id the ports derive from */
    unsigned char kjob[SH_KEY_LEN];
    int64_t margin, hs_timeout;
    uint32_t max_payload;
    uint64_t op;                 /* operations done so far */
    int listen_fd;
    bool wait_wake;              /* sh_ctl_cfg.wait_wake */
    bool woken;                  /* a peer proved K_job on our listener */
    struct sh_hs_srv hs[SH_CTL_HS_SLOTS]; /* handshakes in progress (fd -1: free) */
    struct sockaddr_storage hs_from[SH_CTL_HS_SLOTS];
    struct sh_chan parent;       /* fd -1 for the root */
    struct sh_chan *child;       /* nchild entries, fd -1 when not connected */
};

/* Depth of node @index in the @k-ary tree (the root is 0). */
uint32_t ctl_depth_of(uint32_t index, uint32_t k);

/* Is @node in the subtree rooted at @top? 1 or 0. */
int ctl_in_subtree(uint32_t node, uint32_t top, uint32_t k);

/* The @step-th port this job step probes (sh_ctl_probe_port). */
uint16_t ctl_probe_port(const struct sh_ctl *ctl, uint32_t step);

/* A control-plane connection's options: TCP_NODELAY, and keepalive plus a
 * user timeout so that a peer whose node or link died is found gone (in
 * about CTL_KEEPIDLE_S + CTL_KEEPCNT * CTL_KEEPINTVL_S seconds when idle,
 * CTL_USER_TIMEOUT_MS with data unacknowledged). Failures are ignored. */
#define CTL_KEEPIDLE_S 5
#define CTL_KEEPINTVL_S 2
#define CTL_KEEPCNT 4
#define CTL_USER_TIMEOUT_MS 20000u
void ctl_set_sockopts(int fd);

/* Listen on the first free probed port (ctl_listen.c). 0, or -1 with errno. */
int ctl_listen_any(struct sh_ctl *ctl);

/* Take over the listener @fd a sentinel bound. 0, or -1 with errno. */
int ctl_adopt_listener(struct sh_ctl *ctl, int fd);

/* Accept and advance children's handshakes until @wake_ns (bounded by
 * @deadline_ns); CLOCK_MONOTONIC ns. */
void ctl_serve_listener(struct sh_ctl *ctl, int64_t wake_ns, int64_t deadline_ns);

/* Abort every handshake in progress on the listener. */
void ctl_hs_abort_all(struct sh_ctl *ctl);

/* Children with a channel. */
uint32_t ctl_children_connected(const struct sh_ctl *ctl);

/* Wake child @c's agent on its probed ports (ctl_join.c). */
void ctl_poke_child(const struct sh_ctl *ctl, uint32_t c, bool full, bool knock,
                    int64_t deadline_ns);

#endif

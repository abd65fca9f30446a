/* Control-plane ports (core/agent/ctl.h): a job step's agents listen on a port
 * derived from its job and step id within the site's range, probing upward
 * past ports that are taken. Shared by the agent (ctl.c) and the plugin's
 * sentinel (spank/sentinel.c), which binds the port for its agent; needs no
 * libcrypto.
 *
 * Why no user can deny a job its control plane (issue 30 item 2): the range
 * is privileged (below ip_unprivileged_port_start), so only processes with
 * CAP_NET_BIND_SERVICE can bind a port of it, and every listener of a
 * staging is bound by root: by the sentinel, or by the agent before it drops
 * to the job user (its job tree's and one per image for the engine trees;
 * core/agent/root.c bind_listener), after which it holds no capability.
 * Every port a job's probing finds
 * taken is therefore held by root (another job's agent or sentinel, or a
 * site service), which a user cannot arrange; a user's process can only
 * connect, and a connection proves nothing without K_job (handshake.h). */
#ifndef STAGEHAND_CTLPORT_H
#define STAGEHAND_CTLPORT_H

#include <stdint.h>

/* The default range, [300, 500): privileged ports (below the kernel's
 * ip_unprivileged_port_start, 1024 unless the site lowered it), which only
 * root (CAP_NET_BIND_SERVICE) can bind, so no user's process can take a job's
 * port; and below 600, where glibc's bindresvport(3) (600-1023) and the
 * kernel's NFS client (665-1023 by default) take reserved ports. Probing
 * skips a port a root service holds. */
#define SH_CTL_PORT_BASE_DEFAULT  300u
#define SH_CTL_PORT_RANGE_DEFAULT 200u

/* Ports probed upward from the derived one unless configured otherwise:
 * sh_ctl_default_probe. Every port of a range below 1024 (the default's 200
 * included): a node holds one port per multi-node job whose staging or
 * sentinel is alive there (an array burst of current images leaves a
 * sentinel per job and node until its epilog or join_timeout). With a
 * window of 64 the first job without a port came, in a simulation of
 * jobs arriving at random starts, at 156 (1 %) to 183 (median) held ports
 * of 200; probing the whole range gives every job a port while one is free
 * (issue 35 item 3, tests/cluster/test_scale_burst.sh). */
#define SH_CTL_PROBE_MAX 1024u

/* min(@range, SH_CTL_PROBE_MAX): the probe count the agent's tree and the
 * plugin's sentinel both use, so they bind within the same ports. Pure. */
uint32_t sh_ctl_default_probe(uint16_t range);

/* Port derived from job and step id in [base, base+range). Pure. */
uint16_t sh_ctl_derive_port(uint64_t jobid, uint64_t stepid, uint16_t base,
                            uint16_t range);

/* The @step-th port of the probe sequence: the derived port, then upward,
 * wrapping within [base, base+range). @range must be >= 1. Pure. */
uint16_t sh_ctl_probe_port(uint64_t jobid, uint64_t stepid, uint16_t base,
                           uint16_t range, uint32_t step);

/* Bind a TCP listener (SO_REUSEADDR, non-blocking, close-on-exec, listen(2)
 * with @backlog) on @bind_addr (NULL: every address) at the first port of
 * the probe sequence that is free, trying at most @probe ports. Returns the
 * descriptor and sets *@port, or -1 with errno: EADDRINUSE (every probed
 * port taken), EINVAL (@bind_addr does not resolve), or the errno of
 * socket(2), bind(2) or listen(2). */
int sh_ctl_bind(const char *bind_addr, uint64_t jobid, uint64_t stepid, uint16_t base,
                uint16_t range, uint32_t probe, int backlog, uint16_t *port);

/* The first port unprivileged processes may bind in this network namespace
 * (/proc/sys/net/ipv4/ip_unprivileged_port_start). Returns it, or -1 with
 * errno when it cannot be read (then 1024 is the kernel's fixed rule). */
int sh_ctl_unprivileged_port_start(void);

/* Does [@base, @base+@range) reach ports any user can bind? Then *@start is
 * the first of them (sh_ctl_unprivileged_port_start, or 1024 when it cannot
 * be read) and the site's range must be moved below it: a user's process
 * could hold a job's ports. */
int sh_ctl_range_unprivileged(uint16_t base, uint16_t range, int *start);

#endif

/* Agent control-plane tree: the listener and the children's handshakes. */
#include "config.h"
#include "stagehand/bytes.h"
#include "ctl.h"
#include "stagehand/clock.h"
#include "frame.h"
#include "handshake.h"
#include "stagehand/log.h"
#include "ctl_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- tree formation -------------------------------------------------- */

int ctl_listen_any(struct sh_ctl *ctl)
{
    uint16_t port = 0;
    int fd = sh_ctl_bind(ctl->bind_addr, ctl->jobid, ctl->port_stepid, ctl->port_base,
                         ctl->port_range, ctl->port_probe,
                         (int)(ctl->nchild < 64 ? ctl->nchild + 16 : 128), &port);

    if (fd < 0) {
        if (errno == EINVAL)
            sh_error("ctl", "cannot resolve listen address %s",
                     ctl->bind_addr != NULL ? ctl->bind_addr : "(any)");
        else
            sh_error("ctl", "no free control-plane port among %u ports from %u (range "
                     "%u-%u): %s", ctl->port_probe, ctl_probe_port(ctl, 0), ctl->port_base,
                     ctl->port_base + ctl->port_range - 1, strerror(errno));
        return -1;
    }
    ctl->listen_fd = fd;
    ctl->listen_port = port;
    sh_debug("ctl", "listening on port %u", port);
    return 0;
}

/* Take the listener a sentinel bound for this node (sh_ctl_cfg.listen_fd):
 * it must be a listening TCP socket on one of this step's probed ports. */
int ctl_adopt_listener(struct sh_ctl *ctl, int fd)
{
    struct sockaddr_storage ss = { 0 };
    socklen_t len = sizeof(ss);
    int listening = 0, flags;
    socklen_t olen = sizeof(listening);
    uint16_t port = 0;
    uint32_t step;

    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &olen) != 0 || !listening ||
        getsockname(fd, (struct sockaddr *)&ss, &len) != 0 ||
        (ss.ss_family != AF_INET && ss.ss_family != AF_INET6)) {
        sh_error("ctl", "descriptor %d handed over as the control-plane listener is not "
                 "a listening TCP socket", fd);
        errno = EINVAL;
        return -1;
    }
    port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                         : ((struct sockaddr_in6 *)&ss)->sin6_port);
    for (step = 0; step < ctl->port_probe && ctl_probe_port(ctl, step) != port; step++)
        ;
    if (step == ctl->port_probe) {
        sh_error("ctl", "the handed-over listener's port %u is not one of this step's "
                 "ports", port);
        errno = EINVAL;
        return -1;
    }
    flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
        fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
        return -1;
    ctl->listen_fd = fd;
    ctl->listen_port = port;
    sh_debug("ctl", "listening on port %u (handed over)", port);
    return 0;
}

/* Non-blocking connect bounded by @deadline_ns. Returns the fd or -1. */
struct accept_arg {
    struct sh_ctl *ctl;
};

/* Any of our children, connected or not: a child only connects again when it
 * gave up on an earlier attempt that we completed (the last message of a
 * handshake can always be lost to a deadline), so its newest proven
 * connection replaces the older one. And our parent: its wake-up (ctl_poke_child)
 * is a handshake too. */
static int accept_child(uint32_t client, void *arg)
{
    struct sh_ctl *ctl = ((struct accept_arg *)arg)->ctl;

    return (client >= ctl->first_child && client - ctl->first_child < ctl->nchild) ||
           (ctl->index != 0 && client == sh_ctl_parent_of(ctl->index, ctl->k));
}

/* A client proved K_job on our listener: @chan is our parent's wake-up or
 * one of our children. */
static void take_channel(struct sh_ctl *ctl, struct sh_chan *chan)
{
    char host[96];

    snprintf(host, sizeof(host), "%s", chan->peer);
    snprintf(chan->peer, sizeof(chan->peer), "%s(%u)", ctl->names[chan->peer_index],
             chan->peer_index);
    if (ctl->wait_wake && !ctl->woken)
        sh_debug("ctl", "woken by %s, which proved the job key", chan->peer);
    ctl->woken = true;
    if (chan->peer_index < ctl->first_child) { /* the parent's wake-up: done */
        sh_chan_close(chan);
        return;
    }
    if (ctl->child[chan->peer_index - ctl->first_child].fd >= 0) {
        sh_info("ctl", "node %s connected again: replacing its earlier connection",
                chan->peer);
        sh_chan_close(&ctl->child[chan->peer_index - ctl->first_child]);
    }
    ctl->child[chan->peer_index - ctl->first_child] = *chan;
    sh_debug("ctl", "child %s connected (%s)", chan->peer, host);
}

/* Do @a and @b name the same host (port aside)? */
static bool same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    return true;
}

/* Is handshake @a a better one to abandon than @b: still awaiting the first
 * message while @b is past it, else older. */
static bool worse_hs(const struct sh_hs_srv *a, const struct sh_hs_srv *b)
{
    bool a_new = sh_hs_srv_waiting_hello(a), b_new = sh_hs_srv_waiting_hello(b);

    return a_new != b_new ? a_new : a->started_ns < b->started_ns;
}

/* A slot for a new connection from @from: a free one; else, when @from holds
 * SH_CTL_HS_SLOTS_PER_ADDR already or every slot is taken, the handshake
 * that made the least progress (still no first message, then the oldest)
 * among @from's (or among all), abandoned. A real peer sends its first
 * message as it connects and answers within a round trip, so only
 * connections that stall lose their slot; a client retries in any case. */
static struct sh_hs_srv *hs_slot(struct sh_ctl *ctl, const struct sockaddr_storage *from)
{
    struct sh_hs_srv *free_slot = NULL, *worst = NULL, *worst_mine = NULL;
    unsigned mine = 0;

    for (unsigned i = 0; i < SH_CTL_HS_SLOTS; i++) {
        struct sh_hs_srv *h = &ctl->hs[i];

        if (h->fd < 0) {
            if (free_slot == NULL)
                free_slot = h;
            continue;
        }
        if (worst == NULL || worse_hs(h, worst))
            worst = h;
        if (same_host(&ctl->hs_from[i], from)) {
            mine++;
            if (worst_mine == NULL || worse_hs(h, worst_mine))
                worst_mine = h;
        }
    }
    if (mine >= SH_CTL_HS_SLOTS_PER_ADDR || (free_slot == NULL && worst_mine != NULL)) {
        sh_debug("ctl", "%s: too many handshakes from that address at once: "
                 "abandoning the one that made the least progress", worst_mine->peer);
        sh_hs_srv_abort(worst_mine);
        return worst_mine;
    }
    if (free_slot != NULL)
        return free_slot;
    sh_debug("ctl", "%s: every handshake slot is taken: abandoning the one that made "
             "the least progress", worst->peer);
    sh_hs_srv_abort(worst);
    return worst;
}

/* Accept what waits on the listener (a bounded batch) and start its
 * handshakes. */
static void accept_pending(struct sh_ctl *ctl, const struct sh_hs_ident *me,
                           int64_t deadline_ns)
{
    struct accept_arg arg = { ctl };

    for (unsigned n = 0; n < SH_CTL_HS_SLOTS; n++) {
        struct sh_chan chan;
        struct sockaddr_storage ss = { .ss_family = AF_UNSPEC };
        socklen_t sslen = sizeof(ss);
        char host[64], peer[96];
        struct sh_hs_srv *h;
        int64_t hs_deadline;
        int fd;

        fd = accept4(ctl->listen_fd, (struct sockaddr *)&ss, &sslen,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        ctl_set_sockopts(fd);
        if (getnameinfo((struct sockaddr *)&ss, sslen, host, sizeof(host), NULL, 0,
                        NI_NUMERICHOST) != 0)
            snprintf(host, sizeof(host), "?");
        snprintf(peer, sizeof(peer), "connection from %s", host);
        hs_deadline = sh_now_ns() + ctl->hs_timeout;
        if (hs_deadline > deadline_ns)
            hs_deadline = deadline_ns;
        h = hs_slot(ctl, &ss);
        ctl->hs_from[h - ctl->hs] = ss;
        sh_hs_srv_begin(h, fd, peer, hs_deadline);
        /* A peer's first message is usually here already. */
        if (sh_hs_srv_step(h, ctl->kjob, me, accept_child, &arg, &chan) == 1)
            take_channel(ctl, &chan);
    }
}

/* Serve the listener and the handshakes in progress on it until @wake_ns,
 * or until something arrived: new connections are accepted, every
 * handshake advances as its peer's messages arrive (many at once: one that
 * stalls delays none of the others), one that passes its deadline is
 * abandoned, and a proven peer is taken (take_channel). */
void ctl_serve_listener(struct sh_ctl *ctl, int64_t wake_ns, int64_t deadline_ns)
{
    /* Until woken, anyone may connect (the sentinel started us for the first
     * connection, whatever it was): rejections are logged at debug only. */
    struct sh_hs_ident me = { ctl->jobid, ctl->stepid, ctl->index,
                              ctl->wait_wake && !ctl->woken };
    struct accept_arg arg = { ctl };
    struct pollfd pfd[1 + SH_CTL_HS_SLOTS];
    unsigned slot[1 + SH_CTL_HS_SLOTS];
    int64_t now = sh_now_ns(), until = wake_ns;
    nfds_t n = 0;

    for (unsigned i = 0; i < SH_CTL_HS_SLOTS; i++) {
        struct sh_hs_srv *h = &ctl->hs[i];

        if (h->fd < 0)
            continue;
        if (now >= h->deadline_ns) {
            if (me.quiet && !sh_hs_srv_waiting_hello(h))
                sh_warn("ctl", "wake-up refused: %s gave no proof of the job key by its "
                        "deadline: not woken", h->name);
            else
                sh_debug("ctl", "%s: no handshake by its deadline: closed", h->peer);
            sh_hs_srv_abort(h);
            continue;
        }
        if (h->deadline_ns < until)
            until = h->deadline_ns;
        pfd[n] = (struct pollfd){ .fd = h->fd, .events = POLLIN };
        slot[n++] = i;
    }
    if (ctl->listen_fd >= 0) {
        pfd[n] = (struct pollfd){ .fd = ctl->listen_fd, .events = POLLIN };
        slot[n++] = SH_CTL_HS_SLOTS;
    }
    if (poll(pfd, n, sh_poll_ms_until(until)) <= 0)
        return;
    /* Handshakes first: a new connection may take the slot of a stalled one. */
    for (nfds_t j = 0; j < n; j++) {
        struct sh_chan chan;

        if (slot[j] == SH_CTL_HS_SLOTS || pfd[j].revents == 0)
            continue;
        if (sh_hs_srv_step(&ctl->hs[slot[j]], ctl->kjob, &me, accept_child, &arg,
                           &chan) == 1)
            take_channel(ctl, &chan);
    }
    me.quiet = ctl->wait_wake && !ctl->woken;
    if (n > 0 && slot[n - 1] == SH_CTL_HS_SLOTS && pfd[n - 1].revents != 0)
        accept_pending(ctl, &me, deadline_ns);
}

/* Abandon every handshake in progress. */
void ctl_hs_abort_all(struct sh_ctl *ctl)
{
    for (unsigned i = 0; i < SH_CTL_HS_SLOTS; i++)
        if (ctl->hs[i].fd >= 0)
            sh_hs_srv_abort(&ctl->hs[i]);
}

uint32_t ctl_children_connected(const struct sh_ctl *ctl)
{
    uint32_t c = 0;

    for (uint32_t j = 0; j < ctl->nchild; j++)
        c += ctl->child[j].fd >= 0;
    return c;
}

/* Agent control-plane tree (see stagehand/ctl.h). */
#include "config.h"
#include "stagehand/bytes.h"
#include "stagehand/ctl.h"
#include "stagehand/clock.h"
#include "stagehand/frame.h"
#include "stagehand/handshake.h"
#include "stagehand/log.h"

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

uint32_t sh_ctl_parent_of(uint32_t index, uint32_t fanout)
{
    return index == 0 || fanout == 0 ? 0 : (index - 1) / fanout;
}

static uint32_t depth_of(uint32_t index, uint32_t k)
{
    uint32_t d = 0;

    while (index != 0) {
        index = (index - 1) / k;
        d++;
    }
    return d;
}

/* Is @node in the subtree rooted at @top? */
static int in_subtree(uint32_t node, uint32_t top, uint32_t k)
{
    while (node > top)
        node = (node - 1) / k;
    return node == top;
}

static uint16_t probe_port(const struct sh_ctl *ctl, uint32_t step)
{
    return sh_ctl_probe_port(ctl->jobid, ctl->port_stepid, ctl->port_base, ctl->port_range,
                             step);
}

const char *sh_ctl_name(const struct sh_ctl *ctl, uint32_t index)
{
    if (ctl == NULL || index >= ctl->n || ctl->names[index] == NULL)
        return "?";
    return ctl->names[index];
}

uint32_t sh_ctl_index(const struct sh_ctl *ctl) { return ctl->index; }
uint32_t sh_ctl_nnodes(const struct sh_ctl *ctl) { return ctl->n; }
uint16_t sh_ctl_listen_port(const struct sh_ctl *ctl) { return ctl->listen_port; }

static void set_nodelay(int fd)
{
    int one = 1;

    /* Frames are small and latency-bound; failure only costs latency. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* ---- tree formation -------------------------------------------------- */

static int listen_any(struct sh_ctl *ctl)
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
                     "%u-%u): %s", ctl->port_probe, probe_port(ctl, 0), ctl->port_base,
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
static int adopt_listener(struct sh_ctl *ctl, int fd)
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
    for (step = 0; step < ctl->port_probe && probe_port(ctl, step) != port; step++)
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
static int connect_bounded(const struct addrinfo *a, int64_t deadline_ns)
{
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    a->ai_protocol);
    struct pollfd pfd;
    socklen_t elen = sizeof(int);
    int err = 0;

    if (fd < 0)
        return -1;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
        return fd;
    if (errno != EINPROGRESS)
        goto fail;
    pfd = (struct pollfd){ .fd = fd, .events = POLLOUT };
    for (;;) {
        int rc = poll(&pfd, 1, sh_poll_ms_until(deadline_ns));

        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0) {
            errno = rc == 0 ? ETIMEDOUT : errno;
            goto fail;
        }
        break;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
        goto fail;
    if (err != 0) {
        errno = err;
        goto fail;
    }
    return fd;
fail:
    err = errno;
    close(fd);
    errno = err;
    return -1;
}

/* Did we just connect to our own listening socket? Only possible when the
 * parent's address is one of ours (several "nodes" on one host, as in tests):
 * its handshake would wait for us while we wait for it. */
static int is_self_connection(const struct sh_ctl *ctl, int fd)
{
    struct sockaddr_storage local = { 0 }, peer = { 0 };
    socklen_t llen = sizeof(local), plen = sizeof(peer);

    if (ctl->listen_fd < 0 ||
        getsockname(fd, (struct sockaddr *)&local, &llen) != 0 ||
        getpeername(fd, (struct sockaddr *)&peer, &plen) != 0 ||
        local.ss_family != peer.ss_family)
        return 0;
    if (peer.ss_family == AF_INET) {
        const struct sockaddr_in *l = (const struct sockaddr_in *)&local;
        const struct sockaddr_in *p = (const struct sockaddr_in *)&peer;

        return ntohs(p->sin_port) == ctl->listen_port &&
               l->sin_addr.s_addr == p->sin_addr.s_addr;
    }
    if (peer.ss_family == AF_INET6) {
        const struct sockaddr_in6 *l = (const struct sockaddr_in6 *)&local;
        const struct sockaddr_in6 *p = (const struct sockaddr_in6 *)&peer;

        return ntohs(p->sin6_port) == ctl->listen_port &&
               memcmp(&l->sin6_addr, &p->sin6_addr, sizeof(p->sin6_addr)) == 0;
    }
    return 0;
}

/* Copy of a resolved address with its port replaced (host byte order). */
static void with_port(const struct addrinfo *a, uint16_t port,
                      struct sockaddr_storage *ss, struct addrinfo *out)
{
    *out = *a;
    memcpy(ss, a->ai_addr, a->ai_addrlen);
    if (a->ai_family == AF_INET)
        ((struct sockaddr_in *)ss)->sin_port = htons(port);
    else if (a->ai_family == AF_INET6)
        ((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
    out->ai_addr = (struct sockaddr *)ss;
    out->ai_next = NULL;
}

/* One round over the probed ports of the parent. 0 when connected. The
 * parent's name is resolved once per round: a refused port costs one round
 * trip, not another walk through the resolver. With @quick the round ends at
 * the first refused port: the parent binds the first free port of the
 * sequence, so a refusal almost always means it is not listening yet. Only a
 * port that was bound without listening when the parent started hides the
 * later ones, which the full rounds after SH_CTL_QUICK_PROBE_NS cover. */
static int try_parent(struct sh_ctl *ctl, int64_t deadline_ns, bool quick, int *last_err)
{
    uint32_t p = sh_ctl_parent_of(ctl->index, ctl->k);
    const char *host = ctl->addrs != NULL ? ctl->addrs[p] : ctl->names[p];
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV };
    struct sh_hs_ident me = { ctl->jobid, ctl->stepid, ctl->index, false };
    struct addrinfo *ai = NULL;
    char peer[96];
    int rc;

    snprintf(peer, sizeof(peer), "%s(%u)", ctl->names[p], p);
    rc = getaddrinfo(host, "0", &hints, &ai);
    if (rc != 0) {
        sh_warn("ctl", "cannot resolve parent node %s: %s", host, gai_strerror(rc));
        *last_err = EHOSTUNREACH;
        return -1;
    }
    for (uint32_t step = 0; step < ctl->port_probe; step++) {
        uint16_t port = probe_port(ctl, step);

        if (sh_now_ns() >= deadline_ns)
            break;
        for (const struct addrinfo *a = ai; a != NULL; a = a->ai_next) {
            int64_t hs_deadline = sh_now_ns() + ctl->hs_timeout;
            struct sockaddr_storage ss;
            struct addrinfo one;
            int fd;

            if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
                continue;
            if (hs_deadline > deadline_ns)
                hs_deadline = deadline_ns;
            with_port(a, port, &ss, &one);
            fd = connect_bounded(&one, hs_deadline);
            if (fd < 0) {
                *last_err = errno;
                if (quick && errno == ECONNREFUSED) {
                    freeaddrinfo(ai);
                    return -1;
                }
                continue;
            }
            if (is_self_connection(ctl, fd)) {
                close(fd);
                continue;
            }
            set_nodelay(fd);
            if (sh_hs_client(fd, ctl->kjob, &me, p, peer, hs_deadline,
                             &ctl->parent) == 0) {
                freeaddrinfo(ai);
                sh_debug("ctl", "connected to parent %s on port %u", peer, port);
                return 0;
            }
            *last_err = errno;
            close(fd);
            if (*last_err != ENXIO && *last_err != ECONNRESET)
                sh_debug("ctl", "port %u of %s: %s", port, host, strerror(*last_err));
        }
    }
    freeaddrinfo(ai);
    return -1;
}

/* Wake child @c if a sentinel holds its port: on a node whose copies are
 * current the plugin leaves no agent but a sentinel that listens on the
 * node's port and starts the agent when a connection arrives (spank/sentinel.c).
 * That agent joins only once a peer has proved K_job on its listener
 * (sh_ctl_cfg.wait_wake), so waking takes two passes over the children: with
 * @knock a connection to each port that is closed at once (the sentinels of
 * all children start their agents in parallel), then without it a handshake
 * as @c's parent on each port (the proof; a listening agent takes it and
 * closes it). Another job's process may hold an earlier port of the
 * sequence: its handshake fails (another job, step or node), and the next
 * port is tried, up to the first that refuses (@full: past refusals too, as
 * try_parent's full rounds) or does not answer within SH_CTL_POKE_TIMEOUT
 * (the host is down: the join's deadline deals with it). A handshake that
 * does not begin within SH_CTL_WAKE_TIMEOUT (an agent still starting, or a
 * process that never answers) moves on to the next port; a later round
 * retries. */
static void poke_child(const struct sh_ctl *ctl, uint32_t c, bool full, bool knock,
                       int64_t deadline_ns)
{
    const char *host = ctl->addrs != NULL ? ctl->addrs[c] : ctl->names[c];
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV };
    struct sh_hs_ident me = { ctl->jobid, ctl->stepid, ctl->index, true };
    struct addrinfo *ai = NULL;
    char peer[96];

    if (getaddrinfo(host, "0", &hints, &ai) != 0)
        return;
    snprintf(peer, sizeof(peer), "%s(%u)", ctl->names[c], c);
    for (uint32_t step = 0; step < ctl->port_probe; step++) {
        for (const struct addrinfo *a = ai; a != NULL; a = a->ai_next) {
            int64_t until = sh_now_ns() + SH_CTL_POKE_TIMEOUT;
            struct sockaddr_storage ss;
            struct addrinfo one;
            struct sh_chan chan;
            uint16_t port = probe_port(ctl, step);
            int fd;

            if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
                continue;
            with_port(a, port, &ss, &one);
            fd = connect_bounded(&one, until < deadline_ns ? until : deadline_ns);
            if (fd < 0) {
                if (errno != ECONNREFUSED || !full) {
                    freeaddrinfo(ai);
                    return;
                }
                continue;
            }
            if (knock || is_self_connection(ctl, fd)) {
                close(fd);
                break; /* this port is knocked on (or ours); on to the next */
            }
            set_nodelay(fd);
            until = sh_now_ns() + SH_CTL_WAKE_TIMEOUT;
            if (sh_hs_client(fd, ctl->kjob, &me, c, peer,
                             until < deadline_ns ? until : deadline_ns, &chan) == 0) {
                sh_chan_close(&chan);
                sh_debug("ctl", "woke %s on port %u", peer, port);
                freeaddrinfo(ai);
                return;
            }
            close(fd);
            break; /* not @c's agent (yet): on to the next port */
        }
    }
    freeaddrinfo(ai);
}

struct accept_arg {
    struct sh_ctl *ctl;
};

/* Any of our children, connected or not: a child only connects again when it
 * gave up on an earlier attempt that we completed (the last message of a
 * handshake can always be lost to a deadline), so its newest proven
 * connection replaces the older one. And our parent: its wake-up (poke_child)
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
        set_nodelay(fd);
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
static void serve_listener(struct sh_ctl *ctl, int64_t wake_ns, int64_t deadline_ns)
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
static void hs_abort_all(struct sh_ctl *ctl)
{
    for (unsigned i = 0; i < SH_CTL_HS_SLOTS; i++)
        if (ctl->hs[i].fd >= 0)
            sh_hs_srv_abort(&ctl->hs[i]);
}

static uint32_t children_connected(const struct sh_ctl *ctl)
{
    uint32_t c = 0;

    for (uint32_t j = 0; j < ctl->nchild; j++)
        c += ctl->child[j].fd >= 0;
    return c;
}

int64_t sh_ctl_retry_delay(int64_t waited_ns)
{
    int64_t d = waited_ns / 8;

    if (d < SH_CTL_RETRY_MIN)
        return SH_CTL_RETRY_MIN;
    return d > SH_CTL_RETRY_MAX ? SH_CTL_RETRY_MAX : d;
}

static int check_cfg(const struct sh_ctl_cfg *cfg)
{
    if (cfg->nnodes == 0 || cfg->index >= cfg->nnodes || cfg->names == NULL ||
        cfg->kjob == NULL || cfg->port_range == 0 ||
        (uint32_t)cfg->port_base + cfg->port_range > 65536u || cfg->port_base == 0) {
        sh_error("ctl", "invalid control-plane configuration (nodes %u, index %u, "
                 "ports %u+%u)", cfg->nnodes, cfg->index, cfg->port_base,
                 cfg->port_range);
        errno = EINVAL;
        return -1;
    }
    for (uint32_t i = 0; i < cfg->nnodes; i++) {
        if (cfg->names[i] == NULL || (cfg->addrs != NULL && cfg->addrs[i] == NULL)) {
            errno = EINVAL;
            return -1;
        }
    }
    return 0;
}

int sh_ctl_join(const struct sh_ctl_cfg *cfg, int64_t deadline_ns,
                struct sh_ctl **out)
{
    struct sh_ctl *ctl;
    int64_t my_deadline;
    int64_t next_try, next_poke;
    int64_t t_start = sh_now_ns();
    unsigned attempts = 0;
    int last_err = ETIMEDOUT;
    uint64_t first_child;

    *out = NULL;
    if (check_cfg(cfg) != 0)
        return -1;
    ctl = calloc(1, sizeof(*ctl));
    if (ctl == NULL)
        return -1;
    ctl->n = cfg->nnodes;
    ctl->index = cfg->index;
    ctl->k = cfg->fanout != 0 ? cfg->fanout : SH_CTL_FANOUT_DEFAULT;
    ctl->depth = depth_of(ctl->index, ctl->k);
    ctl->height = depth_of(ctl->n - 1, ctl->k);
    first_child = (uint64_t)ctl->k * ctl->index + 1;
    ctl->first_child = first_child < ctl->n ? (uint32_t)first_child : ctl->n;
    ctl->nchild = first_child < ctl->n
                      ? (uint32_t)((ctl->n - first_child) < ctl->k
                                       ? ctl->n - first_child : ctl->k)
                      : 0;
    ctl->names = cfg->names;
    ctl->addrs = cfg->addrs;
    ctl->bind_addr = cfg->bind_addr;
    ctl->port_base = cfg->port_base;
    ctl->port_range = cfg->port_range;
    ctl->port_probe = cfg->port_probe != 0 ? cfg->port_probe
                                           : (uint16_t)sh_ctl_default_probe(cfg->port_range);
    if (ctl->port_probe > ctl->port_range)
        ctl->port_probe = ctl->port_range;
    ctl->jobid = cfg->jobid;
    ctl->stepid = cfg->stepid;
    ctl->port_stepid = cfg->port_stepid_set ? cfg->port_stepid : cfg->stepid;
    memcpy(ctl->kjob, cfg->kjob, SH_KEY_LEN);
    ctl->margin = cfg->level_margin_ns > 0 ? cfg->level_margin_ns
                                           : SH_CTL_MARGIN_DEFAULT;
    ctl->hs_timeout = cfg->hs_timeout_ns > 0 ? cfg->hs_timeout_ns : SH_CTL_HS_TIMEOUT;
    ctl->max_payload = cfg->max_payload != 0 ? cfg->max_payload : SH_FRAME_MAX_PAYLOAD;
    ctl->listen_fd = -1;
    for (unsigned i = 0; i < SH_CTL_HS_SLOTS; i++)
        ctl->hs[i].fd = -1;
    ctl->parent.fd = -1;
    ctl->wait_wake = cfg->wait_wake && cfg->inherit_listener;
    if (ctl->nchild > 0) {
        ctl->child = calloc(ctl->nchild, sizeof(*ctl->child));
        if (ctl->child == NULL)
            goto fail;
        for (uint32_t j = 0; j < ctl->nchild; j++)
            ctl->child[j].fd = -1;
    }
    /* A leaf keeps a handed-over listener until it has joined: its parent's
     * wake-ups land there (poke_child) */
    if (cfg->inherit_listener ? adopt_listener(ctl, cfg->listen_fd) != 0
                              : ctl->nchild > 0 && listen_any(ctl) != 0)
        goto fail;

    /* A node gives up one margin before its parent does, so a parent still
     * listens while its children make their last attempts. */
    my_deadline = deadline_ns - (int64_t)ctl->depth * ctl->margin;
    next_try = t_start;
    next_poke = t_start;
    while (sh_now_ns() < my_deadline) {
        int need_parent = ctl->index != 0 && ctl->parent.fd < 0;
        int64_t wake = my_deadline;

        if (ctl->wait_wake && !ctl->woken) {
            /* Started by a sentinel for a connection that proved nothing:
             * reach nobody (that would wake the parent's and children's
             * sentinels for anyone who connects) until a peer proves K_job. */
            serve_listener(ctl, my_deadline, my_deadline);
            if (ctl->woken)
                t_start = next_try = next_poke = sh_now_ns();
            continue;
        }
        if (!need_parent && children_connected(ctl) == ctl->nchild)
            break;
        if (need_parent && sh_now_ns() >= next_try) {
            int64_t waited = sh_now_ns() - t_start;

            attempts++;
            if (try_parent(ctl, my_deadline, waited < SH_CTL_QUICK_PROBE_NS, &last_err) == 0)
                continue;
            next_try = sh_now_ns() + sh_ctl_retry_delay(waited);
        }
        if (need_parent && next_try < wake)
            wake = next_try;
        if (children_connected(ctl) < ctl->nchild) {
            if (sh_now_ns() >= next_poke) {
                bool full = sh_now_ns() - t_start >= SH_CTL_QUICK_PROBE_NS;

                for (int knock = 1; knock >= 0; knock--)
                    for (uint32_t j = 0; j < ctl->nchild; j++)
                        if (ctl->child[j].fd < 0)
                            poke_child(ctl, ctl->first_child + j, full, knock,
                                       my_deadline);
                next_poke = sh_now_ns() + sh_ctl_retry_delay(sh_now_ns() - t_start);
            }
            if (next_poke < wake)
                wake = next_poke;
        }
        serve_listener(ctl, wake, my_deadline);
    }
    if (ctl->wait_wake && !ctl->woken) {
        sh_debug("ctl", "no peer proved the job key by the deadline: this node was not "
                 "needed");
        errno = ENOTCONN;
        goto fail;
    }
    if (ctl->index != 0 && ctl->parent.fd < 0) {
        uint32_t p = sh_ctl_parent_of(ctl->index, ctl->k);
        sh_error("ctl", "could not reach parent node %s (index %u) on ports %u.. "
                 "(%u probed) by the deadline: %s", ctl->names[p], p,
                 probe_port(ctl, 0), ctl->port_probe, strerror(last_err));
        errno = ETIMEDOUT;
        goto fail;
    }
    for (uint32_t j = 0; j < ctl->nchild; j++) {
        if (ctl->child[j].fd < 0)
            sh_warn("ctl", "node %s (index %u) did not connect by the deadline",
                    ctl->names[ctl->first_child + j], ctl->first_child + j);
    }
    sh_debug("ctl", "joined the control tree in %.3f s (%u attempt(s) to reach the parent, "
             "%u child(ren))", (double)(sh_now_ns() - t_start) / 1e9, attempts,
             children_connected(ctl));
    /* Late children must fail fast instead of waiting in our backlog. */
    hs_abort_all(ctl);
    if (ctl->listen_fd >= 0) {
        close(ctl->listen_fd);
        ctl->listen_fd = -1;
    }
    *out = ctl;
    return 0;
fail:
    {
        int err = errno;
        sh_ctl_close(ctl);
        errno = err;
    }
    return -1;
}

void sh_ctl_close(struct sh_ctl *ctl)
{
    if (ctl == NULL)
        return;
    hs_abort_all(ctl);
    if (ctl->listen_fd >= 0)
        close(ctl->listen_fd);
    if (ctl->parent.fd >= 0)
        sh_chan_close(&ctl->parent);
    /* child is NULL when its allocation failed in sh_ctl_join */
    for (uint32_t j = 0; ctl->child != NULL && j < ctl->nchild; j++) {
        if (ctl->child[j].fd >= 0)
            sh_chan_close(&ctl->child[j]);
    }
    free(ctl->child);
    sh_key_wipe(ctl->kjob, sizeof(ctl->kjob));
    free(ctl);
}

/* ---- encoding of entries --------------------------------------------- */

void sh_ctl_result_free(struct sh_ctl_result *res)
{
    if (res == NULL)
        return;
    if (res->entry != NULL) {
        for (uint32_t i = 0; i < res->nnodes; i++)
            free(res->entry[i].data);
    }
    free(res->entry);
    memset(res, 0, sizeof(*res));
}

/* Encode the entries of @e selected by @top (subtree root) or all when
 * top == UINT32_MAX. Fails with EMSGSIZE beyond @max bytes. */
static int encode_entries(const struct sh_ctl *ctl, const struct sh_ctl_entry *e,
                          uint32_t top, unsigned char **out, uint32_t *outlen)
{
    uint64_t size = OP_HDR;
    uint32_t count = 0;
    unsigned char *buf, *p;

    for (uint32_t i = 0; i < ctl->n; i++) {
        if (top != UINT32_MAX && !in_subtree(i, top, ctl->k))
            continue;
        size += ENTRY_HDR + (uint64_t)e[i].len;
        count++;
    }
    if (size > ctl->max_payload) {
        sh_error("ctl", "collective data of %llu bytes exceeds the frame limit of %u",
                 (unsigned long long)size, ctl->max_payload);
        errno = EMSGSIZE;
        return -1;
    }
    buf = malloc((size_t)size);
    if (buf == NULL)
        return -1;
    sh_put_be64(buf, ctl->op);
    sh_put_be32(buf + 8, count);
    p = buf + OP_HDR;
    for (uint32_t i = 0; i < ctl->n; i++) {
        if (top != UINT32_MAX && !in_subtree(i, top, ctl->k))
            continue;
        sh_put_be32(p, i);
        sh_put_be32(p + 4, e[i].state);
        sh_put_be32(p + 8, e[i].tag);
        sh_put_be32(p + 12, e[i].len);
        if (e[i].len > 0)
            memcpy(p + ENTRY_HDR, e[i].data, e[i].len);
        p += ENTRY_HDR + e[i].len;
    }
    *out = buf;
    *outlen = (uint32_t)size;
    return 0;
}

/* Decode entries into @e; every index must lie in the subtree of @top (all
 * when UINT32_MAX) and appear at most once (@seen). */
static int decode_entries(struct sh_ctl *ctl, const unsigned char *buf, uint32_t len,
                          uint32_t top, const char *peer, struct sh_ctl_entry *e,
                          unsigned char *seen)
{
    const unsigned char *p = buf + OP_HDR;
    const unsigned char *end = buf + len;
    uint32_t count;

    if (len < OP_HDR || sh_get_be64(buf) != ctl->op) {
        sh_warn("ctl", "message from %s rejected: wrong operation (%llu, expected "
                "%llu)", peer, len < OP_HDR ? 0ULL : (unsigned long long)sh_get_be64(buf),
                (unsigned long long)ctl->op);
        errno = EPROTO;
        return -1;
    }
    count = sh_get_be32(buf + 8);
    for (uint32_t c = 0; c < count; c++) {
        uint32_t idx, dlen;

        if ((size_t)(end - p) < ENTRY_HDR)
            goto bad;
        idx = sh_get_be32(p);
        dlen = sh_get_be32(p + 12);
        if (idx >= ctl->n || seen[idx] ||
            (top != UINT32_MAX && !in_subtree(idx, top, ctl->k)) ||
            sh_get_be32(p + 4) > SH_CTL_UNREACHABLE || (size_t)(end - p - ENTRY_HDR) < dlen)
            goto bad;
        seen[idx] = 1;
        e[idx].state = sh_get_be32(p + 4);
        e[idx].tag = sh_get_be32(p + 8);
        e[idx].len = dlen;
        if (dlen > 0) {
            e[idx].data = malloc(dlen);
            if (e[idx].data == NULL)
                return -1;
            memcpy(e[idx].data, p + ENTRY_HDR, dlen);
        }
        p += ENTRY_HDR + dlen;
    }
    if (p != end)
        goto bad;
    return 0;
bad:
    sh_warn("ctl", "message from %s rejected: malformed or foreign entries", peer);
    errno = EPROTO;
    return -1;
}

/* Mark the not-yet-seen nodes of @top's subtree: @top missing, the rest
 * unreachable. */
static void mark_subtree(struct sh_ctl *ctl, uint32_t top, struct sh_ctl_entry *e,
                         unsigned char *seen)
{
    for (uint32_t i = top; i < ctl->n; i++) {
        if (seen[i] || !in_subtree(i, top, ctl->k))
            continue;
        seen[i] = 1;
        e[i].state = i == top ? SH_CTL_MISSING : SH_CTL_UNREACHABLE;
    }
}

static void drop_child(struct sh_ctl *ctl, uint32_t j, const char *why)
{
    sh_warn("ctl", "dropping node %s: %s", ctl->child[j].peer, why);
    /* shutdown, not only close: another process (the PMIx host's parent)
     * may hold the same socket, and the child must see the end now. */
    shutdown(ctl->child[j].fd, SHUT_RDWR);
    sh_chan_close(&ctl->child[j]);
    ctl->child[j].fd = -1;
}

/* ---- collectives ----------------------------------------------------- */

/* Receive one gather message from child @j into @e. */
static void recv_child(struct sh_ctl *ctl, uint32_t j, int64_t deadline_ns,
                       struct sh_ctl_entry *e, unsigned char *seen)
{
    unsigned char *payload = NULL;
    uint32_t len = 0;
    uint16_t type = 0;
    uint32_t c = ctl->first_child + j;

    if (sh_frame_recv(ctl->child[j].fd, &ctl->child[j].rx, ctl->max_payload,
                      ctl->child[j].peer, &type, &payload, &len, deadline_ns) != 0) {
        drop_child(ctl, j, errno == ECONNRESET ? "connection closed" : strerror(errno));
        return;
    }
    if (type != MSG_GATHER ||
        decode_entries(ctl, payload, len, c, ctl->child[j].peer, e, seen) != 0)
        drop_child(ctl, j, "protocol error");
    free(payload);
}

/* Gather into @e (N entries, our subtree filled) with a wait of our own until
 * @wait_until. Then forward to the parent unless we are the root. */
static int gather_core(struct sh_ctl *ctl, uint32_t tag, const void *data,
                       uint32_t len, int64_t wait_until, int64_t send_deadline,
                       struct sh_ctl_entry *e, unsigned char *seen)
{
    struct pollfd *pfd = NULL;
    uint32_t *which = NULL;
    unsigned char *done = NULL;
    int rc = -1;

    ctl->op++;
    seen[ctl->index] = 1;
    e[ctl->index].state = SH_CTL_OK;
    e[ctl->index].tag = tag;
    e[ctl->index].len = len;
    if (len > 0) {
        e[ctl->index].data = malloc(len);
        if (e[ctl->index].data == NULL)
            return -1;
        memcpy(e[ctl->index].data, data, len);
    }
    if (ctl->nchild > 0) {
        pfd = calloc(ctl->nchild, sizeof(*pfd));
        which = calloc(ctl->nchild, sizeof(*which));
        done = calloc(ctl->nchild, 1);
        if (pfd == NULL || which == NULL || done == NULL)
            goto out;
    }
    for (;;) {
        nfds_t np = 0;
        int ready;

        for (uint32_t j = 0; j < ctl->nchild; j++) {
            if (done[j] || ctl->child[j].fd < 0)
                continue;
            pfd[np] = (struct pollfd){ .fd = ctl->child[j].fd, .events = POLLIN };
            which[np++] = j;
        }
        if (np == 0)
            break;
        ready = poll(pfd, np, sh_poll_ms_until(wait_until));
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready < 0)
            goto out;
        if (ready == 0) {
            if (sh_now_ns() < wait_until)
                continue;
            for (nfds_t x = 0; x < np; x++)
                drop_child(ctl, which[x], "no answer by the deadline");
            break;
        }
        for (nfds_t x = 0; x < np; x++) {
            if (pfd[x].revents == 0)
                continue;
            done[which[x]] = 1;
            recv_child(ctl, which[x], wait_until, e, seen);
        }
    }
    for (uint32_t j = 0; j < ctl->nchild; j++)
        mark_subtree(ctl, ctl->first_child + j, e, seen);
    if (ctl->index != 0) {
        unsigned char *buf = NULL;
        uint32_t blen = 0;

        if (encode_entries(ctl, e, ctl->index, &buf, &blen) != 0)
            goto out;
        rc = sh_frame_send(ctl->parent.fd, &ctl->parent.tx, MSG_GATHER, buf, blen,
                           send_deadline);
        if (rc != 0)
            sh_error("ctl", "cannot send to parent %s: %s", ctl->parent.peer,
                     strerror(errno));
        free(buf);
        goto out;
    }
    rc = 0;
out:
    free(pfd);
    free(which);
    free(done);
    return rc;
}

static int result_alloc(struct sh_ctl *ctl, struct sh_ctl_result *res,
                        unsigned char **seen)
{
    memset(res, 0, sizeof(*res));
    res->entry = calloc(ctl->n, sizeof(*res->entry));
    *seen = calloc(ctl->n, 1);
    if (res->entry == NULL || *seen == NULL) {
        free(res->entry);
        free(*seen);
        res->entry = NULL;
        *seen = NULL; /* the caller frees it on its way out */
        errno = ENOMEM;
        return -1;
    }
    res->nnodes = ctl->n;
    return 0;
}

static void count_missing(struct sh_ctl *ctl, struct sh_ctl_result *res, int log)
{
    res->nmissing = 0;
    for (uint32_t i = 0; i < res->nnodes; i++)
        res->nmissing += res->entry[i].state != SH_CTL_OK;
    if (log && res->nmissing > 0) {
        char msg[512];

        sh_ctl_format_missing(ctl, res, msg, sizeof(msg));
        sh_error("ctl", "%s", msg);
    }
}

int sh_ctl_gather(struct sh_ctl *ctl, uint32_t tag, const void *data, uint32_t len,
                  int64_t deadline_ns, struct sh_ctl_result *res)
{
    unsigned char *seen = NULL;
    int rc;

    if (result_alloc(ctl, res, &seen) != 0)
        return -1;
    rc = gather_core(ctl, tag, data, len,
                     deadline_ns - (int64_t)ctl->depth * ctl->margin,
                     deadline_ns - (int64_t)(ctl->depth > 0 ? ctl->depth - 1 : 0) *
                                       ctl->margin,
                     res->entry, seen);
    free(seen);
    if (rc != 0 || ctl->index != 0) {
        int err = errno;
        sh_ctl_result_free(res);
        errno = err;
        return rc;
    }
    count_missing(ctl, res, 1);
    return 0;
}

/* Root: send @buf to the children; others: receive from the parent first. */
static int bcast_core(struct sh_ctl *ctl, uint16_t type, unsigned char **buf,
                      uint32_t *len, int64_t deadline_ns)
{
    if (ctl->index != 0) {
        uint16_t t = 0;

        if (sh_frame_recv(ctl->parent.fd, &ctl->parent.rx, ctl->max_payload,
                          ctl->parent.peer, &t, buf, len, deadline_ns) != 0) {
            int err = errno;
            sh_error("ctl", "lost the parent %s: %s", ctl->parent.peer,
                     err == ECONNRESET ? "connection closed" : strerror(err));
            errno = err;
            return -1;
        }
        if (t != type || *len < 8 || sh_get_be64(*buf) != ctl->op) {
            sh_error("ctl", "unexpected message from parent %s (type %u)",
                     ctl->parent.peer, t);
            free(*buf);
            *buf = NULL;
            errno = EPROTO;
            return -1;
        }
    }
    for (uint32_t j = 0; j < ctl->nchild; j++) {
        if (ctl->child[j].fd < 0)
            continue;
        if (sh_frame_send(ctl->child[j].fd, &ctl->child[j].tx, type, *buf, *len,
                          deadline_ns) != 0)
            drop_child(ctl, j, strerror(errno));
    }
    return 0;
}

int sh_ctl_bcast(struct sh_ctl *ctl, const void *data, uint32_t len,
                 unsigned char **out, uint32_t *outlen, int64_t deadline_ns)
{
    unsigned char *buf = NULL;
    uint32_t blen = 0;

    *out = NULL;
    *outlen = 0;
    ctl->op++;
    if (ctl->index == 0) {
        if ((uint64_t)len + 8 > ctl->max_payload) {
            errno = EMSGSIZE;
            return -1;
        }
        blen = len + 8;
        buf = malloc(blen);
        if (buf == NULL)
            return -1;
        sh_put_be64(buf, ctl->op);
        if (len > 0)
            memcpy(buf + 8, data, len);
    }
    if (bcast_core(ctl, MSG_BCAST, &buf, &blen, deadline_ns) != 0)
        return -1;
    if (blen > 8) {
        memmove(buf, buf + 8, blen - 8);
        *out = buf;
        *outlen = blen - 8;
    } else {
        free(buf);
    }
    return 0;
}

int sh_ctl_sync_deadline(struct sh_ctl *ctl, int64_t *deadline_ns)
{
    unsigned char mine[8];
    unsigned char *got = NULL;
    uint32_t len = 0;
    int64_t left = *deadline_ns - sh_now_ns();

    sh_put_be64(mine, (uint64_t)(left > 0 ? left : 0));
    if (sh_ctl_bcast(ctl, mine, sizeof(mine), &got, &len, *deadline_ns) != 0)
        return -1;
    if (len != sizeof(mine)) {
        free(got);
        sh_error("ctl", "malformed deadline from the root");
        errno = EPROTO;
        return -1;
    }
    if (sh_get_be64(got) <= (uint64_t)INT64_MAX) {
        int64_t theirs = sh_now_ns() + (int64_t)sh_get_be64(got);

        if (theirs < *deadline_ns)
            *deadline_ns = theirs;
    }
    free(got);
    return 0;
}

int sh_ctl_allgather(struct sh_ctl *ctl, uint32_t tag, const void *data,
                     uint32_t len, int64_t deadline_ns, struct sh_ctl_result *res)
{
    int64_t gather_deadline = deadline_ns - (int64_t)ctl->height * ctl->margin;
    unsigned char *seen = NULL;
    unsigned char *buf = NULL;
    uint32_t blen = 0;
    int rc = -1;
    int err;

    if (result_alloc(ctl, res, &seen) != 0)
        return -1;
    if (gather_core(ctl, tag, data, len,
                    gather_deadline - (int64_t)ctl->depth * ctl->margin,
                    gather_deadline - (int64_t)(ctl->depth > 0 ? ctl->depth - 1 : 0) *
                                          ctl->margin,
                    res->entry, seen) != 0)
        goto out;
    if (ctl->index == 0) {
        count_missing(ctl, res, 1);
        if (encode_entries(ctl, res->entry, UINT32_MAX, &buf, &blen) != 0)
            goto out;
    }
    if (bcast_core(ctl, MSG_BCAST, &buf, &blen, deadline_ns) != 0)
        goto out;
    if (ctl->index != 0) {
        /* Replace our partial view with the root's. */
        sh_ctl_result_free(res);
        free(seen);
        seen = NULL;
        if (result_alloc(ctl, res, &seen) != 0)
            goto out;
        if (decode_entries(ctl, buf, blen, UINT32_MAX, ctl->parent.peer, res->entry,
                           seen) != 0)
            goto out;
        for (uint32_t i = 0; i < ctl->n; i++) {
            if (!seen[i]) {
                errno = EPROTO;
                goto out;
            }
        }
        count_missing(ctl, res, 0);
    }
    rc = 0;
out:
    err = errno;
    free(buf);
    free(seen);
    if (rc != 0)
        sh_ctl_result_free(res);
    errno = err;
    return rc;
}

/* State: op(8) | parent tx(8) rx(8) | per child: alive(1) tx(8) rx(8). */
size_t sh_ctl_state_size(const struct sh_ctl *ctl)
{
    return 24 + (size_t)ctl->nchild * 17;
}

int sh_ctl_state_save(const struct sh_ctl *ctl, unsigned char *buf, size_t len)
{
    unsigned char *p = buf;

    if (len != sh_ctl_state_size(ctl)) {
        errno = EINVAL;
        return -1;
    }
    sh_put_be64(p, ctl->op);
    sh_put_be64(p + 8, ctl->parent.tx.seq);
    sh_put_be64(p + 16, ctl->parent.rx.seq);
    p += 24;
    for (uint32_t j = 0; j < ctl->nchild; j++, p += 17) {
        p[0] = ctl->child[j].fd >= 0;
        sh_put_be64(p + 1, ctl->child[j].tx.seq);
        sh_put_be64(p + 9, ctl->child[j].rx.seq);
    }
    return 0;
}

int sh_ctl_state_load(struct sh_ctl *ctl, const unsigned char *buf, size_t len)
{
    const unsigned char *p = buf;

    if (len != sh_ctl_state_size(ctl)) {
        errno = EINVAL;
        return -1;
    }
    ctl->op = sh_get_be64(p);
    ctl->parent.tx.seq = sh_get_be64(p + 8);
    ctl->parent.rx.seq = sh_get_be64(p + 16);
    p += 24;
    for (uint32_t j = 0; j < ctl->nchild; j++, p += 17) {
        if (!p[0] && ctl->child[j].fd >= 0) {
            sh_chan_close(&ctl->child[j]);
            ctl->child[j].fd = -1;
        }
        ctl->child[j].tx.seq = sh_get_be64(p + 1);
        ctl->child[j].rx.seq = sh_get_be64(p + 9);
    }
    return 0;
}

uint32_t sh_ctl_format_missing(const struct sh_ctl *ctl,
                               const struct sh_ctl_result *res, char *buf,
                               size_t len)
{
    static const char *const what[] = { "", " did not answer", " unreachable behind them" };
    size_t used = 0;
    uint32_t total = 0;

    if (len == 0)
        return 0;
    buf[0] = '\0';
    for (uint32_t state = SH_CTL_MISSING; state <= SH_CTL_UNREACHABLE; state++) {
        uint32_t count = 0;

        for (uint32_t i = 0; i < res->nnodes; i++) {
            int n;

            if (res->entry[i].state != state)
                continue;
            n = snprintf(buf + used, len - used, "%s%s",
                         count == 0 ? (total > 0 ? "; " : "") : ", ",
                         sh_ctl_name(ctl, i));
            count++;
            if (n < 0 || (size_t)n >= len - used)
                goto truncated;
            used += (size_t)n;
        }
        if (count > 0) {
            int n = snprintf(buf + used, len - used, "%s", what[state]);
            if (n < 0 || (size_t)n >= len - used)
                goto truncated;
            used += (size_t)n;
        }
        total += count;
    }
    return total;
truncated:
    if (len > 4)
        memcpy(buf + len - 4, "...", 4);
    total = 0;
    for (uint32_t i = 0; i < res->nnodes; i++)
        total += res->entry[i].state != SH_CTL_OK;
    return total;
}

/* Agent control-plane tree: connecting to the parent and joining the tree
 * (sh_ctl_join). */
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
        uint16_t port = ctl_probe_port(ctl, step);

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
            ctl_set_sockopts(fd);
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
void ctl_poke_child(const struct sh_ctl *ctl, uint32_t c, bool full, bool knock,
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
            uint16_t port = ctl_probe_port(ctl, step);
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
            ctl_set_sockopts(fd);
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
    ctl->depth = ctl_depth_of(ctl->index, ctl->k);
    ctl->height = ctl_depth_of(ctl->n - 1, ctl->k);
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
     * wake-ups land there (ctl_poke_child) */
    if (cfg->inherit_listener ? ctl_adopt_listener(ctl, cfg->listen_fd) != 0
                              : ctl->nchild > 0 && ctl_listen_any(ctl) != 0)
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
            ctl_serve_listener(ctl, my_deadline, my_deadline);
            if (ctl->woken)
                t_start = next_try = next_poke = sh_now_ns();
            continue;
        }
        if (!need_parent && ctl_children_connected(ctl) == ctl->nchild)
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
        if (ctl_children_connected(ctl) < ctl->nchild) {
            if (sh_now_ns() >= next_poke) {
                bool full = sh_now_ns() - t_start >= SH_CTL_QUICK_PROBE_NS;

                for (int knock = 1; knock >= 0; knock--)
                    for (uint32_t j = 0; j < ctl->nchild; j++)
                        if (ctl->child[j].fd < 0)
                            ctl_poke_child(ctl, ctl->first_child + j, full, knock,
                                       my_deadline);
                next_poke = sh_now_ns() + sh_ctl_retry_delay(sh_now_ns() - t_start);
            }
            if (next_poke < wake)
                wake = next_poke;
        }
        ctl_serve_listener(ctl, wake, my_deadline);
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
                 ctl_probe_port(ctl, 0), ctl->port_probe, strerror(last_err));
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
             ctl_children_connected(ctl));
    /* Late children must fail fast instead of waiting in our backlog. */
    ctl_hs_abort_all(ctl);
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

/* Agent control-plane tree (see ctl.h): its shape, closing it,
 * and the state a sentinel hands over. */
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

uint32_t sh_ctl_parent_of(uint32_t index, uint32_t fanout)
{
    return index == 0 || fanout == 0 ? 0 : (index - 1) / fanout;
}

uint32_t ctl_depth_of(uint32_t index, uint32_t k)
{
    uint32_t d = 0;

    while (index != 0) {
        index = (index - 1) / k;
        d++;
    }
    return d;
}

/* Is @node in the subtree rooted at @top? */
int ctl_in_subtree(uint32_t node, uint32_t top, uint32_t k)
{
    while (node > top)
        node = (node - 1) / k;
    return node == top;
}

uint16_t ctl_probe_port(const struct sh_ctl *ctl, uint32_t step)
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

void ctl_set_sockopts(int fd)
{
    int one = 1, idle = CTL_KEEPIDLE_S, intvl = CTL_KEEPINTVL_S, cnt = CTL_KEEPCNT;
    unsigned int user_ms = CTL_USER_TIMEOUT_MS;

    /* Frames are small and latency-bound; failure only costs latency. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    /* A peer whose node or link died sends no RST: without these a wait
     * for it lasts until the staging deadline. Keepalive probes find a
     * silent peer gone within about 13 s, the user timeout one that does
     * not acknowledge what we sent within 20 s; its channel then fails and
     * the node counts as missing (repair around it, doc/design.md §5). */
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof(user_ms));
}

void sh_ctl_close(struct sh_ctl *ctl)
{
    if (ctl == NULL)
        return;
    ctl_hs_abort_all(ctl);
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
    static const char *const what[] = { "", " did not answer", " unreachable behind them",
                                        " closed the control connection (agent ended or link broke)" };
    /* causes first, then the nodes behind them */
    static const uint32_t order[] = { SH_CTL_MISSING, SH_CTL_CLOSED, SH_CTL_UNREACHABLE };
    size_t used = 0;
    uint32_t total = 0;

    if (len == 0)
        return 0;
    buf[0] = '\0';
    for (size_t o = 0; o < sizeof(order) / sizeof(order[0]); o++) {
        uint32_t state = order[o], count = 0;

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

/* Agent control-plane tree: the collectives (gather, broadcast, allgather)
 * and the encoding of their entries. */
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
        if (top != UINT32_MAX && !ctl_in_subtree(i, top, ctl->k))
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
        if (top != UINT32_MAX && !ctl_in_subtree(i, top, ctl->k))
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
            (top != UINT32_MAX && !ctl_in_subtree(idx, top, ctl->k)) ||
            sh_get_be32(p + 4) > SH_CTL_CLOSED || (size_t)(end - p - ENTRY_HDR) < dlen)
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

/* Mark the not-yet-seen nodes of @top's subtree: @top @top_state
 * (SH_CTL_MISSING or SH_CTL_CLOSED), the rest unreachable. */
static void mark_subtree(struct sh_ctl *ctl, uint32_t top, uint32_t top_state,
                         struct sh_ctl_entry *e, unsigned char *seen)
{
    for (uint32_t i = top; i < ctl->n; i++) {
        if (seen[i] || !ctl_in_subtree(i, top, ctl->k))
            continue;
        seen[i] = 1;
        e[i].state = i == top ? top_state : SH_CTL_UNREACHABLE;
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

/* Receive one gather message from child @j into @e. Returns 1 when the
 * child's connection closed (its agent ended or its link broke), else 0. */
static int recv_child(struct sh_ctl *ctl, uint32_t j, int64_t deadline_ns,
                       struct sh_ctl_entry *e, unsigned char *seen)
{
    unsigned char *payload = NULL;
    uint32_t len = 0;
    uint16_t type = 0;
    uint32_t c = ctl->first_child + j;

    if (sh_frame_recv(ctl->child[j].fd, &ctl->child[j].rx, ctl->max_payload,
                      ctl->child[j].peer, &type, &payload, &len, deadline_ns) != 0) {
        int closed = errno == ECONNRESET;

        drop_child(ctl, j, closed ? "connection closed" : strerror(errno));
        return closed;
    }
    if (type != MSG_GATHER ||
        decode_entries(ctl, payload, len, c, ctl->child[j].peer, e, seen) != 0)
        drop_child(ctl, j, "protocol error");
    free(payload);
    return 0;
}

/* Gather into @e (N entries, our subtree filled) with a wait of our own until
 * @wait_until. Then forward to the parent unless we are the root. */
static int gather_core(struct sh_ctl *ctl, uint32_t tag, const void *data,
                       uint32_t len, int64_t wait_until, int64_t send_deadline,
                       struct sh_ctl_entry *e, unsigned char *seen)
{
    struct pollfd *pfd = NULL;
    uint32_t *which = NULL;
    unsigned char *done = NULL; /* 1: answered or dropped, 2: its connection closed */
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
            done[which[x]] = recv_child(ctl, which[x], wait_until, e, seen) ? 2 : 1;
        }
    }
    for (uint32_t j = 0; j < ctl->nchild; j++)
        mark_subtree(ctl, ctl->first_child + j,
                     done != NULL && done[j] == 2 ? SH_CTL_CLOSED : SH_CTL_MISSING, e, seen);
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

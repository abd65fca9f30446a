/* Mutual challenge-response handshake of the control plane.
 *
 *   client -> server  HELLO     jobid, stepid, client index, expected server index, nonce_c
 *   server -> client  CHALLENGE jobid, stepid, server index, client index, nonce_s,
 *                               proof_s = HMAC(K_job, "server" | ids | nonce_c | nonce_s)
 *   client -> server  PROOF     proof_c = HMAC(K_job, "client" | ids | nonce_c | nonce_s)
 *   server -> client  WELCOME   first authenticated frame (session key s2c)
 *
 * Nonces are 32 fresh random bytes from each side, so neither proof can be
 * replayed from an earlier connection; the proofs bind job, step and both node
 * indices, so a peer of another job or step (on a probed port), or the wrong
 * node, is told apart from the right one. The server proves first: the
 * client reveals nothing to a server that does not know K_job. After the
 * handshake both sides hold per-direction session keys (key.h). */
#ifndef STAGEHAND_HANDSHAKE_H
#define STAGEHAND_HANDSHAKE_H

#include <stdbool.h>
#include <stdint.h>

#include "frame.h"

/* An authenticated connection. */
struct sh_chan {
    int fd;                    /* -1 when closed */
    struct sh_frame_key tx;    /* our frames */
    struct sh_frame_key rx;    /* the peer's frames */
    uint32_t peer_index;       /* the peer's node index */
    char peer[96];             /* "name(index)" for log messages */
};

struct sh_hs_ident {
    uint64_t jobid;
    uint64_t stepid;
    uint32_t index;            /* our node index */
    bool quiet;                /* log a rejected peer at debug, not as a warning:
                                  the other side may be anyone (a not yet woken
                                  agent's listener, a poke on a probed port) */
};

/* Decides whether a server accepts a client index (e.g. "is one of my
 * children and not yet connected"). Returns non-zero to accept. */
typedef int (*sh_hs_accept_fn)(uint32_t client_index, void *arg);

/* Run the client side on the connected stream @fd. Succeeds only if the
 * server proves K_job for our job and step and is node @server_index.
 * Once the server's challenge has arrived, the rest of the exchange gets at
 * least 1 s even past @deadline_ns (see handshake.c). On success fills @out
 * (takes @fd). On failure out->fd is -1 and the caller
 * still owns (and closes) @fd. Returns 0, or -1 with errno:
 * ENXIO (server is another job, step or node: try elsewhere), EACCES (server
 * failed to prove the key, or closed after our proof), EPROTO (malformed),
 * ECONNRESET, ETIMEDOUT, EIO. */
int sh_hs_client(int fd, const unsigned char kjob[SH_KEY_LEN],
                 const struct sh_hs_ident *me, uint32_t server_index,
                 const char *peer, int64_t deadline_ns, struct sh_chan *out);

/* Run the server side on the accepted stream @fd until @deadline_ns,
 * blocking (sh_hs_srv_* for many at once). Takes @fd: on success @out holds
 * it (out->peer_index is the client's index), on failure it is closed and
 * out->fd is -1. Returns 0, or -1 with
 * errno: ENXIO (another job/step, or @accept refused the index), EACCES (the
 * client failed to prove the key: logged as a rejected peer), EPROTO,
 * ECONNRESET, ETIMEDOUT, EIO. */
int sh_hs_server(int fd, const unsigned char kjob[SH_KEY_LEN],
                 const struct sh_hs_ident *me, sh_hs_accept_fn accept, void *arg,
                 const char *peer, int64_t deadline_ns, struct sh_chan *out);

/* The server side of one handshake in progress, driven without blocking, so
 * that an agent serves many connections at once: a peer that connects and
 * stalls (or a flood of them) holds one slot until its deadline, never the
 * listener. Fields are private to handshake.c. */
struct sh_hs_srv {
    int fd;                    /* the accepted stream (non-blocking); -1: free */
    int64_t deadline_ns;       /* CLOCK_MONOTONIC ns: the whole exchange */
    int64_t started_ns;
    unsigned state;            /* awaiting HELLO or PROOF */
    size_t have;               /* bytes of the awaited message received */
    unsigned char buf[128];
    uint32_t client;           /* the index the client claims (after HELLO) */
    unsigned char nonce_c[SH_NONCE_LEN], nonce_s[SH_NONCE_LEN];
    char peer[96];             /* "connection from ADDR" for log messages */
    char name[128];            /* the same "claiming node N", once known */
};

/* Start a server handshake on the accepted non-blocking stream @fd (taken)
 * that must finish by @deadline_ns; @peer names it in messages. */
void sh_hs_srv_begin(struct sh_hs_srv *s, int fd, const char *peer, int64_t deadline_ns);

/* Advance @s with what @s->fd has to read now (call when poll(2) reports it
 * readable, or at any time). Returns 1 when the client proved K_job (@out is
 * the channel and takes the stream; @s is free again), 0 when it needs more
 * input, -1 when the handshake failed (errno as sh_hs_server; the stream is
 * closed and @s is free). Messages as sh_hs_server. */
int sh_hs_srv_step(struct sh_hs_srv *s, const unsigned char kjob[SH_KEY_LEN],
                   const struct sh_hs_ident *me, sh_hs_accept_fn accept, void *arg,
                   struct sh_chan *out);

/* Does @s still wait for the client's first message (HELLO)? */
bool sh_hs_srv_waiting_hello(const struct sh_hs_srv *s);

/* Abandon @s: close its stream, wipe its state (a free slot again). */
void sh_hs_srv_abort(struct sh_hs_srv *s);

/* Close the connection and wipe its keys. */
void sh_chan_close(struct sh_chan *chan);

#endif

#!/usr/bin/env python3
"""Hostile peers for a live stagehand agent's control port (issue 6,
tests/cluster/test_security_ctl.sh). Runs as a user without the job key.

    ctl_attack.py port JOBID BASE RANGE      print the derived control port
    ctl_attack.py portstep JOBID STEP BASE RANGE    ... of a job step's staging
    ctl_attack.py attack HOST PORT JOBID     run every attack, print results
    ctl_attack.py wake HOST JOBID BASE RANGE FROM TO
                                             wake-ups that prove nothing (issue 30
                                             item 7) at the first port of the job's
                                             sequence that accepts
    ctl_attack.py hog READY STOP RANGE...    bind and listen on every port of each
                                             RANGE (BASE:COUNT) on 0.0.0.0 and [::],
                                             report to READY, hold until STOP exists
                                             (issue 30 item 2)

The handshake layout follows core/agent/handshake.c: header magic "SHHS"
(be32), version 1 (be16), type (be16); HELLO = header, jobid (be64), stepid
(be64), from (be32), to (be32), 32-byte nonce; CHALLENGE = HELLO + 32-byte
proof; PROOF = header + 32-byte proof. The prolog's tree uses step id
0xfffffffe."""
import os
import resource
import socket
import struct
import sys
import time

MAGIC = 0x53484853
STEP_JOB = 0xFFFFFFFE
M64 = (1 << 64) - 1


def derive_port(jobid, stepid, base, rng):
    """sh_ctl_derive_port() of core/common/ctlport.c."""
    x = ((jobid * 0x9E3779B97F4A7C15) & M64) ^ ((stepid + 0x632BE59BD9B4E019) & M64)
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    x ^= x >> 31
    return base + x % rng


def head(msg_type):
    return struct.pack(">IHH", MAGIC, 1, msg_type)


def hello(jobid, frm, to):
    return head(1) + struct.pack(">QQII", jobid, STEP_JOB, frm, to) + os.urandom(32)


def wake(host, jobid, base, rng, frm, to):
    """Find the job's listening port on HOST (a sentinel's) and connect to it
    as an attacker would wake it: garbage, a connection closed at once, a
    HELLO claiming to be the parent FROM followed by a proof without the key."""
    first = derive_port(jobid, STEP_JOB, base, rng)
    port = None
    for step in range(min(rng, 64)):
        p = base + (first - base + step) % rng
        try:
            s = connect(host, p)
        except OSError:
            continue
        port = p
        break
    if port is None:
        print("no port of job %d's sequence from %d accepts on %s" % (jobid, first, host))
        return 1
    s.sendall(b"GET / HTTP/1.0\r\n\r\n" + os.urandom(64))
    s.close()
    print("port %d (derived %d): garbage sent" % (port, first))
    s = connect(host, port)
    s.close()
    print("closed at once")
    s = connect(host, port)
    s.sendall(hello(jobid, frm, to))
    ch = b""
    try:
        while len(ch) < 96:
            part = s.recv(4096)
            if not part:
                break
            ch += part
    except OSError:
        pass
    if len(ch) >= 96:
        s.sendall(head(3) + os.urandom(32))
    print("forged wake-up as node %d: %s" % (frm, outcome(s)))
    s.close()
    return 0


def hog(ready, stop, ranges):
    """Bind every port of RANGES on 0.0.0.0 and [::] (v6-only) and listen."""
    held, counts = [], {}
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    for r in ranges:
        base, count = (int(x) for x in r.split(":"))
        for port in range(base, base + count):
            for fam, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
                s = socket.socket(fam, socket.SOCK_STREAM)
                # as a listener binds (past a last job's TIME_WAIT connections)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if fam == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    s.bind((addr, port))
                    s.listen(16)
                    held.append(s)
                    key = "%s bound" % r
                except OSError as e:
                    s.close()
                    key = "%s %s" % (r, os.strerror(e.errno))
                counts[key] = counts.get(key, 0) + 1
    with open(ready + ".tmp", "w") as f:
        for key in sorted(counts):
            f.write("%s: %d\n" % (key, counts[key]))
    os.rename(ready + ".tmp", ready)
    end = time.time() + 600
    while not os.path.exists(stop) and time.time() < end:
        time.sleep(0.2)
    return 0


def connect(host, port):
    s = socket.create_connection((host, port), timeout=5)
    s.settimeout(5)
    return s


def outcome(s):
    """What the agent does after our last message: 'closed' or 'open'."""
    try:
        data = s.recv(4096)
        return "closed" if not data else "answered %d bytes" % len(data)
    except socket.timeout:
        return "open"
    except OSError as e:
        return "closed (%s)" % e.strerror


def attack(host, port, jobid):
    results = []

    # 1. garbage instead of a handshake
    s = connect(host, port)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n" + os.urandom(64))
    results.append(("garbage", outcome(s)))
    s.close()

    # 2. oversized garbage
    s = connect(host, port)
    try:
        s.sendall(os.urandom(1 << 20))
    except OSError:
        pass
    results.append(("oversized", outcome(s)))
    s.close()

    # 3. a truncated HELLO, then the connection ends
    s = connect(host, port)
    s.sendall(hello(jobid, 2, 0)[:20])
    s.shutdown(socket.SHUT_WR)
    results.append(("truncated", outcome(s)))
    s.close()

    # 4. a well-formed HELLO claiming to be node 2, then a proof without the
    #    key (random bytes) and a replay of the agent's own challenge proof
    for name, make_proof in (("keyless", lambda ch: os.urandom(32)),
                             ("replayed", lambda ch: ch[-32:])):
        s = connect(host, port)
        s.sendall(hello(jobid, 2, 0))
        ch = b""
        while len(ch) < 8 + 24 + 32 + 32:
            part = s.recv(4096)
            if not part:
                break
            ch += part
        if len(ch) < 96 or ch[:4] != struct.pack(">I", MAGIC):
            results.append((name, "no challenge (%d bytes)" % len(ch)))
            s.close()
            continue
        s.sendall(head(3) + make_proof(ch))
        results.append((name, outcome(s)))
        s.close()

    # 5. a HELLO for another job and for a node that is not a child
    s = connect(host, port)
    s.sendall(hello(jobid + 1, 2, 0))
    results.append(("other-job", outcome(s)))
    s.close()

    for name, res in results:
        print("%s: %s" % (name, res))
    return 0


def main():
    if sys.argv[1] == "port":
        print(derive_port(int(sys.argv[2]), STEP_JOB, int(sys.argv[3]), int(sys.argv[4])))
        return 0
    if sys.argv[1] == "portstep":
        print(derive_port(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])))
        return 0
    if sys.argv[1] == "attack":
        return attack(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    if sys.argv[1] == "wake":
        return wake(sys.argv[2], *(int(x) for x in sys.argv[3:8]))
    if sys.argv[1] == "hog":
        return hog(sys.argv[2], sys.argv[3], sys.argv[4:])
    return 2


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    sys.stdout.flush()
    sys.exit(rc)

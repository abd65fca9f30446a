#!/usr/bin/python3
"""Raw TCP transfer for calibrating the benchmark fabric (bench/run.sh).

No MPI, no hashing: what the emulated links and the host's cores can move.

  rawchain.py recv PORT [--forward HOST:PORT] [--out FILE]
      accept one connection on PORT, read until EOF, optionally forward
      every block to HOST:PORT and write it to FILE; print bytes and seconds
  rawchain.py send HOST:PORT BYTES
      send BYTES bytes from memory to HOST:PORT; print bytes and seconds

A chain n1 -> n2 -> ... -> nN of these (each hop writes to its /nvme) is the
cheapest possible pipelined chain; if it reaches the shaped link rate at the
largest N, the 2 cores are not the bottleneck at that rate.
"""
import os
import socket
import sys
import time

BLOCK = 1 << 20
BUF = 4 << 20


def connect(target, deadline_s=10.0):
    host, port = target.rsplit(":", 1)
    end = time.monotonic() + deadline_s
    while True:
        try:
            s = socket.create_connection((host, int(port)), timeout=5)
            s.settimeout(None)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUF)
            return s
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.02)


def recv(argv):
    port = int(argv[0])
    fwd = out = None
    i = 1
    while i < len(argv):
        if argv[i] == "--forward":
            fwd = argv[i + 1]
        elif argv[i] == "--out":
            out = argv[i + 1]
        else:
            raise SystemExit("rawchain: unknown argument " + argv[i])
        i += 2
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUF)
    ls.bind(("0.0.0.0", port))
    ls.listen(1)
    ls.settimeout(60)
    conn, _ = ls.accept()
    conn.settimeout(120)
    down = connect(fwd) if fwd else None
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if out else -1
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    total = 0
    t0 = None
    while True:
        n = conn.recv_into(view)
        if n == 0:
            break
        if t0 is None:
            t0 = time.monotonic()
        if down is not None:
            down.sendall(view[:n])
        if fd >= 0:
            os.write(fd, view[:n])
        total += n
    t1 = time.monotonic()
    if down is not None:
        down.shutdown(socket.SHUT_WR)
        down.recv(1)
        down.close()
    if fd >= 0:
        os.close(fd)
        os.unlink(out)
    conn.close()
    print(f"{total} {t1 - (t0 or t1):.6f}")


def send(argv):
    target, size = argv[0], int(argv[1])
    s = connect(target)
    block = os.urandom(BLOCK)
    t0 = time.monotonic()
    left = size
    while left > 0:
        n = min(left, BLOCK)
        s.sendall(block[:n])
        left -= n
    s.shutdown(socket.SHUT_WR)
    s.recv(1)           # the receiver closes after it has read everything
    t1 = time.monotonic()
    s.close()
    print(f"{size} {t1 - t0:.6f}")


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("recv", "send"):
        raise SystemExit(__doc__)
    (recv if sys.argv[1] == "recv" else send)(sys.argv[2:])


if __name__ == "__main__":
    main()

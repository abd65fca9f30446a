#!/usr/bin/python3
"""Time model of the staging methods (bench/model.md), checked against a
bench/run.sh result and extrapolated to large clusters.

  model.py [--csv bench/results/latest.csv] [--calib bench/results/latest.calib]
           [--segment BYTES] [--t0 SECONDS] [--fit-nodes "2 4"]

Chain (pipelined point-to-point, segment s, N nodes, bottleneck rate B =
min(link, read, write), link rate Bl):
    T_chain = T0 + S/B + (N-1) * (s/Bl + a)
Per-segment broadcast collective (binomial tree per segment, mpi-stage style):
    T_binom = T0 + max(ceil(log2 N) * S/Bl, S/B)
Pipelined binary tree (each inner node sends every segment twice):
    T_tree  = T0 + max(2*S/Bl, S/B) + 2*ceil(log2 N) * (s/Bl + a)
Naive copy (every node reads the shared filesystem, storage rate Bs total):
    T_cp    = max(S/Bl, N*S/Bs)
sbcast with N <= TreeWidth (50): the first node sends to every other node:
    T_sb    = (N-1) * S/Bl
T0 = start-up (MPI init, metadata, pre-check, verify, publish), a = per-hop
latency per segment.
"""
import argparse
import csv
import math
import statistics
from collections import defaultdict


def chain(S, N, B, s, T0, a, Bl=None):
    """B: steady-state rate (slowest of link, read, write); Bl: link rate,
    which sets the per-hop store-and-forward time of one segment."""
    Bl = Bl or B
    return T0 + S / B + (N - 1) * (s / Bl + a)


def binom(S, N, B, T0, Bl=None):
    Bl = Bl or B
    return T0 + max(math.ceil(math.log2(max(N, 2))) * S / Bl, S / B)


def tree(S, N, B, s, T0, a, Bl=None):
    Bl = Bl or B
    return T0 + max(2 * S / Bl, S / B) + 2 * math.ceil(math.log2(max(N, 2))) * (s / Bl + a)


def read_calib(path):
    """bench/run.sh's calibration file (KEY=VALUE lines) as a dict."""
    cal = {}
    for line in open(path):
        if "=" in line:
            k, v = line.strip().split("=", 1)
            cal[k] = v
    return cal


def rates(cal):
    """(Bl, B) in bytes/s from a calibration: the link, and the bottleneck
    B = min(link, the storage read by two clients, local write)."""
    Bl = float(cal["link_raw_MBps"]) * 1e6
    return Bl, min(Bl, float(cal["storage_2readers_MBps"]) * 1e6,
                   float(cal["local_write_MBps"]) * 1e6)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", default="bench/results/latest.csv")
    ap.add_argument("--calib", default="bench/results/latest.calib")
    ap.add_argument("--segment", type=float, default=None,
                    help="segment size in bytes (default: segment_bytes from the calibration "
                         "file, else 512 KiB, the engine's default)")
    ap.add_argument("--t0", type=float, default=None,
                    help="fixed start-up seconds (default: fitted)")
    ap.add_argument("--fit-nodes", default=None,
                    help="node counts whose chain points the fit uses, e.g. \"2 4\" "
                         "(default: every N); the table still shows every point")
    a = ap.parse_args()
    cal = read_calib(a.calib)
    Bl, B = rates(cal)
    Bs = float(cal["storage_2readers_MBps"]) * 1e6
    s = a.segment or float(cal.get("segment_bytes", 1 << 19))
    runs = defaultdict(list)
    for r in csv.DictReader(open(a.csv)):
        if r["ok"] == "1" and r["seconds"] not in ("", "nan"):
            runs[(int(r["size_bytes"]), r["method"], int(r["nodes"]))].append(float(r["seconds"]))
    med = {k: statistics.median(v) for k, v in runs.items()}

    # fit start-up T0 and the chain's effective rate Be by least squares:
    # t - (N-1) s/Bl = T0 + S/Be
    fit_n = {int(x) for x in a.fit_nodes.split()} if a.fit_nodes else None
    pts = [((S << 20), N, t) for (S, m, N), t in med.items()
           if m == "chain" and (fit_n is None or N in fit_n)]
    T0, Be = 0.0, B
    if len(pts) >= 2 and len({p[0] for p in pts}) >= 2:
        xs = [p[0] for p in pts]
        ys = [t - (N - 1) * s / Bl for _, N, t in pts]
        mx, my = statistics.mean(xs), statistics.mean(ys)
        k = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        Be, T0 = 1 / k, my - k * mx
    if a.t0 is not None:
        T0 = a.t0
    print(f"B = min(link {Bl / 1e6:.1f}, storage {Bs / 1e6:.1f}, write) = {B / 1e6:.1f} MB/s; "
          f"segment {s / 1048576:g} MiB; chain fit: start-up T0 = {T0:.2f} s, effective "
          f"rate Be = {Be / 1e6:.1f} MB/s ({100 * Be / B:.0f}% of B), fitted on the chain "
          f"points at N = {' '.join(map(str, sorted(fit_n))) if fit_n else 'every N'}\n")
    print("| method | S MiB | N | measured s | model s | model |")
    print("|---|---|---|---|---|---|")
    for (S, m, N), t in sorted(med.items(), key=lambda x: (x[0][0], x[0][1], x[0][2])):
        Sb = S << 20
        if m == "chain":
            p, f = chain(Sb, N, Be, s, T0, 0.0, Bl), "T0 + S/Be + (N-1)s/Bl (fitted)"
        elif m == "plugin":
            continue
        elif m == "cp":
            p, f = max(Sb / Bl, N * Sb / Bs), "max(S/Bl, N S/Bs)"
        elif m == "sbcast":
            p, f = (N - 1) * Sb / Bl, "(N-1) S/Bl"
        elif m == "bcast":
            p, f = binom(Sb, N, B, T0, Bl), "T0 + max(ceil(log2 N) S/Bl, S/B)"
        else:
            continue
        print(f"| {m} | {S} | {N} | {t:.2f} | {p:.2f} | {f} |")

    print("\nPrediction, 16 GiB image, per-hop latency a = 5 us, start-up T0 not included. "
          "Bn = the node's own bottleneck: the link, or 10 GB/s where one node's NVMe write "
          "or one client's read of the shared filesystem is slower than the link:\n")
    print("| link | Bn GB/s | N | segment | chain s | pipelined binary tree s | binomial per segment s | naive copy, 1 TB/s storage s |")
    print("|---|---|---|---|---|---|---|---|")
    S = 16 * 2**30
    for gbps in (200, 400):
        Bl_x = gbps * 1e9 / 8
        for Bn in (Bl_x, 10e9):
            for N in (1000, 10000):
                for seg in (1 << 19, 1 << 20, 8 << 20):
                    print(f"| {gbps} Gb/s | {Bn / 1e9:.0f} | {N} | {seg / 1048576:g} MiB | "
                          f"{chain(S, N, Bn, seg, 0, 5e-6, Bl_x):.2f} | "
                          f"{tree(S, N, Bn, seg, 0, 5e-6, Bl_x):.2f} | "
                          f"{binom(S, N, Bn, 0, Bl_x):.2f} | "
                          f"{max(S / Bn, N * S / 1e12):.1f} |")

if __name__ == "__main__":
    main()

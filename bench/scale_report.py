#!/usr/bin/python3
"""Report of bench/run.sh --scale (issue 35 item 1): the link-bound regime
at N = 2, 16, 32.

  scale_report.py --csv scale-STACK-DATE.csv --calib scale-STACK-DATE.calib --out X.md

Per method (plugin: job start to the job script's first step; chain: the
standalone engine under srun) and N: the median time, T(N) / T(2), and
bench/model.md's chain model fitted on N = 2 only,

    T(N) = T0 + S/B + (N-1) * s/Bl        (model.chain, a = 0)

with B = min(link, the storage read by two clients, local write) and Bl the
link rate from the run's calibration, s the segment size, and T0 the one
fitted term (T(2) - S/B - s/Bl): the points at N = 16 and 32 are
predictions. For the chain it adds the engine's CPU seconds, the busiest
rank's share of one core and all ranks' together over the transfer: how
far the run was from CPU-bound.
"""
import argparse
import csv
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import chain, rates, read_calib  # noqa: E402  (bench/model.py, next to this file)


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", required=True)
    ap.add_argument("--calib", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cal = read_calib(a.calib)
    Bl, B = rates(cal)
    # as bench/model.py: the storage as read by two clients at once (the
    # engine keeps --read-ahead reads in flight; one dd stream is slower)
    Br = float(cal["storage_2readers_MBps"]) * 1e6
    Bw = float(cal["local_write_MBps"]) * 1e6
    s = float(cal.get("segment_bytes", 1 << 19))
    rows = list(csv.DictReader(open(a.csv)))
    t = defaultdict(list)
    agent = defaultdict(list)
    eng = defaultdict(list)
    failed = defaultdict(int)
    for r in rows:
        k = (int(r["size_mib"]), r["method"], int(r["nodes"]))
        if r["ok"] != "1" or num(r["seconds"]) is None:
            failed[k] += 1
            continue
        t[k].append(float(r["seconds"]))
        if num(r["agent_seconds"]) is not None:
            agent[k].append(float(r["agent_seconds"]))
        if r["method"] == "chain":
            eng[k].append(r)
    nvme = {"tmpfs": "a tmpfs in the VM's memory (`--nvme-fs tmpfs`)",
            "ext4": "ext4 on a loop device over a sparse image on the host's disk "
                    "(`--nvme-fs ext4`)"}.get(cal.get("nvme_fs", "tmpfs"), cal.get("nvme_fs"))
    L = []
    L.append(f"# Link-bound staging at scale, {cal.get('stack', '?')} "
             f"({cal.get('date_start', '?')})\n")
    L.append(f"Slurm {cal.get('slurm_version', '?')}, Open MPI {cal.get('openmpi_version', '?')}, "
             f"PMIx {cal.get('pmix_version', '?')}. `bench/run.sh --scale`: links shaped to "
             f"{cal.get('link_rate')} each way, the storage host to {cal.get('storage_rate')}, "
             f"segment {s / 1024:g} KiB; every N within each repetition (alternating) after a "
             f"warm-up staging to every node. Each node's /nvme: {nvme}. "
             f"Host: {cal.get('host_cpus', '?')} CPUs, load "
             f"average {cal.get('load_start', '?')} at the start, {cal.get('load_end', '?')} at "
             f"the end; duration {cal.get('duration_s', '?')} s.\n")
    L.append(f"Calibration (raw transfers, no MPI; {int(cal.get('cal_bytes', 0)) >> 20} MiB "
             f"each): link {Bl / 1e6:.2f} MB/s, the storage read by one node "
             f"{float(cal['storage_1reader_MBps']):.2f} and by two at once "
             f"{Br / 1e6:.2f} MB/s, local write {Bw / 1e6:.0f} MB/s; a raw TCP chain over "
             f"{cal.get('chain_raw_nodes')} nodes (each hop forwarding and writing) "
             f"{cal.get('chain_raw_MBps')} MB/s with the host's CPUs "
             f"{cal.get('chain_raw_busy_pct')} % busy. B = {B / 1e6:.2f} MB/s.\n")
    L.append("Model (bench/model.md, chain): T(N) = T0 + S/B + (N-1) s/Bl, T0 fitted on "
             "N = 2 per method; N = 16 and 32 are predictions.\n")
    L.append("| method | S MiB | N | runs | median s | T(N) / T(2) | model s | error | "
             "agent s (plugin) |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    keys = sorted(set(t) | set(failed), key=lambda k: (k[0], k[1] != "plugin", k[1], k[2]))
    base = {}
    for k in keys:
        S, m, N = k
        if N == 2 and t.get(k):
            base[(S, m)] = statistics.median(t[k])
    for k in keys:
        S, m, N = k
        Sb = S << 20
        runs = f"{len(t.get(k, []))}" + (f" (+{failed[k]} failed)" if failed.get(k) else "")
        if not t.get(k):
            L.append(f"| {m} | {S} | {N} | {runs} | - | - | - | - | - |")
            continue
        med = statistics.median(t[k])
        b = base.get((S, m))
        ratio = f"{med / b:.3f}" if b else "-"
        if b:
            T0 = b - Sb / B - s / Bl
            p = chain(Sb, N, B, s, T0, 0.0, Bl)
            pred, err = f"{p:.2f}", f"{100 * (med - p) / p:+.1f} %"
        else:
            pred = err = "-"
        ag = f"{statistics.median(agent[k]):.2f}" if agent.get(k) else "-"
        L.append(f"| {m} | {S} | {N} | {runs} | {med:.2f} | {ratio} | {pred} | {err} | {ag} |")
    if eng:
        L.append("\nThe chain's own clock and CPU (medians): start-up and transfer phase on the "
                 "engine's clock; CPU seconds of the reading rank, an inner (forwarding) rank and "
                 "the last rank; the busiest rank's CPU over the transfer (share of one core) and "
                 "all ranks' CPU together over the transfer (cores in use); the host's CPUs busy "
                 "over the whole run (everything on the host, other work included).\n")
        L.append("| S MiB | N | start-up s | transfer s | transfer MB/s | CPU reader s | "
                 "CPU forwarder s | CPU last s | busiest rank, cores | all ranks, cores | "
                 "host busy % |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for k in sorted(eng):
            S, _, N = k
            rs = eng[k]

            def md(col):
                v = [num(r[col]) for r in rs if num(r[col]) is not None]
                return statistics.median(v) if v else None
            st, tr = md("engine_startup"), md("engine_transfer")
            cr, cf, cl, cm = md("cpu_reader"), md("cpu_forwarder"), md("cpu_last"), md("cpu_max")
            allc = (cr or 0) + (cf or 0) * max(N - 2, 0) + (cl or 0)
            hb = md("host_cpu_busy_pct")
            L.append(f"| {S} | {N} | {st:.2f} | {tr:.2f} | {(S << 20) / tr / 1e6:.2f} | {cr:.2f} | "
                     f"{'-' if cf is None else f'{cf:.2f}'} | {cl:.2f} | {cm / tr:.3f} | "
                     f"{allc / tr:.2f} | {'-' if hb is None else f'{hb:.0f}'} |")
    with open(a.out, "w") as f:
        f.write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()

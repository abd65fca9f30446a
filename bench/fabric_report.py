#!/usr/bin/env python3
"""Report of bench/run.sh --fabric: the methods side by side per node count,
the engine's CPU seconds per GiB by role, and issue 32's targets.

    bench/fabric_report.py --csv fabric-STACK-DATE.csv --calib latest.calib
                           --out fabric-STACK-DATE.md

Times are medians over the repetitions that succeeded. "wall" is the srun
step (start-up included) for every method; "own" is the method's own clock:
the engine's total (start-up to publish), the MPI_Bcast loop's time. The
chain is compared with bcast and cp on wall time, with the in-memory
MPI_Bcast loop on its transfer phase (both move S through MPI; the chain
also reads SRC and writes DST)."""
import statistics

from report import load_run, run_heading, write_text

GIB = 1 << 30


def num(v):
    try:
        return float(v)
    except ValueError:
        return None


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def fmt(v, d=2):
    return "-" if v is None else f"{v:.{d}f}"


def main():
    calib, rows, out_path = load_run("fabric_report.py")
    methods = list(dict.fromkeys(r["method"] for r in rows))
    nodes = sorted({int(r["nodes"]) for r in rows})
    size = int(rows[0]["size_mib"])
    gib = size * (1 << 20) / GIB
    stat = {}
    for n in nodes:
        for m in methods:
            rs = [r for r in rows if int(r["nodes"]) == n and r["method"] == m]
            ok = [r for r in rs if r["ok"] == "1"]
            stat[n, m] = {
                "runs": f"{len(ok)}/{len(rs)}",
                "walls": [num(r["seconds"]) for r in ok],
                "wall": med(num(r["seconds"]) for r in ok),
                "own": med(num(r["own_seconds"]) for r in ok),
                "xfer": med(num(r["transfer_seconds"]) for r in ok),
                "cpu": [med(num(r[k]) for r in ok)
                        for k in ("cpu_reader", "cpu_forwarder", "cpu_last")],
                # absent in the CSVs of runs before the engine reported them
                "cpu_split": [med(num(r.get(k) or "-") for r in ok)
                              for k in ("cpu_write", "cpu_read")],
            }
    out = run_heading("Fast-fabric benchmark", calib)
    p = out.append
    out[-1] += (" shared by every node; links unshaped; "
        f"S = {size} MiB; load average (uptime) at start {calib.get('load_start', '?')}, "
        f"at end {calib.get('load_end', '?')}; the host is shared with other work, so "
        f"the numbers are noisy. Raw TCP without MPI: n1->n2 "
        f"{calib.get('link_raw_MBps', '?')} MB/s, a chain over "
        f"{calib.get('chain_raw_nodes', '?')} nodes {calib.get('chain_raw_MBps', '?')} MB/s.")
    p("")
    p("Methods: chain-ob1 and chain-ucx are stagehand-bcast --algorithm=chain over "
      "Open MPI's ob1/TCP and over UCX (UCX's TCP transport, the agent's pml=ucx "
      "settings: UCX's own thresholds, a rendezvous from 19 KiB), chain-ucxeager "
      "the same with segments up to 1 MiB sent eagerly (UCX_RNDV_THRESH and "
      "UCX_TCP_TX/RX_SEG_SIZE 1052672); bcast-ob1 is "
      "--algorithm=bcast (one MPI_Ibcast per segment); mpibcast is an MPI_Bcast "
      "loop in memory (no file I/O); cp is srun cp from the bound-in /shared, i.e. "
      "N parallel copies from the host's page cache into each node's tmpfs (memory "
      "bandwidth, not a fabric). wall = the srun step, own = the method's own "
      "clock (engine: start-up to publish; mpibcast: the loop), transfer = the "
      "engine's transfer phase. CPU = the engine's CPU seconds per GiB by rank: "
      "reader (rank 0), forwarder (mean of ranks 1..N-2), last node (rank N-1); "
      "of it, writing = the writer thread (hashing and writing DST, mean over "
      "the ranks), reading = the reader rank's threads reading SRC; the rest is "
      "the MPI side; "
      f"medians of the successful runs (ok/runs).")
    p("")
    p("| N | method | ok | wall s | own s | transfer s | MB/s (wall) | CPU s/GiB reader | forwarder | last | writing | reading |")
    p("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for n in nodes:
        for m in methods:
            s = stat[n, m]
            rate = None if not s["wall"] else size * (1 << 20) / s["wall"] / 1e6
            cpu = [None if c is None else c / gib for c in s["cpu"] + s["cpu_split"]]
            p(f"| {n} | {m} | {s['runs']} | {fmt(s['wall'])} | {fmt(s['own'])} | "
              f"{fmt(s['xfer'])} | {fmt(rate, 0)} | {fmt(cpu[0])} | {fmt(cpu[1])} | "
              f"{fmt(cpu[2])} | {fmt(cpu[3])} | {fmt(cpu[4])} |")
    p("")
    p("## Targets (issue 32)")
    p("")
    chain = "chain-ob1"

    def verdict(n, a, b, key_a, key_b, slack):
        sa, sb = stat.get((n, a)), stat.get((n, b))
        if not sa or not sb or sa[key_a] is None or sb[key_b] is None:
            return f"| {n} | {a} vs {b} | - | - | not measured |"
        ok = sa[key_a] <= sb[key_b] * (1 + slack)
        return (f"| {n} | {a} {key_a} vs {b} {key_b} | {fmt(sa[key_a])} | "
                f"{fmt(sb[key_b])} | {'met' if ok else 'missed'} "
                f"({sa[key_a] / sb[key_b] * 100:.0f} %, limit {100 + slack * 100:.0f} %) |")

    p("| N | comparison | s | s | verdict |")
    p("|---|---|---|---|---|")
    for n in nodes:
        slack = 0.05 if n == 2 else 0.0
        for other in methods:
            if other.startswith("chain-"):
                continue
            if other.startswith("mpibcast"):
                p(verdict(n, chain, other, "xfer", "own", slack))
            else:
                p(verdict(n, chain, other, "wall", "wall", slack))
        if (n, "chain-ucx") in stat:
            p(verdict(n, "chain-ucx", chain, "wall", "wall", 0.0))
        if (n, "chain-ucxeager") in stat:
            p(verdict(n, "chain-ucxeager", "chain-ucx", "wall", "wall", 0.0))
    write_text(out, out_path)


if __name__ == "__main__":
    main()

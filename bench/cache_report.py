#!/usr/bin/env python3
"""Report of bench/cache.sh: per regime and variant the jobs that ran, the
median and p95 of job start -> script start, and each variant against its
baseline (no option; for cold staging the explicit DST). Rows of rep 0
(warm-up) are left out; a burst round in which not every job ran is reported
as such ("jobs ok")."""
import argparse, csv, statistics

ap = argparse.ArgumentParser(description=__doc__)
for a in ("csv", "out", "stack", "slurm", "burst", "nodes", "size", "seconds", "load"):
    ap.add_argument("--" + a, required=a in ("csv", "out"), default="?")
args = ap.parse_args()
path, md, stack, slurm = args.csv, args.out, args.stack, args.slurm
burst, nodes, size, secs, load = args.burst, args.nodes, args.size, args.seconds, args.load
rows = [r for r in csv.DictReader(open(path)) if r["regime"] != "warm-up"]

def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p * (len(v) - 1))))]

def stats(regime, variant, rep=None):
    sel = [r for r in rows if r["regime"] == regime and r["variant"] == variant
           and (rep is None or r["rep"] == rep)]
    return [float(r["seconds"]) for r in sel if r["ok"] == "1"], len(sel)

out = []
out.append(f"# stagehand benchmark: the node image cache ({path.rsplit('/', 1)[-1][6:-4]})\n")
out.append(f"Produced by `bench/cache.sh` in {secs} s on stack **{stack}** (Slurm {slurm}); "
           f"host: 2 CPU cores shared by every emulated node and daemon; load average at the end "
           f"{load}. Shared directory bound in, links unshaped. Times: job start (slurmctld's "
           f"allocation) -> the job script's start, in ms. Raw data: "
           f"[{path.rsplit('/', 1)[-1]}]({path.rsplit('/', 1)[-1]}).\n")
sections = [
    ("burst", f"Burst: {burst} jobs of one node on n1 at once (one job array), image cached and current",
     [("cache", "--stage-image=SRC (cache warm)"), ("nooption", "no option")]),
    ("noop", f"No-op at N={nodes}: every node current",
     [("cache", "--stage-image=SRC (cache warm)"), ("dst", "--stage-image=SRC:DST (current)"),
      ("nooption", "no option")]),
    ("cold", f"Cold staging of {size} MiB at N={nodes}",
     [("cache", "into the cache (emptied before)"), ("dst", "into an explicit DST (removed before)")]),
]
for regime, title, variants in sections:
    if not any(r["regime"] == regime for r in rows):
        continue
    out.append(f"## {title}\n")
    out.append("| variant | jobs ok | median ms | p95 ms | min-max ms |")
    out.append("|---|---|---|---|---|")
    med = {}
    for key, label in variants:
        v, n = stats(regime, key)
        if not v:
            out.append(f"| {label} | 0 of {n} | - | - | - |")
            continue
        med[key] = (statistics.median(v), q(v, 0.95))
        out.append(f"| {label} | {len(v)} of {n} | {med[key][0]*1e3:.0f} | {med[key][1]*1e3:.0f} | "
                   f"{min(v)*1e3:.0f}-{max(v)*1e3:.0f} |")
    if regime == "burst":
        # each round on its own: the rounds of a burst alternate, so a round's
        # two variants ran under the same load
        for rep in sorted({r["rep"] for r in rows if r["regime"] == "burst"}, key=int):
            for key, label in variants:
                v, n = stats(regime, key, rep)
                if v:
                    out.append(f"| round {rep}: {label} | {len(v)} of {n} | "
                               f"{statistics.median(v)*1e3:.0f} | {q(v, 0.95)*1e3:.0f} | "
                               f"{min(v)*1e3:.0f}-{max(v)*1e3:.0f} |")
    cpu = {k: [float(r["seconds"]) for r in rows if r["regime"] == "burst-cpu" and r["variant"] == k]
           for k, _ in variants} if regime == "burst" else {}
    if all(cpu.values()) and cpu:
        # the CPU the option adds a job, and what that costs the burst's
        # last job when the host's 2 cores do nothing else
        jobs = int(burst) if burst.isdigit() else 0
        per = {k: statistics.median(v) for k, v in cpu.items()}
        out.append("")
        out.append(f"CPU time of n1's slurmd and all it forked, per round of {burst} jobs (perf stat task-clock): "
                   + "; ".join(f"{dict(variants)[k]}: {', '.join(f'{x:.2f}' for x in v)} s" for k, v in cpu.items()))
        if jobs:
            add = (per["cache"] - per["nooption"]) / jobs
            out.append(f"- added CPU a job (medians): {add*1e3:+.1f} ms; over 2 cores that is "
                       f"{add*jobs/2:+.2f} s of queueing for the round's last job")
    out.append("")
    base = "nooption" if regime != "cold" else "dst"
    for key, label in variants:
        if key != base and key in med and base in med:
            out.append(f"- {label} against {dict(variants)[base]}: median "
                       f"{(med[key][0]-med[base][0])*1e3:+.0f} ms, p95 {(med[key][1]-med[base][1])*1e3:+.0f} ms"
                       + (f" ({med[key][0]/med[base][0]*100:.0f} % of its median)" if regime == "cold" else ""))
    out.append("")
open(md, "w").write("\n".join(out))
print("\n".join(out))

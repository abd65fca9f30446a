#!/usr/bin/python3
"""Turn bench/run.sh's CSV and calibration into latest.md and latest.png.

  report.py --csv latest.csv --calib latest.calib --out DIR
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
from collections import defaultdict

METHODS = [
    ("plugin", "stagehand, sbatch --stage-image: job start (allocation, prolog starts) -> job script start (first step), from slurmctld's log and the script's clock"),
    ("plugin-agent", "stagehand, same runs: the agent's own staging time (slurmd log)"),
    ("chain", "stagehand-bcast --algorithm=chain (srun in the allocation)"),
    ("bcast", "stagehand-bcast --algorithm=bcast (MPI_Ibcast per segment)"),
    ("sbcast", "sbcast from the allocation's first node"),
    ("cp", "srun cp from the shared filesystem on every node"),
]
STAGEHAND = ("plugin", "plugin-agent", "chain")
# What the plugin's time means on Slurm 22.05 (bookworm), where it was read
# off the code; other releases were not examined.
PLUGIN_POLL_2205 = ("; it moves in steps of 1 s because slurmd notices the end of a prolog by "
                    "polling it 10, 30, 70, 150, 310, 630 ms and then once a second after "
                    "starting it (Slurm 22.05 run_command_waitpid_timeout, when "
                    "PrologEpilogTimeout is set)")
# The software stacks bench/run.sh --stack knows (minicluster up --stack).
STACKS = {"bookworm": "Debian 12, the host's own", "trixie": "a Debian 13 root"}
# A run during which the VM handed back less than this much memory to its
# hypervisor counts as undisturbed in the "without host memory hand-back" view.
HANDBACK_MIB = 128


# Where the no-op's time goes, read off the slurmd logs (SlurmdDebug=debug) of
# one job of each kind at N=8 on the host of the 2026-12-01 runs; rewritten by
# hand when the product or the host changes. NOOP_ANALYSIS is the product
# before the prolog's local check (runs whose latest.calib lacks
# prolog_local_check=1); NOOP_ANALYSIS_LOCAL, formatted with the run's own
# medians, the product with it; NOOP_ANALYSIS_STAGING_PROCESS the product
# whose prolog hands the staging to a process of its own (staging_process=1).
NOOP_ANALYSIS = (
    "Where it goes (slurmd logs at SlurmdDebug=debug, one job of each kind at N=8, "
    "2026-12-01 13:23 UTC; t = 0 when slurmd on n1 starts `slurmstepd spank prolog`). "
    "Without the option the job script starts when n1's own prolog has ended: its "
    "slurmstepd reached the plugins at 97 ms and slurmd saw the end at 113 ms. With it, "
    "n1's prolog also waits for every other node's agent: the other slurmds started their "
    "prologs up to 36 ms after n1's, and with 8 slurmstepds starting at once on the host's "
    "2 cores the last one reached the plugins at 168 ms, before stagehand runs there at "
    "all. From then on stagehand's part on that node took 89 ms: the agent started 43 ms "
    "later (posix_spawn, exec, loading its libraries while the other agents run), its "
    "setup took 10 ms (site key, OpenSSL, initgroups through NSS), joining the control tree "
    "7 ms, and the result (the leader's stat of SRC over sshfs, the votes, the plan) came "
    "21 ms after that. n1's prolog ended at about 260 ms; slurmd polls a prolog at 10, 30, "
    "70, 150, 310, 630 ms after its start and then every second when PrologEpilogTimeout "
    "is set (run_command_waitpid_timeout, Slurm 22.05; a blocking wait without it), and "
    "saw the end at 336 ms. On this host the no-op therefore costs mostly the slowest of 8 "
    "slurmstepds that share 2 cores (on the host of the 05:57 UTC run slurmstepd reached "
    "the plugins in 23 ms and the no-op added 50 ms). An agent's no-op takes about 17 ms "
    "of CPU (perf stat, one node by hand: 485 page faults, each a hypervisor exit on this "
    "VM, where `/bin/true` takes 1.5-2 ms). The smallest N shows the same work when the "
    "nodes do not outnumber the cores.\n")
NOOP_ANALYSIS_LOCAL = (
    "Where it goes. Every node's prolog checks its own copy as the job user (stat of SRC, "
    "DST's recorded metadata, DST's filesystem, the job's claim; spank/localcheck.c) and, when "
    "it is current, ends without waiting for the other nodes, leaving a sentinel that "
    "starts its agent only if another node needs a copy (none does here: no agent "
    "starts). The job script starts when n1's prolog has "
    "ended. n1's own check took a median of {checks} (the agent's time column of the "
    "plugin runs, here from n1's summary line). At N=8 the host's 2 cores are shared by 8 "
    "slurmstepds starting at once and 8 checks (and, before the sentinels of 3050537, 8 "
    "detached agents, the larger part: doc/performance.md): in one series "
    "traced on n1 at N=8 (2026-12-02 08:18 UTC, 3 jobs) the check spent 26-90 ms opening "
    "SRC over sshfs (open, fstat, close; 5-9 ms on n5; 7.6 ms on an idle host, where the "
    "stat and access(2) it uses since take 0.7-1.4 ms), 14-51 ms looking up "
    "the user's groups and creating the runtime directory, and 2-17 ms in fork; at N=2 the "
    "whole check takes 11-21 ms. Slurm 22.05's slurmd polls a prolog at 10, 30, 70, 150, "
    "310, 630 ms after its start when PrologEpilogTimeout is set "
    "(run_command_waitpid_timeout), so a prolog that ends a little later than one without "
    "the option can be noticed up to 160 ms later; but with PrologEpilogTimeout unset, where "
    "slurmd waits without polling, the no-op added the same (41 ms at N=2, 209 ms at N=8, "
    "noop-2026-12-02T0916Z.md): on this host the shared cores, not the polling, make the "
    "difference. Where the check pays is skew: with one "
    "node frozen for 8 s while a job re-stages a current image, the job script started "
    "1.2 s after sbatch, while the build before the local check waited for the frozen node "
    "(tests/cluster/test_fault_skew_current.sh).\n")
NOOP_ANALYSIS_STAGING_PROCESS = (
    "Where it goes. Every node's job prolog takes the job's staging lock, forks the node's "
    "staging process and ends (spank/prolog.c, spank/stage_process.c, since 4887bdf). "
    "That process waits until the prolog's slurmstepd has exited, checks its copy as the "
    "job user (stat of SRC, DST's recorded metadata, DST's filesystem, the job's claim; "
    "spank/localcheck.c), writes the node's status, releases the lock and stays as the "
    "sentinel that starts its agent only if another node needs a copy (none does here: no "
    "agent starts). The batch script's "
    "task waits for the lock before its program starts. n1's own check took a median of "
    "{checks} (from n1's summary line), done while slurmd notices the prolog's end and "
    "starts the batch step. Before 4887bdf the prolog ran the check itself: at N=8 its "
    "21-41 ms made slurmd, which polls a prolog 10, 30, 70, 150 ms after its start when "
    "PrologEpilogTimeout is set (run_command_waitpid_timeout, Slurm 22.05), see the end at "
    "the 150 ms poll instead of the 70 ms one, +88 to +106 ms on this kind of host "
    "(doc/performance.md). The smallest N shows the same work when the nodes do not outnumber the "
    "host's cores.\n")


def ratio(x):
    """Two decimals, three where two would round a loss to 1.00."""
    return f"{x:.2f}" if round(x, 2) != 1.00 else f"{x:.3f}"


def load_calib(path):
    c = {}
    for line in open(path):
        if "=" in line:
            k, v = line.rstrip("\n").split("=", 1)
            c[k] = v
    return c


def load_run(prog):
    """Read a report's --csv, --calib and --out arguments: (the calibration as
    a dict, the CSV's rows as dicts, --out). Exits naming the CSV when it
    holds no row."""
    ap = argparse.ArgumentParser(prog=prog)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--calib", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows = list(csv.DictReader(open(a.csv)))
    if not rows:
        sys.exit(f"{prog}: no rows in {a.csv}")
    return load_calib(a.calib), rows, a.out


def run_heading(title, calib):
    """The first lines of a regime's report: the title with the stack and the
    start date, a blank line, and the start of the setting's sentence (the
    stack's Slurm, Open MPI and PMIx versions and the host's CPUs)."""
    return [f"# {title}: {calib.get('stack', '?')}, {calib.get('date_start', '?')}", "",
            f"Slurm {calib.get('slurm_version', '?')}, Open MPI "
            f"{calib.get('openmpi_version', '?')}, PMIx {calib.get('pmix_version', '?')}; "
            f"{calib.get('host_cpus', '?')} host CPUs"]


def write_text(lines, path):
    """Write the report's lines to path and to standard output."""
    text = "\n".join(lines) + "\n"
    with open(path, "w") as f:
        f.write(text)
    sys.stdout.write(text)


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def main():
    cal, rows, out_dir = load_run("report.py")
    # runs before --stack were on bookworm
    stack = cal.get("stack", "bookworm")
    on_2205 = stack == "bookworm"

    # (size MiB, method, N) -> list of (seconds, storage bytes, ok)
    runs = defaultdict(list)
    for r in rows:
        size, n, ok = int(r["size_bytes"]), int(r["nodes"]), r["ok"] == "1"
        sb = int(r["storage_bytes"])
        runs[(size, r["method"], n)].append((num(r["seconds"]), sb, ok, r))
        if r["method"] == "plugin":
            runs[(size, "plugin-agent", n)].append((num(r["prolog_seconds"]), sb, ok, r))

    rate = {
        "link": float(cal["link_raw_MBps"]),
        "storage": float(cal["storage_2readers_MBps"]),
        "write": float(cal["local_write_MBps"]),
    }
    lim_rate = min(rate.values())
    nom_rate = min(float(cal["link_nominal_MBps"]), float(cal["storage_nominal_MBps"]),
                   rate["write"])
    sizes = sorted({k[0] for k in runs})
    nodes = sorted({k[2] for k in runs if k[1] != "noop" and k[1] != "nooption"})

    def stats(size, m, n):
        v = runs.get((size, m, n), [])
        good = [s for s, _, ok, _ in v if ok and s is not None]
        sb = [b for _, b, ok, _ in v if ok]
        if not good:
            return None
        return {
            "med": statistics.median(good), "min": min(good), "max": max(good),
            "n_ok": len(good), "n": len(v),
            "sb": statistics.median(sb) if sb else 0,
            "sb_max": max(sb) if sb else 0,
            "host": host_mib(v),
            "busy": host_busy(v),
        }

    # MiB the VM handed back to its hypervisor during each run (older CSVs
    # lack the column): the median, and the runs below HANDBACK_MIB
    def host_mib(v):
        h = [num(r.get("host_reported_mib")) for _, _, ok, r in v if ok]
        h = [x for x in h if x is not None]
        return statistics.median(h) if h else None

    # % of the host's CPU time busy during each run (older CSVs lack it):
    # near 100, the shared cores rather than the emulated fabric limited it
    def host_busy(v):
        h = [num(r.get("host_cpu_busy_pct")) for _, _, ok, r in v if ok]
        h = [x for x in h if x is not None]
        return statistics.median(h) if h else None

    md = []
    md.append("# stagehand benchmark: latest results\n")
    md.append(f"Produced by `bench/run.sh` on {cal.get('date_start', '?')} in "
              f"{cal.get('duration_s', '?')} s. Host: {cal.get('host_cpus', '?')} CPU cores "
              f"shared by all emulated nodes; load average at start "
              f"{cal.get('load_start', '?')}, at end {cal.get('load_end', '?')} "
              f"(other work on the host inflates times). Plot: [latest.png](latest.png); "
              f"raw data: [latest.csv](latest.csv).\n")
    if "stack" in cal:
        md.append(f"Stack: **{stack}** ({STACKS.get(stack, '?')}): every daemon and job ran "
                  f"Slurm {cal.get('slurm_version') or '?'}, Open MPI "
                  f"{cal.get('openmpi_version') or '?'} and PMIx {cal.get('pmix_version') or '?'}"
                  + ("" if stack == "bookworm" else
                     " (`minicluster up --stack`: each node a view of the root, stagehand built in it)")
                  + ".\n")
    md.append("## Setup and calibration\n")
    md.append(f"Minicluster with `--shared sshfs`: a storage-host namespace serves the shared "
              f"filesystem over sshfs, each node mounts it separately (`cache=no`), so every "
              f"node that reads the image reads it from the storage host over its own link. "
              f"`minicluster shape --storage {cal['storage_rate']} --link {cal['link_rate']}`: "
              f"every node link {cal['link_rate']} each way, the storage host's egress "
              f"{cal['storage_rate']}. /nvme is a tmpfs per node with 2 MiB pages "
              f"(`huge=within_size`: it allocates in large units, as a disk file system "
              f"allocates extents). One staging of the largest size to every node runs "
              f"first and is not recorded (the host is a VM whose memory is backed on "
              f"first touch). The VM also hands free memory it leaves idle back to the "
              f"hypervisor (virtio-balloon free page reporting), and /nvme lives in that "
              f"memory: a staging whose /nvme pages had been handed back was 1-2 s slower "
              f"per GiB at N=8 with twice the CPU (measured with the standalone engine, "
              f"1 GiB: 24.4-25.5 s and 29-30 CPU s after 30 s idle, 23.0-23.6 s and "
              f"16-18 CPU s right after freeing). So right before every measured run of "
              f"every method the host writes and frees N x S bytes in /dev/shm (outside the "
              f"timed part), and each run's log line says how much memory was handed back "
              f"while it ran; this removes most, not all, of the effect (a run right after "
              f"sbcast and cp can still be 1-2 s slower, for the chain as for the plugin). "
              f"Rates in MB/s (10^6 B/s).\n")
    md.append("| what | nominal | measured (raw transfer, no MPI) |")
    md.append("|---|---|---|")
    md.append(f"| node link | {cal['link_nominal_MBps']} | {cal['link_raw_MBps']} (one TCP stream n1->n2, memory to memory; the rest is TCP/IP framing) |")
    md.append(f"| storage egress | {cal['storage_nominal_MBps']} | {cal['storage_1reader_MBps']} with 1 reader (its link limits it), {cal['storage_2readers_MBps']} total with 2 readers |")
    md.append(f"| local write | - | {cal['local_write_MBps']} (dd to /nvme, fsync) |")
    busy = (f", the host's CPUs {cal['chain_raw_busy_pct']} % busy meanwhile"
            if cal.get("chain_raw_busy_pct") else "")
    md.append(f"| CPU check | - | {cal['chain_raw_MBps']}: raw TCP chain over {cal['chain_raw_nodes']} nodes, each hop forwarding and writing{busy} |")
    if cal.get("rates_given") == "1":
        md.append("| rates | - | given on the command line (`--link`, `--storage`), so the "
                  "calibration did not step them down; the CPU check above still ran |")
    if cal.get("prolog_epilog_timeout") == "none":
        md.append("| slurm.conf | - | PrologEpilogTimeout unset (`MINICLUSTER_PROLOG_EPILOG_TIMEOUT=none`): "
                  "slurmd waits for each prolog without polling it |")
    elif cal.get("prolog_epilog_timeout"):
        poll = (": slurmd polls each prolog 10, 30, 70, 150, 310, 630 ms after its start, then "
                "every second" if on_2205 else "")
        md.append(f"| slurm.conf | - | PrologEpilogTimeout={cal['prolog_epilog_timeout']}{poll} |")
    if cal.get("rate_steps"):
        md.append(f"| rates stepped down | - | {cal['rate_steps']} (the raw chain under 95 % of the "
                  f"link in two samples: the cores, not the link, would have limited) |")
    if "host_exec_ms_start" in cal:
        md.append(f"| host speed (not a rate) | - | /bin/true {cal['host_exec_ms_start']} ms, "
                  f"first touch of a 4 KiB page {cal['host_fault_us_start']} us at the start; "
                  f"{cal.get('host_exec_ms_end', '?')} ms, {cal.get('host_fault_us_end', '?')} us "
                  f"at the end (page-fault bound, as MPI start-up is; compare runs by these) |")
    md.append("")
    md.append(f"**Physical limit** of one staging: S / min(storage, link, local write) = "
              f"S / {lim_rate:.1f} MB/s (measured rates); with the nominal shaped rates "
              f"S / {nom_rate:.1f} MB/s. \"% of limit\" below uses the measured rate; the "
              f"nominal one is {100 * nom_rate / lim_rate:.0f}% as strict.\n")
    md.append("Methods (each run starts with an empty /nvme on every node; the source is warm "
              "in the storage host's page cache; \"storage\" is the bytes the storage host's "
              "sftp servers read, as a multiple of S: rchar, which includes the SFTP "
              "requests, about 0.1 %):\n")
    for m, d in METHODS:
        md.append(f"- `{m}`: {d}{PLUGIN_POLL_2205 if m == 'plugin' and on_2205 else ''}")
    md.append("")

    for size in sizes:
        sbytes = size << 20
        tlim = sbytes / (lim_rate * 1e6)
        md.append(f"## S = {size} MiB (limit {tlim:.2f} s)\n")
        md.append("| method | N | median s | min-max s | MB/s | % of limit | storage x S | "
                  "median host MiB handed back | median host CPU busy | ok |")
        md.append("|---|---|---|---|---|---|---|---|---|---|")
        for m, _ in METHODS:
            for n in nodes:
                st = stats(size, m, n)
                if st is None:
                    v = runs.get((size, m, n), [])
                    if v:
                        md.append(f"| {m} | {n} | failed | | | | | | | 0/{len(v)} |")
                    continue
                host = "-" if st["host"] is None else f"{st['host']:.0f}"
                busy = "-" if st["busy"] is None else f"{st['busy']:.0f}%"
                md.append(
                    f"| {m} | {n} | {st['med']:.2f} | {st['min']:.2f}-{st['max']:.2f} | "
                    f"{sbytes / st['med'] / 1e6:.1f} | {100 * tlim / st['med']:.0f}% | "
                    f"{st['sb'] / sbytes:.2f} | {host} | {busy} | {st['n_ok']}/{st['n']} |")
        md.append("")

    # no-op
    noop = [(k, v) for k, v in runs.items() if k[1] in ("noop", "nooption")]
    targets = []
    if noop:
        size = min(k[0] for k, _ in noop)
        ns = sorted({k[2] for k, _ in noop})
        md.append(f"## No-op at N={'/'.join(str(n) for n in ns)}\n")
        md.append("Job start (allocation) -> job script start of a job whose nodes all hold a current copy "
                  "(`--stage-image`, nothing copied) against the same job without the option, "
                  "alternating. The target is at the largest N; the smallest N, where the nodes do "
                  "not outnumber the host's cores, shows what the same work costs without the "
                  "queueing for a CPU.\n")
        md.append("| N | job | median s | min-max s | storage bytes | ok |")
        md.append("|---|---|---|---|---|---|")
        added = {}
        for n in ns:
            a_ = stats(size, "noop", n)
            b_ = stats(size, "nooption", n)
            for nm, st in (("with --stage-image, all current", a_), ("without the option", b_)):
                if st:
                    md.append(f"| {n} | {nm} | {st['med']:.3f} | {st['min']:.3f}-{st['max']:.3f} | "
                              f"{st['sb']:.0f} | {st['n_ok']}/{st['n']} |")
            if a_ and b_:
                added[n] = a_["med"] - b_["med"]
        if added:
            md.append("\nAdded by the no-op (median difference): " +
                      ", ".join(f"**{1000 * d:.0f} ms** at N={n}" for n, d in added.items()) + ".\n")
            if cal.get("prolog_local_check") == "1":
                checks = []
                for n in ns:
                    v = [num(r.get("prolog_seconds")) for _, _, ok, r in runs.get((size, "noop", n), [])
                         if ok]
                    v = [x for x in v if x is not None]
                    if v:
                        checks.append(f"{1000 * statistics.median(v):.0f} ms at N={n}")
                text = (NOOP_ANALYSIS_STAGING_PROCESS if cal.get("staging_process") == "1"
                        else NOOP_ANALYSIS_LOCAL)
                md.append(text.format(checks=" and ".join(checks) or "n/a"))
            else:
                md.append(NOOP_ANALYSIS)
            n = max(added)
            targets.append((f"no-op adds <= 50 ms median at N={n}", added[n] <= 0.050,
                            f"{1000 * added[n]:.0f} ms"))

    # targets
    big = max(sizes)
    if not nodes:
        nodes = [0]
    sbytes = big << 20
    tlim = sbytes / (lim_rate * 1e6)
    for m in STAGEHAND:
        fr = []
        for n in nodes:
            st = stats(big, m, n)
            fr.append((n, None if st is None else tlim / st["med"]))
        if all(f is None for _, f in fr) and not any(runs.get((big, m, n)) for n in nodes):
            continue  # method not run
        ok = all(f is not None and f >= 0.9 for _, f in fr)
        targets.append((f"{m}: >= 90% of the limit at every N ({big} MiB)", ok,
                        ", ".join(f"N={n}: {'fail' if f is None else f'{100 * f:.0f}%'}" for n, f in fr)))
        lo, hi = stats(big, m, min(nodes)), stats(big, m, max(nodes))
        if lo and hi:
            r = hi["med"] / lo["med"]
            targets.append((f"{m}: time at N={max(nodes)} within 10% of N={min(nodes)} ({big} MiB)",
                            r <= 1.10, f"{100 * (r - 1):+.1f}%"))
    for m in ("plugin", "chain"):
        for other in ("sbcast", "cp", "bcast"):
            worse = []
            for size in sizes:
                for n in nodes:
                    a_, b_ = stats(size, m, n), stats(size, other, n)
                    if a_ and b_ and n >= 2:
                        worse.append((size, n, a_["med"] < b_["med"], b_["med"] / a_["med"]))
            if worse:
                targets.append((f"{m} faster than {other} at every N and size",
                                all(w[2] for w in worse),
                                ", ".join(f"{s}M/N={n}: {ratio(x)}x" for s, n, _, x in worse)))
    sb_ok, sb_txt, sb_runs = True, [], 0
    for m in ("plugin", "chain"):
        for size in sizes:
            for n in nodes:
                for s, b, ok, _ in runs.get((size, m, n), []):
                    if ok:
                        sb_runs += 1
                        r = b / (size << 20)
                        if round(r, 2) != 1.00:
                            sb_ok = False
                            sb_txt.append(f"{m} {size}M N={n}: {r:.3f}")
    if sb_runs:  # a run of the no-op alone has no staging to count
        targets.append(("storage bytes = 1.00 x S for stagehand (plugin, chain) in every run",
                        sb_ok, "all runs 1.00" if sb_ok else "; ".join(sb_txt)))
    # stagehand's runs at the largest size during which the VM handed (almost)
    # no memory back to its hypervisor, next to all runs
    quiet = []
    for m in STAGEHAND:
        for n in nodes:
            v = [(sec, num(r.get("host_reported_mib"))) for sec, _, ok, r in runs.get((big, m, n), [])
                 if ok and sec is not None]
            if not v or any(h is None for _, h in v):
                continue    # not run, or a CSV without the column
            q = [sec for sec, h in v if h < HANDBACK_MIB]
            quiet.append((m, n, q, statistics.median(sec for sec, _ in v), len(v)))
    if quiet:
        md.append(f"## stagehand in runs without host memory hand-back ({big} MiB)\n")
        md.append("The test VM hands free memory back to its hypervisor (free page reporting, see "
                  "Setup), and a run during which that happened is slower for every method, in CPU "
                  "time as in wall time ([doc/performance.md](../../doc/performance.md#what-limits-the-numbers): the same engine at N=8, "
                  "256 MiB, took 6.2-7.6 CPU s and 5.8-6.2 s of transfer in 13 of 16 runs without hand-back, "
                  "10-14.5 CPU s and 6.9-8.5 s in runs with 0.6-1.4 GiB handed back). This table "
                  f"repeats stagehand's rows with only the runs during which less than {HANDBACK_MIB} "
                  "MiB was handed back. It is not what the targets count: the targets use every "
                  "run. A run can also have started on memory handed back before it began, which "
                  "this view does not see, so it can only err on the slow side.\n")
        md.append(f"| method | N | runs below {HANDBACK_MIB} MiB | their median s | % of limit | "
                  "all runs: median s | % of limit |")
        md.append("|---|---|---|---|---|---|---|")
        for m, n, q, med_all, cnt in quiet:
            qm = statistics.median(q) if q else None
            md.append(f"| {m} | {n} | {len(q)}/{cnt} | "
                      + ("- | - | " if qm is None else f"{qm:.2f} | {100 * tlim / qm:.0f}% | ")
                      + f"{med_all:.2f} | {100 * tlim / med_all:.0f}% |")
        md.append("")
    # where the engine's time goes (its own phase clock on the reader)
    ph_names = ("start-up", "metadata", "pre-check", "transfer", "verify", "publish")
    ph_rows = []
    for size in sizes:
        for m in ("chain", "bcast"):
            for n in nodes:
                ph = [r.get("engine_phases") or "" for s, b, ok, r in runs.get((size, m, n), []) if ok]
                ph = [list(map(float, p.split("/"))) for p in ph if p.count("/") == 5]
                if ph:
                    med = [statistics.median(col) for col in zip(*ph)]
                    ph_rows.append((size, m, n, med))
    if ph_rows:
        md.append("## Where the engine's time goes\n")
        md.append("Median of the engine's own phase clock (seconds, on the reading rank; `transfer` "
                  "ends when the reader's last segment left, `verify` includes the pipeline "
                  "draining to the last node). `pre-check` includes preallocating DST (fallocate): "
                  "on the test cluster's tmpfs of 2 MiB pages, as on XFS or ext4, it takes "
                  "milliseconds; a tmpfs of 4 KiB pages spends 0.2-0.3 s of CPU per GiB on "
                  "it (1.09 s at N=8 in the run of 2026-11-30 18:59 UTC, 8 nodes on 2 cores).\n")
        md.append("| size MiB | method | N | " + " | ".join(ph_names) + " | transfer MB/s |")
        md.append("|---|---|---|" + "---|" * len(ph_names) + "---|")
        for size, m, n, med in ph_rows:
            rate = (size << 20) / med[3] / 1e6 if med[3] > 0 else 0
            md.append(f"| {size} | {m} | {n} | " + " | ".join(f"{x:.2f}" for x in med)
                      + f" | {rate:.1f} |")
        md.append("")
    fails = [r for r in rows if r["ok"] != "1"]
    if fails:
        md.append("## Failed runs\n")
        md.append(f"{len(fails)} of {len(rows)} runs failed and are left out of the medians: "
                  + ", ".join(f"{r['method']} {r['size_bytes']} MiB N={r['nodes']} rep {r['rep']}"
                              for r in fails)
                  + ". bench/run.sh's log says why each failed (its \"failed:\" lines carry "
                  "the method's last messages).\n")
    md.append("## Targets (issue 5)\n")
    md.append("| target | met | measured |")
    md.append("|---|---|---|")
    for t, ok, txt in targets:
        md.append(f"| {t} | {'yes' if ok else '**no**'} | {txt} |")
    md.append("")
    open(os.path.join(out_dir, "latest.md"), "w").write("\n".join(md) + "\n")

    # plot data: one block per method and size that has runs. gnuplot's
    # `index` counts only blocks with data (an empty one does not count), so
    # a method not run must get no block: with blocks for every method, a run
    # of fewer methods and two sizes plotted nothing for the second size.
    dat = os.path.join(out_dir, ".plot.dat")
    block = {}
    with open(dat, "w") as f:
        for size in sizes:
            for m, _ in METHODS:
                pts = [(n, stats(size, m, n)) for n in nodes]
                pts = [(n, st) for n, st in pts if st]
                if not pts:
                    continue
                block[(size, m)] = len(block)
                f.write(f"# {size} {m}\n")
                for n, st in pts:
                    f.write(f"{n} {st['med']:.4f} {st['min']:.4f} {st['max']:.4f}\n")
                f.write("\n\n")
    gp = [
        "set terminal pngcairo size 1400,560 font 'DejaVu Sans,10'",
        f"set output '{os.path.join(out_dir, 'latest.png')}'",
        f"set multiplot layout 1,{len(sizes)} title 'stagehand vs alternatives: "
        f"time to stage S to N nodes (link {cal['link_rate']}, storage {cal['storage_rate']}, "
        f"median and min-max of the runs)'",
        "set xlabel 'nodes N'", "set ylabel 'seconds'", "set grid",
        f"set xtics ({', '.join(str(n) for n in nodes)})",
        f"set xrange [{min(nodes) - 0.5}:{max(nodes) + 0.5}]",
        "set key top left", "set logscale y",
    ]
    for size in sizes:
        tl = (size << 20) / (lim_rate * 1e6)
        gp.append(f"set title 'S = {size} MiB'")
        gp.append(f"set yrange [{tl * 0.7:.3f}:*]")
        plots = []
        for m, _ in METHODS:
            if (size, m) in block:
                plots.append(f"'{dat}' index {block[(size, m)]} using 1:2:3:4 with yerrorlines "
                             f"lw 2 pt 7 title '{m}'")
        plots.append(f"{tl:.4f} with lines dt 2 lw 2 lc rgb 'black' title 'physical limit'")
        gp.append("plot " + ", \\\n     ".join(plots))
    gp.append("unset multiplot")
    subprocess.run(["gnuplot"], input="\n".join(gp), text=True, check=True)
    os.unlink(dat)
    print("\n".join(md))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Report of bench/run.sh --registry (issue 36 item 6): job start for a
registry image with stagehand against every node importing on its own, and
the registry's bytes served per job.

    bench/registry_report.py --csv registry-STACK-DATE.csv --calib latest.calib
                             --out registry-STACK-DATE.md

Times are over the repetitions that succeeded; bytes served are the median
over them, as a multiple of one pull of the image (manifest, config and
layers as the registry serves them)."""
import statistics

from fabric_report import fmt, med
from report import load_run, num, run_heading, write_text


def val(v):
    """num(v), None for a missing or nan value (no agent time without stagehand)."""
    x = num(v)
    return None if x is None or x != x else x


def main():
    calib, rows, out_path = load_run("registry_report.py")
    methods = list(dict.fromkeys(r["method"] for r in rows))
    nodes = sorted({int(r["nodes"]) for r in rows})
    image = int(rows[0]["image_bytes"])
    out = run_heading("Registry-image benchmark", calib)
    p = out.append
    out[-1] += (" shared by every node and the registry; "
        f"links unshaped (raw TCP n1->n2 {calib.get('link_raw_MBps', '?')} MB/s, a chain "
        f"over {calib.get('chain_raw_nodes', '?')} nodes {calib.get('chain_raw_MBps', '?')} "
        f"MB/s); load average (uptime) at start {calib.get('load_start', '?')}, at end "
        f"{calib.get('load_end', '?')}.")
    p("")
    p(f"Image: `{calib.get('image_ref', '?')}` on the cluster's registry (Debian's "
      f"docker-registry on the storage host, plain HTTP; `minicluster registry push`), "
      f"{calib.get('image_mib', '?')} MiB of random data and a marker file in "
      f"{calib.get('image_layers', '?')} layers; one pull (manifest, config, layers as "
      f"served) = {image} bytes ({image / (1 << 20):.1f} MiB). Random data does not "
      f"compress, so the blobs, the unpacked root and the Squashfs image are each about "
      f"that size (a real image's layers are compressed and its Squashfs smaller).")
    p("")
    p("Methods: **stagehand** is `sbatch --stage-image=docker://REF:DST`: node 0 resolves "
      "the tag and runs the shipped importer once (`stagehand-import`: skopeo, umoci, "
      "mksquashfs), the broadcast delivers the image to the other nodes, then the job "
      "script runs `srun true`. **every-node** is a job whose first step (`srun` on every "
      "node) runs the same resolver and importer on each node into its own /nvme, as a "
      "job does when each node pulls the image itself. Time = the job's start "
      "(slurmctld allocates, the prolog starts) to the end of its first step, when "
      "every node holds the image; DST and every import were removed between runs, so "
      "every run imported. Bytes served = the body bytes of every GET in the registry's "
      "access log during the job; clients = the nodes that fetched a blob. The methods "
      "alternated per repetition after a warm-up staging.")
    p("")
    p("| method | N | ok | median s | min s | max s | script start s | agent s | bytes served | bytes served / image | clients | load1 | host CPU busy % |")
    p("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    served = {}
    for n in nodes:
        for m in methods:
            rs = [r for r in rows if int(r["nodes"]) == n and r["method"] == m]
            ok = [r for r in rs if r["ok"] == "1"]
            secs = [v for v in (num(r["seconds"]) for r in ok) if v is not None]
            b = statistics.median(int(r["registry_bytes"]) for r in ok) if ok else None
            clients = sorted({r["registry_clients"] for r in ok})
            served[m, n] = [int(r["registry_bytes"]) for r in ok]
            p(f"| {m} | {n} | {len(ok)}/{len(rs)} | {fmt(med(secs))} | "
              f"{fmt(min(secs) if secs else None)} | {fmt(max(secs) if secs else None)} | "
              f"{fmt(med(num(r['first_seconds']) for r in ok))} | "
              f"{fmt(med(val(r['agent_seconds']) for r in ok))} | "
              f"{'-' if b is None else f'{b:.0f}'} | "
              f"{'-' if b is None else f'{b / image:.3f}'} | {'/'.join(clients) or '-'} | "
              f"{fmt(med(num(r['load1']) for r in ok), 1)} | "
              f"{fmt(med(num(r['host_cpu_busy_pct']) for r in ok), 0)} |")
    p("")
    p("script start = the job's start to its script's start (stagehand: the staging is "
      "done); agent = stagehand's own staging time on node 0 (slurmd log: resolve, import, "
      "broadcast); load1 = the host's 1-minute load average after the run (the run's own "
      "processes and other work on the host), host CPU busy = % of the 2 cores busy during "
      "it.")
    p("")
    if "stagehand" in methods:
        one = all(served.get(("stagehand", n)) and
                  all(round(x / image, 2) == 1.00 for x in served["stagehand", n])
                  for n in nodes)
        rng = [x - image for n in nodes for x in served.get(("stagehand", n), [])]
        extra = f"{min(rng)}" if min(rng) == max(rng) else f"{min(rng)}-{max(rng)}"
        p(f"stagehand: registry bytes served {'=' if one else '!='} 1 × image at every N "
          f"(every run served one pull plus {extra} bytes: the manifest "
          f"fetched again, the resolver's request)." if rng else "stagehand: no successful run.")
        p("")
    p("On this host the nodes share 2 cores: the every-node imports run at once on the "
      "same cores (and against the same registry process), so its time grows with N "
      "mostly from CPU here. On a real cluster each node imports with its own CPUs, and "
      "the every-node time is bounded by the registry's egress and throttling for N pulls "
      "(N × image bytes, the column above) instead; stagehand's is one import plus the "
      "broadcast at every N.")
    write_text(out, out_path)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Benchmark of the broadcast engine on the local test cluster (issue 3).
#
#   bench/engine.sh [SIZE_MIB]
#
# For N = 2 and 3 nodes and one SIZE_MIB source (default 1024) on the shared
# filesystem, compares in one run: stagehand-bcast --algorithm=chain,
# --algorithm=bcast, a plain MPI_Bcast loop of the same bytes in memory
# (mpi_bcast_check, no file I/O: a lower bound for MPI), and `srun cp` from
# the shared filesystem. Prints wall seconds, effective rate and the engine's
# CPU time per GiB (user + system, summed over ranks). Not a timed test:
# numbers depend on the machine. bench/run.sh is the full comparison (issue 5).
#
# Like bench/run.sh it uses its own minicluster instance, never the default
# test cluster: MINICLUSTER_NAME (default bench), MINICLUSTER_NET (default
# 10.78.0), MINICLUSTER_SHARED (default /shared-bench), STAGEHAND_PREFIX
# (default /opt/stagehand-bench, e.g. from bench/run.sh or contrib/setup.sh
# with that prefix). When that instance is not up, it brings up 3 nodes
# (--shared bind) and takes them down again at the end.
#
# On one host every "node" shares the CPUs and the shared directory is the
# page cache, so the fabric is not the bottleneck. BENCH_LINK=RATE (a tc rate,
# e.g. 500mbit) shapes every node link of the instance for the run and clears
# it at exit.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
export MINICLUSTER_NAME=${MINICLUSTER_NAME:-bench}
export MINICLUSTER_NET=${MINICLUSTER_NET:-10.78.0}
export MINICLUSTER_SHARED=${MINICLUSTER_SHARED:-/shared-bench}
export STAGEHAND_PREFIX=${STAGEHAND_PREFIX:-/opt/stagehand-bench}
mc="$top/contrib/minicluster/minicluster"
brought_up=0
if ! "$mc" status >/dev/null 2>&1; then
    "$mc" up --nodes 3 --shared bind >/dev/null
    brought_up=1
fi
eval "$("$mc" env)"
mib=${1:-1024}
engine="$STAGEHAND_PREFIX/bin/stagehand-bcast"
bcast_loop="$STAGEHAND_PREFIX/libexec/stagehand/tests/mpi_bcast_check"
src="$MINICLUSTER_SHARED/bench_engine.$$"
dst="/nvme/bench_engine.$$"
k=$(echo "$MINICLUSTER_NODES" | wc -w)

as_user() {
    (cd /tmp && runuser -u "$MINICLUSTER_USER" -- env SLURM_CONF="$SLURM_CONF" \
        PATH="$STAGEHAND_PREFIX/bin:/usr/local/bin:/usr/bin:/bin" "$@")
}
clean_dst() { # each variant starts from an empty DST directory
    local node
    for node in $MINICLUSTER_NODES; do "$MINICLUSTER" exec "$node" -- rm -rf "$dst"; done
}
cleanup() {
    rm -f "$src"
    clean_dst
    if [ -n "${BENCH_LINK:-}" ]; then "$MINICLUSTER" shape --clear; fi
    if [ "$brought_up" = 1 ]; then "$mc" down >/dev/null 2>&1; fi
}
trap cleanup EXIT

[ -x "$engine" ] || { echo "bench: $engine not installed" >&2; exit 2; }
if [ -n "${BENCH_LINK:-}" ]; then "$MINICLUSTER" shape --link "$BENCH_LINK"; fi
as_user sh -c "head -c $((mib << 20)) /dev/urandom > $src"
# read it once so every variant starts from a warm page cache on /shared
cat "$src" >/dev/null

now() { date +%s.%N; }
rate() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.0f MiB/s", b / 1048576 / s }'; }

printf '%-8s %-3s %10s %12s %14s\n' variant N seconds rate "cpu s/GiB"
for n in 2 3; do
    [ "$n" -le "$k" ] || continue
    for alg in chain bcast; do
        clean_dst
        t0=$(now)
        out=$(as_user srun --mpi=pmix -N"$n" --ntasks-per-node=1 "$engine" \
            --source "$src" --dest "$dst/$alg.img" --check=never --json)
        t1=$(now)
        read -r secs cpu < <(printf '%s' "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
cpu = sum(r["seconds"]["cpu"] for r in d["node_results"])
print(d["seconds"]["total"], cpu)')
        wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
        printf '%-8s %-3s %10.3f %12s %14.2f   (srun wall %.3f s)\n' "$alg" "$n" \
            "$secs" "$(rate $((mib << 20)) "$secs")" \
            "$(awk -v c="$cpu" -v m="$mib" 'BEGIN { print c / (m / 1024) }')" "$wall"
    done
    if [ -x "$bcast_loop" ]; then
        out=$(as_user srun --mpi=pmix -N"$n" --ntasks-per-node=1 "$bcast_loop" "$mib" | grep '^bcast ok')
        secs=$(printf '%s' "$out" | awk '{ print $(NF-1) }')
        printf '%-8s %-3s %10.3f %12s %14s   (in memory, no file I/O)\n' mpibcast "$n" \
            "$secs" "$(rate $((mib << 20)) "$secs")" -
    fi
    clean_dst
    t0=$(now)
    as_user srun -N"$n" --ntasks-per-node=1 sh -c "mkdir -p $dst && cp $src $dst/cp.img"
    t1=$(now)
    secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
    printf '%-8s %-3s %10.3f %12s %14s   (srun wall, every node reads /shared)\n' \
        "srun-cp" "$n" "$secs" "$(rate $((mib << 20)) "$secs")" -
done
echo "(load average $(cut -d' ' -f1-3 /proc/loadavg): a shared 2-core host gives noisy numbers)"

#!/usr/bin/env bash
# CPU cost of a no-op staging on the nodes (every node current), against the
# same job without --stage-image, in one alternating run.
#
#   bench/noop_cpu.sh [--nodes "2 8"] [--reps 5] [--cache]
#
# --cache stages SRC without DST, into the node image cache (the plugstack
# line's cache=, issue 34): the warm cache's no-op (the entry linked and
# referenced) instead of an explicit current DST's.
#
# Wall time of the no-op at N=8 on this host mixes two things: each node's
# own work and the fact that all emulated nodes share the host's CPUs. This
# counts the first alone: perf stat's task-clock over every slurmd of the
# instance and all it forks (job prologs' slurmstepd, the staging process,
# its job-user check, the sentinel, the batch step, the epilog), from just
# before sbatch to after the job's epilogs, summed over the nodes; CPU time
# does not grow with the host's load the way wall time does. Prints the
# per-job totals and the difference per node.
#
# Like bench/engine.sh it uses its own minicluster instance: MINICLUSTER_NAME
# (default bench), MINICLUSTER_NET (10.78.0), MINICLUSTER_SHARED
# (/shared-bench), STAGEHAND_PREFIX (/opt/stagehand-bench, installed by
# contrib/setup.sh --install with that prefix). When the instance is not up it
# brings up 8 nodes and takes them down at the end. Needs perf (linux-perf).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
export MINICLUSTER_NAME=${MINICLUSTER_NAME:-bench}
export MINICLUSTER_NET=${MINICLUSTER_NET:-10.78.0}
export MINICLUSTER_SHARED=${MINICLUSTER_SHARED:-/shared-bench}
export STAGEHAND_PREFIX=${STAGEHAND_PREFIX:-/opt/stagehand-bench}
mc="$top/contrib/minicluster/minicluster"
nodes="2 8" reps=5 cache=0
while [ $# -gt 0 ]; do
    case "$1" in
        --nodes) nodes=${2:?--nodes needs a list}; shift 2 ;;
        --reps) reps=${2:?--reps needs a count}; shift 2 ;;
        --cache) cache=1; shift ;;
        *) echo "noop_cpu.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || { echo "noop_cpu.sh: --reps '$reps' is not a count" >&2; exit 2; }
command -v perf >/dev/null || { echo "noop_cpu.sh: perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
maxn=0
for n in $nodes; do
    [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "noop_cpu.sh: --nodes: '$n' is not a node count" >&2; exit 2; }
    [ "$n" -gt "$maxn" ] && maxn=$n
done
brought_up=0
if ! "$mc" status >/dev/null 2>&1; then
    "$mc" up --nodes "$maxn" >/dev/null
    brought_up=1
fi
eval "$("$mc" env)"
work=$(mktemp -d /tmp/noop-cpu.XXXXXX)
cleanup() {
    rm -rf "$work" "$MINICLUSTER_SHARED/noop-cpu"
    [ "$brought_up" = 1 ] && "$mc" down >/dev/null 2>&1
    return 0
}
trap cleanup EXIT
have=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$maxn" -le "$have" ] || { echo "noop_cpu.sh: the instance has $have nodes, --nodes asks for $maxn" >&2; exit 2; }

mkdir -p "$MINICLUSTER_SHARED/noop-cpu"
head -c $((16 << 20)) /dev/urandom >"$MINICLUSTER_SHARED/noop-cpu/img.sqsh"
printf '#!/bin/sh\ntrue\n' >"$MINICLUSTER_SHARED/noop-cpu/job.sh"
chmod 755 "$MINICLUSTER_SHARED/noop-cpu" "$MINICLUSTER_SHARED/noop-cpu/job.sh"
chmod 644 "$MINICLUSTER_SHARED/noop-cpu/img.sqsh"
pids=$(cat "$MINICLUSTER_STATE"/pids/slurmd.n*.daemon.pid | paste -sd,)
opt="--stage-image=$MINICLUSTER_SHARED/noop-cpu/img.sqsh:/nvme/noop-cpu/img.sqsh"
if [ "$cache" = 1 ]; then
    grep -q '^required .*stagehand\.so.* cache=' "$(dirname "$SLURM_CONF")/plugstack.conf" ||
        { echo "noop_cpu.sh: --cache: the instance's plugstack line has no cache=" >&2; exit 2; }
    opt="--stage-image=$MINICLUSTER_SHARED/noop-cpu/img.sqsh"
fi

job() { # nodes option... -> CPU ms of every slurmd tree for one job
    local n=$1 pp
    shift
    perf stat -x, -e task-clock -p "$pids" -o "$work/perf" &
    pp=$!
    sleep 0.5
    su -s /bin/bash "$MINICLUSTER_USER" -c "SLURM_CONF=$SLURM_CONF sbatch -W -N$n -o /dev/null $* $MINICLUSTER_SHARED/noop-cpu/job.sh" >/dev/null
    sleep 1.5 # the epilogs end after the job
    kill -INT "$pp"
    wait "$pp" 2>/dev/null || true
    awk -F, '/task-clock/ { printf "%.1f\n", $1 }' "$work/perf"
}

echo "| N | rep | no-op: CPU ms, all nodes | without the option | difference per node, ms | load |"
echo "|---|---|---|---|---|---|"
for n in $nodes; do
    job "$n" "$opt" >/dev/null # makes every node current
    job "$n" >/dev/null        # warm-up of the plain job
    for ((r = 1; r <= reps; r++)); do
        a=$(job "$n" "$opt")
        b=$(job "$n")
        awk -v n="$n" -v r="$r" -v a="$a" -v b="$b" -v l="$(cut -d' ' -f1 /proc/loadavg)" \
            'BEGIN { printf "| %s | %s | %s | %s | %.1f | %s |\n", n, r, a, b, (a - b) / n, l }'
    done
done

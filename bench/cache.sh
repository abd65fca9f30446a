#!/usr/bin/env bash
# Benchmark of the node image cache (cache=, issue 34 item 3 and its
# benchmark). Three regimes, each alternating its variants on one cluster:
#
#   burst  B jobs of one node (default 100), all on n1 and submitted as one
#          job array so that they start together, whose image is cached and
#          current (--stage-image=SRC, the cache's entry linked), against the
#          same B jobs without --stage-image; alternating, --burst-reps
#          rounds. Per job: job start (slurmctld's allocation) -> its script's
#          start; median and p95 of each variant and the added time.
#   noop   a job of N nodes (default 8) whose nodes are all current, three
#          variants alternating, --noop-reps each: the cache warm
#          (--stage-image=SRC), an explicit DST current (--stage-image=SRC:DST,
#          bench/run.sh's no-op) and no option. Job start -> script start.
#   cold   a job of N nodes that copies --size MiB (default 256), into the
#          cache (SRC, the cache emptied before) against an explicit DST
#          (removed before), alternating, --cold-reps each. Job start ->
#          script start.
#
#   bench/cache.sh [--stack bookworm|trixie] [--regimes "burst noop cold"]
#                  [--burst 100] [--burst-reps 2] [--nodes 8] [--noop-reps 9]
#                  [--size 256] [--cold-reps 3] [--no-build] [--keep] [--out DIR]
#
# It brings up its own minicluster instance (MINICLUSTER_NAME, default
# cbench; MINICLUSTER_NET, default 10.74.0; MINICLUSTER_SHARED, default
# /shared-cbench; STAGEHAND_PREFIX, default /opt/stagehand-cbench) with
# --nodes N, --cpus B + 8 (B one-CPU jobs on n1 at once), the shared
# directory bound in and links unshaped, and brings it down at the end
# (unless --keep). It installs the checkout with contrib/setup.sh (unless
# --no-build). Results: cache-<stack>-<date>.csv and .md in --out (default
# bench/results). Needs root, like minicluster.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
mc="$top/contrib/minicluster/minicluster"
stack=bookworm regimes="burst noop cold" burst=100 burst_reps=2 nodes=8 noop_reps=9
size=256 cold_reps=3 build=1 keep=0 out="$top/bench/results"
while [ $# -gt 0 ]; do
    case "$1" in
        --stack) stack=${2:?}; shift 2 ;;
        --regimes) regimes=${2:?}; shift 2 ;;
        --burst) burst=${2:?}; shift 2 ;;
        --burst-reps) burst_reps=${2:?}; shift 2 ;;
        --nodes) nodes=${2:?}; shift 2 ;;
        --noop-reps) noop_reps=${2:?}; shift 2 ;;
        --size) size=${2:?}; shift 2 ;;
        --cold-reps) cold_reps=${2:?}; shift 2 ;;
        --no-build) build=0; shift ;;
        --keep) keep=1; shift ;;
        --out) out=${2:?}; shift 2 ;;
        -h | --help) sed -n '2,/^set -e/{/^set -e/d;p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench/cache.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for v in $burst $burst_reps $nodes $noop_reps $size $cold_reps; do
    [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "bench/cache.sh: '$v' is not a positive integer" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "bench/cache.sh: must run as root (minicluster)" >&2; exit 2; }
export MINICLUSTER_NAME=${MINICLUSTER_NAME:-cbench}
export MINICLUSTER_NET=${MINICLUSTER_NET:-10.74.0}
export MINICLUSTER_SHARED=${MINICLUSTER_SHARED:-/shared-cbench}
export STAGEHAND_PREFIX=${STAGEHAND_PREFIX:-/opt/stagehand-cbench}
say() { printf '== %s\n' "$*" >&2; }
now() { date +%s.%N; }
load1() { cut -d' ' -f1 /proc/loadavg; }
t_start=$(date +%s)
date_tag=$(date -u +%Y-%m-%dT%H%MZ)

if [ "$build" = 1 ]; then
    "$top/contrib/setup.sh" --install --stack "$stack" >/dev/null
    say "installed the checkout ($stack) into $STAGEHAND_PREFIX"
fi
cleanup() {
    local rc=$?
    set +e
    rm -f "$MINICLUSTER_SHARED"/cbench-*.img
    if [ "$keep" = 0 ]; then "$mc" down >/dev/null 2>&1; fi
    exit $rc
}
trap cleanup EXIT
cpus=$((burst + 8))
say "minicluster $MINICLUSTER_NAME ($stack): $nodes nodes, $cpus CPUs each, shared=bind"
"$mc" up --nodes "$nodes" --cpus "$cpus" --shared bind --nvme-size $((size * 3 + 128))m \
    --stack "$stack" >/dev/null
eval "$("$mc" env)"
STATE=$MINICLUSTER_STATE
cache=/nvme/stagehand-cache
plugstack=$STATE/etc/plugstack.conf
grep -q ' cache=' "$plugstack" || sed -i "s|^\(required .*stagehand\.so.*\)\$|\1 cache=$cache|" "$plugstack"
for ((i = 1; i <= nodes; i++)); do "$mc" restart-slurmd "n$i" >/dev/null; done
sleep 2
# shellcheck disable=SC2016  # dpkg-query's format, not a shell expansion
v_slurm=$("$mc" exec n1 -- dpkg-query -W -f '${Version}' slurmd 2>/dev/null | sed 's/^[0-9]*://; s/-[^-]*$//')

as_user() {
    (cd /tmp && runuser -u "$MINICLUSTER_USER" -- env SLURM_CONF="$SLURM_CONF" \
        PATH="$STAGEHAND_PREFIX/bin:/usr/bin:/bin" "$@")
}
# When slurmctld started jobs: the main scheduler's "sched: Allocate" or the
# backfill scheduler's "_start_job: Started" lines since offset $ctl_off
# (array tasks by their own job id).
ctl_off=0
start_times() { # -> "jobid epoch" lines for every allocation since $ctl_off
    tail -c +"$((ctl_off + 1))" "$STATE/log/slurmctld.log" |
        sed -n 's/^\[\([0-9-]*\)T\([0-9:.]*\)\] [a-z/_: ]*\(sched: Allocate\|_start_job: Started\) JobId=\([0-9_]*\)(\{0,1\}\([0-9]*\))\{0,1\} .*/\1 \2 \4 \5/p' |
        while read -r d t id real; do
            [ -n "$real" ] && id=$real
            echo "$id $(date -d "$d $t" +%s.%N)"
        done
}
# Wait until none of this user's jobs is left in the queue (bounded: 600 s).
wait_idle() {
    for _ in $(seq 1 3000); do
        [ -z "$(squeue -h -u "$MINICLUSTER_USER" -o %i 2>/dev/null)" ] && return 0
        sleep 0.2
    done
    say "jobs still queued after 600 s: $(squeue -h -u "$MINICLUSTER_USER" | head -3)"
    return 1
}
csv="$out/cache-$stack-$date_tag.csv"
mkdir -p "$out"
echo "regime,variant,nodes,rep,job,seconds,ok,load1" >"$csv"
row() { echo "$*" | tr ' ' ',' >>"$csv"; }
mk_source() { # MiB -> path
    local f="$MINICLUSTER_SHARED/cbench-$1.img"
    runuser -u "$MINICLUSTER_USER" -- sh -c "head -c $(($1 << 20)) /dev/urandom >'$f' && chmod 0644 '$f'"
    cat "$f" >/dev/null
    echo "$f"
}
# Every job's script writes "<job id> <epoch>" at its start into
# $MINICLUSTER_SHARED/cbench-out/<job id>.
outdir=$MINICLUSTER_SHARED/cbench-out
mkdir -p "$outdir"
chown "$MINICLUSTER_USER" "$outdir"
# shellcheck disable=SC2016  # the job's own expansions
script='echo "$SLURM_JOB_ID $(date +%s.%N)" >'"$outdir"'/$SLURM_JOB_ID'
# Rows for the jobs whose outputs are in $outdir: job start -> script start.
collect() { # regime variant nodes rep
    local st id t0 t1 ok
    st=$(start_times)
    for f in "$outdir"/*; do
        [ -e "$f" ] || continue
        read -r id t1 <"$f"
        # the first start: a job that Slurm requeued (a batch launch that
        # timed out) started again later, and its user waited from the first
        t0=$(awk -v j="$id" '$1 == j { print $2; exit }' <<<"$st")
        ok=1
        [ -n "$t0" ] || { ok=0; t0=$t1; }
        row "$1" "$2" "$3" "$4" "$id" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", b - a }')" "$ok" "$(load1)"
    done
    rm -f "$outdir"/*
}
# One job of @1 nodes with @2 (sbatch options, words), waited for; its row.
one_job() { # regime variant nodes rep options...
    local r=$1 v=$2 n=$3 rep=$4 id
    shift 4
    ctl_off=$(stat -c %s "$STATE/log/slurmctld.log")
    id=$(as_user sbatch --parsable -N"$n" -w "n[1-$n]" -o /dev/null "$@" --wrap "$script") || return 0
    wait_idle
    [ -e "$outdir/$id" ] || say "$r/$v N=$n rep $rep: job $id did not run its script"
    collect "$r" "$v" "$n" "$rep"
}
empty_cache() { for ((i = 1; i <= nodes; i++)); do "$mc" exec "n$i" -- rm -rf "$cache" /nvme/cbench; done; }

# ---------------------------------------------------------------- burst ---
if [[ " $regimes " == *" burst "* ]]; then
    src=$(mk_source 16)
    one_job warm-up cache 1 0 --stage-image="$src" >/dev/null   # the entry, on n1
    for ((rep = 1; rep <= burst_reps; rep++)); do
        for v in cache nooption; do
            opt=()
            [ "$v" = cache ] && opt=(--stage-image="$src")
            say "burst rep $rep: $burst jobs on n1, $v (load $(load1))"
            ctl_off=$(stat -c %s "$STATE/log/slurmctld.log")
            # the CPU time of n1's slurmd and all it forks during the round
            # (perf stat's task-clock; CPU time does not grow with the load
            # the way wall time does): the option's cost a job
            pp=""
            if command -v perf >/dev/null; then
                perf stat -x, -e task-clock -p "$(cat "$STATE/pids/slurmd.n1.daemon.pid")" \
                    -o "$out/.burst-cpu.$$" &
                pp=$!
                sleep 0.5
            fi
            t0=$(now)
            as_user sbatch --parsable -N1 -w n1 -o /dev/null --array=1-"$burst" "${opt[@]}" \
                --wrap "$script" >/dev/null
            wait_idle
            if [ -n "$pp" ]; then
                kill -INT "$pp"
                wait "$pp" 2>/dev/null || true
                row burst-cpu "$v" 1 "$rep" all \
                    "$(awk -F, '/task-clock/ { printf "%.3f", $1 / 1000 }' "$out/.burst-cpu.$$")" 1 "$(load1)"
                rm -f "$out/.burst-cpu.$$"
            fi
            ran=$(find "$outdir" -type f | wc -l)
            say "burst rep $rep $v: $ran of $burst scripts ran, $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s"
            for ((m = ran; m < burst; m++)); do row burst "$v" 1 "$rep" missing nan 0 "$(load1)"; done
            collect burst "$v" 1 "$rep"
        done
    done
    links=$("$mc" exec n1 -- sh -c "stat -c %h $cache/entries/* | head -1")
    say "burst: the entry has $links link(s) after the jobs' epilogs"
    rm -f "$src"
fi

# ----------------------------------------------------------------- noop ---
if [[ " $regimes " == *" noop "* ]]; then
    src=$(mk_source 16)
    for ((i = 1; i <= nodes; i++)); do
        "$mc" exec "n$i" -- sh -c "mkdir -p /nvme/cbench && chown $MINICLUSTER_USER /nvme/cbench"
    done
    one_job warm-up cache "$nodes" 0 --stage-image="$src"
    one_job warm-up dst "$nodes" 0 --stage-image="$src:/nvme/cbench/img"
    rm -f "$outdir"/*
    for ((rep = 1; rep <= noop_reps; rep++)); do
        say "no-op rep $rep at N=$nodes (load $(load1))"
        one_job noop cache "$nodes" "$rep" --stage-image="$src"
        one_job noop dst "$nodes" "$rep" --stage-image="$src:/nvme/cbench/img"
        one_job noop nooption "$nodes" "$rep"
    done
    rm -f "$src"
    empty_cache
fi

# ----------------------------------------------------------------- cold ---
if [[ " $regimes " == *" cold "* ]]; then
    src=$(mk_source "$size")
    for ((rep = 1; rep <= cold_reps; rep++)); do
        for v in cache dst; do
            empty_cache
            for ((i = 1; i <= nodes; i++)); do
                "$mc" exec "n$i" -- sh -c "mkdir -p /nvme/cbench && chown $MINICLUSTER_USER /nvme/cbench"
            done
            say "cold rep $rep: $size MiB to $nodes nodes, $v (load $(load1))"
            if [ "$v" = cache ]; then
                one_job cold cache "$nodes" "$rep" --stage-image="$src"
            else
                one_job cold dst "$nodes" "$rep" --stage-image="$src:/nvme/cbench/img"
            fi
        done
    done
    rm -f "$src"
    empty_cache
fi

# --------------------------------------------------------------- report ---
python3 "$top/bench/cache_report.py" --csv "$csv" --out "${csv%.csv}.md" --stack "$stack" \
    --slurm "${v_slurm:-?}" --burst "$burst" --nodes "$nodes" --size "$size" \
    --seconds "$(($(date +%s) - t_start))" --load "$(cut -d' ' -f1-3 /proc/loadavg)"
say "results: ${csv%.csv}.md, $csv ($(($(date +%s) - t_start)) s)"

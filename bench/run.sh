#!/usr/bin/env bash
# Benchmark of stagehand against the alternatives on an emulated fabric
# (issue 5), with the physical limit alongside. One run measures, on the same
# file and the same cluster:
#
#   plugin   sbatch --stage-image (prolog staging): submit -> job script start
#            ("first"), submit -> end of the first step ("job"), the agent's own
#            staging time from the slurmd log ("prolog")
#   chain    stagehand-bcast --algorithm=chain, standalone (srun inside an
#            allocation)
#   bcast    stagehand-bcast --algorithm=bcast (one MPI_Ibcast per segment)
#   sbcast   Slurm's own broadcast, run inside the allocation on its first node
#   cp       every node copies from the shared filesystem at once (srun cp)
#   noop     sbatch --stage-image when every node is already current, against
#            the same job without the option ("nooption"), at the largest and
#            the smallest N
#
# and for every run the bytes the storage host read (rchar of its sftp server
# processes). Results: bench/results/latest.md, latest.csv, latest.png.
#
#   bench/run.sh [--smoke] [--stack bookworm|trixie] [--sizes "256 1024"]
#                [--nodes "2 4 8"] [--reps 3] [--noop-reps 7] [--baseline-reps N]
#                [--link RATE] [--storage RATE]
#                [--methods "plugin chain bcast sbcast cp noop"]
#                [--no-build] [--keep] [--out DIR]
#
# --stack: the software the cluster runs (minicluster up --stack): bookworm
# (default), the host's Debian 12 (Slurm 22.05, Open MPI 4.1, PMIx 4.2), or
# trixie, the Debian 13 root of contrib/minicluster/rootfs (Slurm 24.11,
# Open MPI 5, PMIx 5), in which the build runs too (as contrib/setup.sh
# --stack trixie does). The report files record the stack and the Slurm,
# Open MPI and PMIx versions the nodes ran.
#
# --baseline-reps: repetitions of sbcast and cp, the slow baselines (default
# --reps). A failed run (e.g. a crashed rank) is recorded as failed, not
# repeated, and counts in the "ok" column.
#
# --smoke: CI variant (32 MiB, N=2, one repetition of plugin and chain, no
# report files); exits non-zero when a broadcast fails or stagehand's storage
# bytes are not 1.00 x S.
#
# The benchmark brings up its OWN minicluster instance and brings it down at
# the end (unless --keep): MINICLUSTER_NAME (default bench; benchx on
# trixie), MINICLUSTER_NET (default 10.78.0; 10.75.0), MINICLUSTER_SHARED
# (default /shared-bench; /shared-benchx). It builds the checkout into
# BENCH_BUILD_DIR (default build-bench, release; build-bench-trixie) and
# installs it into STAGEHAND_PREFIX (default /opt/stagehand-bench;
# /opt/stagehand-benchx), so neither a test cluster nor its prefix is
# touched, and the two stacks' benchmarks can run side by side (not that
# their numbers would mean much then). Needs root, like minicluster.
#
# Shaping (minicluster shape): every node link RATE each way (--link, default
# 400mbit) and the storage host's egress (--storage, default 80mbps, i.e.
# 1.6 x the link as in the issue's 200 MB/s : 1 Gbit/s; with 2 x, two nodes
# copying at once would each get their full link and the naive copy at N=2
# would be the physical limit itself). The
# defaults come from the calibration recorded in bench/results: on the 2-core
# host a raw TCP chain over 8 nodes (every hop forwarding and writing) reaches
# only ~65-100 MB/s unshaped; at 500mbit it reached 93 % of the link (the cores
# were partly in the way), at 400mbit 97 % (and 86 % in a slower hour of the
# same host, 2026-12-01 21:36 UTC). So unless --link or --storage is given,
# the calibration steps both rates down to 3/4 (at most twice: 400, 300,
# 225mbit) while the raw chain reaches less than 95 % of the raw link in two
# samples, and warns if it still does. Every run prints its own calibration.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
mc="$top/contrib/minicluster/minicluster"
rootfs="$top/contrib/minicluster/rootfs"

smoke=0 build=1 keep=0 stack=bookworm
sizes="256 1024" nodes="2 4 8" reps=3 noop_reps=7 base_reps=""
link=400mbit storage=80mbps auto_rate=1 rate_steps=""
methods="plugin chain bcast sbcast cp noop"
out="$top/bench/results"
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) smoke=1; shift ;;
        --stack) stack=${2:?}; shift 2 ;;
        --sizes) sizes=${2:?}; shift 2 ;;
        --nodes) nodes=${2:?}; shift 2 ;;
        --reps) reps=${2:?}; shift 2 ;;
        --noop-reps) noop_reps=${2:?}; shift 2 ;;
        --baseline-reps) base_reps=${2:?}; shift 2 ;;
        --link) link=${2:?}; auto_rate=0; shift 2 ;;
        --storage) storage=${2:?}; auto_rate=0; shift 2 ;;
        --methods) methods=${2:?}; shift 2 ;;
        --no-build) build=0; shift ;;
        --keep) keep=1; shift ;;
        --out) out=${2:?}; shift 2 ;;
        -h | --help) sed -n '2,/^set -e/{/^set -e/d;p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench/run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
# each stack's own instance, subnet, shared directory, prefix and build
case "$stack" in
    bookworm) d=(bench 10.78.0 /shared-bench /opt/stagehand-bench build-bench) ;;
    trixie) d=(benchx 10.75.0 /shared-benchx /opt/stagehand-benchx build-bench-trixie) ;;
    *) echo "bench/run.sh: --stack must be bookworm or trixie, got '$stack'" >&2; exit 2 ;;
esac
export MINICLUSTER_NAME=${MINICLUSTER_NAME:-${d[0]}}
export MINICLUSTER_NET=${MINICLUSTER_NET:-${d[1]}}
export MINICLUSTER_SHARED=${MINICLUSTER_SHARED:-${d[2]}}
export STAGEHAND_PREFIX=${STAGEHAND_PREFIX:-${d[3]}}
build_dir=${BENCH_BUILD_DIR:-${d[4]}}
if [ "$smoke" = 1 ]; then
    sizes=32 nodes=2 reps=1 methods="plugin chain"
    out=$(mktemp -d /tmp/stagehand-smoke.XXXXXX)
fi
[ "$(id -u)" = 0 ] || { echo "bench/run.sh: must run as root (minicluster)" >&2; exit 2; }
base_reps=${base_reps:-$reps}
for v in $sizes $nodes $reps $noop_reps $base_reps; do
    [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "bench/run.sh: '$v' is not a positive integer" >&2; exit 2; }
done
maxn=$(printf '%s\n' $nodes | sort -n | tail -1)
maxs=$(printf '%s\n' $sizes | sort -n | tail -1)
t_start=$(date +%s)
say() { printf '== %s\n' "$*" >&2; }

# ------------------------------------------------------------ build -------
# A command in the stack's software: the host's for bookworm, else in a view
# of the stack's root with the checkout and the prefix bound in.
in_stack() {
    if [ "$stack" = bookworm ]; then "$@"; else "$rootfs" run "$stack" "$top" "$STAGEHAND_PREFIX" -- "$@"; fi
}
if [ "$build" = 1 ]; then
    "$top/contrib/setup.sh" --packages-only --stack "$stack"   # a root stack: its root
    mkdir -p "$STAGEHAND_PREFIX"
    # a build directory made for another prefix (e.g. by the CI smoke run) is
    # reconfigured for this one
    # shellcheck disable=SC2016  # the script's own arguments
    in_stack bash -c 'set -e
        cd "$1"
        opts=(--prefix="$3" -Dslurm_plugindir="$3/lib/slurm" -Dinstall_tests=true)
        if [ ! -f "$2/build.ninja" ]; then
            meson setup "$2" -Dbuildtype=release "${opts[@]}" >/dev/null
        else
            meson configure "$2" "${opts[@]}" >/dev/null
        fi
        ninja -C "$2" >/dev/null
        meson install -C "$2" --quiet >/dev/null' build "$top" "$build_dir" "$STAGEHAND_PREFIX"
    say "built $build_dir ($stack) and installed it into $STAGEHAND_PREFIX"
fi
[ -x "$STAGEHAND_PREFIX/bin/stagehand-bcast" ] || { echo "bench/run.sh: $STAGEHAND_PREFIX/bin/stagehand-bcast not installed" >&2; exit 2; }
if [ "$smoke" = 0 ] && ! command -v gnuplot >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gnuplot-nox >/dev/null
fi

# ------------------------------------------------------------ cluster -----
# twice the largest image (the temp file next to a current copy), and at
# least the calibration's 256 MiB transfers (a smaller /nvme ran out of space)
nvme_mib=$((maxs * 2 > 256 ? maxs * 2 + 128 : 384))
cleanup() {
    local rc=$?
    set +e
    if [ -n "${STATE:-}" ]; then rm -f "$STATE"/export/bench-*.img; fi
    if [ -n "${scratch:-}" ]; then rm -rf "$scratch"; fi
    rm -f /dev/shm/stagehand-bench.prime
    if [ -n "${alloc:-}" ]; then scancel "$alloc" 2>/dev/null; fi
    if [ "$keep" = 0 ]; then "$mc" down >/dev/null 2>&1; fi
    exit $rc
}
trap cleanup EXIT
say "minicluster $MINICLUSTER_NAME (stack $stack): $maxn nodes, shared=sshfs at $MINICLUSTER_SHARED, net $MINICLUSTER_NET.0/24"
# a fresh instance: slurmd loads the plugin (and decides about prologs) at start
"$mc" down >/dev/null 2>&1 || true
"$mc" up --nodes "$maxn" --shared sshfs --nvme-size "${nvme_mib}m" --stack "$stack" >/dev/null
eval "$("$mc" env)"
STATE=$MINICLUSTER_STATE
# The releases the nodes run: the upstream part of the Debian package's
# version, as a node sees it (the host's packages on bookworm, the root's on
# trixie).
pkg_version() {
    # shellcheck disable=SC2016  # dpkg-query's format, not a shell expansion
    "$mc" exec n1 -- dpkg-query -W -f '${Version}' "$1" 2>/dev/null | sed 's/^[0-9]*://; s/-[^-]*$//'
}
v_slurm=$(pkg_version slurmd) v_ompi=$(pkg_version openmpi-bin) v_pmix=$(pkg_version libpmix-dev)
say "stack $stack: Slurm ${v_slurm:-?}, Open MPI ${v_ompi:-?}, PMIx ${v_pmix:-?}"
"$mc" shape --storage "$storage" --link "$link" 2>/dev/null
R="$top/bench/rawchain.py"
engine="$STAGEHAND_PREFIX/bin/stagehand-bcast"
NODES=()
for ((i = 1; i <= maxn; i++)); do NODES+=("n$i"); done

as_user() {
    (cd /tmp && runuser -u "$MINICLUSTER_USER" -- env SLURM_CONF="$SLURM_CONF" \
        PATH="$STAGEHAND_PREFIX/bin:/usr/bin:/bin" "$@")
}
now() { date +%s.%N; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", b - a }'; }
load1() { cut -d' ' -f1 /proc/loadavg; }
# Host speed for the work every method starts with: "EXEC_MS FAULT_US", the
# mean wall time of 200 runs of /bin/true (fork, exec, dynamic loading) and
# of the first touch of a 4 KiB page of fresh anonymous memory (256 MiB).
# Both are page-fault bound; on a VM each fault on memory the hypervisor has
# not backed is a hypervisor exit, and that cost varies with the host (and
# with how much memory the VM handed back just before), so a run's start-up
# times are comparable only between runs of similar probes.
host_probe() {
    local t0 t1 i
    t0=$(now)
    for ((i = 0; i < 200; i++)); do /bin/true; done
    t1=$(now)
    echo "$(awk -v d="$(sub "$t0" "$t1")" 'BEGIN { printf "%.2f", d / 200 * 1e3 }')" \
        "$(python3 -c 'import mmap, time
n = 256 << 20
m = mmap.mmap(-1, n)
m.madvise(mmap.MADV_NOHUGEPAGE)
t = time.perf_counter()
for i in range(0, n, 4096):
    m[i] = 1
print("%.2f" % ((time.perf_counter() - t) / (n // 4096) * 1e6))')"
}
node_ip() { echo "$MINICLUSTER_NET.$((10 + ${1#n}))"; }

# Bytes read by the storage host's sftp servers (one per sshfs mount). rchar
# counts every byte the server read from the exported files plus the small
# SFTP requests it read from its sockets (~0.1 %), so it is an upper bound.
# Only the internal-sftp processes count: each mount's session also has a
# "root@notty" process (on trixie's OpenSSH 10 "sshd-session: root@notty")
# that reads the sftp server's replies from a pipe and sends them on, S
# again in its rchar.
storage_rchar() {
    local p sum=0 v
    for p in $(ip netns pids "$MINICLUSTER_NAME-st" 2>/dev/null); do
        grep -q internal-sftp "/proc/$p/cmdline" 2>/dev/null || continue
        v=$(awk '/^rchar:/ { print $2 }' "/proc/$p/io" 2>/dev/null) || continue
        sum=$((sum + ${v:-0}))
    done
    echo "$sum"
}

# Every node starts from an empty /nvme/bench owned by the user, and the
# host's free memory is compacted, so every method starts from the same memory
# state: the nodes' /nvme tmpfs allocates 2 MiB pages, and during the run of
# 2026-12-01 03:13 UTC 12,438 of them fell back to 4 KiB pages
# (thp_file_fallback in /proc/vmstat). The fallbacks are counted per run (say
# lines).
#
# clean_dst BYTES also backs BYTES of the host's free memory right before the
# run (N x S: what the nodes' /nvme will take). The test host is a VM with free
# page reporting (virtio-balloon): free memory the guest leaves idle is handed
# back to the hypervisor (/sys/module/page_reporting/parameters/reported_kib
# grows by ~8 GiB within 30 s of freeing 8 GiB), and the guest's next touch of
# each such page is a host fault: writing 9 GiB to /dev/shm took 26-28 s on
# reported memory. A staging whose /nvme pages came from reported memory was
# ~1-2 s slower per GiB at N=8 with twice the CPU (measured, standalone
# engine, 1 GiB: after 30 s idle 24.4-25.5 s and 29-30 CPU s; straight after
# freeing 23.0-23.6 s and 16-18 CPU s), and which runs hit it depended on how
# idle the host was between freeing and writing: the plugin path, which starts
# the transfer 1-2 s after submission, hit it far more often than srun. This
# is an artefact of emulating NVMe in a VM's RAM, not of any method, so every
# method's run starts from backed memory (cost: ~3 s per GiB, outside the
# timed part).
clean_dst() {
    local n bytes=${1:-0}
    for n in "${NODES[@]}"; do
        "$mc" exec "$n" -- sh -c "rm -rf /nvme/bench /nvme/cal.tmp /nvme/raw.tmp; mkdir -p /nvme/bench; chown $MINICLUSTER_USER /nvme/bench"
    done
    echo 1 >/proc/sys/vm/compact_memory 2>/dev/null || true
    if [ "$bytes" -gt 0 ] && [ -d /sys/module/page_reporting ]; then
        head -c "$((bytes + (64 << 20)))" /dev/zero >/dev/shm/stagehand-bench.prime 2>/dev/null || true
        rm -f /dev/shm/stagehand-bench.prime
    fi
}
# KiB of free memory the VM has handed back to the hypervisor so far (0: none)
reported_kib() { cat /sys/module/page_reporting/parameters/reported_kib 2>/dev/null || echo 0; }
# 4 KiB-page fallbacks of tmpfs huge pages so far (host-wide counter)
thp_fallbacks() { awk '$1 == "thp_file_fallback" { print $2 }' /proc/vmstat; }
# mem_mark before a run, mem_note after it: the host memory events in between
mem_mark() { mem0=("$(thp_fallbacks)" "$(reported_kib)"); cpu0=$(cpu_ticks); }
mem_note() {
    echo "$(($(thp_fallbacks) - mem0[0])) tmpfs huge-page fallbacks," \
        "$(mem_reported_mib) MiB reported to the hypervisor"
}
# MiB of free memory the VM handed back to the hypervisor since mem_mark (the
# CSV's host_reported_mib: a run during which this is large is slower for
# every method, doc/performance.md "What limits the numbers")
mem_reported_mib() { echo $((($(reported_kib) - mem0[1]) >> 10)); }
# "busy total" clock ticks of all the host's CPUs so far (/proc/stat, proc(5):
# busy = user + nice + system + irq + softirq + steal; idle and iowait are
# time a CPU had nothing to run)
cpu_ticks() { awk '$1 == "cpu" { t = 0; for (i = 2; i <= 9; i++) t += $i; print t - $5 - $6, t; exit }' /proc/stat; }
# % of the host's CPU time that was busy since mem_mark (the CSV's
# host_cpu_busy_pct): near 100 means the 2 cores, not the emulated fabric,
# limited the run. It covers everything from mem_mark to the run's CSV row:
# the measured interval with its start-up and end, and for a batch job the
# wait for squeue to see its end (up to 2 s), for every method but the chain
# the size check of DST on each node.
host_busy_pct() {
    local b0 t0 b1 t1
    read -r b0 t0 <<<"$cpu0"
    read -r b1 t1 < <(cpu_ticks)
    awk -v b=$((b1 - b0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.0f", (t > 0 ? 100 * b / t : 0) }'
}

# Every node 1..$1 holds $2 with $3 bytes (size check; the engine verifies
# content itself, and the smoke run checks the digest too).
dst_ok() {
    local n i sz
    for ((i = 1; i <= $1; i++)); do
        n=n$i
        sz=$("$mc" exec "$n" -- stat -c %s "$2" 2>/dev/null) || return 1
        [ "$sz" = "$3" ] || return 1
    done
}

csv="$out/latest.csv"
mkdir -p "$out"
scratch=$(mktemp -d /tmp/stagehand-bench.XXXXXX)   # per-run outputs of the tools
echo "size_bytes,method,nodes,rep,seconds,ok,storage_bytes,engine_seconds,prolog_seconds,job_seconds,load1,engine_phases,host_reported_mib,host_cpu_busy_pct" >"$csv.tmp"
row() { echo "$*" | tr ' ' ',' >>"$csv.tmp"; }

# ------------------------------------------------------------ calibration -
calib="$out/latest.calib"
raw_link() { # bytes: n1 -> n2, memory to memory
    local b=$1 res
    "$mc" exec n2 -- timeout 120 "$R" recv 5999 >/tmp/bench-raw.$$ &
    local rpid=$!
    res=$("$mc" exec n1 -- timeout 120 "$R" send "$(node_ip n2):5999" "$b")
    wait $rpid
    rm -f /tmp/bench-raw.$$
    echo "$res" | awk '{ printf "%.1f", $1 / $2 / 1e6 }'
}
raw_chain() { # bytes nodes: n1 -> n2 -> ... -> nK, each hop writes to /nvme
    # prints "MB/s busy%": the payload rate and how busy the host's CPUs were
    # (the start of the K processes included; the local cpu0 is the mark
    # host_busy_pct counts from, in place of mem_mark's)
    local b=$1 k=$2 i fwd pids=() res cpu0
    cpu0=$(cpu_ticks)
    for ((i = k; i >= 2; i--)); do
        fwd=()
        [ "$i" -lt "$k" ] && fwd=(--forward "$(node_ip "n$((i + 1))"):5999")
        "$mc" exec "n$i" -- timeout 120 "$R" recv 5999 "${fwd[@]}" --out /nvme/raw.tmp >/dev/null &
        pids+=($!)
    done
    res=$("$mc" exec n1 -- timeout 120 "$R" send "$(node_ip n2):5999" "$b")
    wait "${pids[@]}"
    echo "$res $(host_busy_pct)" | awk '{ printf "%.1f %s\n", $1 / $2 / 1e6, $3 }'
}
storage_read() { # bytes file nodes: K nodes read the file from /shared at once
    local b=$1 f=$2 k=$3 i t0 t1
    t0=$(now)
    for ((i = 1; i <= k; i++)); do
        "$mc" exec "n$i" -- dd if="$f" of=/dev/null bs=1M status=none &
    done
    wait
    t1=$(now)
    awk -v b="$b" -v k="$k" -v s="$(sub "$t0" "$t1")" 'BEGIN { printf "%.1f", b * k / s / 1e6 }'
}
local_write() { # bytes: dd to node n1's /nvme with fsync
    local b=$1 t0 t1
    t0=$(now)
    "$mc" exec n1 -- dd if=/dev/zero of=/nvme/cal.tmp bs=8M count=$((b >> 23)) conv=fsync status=none
    t1=$(now)
    "$mc" exec n1 -- rm -f /nvme/cal.tmp
    awk -v b="$b" -v s="$(sub "$t0" "$t1")" 'BEGIN { printf "%.1f", b / s / 1e6 }'
}

mk_source() { # MiB -> path on /shared (created at the storage host, warm)
    local f="$STATE/export/bench-$1.img"
    runuser -u "$MINICLUSTER_USER" -- sh -c "head -c $(($1 << 20)) /dev/urandom >'$f' && chmod 0644 '$f'"
    cat "$f" >/dev/null
    echo "$MINICLUSTER_SHARED/bench-$1.img"
}

cal_bytes=$((256 << 20))
clean_dst
if [ "$smoke" = 1 ]; then
    : # the smoke run checks correctness and storage bytes only
else
say "calibration ($((cal_bytes >> 20)) MiB per transfer; load $(load1))"
calsrc=$(mk_source $((cal_bytes >> 20)))
# the cores must not be what limits a raw chain at the shaped link rate; one
# sample can be unlucky, so a rate is given up only when a second sample of
# the chain is under 95 % of the link too (the better one counts)
under95() { awk -v c="$1" -v l="$2" 'BEGIN { exit !(c < 0.95 * l) }'; }
chain_failed() { echo "bench/run.sh: calibration: the raw chain over $maxn nodes failed" >&2; exit 1; }
for step in 0 1 2; do
    B_link=$(raw_link "$cal_bytes")
    sample1=$(raw_chain "$cal_bytes" "$maxn") && [ -n "$sample1" ] || chain_failed
    read -r B_chain B_chain_busy <<<"$sample1"
    if [ "$auto_rate" = 0 ] || [ "$step" = 2 ] || ! under95 "$B_chain" "$B_link"; then
        break
    fi
    sample2=$(raw_chain "$cal_bytes" "$maxn") && [ -n "$sample2" ] || chain_failed
    read -r B_chain B_chain_busy < <(printf '%s\n' "$sample1" "$sample2" | sort -k1,1g | tail -1)
    under95 "$B_chain" "$B_link" || break
    rate_steps="${rate_steps:+$rate_steps; }at $link the raw chain reached $B_chain of $B_link MB/s with the host's CPUs $B_chain_busy % busy"
    link=$((${link%mbit} * 3 / 4))mbit storage=$((${storage%mbps} * 3 / 4))mbps
    say "the raw chain reaches $B_chain of $B_link MB/s (under 95 %): the cores are in the way; shaping --link $link --storage $storage"
    "$mc" shape --storage "$storage" --link "$link" 2>/dev/null
done
B_st1=$(storage_read "$cal_bytes" "$calsrc" 1)
B_st2=$(storage_read "$cal_bytes" "$calsrc" 2)
B_write=$(local_write "$cal_bytes")
read -r probe_exec probe_fault < <(host_probe)
rm -f "$STATE/export/bench-$((cal_bytes >> 20)).img"
clean_dst
link_nom=$(awk -v r="$link" 'BEGIN { v = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u);
    m = (u ~ /^k/) ? 1e3 : (u ~ /^m/) ? 1e6 : (u ~ /^g/) ? 1e9 : 1;
    printf "%.1f", (u ~ /bit$/) ? v * m / 8 / 1e6 : v * m / 1e6 }')
st_nom=$(awk -v r="$storage" 'BEGIN { v = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u);
    m = (u ~ /^k/) ? 1e3 : (u ~ /^m/) ? 1e6 : (u ~ /^g/) ? 1e9 : 1;
    printf "%.1f", (u ~ /bit$/) ? v * m / 8 / 1e6 : v * m / 1e6 }')
cat >"$calib" <<EOF
stack=$stack
slurm_version=$v_slurm
openmpi_version=$v_ompi
pmix_version=$v_pmix
link_rate=$link
storage_rate=$storage
link_nominal_MBps=$link_nom
storage_nominal_MBps=$st_nom
link_raw_MBps=$B_link
chain_raw_MBps=$B_chain
chain_raw_nodes=$maxn
chain_raw_busy_pct=$B_chain_busy
storage_1reader_MBps=$B_st1
storage_2readers_MBps=$B_st2
local_write_MBps=$B_write
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
date_start=$(date -u +%Y-%m-%dT%H:%MZ)
prolog_local_check=1
staging_process=1
prolog_epilog_timeout=${MINICLUSTER_PROLOG_EPILOG_TIMEOUT:-180}
host_cpus=$(nproc)
host_exec_ms_start=$probe_exec
host_fault_us_start=$probe_fault
rate_steps=$rate_steps
rates_given=$((1 - auto_rate))
EOF
limit_rate=$(printf '%s\n' "$B_link" "$B_st2" "$B_write" | sort -g | head -1)
{
    echo "calibration (MB/s = 10^6 bytes/s; payload rates of raw transfers, no MPI):"
    echo "  node link        shaped $link = $link_nom MB/s nominal; raw TCP n1->n2: $B_link MB/s"
    echo "  storage egress   shaped $storage = $st_nom MB/s nominal; sshfs read 1 node: $B_st1, 2 nodes: $B_st2 MB/s total"
    echo "  local write      dd to tmpfs /nvme with fsync: $B_write MB/s"
    echo "  CPU check        raw TCP chain over $maxn nodes (each hop forwards + writes): $B_chain MB/s, host CPUs $B_chain_busy % busy"
    echo "  host speed       /bin/true $probe_exec ms, first touch of a 4 KiB page $probe_fault us"
    echo "  physical limit   S / min(storage, link, local write) = S / $limit_rate MB/s"
} | tee "$out/latest.calib.txt" >&2
under95 "$B_chain" "$B_link" &&
    say "WARNING: the raw chain reaches only $B_chain of $B_link MB/s: the CPUs limit at this link rate (use a lower --link and --storage)"
fi

# ------------------------------------------------------------ methods -----
alloc=""
open_alloc() { # nodes -> job id of an idle allocation on n[1-N]
    as_user salloc -N"$1" -w "n[1-$1]" --no-shell -t 60 -J bench-alloc 2>&1 |
        sed -n 's/.*Granted job allocation \([0-9]*\).*/\1/p'
}

run_engine() { # size nodes rep alg src dst
    local size=$1 n=$2 rep=$3 alg=$4 src=$5 dst=$6 s0 s1 t0 t1 ok=1 eng="" phases=""
    clean_dst $((n * size << 20))
    mem_mark
    s0=$(storage_rchar)
    t0=$(now)
    # --kill-on-bad-exit: a rank that dies ends the step at once (Open MPI
    # 4.1 has no fault tolerance; the survivors would wait for --timeout)
    as_user timeout 900 srun --jobid="$alloc" -N"$n" -n"$n" --ntasks-per-node=1 --mpi=pmix \
        --kill-on-bad-exit=1 "$engine" --source "$src" --dest "$dst" --check=never \
        --algorithm="$alg" --timeout=$((60 + size / 4))s --json \
        >"$scratch/engine.json" 2>"$scratch/engine.err" || ok=0
    t1=$(now)
    s1=$(storage_rchar)
    if [ "$ok" = 1 ]; then
        # the engine's total and its own phase times (start-up/metadata/
        # pre-check/transfer/verify/publish: where the time goes), one read
        read -r eng phases < <(python3 -c 'import json,sys
d = json.load(open(sys.argv[1])); s = d["seconds"]
if d["status"] == "ok" and d["nodes_copied"] == d["nodes"]:
    print(s["total"], "/".join("%.3f" % s[k] for k in ("start-up", "metadata", "pre-check", "transfer", "verify", "publish")))' "$scratch/engine.json" 2>/dev/null || true) || true
        [ -n "$eng" ] || ok=0
    fi
    [ "$ok" = 1 ] || { say "$alg N=$n failed: $(tail -3 "$scratch/engine.err" | tr '\n' ' ')"; }
    say "$alg N=$n rep $rep: $(sub "$t0" "$t1") s, $(mem_note)"
    row "$size" "$alg" "$n" "$rep" "$(sub "$t0" "$t1")" "$ok" $((s1 - s0)) "$eng" "" "" "$(load1)" "$phases" "$(mem_reported_mib)" "$(host_busy_pct)"
}

run_sbcast() { # size nodes rep src dst
    local size=$1 n=$2 rep=$3 src=$4 dst=$5 s0 s1 t0 t1 ok=1
    clean_dst $((n * size << 20))
    mem_mark
    s0=$(storage_rchar)
    t0=$(now)
    as_user timeout 900 srun --jobid="$alloc" -N1 -n1 -w n1 sbcast -f "$src" "$dst" \
        2>"$scratch/sbcast.err" || ok=0
    t1=$(now)
    s1=$(storage_rchar)
    [ "$ok" = 1 ] && { dst_ok "$n" "$dst" "$((size << 20))" || ok=0; }
    [ "$ok" = 1 ] || say "sbcast N=$n failed: $(tail -3 "$scratch/sbcast.err" | tr '\n' ' ')"
    row "$size" sbcast "$n" "$rep" "$(sub "$t0" "$t1")" "$ok" $((s1 - s0)) "" "" "" "$(load1)" "" "$(mem_reported_mib)" "$(host_busy_pct)"
}

run_cp() { # size nodes rep src dst
    local size=$1 n=$2 rep=$3 src=$4 dst=$5 s0 s1 t0 t1 ok=1
    clean_dst $((n * size << 20))
    mem_mark
    s0=$(storage_rchar)
    t0=$(now)
    as_user timeout 900 srun --jobid="$alloc" -N"$n" -n"$n" --ntasks-per-node=1 cp "$src" "$dst" \
        2>"$scratch/cp.err" || ok=0
    t1=$(now)
    s1=$(storage_rchar)
    [ "$ok" = 1 ] && { dst_ok "$n" "$dst" "$((size << 20))" || ok=0; }
    [ "$ok" = 1 ] || say "cp N=$n failed: $(tail -3 "$scratch/cp.err" | tr '\n' ' ')"
    row "$size" cp "$n" "$rep" "$(sub "$t0" "$t1")" "$ok" $((s1 - s0)) "" "" "" "$(load1)" "" "$(mem_reported_mib)" "$(host_busy_pct)"
}

# Epoch seconds at which slurmctld started job $1 ("sched: Allocate" or
# "backfill: Started", millisecond timestamps in its log), or "".
job_start_time() {
    local ts
    # the newest line: job ids start again at 1 in a new instance, the log stays
    ts=$(grep -aE "(sched: Allocate|Started) JobId=$1 " "$STATE/log/slurmctld.log" |
        tail -1 | sed -n 's/^\[\([0-9-]*\)T\([0-9:.]*\)\].*/\1 \2/p' || true)
    if [ -n "$ts" ]; then date -d "$ts" +%s.%N; fi
}

# No job of an earlier measurement still completing (its epilog holds nodes).
wait_settled() {
    local i
    for ((i = 0; i < 300; i++)); do
        [ -z "$(squeue -h -t CG -o %i 2>/dev/null)" ] && return 0
        sleep 0.1
    done
}

# One batch job on n[1-N]: "date; srun true; date". With $4 = 1 it asks for
# staging. Prints "first job prolog ok": seconds from the job's start (the
# allocation, when the prolog starts) to the job script's start, i.e. the
# first step, and to the end of its first srun step; the agent's staging time.
batch_job() { # nodes src dst with_option(0/1)
    local n=$1 src=$2 dst=$3 opt=$4 id t0 st first job prolog ok=1 i ms
    local args=(-N"$n" -w "n[1-$n]" -t 30 -J bench-job -o "/tmp/bench-job-%j.out")
    [ "$opt" = 1 ] && args+=(--stage-image="$src:$dst")
    wait_settled
    # the log outlives instances (job ids repeat): read only what this job adds
    local log="$STATE/log/slurmd.n1.log" logoff
    logoff=$(stat -c %s "$log" 2>/dev/null || echo 0)
    # shellcheck disable=SC2016
    id=$(as_user sbatch --parsable "${args[@]}" \
        --wrap 'date +%s.%N; srun -N'"$n"' --ntasks-per-node=1 true; date +%s.%N') || { echo "nan nan nan 0"; return; }
    # Look at the job after 0.1 s, then doubling up to every 2 s. Every look
    # runs squeue: 18 ms of CPU on this host (a process start, and an RPC
    # that slurmctld answers), on the same 2 cores as the job. Looking every
    # 0.1 s took about 8 % of the cores for the whole staging, from the
    # plugin's runs only (srun waits without polling). The times come from
    # slurmctld's log and the job's own clock: a later look only ends this
    # wait later, it changes no result.
    ms=100
    for ((i = 0; i < 1000; i++)); do
        st=$(squeue -h -j "$id" -o %T 2>/dev/null || true)
        [ -z "$st" ] && break
        sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
        ms=$((ms * 2 > 2000 ? 2000 : ms * 2))
    done
    mapfile -t ts < <("$mc" exec n1 -- cat "/tmp/bench-job-$id.out" 2>/dev/null | grep -E '^[0-9]+\.[0-9]+$')
    "$mc" exec n1 -- rm -f "/tmp/bench-job-$id.out"
    t0=$(job_start_time "$id")
    if [ "${#ts[@]}" -ge 2 ] && [ -n "$t0" ]; then
        first=$(sub "$t0" "${ts[0]}")
        job=$(sub "$t0" "${ts[1]}")
    else
        first=nan job=nan ok=0
    fi
    prolog=""
    if [ "$opt" = 1 ]; then
        prolog=$(tail -c +"$((logoff + 1))" "$log" | grep -a "stagehand: job $id user" |
            sed -n 's/.* in \([0-9.]*\) s.*/\1/p; s/.*(\([0-9.]*\) s)$/\1/p' | sort -g | tail -1 || true)
        tail -c +"$((logoff + 1))" "$log" | grep -aq "stagehand: job $id user.*staging failed" && ok=0
    fi
    echo "$first $job ${prolog:-nan} $ok"
}

run_plugin() { # size nodes rep src dst
    local size=$1 n=$2 rep=$3 src=$4 dst=$5 s0 s1 first job prolog ok
    clean_dst $((n * size << 20))
    mem_mark
    s0=$(storage_rchar)
    read -r first job prolog ok < <(batch_job "$n" "$src" "$dst" 1)
    s1=$(storage_rchar)
    say "plugin N=$n rep $rep: agent ${prolog:-?} s, $(mem_note)"
    [ "$ok" = 1 ] && { dst_ok "$n" "$dst" "$((size << 20))" || ok=0; }
    [ "$ok" = 1 ] || say "plugin N=$n failed (job output or staging)"
    row "$size" plugin "$n" "$rep" "$first" "$ok" $((s1 - s0)) "" "$prolog" "$job" "$(load1)" "" "$(mem_reported_mib)" "$(host_busy_pct)"
}

run_noop() { # size nodes reps src dst: option with all nodes current vs none
    local size=$1 n=$2 reps=$3 src=$4 dst=$5 r s0 s1 first job prolog ok
    clean_dst
    read -r first job prolog ok < <(batch_job "$n" "$src" "$dst" 1)    # make current
    for ((r = 1; r <= reps; r++)); do
        s0=$(storage_rchar)
        read -r first job prolog ok < <(batch_job "$n" "$src" "$dst" 1)
        s1=$(storage_rchar)
        row "$size" noop "$n" "$r" "$first" "$ok" $((s1 - s0)) "" "$prolog" "$job" "$(load1)"
        s0=$(storage_rchar)
        read -r first job prolog ok < <(batch_job "$n" "$src" "$dst" 0)
        s1=$(storage_rchar)
        row "$size" nooption "$n" "$r" "$first" "$ok" $((s1 - s0)) "" "" "$job" "$(load1)"
    done
}

has() { [[ " $methods " == *" $1 "* ]]; }

# Warm-up, not recorded: one staging of the largest size to every node. The
# test host is a VM whose memory the hypervisor backs on first touch, and the
# nodes' /nvme tmpfs takes 2 MiB pages: the first run after start-up touched
# fresh memory and took 2-6 s longer (1 GiB, N=8) than every later run.
if [ "$smoke" = 0 ]; then
    wsize=$(printf '%s\n' $sizes | sort -n | tail -1)
    wsrc=$(mk_source "$wsize")
    say "warm-up: one staging of $wsize MiB to $maxn nodes (not recorded)"
    batch_job "$maxn" "$wsrc" /nvme/bench/warm-up.img 1 >/dev/null
    rm -f "$STATE/export/bench-$wsize.img"
    clean_dst
fi

for size in $sizes; do
    src=$(mk_source "$size")
    dst=/nvme/bench/img-$size.img
    for n in $nodes; do
        say "S=$size MiB N=$n: $methods (x$reps; load $(load1))"
        alloc=$(open_alloc "$n")
        [ -n "$alloc" ] || { echo "bench/run.sh: salloc failed" >&2; exit 1; }
        for ((rep = 1; rep <= reps; rep++)); do
            if has plugin; then run_plugin "$size" "$n" "$rep" "$src" "$dst"; fi
            if has chain; then run_engine "$size" "$n" "$rep" chain "$src" "$dst"; fi
            if has bcast; then run_engine "$size" "$n" "$rep" bcast "$src" "$dst"; fi
            [ "$rep" -le "$base_reps" ] || continue
            if has sbcast; then run_sbcast "$size" "$n" "$rep" "$src" "$dst"; fi
            if has cp; then run_cp "$size" "$n" "$rep" "$src" "$dst"; fi
        done
        scancel "$alloc"
        alloc=""
    done
    if has noop && [ "$size" = "$(printf '%s\n' $sizes | sort -n | head -1)" ]; then
        # at the largest N (the target) and at the smallest, where the nodes
        # do not outnumber the host's cores: the difference is what 8 nodes'
        # slurmstepds and agents cost when they share 2 cores
        for n in $(printf '%s\n' $nodes | sort -n | sed -n '1p;$p' | sort -un); do
            say "no-op: N=$n, $noop_reps pairs (load $(load1))"
            run_noop "$size" "$n" "$noop_reps" "$src" "$dst"
        done
    fi
    if [ "$smoke" = 1 ]; then
        want=$(sha256sum "$STATE/export/bench-$size.img" | cut -d' ' -f1)
        for ((i = 1; i <= 2; i++)); do
            got=$("$mc" exec "n$i" -- sha256sum "$dst" 2>/dev/null | cut -d' ' -f1)
            [ "$got" = "$want" ] || { echo "smoke: FAIL: n$i's copy differs from the source" >&2; exit 1; }
        done
    fi
    rm -f "$STATE/export/bench-$size.img"
    clean_dst
done
mv "$csv.tmp" "$csv"
if [ "$smoke" = 0 ]; then
    load_end=$(cut -d' ' -f1-3 /proc/loadavg)
    read -r probe_exec probe_fault < <(host_probe)
    {
        echo "load_end=$load_end"
        echo "host_exec_ms_end=$probe_exec"
        echo "host_fault_us_end=$probe_fault"
        echo "duration_s=$(($(date +%s) - t_start))"
    } >>"$calib"
fi

if [ "$smoke" = 1 ]; then
    # stagehand (plugin and chain) must succeed and read S exactly once
    if ! python3 - "$csv" <<'EOF'
import csv, sys
bad = 0
for r in csv.DictReader(open(sys.argv[1])):
    s = int(r["size_bytes"]) << 20
    ratio = int(r["storage_bytes"]) / s
    print(f"smoke: {r['method']:7s} N={r['nodes']} ok={r['ok']} {float(r['seconds']):.2f} s storage {ratio:.4f} x S")
    if r["ok"] != "1" or round(ratio, 2) != 1.00:
        bad += 1
sys.exit(1 if bad else 0)
EOF
    then
        echo "smoke: FAIL" >&2
        exit 1
    fi
    rm -rf "$out"
    echo "smoke: ok, stack $stack: Slurm $v_slurm, Open MPI $v_ompi, PMIx $v_pmix ($(($(date +%s) - t_start)) s)"
    exit 0
fi
python3 "$top/bench/report.py" --csv "$csv" --calib "$calib" --out "$out"
say "results: $out/latest.md, latest.csv, latest.png ($(($(date +%s) - t_start)) s)"

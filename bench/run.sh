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
# --fabric, --registry and --scale (below) are regimes of their own.
#
#   bench/run.sh [--smoke | --fabric | --registry | --scale] [--stack bookworm|trixie] [--sizes "256 1024"]
#                [--nodes "2 4 8"] [--reps 3] [--noop-reps 7] [--baseline-reps N]
#                [--link RATE] [--storage RATE] [--segment SIZE] [--nvme-fs tmpfs|ext4]
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
# --fabric: the fast-fabric regime (issue 32): unshaped links, the shared
# directory bound in (no storage host), 1 GiB at N = 2, 4, 8 (--sizes,
# --nodes), --reps 2 by default, and the methods chain-ob1 chain-ucx
# bcast-ob1 mpibcast cp (--methods; bcast-ucx and chain-ucxeager, UCX with
# segments up to 1 MiB sent eagerly, also exist) alternating after
# a warm-up staging: the engine over ob1/TCP and over UCX (UCX's TCP
# transport), per-segment MPI_Ibcast, an in-memory MPI_Bcast loop
# (mpi_bcast_check: no file I/O) and srun cp. With a bound-in /shared every
# node's cp reads the host's page cache: that baseline measures N parallel
# memory copies into each node's tmpfs, not a fabric. It records the
# engine's CPU seconds by role and writes fabric-<stack>-<date>.csv and .md
# (bench/fabric_report.py) into --out.
#
# --registry: job start for a registry image (issue 36 item 6): the
# cluster's own registry (minicluster registry, Debian's docker-registry on
# the storage host, plain HTTP) seeded with one image of --sizes MiB of
# random data (default 256; incompressible, so the image's blobs are that
# large too), links unshaped, N = 2, 4, 8, --reps 3 by default, the methods
# stagehand and every-node (--methods) alternating after a warm-up staging:
# sbatch --stage-image=docker://... (node 0 resolves the tag and runs the
# shipped importer once, the broadcast delivers the image), against a job
# whose first step runs the same resolver and importer (stagehand-import) on
# every node into its own /nvme. DST and every import are removed between
# runs, so every run imports. It records the time from the job's start to
# the end of its first step (the image is on every node by then) and the
# registry's bytes served (its access log), and writes
# registry-<stack>-<date>.csv and .md (bench/registry_report.py) into --out.
#
# --scale: the link-bound regime at scale (issue 35 item 1): 256 MiB
# (--sizes) at N = 2, 16, 32 (--nodes), --reps 2, the methods plugin and
# chain (--methods), every N within each repetition (alternating) after a
# warm-up staging to every node. Links shaped to 24mbit (3.0 MB/s) each way
# and the storage host to 38mbit (1.6 x; --link, --storage): at that rate
# 32 engines forwarding, writing and hashing take about 0.1 CPU s a second
# in all (3 CPU s per GiB a node, fabric-cpu-2026-12-06.md), so the 2 host
# cores, shared with other work, never limit; each chain run records its
# ranks' CPU seconds to show it. Segments of 128K (--segment; the plugin
# gets segment_size= in its plugstack, the chain --segment-size): the
# pipeline's fill, (N-1) x segment / link, is 1.3 s at N = 32 at that rate
# where the default 512K would cost 5.4 s (6 % of the 90 s staging). The
# calibration moves 32 MiB per transfer (256 MiB would take 90 s a sample).
# Writes scale-<stack>-<date>.csv and .md (bench/scale_report.py: medians,
# T(N) / T(2) and bench/model.md's prediction) into --out.
#
# --nvme-fs: each node's /nvme (minicluster up --nvme-fs): tmpfs (default),
# in the VM's memory, where the engine's preallocation of DST zero-fills
# fresh pages (66 s for 32 x 256 MiB on the loaded host), or ext4 on a loop
# device over a sparse image on the host's disk, where fallocate allocates
# extents as on a real node's NVMe file system. The report files record it.
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

smoke=0 fabric=0 registry=0 scale=0 segment=512K nvme_fs=tmpfs build=1 keep=0 stack=bookworm given_reps=0 given_methods=0 given_sizes=0 given_segment=0 given_nodes=0
sizes="256 1024" nodes="2 4 8" reps=3 noop_reps=7 base_reps=""
link=400mbit storage=80mbps auto_rate=1 rate_steps=""
methods="plugin chain bcast sbcast cp noop"
out="$top/bench/results"
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) smoke=1; shift ;;
        --fabric) fabric=1; shift ;;
        --registry) registry=1; shift ;;
        --scale) scale=1; shift ;;
        --segment) segment=${2:?}; given_segment=1; shift 2 ;;
        --nvme-fs) nvme_fs=${2:?}; shift 2 ;;
        --stack) stack=${2:?}; shift 2 ;;
        --sizes) sizes=${2:?}; given_sizes=1; shift 2 ;;
        --nodes) nodes=${2:?}; given_nodes=1; shift 2 ;;
        --reps) reps=${2:?}; given_reps=1; shift 2 ;;
        --noop-reps) noop_reps=${2:?}; shift 2 ;;
        --baseline-reps) base_reps=${2:?}; shift 2 ;;
        --link) link=${2:?}; auto_rate=0; shift 2 ;;
        --storage) storage=${2:?}; auto_rate=0; shift 2 ;;
        --methods) methods=${2:?}; given_methods=1; shift 2 ;;
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
shared=sshfs
[ $((smoke + fabric + registry + scale)) -le 1 ] || { echo "bench/run.sh: --smoke, --fabric, --registry and --scale exclude each other" >&2; exit 2; }
if [ "$smoke" = 1 ]; then
    sizes=32 nodes=2 reps=1 methods="plugin chain"
    out=$(mktemp -d /tmp/stagehand-smoke.XXXXXX)
fi
if [ "$fabric" = 1 ]; then
    shared=bind auto_rate=0 link=unshaped storage=unshaped
    [ "$given_sizes" = 1 ] || sizes=1024
    [ "$given_reps" = 1 ] || reps=2
    [ "$given_methods" = 1 ] || methods="chain-ob1 chain-ucx bcast-ob1 mpibcast cp"
    # its results go to --out as fabric-STACK-DATE.*; the calibration's
    # latest.* files (the shaped regime's) to a scratch directory
    fabric_out=$out
    mkdir -p "$fabric_out"
    out=$(mktemp -d /tmp/stagehand-fabric.XXXXXX)
fi
if [ "$registry" = 1 ]; then
    shared=bind auto_rate=0 link=unshaped storage=unshaped
    [ "$given_sizes" = 1 ] || sizes=256
    [ "$given_methods" = 1 ] || methods="stagehand every-node"
    # results to --out as registry-STACK-DATE.*, the calibration's to scratch
    registry_out=$out
    mkdir -p "$registry_out"
    out=$(mktemp -d /tmp/stagehand-registry.XXXXXX)
fi
if [ "$scale" = 1 ]; then
    [ "$given_sizes" = 1 ] || sizes=256
    [ "$given_nodes" = 1 ] || nodes="2 16 32"
    [ "$given_reps" = 1 ] || reps=2
    [ "$given_methods" = 1 ] || methods="plugin chain"
    [ "$given_segment" = 1 ] || segment=128K
    if [ "$auto_rate" = 1 ]; then link=24mbit storage=38mbit auto_rate=0; fi
    cal_mib=32
    # the agent's engine at the same segment size; its deadline well above
    # the slowest staging (256 MiB at 3 MB/s: 90 s)
    export MINICLUSTER_PLUGIN_ARGS="timeout=1500s segment_size=$segment"
    scale_out=$out
    mkdir -p "$scale_out"
    out=$(mktemp -d /tmp/stagehand-scale.XXXXXX)
fi
[ "$(id -u)" = 0 ] || { echo "bench/run.sh: must run as root (minicluster)" >&2; exit 2; }
case "$nvme_fs" in tmpfs | ext4) ;; *) echo "bench/run.sh: --nvme-fs must be tmpfs or ext4, got '$nvme_fs'" >&2; exit 2 ;; esac
base_reps=${base_reps:-$reps}
for v in $sizes $nodes $reps $noop_reps $base_reps; do
    [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "bench/run.sh: '$v' is not a positive integer" >&2; exit 2; }
done
# a list of numbers ("2 4 8"), one per line, in ascending order
sorted() { tr ' ' '\n' <<<"$1" | grep . | sort -n; }
maxn=$(sorted "$nodes" | tail -1)
maxs=$(sorted "$sizes" | tail -1)
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
# --registry: an import holds the image's blobs, its unpacked root and the
# Squashfs image at once, next to DST
[ "$registry" = 0 ] || nvme_mib=$((maxs * 4 + 128 > 384 ? maxs * 4 + 128 : 384))
cleanup() {
    local rc=$?
    set +e
    if [ -n "${export_dir:-}" ]; then rm -f "$export_dir"/bench-*.img; fi
    if [ -n "${scratch:-}" ]; then rm -rf "$scratch"; fi
    rm -f /dev/shm/stagehand-bench.prime
    if [ -n "${alloc:-}" ]; then scancel "$alloc" 2>/dev/null; fi
    if [ "$keep" = 0 ]; then
        "$mc" down >/dev/null 2>&1
        # --registry: the pushed image (the registry keeps its data across
        # restarts; each run pushes a new one)
        if [ "$registry" = 1 ] && [ -n "${STATE:-}" ]; then rm -rf "$STATE/registry/data"; fi
    fi
    exit $rc
}
trap cleanup EXIT
say "minicluster $MINICLUSTER_NAME (stack $stack): $maxn nodes, shared=$shared at $MINICLUSTER_SHARED, /nvme $nvme_fs, net $MINICLUSTER_NET.0/24"
# a fresh instance: slurmd loads the plugin (and decides about prologs) at start
"$mc" down >/dev/null 2>&1 || true
importer="$STAGEHAND_PREFIX/libexec/stagehand-import"
if [ "$registry" = 1 ]; then
    # the cluster's registry (minicluster registry addr: the storage host,
    # port 5000) allowed, and the shipped resolver and importer over plain HTTP
    reg_addr=$MINICLUSTER_NET.2:5000
    export MINICLUSTER_PLUGIN_ARGS="allowed_registries=$reg_addr resolver=$importer,--insecure,digest,%r importer=$importer,--insecure,import,%r,%o"
fi
"$mc" up --nodes "$maxn" --shared "$shared" --nvme-size "${nvme_mib}m" --nvme-fs "$nvme_fs" --stack "$stack" >/dev/null
eval "$("$mc" env)"
STATE=$MINICLUSTER_STATE
# where the files under /shared live: the storage host's export (sshfs) or
# the bound-in directory itself (bind)
if [ "$shared" = sshfs ]; then export_dir=$STATE/export; else export_dir=$MINICLUSTER_SHARED; fi
# The releases the nodes run: the upstream part of the Debian package's
# version, as a node sees it (the host's packages on bookworm, the root's on
# trixie).
pkg_version() {
    # shellcheck disable=SC2016  # dpkg-query's format, not a shell expansion
    "$mc" exec n1 -- dpkg-query -W -f '${Version}' "$1" 2>/dev/null | sed 's/^[0-9]*://; s/-[^-]*$//'
}
v_slurm=$(pkg_version slurmd) v_ompi=$(pkg_version openmpi-bin) v_pmix=$(pkg_version libpmix-dev)
say "stack $stack: Slurm ${v_slurm:-?}, Open MPI ${v_ompi:-?}, PMIx ${v_pmix:-?}"
if [ "$fabric" = 0 ] && [ "$registry" = 0 ]; then "$mc" shape --storage "$storage" --link "$link" 2>/dev/null; fi
# What the nodes run comes from a directory they see (the instance's state
# directory), not from the checkout: a node has its own /tmp, and a checkout
# can be anywhere.
mkdir -p "$STATE/bench"
install -m 0755 "$top/bench/rawchain.py" "$STATE/bench/rawchain.py"
R="$STATE/bench/rawchain.py"
engine="$STAGEHAND_PREFIX/bin/stagehand-bcast"
bcast_loop="$STAGEHAND_PREFIX/libexec/stagehand/tests/mpi_bcast_check"
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
fcsv="${fabric_out:-$out}/fabric-$stack-$(date -u +%Y-%m-%d).csv"
if [ "$fabric" = 1 ]; then
    [ -x "$bcast_loop" ] || { echo "bench/run.sh: $bcast_loop not installed (-Dinstall_tests=true)" >&2; exit 2; }
    echo "size_mib,method,nodes,rep,seconds,ok,own_seconds,transfer_seconds,cpu_reader,cpu_forwarder,cpu_last,cpu_write,cpu_read,load1,host_cpu_busy_pct" >"$fcsv"
fi
rcsv="${registry_out:-$out}/registry-$stack-$(date -u +%Y-%m-%d).csv"
scsv="${scale_out:-$out}/scale-$stack-$(date -u +%Y-%m-%d).csv"
if [ "$scale" = 1 ]; then
    echo "size_mib,method,nodes,rep,seconds,ok,storage_bytes,agent_seconds,engine_total,engine_startup,engine_transfer,cpu_reader,cpu_forwarder,cpu_last,cpu_max,load1,host_cpu_busy_pct" >"$scsv"
fi
if [ "$registry" = 1 ]; then
    echo "image_bytes,method,nodes,rep,seconds,ok,registry_bytes,registry_clients,first_seconds,agent_seconds,load1,host_reported_mib,host_cpu_busy_pct" >"$rcsv"
fi

# ------------------------------------------------------------ calibration -
mk_source() { # MiB -> path on /shared (created where it is served from, warm)
    local f="$export_dir/bench-$1.img"
    runuser -u "$MINICLUSTER_USER" -- sh -c "head -c $(($1 << 20)) /dev/urandom >'$f' && chmod 0644 '$f'"
    cat "$f" >/dev/null
    echo "$MINICLUSTER_SHARED/bench-$1.img"
}


# shellcheck source=bench/calibrate.sh
source "$top/bench/calibrate.sh"

# ------------------------------------------------------------ methods -----
# shellcheck source=bench/methods.sh
source "$top/bench/methods.sh"


# Warm-up, not recorded: one staging of the largest size to every node. The
# test host is a VM whose memory the hypervisor backs on first touch, and the
# nodes' /nvme tmpfs takes 2 MiB pages: the first run after start-up touched
# fresh memory and took 2-6 s longer (1 GiB, N=8) than every later run.
if [ "$smoke" = 0 ] && [ "$registry" = 0 ]; then   # --registry: its own
    wsize=$(sorted "$sizes" | tail -1)
    wsrc=$(mk_source "$wsize")
    say "warm-up: one staging of $wsize MiB to $maxn nodes (not recorded)"
    batch_job "$maxn" "$wsrc" /nvme/bench/warm-up.img 1 >/dev/null
    rm -f "$export_dir/bench-$wsize.img"
    clean_dst
fi

for size in $sizes; do
    if [ "$registry" = 1 ]; then
        run_registry "$size"
        clean_dst
        continue
    fi
    if [ "$scale" = 1 ]; then
        src=$(mk_source "$size")
        run_scale "$size" "$src" "/nvme/bench/img-$size.img"
        rm -f "$export_dir/bench-$size.img"
        clean_dst
        continue
    fi
    if [ "$fabric" = 1 ]; then
        src=$(mk_source "$size")
        run_fabric "$size" "$src" "/nvme/bench/img-$size.img"
        rm -f "$export_dir/bench-$size.img"
        clean_dst
        continue
    fi
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
    if has noop && [ "$size" = "$(sorted "$sizes" | head -1)" ]; then
        # at the largest N (the target) and at the smallest, where the nodes
        # do not outnumber the host's cores: the difference is what 8 nodes'
        # slurmstepds and agents cost when they share 2 cores
        for n in $(sorted "$nodes" | sed -n '1p;$p' | sort -un); do
            say "no-op: N=$n, $noop_reps pairs (load $(load1))"
            run_noop "$size" "$n" "$noop_reps" "$src" "$dst"
        done
    fi
    if [ "$smoke" = 1 ]; then
        want=$(sha256sum "$export_dir/bench-$size.img" | cut -d' ' -f1)
        for ((i = 1; i <= 2; i++)); do
            got=$("$mc" exec "n$i" -- sha256sum "$dst" 2>/dev/null | cut -d' ' -f1)
            [ "$got" = "$want" ] || { echo "smoke: FAIL: n$i's copy differs from the source" >&2; exit 1; }
        done
    fi
    rm -f "$export_dir/bench-$size.img"
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
# A regime's results (--fabric, --registry): its calibration and report
# beside its CSV; the scratch --out of the calibration goes.
regime_report() { # csv report-script
    cp "$calib" "${1%.csv}.calib"
    python3 "$top/bench/$2" --csv "$1" --calib "$calib" --out "${1%.csv}.md"
    rm -rf "$out"
    say "results: ${1%.csv}.md, $1 ($(($(date +%s) - t_start)) s)"
    exit 0
}
if [ "$registry" = 1 ]; then regime_report "$rcsv" registry_report.py; fi
if [ "$scale" = 1 ]; then regime_report "$scsv" scale_report.py; fi
if [ "$fabric" = 1 ]; then regime_report "$fcsv" fabric_report.py; fi
python3 "$top/bench/report.py" --csv "$csv" --calib "$calib" --out "$out"
say "results: $out/latest.md, latest.csv, latest.png ($(($(date +%s) - t_start)) s)"

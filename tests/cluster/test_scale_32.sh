#!/usr/bin/env bash
# Issue 35 item 1: 32 nodes. On an instance of its own (32 nodes, brought up
# and down here, like test_fault_repair's N=8 one) a batch job stages a
# random image (SCALE_SIZE_MIB, default 128) with `sbatch -N32
# --stage-image` through the plugin, in a control tree of fanout 4 (the
# plugstack's fanout=: 4 levels at 32 nodes; the default 32 makes a star).
# Asserts: the job completed and its script ran a task on every node that
# found the image; a byte-identical copy (cmp against the source) owned by
# the job user on all 32 nodes; the agents' debug lines show the tree
# (node 0: "tree of 32 nodes, fanout 4, depth 0 of 4 levels", a node at
# depth 3); no drain; nothing left (runtime state, temp files, lock files
# other than DST's own, stagehand processes, control-plane listeners); then
# a second job is a no-op ("all 32 nodes current"; every copy keeps its
# inode). Prints the bring-up, staging and no-op times and the cluster's
# memory (PSS of its processes) idle and during the staging, per node.
# STAGEHAND_TEST_FULL=1 (tests/run.sh --full) only: skipped otherwise.
# SCALE_INNER=1 runs the checks on the current instance (32 nodes or more).
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts run in the node's shell
# shellcheck disable=SC2030,SC2031  # the own instance's environment is its subshell's only, on purpose
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

want_nodes=32
fanout=4
levels=4 # 1 + depth of index 31 in a 4-ary tree: 31 -> 7 -> 1 -> 0
size_mib=${SCALE_SIZE_MIB:-128}
tok=scale$$
tag=scale32.$$

# The PSS (KiB) of every process of instance $1 (its namespaces' processes
# and its munged; slurmctld is in ctl's): the cluster's memory.
cluster_pss() {
    local name=$1 ns p v tot=0
    for ns in /run/netns/"$name"-*; do
        [ -e "$ns" ] || continue
        for p in $(ip netns pids "${ns##*/}" 2>/dev/null); do
            v=$(awk '$1 == "Pss:" {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null)
            tot=$((tot + ${v:-0}))
        done
    done
    p=$(cat "$MINICLUSTER_STATE/pids/munged.pid" 2>/dev/null)
    v=$(awk '$1 == "Pss:" {print $2}' "/proc/${p:-0}/smaps_rollup" 2>/dev/null)
    echo $((tot + ${v:-0}))
}

if [ -z "${SCALE_INNER:-}" ]; then
    [ "${STAGEHAND_TEST_FULL:-0}" = 1 ] || skip "32 nodes run under tests/run.sh --full (STAGEHAND_TEST_FULL=1) only"
    # an instance name is 1-6 letters or digits
    big=${SCALE_NAME32:-$(printf '%.4s' "$(tr -dc 'a-z0-9' <<<"${MINICLUSTER_NAME:-mc}")")32}
    net32=${SCALE_NET32:-${MINICLUSTER_NET%.*}.$(((${MINICLUSTER_NET##*.} + 64) % 256))}
    # the instance, in a subshell (its environment is the instance's)
    own_instance() (
        # the suite's instance's state and Slurm configuration must not leak
        # into this one's (minicluster takes MINICLUSTER_STATE as given)
        unset MINICLUSTER_STATE SLURM_CONF
        export MINICLUSTER_NAME=$big MINICLUSTER_NET=$net32 MINICLUSTER_SHARED=${MINICLUSTER_SHARED}-s32
        # debug: the agents' control-tree lines; fanout 4: a tree of 4
        # levels at 32 nodes; a 1 GiB /nvme (a limit: tmpfs takes what
        # the copies hold)
        export MINICLUSTER_SLURMD_DEBUG=debug MINICLUSTER_PLUGIN_ARGS="fanout=$fanout"
        trap '"$MINICLUSTER" down >/dev/null 2>&1' EXIT
        # a leftover instance of this name with other settings is not reused
        "$MINICLUSTER" down >/dev/null 2>&1
        t0=$(date +%s%N)
        "$MINICLUSTER" up --nodes "$want_nodes" --nvme-size 1g \
            --stack "${MINICLUSTER_STACK:-bookworm}" >/dev/null || exit 1
        echo "bring-up of $want_nodes nodes: $((($(date +%s%N) - t0) / 1000000)) ms"
        eval "$("$MINICLUSTER" env)"
        SCALE_INNER=1 bash "$0"
        rc=$?
        t0=$(date +%s%N)
        "$MINICLUSTER" down >/dev/null 2>&1
        echo "teardown of $want_nodes nodes: $((($(date +%s%N) - t0) / 1000000)) ms"
        exit "$rc"
    )
    own_instance
    exit
fi

k=$(wc -w <<<"$MINICLUSTER_NODES")
[ "$k" -ge "$want_nodes" ] || fail "the instance has $k nodes, not $want_nodes"
nodes=$(tr ' ' '\n' <<<"$MINICLUSTER_NODES" | head -"$want_nodes" | tr '\n' ' ')
nodes=${nodes% }
MINICLUSTER_NODES=$nodes
grep -q "^required .*stagehand\.so.* fanout=$fanout\( \|\$\)" "$MINICLUSTER_STATE/etc/plugstack.conf" ||
    fail "the plugstack has no fanout=$fanout: $(cat "$MINICLUSTER_STATE/etc/plugstack.conf")"

src=$MINICLUSTER_SHARED/$tok.img
dst=/nvme/$tok/img
out=$MINICLUSTER_SHARED/$tok.out
cleanup() {
    local j n
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    for n in $nodes; do on_node "$n" rm -rf "/nvme/$tok" 2>/dev/null; done
    rm -f "$src" "$out"
}
trap cleanup EXIT
make_user_file "$src" "$size_mib" || fail "cannot create $src"
pss_idle=$(cluster_pss "$MINICLUSTER_NAME")

# submit -> job id. The script's step runs one task on every node; each
# compares its node's copy with the source.
submit() {
    rm -f "$out"
    as_user sbatch --parsable -J "$tag" -N"$want_nodes" -w "$(tr ' ' ',' <<<"$nodes")" -o "$out" \
        --stage-verbose --stage-image="$src:$dst" \
        --wrap "srun -N$want_nodes -n$want_nodes sh -c 'cmp -s $dst $src && echo same-\$SLURMD_NODENAME' && echo script-ran"
}

# The seconds from job @1's field @2 (SubmitTime, StartTime) to its
# EndTime (Slurm's, whole seconds: the poll below would add its own delay).
job_secs() {
    local j f e
    j=$(scontrol -o show job "$1")
    f=$(grep -oE "$2=[^ ]+" <<<"$j" | cut -d= -f2)
    e=$(grep -oE 'EndTime=[^ ]+' <<<"$j" | cut -d= -f2)
    echo $(($(date -d "$e" +%s) - $(date -d "$f" +%s)))
}

# run_job WHAT -> sets id, wall (s, submission to the job's end: its
# script's exit), done_ms (to the end of its completion, every node's
# epilog, as polled) and pss_peak (KiB, sampled in the background);
# asserts the job completed, its script ran and every node's task found
# the copy.
run_job() {
    local t0 st n sampler peakf
    for n in $nodes; do offs[$n]=$(log_offset "$n"); done
    peakf=$(mktemp)
    (
        peak=0
        while :; do
            p=$(cluster_pss "$MINICLUSTER_NAME")
            [ "$p" -le "$peak" ] || { peak=$p; echo "$peak" >"$peakf"; }
            sleep 0.5
        done
    ) &
    sampler=$!
    t0=$(date +%s%N)
    id=$(submit) || { kill "$sampler"; fail "$1: sbatch: $id"; }
    st=""
    for _ in $(seq 1 3000); do
        st=$(scontrol -o show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
        case "$st" in PENDING | CONFIGURING | RUNNING | COMPLETING) ;; *) break ;; esac
        sleep 0.2
    done
    done_ms=$((($(date +%s%N) - t0) / 1000000))
    kill "$sampler"
    wait "$sampler" 2>/dev/null
    pss_peak=$(cat "$peakf")
    pss_peak=${pss_peak:-0}
    rm -f "$peakf"
    wall=$(job_secs "$id" SubmitTime)
    [ "$st" = COMPLETED ] || fail "$1: job $id ended ${st:-GONE}: $(cat "$out" 2>/dev/null)"
    grep -q '^script-ran$' "$out" || fail "$1: the batch script of job $id did not run: $(cat "$out")"
    for n in $nodes; do
        grep -qx "same-$n" "$out" || fail "$1: the task on $n did not find a copy of the source at $dst: $(cat "$out")"
    done
}

# Everything a finished staging must leave on every node: DST a byte-for-
# byte copy of the source owned by the job user, no temp file, no lock file
# but DST's own, no runtime state of job $1, no stagehand process, no
# control-plane listener. Waits up to 60 s for the epilogs. Prints one
# "node: what" line per problem.
leftovers() {
    local n
    for n in $nodes; do
        on_node "$n" sh -c '
            n=$1 dst=$2 src=$3 job=$4 user=$5 lo=$6 hi=$7
            cmp -s "$dst" "$src" || echo "$n: $dst is not a copy of $src"
            [ "$(stat -c %U "$dst" 2>/dev/null)" = "$user" ] || echo "$n: $dst not owned by $user"
            ls -A "${dst%/*}" | grep -vxF -e "${dst##*/}" -e ".${dst##*/}.lock" | sed "s|^|$n: left in ${dst%/*}: |"
            ls /run/stagehand 2>/dev/null | grep -E "^$job(\$|\\.)" | sed "s|^|$n: runtime state: |"
            for name in stagehand-stage sh-sentinel stagehand-agent stagehand-bcast stagehand-wait; do
                pgrep --ns $$ --nslist net -x "$name" | sed "s|^|$n: process $name |"
            done
            ss -Hltn 2>/dev/null | awk -v lo="$lo" -v hi="$hi" -v n="$n" \
                "{ p = \$4; sub(/.*:/, \"\", p); if (p + 0 >= lo && p + 0 < hi) print n \": listening on \" \$4 }"
            true' sh "$n" "$dst" "$src" "$2" "$MINICLUSTER_USER" 300 500
    done
}
assert_clean() { # what job
    local left=""
    for _ in $(seq 1 30); do
        left=$(leftovers "$1" "$2")
        [ -z "$left" ] && return 0
        sleep 2
    done
    fail "$1 (job $2): $(head -20 <<<"$left")"
}

declare -A offs ino
# 1. the staging to 32 nodes
run_job "staging"
stage_id=$id stage_wall=$wall stage_done=$done_ms stage_peak=$pss_peak
summary=$(grep -E "^stagehand: $dst: " "$out" || true)
grep -qE "^stagehand: $dst: $want_nodes copied, 0 current of $want_nodes nodes; " <<<"$summary" ||
    fail "staging: job $id's summary is not a copy to all $want_nodes nodes: $(cat "$out")"
# the control tree's shape, from the agents' debug lines (node i's parent
# is (i-1)/fanout)
first=${nodes%% *}
last=${nodes##* }
log_since "$first" "${offs[$first]}" | grep -q "job=$id node=$first .*tree of $want_nodes nodes, fanout $fanout, depth 0 of $levels levels" ||
    fail "node 0 ($first) logged no control tree of $levels levels, fanout $fanout: $(log_since "$first" "${offs[$first]}" | grep -E 'control tree' | head -3)"
log_since "$last" "${offs[$last]}" | grep -q "job=$id node=$last .*tree of $want_nodes nodes, fanout $fanout, depth $((levels - 1)) of $levels levels" ||
    fail "the last node ($last) is not at depth $((levels - 1)): $(log_since "$last" "${offs[$last]}" | grep -E 'control tree' | head -3)"
assert_no_drain
assert_clean "staging" "$id"
echo "staging of $size_mib MiB to $want_nodes nodes (fanout $fanout, $levels levels): job $id, submission to end $stage_wall s (to the last epilog $stage_done ms); ${summary#stagehand: }"

# 2. the same again: every node is current, nothing is copied
for n in $nodes; do ino[$n]=$(on_node "$n" stat -c %i "$dst"); done
run_job "no-op"
noop_wall=$wall noop_done=$done_ms
# the batch node finds its copy current and the job starts at once; every
# other node checks its own before the step's task starts there
# (doc/design.md §2): no copy anywhere (same inodes, below)
summary=$(grep -E "^stagehand: $dst: " "$out" || true)
grep -qE "^stagehand: $dst: current on $first, nothing copied there" <<<"$summary" ||
    fail "no-op: job $id was not a no-op on $first: $(cat "$out")"
for n in $nodes; do
    i=$(on_node "$n" stat -c %i "$dst")
    [ "$i" = "${ino[$n]}" ] || fail "no-op: $n's copy was replaced (inode ${ino[$n]} -> $i)"
done
assert_no_drain
assert_clean "no-op" "$id"
echo "no-op at $want_nodes nodes: job $id, submission to end $noop_wall s (to the last epilog $noop_done ms); ${summary#stagehand: }"
echo "memory (PSS of the instance's processes): idle $((pss_idle / 1024)) MiB ($((pss_idle / want_nodes)) KiB a node), peak sampled during the staging $((stage_peak / 1024)) MiB ($((stage_peak / want_nodes)) KiB a node; the copies' tmpfs pages not counted)"
echo "ok: $size_mib MiB staged to $want_nodes nodes through the plugin (job $stage_id) in a control tree of $levels levels, identical copies, no drain, nothing left; the next job was a no-op"

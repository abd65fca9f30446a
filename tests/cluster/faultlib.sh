# shellcheck shell=bash disable=SC2016  # single-quoted scripts run on the nodes, values as arguments
# Helpers of the fault, bad-input, security and soak tests (issue 6), sourced
# after lib.sh. The cluster is shared: these helpers look only at the jobs a
# test started and at node states, never at the whole queue.

# Terminal state of job @1 once it has ended, waiting at most @2 seconds
# (default 60); prints the state ("" when it did not end in time).
wait_job_end() {
    local id=$1 limit=${2:-60} state=""
    local end=$((SECONDS + limit))
    while [ "$SECONDS" -le "$end" ]; do
        state=$(scontrol -o show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
        case "$state" in
            COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED)
                echo "$state"
                return 0 ;;
            "") echo "GONE"; return 0 ;;
        esac
        sleep 0.2
    done
    echo "${state:-UNKNOWN}"
    return 1
}

# Fail when any node is drained, draining, down or failing (doc/design.md §5:
# user errors never drain; node faults only under on_node_fault=drain).
# Waits up to 20 s for a node that is still completing a job of ours.
assert_no_drain() {
    local bad
    for _ in $(seq 1 100); do
        bad=$(sinfo -h -N -o '%N %T' | grep -Ei 'drain|down|fail|maint|unknown|not_responding' || true)
        [ -z "$bad" ] && return 0
        case "$bad" in *[Dd][Rr][Aa][Ii][Nn]*) break ;; esac
        sleep 0.2
    done
    fail "node(s) not healthy: $bad ($(sinfo -h -R))"
}

# Job ids still known to the controller whose name is @1 (finished ones
# included, MinJobAge).
jobs_named() {
    scontrol -o show job 2>/dev/null | grep -E "JobName=$1( |$)" | grep -oE '^JobId=[0-9]+' | cut -d= -f2
}

# Every entry of /run/stagehand on every node that belongs to job @1 or to
# one of its steps; "" when clean.
runtime_left() {
    local n
    for n in $MINICLUSTER_NODES; do
        on_node "$n" sh -c "ls /run/stagehand 2>/dev/null | grep -E '^$1(\$|\\.)' | sed 's|^|$n:|'" || true
    done
}

# Wait up to @2 seconds (default 20) until job @1 left no runtime state; fail
# naming what is left. The epilog removes it after the job ends. @1 may be
# several jobs as one extended pattern, "(12|13|14)": one look per node.
assert_runtime_gone() {
    local left
    for _ in $(seq 1 $((${2:-20} * 5))); do
        left=$(runtime_left "$1")
        [ -z "$left" ] && return 0
        sleep 0.2
    done
    fail "runtime state of job $1 left: $left"
}

# Temp files (".*.stage.*.tmp") under directory @1 on any node, one
# "node:name" per line.
temp_files_in() {
    local n
    for n in $MINICLUSTER_NODES; do
        on_node "$n" sh -c "ls -A '$1' 2>/dev/null | grep -E '^\..*\.stage\..*\.tmp\$' | sed 's|^|$n:|'" || true
    done
}

# PIDs of processes of the test user inside node @1 (its network namespace:
# the nodes share one PID namespace) whose command line matches @2. pgrep
# only finds them; tests signal one recorded pid, never by name.
node_pids() {
    on_node "$1" sh -c 'pgrep --ns $$ --nslist net -u "$1" -f "$2" 2>/dev/null || true' \
        sh "$MINICLUSTER_USER" "$2"
}

# PIDs of processes of any user inside node @1 named exactly @2 (comm).
named_pids() {
    on_node "$1" sh -c 'pgrep --ns $$ --nslist net -x "$1" 2>/dev/null || true' sh "$2"
}
# Wait up to @3 seconds until no node has a process that @1 (node_pids or
# named_pids) finds for pattern @2; prints what is left, "node:pids ...",
# or nothing.
procs_left() {
    local finder=$1 pat=$2 left n p
    for _ in $(seq 1 $(($3 * 5))); do
        left=""
        for n in $MINICLUSTER_NODES; do
            p=$("$finder" "$n" "$pat" | tr '\n' ' ')
            [ -z "$p" ] || left="$left $n:$p"
        done
        [ -z "$left" ] && break
        sleep 0.2
    done
    echo "$left"
}
# The engine processes of a staging to @2 (a unique path part) on node @1:
# the job user's stagehand-bcast whose STAGEHAND_BCAST_SOURCE or _DEST (the
# agent passes the paths in the environment, which root reads) holds @2.
engine_pids() {
    on_node "$1" sh -c '
        for p in $(pgrep --ns $$ --nslist net -u "$1" -x stagehand-bcast 2>/dev/null); do
            tr "\0" "\n" </proc/$p/environ 2>/dev/null |
                grep -q "^STAGEHAND_BCAST_\(SOURCE\|DEST\)=.*$2" && echo "$p"
        done
        true' sh "$MINICLUSTER_USER" "$2"
}

# Bytes the process @2 in node @1 has read (@3 = rchar) or written (wchar)
# so far, from /proc/PID/io; 0 when gone.
proc_io() {
    on_node "$1" awk -v k="$3" '$1 == k":" {print $2}' "/proc/$2/io" 2>/dev/null || echo 0
}

# kill_at_io NODE PID FIELD BYTES [SIGNAL]: inside node NODE, send SIGNAL
# (default KILL; as root) to process PID
# once its /proc/PID/io FIELD (rchar or wchar) reaches BYTES; prints the
# count it had when killed. One loop in the node, polling every 5 ms: a
# poll from the host costs a namespace entry each time, and under load the
# transfer could finish between two polls. Fails when PID is gone before.
kill_at_io() {
    on_node "$1" sh -c '
        pid=$1 field=$2 want=$3 sig=$4 n=0 io=0
        while [ "$n" -lt 4000 ]; do
            io=$(awk -v k="$field" '"'"'$1 == k":" {print $2}'"'"' "/proc/$pid/io" 2>/dev/null) || exit 1
            [ -n "$io" ] || exit 1
            if [ "$io" -ge "$want" ]; then kill -s "$sig" "$pid" && echo "$io" && exit 0; exit 1; fi
            sleep 0.005
            n=$((n + 1))
        done
        kill -s "$sig" "$pid" && echo "$io"' sh "$2" "$3" "$4" "${5:-KILL}"
}

# The first engine pid of a staging to or from @2 (engine_pids) on node @1,
# waiting up to @3 seconds (default 30) for it to appear; "" when none did.
wait_engine_pid() {
    local pid="" end=$((SECONDS + ${3:-30}))
    while [ "$SECONDS" -le "$end" ]; do
        pid=$(engine_pids "$1" "$2" | head -1)
        [ -n "$pid" ] && break
        sleep 0.05
    done
    echo "$pid"
}

# wait_io NODE PID FIELD BYTES: return once process PID in node NODE has
# FIELD (rchar or wchar, /proc/PID/io) at BYTES or more; one loop inside the
# node, polling every 5 ms. Fails when PID ends first or after 30 s.
wait_io() {
    on_node "$1" sh -c '
        for _ in $(seq 1 6000); do
            io=$(awk -v k="$2" '"'"'$1 == k":" {print $2}'"'"' "/proc/$1/io" 2>/dev/null) || exit 1
            [ -n "$io" ] || exit 1
            [ "$io" -ge "$3" ] && exit 0
            sleep 0.005
        done; exit 1' sh "$2" "$3" "$4"
}

# The agent (stagehand-agent) of job @1 on node @2: the one whose parent,
# the plugin's staging process, has the job id in its environment.
agent_of() {
    on_node "$2" sh -c '
        for p in $(pgrep --ns $$ --nslist net -x stagehand-agent); do
            pp=$(ps -o ppid= -p $p | tr -d " ")
            tr "\0" "\n" </proc/$pp/environ 2>/dev/null | grep -qx "SLURM_JOB_ID=$1" && echo $p
        done; true' sh "$1"
}

# Size of @2 in node @1 ("" when missing).
node_size() {
    on_node "$1" stat -c %s "$2" 2>/dev/null || true
}

# md5 of @2 inside node @1 ("" when missing): faster than node_sha for the
# large files of the fault tests (integrity against corruption, not attack).
node_md5() {
    on_node "$1" sh -c "md5sum '$2' 2>/dev/null | cut -d' ' -f1"
}

# shape_links ARGS: `minicluster shape ARGS` for this test, so that a copy
# lasts a known time (size / rate) however fast or loaded the host is: a
# window in which a test acts on a running copy is then certain. A chain runs
# at the pace of its slowest link, so shaping one node (--node nX) slows the
# whole copy. shape_clear (in fault_test_cleanup, or a test's own trap)
# undoes it.
shape_links() {
    "$MINICLUSTER" shape "$@" >/dev/null || return 1
    shaped=1
}
shape_clear() {
    [ -z "${shaped:-}" ] || "$MINICLUSTER" shape --clear >/dev/null
    shaped=""
}

# Make a user-owned source of @2 MiB at @1, mostly a hole (cheap to create)
# with 1 MiB of random data at its start. The engine sends the hole as data,
# but over unshaped links a host with idle cores copies a GiB in a second or
# two: a test that must act while the copy runs shapes the links too
# (shape_links).
make_slow_source() {
    as_user sh -c "truncate -s $2M '$1' && head -c 1048576 /dev/urandom | dd of='$1' conv=notrunc status=none"
}

# On node @1 only (its own mount namespace), put a shell script with body @3
# over the installed program @2: the script is /tmp/<@2's name>.<pid>.wrap
# inside the node. Fails when the node cannot do it or the replacement is
# visible outside the node. Undo with unwrap_on_node @1 @2.
wrap_on_node() {
    local w
    w="/tmp/$(basename "$2").$$.wrap"
    printf '#!/bin/sh\n%s\n' "$3" | on_node "$1" sh -c "cat >'$w' && chmod 755 '$w' && mount --bind '$w' '$2'" ||
        return 1
    [ "$(head -c 2 "$2")" != "#!" ] || { echo "wrap_on_node: $2 replaced outside $1" >&2; return 1; }
}
unwrap_on_node() { # fails when the program could not be restored (umount)
    on_node "$1" sh -c "umount '$2' 2>/dev/null; rc=\$?; rm -f '/tmp/$(basename "$2").$$.wrap'; exit \$rc"
}

# A fault test's names: tok=@1<pid>, its jobs' name tag=@2.<pid>, dst
# /nvme/$tok/img, src /shared/$tok.img, out /shared/$tok.out; and an exit
# trap that thaws $thaw_node (when set), cancels the test's jobs and removes
# src, out, /shared/$tok.* and /nvme/$tok on every node.
fault_test_files() {
    # shellcheck disable=SC2034  # used by the sourcing test
    tok=$1$$ tag=$2.$$ dst=/nvme/$1$$/img src=$MINICLUSTER_SHARED/$1$$.img out=$MINICLUSTER_SHARED/$1$$.out
    trap fault_test_cleanup EXIT
}
fault_test_cleanup() {
    local j n
    [ -z "${thaw_node:-}" ] || "$MINICLUSTER" thaw "$thaw_node" 2>/dev/null
    shape_clear
    [ -z "${held_node:-}" ] || "$MINICLUSTER" release-rpcs
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -f "$src" "$out" "$MINICLUSTER_SHARED/$tok".*
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}

# PMIx files of job @1 (its namespaces are "stagehand.<job>.<random>")
# left in any node's /tmp, one "node:name" per line: PMIx 5's gds/shmem2
# segments ("pmix-gds-shmem2.<node>-stagehand.<job>.*") belong in the job's
# runtime directory, never in /tmp.
pmix_files_left() {
    local n
    for n in $MINICLUSTER_NODES; do
        on_node "$n" sh -c "ls -a /tmp 2>/dev/null | grep -E '^pmix.*stagehand\\.$1\\.' | sed 's|^|$n:|'" || true
    done
}

# After job @1's staging of $dst (token $tok) was stopped (@3: how, for the
# messages): within 30 s no engine of it runs, no temp file is left and its
# runtime state is gone; no PMIx file of it is in a node's /tmp; each node's
# DST is absent or whole (md5 @2); no node is drained.
assert_stopped_staging_clean() {
    local id=$1 want=$2 what=$3 left n got
    left=$(procs_left engine_pids "$tok" 30)
    [ -z "$left" ] || fail "engines still run 30 s after $what: $left"
    assert_runtime_gone "$id" 30
    left=$(pmix_files_left "$id")
    [ -z "$left" ] || fail "PMIx files of job $id left in /tmp after $what: $left"
    for n in $MINICLUSTER_NODES; do
        got=$(node_md5 "$n" "$dst")
        [ -z "$got" ] || [ "$got" = "$want" ] || fail "$n: a partial DST is visible after $what"
    done
    left=$(temp_files_in "/nvme/$tok")
    [ -z "$left" ] || fail "temp files left after $what: $left"
    assert_no_drain
}

# The cluster's plugstack.conf, which a test may change for its own jobs
# (plugstack_save, plugstack_add, plugstack_restore).
plugstack=$MINICLUSTER_STATE/etc/plugstack.conf
plugstack_saved=""

# Restart every node's slurmd: a slurmd reads plugstack.conf when it starts.
# The nodes at once (each restart waits some 2 s for its node to be back,
# more on a loaded host; a test changes and restores the plugstack, so one
# after the other cost 12 s and more a test); fails when any failed.
restart_slurmds() {
    local n rc=0 pids=()
    for n in $MINICLUSTER_NODES; do
        "$MINICLUSTER" restart-slurmd "$n" >/dev/null &
        pids+=("$!")
    done
    for n in "${pids[@]}"; do wait "$n" || rc=1; done
    return "$rc"
}

# Keep plugstack.conf as it is for plugstack_restore; call it before a change.
plugstack_save() {
    plugstack_saved=$(mktemp) && cp -p "$plugstack" "$plugstack_saved"
}

# Put the saved plugstack.conf back and restart the slurmds if it had been
# changed (in a test's cleanup trap).
plugstack_restore() {
    [ -n "$plugstack_saved" ] || return 0
    if ! cmp -s "$plugstack_saved" "$plugstack"; then
        cp -p "$plugstack_saved" "$plugstack"
        restart_slurmds
    fi
    rm -f "$plugstack_saved"
    plugstack_saved=""
}

# plugstack_add ARGS: append plugin arguments (e.g. on_node_fault=drain) to
# stagehand's line and restart the slurmds; fails the test when it cannot.
plugstack_add() {
    grep -q '^required .*stagehand\.so' "$plugstack" || fail "unexpected $plugstack: $(cat "$plugstack")"
    sed -i "s|^\(required .*stagehand\.so.*\)\$|\1 $*|" "$plugstack"
    grep -qF -- " $*" "$plugstack" || fail "could not add '$*' to $plugstack"
    restart_slurmds || fail "cannot restart the slurmds"
}

# Submit, as the test user, a job of $k nodes named $tag with output $out
# that stages @3 (SRC:DST) and runs @4 (default: echo script-ran), wait up
# to @2 seconds and fail unless it ended in state @1; sets job_id.
stage_job_ends() { # state seconds image [script]
    local st
    # shellcheck disable=SC2154 # k, tag and out are the calling test's
    job_id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$3" \
                 --wrap "${4:-echo script-ran}") || fail "sbatch: $job_id"
    st=$(wait_job_end "$job_id" "$2")
    [ "$st" = "$1" ] || fail "job $job_id ended $st, expected $1: $(cat "$out" 2>/dev/null)"
}

# After a kill (@3: what, for the messages) in job @1's staging: wait up to
# @2 seconds for the job to end, fail unless it FAILED without running its
# batch script ($out must not say script-ran); prints how long it took.
assert_failed_after_kill() { # id seconds what
    local st t0=$SECONDS
    st=$(wait_job_end "$1" "$2")
    [ "$st" = FAILED ] || fail "$3: job $1 ended $st within $2 s of the kill: $(cat "$out" 2>/dev/null)"
    echo "$3: job $1 FAILED after $((SECONDS - t0)) s"
    ! grep -q script-ran "$out" || fail "$3: job $1: the batch script ran without its image"
}

# Wait up to 20 s until node @1's slurmd log from offset @2 (log_offset) has
# a line matching the grep pattern @3; fails (returns 1) when none came.
wait_log_line() { # node offset pattern
    for _ in $(seq 1 100); do
        log_since "$1" "$2" | grep -q "$3" && return 0
        sleep 0.2
    done
    return 1
}

# Access lines of the cluster registry's log @1 (minicluster registry) since
# byte offset @2 (registry_log_offset): "client method path status bytes".
registry_access() { # log offset
    tail -c +"$(($2 + 1))" "$1" | grep -E '^[0-9.]+ - - \[' | awk '{print $1, substr($6, 2), $7, $9, $10}'
}
registry_log_offset() { stat -c %s "$1"; }

# wait_drained TRIES: the drained nodes, each followed by a space ("n2 "),
# polling every 0.2 s up to TRIES times until there is one; "" when none.
wait_drained() {
    local drained=""
    for _ in $(seq 1 "$1"); do
        drained=$(sinfo -h -N -o '%N %T' | awk '$2 ~ /drain/ { print $1 }' | sort -u | tr '\n' ' ')
        [ -n "$drained" ] && break
        sleep 0.2
    done
    printf '%s' "$drained"
}

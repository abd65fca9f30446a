#!/usr/bin/env bash
# Issue 35 item 2: repair around a dead node (doc/design.md §5, stagehand(8)
# FAILURE POLICY). A node that is not the reader dies in the middle of the
# copy; every other node still receives, verifies and publishes its copy;
# the job fails naming the dead node; nothing partial, no temp file and no
# lock file without DST is left anywhere; no node drains under the default
# policy; the next job copies to the dead node only (the others' copies are
# current: same inode before and after).
#   A  the middle node's engine (node 1 of n0..n2) SIGKILLed at ~50 %
#   B  the middle node's agent SIGKILLed at ~50 % (its host process and
#      engine go with it)
#   C  STAGEHAND_TEST_FULL=1 only: the middle node's link down at ~50 %,
#      up again once the others copy without it
# The time to finish with the fault is printed, and without it under
# STAGEHAND_TEST_FULL=1 (a staging of its own, a measurement).
# STAGEHAND_TEST_FULL=1 (tests/run.sh --full) also: A at N=8 (the 4th node)
# on an instance of its own (8 nodes), brought up and down here: 7 verified
# copies; and D, under on_node_fault=drain, the middle node's engine crashes
# at ~50 % (SIGSEGV from root, as the kernel's would be: a node fault of its
# own; a SIGKILL is not one, a job's user can send it): it drains (a prolog
# error) and no other, Slurm requeues and holds the job, the others publish
# verified copies; after the node is resumed and the job released, the job
# copies to that node only and completes.
# Cases F06, F21, F22.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts run in the node's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

tok=frepair$$
tag=fault-repair.$$
size_mib=${REPAIR_SIZE_MIB:-384}
size=$((size_mib * 1048576))
errors=()
secs=0
src_md5=""

cleanup_nodes() {
    shape_clear
    plugstack_restore
    for n in $MINICLUSTER_NODES; do
        sinfo -h -N -n "$n" -o '%T' | grep -q drain && scontrol update nodename="$n" state=resume
    done
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}

# A source with random data at its start and end and a hole between: a copy
# that takes seconds, and a wrong byte anywhere shows in the md5.
make_source() {
    as_user sh -c "truncate -s ${size_mib}M '$1' &&
        head -c 1048576 /dev/urandom | dd of='$1' conv=notrunc status=none &&
        head -c 1048576 /dev/urandom | dd of='$1' bs=1M seek=$((size_mib - 1)) conv=notrunc status=none"
}

# submit SRC DST NODES OUT -> job id. The script runs a step on every node,
# whose tasks wait for their node's copy (the batch script itself waits for
# the batch node's only, doc/design.md §2 step 8).
submit() {
    local k
    k=$(wc -w <<<"$3")
    rm -f "$4"
    as_user sbatch --parsable -J "$tag" -N"$k" -w "$(tr ' ' ',' <<<"$3")" \
        -o "$4" --stage-image="$1:$2" --wrap "srun -N$k -n$k true && echo script-ran"
}

# The wall time of job @1 (its start to its end, Slurm's seconds).
job_secs() {
    local s e
    s=$(scontrol -o show job "$1" | grep -oE 'StartTime=[^ ]+' | cut -d= -f2)
    e=$(scontrol -o show job "$1" | grep -oE 'EndTime=[^ ]+' | cut -d= -f2)
    echo $(($(date -d "$e" +%s) - $(date -d "$s" +%s)))
}

# baseline SRC DST NODES OUT: a staging without a fault; its seconds into
# $secs.
baseline() {
    local id st
    id=$(submit "$1" "$2" "$3" "$4") || fail "sbatch: $id"
    st=$(wait_job_end "$id" 180)
    [ "$st" = COMPLETED ] || fail "the staging without a fault (job $id) ended $st: $(cat "$4")"
    secs=$(job_secs "$id")
}

# wait_left_behind VICTIM DST: what a failed staging of DST left behind,
# waiting up to 10 s: temp files on any node, and the lock file beside DST
# on the dead node VICTIM (it has no DST); "" when nothing.
wait_left_behind() {
    local victim=$1 dst=$2 left=""
    for _ in $(seq 1 50); do
        left=$(temp_files_in "/nvme/$tok"; on_node "$victim" sh -c "ls -A '${dst%/*}' 2>/dev/null | grep -Fx '.${dst##*/}.lock' | sed 's|^|$victim:|'" || true)
        [ -z "$left" ] && break
        sleep 0.2
    done
    printf '%s' "$left"
}

# repair_case WHAT SRC DST NODES VICTIM OUT: stage SRC to DST on NODES, kill
# VICTIM (WHAT: engine, agent or link) once its engine wrote half of the
# file, and check the outcome. Appends to errors; the job's seconds into
# $secs.
repair_case() {
    local what=$1 src=$2 dst=$3 nodes=$4 victim=$5 out=$6
    local id pid io st n got want left dev="" apid reader first p half
    want=$src_md5
    # half of the copy in the victim's writes (/proc/PID/io wchar): under
    # Open MPI 4.1 (bookworm) a node that forwards (not the last of the
    # chain) writes each byte twice, to DST's temp file and to the next
    # node's socket (writev); Open MPI 5's socket sends are not counted
    half=$((size / 2))
    [ "$victim" = "${nodes##* }" ] || [ "${MINICLUSTER_STACK:-bookworm}" != bookworm ] ||
        half=$size
    # The victim's link at 200 Mbit/s for a kill: the chain runs at its pace,
    # so half of the copy takes seconds however loaded the host is (an
    # unshaped sparse source can be copied before the kill); the copy around
    # it runs over the others' unshaped links. (Not for the link case, which
    # takes the link itself down.)
    if [ "$what" != link ]; then
        shape_links --link 200mbit --node "$victim" || fail "cannot shape $victim's link"
    fi
    id=$(submit "$src" "$dst" "$nodes" "$out") || fail "sbatch: $id"
    pid=$(wait_engine_pid "$victim" "$tok" 90)
    [ -n "$pid" ] || fail "$what: no engine on $victim (job $id: $(cat "$out" 2>/dev/null))"
    case "$what" in
        engine)
            io=$(kill_at_io "$victim" "$pid" wchar "$half") ||
                fail "$what: the engine on $victim ended before half of the file (job $id)" ;;
        agent)
            apid=$(agent_of "$id" "$victim" | head -1)
            [ -n "$apid" ] || fail "$what: no agent of job $id on $victim"
            # half of the file in the engine, then kill the agent: one loop
            # inside the node (a second call could come after the copy)
            io=$(on_node "$victim" sh -c '
                for _ in $(seq 1 6000); do
                    io=$(awk -v k=wchar '"'"'$1 == k":" {print $2}'"'"' "/proc/$1/io" 2>/dev/null) || exit 1
                    [ -n "$io" ] || exit 1
                    [ "$io" -ge "$2" ] && kill -9 "$3" && echo "$io" && exit 0
                    sleep 0.005
                done; exit 1' sh "$pid" "$half" "$apid") ||
                fail "$what: could not kill agent $apid on $victim at half of the copy (job $id)" ;;
        link)
            dev=$(on_node "$victim" sh -c "ip -o route get $(scontrol show node "${nodes%% *}" | grep -oE 'NodeAddr=[^ ]+' | cut -d= -f2) 2>/dev/null | grep -oE 'dev [^ ]+' | cut -d' ' -f2")
            dev=${dev:-eth0}
            wait_io "$victim" "$pid" wchar "$half" || fail "$what: the engine on $victim ended before half of the file (job $id)"
            io=$(proc_io "$victim" "$pid" wchar)
            on_node "$victim" ip link set "$dev" down || fail "$what: cannot take $victim's $dev down"
            # up again once the others copy without it (a new engine on the
            # reader): a longer outage makes slurmctld set the node down
            reader=${nodes%% *}
            first=$(engine_pids "$reader" "$tok" | head -1)
            for _ in $(seq 1 600); do
                p=$(engine_pids "$reader" "$tok" | head -1)
                [ -n "$p" ] && [ "$p" != "$first" ] && break
                sleep 0.1
            done
            on_node "$victim" ip link set "$dev" up || fail "cannot bring $victim's $dev up" ;;
    esac
    echo "$what: killed on $victim at $((${io:-0} * 50 / half)) % of the copy (wchar $((${io:-0} / 1048576)) MiB, job $id)"
    st=$(wait_job_end "$id" 150)
    shape_clear
    secs=$(job_secs "$id")
    if [ "$st" != FAILED ]; then
        errors+=("$what: job $id ended $st, expected FAILED: $(cat "$out" 2>/dev/null)")
        [ "$st" = COMPLETED ] || scancel "$id"
        return
    fi
    grep -q "stagehand: --stage-image failed: image $dst: .*$victim" "$out" ||
        errors+=("$what: the message does not name $victim: $(cat "$out")")
    grep -q "the copy went on without it" "$out" ||
        errors+=("$what: the message does not say the copy went on around $victim: $(cat "$out")")
    ! grep -q script-ran "$out" || errors+=("$what: the batch script ran without its image")
    echo "$what: $(grep 'stagehand:' "$out" | head -1)"
    for n in $nodes; do
        got=$(node_md5 "$n" "$dst")
        if [ "$n" = "$victim" ]; then
            [ -z "$got" ] || errors+=("$what: $n (dead) has DST after the failure")
        else
            [ "$got" = "$want" ] || errors+=("$what: $n: DST is '${got:-absent}', expected a verified copy $want")
        fi
    done
    # nothing left behind: no temp file anywhere; the dead node has no lock
    # file (no DST), the others only the one beside their DST
    left=$(wait_left_behind "$victim" "$dst")
    [ -z "$left" ] || errors+=("$what: left behind: $left")
    assert_runtime_gone "$id" 60
    assert_no_drain
}

# next_copies_one DST SRC NODES VICTIM OUT: the next job stages to VICTIM
# only: the others keep their copies (same inode), VICTIM gets it.
next_copies_one() {
    local dst=$1 src=$2 nodes=$3 victim=$4 out=$5 id st n before after got want
    declare -A ino
    want=$src_md5
    for n in $nodes; do ino[$n]=$(on_node "$n" stat -c %i "$dst" 2>/dev/null); done
    id=$(submit "$src" "$dst" "$nodes" "$out") || fail "sbatch: $id"
    st=$(wait_job_end "$id" 120)
    [ "$st" = COMPLETED ] || fail "the next job $id ended $st: $(cat "$out")"
    grep -q script-ran "$out" || fail "the next job's script did not run: $(cat "$out")"
    for n in $nodes; do
        got=$(node_md5 "$n" "$dst")
        [ "$got" = "$want" ] ||
            fail "$n: DST is '${got:-absent}' after the next job $id, expected a copy of $src: $(cat "$out")"
        [ "$n" = "$victim" ] && continue
        before=${ino[$n]}
        after=$(on_node "$n" stat -c %i "$dst")
        [ "$before" = "$after" ] || fail "the next job copied to $n again (inode $before -> $after): it should copy to $victim only"
    done
    [ -z "$(temp_files_in "/nvme/$tok")" ] || fail "temp files after the next job"
    assert_no_drain
    echo "next job $id copied to $victim only: $(job_secs "$id") s"
}

# drain_case SRC DST NODES VICTIM OUT: case D, the engine of VICTIM crashes
# (SIGSEGV) at half of the copy under on_node_fault=drain (set here, restored
# on exit).
drain_case() {
    local src=$1 dst=$2 nodes=$3 victim=$4 out=$5 want id pid io drained reason st n
    local half=$((size / 2)) off got left
    declare -A ino
    want=$src_md5
    [ "$victim" = "${nodes##* }" ] || [ "${MINICLUSTER_STACK:-bookworm}" != bookworm ] ||
        half=$size
    plugstack_save
    plugstack_add on_node_fault=drain
    shape_links --link 200mbit --node "$victim" || fail "cannot shape $victim's link"
    off=$(log_offset "$victim")
    id=$(submit "$src" "$dst" "$nodes" "$out") || fail "sbatch: $id"
    pid=$(wait_engine_pid "$victim" "$tok" 90)
    [ -n "$pid" ] || fail "drain: no engine on $victim (job $id: $(cat "$out" 2>/dev/null))"
    io=$(kill_at_io "$victim" "$pid" wchar "$half" SEGV) ||
        fail "drain: the engine on $victim ended before half of the file (job $id)"
    echo "drain: engine on $victim crashed (SIGSEGV) at $((io * 50 / half)) % of the copy (job $id)"
    drained=$(wait_drained 600)
    shape_clear
    [ "$drained" = "$victim " ] || errors+=("drain: drained '${drained}', expected only $victim ($(sinfo -h -R))")
    reason=$(sinfo -h -R -n "$victim" -o '%E')
    case "$reason" in *[Pp]rolog*) ;; *) errors+=("drain: $victim drained for '$reason', expected a prolog error") ;; esac
    # Slurm requeues a batch job whose prolog failed and holds it
    for _ in $(seq 1 300); do
        st=$(scontrol -o show job "$id" | grep -oE 'JobState=[A-Z_]+ Reason=[^ ]+')
        case "$st" in *PENDING*[Hh]eld*) break ;; esac
        sleep 0.2
    done
    case "$st" in *PENDING*[Hh]eld*) ;; *) errors+=("drain: job $id is '$st', expected requeued and held") ;; esac
    ! grep -q script-ran "$out" 2>/dev/null || errors+=("drain: the batch script ran without its image")
    log_since "$victim" "$off" | grep -aq "stagehand: job $id user .*staging failed on $victim: .*$victim" ||
        errors+=("drain: no failure line naming $victim in its slurmd log")
    # the others' prologs went on around the dead node: verified copies
    for n in $nodes; do
        [ "$n" = "$victim" ] && continue
        for _ in $(seq 1 300); do
            got=$(node_md5 "$n" "$dst")
            [ "$got" = "$want" ] && break
            sleep 0.2
        done
        [ "$got" = "$want" ] || errors+=("drain: $n: DST is '${got:-absent}', expected a verified copy")
        ino[$n]=$(on_node "$n" stat -c %i "$dst" 2>/dev/null)
    done
    [ -z "$(node_md5 "$victim" "$dst")" ] || errors+=("drain: $victim (dead) has DST")
    left=$(wait_left_behind "$victim" "$dst")
    [ -z "$left" ] || errors+=("drain: left behind: $left")
    [ ${#errors[@]} -eq 0 ] || { scancel "$id"; return; }
    echo "drain: only $victim drained ($reason), job $id requeued and held, the others verified their copies"
    # the site resumes the node and releases the job: it copies to the
    # resumed node only and runs
    scontrol update nodename="$victim" state=resume || fail "cannot resume $victim"
    scontrol release "$id" || fail "cannot release job $id"
    st=$(wait_job_end "$id" 180)
    [ "$st" = COMPLETED ] || { errors+=("drain: job $id ended $st after its release: $(cat "$out")"); return; }
    grep -q script-ran "$out" || errors+=("drain: the released job's script did not run: $(cat "$out")")
    for n in $nodes; do
        got=$(node_md5 "$n" "$dst")
        [ "$got" = "$want" ] || errors+=("drain: $n: DST is '${got:-absent}' after the release")
        [ "$n" = "$victim" ] && continue
        [ "${ino[$n]}" = "$(on_node "$n" stat -c %i "$dst")" ] ||
            errors+=("drain: the released job copied to $n again: it should copy to $victim only")
    done
    assert_no_drain
    plugstack_restore
    echo "drain: after the resume and release, job $id copied to $victim only and completed"
}

run_suite() { # NODES (first: the reader) VICTIM CASES...
    local nodes=$1 victim=$2 src out t0
    shift 2
    src=$MINICLUSTER_SHARED/$tok.src
    out=$MINICLUSTER_SHARED/$tok.out
    make_source "$src" || fail "cannot create $src"
    # SRC's md5, once: each case compares every node's copy with it
    src_md5=$(md5sum "$src" | cut -d' ' -f1)
    # the time without a fault, for comparison: a measurement (that a
    # staging completes every other test asserts), under --full only
    t0="not measured (--full)"
    if [ "${STAGEHAND_TEST_FULL:-0}" = 1 ]; then
        baseline "$src" "/nvme/$tok/base" "$nodes" "$out"
        t0="$secs s"
        echo "N=$(wc -w <<<"$nodes") $size_mib MiB without a fault: $t0"
    fi
    for c in "$@"; do
        if [ "$c" = drain ]; then
            drain_case "$src" "/nvme/$tok/$c" "$nodes" "$victim" "$out"
            [ ${#errors[@]} -gt 0 ] && break
            continue
        fi
        repair_case "$c" "$src" "/nvme/$tok/$c" "$nodes" "$victim" "$out"
        echo "N=$(wc -w <<<"$nodes") $size_mib MiB, $c of $victim killed at ~50 %: $secs s (without a fault: $t0)"
        [ ${#errors[@]} -gt 0 ] && break
        next_copies_one "/nvme/$tok/$c" "$src" "$nodes" "$victim" "$out"
    done
    rm -f "$src" "$out"
}

if [ "${STAGEHAND_TEST_FULL:-0}" = 1 ] && [ -z "${REPAIR_INNER:-}" ]; then
    # N=8 on an instance of its own, then the default cases on this one.
    # an instance name is 1-6 letters or digits
    big=${REPAIR_NAME8:-$(printf '%.4s' "$(tr -dc 'a-z0-9' <<<"${MINICLUSTER_NAME:-mc}")")r8}
    net8=${REPAIR_NET8:-${MINICLUSTER_NET%.*}.$((${MINICLUSTER_NET##*.} + 128))}
    (
        # the suite's instance's state and Slurm configuration must not leak
        # into this one's (minicluster takes MINICLUSTER_STATE as given)
        unset MINICLUSTER_STATE SLURM_CONF
        export MINICLUSTER_NAME=$big MINICLUSTER_NET=$net8 MINICLUSTER_SHARED=${MINICLUSTER_SHARED}-r8
        trap '"$MINICLUSTER" down >/dev/null 2>&1' EXIT
        "$MINICLUSTER" up --nodes 8 --stack "${MINICLUSTER_STACK:-bookworm}" >/dev/null || exit 1
        eval "$("$MINICLUSTER" env)"
        REPAIR_INNER=8 bash "$0"
    ) || errors+=("N=8 variant failed (see above)")
fi

trap cleanup_nodes EXIT
if [ "${REPAIR_INNER:-}" = 8 ]; then
    k=$(wc -w <<<"$MINICLUSTER_NODES")
    [ "$k" -ge 8 ] || fail "the N=8 instance has $k nodes"
    nodes=$(tr ' ' '\n' <<<"$MINICLUSTER_NODES" | head -8 | tr '\n' ' ')
    nodes=${nodes% }
    read -r _ _ _ victim _ <<<"$nodes"
    run_suite "$nodes" "$victim" engine
else
    k=$(wc -w <<<"$MINICLUSTER_NODES")
    [ "$k" -ge 3 ] || skip "needs 3 nodes"
    read -r n0 n1 n2 _ <<<"$MINICLUSTER_NODES"
    cases=${REPAIR_CASES:-engine agent}
    [ "${STAGEHAND_TEST_FULL:-0}" = 1 ] && cases=${REPAIR_CASES:-engine agent link drain}
    # shellcheck disable=SC2086  # a list of cases
    run_suite "$n0 $n1 $n2" "$n1" $cases
fi

if [ ${#errors[@]} -gt 0 ]; then
    printf 'FAIL: %s\n' "${errors[@]}"
    exit 1
fi
echo "ok (${cases:-engine}): a dead node's engine, agent or link: the others got verified copies, the job failed naming it (under on_node_fault=drain, a crashed engine: only its node drained, the job requeued), no other drain, the next job copied to it only"

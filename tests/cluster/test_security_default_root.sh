#!/usr/bin/env bash
# Security issue 30 item 3: nothing a user does may count as a node fault.
# On a node where the default destination's root directory (/nvme/stage,
# default_dest=<allowed root>/stage/%u) does not exist yet, another user
# (the attacker, MINICLUSTER_OTHER_USER) makes it first. Under
# on_node_fault=drain: the victim's job that stages to the default
# destination fails promptly with a message naming /nvme/stage and the
# attacker; the slurmd log has the line for the administrator; no node
# drains; the attacker's own next default-destination job fails the same way
# and drains nothing either. A slurmd start logs the attacker's directory for
# the administrator (and leaves it), and once it is removed a slurmd start
# makes /nvme/stage, root-owned 0755, before any job runs.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

node=$(echo "$MINICLUSTER_NODES" | awk '{ print $NF }')
attacker=$MINICLUSTER_OTHER_USER
auid=$(id -u "$attacker") || skip "no user $attacker"
tok=sdr$$
tag=sec-droot.$$
src=$MINICLUSTER_SHARED/$tok.img
asrc=$MINICLUSTER_SHARED/$tok.other.img
out=$MINICLUSTER_SHARED/$tok.out
aout=$MINICLUSTER_SHARED/$tok.other.out
aside=/nvme/.stage.$tok
moved=""
plugstack_save
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    # the node's own /nvme/stage (other tests' default destinations) back
    [ -z "$moved" ] || on_node "$node" sh -c "rm -rf /nvme/stage && { [ ! -e '$aside' ] || mv '$aside' /nvme/stage; }"
    plugstack_restore
    scontrol update nodename="$node" state=resume 2>/dev/null
    rm -f "$src" "$asrc" "$out" "$aout"
}
trap cleanup EXIT

# job_fails USER OUT SRC NODES: submit a default-destination job as USER on
# the nodes NODES (a list with $node) and wait for its end (at most 120 s),
# or a drain of $node (state DRAINED); prints the job id, its state and the
# seconds taken.
job_fails() {
    local who=$1 o=$2 s=$3 nodes=$4 id t0 st bad
    id=$(run_as "$who" sbatch --parsable -J "$tag" -N"$(tr ',' '\n' <<<"$nodes" | wc -l)" \
             -w "$nodes" -o "$o" --stage-image="$s" --wrap 'echo script-ran') ||
        fail "sbatch as $who: $id"
    t0=$SECONDS
    st=""
    while [ $((SECONDS - t0)) -lt 120 ]; do
        bad=$(sinfo -h -N -n "$node" -o '%T' | grep -i drain || true)
        if [ -n "$bad" ]; then st=DRAINED; break; fi
        st=$(scontrol -o show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
        case "$st" in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL) break ;; esac
        sleep 0.5
    done
    echo "$id $st $((SECONDS - t0))"
}

plugstack_add on_node_fault=drain
make_user_file "$src" 1 || fail "cannot create $src"
as_other sh -c "head -c 65536 /dev/urandom >'$asrc' && chmod 0644 '$asrc'" || fail "cannot create $asrc"

# The default root is missing on $node (moved aside as root); the attacker
# makes it before root does.
moved=1
on_node "$node" sh -c "[ ! -e /nvme/stage ] || mv /nvme/stage '$aside'" || fail "cannot move /nvme/stage aside"
on_node_as_other "$node" mkdir -m 0755 /nvme/stage || fail "$attacker cannot make /nvme/stage"
[ "$(on_node "$node" stat -c %U /nvme/stage)" = "$attacker" ] || fail "/nvme/stage is not $attacker's"

# The victim's default-destination job, on every node: the others do not
# wait for $node (join_timeout) but fail with its reason.
off=$(log_offset "$node")
read -r id st secs < <(job_fails "$MINICLUSTER_USER" "$out" "$src" "$(tr ' ' ',' <<<"$MINICLUSTER_NODES")")
[ "$st" != DRAINED ] || fail "$node drained by the victim's job $id: $(sinfo -h -R -n "$node")"
[ "$st" = FAILED ] || fail "the victim's job $id ended '${st:-still pending}' after ${secs}s: $(cat "$out" 2>/dev/null)"
[ "$secs" -le 30 ] || fail "the victim's job $id took ${secs}s to fail"
! grep -q script-ran "$out" || fail "the victim's script ran without its image"
grep -q "stagehand: --stage-image failed: .*/nvme/stage.*$attacker (uid $auid).*administrator" "$out" ||
    fail "the victim's message does not name /nvme/stage, $attacker and the administrator: $(cat "$out")"
log_since "$node" "$off" | grep -aq "error: .*stagehand: job $id user $MINICLUSTER_USER: staging failed on $node: .*/nvme/stage.*$attacker" ||
    fail "no error line for the administrator in $node's slurmd log: $(log_since "$node" "$off" | grep -a stagehand | tail -5)"
assert_no_drain
echo "ok: the victim's default-destination job failed in ${secs}s naming /nvme/stage and $attacker; logged; no drain"

# The attacker's own default-destination job: a job error too, no drain.
read -r id st secs < <(job_fails "$attacker" "$aout" "$asrc" "$node")
[ "$st" != DRAINED ] || fail "$node drained by the attacker's job $id: $(sinfo -h -R -n "$node")"
[ "$st" = FAILED ] || fail "the attacker's job $id ended '${st:-still pending}': $(cat "$aout" 2>/dev/null)"
grep -q "stagehand: --stage-image failed: .*/nvme/stage" "$aout" || fail "the attacker's message: $(cat "$aout")"
assert_no_drain
echo "ok: the attacker's own default-destination job failed (${secs}s); no drain"

# slurmd start: the attacker's directory is logged for the administrator and left alone.
off=$(log_offset "$node")
"$MINICLUSTER" restart-slurmd "$node" >/dev/null || fail "cannot restart slurmd on $node"
for _ in $(seq 1 50); do
    log_since "$node" "$off" | grep -aq 'error: stagehand: /nvme/stage is ' && break
    sleep 0.2
done
log_since "$node" "$off" | grep -aq "error: stagehand: /nvme/stage is .*owner $attacker (uid $auid)" ||
    fail "slurmd start did not log $attacker's /nvme/stage: $(log_since "$node" "$off" | grep -a stagehand)"
[ "$(on_node "$node" stat -c %U /nvme/stage)" = "$attacker" ] || fail "slurmd changed the attacker's /nvme/stage"
echo "ok: slurmd start logs $attacker's /nvme/stage for the administrator and leaves it"

# The administrator removes it; the next slurmd start makes root's.
on_node "$node" rm -rf /nvme/stage
"$MINICLUSTER" restart-slurmd "$node" >/dev/null || fail "cannot restart slurmd on $node"
# restart-slurmd returns once slurmctld sees the node up, which it may still
# do from before the restart: wait (bounded) until the new slurmd has run the
# plugin's start-up.
for _ in $(seq 1 50); do
    on_node "$node" test -e /nvme/stage && break
    sleep 0.2
done
got=$(on_node "$node" stat -c '%U %a %F' /nvme/stage 2>&1)
[ "$got" = "root 755 directory" ] || fail "after slurmd start /nvme/stage is '$got', not root's 0755 directory"
on_node_as_other "$node" mkdir /nvme/stage/"$MINICLUSTER_USER" 2>/dev/null &&
    fail "$attacker can still make a directory in /nvme/stage"
echo "ok: slurmd start made /nvme/stage (root, 0755) before any job"

#!/usr/bin/env bash
# Issue 6 fault matrix: one node's agent is killed (SIGKILL) before the
# rendezvous completes. To hold the rendezvous open, n2 is frozen (its
# slurmd and everything in its namespace) while n3's agent has joined and
# waits; n3's agent is killed, n2 is thawed. The job fails at step start,
# promptly (not at the staging deadline), with a message naming the missing
# node; n3's own record says its agent was killed; nothing under DST; no
# node drained; the next job works. Cases F21, F22.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

read -r leader frozen victim _ <<<"$MINICLUSTER_NODES"
[ -n "$victim" ] || skip "needs 3 nodes"
tok=fagent$$
tag=fault-agent.$$
dst=/nvme/$tok/img
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
cleanup() {
    "$MINICLUSTER" thaw "$frozen" 2>/dev/null
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -f "$src" "$out"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT
make_user_file "$src" 4 || fail "cannot create $src"
off=$(log_offset "$victim")

"$MINICLUSTER" freeze "$frozen" || fail "cannot freeze $frozen"
id=$(as_user sbatch --parsable -J "$tag" -N3 -w "$leader,$frozen,$victim" -o "$out" \
         --stage-image="$src:$dst" --wrap 'echo script-ran') || fail "sbatch: $id"
pid=""
for _ in $(seq 1 150); do
    pid=$(agent_of "$id" "$victim" | head -1)
    [ -n "$pid" ] && break
    sleep 0.1
done
[ -n "$pid" ] || fail "no agent of job $id appeared on $victim"
sleep 1 # let it join the tree and wait for the rendezvous
on_node "$victim" kill -9 "$pid" || fail "cannot kill agent $pid"
"$MINICLUSTER" thaw "$frozen" || fail "cannot thaw $frozen"
t0=$SECONDS
st=$(wait_job_end "$id" 30)
[ "$st" = FAILED ] || fail "job $id ended $st (30 s after the kill): $(cat "$out" 2>/dev/null)"
echo "job failed $((SECONDS - t0)) s after $victim's agent was killed"
grep -q "stagehand: --stage-image failed: image $dst: $victim did not answer" "$out" ||
    fail "message does not name $victim: $(cat "$out")"
! grep -q script-ran "$out" || fail "the batch script ran without its image"
log_since "$victim" "$off" | grep -q "job $id user $MINICLUSTER_USER: staging failed on $victim: agent killed by signal 9" ||
    fail "$victim's slurmd log does not record the killed agent"
for n in $MINICLUSTER_NODES; do
    on_node "$n" test ! -e "$dst" || fail "$n: $dst exists"
done
[ -z "$(temp_files_in "/nvme/$tok")" ] || fail "temp files left"
assert_runtime_gone "$id"
assert_no_drain
echo "ok: agent killed before the rendezvous: prompt failure naming $victim, no drain"

id=$(as_user sbatch --parsable -J "$tag" -N3 -o "$out" --stage-image="$src:$dst" --wrap 'echo script-ran') ||
    fail "sbatch: $id"
[ "$(wait_job_end "$id" 60)" = COMPLETED ] || fail "the next job failed: $(cat "$out")"
assert_staged_everywhere "$src" "$dst"
assert_no_drain
echo "ok: the next job stages on every node"

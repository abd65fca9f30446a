#!/usr/bin/env bash
# Issue 31 item 5: staging under the PrologFlags of the cluster that is up
# (minicluster up --prolog-flags ..., --proctrack ...), read from slurmctld.
#
# Alloc,Contain (any proctrack): Slurm makes the job's extern step on every
# node after the prolog; the prolog's staging process, the sentinels and the
# agents run outside it, as under Alloc. A multi-node sbatch stages to stale
# nodes, a re-submit is a no-op with a sentinel on every node, an srun
# inside the job and one that makes its own job stage, and a scancel in the
# middle of a staging stops it; after each job no stagehand process is left
# on any node, /run/stagehand holds nothing of the job, no node is drained.
#
# Alloc,Contain,RunInJob (Slurm 24.05+): the prolog and epilog run in the
# extern step, where Slurm calls no SPANK job prolog or epilog (stagehand(8),
# VERSIONS). sbatch --stage-image is refused at submission, naming
# RunInJob; srun --stage-image stages at step start, inside a job and as a
# job of its own; a scancel during such a staging ends it within the
# staging's bound; the extern step's end removes the steps' runtime state,
# which no epilog would (each used to leave its 64 MiB tmpfs mounted); no
# process is left, no node drained.
#
# Plain Alloc: skipped (test_stage_sbatch, test_stage_step,
# test_fault_scancel, test_stage_sentinel cover it).
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

conf=$(scontrol show config)
flags=$(awk -F' *= *' '$1 == "PrologFlags" {print $2}' <<<"$conf")
proctrack=$(awk -F' *= *' '$1 == "ProctrackType" {print $2}' <<<"$conf")
contain=0 runinjob=0
[[ ",$flags," == *,Contain,* ]] && contain=1
[[ ",$flags," == *,RunInJob,* ]] && runinjob=1 contain=1
[ "$contain" = 1 ] || skip "PrologFlags=$flags: neither Contain nor RunInJob (other tests cover Alloc)"
k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 2 ] || skip "needs 2 nodes"
echo "PrologFlags=$flags $proctrack"

fault_test_files tpfl stage-pflags
cleanup() {
    local j
    for j in $(jobs_named "$tag.c"); do scancel "$j" 2>/dev/null; done
    fault_test_cleanup
}
trap cleanup EXIT
small=$MINICLUSTER_SHARED/$tok.small
as_user sh -c "head -c 4194304 /dev/urandom > '$small'" || fail "cannot create $small"

# No process of stagehand on any node (waiting up to @1 s) and nothing of
# job @2 in /run/stagehand; no node drained.
assert_job_clean() {
    local left name
    for name in stagehand-stage sh-sentinel stagehand-agent stagehand-bcast stagehand-wait; do
        left=$(procs_left named_pids "$name" "$1")
        [ -z "$left" ] || fail "job $2: $name still runs: $left"
    done
    assert_runtime_gone "$2" "$1"
    assert_no_drain
}

ids=()
if [ "$runinjob" = 0 ]; then
    # A stale run: every node copies; then a current one: every node's
    # staging process stays on as its sentinel until the epilog.
    id=$(as_user sbatch --parsable --wait -J "$tag" -N"$k" -o "$out" --stage-verbose \
        --stage-image="$small:$dst" --wrap 'echo image=$STAGEHAND_IMAGE') ||
        fail "stale run: $(cat "$out")"
    grep -q "$dst: $k copied, 0 current of $k nodes" "$out" || fail "stale run: $(cat "$out")"
    grep -q "^image=$dst$" "$out" || fail "stale run: no STAGEHAND_IMAGE: $(cat "$out")"
    assert_staged_everywhere "$small" "$dst"
    assert_job_clean 20 "$id"
    id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-verbose \
        --stage-image="$small:$dst" --wrap 'echo started; sleep 3') || fail "sbatch"
    for _ in $(seq 1 100); do grep -q started "$out" 2>/dev/null && break; sleep 0.1; done
    grep -q "current on n1, nothing copied" "$out" || fail "current run: $(cat "$out")"
    for n in $MINICLUSTER_NODES; do
        [ -n "$(named_pids "$n" sh-sentinel)" ] || fail "$n: no sentinel during the current run"
    done
    [ "$(wait_job_end "$id" 30)" = COMPLETED ] || fail "current run did not complete: $(cat "$out")"
    assert_job_clean 20 "$id"
    ids+=("$id")
    echo "ok: sbatch stale and current under $flags"
else
    # Refused before a job exists, with the reason.
    msg=$(as_user sbatch --parsable -J "$tag" -N"$k" --stage-image="$small:$dst" --wrap true 2>&1) &&
        fail "sbatch --stage-image was accepted under RunInJob: $msg"
    grep -q "stagehand: --stage-image=.*PrologFlags=RunInJob" <<<"$msg" ||
        fail "sbatch's refusal does not name RunInJob: $msg"
    [ -z "$(jobs_named "$tag")" ] || fail "a job exists after the refusal"
    echo "ok: sbatch --stage-image refused under RunInJob"
fi

# Step staging inside a job (every flag), then srun making a job of its own
# (RunInJob: a step staging; otherwise the job prolog's).
out2=$(as_user salloc -J "$tag" -N"$k" bash -c "
srun -N2 -w n1,n2 --stage-verbose --stage-image=$small:$dst.step sh -c 'echo task \$STAGEHAND_IMAGE'
echo job=\$SLURM_JOB_ID" 2>&1) || fail "salloc: $out2"
[ "$(grep -c "^task $dst.step$" <<<"$out2")" -eq 2 ] || fail "step staging: $out2"
id=$(sed -n 's/^job=//p' <<<"$out2")
assert_job_clean 20 "$id"
for n in n1 n2; do
    [ "$(node_sha "$n" "$dst.step")" = "$(sha256sum "$small" | cut -d' ' -f1)" ] || fail "$n: step copy differs"
done
out2=$(as_user srun -J "$tag" -N"$k" --stage-image="$small:$dst.srun" \
    sh -c 'echo task $SLURM_JOB_ID $STAGEHAND_IMAGE' 2>&1) || fail "srun: $out2"
[ "$(grep -c "^task [0-9]* $dst.srun$" <<<"$out2")" -eq "$k" ] || fail "srun's own job: $out2"
id=$(sed -n 's/^task \([0-9]*\) .*/\1/p' <<<"$out2" | head -1)
assert_job_clean 20 "$id"
assert_staged_everywhere "$small" "$dst.srun"
echo "ok: srun --stage-image inside a job and as its own job"

# scancel in the middle of a staging (1 GiB, mostly a hole: seconds).
make_slow_source "$src" 1024 || fail "cannot create $src"
want=$(md5sum "$src" | cut -d' ' -f1)
rm -f "$out"
# links at 400 Mbit/s: the copy takes some 20 s however loaded the host is
# (unshaped, the sparse source could be copied before the scancel)
shape_links --link 400mbit || fail "cannot shape the links"
if [ "$runinjob" = 0 ]; then
    id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst.big" \
        --wrap 'echo script-ran') || fail "sbatch: $id"
else
    # a name of its own: the earlier jobs of this test are still known
    as_user srun -J "$tag.c" -N"$k" --stage-image="$src:$dst.big" sh -c 'echo script-ran' \
        >"$out" 2>&1 &
    id=""
    for _ in $(seq 1 100); do id=$(jobs_named "$tag.c"); [ -n "$id" ] && break; sleep 0.1; done
    [ -n "$id" ] || fail "the srun job did not appear"
fi
for _ in $(seq 1 300); do
    [ -n "$(temp_files_in "/nvme/$tok")" ] && break
    sleep 0.02
done
[ -n "$(temp_files_in "/nvme/$tok")" ] || fail "the transfer did not start"
sleep 0.3
as_user scancel "$id" || fail "scancel failed"
t0=$SECONDS
st=$(wait_job_end "$id" 60)
case "$st" in CANCELLED | FAILED) ;; *) fail "job $id ended $st after scancel" ;; esac
wait
! grep -q script-ran "$out" 2>/dev/null || fail "the cancelled job's program ran: $(cat "$out")"
assert_job_clean 30 "$id"
for n in $MINICLUSTER_NODES; do
    got=$(node_md5 "$n" "$dst.big")
    [ -z "$got" ] || [ "$got" = "$want" ] || fail "$n: a partial DST is visible after the scancel"
done
left=$(temp_files_in "/nvme/$tok")
[ -z "$left" ] || fail "temp files left after the scancel: $left"
echo "ok: scancel during the staging: job $st after $((SECONDS - t0)) s, nothing left"
shape_clear
wait_nodes_idle || fail "nodes not idle"
echo "ok: PrologFlags=$flags ($proctrack)"

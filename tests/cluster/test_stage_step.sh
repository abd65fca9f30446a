#!/usr/bin/env bash
# Issue 4, F28: srun --stage-image inside an existing allocation stages at
# step start on the step's nodes only, before its tasks run; a second srun
# with the same image is a no-op; a plain srun does not stage. F28 also from
# outside the job: srun --jobid=N --stage-image is the same step staging (the
# job's own images untouched), never silently nothing.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"

img=$MINICLUSTER_SHARED/t-step.$$.bin
img2=$MINICLUSTER_SHARED/t-step2.$$.bin
dst=/nvme/t-step/img.bin
jobs=()
cleanup() { [ ${#jobs[@]} -eq 0 ] || scancel "${jobs[@]}" 2>/dev/null; rm -f "$img" "$img2"; for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf /nvme/t-step; done; }
trap cleanup EXIT
make_user_file "$img" 6
want=$(sha256sum "$img" | cut -d' ' -f1)

out=$(as_user salloc -N3 -w n1,n2,n3 bash -c "
srun -N2 -w n1,n2 --stage-verbose --stage-image=$img:$dst sh -c 'echo task \$(hostname) \$(sha256sum \$STAGEHAND_IMAGE)'
srun -N2 -w n1,n2 --stage-verbose --stage-image=$img:$dst true
srun -N3 sh -c 'echo plain \$(hostname) \${STAGEHAND_STEP_SPEC:-none}'" 2>&1) || fail "salloc failed: $out"
[ "$(grep -c "^task n[12] $want $dst$" <<<"$out")" -eq 2 ] || fail "step tasks did not see the image: $out"
grep -q "stagehand: $dst: 2 copied, 0 current of 2 nodes" <<<"$out" || fail "first step summary: $out"
grep -q "stagehand: $dst: all 2 nodes current, nothing copied" <<<"$out" || fail "second step was not a no-op: $out"
[ "$(grep -c '^plain n[123] none$' <<<"$out")" -eq 3 ] || fail "a plain srun saw a step spec: $out"
for n in n1 n2; do [ "$(node_sha "$n" "$dst")" = "$want" ] || fail "$n: copy differs"; done
on_node n3 test ! -e "$dst" || fail "n3 is not in the step but got the image"
echo "ok: step staging on the step's 2 nodes, then a no-op"

# F28 from outside: srun --jobid=N. Under PrologFlags=RunInJob sbatch cannot
# stage, so there the job brings no image of its own.
held=/nvme/t-step/held.bin new=/nvme/t-step/new.bin
make_user_file "$img2" 3
want2=$(sha256sum "$img2" | cut -d' ' -f1)
job_opt=(--stage-image="$img:$held")
[[ "$(scontrol show config | grep -i '^PrologFlags')" == *RunInJob* ]] && job_opt=()
jh=$(as_user sbatch --parsable -N3 -w n1,n2,n3 "${job_opt[@]}" --wrap 'sleep 300') || fail "sbatch failed: $jh"
jobs+=("$jh")
for _ in $(seq 120); do
    [ "$(squeue -h -j "$jh" -o %T 2>/dev/null)" = RUNNING ] && break
    sleep 1
done
out=$(as_user srun --jobid="$jh" --overlap -N3 --stage-verbose --stage-image="$img2:$new" \
    sh -c 'echo task $(hostname) $STAGEHAND_IMAGE_COUNT $(sha256sum $STAGEHAND_IMAGE)' 2>&1) ||
    fail "srun --jobid=$jh --stage-image failed: $out"
[ "$(grep -c "^task n[123] 1 $want2 $new$" <<<"$out")" -eq 3 ] ||
    fail "srun --jobid tasks did not see the step's image: $out"
grep -q "stagehand: $new: 3 copied, 0 current of 3 nodes" <<<"$out" || fail "srun --jobid step summary: $out"
for n in n1 n2 n3; do [ "$(node_sha "$n" "$new")" = "$want2" ] || fail "$n: srun --jobid copy differs"; done
if [ ${#job_opt[@]} -gt 0 ]; then
    out=$(as_user srun --jobid="$jh" --overlap -N3 sh -c 'echo job $(hostname) $STAGEHAND_IMAGES' 2>&1) ||
        fail "plain srun --jobid=$jh failed: $out"
    [ "$(grep -c "^job n[123] $held$" <<<"$out")" -eq 3 ] || fail "the job's images changed: $out"
    for n in n1 n2 n3; do [ "$(node_sha "$n" "$held")" = "$want" ] || fail "$n: the job's copy differs"; done
fi
echo "ok: srun --jobid from outside the job stages at step start on its 3 nodes"

#!/usr/bin/env bash
# Security issue 30 item 5: for a step staging, root must take the step's
# node list from Slurm, not from the job's environment (the user's), act on
# STAGEHAND_STEP_SPEC only for an srun given --stage-image, and bound
# everything the user supplies. A batch job without --stage-image exports a
# real step spec, a forged SLURM_STEP_NODELIST of 1.2 million names and an
# over-long version string, then runs a plain srun on every node: no step
# staging runs (no status of that step on any node, nothing in the slurmd
# logs about it, nothing of the forged list), its tasks run, and it ends in
# a few seconds. Then, with the forged list still exported, a real
# srun --stage-image on two nodes stages to exactly those two nodes. Run
# under on_node_fault=drain: no node drains.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 3 ] || skip "needs 3 nodes"
tok=sse$$
tag=sec-stepenv.$$
src=$MINICLUSTER_SHARED/$tok.img
dst1=/nvme/$tok/one
dst2=/nvme/$tok/two
out=$MINICLUSTER_SHARED/$tok.out
script=$MINICLUSTER_SHARED/$tok.sh
plugstack_save
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    plugstack_restore
    rm -f "$src" "$out" "$script"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT

plugstack_add on_node_fault=drain
make_user_file "$src" 2 || fail "cannot create $src"
want=$(sha256sum "$src" | cut -d' ' -f1)
read -r n1 n2 n3 _ <<<"$MINICLUSTER_NODES"
declare -A off
for n in $MINICLUSTER_NODES; do off[$n]=$(log_offset "$n"); done

cat >"$script" <<EOS
#!/bin/bash
# step 0: a real step staging on $n1, only to learn a valid step spec
spec=\$(srun -N1 -w $n1 --stage-image=$src:$dst1 sh -c 'printf "%s\n" "\$STAGEHAND_STEP_SPEC"')
[ -n "\$spec" ] || { echo "no step spec seen"; exit 1; }
forged=\$(for i in \$(seq 1 20); do printf 'x%d[1-60000],' "\$i"; done)
export STAGEHAND_STEP_SPEC="\$spec" SLURM_STEP_NODELIST="\${forged%,}"
export STAGEHAND_STEP_VERSION="\$(printf 'v%.0s' \$(seq 1 4000))"
# step 1: a plain srun on every node with the forged environment
t0=\$(date +%s%N)
srun -N$k sh -c 'echo plain \$(hostname)'
echo "plain-rc \$? \$(( (\$(date +%s%N) - t0) / 1000000 )) ms"
# step 2: did any node record a staging of step 1?
srun -N$k sh -c 'echo "status \$(hostname) \$(ls -d /run/stagehand/\$SLURM_JOB_ID.1* 2>/dev/null | tr "\n" " ")."'
# step 3: a real step staging on $n2 and $n3 with the forged list exported
srun -N2 -w $n2,$n3 --stage-image=$src:$dst2 sh -c 'echo "task \$(hostname) \$(sha256sum \$STAGEHAND_IMAGE | cut -d" " -f1)"'
echo "real-rc \$?"
EOS
chmod 0755 "$script"
id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" "$script") || fail "sbatch: $id"
st=$(wait_job_end "$id" 240)
[ "$st" = COMPLETED ] || fail "job $id ended $st: $(cat "$out" 2>/dev/null)"
cat "$out"

# step 1: ran everywhere, promptly, without a staging
[ "$(grep -c '^plain ' "$out")" = "$k" ] || fail "the plain srun's tasks did not all run: $(cat "$out")"
read -r _ rc ms _ < <(grep '^plain-rc ' "$out")
[ "$rc" = 0 ] || fail "the plain srun failed ($rc): $(cat "$out")"
[ "$ms" -lt 15000 ] || fail "the plain srun took $ms ms"
[ "$(grep -c '^status [^ ]* \.$' "$out")" = "$k" ] ||
    fail "a node recorded a staging of the plain step: $(grep '^status ' "$out")"
for n in $MINICLUSTER_NODES; do
    lines=$(log_since "$n" "${off[$n]}" | grep -a -e 'x1\[' -e "job $id user .*staging failed" -e "job $id.*node list" || true)
    [ -z "$lines" ] || fail "$n: the slurmd log shows a staging from the forged environment: $lines"
done
echo "ok: a plain srun with a forged STAGEHAND_STEP_SPEC and SLURM_STEP_NODELIST (1.2 million names) staged nothing and took $ms ms"

# step 3: staged to the step's real nodes only
[ "$(grep -c "^task \($n2\|$n3\) $want\$" "$out")" = 2 ] || fail "the real step staging did not reach $n2 and $n3: $(cat "$out")"
grep -q '^real-rc 0$' "$out" || fail "the real step staging failed: $(cat "$out")"
on_node "$n1" test ! -e "$dst2" || fail "$n1 is not in the step but got $dst2"
for n in "$n2" "$n3"; do
    [ "$(node_sha "$n" "$dst2")" = "$want" ] || fail "$n: $dst2 is not the image"
done
assert_no_drain
echo "ok: srun --stage-image with a forged SLURM_STEP_NODELIST staged to its own nodes ($n2, $n3) only; no drain"

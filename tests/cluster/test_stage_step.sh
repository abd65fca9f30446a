#!/usr/bin/env bash
# Issue 4, F28: srun --stage-image inside an existing allocation stages at
# step start on the step's nodes only, before its tasks run; a second srun
# with the same image is a no-op; a plain srun does not stage.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"

img=$MINICLUSTER_SHARED/t-step.$$.bin
dst=/nvme/t-step/img.bin
cleanup() { rm -f "$img"; for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf /nvme/t-step; done; }
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

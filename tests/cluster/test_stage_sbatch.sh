#!/usr/bin/env bash
# Issue 4: sbatch --stage-image stages to every node of the job before the
# first step (checked by checksum inside each node), the job sees
# STAGEHAND_IMAGE, the copies belong to the job user, a re-submit is a no-op
# that every node decides by itself, one stale node is the only one that
# receives (from a node whose prolog has ended), and nothing is left in
# /run/stagehand after the job. Field cases F03 (no rewrite of current
# copies), F20 (engine runs as the job user).
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"

img=$MINICLUSTER_SHARED/t-sbatch.$$.bin
dst=/nvme/t-sbatch/img.$$.bin
out=$MINICLUSTER_SHARED/t-sbatch.$$.out
cleanup() { rm -f "$img" "$out"; for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf /nvme/t-sbatch; done; }
trap cleanup EXIT
make_user_file "$img" 24
k=$(echo "$MINICLUSTER_NODES" | wc -w)

jobs=()
submit() {
    local id
    rm -f "$out"
    # shellcheck disable=SC2016  # expanded by the job's shell
    id=$(as_user sbatch --parsable --wait -N"$k" -o "$out" --stage-verbose --stage-image="$img:$dst" \
        --wrap 'srun -N'"$k"' sh -c "echo \$(hostname) image=\$STAGEHAND_IMAGE"') ||
        fail "sbatch failed: $(cat "$out" 2>/dev/null)"
    jobs+=("$id")
}

submit
grep -q "$dst: $k copied, 0 current of $k nodes" "$out" || fail "first run summary: $(cat "$out")"
[ "$(grep -c "image=$dst" "$out")" -eq "$k" ] || fail "STAGEHAND_IMAGE not exported: $(cat "$out")"
assert_staged_everywhere "$img" "$dst"

# Re-submit: every node finds its own copy current and ends its prolog
# without waiting for the others (spank/localcheck.c); no copy is rewritten.
ids() { for n in $MINICLUSTER_NODES; do on_node "$n" stat -c %i.%Y "$dst"; done; }
before=$(ids)
declare -A off
for n in $MINICLUSTER_NODES; do off[$n]=$(log_offset "$n"); done
submit
grep -q "^stagehand: $dst: current on n1, nothing copied there; a node that needs a copy gets it before its first step ([0-9.]* s)$" "$out" ||
    fail "re-submit was not a no-op on the batch node: $(cat "$out")"
for n in $MINICLUSTER_NODES; do
    log_since "$n" "${off[$n]}" | grep -q "stagehand: job ${jobs[-1]} user .*: $dst: current on $n, nothing copied" ||
        fail "$n: its prolog did not find its copy current: $(log_since "$n" "${off[$n]}" | grep stagehand)"
done
[ "$(ids)" = "$before" ] || fail "a current copy was rewritten"

# One stale node: the others start at once (n1 runs the batch script), n2
# alone receives, read by n1's detached agent.
on_node n2 rm -f "$dst"
off2=$(log_offset n2)
submit
grep -q "^stagehand: $dst: current on n1, nothing copied" "$out" || fail "stale node run, batch node: $(cat "$out")"
log_since n2 "$off2" | grep -q "stagehand: job ${jobs[-1]} user .*: $dst: 1 copied, $((k - 1)) current of $k nodes" ||
    fail "stale node run, n2: $(log_since n2 "$off2" | grep stagehand)"
assert_staged_everywhere "$img" "$dst"
assert_no_temp_files "$dst"
wait_nodes_idle || fail "nodes not idle"
for j in "${jobs[@]}"; do assert_no_runtime_state "$j"; done
echo "ok: staged to $k nodes, no-op re-submit, stale node only re-copied"

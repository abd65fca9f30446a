#!/usr/bin/env bash
# Case F21, skewed prolog starts, when every node's copy is already current:
# one node (its slurmd and everything in its namespace) is frozen (up to 8 s;
# thawed 1 s after the batch script started) while a job that re-stages the
# image starts. The batch script starts at
# once (the batch node checked its own copy; it does not wait for the late
# node's agent), the job's srun on every node runs once the late node is
# back, every copy is still SRC's, and nothing is drained. Before the local
# check (issue 5, the no-op) the script waited for the late node.
# The script's srun waits until the late node's prolog has run: a step that
# reaches the thawed slurmd before the allocation's prolog request is the
# case of test_fault_step_before_prolog.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

read -r _ _ late _ <<<"$MINICLUSTER_NODES"
[ -n "$late" ] || skip "needs 3 nodes"
k=$(echo "$MINICLUSTER_NODES" | wc -w)
freeze_s=8
thaw_node=$late
fault_test_files fskewc fault-skewc
make_user_file "$src" 8 || fail "cannot create $src"
want=$(sha256sum "$src" | cut -d' ' -f1)

as_user sbatch --parsable --wait -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
    --wrap 'srun -N'"$k"' true' >/dev/null || fail "first staging: $(cat "$out")"
assert_staged_everywhere "$src" "$dst"

go=$MINICLUSTER_SHARED/$tok.go
off=$(log_offset "$late")
"$MINICLUSTER" freeze "$late" || fail "cannot freeze $late"
t0=$(date +%s.%N)
id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-verbose --stage-image="$src:$dst" \
        --wrap 'echo script-start $(date +%s.%N); while [ ! -e '"$go"' ]; do sleep 0.2; done
srun -N'"$k"' sh -c "sha256sum \$STAGEHAND_IMAGE | cut -d\" \" -f1"') ||
    fail "sbatch: $id"
start=""
for _ in $(seq 1 $((freeze_s * 10))); do
    start=$(sed -n 's/^script-start //p' "$out" 2>/dev/null)
    [ -n "$start" ] && break
    sleep 0.1
done
sleep 1 # still frozen: the script has started without it
"$MINICLUSTER" thaw "$late" || fail "cannot thaw $late"
for _ in $(seq 1 100); do
    log_since "$late" "$off" | grep -aq "stagehand: job $id user .*current on $late" && break
    sleep 0.2
done
touch "$go"
[ -n "$start" ] || fail "the batch script did not start while $late was frozen for $freeze_s s: $(cat "$out" 2>/dev/null)"
after=$(python3 -c "print(f'{$start - $t0:.2f}')")
echo "the batch script started $after s after sbatch while $late was frozen (thawed 1 s later; at most $freeze_s s)"
st=$(wait_job_end "$id" 120)
[ "$st" = COMPLETED ] || fail "job $id ended $st: $(cat "$out")"
grep -q "^stagehand: $dst: current on n1, nothing copied" "$out" || fail "summary: $(cat "$out")"
[ "$(grep -cx "$want" "$out")" -eq "$k" ] || fail "a step saw other bytes: $(cat "$out")"
assert_staged_everywhere "$src" "$dst"
assert_runtime_gone "$id"
assert_no_drain
echo "ok: with every copy current, the job started while $late was frozen; its step ran on all $k nodes after"

#!/usr/bin/env bash
# --stage-image and --stage-verbose are shown in sbatch/srun/salloc --help
# (issue 4, user interface), and a job that does not use them is untouched.
source "$(dirname "$0")/lib.sh"

plugin="$STAGEHAND_PREFIX/lib/slurm/stagehand.so"
[ -f "$plugin" ] || skip "plugin not installed at $plugin"
grep -qs "^required .*stagehand.so" "$(dirname "$SLURM_CONF")/plugstack.conf" ||
    skip "stagehand.so is not in plugstack.conf"

for cmd in sbatch srun salloc; do
    out=$(as_user "$cmd" --help 2>&1) || fail "$cmd --help failed: $out"
    grep -qE -- '--stage-image=SRC\[:DST\]' <<<"$out" ||
        fail "$cmd --help does not show --stage-image=SRC[:DST]: $out"
    grep -qE -- '--stage-verbose' <<<"$out" ||
        fail "$cmd --help does not show --stage-verbose"
    echo "ok: $cmd --help shows the options"
done

out=$(as_user srun -N1 echo plain 2>&1) || fail "plain srun failed: $out"
[ "$out" = plain ] || fail "plain srun printed: $out"
wait_nodes_idle || fail "nodes not idle"
echo "ok: a job without --stage-image runs unchanged"

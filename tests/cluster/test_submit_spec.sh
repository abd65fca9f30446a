#!/usr/bin/env bash
# An accepted submission hands one canonical, versioned spec of all images to
# the job (doc/design.md §2 step 1; issue 4):
# - repeated and listed --stage-image values accumulate, an identical value is
#   a no-op (case F27), no DST means <allowed root>/stage/<user>/<basename>;
# - sbatch/salloc copy the spec into the job environment as
#   SLURM_SPANK_STAGEHAND_SPEC (the prolog gets it as SPANK_STAGEHAND_SPEC);
# - an srun inside the job that repeats one of the job's images (inherited
#   or given again) is accepted without a new staging; a new image on such an
#   srun is staged at step start on the step's nodes before its tasks run
#   (case F28: never silently do nothing).
source "$(dirname "$0")/lib.sh"

plugin="$STAGEHAND_PREFIX/lib/slurm/stagehand.so"
[ -f "$plugin" ] || skip "plugin not installed at $plugin"
grep -qs "^required .*stagehand.so.* allowed_dest=/nvme " "$(dirname "$SLURM_CONF")/plugstack.conf" ||
    skip "stagehand.so with allowed_dest=/nvme is not in plugstack.conf"

user=$MINICLUSTER_USER
dir=$(as_user mktemp -d "$MINICLUSTER_SHARED"/stagehand-spec.XXXXXX) || fail "mktemp"
tag=${dir##*.}
# DSTs in the user's default directory, which the agent may create.
a_dst=/nvme/stage/$user/spec-$tag-a.sqsh
new_dst=/nvme/stage/$user/spec-$tag-new.sqsh
cleanup() {
    rm -rf "$dir"
    for n in $MINICLUSTER_NODES; do
        on_node "$n" rm -f "$a_dst" "/nvme/stage/$user/b,c.sqsh" "$new_dst" 2>/dev/null
    done
}
trap cleanup EXIT
as_user sh -c "echo a >'$dir/a.sqsh' && echo b >'$dir/b,c.sqsh'" || fail "cannot create sources"
spec="v1;$dir/a.sqsh:$a_dst,$dir/b%2Cc.sqsh:/nvme/stage/$user/b%2Cc.sqsh"

# sbatch: a value twice, then a list with an escaped ',' and the first image
# again. The script reports the spec it sees and tries three inner sruns.
out=$(as_user timeout 120 sbatch -N1 --wait -o "$dir/job.out" \
          --stage-image="$dir/a.sqsh:$a_dst" \
          --stage-image="$dir/a.sqsh:$a_dst" \
          --stage-image="$dir/b\\,c.sqsh,$dir/a.sqsh:$a_dst" \
          --wrap="echo \"spec=\$SLURM_SPANK_STAGEHAND_SPEC\"
srun -N1 true && echo inner-inherited-ok
srun -N1 --stage-image='$dir/b\\,c.sqsh' true && echo inner-repeat-ok
srun -N1 --stage-image='$dir/a.sqsh:$new_dst' sh -c 'echo \"inner-new-image=\$STAGEHAND_IMAGE \$(cat \$STAGEHAND_IMAGE)\"' 2>&1
echo inner-new-rc=\$?" 2>&1) || fail "sbatch failed: $out"
job=$(cat "$dir/job.out")
grep -qxF "spec=$spec" <<<"$job" || fail "expected spec=$spec in the job, got:
$job"
grep -qx inner-inherited-ok <<<"$job" || fail "plain srun inside the job failed: $job"
grep -qx inner-repeat-ok <<<"$job" || fail "srun repeating a job image failed: $job"
grep -qxF "inner-new-image=$new_dst a" <<<"$job" || fail "new image on an inner srun was not staged at step start: $job"
grep -qx 'inner-new-rc=0' <<<"$job" || fail "inner srun with a new image failed: $job"
echo "ok: sbatch passed the canonical spec; inner sruns behave"

# salloc passes the same spec to its shell.
# shellcheck disable=SC2016 # expanded by the job's shell
out=$(as_user timeout 120 salloc -N1 --stage-image="$dir/b\\,c.sqsh,$dir/a.sqsh:$a_dst" \
          sh -c 'echo "spec=$SLURM_SPANK_STAGEHAND_SPEC"' 2>/dev/null) ||
    fail "salloc failed: $out"
spec2="v1;$dir/b%2Cc.sqsh:/nvme/stage/$user/b%2Cc.sqsh,$dir/a.sqsh:$a_dst"
grep -qxF "spec=$spec2" <<<"$out" || fail "salloc: expected spec=$spec2, got: $out"
echo "ok: salloc passed the canonical spec"
wait_nodes_idle || fail "nodes not idle"

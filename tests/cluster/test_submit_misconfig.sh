#!/usr/bin/env bash
# A wrong plugstack.conf line (doc/design.md §5, plugin-init row) must not break jobs
# that do not use --stage-image; jobs that do are refused at submit with
# "stagehand is misconfigured on this cluster: <reason>". Only the client
# side is changed: sbatch/srun read a private copy of slurm.conf whose
# PlugStackConfig has segment_size=4G (case F09). The cluster is untouched.
source "$(dirname "$0")/lib.sh"

plugin="$STAGEHAND_PREFIX/lib/slurm/stagehand.so"
[ -f "$plugin" ] || skip "plugin not installed at $plugin"
conf_dir=$(dirname "$SLURM_CONF")
grep -qs "^required .*stagehand.so" "$conf_dir/plugstack.conf" ||
    skip "stagehand.so is not in plugstack.conf"
grep -q '^PlugStackConfig=' "$SLURM_CONF" || skip "no PlugStackConfig= in $SLURM_CONF"

scratch=$(mktemp -d /tmp/stagehand-misconf.XXXXXX) || fail "mktemp"
trap 'rm -rf "$scratch"' EXIT
chmod 0755 "$scratch"
sed "s|^PlugStackConfig=.*|PlugStackConfig=$scratch/plugstack.conf|" \
    "$SLURM_CONF" >"$scratch/slurm.conf"
sed 's|^\(required .*stagehand.so .*\)$|\1 segment_size=4G|' \
    "$conf_dir/plugstack.conf" >"$scratch/plugstack.conf"
grep -q 'segment_size=4G' "$scratch/plugstack.conf" || fail "could not edit plugstack copy"
chmod 0644 "$scratch/slurm.conf" "$scratch/plugstack.conf"
echo image >"$scratch/img.sqsh"
chmod 0644 "$scratch/img.sqsh"

value="$scratch/img.sqsh:/nvme/x.sqsh"
reason="stagehand is misconfigured on this cluster: segment_size=4G: must be more than 0 and at most 1G (every MPI count is an int)"

before=$(scontrol -o show job 2>/dev/null | grep -c '^JobId=' || true)
out=$(SLURM_CONF=$scratch/slurm.conf as_user timeout 60 sbatch -N1 -o /dev/null \
          --stage-image="$value" --wrap=true 2>&1)
rc=$?
[ "$rc" -ne 0 ] || fail "sbatch with a misconfigured plugin accepted the job: $out"
grep -qxF -- "sbatch: error: stagehand: --stage-image=$value: $reason" <<<"$out" ||
    fail "unexpected sbatch output: $out"
after=$(scontrol -o show job 2>/dev/null | grep -c '^JobId=' || true)
[ "$after" = "$before" ] || fail "a job was created ($before -> $after)"
echo "ok: --stage-image refused with the misconfiguration reason"

# Other jobs run, and the user is not bothered with the admin's problem.
out=$(SLURM_CONF=$scratch/slurm.conf as_user timeout 60 srun -N1 echo plain 2>&1) ||
    fail "a job without --stage-image failed under the bad config: $out"
[ "$out" = plain ] || fail "srun printed more than its output: $out"
echo "ok: a job without --stage-image runs and prints nothing extra"
wait_nodes_idle || fail "nodes not idle"

#!/usr/bin/env bash
# Submit-time checks (doc/design.md §2 step 1, §5 first row; issue 4): every bad
# --stage-image value makes sbatch, srun and salloc exit non-zero with
#   <cmd>: error: stagehand: --stage-image=<value>: <reason>
# and no job is created. Cases F17 (FIFO/device), F18 (missing/unreadable),
# F23 (/tmp DST), F27 (conflicting values), F28 (relative path).
source "$(dirname "$0")/lib.sh"

plugin="$STAGEHAND_PREFIX/lib/slurm/stagehand.so"
[ -f "$plugin" ] || skip "plugin not installed at $plugin"
conf_dir=$(dirname "$SLURM_CONF")
grep -qs "^required .*stagehand.so" "$conf_dir/plugstack.conf" ||
    skip "stagehand.so is not in $conf_dir/plugstack.conf"
grep -qs "allowed_dest=/nvme " "$conf_dir/plugstack.conf" ||
    skip "the cluster's plugstack.conf does not use allowed_dest=/nvme"

user=$MINICLUSTER_USER
# Special files live on the login side's local /tmp (FIFOs cannot be made
# on sshfs); the checks run there, as the user.
scratch=$(mktemp -d /tmp/stagehand-submit.XXXXXX) || fail "mktemp"
trap 'rm -rf "$scratch"' EXIT
chmod 0755 "$scratch"
echo image >"$scratch/img.sqsh"
chmod 0644 "$scratch/img.sqsh"
echo secret >"$scratch/secret.sqsh"
chown "$user" "$scratch/secret.sqsh"
chmod 0000 "$scratch/secret.sqsh"
mkfifo "$scratch/fifo"
chmod 0644 "$scratch/fifo"
mkdir "$scratch/dir"

# Every job the controller knows, finished ones included (MinJobAge).
# Job ids the controller knows; a new job always gets a higher id than every
# job before it, while finished jobs leave the list (MinJobAge) at any time,
# so "no job was created" is "no id above the highest one seen before".
job_ids() {
    scontrol -o show job 2>/dev/null | sed -n 's/^JobId=\([0-9]*\).*/\1/p'
}
max_job_id() {
    job_ids | sort -n | tail -1 | grep . || echo 0
}
jobs_above() {
    job_ids | awk -v m="$1" '$1 > m' | tr '\n' ' '
}

# expect_reject CMD VALUE REASON [VALUE2]: CMD with --stage-image=VALUE
# (and a second --stage-image=VALUE2 before it when given) must fail with
# exactly the stagehand line for VALUE and create no job.
expect_reject() {
    local cmd=$1 value=$2 reason=$3 first=${4:-}
    local before after out rc want
    local -a extra=()
    [ -n "$first" ] && extra=(--stage-image="$first")
    before=$(max_job_id)
    case "$cmd" in
        sbatch) out=$(as_user timeout 60 sbatch -N1 -o /dev/null "${extra[@]}" \
                          --stage-image="$value" --wrap=true 2>&1) ;;
        srun) out=$(as_user timeout 60 srun -N1 "${extra[@]}" \
                        --stage-image="$value" true 2>&1) ;;
        salloc) out=$(as_user timeout 60 salloc -N1 "${extra[@]}" \
                          --stage-image="$value" true 2>&1) ;;
    esac
    rc=$?
    want="$cmd: error: stagehand: --stage-image=$value: $reason"
    [ "$rc" -ne 0 ] || fail "$cmd --stage-image=$value: exit 0; output: $out"
    [ "$rc" -ne 124 ] || fail "$cmd --stage-image=$value: hung; output: $out"
    grep -qxF -- "$want" <<<"$out" ||
        fail "$cmd --stage-image=$value: expected line
  $want
got:
$out"
    case "$out" in
        *"Submitted batch job"* | *"Granted job allocation"* | *"queued and waiting"*)
            fail "$cmd --stage-image=$value: a job was created: $out" ;;
    esac
    after=$(jobs_above "$before")
    [ -z "$after" ] ||
        fail "$cmd --stage-image=$value: job(s) created: $after"
    echo "ok: $cmd rejects '$value'${first:+ after '$first'}"
}

s=$scratch
for cmd in sbatch srun salloc; do
    # case F28
    expect_reject "$cmd" img.sqsh \
        "source 'img.sqsh' is not an absolute path (relative paths are not accepted: give the full path, e.g. \"\$PWD/img.sqsh\")"
    # case F18
    expect_reject "$cmd" "$s/missing.sqsh:/nvme/x.sqsh" \
        "source '$s/missing.sqsh' does not exist"
done

# The rest once, with sbatch (the same code runs for srun and salloc).
expect_reject sbatch "$s/secret.sqsh:/nvme/x.sqsh" \
    "source '$s/secret.sqsh' is not readable by you: Permission denied"
# case F17c
expect_reject sbatch "$s/fifo:/nvme/x.sqsh" \
    "source '$s/fifo' is a FIFO, not a regular file"
expect_reject sbatch "/dev/zero:/nvme/x.sqsh" \
    "source '/dev/zero' is a character device, not a regular file"
expect_reject sbatch "$s/dir:/nvme/x.sqsh" \
    "source '$s/dir' is a directory, not a regular file"
# DST policy: component-wise, and case F23
expect_reject sbatch "$s/img.sqsh:/nvme2/x.sqsh" \
    "destination '/nvme2/x.sqsh' is not under a directory this cluster allows for staging (/nvme)"
expect_reject sbatch "$s/img.sqsh:/tmp/x.sqsh" \
    "destination '/tmp/x.sqsh' is not under a directory this cluster allows for staging (/nvme); /tmp and /dev/shm can be private to each job, so a file staged there before the job starts would not be visible to it"
# grammar
expect_reject sbatch "$s/img.sqsh:/nvme/../etc/x" \
    "destination '/nvme/../etc/x': '..' components are not allowed (write the path without '..')"
expect_reject sbatch "/data/a:b.sqsh" \
    "destination 'b.sqsh' is not an absolute path: DST is where each node writes its copy, a full path under a directory the cluster allows (if the ':' is part of the source path, write it as '\\:': /data/a\\:b.sqsh)"
expect_reject sbatch "$s/img.sqsh:" \
    "empty destination after ':' (leave out the ':' to use the default destination; write a ':' that is part of a path as '\\:')"
expect_reject sbatch "$s/img.sqsh:/nvme/x.sqsh:/nvme/y" \
    "more than one unescaped ':' in '$s/img.sqsh:/nvme/x.sqsh:/nvme/y' (SRC:DST has one ':'; write a ':' that is part of a path as '\\:')"
expect_reject sbatch "$s/img.sqsh:$s/img.sqsh" \
    "destination '$s/img.sqsh' is the source itself"
# case F27: a second value with another source for the same DST
expect_reject sbatch "$s/fifo:/nvme/x.sqsh" \
    "destination '/nvme/x.sqsh' specified multiple times with different sources ('$s/img.sqsh' and '$s/fifo')" \
    "$s/img.sqsh:/nvme/x.sqsh"

wait_nodes_idle || fail "nodes not idle"
echo "ok: all rejections exact, no job created"

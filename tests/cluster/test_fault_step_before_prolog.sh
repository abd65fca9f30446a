#!/usr/bin/env bash
# Case F21, a node where the job's first step starts before any job prolog:
# slurmctld's requests to n3 are held (minicluster hold-rpcs) while a job whose
# batch script runs srun at once starts, so the allocation's prolog request
# reaches n3 after the step's launch. Slurm before 23.02.2 then starts the
# step without running the job prolog (bug 16093: the launch finds the job
# known from its own credential check) and skips the prolog when its request
# comes. stagehand runs the job's staging at the start of that step instead:
#   (a) every copy current: the step on n3 runs and sees SRC's bytes;
#   (b) n3's copy removed: n3's step stages it with the other nodes' agents,
#       which waited for n3's; every node sees SRC's bytes.
# Before this, the step failed on n3 with "no staging status on this node".
# Slurm 23.02.2 and later make the step wait for the prolog: the outcome
# asserted is the same, the path is then the prolog's.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

read -r _ _ late _ <<<"$MINICLUSTER_NODES"
[ -n "$late" ] || skip "needs 3 nodes"
k=$(echo "$MINICLUSTER_NODES" | wc -w)
fault_test_files fsbp fault-sbp
make_user_file "$src" 8 || fail "cannot create $src"
want=$(sha256sum "$src" | cut -d' ' -f1)
ver=$(sinfo -V | grep -o '[0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*' | head -1)
old_slurm=0
[ "$(printf '%s\n23.02.2\n' "$ver" | sort -V | head -1)" = 23.02.2 ] || old_slurm=1

as_user sbatch --parsable --wait -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
    --wrap 'srun -N'"$k"' true' >/dev/null || fail "first staging: $(cat "$out")"
assert_staged_everywhere "$src" "$dst"

# One job with n3's prolog request held; @1 names the phase.
run_held() {
    local off id st
    off=$(log_offset "$late")
    "$MINICLUSTER" hold-rpcs "$late" || fail "cannot hold slurmctld's requests to $late"
    held_node=$late # released by the exit trap too
    id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
        --wrap 'srun -N'"$k"' sh -c "sha256sum \$STAGEHAND_IMAGE | cut -d\" \" -f1"') ||
        fail "($1) sbatch: $id"
    # Before 23.02.2 the step runs and ends on $late while the request is
    # held; later Slurm makes the step wait for the prolog, so the request
    # is held for a few seconds only.
    polls=25
    [ "$old_slurm" = 1 ] && polls=150
    for _ in $(seq 1 "$polls"); do
        log_since "$late" "$off" | grep -aq "\[$id\.0\] done with job" && break
        sleep 0.2
    done
    "$MINICLUSTER" release-rpcs
    held_node=""
    st=$(wait_job_end "$id" 120)
    job_log=$(log_since "$late" "$off")
    [ "$st" = COMPLETED ] || fail "($1) job $id ended $st: $(cat "$out"); $late: $(grep -a stagehand <<<"$job_log" | grep -av debug)"
    [ "$(grep -cx "$want" "$out")" -eq "$k" ] || fail "($1) a step saw other bytes: $(cat "$out")"
    if [ "$old_slurm" = 1 ]; then
        grep -aq "stagehand: job $id: step 0 started on $late before any job prolog ran here" <<<"$job_log" ||
            fail "($1) on Slurm $ver the step did not reach $late before the prolog request (the hold did not work): $(grep -a stagehand <<<"$job_log" | grep -av debug)"
    fi
    assert_staged_everywhere "$src" "$dst"
    assert_runtime_gone "$id"
    assert_no_drain
    echo "ok ($1): job $id with $late's prolog request held, Slurm $ver"
}

run_held "a, all current"
grep -aq "all $k nodes current" <<<"$job_log" || [ "$old_slurm" = 0 ] ||
    fail "(a) $late's staging: $(grep -a stagehand <<<"$job_log")"
on_node "$late" rm -f "$dst" || fail "cannot remove $late's copy"
run_held "b, $late stale"
grep -aq "1 copied, $((k - 1)) current of $k nodes" <<<"$job_log" || [ "$old_slurm" = 0 ] ||
    fail "(b) $late's staging: $(grep -a stagehand <<<"$job_log")"

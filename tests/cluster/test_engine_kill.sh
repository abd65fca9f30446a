#!/usr/bin/env bash
# Engine: the engine on one node is killed (SIGKILL) in the middle of the
# transfer. The other ranks end with an error within the deadline, no file
# appears under DST's name anywhere, the survivors leave no temp file, and the
# next run sweeps the dead rank's temp file and succeeds. Cases F06, F21, F22.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

engine_test_init "eng_kill.$$"
[ "$k" -ge 3 ] || skip "needs 3 nodes"
read -r _ victim _ <<<"$MINICLUSTER_NODES"
as_user truncate -s 1G "$src" || fail "cannot create $src"

start=$(date +%s)
# small segments and a shallow ring keep the transfer going for a while. A
# survivor must leave before Slurm kills the step (SIGKILL, no clean-up) at
# KillWait (5 s) + 2 s after a task's death: on Open MPI 5 a rank that only
# sends to the dead one may see no MPI error, so its stall limit (5 s of no
# progress, the documented way survivors stop) ends it first.
as_user srun --mpi=pmix -N"$k" --ntasks-per-node=1 "$engine" --source "$src" \
    --dest "$dst" --segment-size=256K --pipeline-depth=2 --timeout=10s \
    --stall-timeout=5s >"$errf" 2>&1 &
srun_pid=$!

# The temp name carries host and pid: .img.stage.<job>.<host>.<pid>.tmp
pid=""
for _ in $(seq 1 200); do
    t=$(on_node "$victim" sh -c "ls -A /nvme/$tag 2>/dev/null | grep '^\.img\.stage\..*\.$victim\.[0-9]*\.tmp\$'" || true)
    if [ -n "$t" ]; then
        pid=${t%.tmp}
        pid=${pid##*.}
        break
    fi
    sleep 0.05
done
[ -n "$pid" ] || { kill "$srun_pid" 2>/dev/null; fail "no temp file appeared on $victim: $(cat "$errf")"; }
sleep 0.3
kill -9 "$pid" || fail "cannot kill engine pid $pid on $victim"
wait "$srun_pid"
rc=$?
elapsed=$(($(date +%s) - start))
[ "$rc" -ne 0 ] || fail "run succeeded although $victim's engine was killed"
[ "$elapsed" -le 35 ] || fail "survivors took ${elapsed}s to give up (deadline 10s)"
for n in $MINICLUSTER_NODES; do
    on_node "$n" test ! -e "$dst" || fail "$dst exists on $n after a failed run"
    if [ "$n" != "$victim" ]; then
        left=$(on_node "$n" sh -c "ls -A /nvme/$tag 2>/dev/null | grep '\.tmp\$'" || true)
        [ -z "$left" ] || fail "survivor $n left a temp file: $left; the step's output: $(tail -25 "$errf")"
    fi
done

# the rerun sweeps the dead rank's temp file and completes
out=$(as_user srun --mpi=pmix -N"$k" --ntasks-per-node=1 "$engine" --source "$src" \
    --dest "$dst" --timeout=60s 2>&1) || fail "rerun failed: $out"
for n in $MINICLUSTER_NODES; do
    [ "$(on_node "$n" stat -c %s "$dst")" = 1073741824 ] || fail "$n: wrong size after rerun"
    left=$(on_node "$n" sh -c "ls -A /nvme/$tag | grep '\.tmp\$'" || true)
    [ -z "$left" ] || fail "temp file left on $n after rerun: $left"
done
wait_nodes_idle || fail "nodes not idle"
echo "ok: killed engine on $victim -> exit $rc after ${elapsed}s, no partial files; rerun clean"

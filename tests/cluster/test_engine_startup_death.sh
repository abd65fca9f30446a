#!/usr/bin/env bash
# Standalone engine (srun --mpi=pmix, no --kill-on-bad-exit): one rank dies
# before MPI_Init completes (as Open MPI 4.1.4 now and then does inside it).
# The other ranks must not wait inside MPI_Init for the deadline (or Slurm's
# PMIx fence timeout, 300 s): they leave after --stall-timeout + 2 s with a
# message that says MPI did not start, and leave no file. Cases F21, F22.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

read -r _ victim _ <<<"$MINICLUSTER_NODES"
[ -n "$victim" ] || skip "needs 2 nodes"
engine="$STAGEHAND_PREFIX/bin/stagehand-bcast"
[ -x "$engine" ] || fail "$engine not installed"
k=$(echo "$MINICLUSTER_NODES" | wc -w)
tok=estart$$
src=$MINICLUSTER_SHARED/$tok.src
dst=/nvme/$tok
errf=$(mktemp)
cleanup() {
    unwrap_on_node "$victim" "$engine"
    rm -f "$src" "$errf"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$dst"; done
}
trap cleanup EXIT
make_user_file "$src" 1 || fail "cannot create $src"
for n in $MINICLUSTER_NODES; do
    on_node "$n" sh -c "mkdir -p $dst && chown $MINICLUSTER_USER $dst" || fail "cannot create $dst on $n"
done
wrap_on_node "$victim" "$engine" 'kill -SEGV $$' || fail "cannot wrap the engine on $victim"

t0=$SECONDS
as_user timeout 120 srun -N"$k" --ntasks-per-node=1 --mpi=pmix "$engine" --source "$src" \
    --dest "$dst/f" --stall-timeout=5s --timeout=600s >/dev/null 2>"$errf" &&
    fail "the engine succeeded although a rank died"
took=$((SECONDS - t0))
echo "srun ended $took s after the start"
[ "$took" -lt 60 ] || fail "the surviving ranks waited $took s inside MPI_Init: $(tail -3 "$errf")"
grep -q "MPI did not start within 7 s (--stall-timeout): another rank died or never started" "$errf" ||
    fail "no start-up message: $(tail -5 "$errf")"
for n in $MINICLUSTER_NODES; do
    [ -z "$(on_node "$n" ls -A "$dst")" ] || fail "$n: files left in $dst: $(on_node "$n" ls -A "$dst")"
done
echo "ok: a rank that died before MPI_Init completed ended the others in $took s"

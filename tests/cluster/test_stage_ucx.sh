#!/usr/bin/env bash
# Issue 32: with pml=ucx in plugstack.conf the engine moves the bytes over
# Open MPI's UCX layer (UCX's TCP transport here) and every node gets a
# byte-identical copy. The site's mpi_env file limits ob1 to its loopback
# transport (OMPI_MCA_btl=self), so a staging that fell back to ob1 could not
# reach another node: the copies prove UCX carried them. The run leaves
# nothing behind in the nodes' /dev/shm and /tmp, and an ob1 staging right
# after it starts and copies (issue 32: once, an ob1 run after a UCX run did
# not start). Skipped where this stack's Open MPI has no pml ucx.
# shellcheck source=tests/cluster/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/cluster/faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 2 ] || skip "needs 2 nodes"
on_node n1 sh -c 'ompi_info --parsable 2>/dev/null | grep -q "^mca:pml:ucx:"' ||
    skip "this stack's Open MPI (${MINICLUSTER_STACK:-bookworm}) has no pml ucx (ompi_info on n1)"

tok=tucx$$
tag=stage-ucx.$$
src=$MINICLUSTER_SHARED/$tok.img
src2=$MINICLUSTER_SHARED/$tok.2.img
out=$MINICLUSTER_SHARED/$tok.out
mpienv=$MINICLUSTER_SHARED/$tok.mpi.env
dst=/nvme/$tok/img
dst2=/nvme/$tok/img2
plugstack_save
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    plugstack_restore
    rm -f "$src" "$src2" "$out" "$mpienv"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT

# What each node's /dev/shm and /tmp hold (names), to compare after the run.
shm_tmp() { on_node "$1" sh -c 'ls -A /dev/shm /tmp 2>/dev/null' | sort; }
declare -A before
for n in $MINICLUSTER_NODES; do before[$n]=$(shm_tmp "$n"); done

make_user_file "$src" 40
printf '# test_stage_ucx: no ob1 transport between nodes\nOMPI_MCA_btl=self\n' >"$mpienv"
chmod 0644 "$mpienv"
plugstack_add "pml=ucx mpi_env=$mpienv"

stage_job_ends COMPLETED 240 "$src:$dst" 'srun -N'"$k"' true && echo script-ran'
grep -q script-ran "$out" || fail "the job's script did not run: $(cat "$out")"
assert_staged_everywhere "$src" "$dst"
assert_no_temp_files "$dst"
wait_nodes_idle || fail "nodes not idle"
assert_no_runtime_state "$job_id"
for n in $MINICLUSTER_NODES; do
    left=$(comm -13 <(echo "${before[$n]}") <(shm_tmp "$n"))
    [ -z "$left" ] || fail "$n: the UCX staging left in /dev/shm or /tmp: $left"
done

# Straight after: the default pml (ob1) stages again.
plugstack_restore
make_user_file "$src2" 16
stage_job_ends COMPLETED 240 "$src2:$dst2"
assert_staged_everywhere "$src2" "$dst2"
assert_no_runtime_state "$job_id"
echo "ok: staged 40 MiB to $k nodes through pml ucx (ob1 limited to self), nothing left in /dev/shm or /tmp, an ob1 staging after it copied"

#!/usr/bin/env bash
# Foundation: the test cluster is a real multi-node Slurm cluster.
# sinfo shows every node idle; srun as the test user runs on distinct hosts.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
idle=$(sinfo -h -N -t idle -o '%N' | sort -u | wc -l)
[ "$idle" -eq "$k" ] || fail "sinfo shows $idle idle nodes, expected $k: $(sinfo)"

[ "$(id -u "$MINICLUSTER_USER")" -ne 0 ] || fail "test user must not be root"
out=$(as_user srun -N"$k" hostname) || fail "srun -N$k hostname failed: $out"
distinct=$(printf '%s\n' "$out" | sort -u | wc -l)
[ "$distinct" -eq "$k" ] || fail "expected $k distinct hostnames, got: $out"
for n in $MINICLUSTER_NODES; do
    printf '%s\n' "$out" | grep -qx "$n" || fail "node $n missing from: $out"
done
# The step ran as the test user, not root.
who=$(as_user srun -N1 id -un) || fail "srun id failed"
[ "$who" = "$MINICLUSTER_USER" ] || fail "step ran as '$who'"
wait_nodes_idle || fail "nodes not idle after jobs"
echo "ok: $k idle nodes, hostnames: $(echo "$out" | sort | tr '\n' ' ')"

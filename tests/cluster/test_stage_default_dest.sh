#!/usr/bin/env bash
# Issue 4: without DST the site's default directory is used
# (/nvme/stage/<user>/<basename>); root creates the per-user directory, owned
# by the user, mode 0700, never following links (F31).
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"

img=$MINICLUSTER_SHARED/t-default.$$.sqsh
cleanup() { rm -f "$img"; for n in $MINICLUSTER_NODES; do on_node "$n" rm -f "/nvme/stage/$MINICLUSTER_USER/t-default.$$.sqsh"; done; }
trap cleanup EXIT
make_user_file "$img" 2
k=$(echo "$MINICLUSTER_NODES" | wc -w)
want="/nvme/stage/$MINICLUSTER_USER/t-default.$$.sqsh"

out=$(as_user srun -N"$k" --stage-image="$img" sh -c 'echo "image=$STAGEHAND_IMAGE"' 2>&1) ||
    fail "srun failed: $out"
[ "$(printf '%s\n' "$out" | grep -c "^image=$want$")" -eq "$k" ] || fail "wrong default path: $out"
assert_staged_everywhere "$img" "$want"
for n in $MINICLUSTER_NODES; do
    got=$(on_node "$n" stat -c '%U %a' "/nvme/stage/$MINICLUSTER_USER")
    [ "$got" = "$MINICLUSTER_USER 700" ] || fail "$n: per-user directory is '$got'"
    got=$(on_node "$n" stat -c '%U %a' /nvme/stage)
    [ "$got" = "root 755" ] || fail "$n: /nvme/stage is '$got'"
done
echo "ok: default destination $want"

#!/usr/bin/env bash
# Engine: only stale nodes receive. One node's copy deleted -> only it is
# written; one node's copy overwritten in place with same-size different
# content -> detected by the default check (meta) and re-staged, the others
# untouched. Cases F05, F29 (current nodes do not rewrite).
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

engine_test_init "eng_partial.$$"
[ "$k" -ge 3 ] || skip "needs 3 nodes"
read -r first second third _ <<<"$MINICLUSTER_NODES"
as_user sh -c "head -c 3000000 /dev/urandom > $src" || fail "cannot write $src"
want=$(sha256sum <"$src" | cut -d' ' -f1)
run() {
    pmix_srun -N"$k" --ntasks-per-node=1 "$engine" \
        --timeout=60s --source "$src" --dest "$dst" --json 2>"$errf"
}
# status of node $2 in JSON $1
status_of() {
    python3 -c 'import json,sys
d=json.loads(sys.argv[1])
print([r["status"] for r in d["node_results"] if r["node"]==sys.argv[2]][0])' "$1" "$2"
}

out=$(run) || fail "first run failed: $out $(cat "$errf")"

# 1. one node's copy deleted: only that node receives
on_node_as_user "$third" rm -f "$dst"
ino1=$(on_node "$first" stat -c %i "$dst")
out=$(run) || fail "run after delete failed: $out $(cat "$errf")"
[ "$(status_of "$out" "$third")" = copied ] || fail "$third not re-staged: $out"
[ "$(status_of "$out" "$second")" = current ] || fail "$second rewritten: $out"
[ "$(on_node "$first" stat -c %i "$dst")" = "$ino1" ] || fail "$first rewritten"
[ "$(on_node "$third" sha256sum "$dst" | cut -d' ' -f1)" = "$want" ] || fail "$third content"

# 2. same size, different content on one node (written in place)
on_node_as_user "$second" sh -c "printf XXXX | dd of=$dst bs=1 seek=1000 conv=notrunc 2>/dev/null"
[ "$(on_node "$second" stat -c %s "$dst")" = 3000000 ] || fail "size changed"
out=$(run) || fail "run after corruption failed: $out $(cat "$errf")"
[ "$(status_of "$out" "$second")" = copied ] || fail "corrupt copy on $second not detected: $out"
[ "$(status_of "$out" "$third")" = current ] || fail "$third rewritten: $out"
for n in $MINICLUSTER_NODES; do
    [ "$(on_node "$n" sha256sum "$dst" | cut -d' ' -f1)" = "$want" ] || fail "$n content differs"
done

# 3. --check=content also catches a change that kept size and mtime
on_node_as_user "$first" sh -c "m=\$(stat -c %y $dst); printf YYYY | dd of=$dst bs=1 seek=10 conv=notrunc 2>/dev/null; touch -d \"\$m\" $dst"
out=$(pmix_srun -N"$k" --ntasks-per-node=1 "$engine" --timeout=60s --source "$src" \
    --dest "$dst" --check=content --json 2>"$errf") || fail "content run failed: $out $(cat "$errf")"
[ "$(status_of "$out" "$first")" = copied ] || fail "content check missed $first: $out"
[ "$(on_node "$first" sha256sum "$dst" | cut -d' ' -f1)" = "$want" ] || fail "$first content"
wait_nodes_idle || fail "nodes not idle"
echo "ok: only stale nodes received (deleted, same-size corrupt, content check)"

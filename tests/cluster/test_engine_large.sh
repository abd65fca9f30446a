#!/usr/bin/env bash
# Engine: a sparse source of 2^31 + 1 bytes on 2 nodes (case F09): 64-bit
# sizes and offsets, int MPI counts. Marker bytes around the 2^31 boundary
# and at the end must land at the right offsets on every node; the engine's
# end-to-end digest covers the rest.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

engine="$STAGEHAND_PREFIX/bin/stagehand-bcast"
[ -x "$engine" ] || fail "$engine not installed"
read -r a b _ <<<"$MINICLUSTER_NODES"
[ -n "$b" ] || skip "needs 2 nodes"
size=$((2147483648 + 1))
for n in $a $b; do
    free=$(on_node "$n" df -B1 --output=avail /nvme | tail -1)
    [ "$free" -gt $((size + 100000000)) ] || skip "$n: /nvme has only $free bytes free"
done
tag="eng_large.$$"
src="$MINICLUSTER_SHARED/$tag.src"
dst="/nvme/$tag/img"
errf=$(mktemp)
cleanup() {
    rm -f "$src" "$errf"
    for n in $a $b; do on_node "$n" rm -rf "/nvme/$tag"; done
}
trap cleanup EXIT
as_user truncate -s "$size" "$src" || fail "cannot create $src"
markers="0 4095 2147483646 2147483647 2147483648"
for off in $markers; do
    printf 'Z' | as_user dd of="$src" bs=1 seek="$off" conv=notrunc 2>/dev/null
done

out=$(pmix_srun -N2 --ntasks-per-node=1 "$engine" --source "$src" \
    --dest "$dst" --segment-size=64M --timeout=120s 2>"$errf") ||
    fail "engine failed: $out $(cat "$errf")"
printf '%s\n' "$out" | grep -q "2 copied" || fail "not copied to 2 nodes: $out"
for n in $a $b; do
    [ "$(on_node "$n" stat -c %s "$dst")" = "$size" ] || fail "$n: wrong size"
    for off in $markers 1000000 2147483645; do
        want=Z
        case " $markers " in *" $off "*) ;; *) want=0 ;; esac
        got=$(on_node "$n" dd if="$dst" bs=1 skip="$off" count=1 2>/dev/null | od -An -c | tr -d ' ')
        [ "$want" = 0 ] && want='\0'
        [ "$got" = "$want" ] || fail "$n: byte at $off is '$got', expected '$want'"
    done
done
printf '%s\n' "$out" | grep -E "time:|rate"
wait_nodes_idle || fail "nodes not idle"
echo "ok: 2^31+1 bytes on $a $b"

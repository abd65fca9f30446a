#!/usr/bin/env bash
# Security issue 30, "nothing a user can do may count as a node fault": a
# full filesystem is no broken node. With on_node_fault=drain in the
# plugstack, the attacker ($MINICLUSTER_OTHER_USER) fills /nvme on one node
# with a file of its own (fallocate until no space is left; the test
# cluster's /nvme is a per-node tmpfs); the victim's staging to /nvme then
# fails naming that node, its destination and the full filesystem (ENOSPC),
# and the slurmd log of the leader says so for the administrator; no node is
# drained, nothing partial under DST, no temp file. Once the attacker's file
# is removed, the victim's staging succeeds on every node.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 2 ] || skip "needs 2 nodes"
read -r leader full _ <<<"$MINICLUSTER_NODES"
filler=/nvme/.fill.$$
plugstack_save
cleanup() {
    local n
    on_node "$full" rm -f "$filler"
    fault_test_cleanup
    plugstack_restore
    for n in $MINICLUSTER_NODES; do scontrol update nodename="$n" state=resume 2>/dev/null; done
}
fault_test_files sfill sec-fill
trap cleanup EXIT

plugstack_add on_node_fault=drain

make_user_file "$src" 64 || fail "cannot create $src"
want=$(md5sum "$src" | cut -d' ' -f1)

# The attacker fills /nvme on $full with a file of its own.
avail=$(on_node "$full" df --output=avail -B1 /nvme | tail -1 | tr -d ' ')
[ "${avail:-0}" -gt 0 ] || fail "cannot read the free space of $full:/nvme"
on_node_as_other "$full" fallocate -l "$avail" "$filler" ||
    on_node_as_other "$full" dd if=/dev/zero of="$filler" bs=1M status=none 2>/dev/null
left=$(on_node "$full" df --output=avail -B1 /nvme | tail -1 | tr -d ' ')
[ "$left" -lt $((64 * 1048576)) ] || fail "the attacker could not fill $full:/nvme ($left bytes left)"
[ "$(on_node "$full" stat -c %U "$filler")" = "$MINICLUSTER_OTHER_USER" ] ||
    fail "the filler is not the attacker's"
echo "the attacker filled $full:/nvme ($((avail / 1048576)) MiB, $left bytes left)"

off=$(log_offset "$leader")
id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
         --wrap 'echo script-ran') || fail "sbatch refused: $id"
st=$(wait_job_end "$id" 90)
[ "$st" = FAILED ] || fail "job $id ended $st, expected FAILED ($(sinfo -h -R); $(cat "$out" 2>/dev/null))"
grep -qE "stagehand: --stage-image failed: image $dst: .*$full: .*$dst.*(filesystem is (too )?full|No space left on device)" "$out" ||
    fail "the message does not name $full, $dst and the full filesystem: $(cat "$out")"
! grep -q script-ran "$out" || fail "the batch script ran without its image"
log_since "$leader" "$off" | grep -aqE "node $full: DST's filesystem is full: .*$dst" ||
    fail "no error line naming $full and the full filesystem in $leader's slurmd log"
assert_stopped_staging_clean "$id" "$want" "the full filesystem"
for n in $MINICLUSTER_NODES; do
    on_node "$n" test ! -e "$dst" || fail "$n: $dst exists after the failed staging"
done
assert_no_drain
echo "ok: the attacker's full /nvme on $full fails the victim's job naming it, no drain"

on_node "$full" rm -f "$filler" || fail "cannot remove the attacker's file"
id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
         --wrap 'echo script-ran') || fail "sbatch refused: $id"
st=$(wait_job_end "$id" 90)
[ "$st" = COMPLETED ] || fail "the next job $id ended $st: $(cat "$out")"
grep -q script-ran "$out" || fail "the next job's script did not run: $(cat "$out")"
for n in $MINICLUSTER_NODES; do
    [ "$(node_md5 "$n" "$dst")" = "$want" ] || fail "$n: wrong DST after the filler was removed"
done
assert_no_drain
echo "ok: with the attacker's file removed the victim's staging succeeds on every node"

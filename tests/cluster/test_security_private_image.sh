#!/usr/bin/env bash
# Issue 30 item 1 (security): a private image must not become world-readable.
# The victim ($MINICLUSTER_USER) stages a mode-0600 SRC with umask 077 to
# /nvme/<tok>/sub/img; the attacker ($MINICLUSTER_OTHER_USER), on the same
# nodes, can neither read DST nor list the directories stagehand created for
# it. DST's permission bits are SRC's minus the job's umask (0600 here; a
# 0640 SRC staged with umask 022 gives 0640); the directories stagehand
# creates are 0700 minus the umask (dest_dir_mode). A current copy left
# world-readable (0644, as an older version made it) is made private by the
# next staging rather than trusted as it is. A step's staging (srun
# --stage-image in an allocation) follows that srun's umask. Then the same
# attack under on_node_fault=drain: the staging succeeds and no node is
# drained.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
other=$MINICLUSTER_OTHER_USER
id -u "$other" >/dev/null 2>&1 || skip "no second user $other on this cluster"
tok=spriv$$
tag=sec-priv.$$
src=$MINICLUSTER_SHARED/$tok.img
src2=$MINICLUSTER_SHARED/$tok.grp.img
out=$MINICLUSTER_SHARED/$tok.out
plugstack_save
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    plugstack_restore
    rm -f "$src" "$src2" "$out"
    for n in $MINICLUSTER_NODES; do
        on_node "$n" rm -rf "/nvme/$tok" "/nvme/$tok.d" "/nvme/$tok.s"
    done
}
trap cleanup EXIT

# SRC: 0600, unreadable to the attacker at its source
as_user sh -c "umask 077 && head -c 3000000 /dev/urandom >'$src'" || fail "cannot create $src"
[ "$(stat -c %a "$src")" = 600 ] || fail "SRC mode $(stat -c %a "$src")"
! as_other cat "$src" >/dev/null 2>&1 || fail "the attacker can read SRC itself: the test is void"
sum=$(sha256sum <"$src" | cut -d' ' -f1)

# stage DST=$1 from SRC=$2 with umask $3; prints the job's state
stage() {
    local jid
    jid=$(as_user sh -c "umask $3 && sbatch --parsable -J '$tag' -N$k -o '$out' \
              --stage-image='$2:$1' --wrap 'echo script-ran'") || { echo "sbatch: $jid"; return; }
    wait_job_end "$jid" 120
}

# what the attacker gets on every node for DST $1 and created dirs $2...
attack() {
    local dst=$1 n d
    shift
    for n in $MINICLUSTER_NODES; do
        if s=$(on_node_as_other "$n" sha256sum "$dst" 2>/dev/null); then
            [ "${s%% *}" = "$sum" ] && echo "$n: $other read $dst (sha256 matches SRC)"
            [ "${s%% *}" = "$sum" ] || echo "$n: $other read $dst"
        fi
        for d in "$@"; do
            on_node_as_other "$n" ls "$d" >/dev/null 2>&1 && echo "$n: $other lists $d ($(on_node "$n" stat -c %a "$d"))"
        done
    done
    true
}

# mode of $1 on every node, "n1:600 n2:600 ..."
modes() {
    local n
    for n in $MINICLUSTER_NODES; do printf '%s:%s ' "$n" "$(on_node "$n" stat -c %a "$1" 2>&1)"; done
}
want_modes() {
    local n
    for n in $MINICLUSTER_NODES; do printf '%s:%s ' "$n" "$1"; done
}

# (a) 0600 SRC, umask 077
dst=/nvme/$tok/sub/img
st=$(stage "$dst" "$src" 077)
[ "$st" = COMPLETED ] || fail "(a) job ended $st: $(cat "$out")"
assert_staged_everywhere "$src" "$dst"
leak=$(attack "$dst" "/nvme/$tok" "/nvme/$tok/sub")
[ -z "$leak" ] || fail "(a) the attacker reads the private image: $leak (DST modes: $(modes "$dst"); dirs: $(modes "/nvme/$tok") / $(modes "/nvme/$tok/sub"))"
[ "$(modes "$dst")" = "$(want_modes 600)" ] || fail "(a) DST modes $(modes "$dst"), expected 600"
[ "$(modes "/nvme/$tok")" = "$(want_modes 700)" ] || fail "(a) /nvme/$tok modes $(modes "/nvme/$tok"), expected 700"
[ "$(modes "/nvme/$tok/sub")" = "$(want_modes 700)" ] || fail "(a) /nvme/$tok/sub modes $(modes "/nvme/$tok/sub")"
echo "ok: (a) 0600 SRC with umask 077: DST 0600, created dirs 0700, $other can neither read DST nor list them"

# (b) a current copy left world-readable (an older version's 0644): made
# private by the next staging, not trusted as it is
for n in $MINICLUSTER_NODES; do on_node_as_user "$n" chmod 0644 "$dst" || fail "$n: chmod"; done
st=$(stage "$dst" "$src" 077)
[ "$st" = COMPLETED ] || fail "(b) job ended $st: $(cat "$out")"
[ "$(modes "$dst")" = "$(want_modes 600)" ] || fail "(b) a current 0644 DST stayed $(modes "$dst")"
[ -z "$(attack "$dst")" ] || fail "(b) $(attack "$dst")"
echo "ok: (b) a current copy left 0644 was made 0600 by the next staging"

# (c) a 0640 SRC with umask 022: DST 0640 (its group is SRC's), dirs 0700
as_user sh -c "umask 022 && head -c 1000000 /dev/urandom >'$src2' && chmod 0640 '$src2'" ||
    fail "cannot create $src2"
dst2=/nvme/$tok.d/g/img
st=$(stage "$dst2" "$src2" 022)
[ "$st" = COMPLETED ] || fail "(c) job ended $st: $(cat "$out")"
assert_staged_everywhere "$src2" "$dst2"
[ "$(modes "$dst2")" = "$(want_modes 640)" ] || fail "(c) DST modes $(modes "$dst2"), expected 640"
[ "$(modes "/nvme/$tok.d")" = "$(want_modes 700)" ] || fail "(c) created dir modes $(modes "/nvme/$tok.d")"
for n in $MINICLUSTER_NODES; do
    [ "$(on_node "$n" stat -c %g "$dst2")" = "$(stat -c %g "$src2")" ] || fail "(c) $n: DST's group is not SRC's"
done
echo "ok: (c) 0640 SRC with umask 022: DST 0640 with SRC's group, created dirs 0700"

# (d) a step's staging (srun --stage-image inside an allocation) follows
# that srun's umask: salloc under umask 022, srun under 077, the 0640 SRC
# gives 0600 copies
dst3=/nvme/$tok.s/img
sout=$(as_user sh -c "umask 022 && salloc -J '$tag' -N$k bash -c \"umask 077 && srun -N$k --stage-image='$src2:$dst3' true\"" 2>&1) ||
    fail "(d) salloc/srun: $sout"
assert_staged_everywhere "$src2" "$dst3"
[ "$(modes "$dst3")" = "$(want_modes 600)" ] || fail "(d) step staging: DST modes $(modes "$dst3"), expected 600"
[ "$(modes "/nvme/$tok.s")" = "$(want_modes 700)" ] || fail "(d) created dir modes $(modes "/nvme/$tok.s")"
[ -z "$(attack "$dst3" "/nvme/$tok.s")" ] || fail "(d) $(attack "$dst3" "/nvme/$tok.s")"
echo "ok: (d) a step's staging under srun's umask 077: DST 0600, created dir 0700"

# (e) the same attack under on_node_fault=drain: staged, private, nothing drained
plugstack_add on_node_fault=drain
for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
st=$(stage "$dst" "$src" 077)
[ "$st" = COMPLETED ] || fail "(e) job ended $st: $(cat "$out")"
leak=$(attack "$dst" "/nvme/$tok" "/nvme/$tok/sub")
[ -z "$leak" ] || fail "(e) under on_node_fault=drain: $leak"
[ "$(modes "$dst")" = "$(want_modes 600)" ] || fail "(e) DST modes $(modes "$dst")"
assert_no_drain
echo "ok: (e) under on_node_fault=drain: DST 0600, $other kept out, no node drained"

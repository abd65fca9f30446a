#!/usr/bin/env bash
# Issue 30 item 4 (security): a lock file planted by another user. The
# attacker ($MINICLUSTER_OTHER_USER) creates /nvme/.<name>.lock (mode 0644,
# its own) on the nodes before the victim ($MINICLUSTER_USER) stages to
# /nvme/<name>. The victim cannot take the lock: the job fails with a message
# naming the lock file's full path and its owner (user name and uid), not a
# misleading "cannot write in the directory"; nothing is left under DST's
# name (no DST, no temp file); the planted file is left alone. Once under
# on_node_fault=fail (the default) and once under on_node_fault=drain: a
# user's doing drains no node. (c) The attacker's file is writable by all
# (0666) and the attacker holds it (flock): the victim fails as at once,
# instead of waiting half its staging deadline for a lock it can never get.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
other=$MINICLUSTER_OTHER_USER
ouid=$(id -u "$other" 2>/dev/null) || skip "no second user $other on this cluster"
tok=slock$$
tag=sec-lock.$$
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
dst=/nvme/$tok
lock=/nvme/.$tok.lock
plugstack_save
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    plugstack_restore
    rm -f "$src" "$out"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -f "$dst" "$lock"; done
}
trap cleanup EXIT

make_user_file "$src" 2 || fail "cannot create $src"
for n in $MINICLUSTER_NODES; do
    on_node_as_other "$n" sh -c "umask 022 && : >'$lock'" || fail "$n: the attacker cannot plant $lock"
    [ "$(on_node "$n" stat -c '%U %a' "$lock")" = "$other 644" ] || fail "$n: $lock: $(on_node "$n" stat -c '%U %a' "$lock")"
done

# one attack: the job fails naming the lock file and its owner; nothing left
attempt() {
    local what=$1 jid st n
    jid=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
              --wrap 'echo script-ran') || fail "$what: sbatch: $jid"
    st=$(wait_job_end "$jid" 120)
    [ "$st" = FAILED ] || fail "$what: job ended $st: $(cat "$out")"
    ! grep -q script-ran "$out" || fail "$what: the job script ran"
    grep -q "lock file $lock belongs to $other (uid $ouid), not to you" "$out" ||
        fail "$what: the message does not name $lock and its owner $other (uid $ouid): $(cat "$out")"
    for n in $MINICLUSTER_NODES; do
        on_node "$n" test ! -e "$dst" || fail "$what: $n: $dst exists after the failure"
        [ "$(on_node "$n" stat -c '%U %a' "$lock")" = "$other $mode" ] || fail "$what: $n: the planted lock changed"
    done
    assert_no_temp_files "$dst"
    grep -m1 'lock file' "$out"
}

mode=644
msg=$(attempt "(a)") || { echo "$msg"; exit 1; }
echo "ok: (a) planted lock: job failed, message: $msg"
assert_no_drain

plugstack_add on_node_fault=drain
msg=$(attempt "(b)") || { echo "$msg"; exit 1; }
assert_no_drain
echo "ok: (b) under on_node_fault=drain: job failed naming the lock and its owner, no node drained"

# (c) writable by all and held by its owner
plugstack_restore
holders=()
for n in $MINICLUSTER_NODES; do
    on_node_as_other "$n" sh -c "umask 0 && chmod 666 '$lock' && exec flock '$lock' sleep 120" &
    holders+=($!)
done
for n in $MINICLUSTER_NODES; do
    for _ in $(seq 1 50); do
        [ "$(on_node "$n" stat -c %a "$lock")" = 666 ] && break
        sleep 0.1
    done
done
sleep 0.5
mode=666
t0=$SECONDS
stop_holders() {
    # flock and the sleep it forked (which holds the lock too): all the
    # attacker's processes on the node
    for n in $MINICLUSTER_NODES; do on_node "$n" pkill -u "$other" 2>/dev/null; done
    kill "${holders[@]}" 2>/dev/null
    wait 2>/dev/null
}
msg=$(attempt "(c)") || { stop_holders; echo "$msg"; exit 1; }
took=$((SECONDS - t0))
stop_holders
[ "$took" -lt 30 ] || fail "(c) the job took $took s to fail: it waited for the attacker's lock"
assert_no_drain
echo "ok: (c) a held lock file writable by all: job failed after $took s naming its owner"

#!/usr/bin/env bash
# Issue 6 security: while a job's agents form their control tree, hostile
# connections to the leader's control port from another node, by a user who
# does not hold the job key (nobody), are rejected and logged, and the
# staging is unaffected. doc/design.md §3 (control plane), §6.
#
# The leader listens only while its tree forms (ctl_join.c closes the listener
# once every child has joined), so the test keeps that window open: n3 is
# frozen (minicluster freeze: its slurmd and everything in its namespace)
# before the job starts, so the leader waits for it. The port is derived from
# the job id within [port_base, port_base + port_range) = [300, 500): the
# attacker scans that range from inside n2 with bash's /dev/tcp, then sends
# garbage, an oversized stream, a truncated HELLO, a HELLO with a proof made
# without the key, one replaying the agent's own challenge proof, and a HELLO
# for another job (tests/cluster/ctl_attack.py). n3 is thawed and the job
# must complete with DST correct everywhere; n1's slurmd log must hold the
# rejections ("handshake with connection from <n2's address> rejected: ...").
# Frames after the handshake (forged, truncated, oversized, replayed) need
# the session key; the unit tests (tests/unit/check_frame.c) cover them.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

read -r leader attacker frozen _ <<<"$MINICLUSTER_NODES"
[ -n "$frozen" ] || skip "needs 3 nodes"
command -v python3 >/dev/null || skip "python3 is needed for the attacker"
plug=$(grep '^required .*stagehand.so' "$(dirname "$SLURM_CONF")/plugstack.conf")
case "$plug" in *port_base=* | *port_range=*) skip "the test assumes the default ports 300+200" ;; esac
tok=sctl$$
tag=sec-ctl.$$
dst=/nvme/$tok/img
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
tool=$MINICLUSTER_SHARED/$tok.py
cleanup() {
    "$MINICLUSTER" thaw "$frozen" 2>/dev/null
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -f "$src" "$out" "$tool"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT
make_user_file "$src" 16 || fail "cannot create $src"
install -m 0644 "$(dirname "$0")/ctl_attack.py" "$tool"
leader_ip=$(scontrol show node "$leader" | grep -oE 'NodeAddr=[^ ]+' | cut -d= -f2)
[ -n "$leader_ip" ] || fail "no address for $leader"
off=$(log_offset "$leader")

"$MINICLUSTER" freeze "$frozen" || fail "cannot freeze $frozen"
id=$(as_user sbatch --parsable -J "$tag" -N3 -w "$leader,$attacker,$frozen" -o "$out" \
         --stage-image="$src:$dst" --wrap 'echo script-ran') || fail "sbatch: $id"
port0=$(python3 "$tool" port "$id" 300 200)
echo "job $id; $frozen frozen; the leader's derived control port is $port0"

# scan [300, 500) on the leader from the attacker node until a port of
# this job's probe window (derived port and up) listens
port=""
for _ in $(seq 1 40); do
    open=$(on_node "$attacker" runuser -u nobody -- bash -c "
        for p in \$(seq 300 499); do
            (exec 3<>/dev/tcp/$leader_ip/\$p) 2>/dev/null && echo \$p
        done" 2>/dev/null)
    for p in $open; do
        d=$(((p - port0 + 200) % 200))
        if [ "$d" -lt 64 ]; then port=$p; break; fi
    done
    [ -n "$port" ] && break
    sleep 0.5
done
[ -n "$port" ] || fail "the leader's control port never listened (derived $port0; open: $open; job: $(scontrol -o show job "$id" | grep -oE 'JobState=[^ ]+ Reason=[^ ]+'))"
echo "leader $leader listens on $port (derived $port0); open ports in the range: $(one_line "$open")"

res=$(on_node "$attacker" runuser -u nobody -- python3 "$tool" attack "$leader_ip" "$port" "$id" 2>&1) ||
    fail "attacker failed: $res"
printf '%s\n' "$res" | sed 's/^/  attack /'
"$MINICLUSTER" thaw "$frozen" || fail "cannot thaw $frozen"

st=$(wait_job_end "$id" 90)
[ "$st" = COMPLETED ] || fail "the staging under attack ended $st: $(cat "$out")"
grep -q script-ran "$out" || fail "script did not run: $(cat "$out")"
assert_staged_everywhere "$src" "$dst"
# every attack connection was refused: none left open by the agent
if grep -E '^(garbage|oversized|truncated|keyless|replayed|other-job): open' <<<"$res"; then
    fail "the agent kept a hostile connection open: $res"
fi

log=$(log_since "$leader" "$off" | grep "stagehand-agent job=$id node=$leader")
garbage=$(grep -c "rejected: not a stagehand handshake message" <<<"$log" || true)
keyless=$(grep -c "rejected: it does not prove the job key (keyless or foreign peer)" <<<"$log" || true)
trunc=$(grep -c "rejected: truncated message" <<<"$log" || true)
echo "logged rejections on $leader: $garbage not-a-handshake, $keyless without the key, $trunc truncated"
[ "$garbage" -ge 2 ] || fail "garbage/oversized connections not logged as rejected: $log"
[ "$keyless" -ge 2 ] || fail "keyless/replayed proofs not logged as rejected: $log"
[ "$trunc" -ge 1 ] || fail "truncated hello not logged as rejected: $log"
grep -q "connection from .*rejected" <<<"$log" || fail "rejections do not name the peer: $log"
assert_no_temp_files "$dst"
assert_runtime_gone "$id"
assert_no_drain
echo "ok: hostile and keyless connections rejected and logged; staging unaffected"

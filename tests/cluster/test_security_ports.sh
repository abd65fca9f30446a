#!/usr/bin/env bash
# Issue 30 item 2 (security): another user cannot make a job's staging fail
# by binding its control-plane ports. The ports are privileged (default
# [300, 500), below the kernel's ip_unprivileged_port_start), bound by root
# (the sentinel, or the agent before it drops to the job user: it keeps no
# capability); a port another root service holds is probed past.
#
# The attacker ($MINICLUSTER_OTHER_USER) holds, on every node, every port of
# the configured range (and of the pre-issue-30 default range [7300, 8300),
# which the attack on the old code needs) on 0.0.0.0 and [::], listening;
# its binds of the privileged range must fail with EACCES. The victim
# ($MINICLUSTER_USER) then stages to every node, which must succeed, once
# with the cluster's policy and once with on_node_fault=drain (no node
# drained). Before the fix every staging failed ("control plane: Address
# already in use").
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 2 ] || skip "needs 2 nodes"
command -v python3 >/dev/null || skip "python3 is needed for the attacker"
line=$(grep '^required .*stagehand\.so' "$plugstack") || fail "no stagehand line in $plugstack"
base=$(grep -oE 'port_base=[0-9]+' <<<"$line" | cut -d= -f2)
range=$(grep -oE 'port_range=[0-9]+' <<<"$line" | cut -d= -f2)
base=${base:-300}
range=${range:-200}
tok=sports$$
tag=sec-ports.$$
dst=/nvme/$tok/img
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
tool=$MINICLUSTER_SHARED/$tok.py
plugstack_save
hog_pids=()
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    touch "$MINICLUSTER_SHARED/$tok.stop"
    for p in "${hog_pids[@]}"; do wait "$p" 2>/dev/null; done
    plugstack_restore
    rm -f "$src" "$out" "$tool" "$MINICLUSTER_SHARED"/"$tok".*
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT
make_user_file "$src" 8 || fail "cannot create $src"
install -m 0644 "$(dirname "$0")/ctl_attack.py" "$tool"

# the attacker's processes, one per node, each holding what it could bind
for n in $MINICLUSTER_NODES; do
    on_node "$n" cat /proc/sys/net/ipv4/ip_unprivileged_port_start >"$MINICLUSTER_SHARED/$tok.$n.unpriv" 2>/dev/null
    on_node_as_other "$n" python3 "$tool" hog "$MINICLUSTER_SHARED/$tok.$n.ready" "$MINICLUSTER_SHARED/$tok.stop" \
        "$base:$range" 7300:1000 &
    hog_pids+=("$!")
done
for n in $MINICLUSTER_NODES; do
    for _ in $(seq 1 150); do [ -e "$MINICLUSTER_SHARED/$tok.$n.ready" ] && break; sleep 0.2; done
    [ -e "$MINICLUSTER_SHARED/$tok.$n.ready" ] || fail "$n: the attacker did not report its binds"
    echo "$n (ip_unprivileged_port_start $(cat "$MINICLUSTER_SHARED/$tok.$n.unpriv")): $(tr '\n' ';' <"$MINICLUSTER_SHARED/$tok.$n.ready")"
    grep -q "^$base:$range bound" "$MINICLUSTER_SHARED/$tok.$n.ready" &&
        echo "  WARNING: $n: the attacker could bind ports of the control-plane range"
done

run_victim() {
    local what=$1 id
    echo "$what:"
    stage_job_ends COMPLETED 120 "$src:$dst"
    id=$job_id
    grep -q script-ran "$out" || fail "$what: the script did not run: $(cat "$out")"
    assert_staged_everywhere "$src" "$dst"
    assert_runtime_gone "$id"
    assert_no_drain
    echo "ok: $what: job $id staged to $k nodes while the attacker held its ports"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
run_victim "on_node_fault as configured"

plugstack_add on_node_fault=drain
run_victim "on_node_fault=drain"

# the privileged range was refused to the attacker everywhere (EACCES)
for n in $MINICLUSTER_NODES; do
    denied=$(sed -n "s/^$base:$range Permission denied: //p" "$MINICLUSTER_SHARED/$tok.$n.ready")
    if grep -q "^$base:$range bound" "$MINICLUSTER_SHARED/$tok.$n.ready" || [ "${denied:-0}" -lt "$range" ]; then
        fail "$n: the attacker's binds of $base..$((base + range - 1)) did not all fail with EACCES: $(cat "$MINICLUSTER_SHARED/$tok.$n.ready")"
    fi
done
echo "ok: another user cannot bind the control-plane ports (EACCES) nor fail a staging by holding them"

# Every port of the range held by root's listeners on one node, as by too
# many other stagings at once there (a user can start, and stop, many). On
# a leaf of the control tree (n2 of 3: no node connects to it) the staging
# needs no listener and succeeds; on the first node, which the others
# connect to, the job fails saying why, and even under on_node_fault=drain
# no node drains.
touch "$MINICLUSTER_SHARED/$tok.stop"
for p in "${hog_pids[@]}"; do wait "$p" 2>/dev/null; done
release_ports() {
    touch "$MINICLUSTER_SHARED/$tok.stop"
    for p in "${hog_pids[@]}"; do wait "$p" 2>/dev/null; done
}
hold_all_ports() { # node; the last job's processes may still hold a port a moment
    for _ in $(seq 1 30); do
        rm -f "$MINICLUSTER_SHARED/$tok.stop" "$MINICLUSTER_SHARED/$tok.root.ready"
        on_node "$1" python3 "$tool" hog "$MINICLUSTER_SHARED/$tok.root.ready" "$MINICLUSTER_SHARED/$tok.stop" "$base:$range" &
        hog_pids=("$!")
        for _ in $(seq 1 150); do [ -e "$MINICLUSTER_SHARED/$tok.root.ready" ] && break; sleep 0.2; done
        grep -q "^$base:$range bound: $((2 * range))" "$MINICLUSTER_SHARED/$tok.root.ready" 2>/dev/null && return
        release_ports
        sleep 1
    done
    fail "root could not hold the whole range on $1: $(cat "$MINICLUSTER_SHARED/$tok.root.ready" 2>/dev/null)"
}
read -r first _ <<<"$MINICLUSTER_NODES"
hold_all_ports n2
run_victim "every port held on n2, a leaf"
release_ports

# the other nodes give up on $first after join_timeout: 20 s, not the
# default 60 s, for the CI budget (the outcome is $first's own message)
plugstack_add join_timeout=20s
hold_all_ports "$first"
echo "every port held on $first:"
stage_job_ends FAILED 120 "$src:$dst"
id=$job_id
grep -q "$first: no free control-plane port.*too many stagings on this node at once" "$out" ||
    fail "job $id: the message does not say $first has no free port: $(cat "$out")"
! grep -q script-ran "$out" || fail "job $id: the script ran"
assert_no_temp_files "$dst"
assert_no_drain
release_ports
echo "ok: no free control-plane port on $first: the job failed saying so, no node drained"

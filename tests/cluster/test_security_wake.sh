#!/usr/bin/env bash
# Issue 30 item 7 (security): sentinel wake-ups are authenticated. When every
# node of a job is current, each node keeps a sentinel (root) on the job's
# control port, which starts the agent for the first connection; that agent
# joins (reaches its parent, wakes its children) only after a peer proved
# K_job on its port: a child's handshake, or its parent's wake-up, which is a
# handshake too. Before the fix any connection started the agents of every
# node of the job.
#
# A job stages once; a second job with the same image leaves sentinels on
# every node. The other user ($MINICLUSTER_OTHER_USER) connects from another
# node to the last node's sentinel port (garbage, a connection closed at
# once, a HELLO claiming to be its parent without the key). The sentinels of
# the other nodes must stay sentinels (no stagehand-agent there), the
# attacked node's process still waits (it joined nobody). Then a job with one
# stale node wakes the sentinels legitimately and must succeed. All of it
# twice: with the cluster's policy and with on_node_fault=drain (no drain).
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

read -r -a nodes <<<"$MINICLUSTER_NODES"
k=${#nodes[@]}
[ "$k" -ge 3 ] || skip "needs 3 nodes"
command -v python3 >/dev/null || skip "python3 is needed for the attacker"
target=${nodes[$((k - 1))]}
attacker=${nodes[1]}
line=$(grep '^required .*stagehand\.so' "$plugstack") || fail "no stagehand line in $plugstack"
base=$(grep -oE 'port_base=[0-9]+' <<<"$line" | cut -d= -f2)
range=$(grep -oE 'port_range=[0-9]+' <<<"$line" | cut -d= -f2)
tok=swake$$
tag=sec-wake.$$
dst=/nvme/$tok/img
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
tool=$MINICLUSTER_SHARED/$tok.py
release=$MINICLUSTER_SHARED/$tok.release
plugstack_save
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    plugstack_restore
    rm -f "$src" "$out" "$tool" "$release"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT
make_user_file "$src" 8 || fail "cannot create $src"
install -m 0644 "$(dirname "$0")/ctl_attack.py" "$tool"
target_ip=$(scontrol show node "$target" | grep -oE 'NodeAddr=[^ ]+' | cut -d= -f2)
[ -n "$target_ip" ] || fail "no address for $target"

# The installed stagehand's default range: the man page's CONFIGURATION.
if [ -z "$base" ] || [ -z "$range" ]; then
    man=$(find "$STAGEHAND_PREFIX" -name stagehand.8 2>/dev/null | head -1)
    dbase=$(sed -n '/^\.BI port_base=/,/^\.TP/p' "$man" 2>/dev/null | grep -oE 'Default: [0-9]+' | grep -oE '[0-9]+')
    drange=$(sed -n '/^\.BI port_range=/,/^\.TP/p' "$man" 2>/dev/null | grep -oE 'Default: [0-9]+' | grep -oE '[0-9]+')
    base=${base:-${dbase:-300}}
    range=${range:-${drange:-200}}
fi
echo "control-plane ports $base+$range; attacker on $attacker, target $target"

round() {
    local what=$1 id st n rec comm res pids
    as_user sbatch --parsable --wait -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
        --wrap true >/dev/null || fail "$what: first staging: $(cat "$out")"
    # the job runs (its nodes' sentinels wait) until the checks below are
    # done and release it (at most 60 s)
    rm -f "$release"
    id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
             --wrap "echo started; for i in \$(seq 1 300); do [ -e '$release' ] && break; sleep 0.2; done") ||
        fail "$what: sbatch"
    for _ in $(seq 1 150); do grep -q started "$out" 2>/dev/null && break; sleep 0.1; done
    grep -q started "$out" || fail "$what: job $id did not start: $(cat "$out")"
    declare -A snt=()
    for n in $MINICLUSTER_NODES; do
        rec=$(on_node "$n" cat "/run/stagehand/$id.agent" 2>/dev/null | cut -d' ' -f1)
        [ -n "$rec" ] || fail "$what: $n: no sentinel recorded for job $id"
        [ "$(on_node "$n" cat "/proc/$rec/comm" 2>/dev/null)" = sh-sentinel ] ||
            fail "$what: $n: $rec is not a sentinel before the attack"
        snt[$n]=$rec
    done

    res=$(on_node_as_other "$attacker" python3 "$tool" wake "$target_ip" "$id" "$base" "$range" \
              0 $((k - 1)) 2>&1) || fail "$what: the attacker could not reach $target's sentinel: $res"
    while read -r l; do echo "  $what: attack $l"; done <<<"$res"
    sleep 4
    for n in $MINICLUSTER_NODES; do
        [ "$n" = "$target" ] && continue
        comm=$(on_node "$n" cat "/proc/${snt[$n]}/comm" 2>/dev/null)
        pids=$(named_pids "$n" stagehand-agent | tr '\n' ' ')
        if [ "$comm" != sh-sentinel ] || [ -n "$pids" ]; then
            fail "$what: a connection that proved nothing to $target's sentinel woke $n (its sentinel ${snt[$n]} is now '${comm:-gone}', agents: '$pids')"
        fi
    done
    comm=$(on_node "$target" cat "/proc/${snt[$target]}/comm" 2>/dev/null)
    case "$comm" in
        sh-sentinel | stagehand-agent) ;;
        *) fail "$what: $target's sentinel/agent ${snt[$target]} did not keep waiting (gone)" ;;
    esac
    echo "ok: $what: the unauthenticated wake-up of $target reached no other node ($target: $comm still waiting)"
    touch "$release"
    st=$(wait_job_end "$id" 60)
    [ "$st" = COMPLETED ] || fail "$what: job $id ended $st: $(cat "$out")"

    # a legitimate wake-up: the target is stale, its agent wakes the others
    # (a step on every node: the batch node is current and would not wait)
    on_node "$target" rm -rf "/nvme/$tok"
    id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
             --wrap "srun -N$k true && echo script-ran") || fail "$what: sbatch"
    st=$(wait_job_end "$id" 120)
    [ "$st" = COMPLETED ] || fail "$what: the staging to stale $target (job $id) ended $st: $(cat "$out")"
    grep -q script-ran "$out" || fail "$what: the script did not run: $(cat "$out")"
    assert_staged_everywhere "$src" "$dst"
    assert_runtime_gone "$id"
    assert_no_drain
    echo "ok: $what: a stale $target woke the other nodes' sentinels (job $id)"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
round "on_node_fault as configured"

plugstack_add on_node_fault=drain
round "on_node_fault=drain"
assert_no_drain
echo "ok: sentinel wake-ups that prove nothing wake no node; legitimate ones work"

#!/usr/bin/env bash
# Issue 6 security (doc/design.md §6): during a staging, on every node the
# engine, its PMIx host and the agent run as the job user (real, effective,
# saved and filesystem uid and gid; the user's own groups; no capability:
# issue 30 item 2), never as root; the engine cannot be traced even by its
# user (non-dumpable: a debugger could make it crash, a node fault);
# every file the staging writes belongs to the job user: DST, its lock file,
# the directories created for it, and the per-user default directory (the
# components above it stay root's 0755, the user's own is 0700); the runtime
# directory /run/stagehand/<jobid> and the PMIx directory in it are 0700 and
# the user's. Cases F17, F20, F31.
#
# What protects the job's PMIx server (measured with PMIx 4.2): it listens on
# TCP 127.0.0.1 inside the node (the address is in the engine's environment
# as PMIX_SERVER_URI*), not on a Unix socket, so the 0700 directory guards
# only its files (dstore segments, rendezvous files). A connection must
# present a namespace registered with the server, "stagehand.<jobid>.<64
# random bits>" (a fresh one per run, sh_pmix_make_nspace), a registered
# rank, and the job user's uid/gid (PMIx "native" security); the namespace
# is known only from the engine's environment (/proc/PID/environ: the job
# user and root) and the user-only runtime directory. The test checks each of
# those: loopback-only listener, environment and runtime directory closed to
# another user (nobody). The control port is covered by
# test_security_ctl.sh; MPI traffic itself is not authenticated (see the
# issue 6 report).
# shellcheck source=tests/cluster/lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=tests/cluster/faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
user=$MINICLUSTER_USER
uid=$(id -u "$user")
gid=$(id -g "$user")
groups=$(id -G "$user" | tr ' ' '\n' | sort -n | tr '\n' ' ')
tok=sid$$
tag=sec-id.$$
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
dst=/nvme/$tok/sub/dir/img
stopped=""
cleanup() {
    # shellcheck disable=SC2086  # a list of pids
    [ -z "$stopped" ] || kill -CONT $stopped 2>/dev/null
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -f "$src" "$out"
    for n in $MINICLUSTER_NODES; do
        on_node "$n" rm -rf "/nvme/$tok" "/nvme/stage/$user/$tok.img" "/nvme/stage/$user/.$tok.img.lock"
    done
}
trap cleanup EXIT
as_user sh -c "truncate -s 768M '$src' && head -c 65536 /dev/urandom | dd of='$src' conv=notrunc status=none" ||
    fail "cannot create $src"

id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
         --wrap 'echo script-ran') || fail "sbatch: $id"
# While the engines run: who they are. An engine runs for a second or two and
# one look at a node takes a few hundred ms, more on a loaded host: each
# engine is stopped (SIGSTOP) as soon as it is seen, which also holds up the
# others' broadcast, until every node has been looked at.
# engine_pids matches the job user's processes only; the look below takes the
# pid from here rather than searching again (a search from a shell whose own
# command line holds the pattern can find its own short-lived subshell first,
# once PIDs have wrapped).
seen=0
declare -A engine
for _ in $(seq 1 300); do
    have=0
    for n in $MINICLUSTER_NODES; do
        p=$(engine_pids "$n" "$tok")
        [ -n "$p" ] || continue
        # shellcheck disable=SC2086  # a list of pids
        kill -STOP $p 2>/dev/null
        stopped="$stopped $p"
        engine[$n]=$(head -1 <<<"$p")
        have=$((have + 1))
    done
    [ "$have" = "$k" ] && break
    sleep 0.02
done
[ "$have" = "$k" ] || fail "engines seen on $have of $k nodes (job $id: $(cat "$out" 2>/dev/null))"
# one look per node, all nodes first:
# the engine, its PMIx host (parent) and the agent (grandparent), the
# listeners, the runtime directory, and what another user (nobody) can see
declare -A snap
for n in $MINICLUSTER_NODES; do
    snap[$n]=$(on_node "$n" sh -c '
        id=$1; e=$2
        [ -d /proc/$e ] || exit 0
        h=$(ps -o ppid= -p $e | tr -d " "); a=$(ps -o ppid= -p $h | tr -d " ")
        for p in $e $h $a; do
            echo "pid $p $(ps -o user=,comm= -p $p)"
            grep -E "^(Uid|Gid|Groups|CapPrm|CapEff|CapInh|CapAmb):" /proc/$p/status
        done
        echo "host $h"
        ss -Hltnp | grep -E "pid=($h|$a)," | sed "s/^/listen /"
        echo "rundir $(stat -c "%U %a" /run/stagehand/$id) $(stat -c "%U %a" /run/stagehand)"
        for d in /run/stagehand/$id/pmix.*; do echo "pmixdir $d $(stat -c "%U %a" $d)"; done
        runuser -u nobody -- cat /proc/$e/environ >/dev/null 2>&1 && echo "nobody-reads-environ"
        runuser -u nobody -- cat /proc/$e/cmdline 2>/dev/null | tr "\0" " " | grep -q "$3" &&
            echo "nobody-sees-paths"
        runuser -u nobody -- ls /run/stagehand/$id >/dev/null 2>&1 && echo "nobody-lists-rundir"
        true' sh "$id" "${engine[$n]}" "$tok")
done
# shellcheck disable=SC2086
kill -CONT $stopped 2>/dev/null
# The engine makes itself non-dumpable (--untraceable) as its main() starts:
# then not even its own user may trace it or read its memory or environment
# (issue 30: an engine made to crash could drain the node). Looked at once
# the engines run again (they were stopped as soon as they appeared, maybe
# before main()), on the nodes whose engine is still there.
sleep 0.3
untraced=0
for n in $MINICLUSTER_NODES; do
    r=$(on_node "$n" sh -c '[ "$(cat /proc/$1/comm 2>/dev/null)" = stagehand-bcast ] || exit 0
        if runuser -u "$2" -- cat /proc/$1/environ >/dev/null 2>&1; then echo readable; else echo closed; fi' \
        sh "${engine[$n]}" "$user")
    [ "$r" != readable ] || fail "$n: $user can read its engine's /proc environ (a debugger could attach)"
    [ "$r" != closed ] || untraced=$((untraced + 1))
done
[ "$untraced" -ge 1 ] || echo "note: every engine had ended before the look at its /proc"
for n in $MINICLUSTER_NODES; do
    sn=${snap[$n]}
    [ "$(grep -c '^pid ' <<<"$sn")" = 3 ] || fail "$n: engine, host and agent not all seen: $sn"
    [ "$(grep -m1 '^pid ' <<<"$sn" | awk '{print $4}')" = stagehand-bcast ] ||
        fail "$n: the process seen as the engine is not stagehand-bcast: $sn"
    while read -r _ p who comm; do
        st=$(awk -v p="$p" '/^pid / {on = ($2 == p)} on' <<<"$sn")
        [ "$(awk '/^Uid:/ {print $2, $3, $4, $5}' <<<"$st")" = "$uid $uid $uid $uid" ] ||
            fail "$n: $comm (pid $p) does not run as uid $uid: $(grep -E '^(Uid|Gid)' <<<"$st")"
        [ "$(awk '/^Gid:/ {print $2, $3, $4, $5}' <<<"$st")" = "$gid $gid $gid $gid" ] ||
            fail "$n: $comm (pid $p) does not run as gid $gid"
        [ "$(awk '/^Groups:/ {for (i = 2; i <= NF; i++) print $i}' <<<"$st" | sort -n | tr '\n' ' ')" = "$groups" ] ||
            fail "$n: $comm (pid $p) has groups other than the user's: $(grep Groups <<<"$st")"
        [ "$who" = "$user" ] || fail "$n: ps says $comm (pid $p) runs as $who"
        # no capability left either (the listeners were bound before the drop)
        [ "$(awk '/^Cap(Prm|Eff|Inh|Amb):/ {print $2}' <<<"$st" | sort -u)" = 0000000000000000 ] ||
            fail "$n: $comm (pid $p) holds capabilities: $(grep -E '^Cap' <<<"$st" | tr '\n' ' ')"
        seen=$((seen + 1))
    done < <(grep '^pid ' <<<"$sn")
    # the job's runtime directory and PMIx directory: the user's, 0700
    grep -qx "rundir $user 700 root 755" <<<"$sn" || fail "$n: runtime directories: $(grep ^rundir <<<"$sn")"
    grep -q '^pmixdir ' <<<"$sn" || fail "$n: no PMIx directory in /run/stagehand/$id"
    ! grep '^pmixdir ' <<<"$sn" | grep -vq " $user 700\$" || fail "$n: $(grep ^pmixdir <<<"$sn")"
    # the PMIx server: loopback only; its namespace closed to other users.
    # Beyond loopback only the agent listens: the job's control-plane port,
    # privileged (default range 300-499), bound by root before the drop.
    h=$(awk '/^host / {print $2}' <<<"$sn")
    grep -q '^listen ' <<<"$sn" || fail "$n: no listener of the PMIx host found"
    ! grep '^listen ' <<<"$sn" | grep "pid=$h," | grep -vqE '127\.0\.0\.1:|\[::1\]:' ||
        fail "$n: the PMIx server listens beyond loopback: $(grep ^listen <<<"$sn")"
    while read -r line; do
        port=$(awk '{print $5}' <<<"$line" | sed 's/.*://')
        { [ "$port" -ge 300 ] && [ "$port" -lt 500 ] && ! grep -q "pid=$h," <<<"$line"; } ||
            fail "$n: a listener beyond loopback that is not the agent's control-plane port: $line"
    done < <(grep '^listen ' <<<"$sn" | grep -vE '127\.0\.0\.1:|\[::1\]:')
    ! grep -q '^nobody-reads-environ' <<<"$sn" || fail "$n: another user can read the engine's environment (PMIx namespace)"
    ! grep -q '^nobody-sees-paths' <<<"$sn" || fail "$n: another user sees SRC or DST on the engine's command line"
    ! grep -q '^nobody-lists-rundir' <<<"$sn" || fail "$n: another user can list /run/stagehand/$id"
done
[ "$seen" -ge $((3 * k)) ] || fail "saw only $seen staging processes on $k nodes"
st=$(wait_job_end "$id" 90)
[ "$st" = COMPLETED ] || fail "job ended $st: $(cat "$out")"
echo "ok: engine, PMIx host and agent ran as $user ($seen processes checked); runtime dirs 0700 $user; PMIx server loopback-only, namespace hidden from others"

for n in $MINICLUSTER_NODES; do
    for f in "/nvme/$tok" "/nvme/$tok/sub" "/nvme/$tok/sub/dir" "$dst" "/nvme/$tok/sub/dir/.img.lock"; do
        o=$(on_node "$n" stat -c %U "$f")
        [ "$o" = "$user" ] || fail "$n: $f belongs to $o"
    done
done
echo "ok: DST, its lock and the directories created for it belong to $user"

# default destination: /nvme/stage/<user>/<basename>
id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src" \
         --wrap 'echo $STAGEHAND_IMAGE') || fail "sbatch: $id"
st=$(wait_job_end "$id" 90)
[ "$st" = COMPLETED ] || fail "default-destination job ended $st: $(cat "$out")"
grep -qx "/nvme/stage/$user/$tok.img" "$out" || fail "STAGEHAND_IMAGE: $(cat "$out")"
for n in $MINICLUSTER_NODES; do
    [ "$(on_node "$n" stat -c '%U %a' /nvme/stage)" = "root 755" ] || fail "$n: /nvme/stage is not root 0755"
    [ "$(on_node "$n" stat -c '%U %a' "/nvme/stage/$user")" = "$user 700" ] || fail "$n: /nvme/stage/$user is not $user 0700"
    [ "$(on_node "$n" stat -c %U "/nvme/stage/$user/$tok.img")" = "$user" ] || fail "$n: default DST not $user's"
done
assert_runtime_gone "$id"
assert_no_drain
echo "ok: the default destination directory is the user's (0700) below root's"

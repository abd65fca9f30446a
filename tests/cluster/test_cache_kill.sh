#!/usr/bin/env bash
# Issue 34 item 7: crash safety of the node image cache (cache=). A job
# stages SRC without DST into the cache on every node; the last node's link
# is shaped so that the copy lasts some 12 s there, and its engine is killed
# (SIGKILL) at about half of the image (its writes). Then:
#  - the job fails promptly, its batch script does not run, and its error
#    output and the victim's slurmd log name the victim and "engine killed
#    by signal 9"; no node is drained;
#  - no engine, runtime state or job directory (DIR/job/<jobid>) is left;
#  - the victim's cache holds nothing a later job could take for current:
#    no entry, no dot name (".evict-*", a temp file), no file at all under
#    DIR; `stagehand-cache list` there does not show SRC;
#  - the other nodes were not at fault: the copy went on without the victim
#    (doc/design.md §5, "Repair around a dead node") and each adopted its
#    verified copy: one entry, root's, 0444, one link, SRC's bytes, and
#    nothing else under DIR; `list` shows SRC there;
#  - the same SRC then stages again: the job completes, copies to the victim
#    only ("1 copied, K-1 current"), and every node's image and entry are
#    SRC's bytes.
# Cases F06, F22.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts run on the node
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 2 ] || skip "needs 2 nodes"
victim=${MINICLUSTER_NODES##* }
others=${MINICLUSTER_NODES% *}
cache=/nvme/stagehand-cache
tool=$STAGEHAND_PREFIX/sbin/stagehand-cache
[ -x "$tool" ] || tool=/usr/sbin/stagehand-cache
fault_test_files ckill cache-kill
plugstack_save
cleanup() {
    fault_test_cleanup
    plugstack_restore
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$cache"; done
}
trap cleanup EXIT

mib=64
size=$((mib * 1048576))
make_slow_source "$src" "$mib" || fail "cannot create $src"
want=$(sha256sum <"$src" | cut -d' ' -f1)
for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$cache"; done
plugstack_add cache=$cache verbose=yes
# The victim's link at 50 Mbit/s (about 5.5 MiB/s): the chain runs at its
# pace, so half of the image takes some 6 s on the victim however fast or
# loaded the host is; the copy around it runs over unshaped links.
shape_links --link 50mbit --node "$victim" || fail "cannot shape $victim's link"

# Everything under the cache on node @1 that is not one of its directories,
# and every dot name (".evict-*", a temp file), one path per line.
cache_files() {
    on_node "$1" sh -c 'find "$1" -xdev -mindepth 1 \( ! -type d -o -name ".*" \) -print 2>/dev/null; true' \
        sh "$cache"
}

# 1. the kill at half of the image on the victim
off=$(log_offset "$victim")
id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src" \
         --wrap 'echo script-ran') || fail "sbatch: $id"
pid=$(wait_engine_pid "$victim" "$tok" 90)
[ -n "$pid" ] || fail "job $id: no engine on $victim: $(cat "$out" 2>/dev/null)"
at=$(kill_at_io "$victim" "$pid" wchar $((size / 2))) ||
    fail "job $id: the engine $pid on $victim ended before half of the image"
if [ "$at" -lt $((size / 2)) ] || [ "$at" -ge "$size" ]; then
    fail "job $id: the engine on $victim had written $at bytes of $size when killed (want half)"
fi
echo "engine $pid on $victim killed at $((at * 100 / size)) % of the image ($at bytes)"
assert_failed_after_kill "$id" 60 "engine killed on $victim"
said="$victim: engine killed by signal 9"
grep -q "^stagehand: --stage-image failed: .*$said" "$out" ||
    fail "job $id: the error output does not say '$said': $(cat "$out")"
grep -q "^stagehand: --stage-image failed: .*$said; the copy went on without it" "$out" ||
    fail "job $id: the copy did not go on without $victim: $(cat "$out")"
echo "  job's error output: $(grep '^stagehand:' "$out" | head -1)"
wait_log_line "$victim" "$off" "job $id.*staging failed on $victim: .*engine killed by signal 9" ||
    fail "job $id: $victim's slurmd log does not name the engine's kill: $(log_since "$victim" "$off" | grep "job $id" | head -5)"
assert_no_drain
left=$(procs_left engine_pids "$tok" 30)
[ -z "$left" ] || fail "job $id: engines still run 30 s after the kill: $left"
assert_runtime_gone "$id" 30

# 2. what the cache holds now: on the victim nothing, on the others the
# whole verified entry only; no job directory anywhere
for n in $MINICLUSTER_NODES; do
    for _ in $(seq 1 100); do on_node "$n" test -e "$cache/job/$id" || break; sleep 0.2; done
    on_node "$n" test -e "$cache/job/$id" && fail "$n: job $id's directory is left: $(on_node "$n" ls -la "$cache/job/$id")"
    files=$(cache_files "$n")
    listing=$(on_node "$n" "$tool" --cache "$cache" list) || fail "$n: stagehand-cache list: $listing"
    if [ "$n" = "$victim" ]; then
        [ -z "$files" ] || fail "$n (killed): files left in the cache: $(one_line "$files")"
        ! grep -qF -- "$src" <<<"$listing" || fail "$n (killed): list shows $src: $listing"
        continue
    fi
    key=$(on_node "$n" ls -A "$cache/entries")
    if [ "$files" != "$cache/entries/$key" ] || [[ $key != *-$size ]]; then
        fail "$n: the cache holds '$(one_line "$files")', want one entry of $size bytes"
    fi
    got=$(on_node "$n" stat -c '%U %a %h' "$cache/entries/$key")
    [ "$got" = "root 444 1" ] || fail "$n: entry $key is '$got' (owner, mode, links), want 'root 444 1'"
    [ "$(node_sha "$n" "$cache/entries/$key")" = "$want" ] || fail "$n: entry $key is not SRC's bytes"
    grep -qF -- "$src" <<<"$listing" || fail "$n: list does not show $src: $listing"
done
echo "ok: $victim's cache is empty, $(one_line "$others") adopted their verified copies"

# 3. the same SRC again: copied to the victim only, SRC's bytes everywhere
rm -f "$out"
shape_clear
probe="srun -N$k --ntasks-per-node=1 sh -c 'echo \"\$(hostname) \$(sha256sum <\"\$STAGEHAND_IMAGE\" | cut -d\" \" -f1)\"' && echo script-ran"
off=$(log_offset "$victim")
stage_job_ends COMPLETED 120 "$src" "$probe"
grep -q script-ran "$out" || fail "job $job_id's script did not run: $(cat "$out")"
# the batch node, current, says so; the victim's log has the copy's summary
image=$cache/job/$job_id/$(basename "$src")
first=${MINICLUSTER_NODES%% *}
grep -q "^stagehand: $image: current on $first, nothing copied" "$out" ||
    fail "job $job_id: $first was not current: $(cat "$out")"
log_since "$victim" "$off" | grep -q "stagehand: job $job_id user .*: $image: 1 copied, $((k - 1)) current of $k nodes" ||
    fail "job $job_id: $victim's staging (want it copied, the others current): $(log_since "$victim" "$off" | grep "job $job_id" | head -5)"
for n in $MINICLUSTER_NODES; do
    grep -qx "$n $want" "$out" || fail "job $job_id: $n's image is not SRC's bytes: $(cat "$out")"
done
for n in $MINICLUSTER_NODES; do
    for _ in $(seq 1 100); do on_node "$n" test -e "$cache/job/$job_id" || break; sleep 0.2; done
    files=$(cache_files "$n")
    key=${files##*/}
    if [ "$files" != "$cache/entries/$key" ] || [[ $key != *-$size ]]; then
        fail "$n: after job $job_id the cache holds '$(one_line "$files")', want one entry"
    fi
    [ "$(node_sha "$n" "$cache/entries/$key")" = "$want" ] || fail "$n: entry $key is not SRC's bytes"
done
assert_no_drain
echo "PASS: the engine killed at half of the image in cache mode: the job failed naming $victim and the cause, no drain, nothing partial or left in any cache, the others kept verified entries; the next job copied to $victim only, SRC's bytes everywhere"

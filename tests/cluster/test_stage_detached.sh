#!/usr/bin/env bash
# Issue 5 (the no-op at job start): a node whose copy is current ends its
# prolog after its own check and leaves its agent running, detached, for the
# nodes that need a copy. Here n1 (the batch node and the reader) is current
# and n2, n3 are not: (a) the batch script starts while n2 and n3 are still
# receiving, its srun waits for them, and every node ends with SRC's bytes;
# (b) a job whose script ends at once ends n1's detached agent in the epilog
# while it still serves the others: no agent or engine of the job is left on
# any node, no temp file, no runtime state, no node drained, and the next
# job stages everywhere.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 3 ] || skip "needs 3 nodes"
fault_test_files tdet stage-detached
# Mostly a hole: cheap to create (128 MiB). The last node's link at 200
# Mbit/s while the others receive, in (a) and (b): the chain runs at its
# pace, so their copy lasts some 5 s however fast or loaded the host is.
# (Unshaped, it took a 512 MiB image, and its checksums, to be sure of that
# window.)
make_slow_source "$src" 128 || fail "cannot create $src"
want=$(md5sum "$src" | cut -d' ' -f1)

stage_n1() { # make n1's copy current, and only n1's
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
    as_user sbatch --parsable --wait -J "$tag" -N1 -w n1 -o "$out" --stage-image="$src:$dst" \
        --wrap true >/dev/null || fail "staging to n1: $(cat "$out")"
    [ "$(node_md5 n1 "$dst")" = "$want" ] || fail "n1's copy differs"
}

# (a) the script starts on n1 while n2 and n3 receive; its srun waits
stage_n1
last=${MINICLUSTER_NODES##* }
shape_links --link 200mbit --node "$last" || fail "cannot shape $last's link"
off2=$(log_offset n2)
id=$(as_user sbatch --parsable --wait -J "$tag" -N"$k" -o "$out" --stage-verbose \
        --stage-image="$src:$dst" \
        --wrap 'echo script-start $(date +%s.%N); srun -N'"$k"' sh -c "md5sum \$STAGEHAND_IMAGE | cut -d\" \" -f1"') ||
    fail "sbatch (a): $(cat "$out")"
grep -q "^stagehand: $dst: current on n1, nothing copied" "$out" || fail "(a) n1 was not current: $(cat "$out")"
[ "$(grep -cx "$want" "$out")" -eq "$k" ] || fail "(a) a step saw other bytes: $(cat "$out")"
log_since n2 "$off2" | grep -q "stagehand: job $id user .*: $dst: $((k - 1)) copied, 1 current of $k nodes" ||
    fail "(a) n2's staging: $(log_since n2 "$off2" | grep stagehand)"
start=$(sed -n 's/^script-start //p' "$out")
done2=$(log_since n2 "$off2" | grep -a "stagehand: job $id user .*copied" | sed -n 's/^\[\([^]]*\)\].*/\1/p' | head -1)
{ [ -n "$start" ] && [ -n "$done2" ]; } || fail "(a) no times: script $start, n2 $done2"
python3 - "$start" "$done2" <<'EOF' || fail "(a) the script did not start before n2 had its copy"
import sys, datetime
start = float(sys.argv[1])
done = datetime.datetime.fromisoformat(sys.argv[2]).timestamp()
print(f"(a) the batch script started {done - start:.2f} s before n2 had its copy")
sys.exit(0 if start < done else 1)
EOF
for n in $MINICLUSTER_NODES; do [ "$(node_md5 "$n" "$dst")" = "$want" ] || fail "(a) $n's copy differs"; done
assert_runtime_gone "$id"
echo "ok: (a) the job started on n1 while n2..n$k received from n1's detached agent"

# (b) the script ends as soon as n1's agent serves the others: once its
# engine's PMIx directory appears in the job's runtime directory (the epilog
# now also stops the other nodes' stagings at once, so a script that ended
# before they reached n1 would leave only n1's sentinel to stop): n1's epilog
# stops its agent mid-broadcast
stage_n1
off1=$(log_offset n1)
id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
        --wrap 'for i in $(seq 1 200); do ls -d /run/stagehand/$SLURM_JOB_ID/pmix.* >/dev/null 2>&1 && break; sleep 0.02; done; echo script-ran') ||
    fail "sbatch (b)"
st=$(wait_job_end "$id" 120)
[ "$st" = COMPLETED ] || fail "(b) job $id ended $st: $(cat "$out")"
grep -q script-ran "$out" || fail "(b) the script did not run: $(cat "$out")"
log_since n1 "$off1" | grep -q "stagehand: epilog: job $id: stopping agent [0-9]*, still serving other nodes" ||
    fail "(b) n1's epilog did not stop the agent: $(log_since n1 "$off1" | grep stagehand)"
left=$(procs_left node_pids "stagehand-(agent|bcast)" 30)
[ -z "$left" ] || fail "(b) processes of job $id left: $left"
[ "$(node_md5 n1 "$dst")" = "$want" ] || fail "(b) n1's copy changed"
[ -z "$(temp_files_in "/nvme/$tok")" ] || fail "(b) temp files left: $(temp_files_in "/nvme/$tok")"
assert_runtime_gone "$id"
assert_no_drain
echo "ok: (b) the epilog stopped n1's detached agent; nothing left, no node drained"

# (its script waits for every node: a job that ends first ends the staging)
shape_clear
id=$(as_user sbatch --parsable --wait -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
        --wrap 'srun -N'"$k"' true') || fail "the next job: $(cat "$out")"
for n in $MINICLUSTER_NODES; do
    [ "$(node_md5 "$n" "$dst")" = "$want" ] || fail "$n's copy differs or is missing"
done
assert_no_drain
echo "ok: the next job staged everywhere"

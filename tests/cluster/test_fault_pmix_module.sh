#!/usr/bin/env bash
# A node whose PMIx host module (stagehand-pmix.so, loaded by the agent only
# on nodes that run an engine) cannot be loaded: a broken or partly upgraded
# installation on one node. The staging must fail promptly, not at the
# staging deadline (plugstack timeout=120s here, 600s by default): that node
# still joins the engine's control tree and reports why it cannot run an
# engine, and every participant stops. The job fails with a message naming
# the node and the loader's reason; no node is drained (on_node_fault=fail,
# the default); DST appears nowhere and no temp file is left; once the module
# is back the next job stages. Run with the broken module on a receiving
# node and on the reader node (node 0 of the engine). Cases F21, F26.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
[ "$k" -ge 2 ] || skip "needs 2 nodes"
read -r reader receiver _ <<<"$MINICLUSTER_NODES"
module=$(find "$STAGEHAND_PREFIX" -name stagehand-pmix.so -type f | head -1)
[ -n "$module" ] || fail "stagehand-pmix.so not installed under $STAGEHAND_PREFIX"
fault_test_files fmod fault-module
# How long the failure may take to be known: far below the deadline.
bound=40
wrapped=""
restore() { [ -z "$wrapped" ] || unwrap_on_node "$wrapped" "$module"; wrapped=""; }
trap 'restore; fault_test_cleanup' EXIT
make_user_file "$src" 16 || fail "cannot create $src"

for victim in "$receiver" "$reader"; do
    # The module replaced by a file that is no shared object, on $victim only.
    wrap_on_node "$victim" "$module" "exit 1" || fail "cannot replace the module on $victim"
    wrapped=$victim
    rm -f "$out"
    t0=$SECONDS
    id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
             --wrap 'echo script-ran') || fail "sbatch: $id"
    st=$(wait_job_end "$id" "$bound")
    took=$((SECONDS - t0))
    [ "$st" = FAILED ] ||
        fail "$victim: job $id $st ${bound}s after submission (a node that cannot load the module must stop the others at once): $(cat "$out" 2>/dev/null)"
    grep -q "stagehand: --stage-image failed: image $dst: .*$victim: cannot load the PMIx host module: .*$(basename "$module")" "$out" ||
        fail "$victim: the message does not name the node and the loader's reason: $(cat "$out")"
    ! grep -q script-ran "$out" || fail "$victim: the batch script ran without its image"
    for n in $MINICLUSTER_NODES; do
        [ -z "$(node_size "$n" "$dst")" ] || fail "$n: DST exists after the failed staging"
    done
    [ -z "$(temp_files_in "/nvme/$tok")" ] || fail "$victim: temp files left: $(temp_files_in "/nvme/$tok")"
    assert_no_drain
    echo "ok: module broken on $victim: job $id failed after ${took}s naming $victim and the loader's reason; no DST, no temp file, no drain"
    restore
done

# The module back: the next job stages everywhere.
rm -f "$out"
id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
         --wrap 'echo script-ran') || fail "sbatch: $id"
st=$(wait_job_end "$id" 90)
[ "$st" = COMPLETED ] || fail "the next job $id ended $st: $(cat "$out")"
assert_staged_everywhere "$src" "$dst"
echo "ok: with the module restored the next job staged on every node"

#!/usr/bin/env bash
# A destination in use by a running job is not replaced with other content by
# another job of the same user (new-user trial 2026-12-01: two versions of
# app.sqsh staged to one DST, and the first job ran with the second's image):
# (a) job A staged v1 to DST and runs; job B asks for v2 at DST: B fails with
#     a message naming DST and job A, A's nodes keep v1, A still sees v1, no
#     drain, no temp file;
#     (a2) a step's own image (srun --stage-image) is refused the same way,
#     with the message said once for the step;
# (b) job C asks for v1 at DST while A runs: a no-op, it runs;
# (c) after A and C end, v2 at DST is staged normally;
# (d) two jobs asking for v1 and v2 at DST at the same moment: never both
#     run, and DST on every node holds the image of the one that ran.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
tok=inuse$$
tag=inuse.$$
dst=/nvme/$tok/app.sqsh
v1=$MINICLUSTER_SHARED/$tok.v1
v2=$MINICLUSTER_SHARED/$tok.v2
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -f "$v1" "$v2" "$MINICLUSTER_SHARED"/"$tok".*.out "$MINICLUSTER_SHARED"/"$tok".go
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT
make_user_file "$v1" 8 || fail "cannot create $v1"
make_user_file "$v2" 8 || fail "cannot create $v2"
h1=$(md5sum "$v1" | cut -d' ' -f1)
h2=$(md5sum "$v2" | cut -d' ' -f1)
[ "$h1" != "$h2" ] || fail "v1 and v2 are the same"

submit() { # NAME SRC SCRIPT
    as_user sbatch --parsable -J "$tag" -N"$k" -o "$MINICLUSTER_SHARED/$tok.$1.out" \
        --stage-image="$2:$dst" --wrap "$3"
}
dst_is() { # MD5 WHAT: every node holds that content at DST
    for n in $MINICLUSTER_NODES; do
        [ "$(node_md5 "$n" "$dst")" = "$1" ] || fail "$2: $n holds $(node_md5 "$n" "$dst")"
    done
}

# (a) A runs with v1 until told to stop; it checks its image at the end too.
rm -f "$MINICLUSTER_SHARED/$tok.go"
a=$(submit a "$v1" 'srun md5sum "$STAGEHAND_IMAGE"; while [ ! -e '"$MINICLUSTER_SHARED/$tok.go"' ]; do sleep 0.2; done; srun md5sum "$STAGEHAND_IMAGE"; echo a-done') ||
    fail "sbatch a"
seen() { # MD5 OUT: how many lines of OUT name MD5 (0 before OUT exists)
    local c
    c=$(grep -c "$1" "$2" 2>/dev/null || true)
    echo "${c:-0}"
}
for _ in $(seq 1 300); do
    [ "$(seen "$h1" "$MINICLUSTER_SHARED/$tok.a.out")" -ge "$k" ] && break
    sleep 0.2
done
[ "$(seen "$h1" "$MINICLUSTER_SHARED/$tok.a.out")" -ge "$k" ] ||
    fail "job A did not start with v1: $(cat "$MINICLUSTER_SHARED/$tok.a.out" 2>/dev/null)"

b=$(submit b "$v2" 'echo b-script-ran') || fail "sbatch b"
st=$(wait_job_end "$b" 90)
[ "$st" = FAILED ] || fail "(a) job B ended $st: $(cat "$MINICLUSTER_SHARED/$tok.b.out")"
grep -qE "stagehand: --stage-image failed: image $dst: .*$dst is in use by job $a, which staged it from $v1" \
    "$MINICLUSTER_SHARED/$tok.b.out" || fail "(a) message: $(cat "$MINICLUSTER_SHARED/$tok.b.out")"
! grep -q b-script-ran "$MINICLUSTER_SHARED/$tok.b.out" || fail "(a) B's script ran without its image"
echo "job B was told: $(grep -m1 'is in use by job' "$MINICLUSTER_SHARED/$tok.b.out")"
dst_is "$h1" "(a) after B"
[ -z "$(temp_files_in "/nvme/$tok")" ] || fail "(a) temp files left: $(temp_files_in "/nvme/$tok")"

# (a2) the same refusal for a step's own image (srun --stage-image inside an
# allocation): the step fails before its tasks run, and the message is said
# once, not once per task (new-user trial: it was printed by every task)
out=$(as_user salloc -J "$tag" -N2 srun -N2 -n4 --overcommit --stage-image="$v2:$dst" \
    sh -c 'echo step-task-ran' 2>&1) && fail "(a2) the step succeeded: $out"
! grep -q step-task-ran <<<"$out" || fail "(a2) a task ran without its image: $out"
[ "$(grep -c "is in use by job $a" <<<"$out")" -eq 1 ] ||
    fail "(a2) the refusal is not said exactly once: $out"
echo "the step was told (once): $(grep 'is in use by job' <<<"$out" | cut -c1-120)..."
dst_is "$h1" "(a2) after the step"
assert_no_drain

# (b) the same content while A runs: a no-op
c=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$MINICLUSTER_SHARED/$tok.c.out" --stage-verbose \
    --stage-image="$v1:$dst" --wrap 'echo c-script-ran') || fail "sbatch c"
st=$(wait_job_end "$c" 90)
[ "$st" = COMPLETED ] || fail "(b) job C ended $st: $(cat "$MINICLUSTER_SHARED/$tok.c.out")"
grep -q "$dst: current on n1, nothing copied" "$MINICLUSTER_SHARED/$tok.c.out" ||
    fail "(b) not a no-op: $(cat "$MINICLUSTER_SHARED/$tok.c.out")"

# A ends; it saw v1 at its last step too
touch "$MINICLUSTER_SHARED/$tok.go"
st=$(wait_job_end "$a" 90)
[ "$st" = COMPLETED ] || fail "job A ended $st: $(cat "$MINICLUSTER_SHARED/$tok.a.out")"
[ "$(seen "$h1" "$MINICLUSTER_SHARED/$tok.a.out")" -eq $((2 * k)) ] ||
    fail "job A's image changed under it: $(cat "$MINICLUSTER_SHARED/$tok.a.out")"
assert_no_drain
wait_nodes_idle || fail "nodes not idle after job A" # its epilog drops its claim

# (c) nobody uses DST any more: v2 replaces v1
d=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$MINICLUSTER_SHARED/$tok.d.out" --stage-verbose \
    --stage-image="$v2:$dst" --wrap 'echo d-script-ran') || fail "sbatch d"
st=$(wait_job_end "$d" 90)
[ "$st" = COMPLETED ] || fail "(c) job D ended $st: $(cat "$MINICLUSTER_SHARED/$tok.d.out")"
grep -q "$dst: $k copied" "$MINICLUSTER_SHARED/$tok.d.out" || fail "(c) summary: $(cat "$MINICLUSTER_SHARED/$tok.d.out")"
dst_is "$h2" "(c)"

# (d) v1 and v2 at the same moment, both jobs holding DST for a while
e=$(submit e "$v1" 'srun md5sum "$STAGEHAND_IMAGE"; sleep 3; srun md5sum "$STAGEHAND_IMAGE"') || fail "sbatch e"
f=$(submit f "$v2" 'srun md5sum "$STAGEHAND_IMAGE"; sleep 3; srun md5sum "$STAGEHAND_IMAGE"') || fail "sbatch f"
se=$(wait_job_end "$e" 120)
sf=$(wait_job_end "$f" 120)
[ "$se" != COMPLETED ] || [ "$sf" != COMPLETED ] ||
    fail "(d) both jobs ran: e: $(cat "$MINICLUSTER_SHARED/$tok.e.out") f: $(cat "$MINICLUSTER_SHARED/$tok.f.out")"
for x in "e:$h1:$se" "f:$h2:$sf"; do
    IFS=: read -r name want state <<<"$x"
    out=$MINICLUSTER_SHARED/$tok.$name.out
    if [ "$state" = COMPLETED ]; then
        [ "$(seen "$want" "$out")" -eq $((2 * k)) ] || fail "(d) job $name saw other content: $(cat "$out")"
        dst_is "$want" "(d) after job $name"
    else
        [ "$state" = FAILED ] || fail "(d) job $name ended $state: $(cat "$out")"
        grep -q "is in use by job" "$out" || fail "(d) job $name: $(cat "$out")"
    fi
done
assert_no_drain
wait_nodes_idle || fail "nodes not idle"
echo "ok: DST in use by job $a kept from other content (job $b refused), same content a no-op, replaced once free; simultaneous v1/v2: $se/$sf"

#!/usr/bin/env bash
# Issue 6 fault matrix, case F03: (a) two jobs on the same (shared) nodes
# stage the same SRC to the same DST at the same time: both succeed, DST is
# complete and identical everywhere, only one of them copies (the other
# waits on the per-DST lock, re-checks and finds it current), no temp file;
# (b) eight jobs start together while DST is already current: all succeed at
# once with "nothing copied", each node deciding by itself (a job that finds
# DST current when it starts says so for the batch node: "current on n1"); (c) a job that waits for
# another run's lock on DST says how long it waited and for whom. No node
# drained.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
tok=fconc$$
tag=fault-conc.$$
dst=/nvme/$tok/img
src=$MINICLUSTER_SHARED/$tok.img
release=/tmp/$tok.release # (c): lets the lock holders go, in each node's own /tmp
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -f "$src" "$MINICLUSTER_SHARED"/"$tok".*.out
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok" "$release"; done
}
trap cleanup EXIT
make_user_file "$src" 64 || fail "cannot create $src"

submit() { # NAME
    as_user sbatch --parsable -J "$tag" -N"$k" -o "$MINICLUSTER_SHARED/$tok.$1.out" --stage-verbose \
        --stage-image="$src:$dst" --wrap 'cmp "$STAGEHAND_IMAGE" '"$src"' && echo script-ran'
}

# (a) two at once
a=$(submit a) || fail "sbatch a"
b=$(submit b) || fail "sbatch b"
for j in "$a:a" "$b:b"; do
    st=$(wait_job_end "${j%%:*}" 120)
    [ "$st" = COMPLETED ] || fail "job ${j%%:*} ended $st: $(cat "$MINICLUSTER_SHARED/$tok.${j##*:}.out")"
    grep -q script-ran "$MINICLUSTER_SHARED/$tok.${j##*:}.out" || fail "job ${j##*:}: $(cat "$MINICLUSTER_SHARED/$tok.${j##*:}.out")"
done
copies=$(cat "$MINICLUSTER_SHARED/$tok.a.out" "$MINICLUSTER_SHARED/$tok.b.out" | grep -oE "$dst: [0-9]+ copied" | grep -vc ': 0 copied' || true)
current=$(cat "$MINICLUSTER_SHARED/$tok.a.out" "$MINICLUSTER_SHARED/$tok.b.out" |
    grep -cE "$dst: (all $k nodes current(, | \(staged by another run meanwhile\), )|current on n1, )nothing copied" || true)
{ [ "$copies" = 1 ] && [ "$current" = 1 ]; } ||
    fail "expected one copy and one no-op: $(cat "$MINICLUSTER_SHARED/$tok.a.out" "$MINICLUSTER_SHARED/$tok.b.out")"
# the one that found DST current after the engine had started waited for the
# other's lock: its summary says so and names that job
waiter=$(cat "$MINICLUSTER_SHARED/$tok.a.out" "$MINICLUSTER_SHARED/$tok.b.out" | grep -E "$dst: .*; waited" || true)
if [ -n "$waiter" ]; then
    echo "$waiter" | grep -qE "^stagehand: $dst: all $k nodes current \(staged by another run meanwhile\), nothing copied \([0-9.]+ s\); waited [0-9]+\.[0-9] s for job ($a|$b) on [A-Za-z0-9_-]+ staging it\$" ||
        fail "the waiting job's summary does not say whom it waited for: $waiter"
fi
assert_staged_everywhere "$src" "$dst"
assert_no_temp_files "$dst"
assert_no_drain
echo "ok: (a) two concurrent jobs: one copied, the other waited and found DST current${waiter:+ ($waiter)}"

# (b) eight at once, DST current
ids=()
t0=$SECONDS
for i in 1 2 3 4 5 6 7 8; do ids+=("$(submit "c$i")") || fail "sbatch c$i"; done
for i in "${!ids[@]}"; do
    o="$MINICLUSTER_SHARED/$tok.c$((i + 1)).out"
    st=$(wait_job_end "${ids[$i]}" 120)
    [ "$st" = COMPLETED ] || fail "job ${ids[$i]} ended $st: $(cat "$o")"
    grep -q "$dst: current on n1, nothing copied" "$o" || fail "job ${ids[$i]} was not a no-op: $(cat "$o")"
    grep -q script-ran "$o" || fail "job ${ids[$i]}: $(cat "$o")"
done
assert_staged_everywhere "$src" "$dst"
assert_no_temp_files "$dst"
for j in "${ids[@]}" "$a" "$b"; do assert_runtime_gone "$j"; done
assert_no_drain
echo "ok: (b) eight jobs with DST current: all no-ops ($((SECONDS - t0)) s for all)"

# (c) another run holds DST's lock on every node (here flock(1) as the user,
# with a temp file named as a copying run names its own) until the job's
# engine on that node has waited for it for 2 s: the job waits, then copies,
# and its summary says how long it waited and for whom. The engine tries the
# lock (and goes on trying) once it has opened DST's directory
# (sh_dest_lock_all); a watcher inside each node (root: the engine, which
# changed its credentials, is not dumpable) sees that and lets the holder go.
# (A lock held for a fixed time could be let go before a job that started
# late on a loaded host tried it.) Holders and watchers give up after about
# 120 s.
dst2=/nvme/$tok/img2
held=/nvme/$tok/.img2.stage.424242.elsewhere.1.tmp
holders=()
for n in $MINICLUSTER_NODES; do
    on_node_as_user "$n" flock -x "/nvme/$tok/.img2.lock" sh -c '
        touch "$1"
        for _ in $(seq 1 1200); do [ -e "$2" ] && break; sleep 0.1; done
        rm -f "$1"' sh "$held" "$release" &
    holders+=("$!")
    on_node "$n" sh -c '
        for _ in $(seq 1 1200); do
            for p in $(pgrep --ns $$ --nslist net -u "$1" -x stagehand-bcast); do
                ls -l "/proc/$p/fd" 2>/dev/null | grep -q " $2\$" && { sleep 2; touch "$3"; exit 0; }
            done
            sleep 0.1
        done' sh "$MINICLUSTER_USER" "/nvme/$tok" "$release" &
    holders+=("$!")
done
for n in $MINICLUSTER_NODES; do
    for _ in $(seq 50); do
        on_node "$n" test -e "$held" && break
        sleep 0.1
    done
    on_node "$n" test -e "$held" || fail "(c) the lock holder did not start on $n"
done
c=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$MINICLUSTER_SHARED/$tok.held.out" --stage-verbose \
    --stage-image="$src:$dst2" --wrap 'cmp "$STAGEHAND_IMAGE" '"$src"' && echo script-ran') ||
    fail "sbatch (c)"
st=$(wait_job_end "$c" 120)
wait "${holders[@]}"
[ "$st" = COMPLETED ] || fail "(c) job $c ended $st: $(cat "$MINICLUSTER_SHARED/$tok.held.out")"
grep -q script-ran "$MINICLUSTER_SHARED/$tok.held.out" || fail "(c) job $c: $(cat "$MINICLUSTER_SHARED/$tok.held.out")"
line=$(grep -E "$dst2: $k copied, 0 current" "$MINICLUSTER_SHARED/$tok.held.out") ||
    fail "(c) job $c did not copy: $(cat "$MINICLUSTER_SHARED/$tok.held.out")"
echo "$line" | grep -qE "; waited [1-9][0-9]*\.[0-9] s for job 424242 on elsewhere staging it" ||
    fail "(c) the summary does not say it waited for the holder: $line"
assert_staged_everywhere "$src" "$dst2"
assert_no_temp_files "$dst2"
assert_no_drain
echo "ok: (c) waited for another run's lock, then copied: $line"

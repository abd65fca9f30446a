#!/usr/bin/env bash
# Issue 6 soak: N jobs (50; 200 with STAGEHAND_TEST_FULL=1, tests/run.sh
# --full) mixing real stagings (the source alternates, so the engine runs),
# no-ops, user errors (refused at submit, and refused on the nodes: DST's
# parent a symlink), and cancellations during staging, in 5 lanes of
# consecutive jobs (a lane's jobs run one after the other on every node;
# lanes overlap, as jobs of different users do). Each job's outcome is
# checked. At the end, all must be zero and are printed: file descriptors
# the slurmds gained, processes of these jobs left (agents, PMIx hosts,
# engines), /run/stagehand entries of these jobs, temp files under the DSTs,
# drained nodes. Cases F03, F06, F21.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

total=50
[ "${STAGEHAND_TEST_FULL:-0}" = 1 ] && total=200
lanes=5
k=$(echo "$MINICLUSTER_NODES" | wc -w)
tok=soak$$
tag=soak.$$
dir=$MINICLUSTER_SHARED/$tok
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -rf "$dir"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT
mkdir -p "$dir" && chown "$MINICLUSTER_USER" "$dir"
{ make_user_file "$dir/a.img" 2 && make_user_file "$dir/b.img" 3; } || fail "cannot create sources"
for n in $MINICLUSTER_NODES; do
    on_node_as_user "$n" sh -c "mkdir -p /nvme/$tok/out && ln -s /tmp /nvme/$tok/out/link" ||
        fail "$n: set-up"
done

# fds of each node's slurmd, the least of a few looks (RPCs of other jobs
# come and go)
slurmd_fds() {
    local n pid best c
    for n in $MINICLUSTER_NODES; do
        pid=$(cat "$MINICLUSTER_STATE/pids/slurmd.$n.pid")
        best=""
        for _ in 1 2 3 4 5; do
            c=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
            [ -z "$best" ] || [ "$c" -lt "$best" ] && best=$c
            sleep 0.1
        done
        echo "$n $best"
    done
}
fds_before=$(slurmd_fds)

# lane L: jobs L, L+lanes, ... one after the other; one result line each
lane() {
    local l=$1
    local i kind id st out dst="/nvme/$tok/L$l/img" res
    for ((i = l; i < total; i += lanes)); do
        kind=$((i / lanes % 6))
        out="$dir/j$i.out"
        res="ok"
        case $kind in
            0 | 1 | 2) # stage a, no-op (a again), stage b
                src=$dir/a.img
                [ $kind = 2 ] && src=$dir/b.img
                id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-verbose \
                         --stage-image="$src:$dst" --wrap 'cmp "$STAGEHAND_IMAGE" '"$src"' && echo ran') ||
                    { echo "$i FAIL sbatch: $id"; continue; }
                echo "$i id $id"
                st=$(wait_job_end "$id" 120)
                if [ "$st" != COMPLETED ] || ! grep -q '^ran$' "$out"; then
                    res="FAIL stage job $id ended $st: $(tr '\n' ' ' <"$out")"
                elif [ $kind = 1 ] && ! grep -q "$dst: current on n1, nothing copied" "$out"; then
                    res="FAIL job $id was not a no-op: $(tr '\n' ' ' <"$out")"
                fi ;;
            3) # refused at submit
                if st=$(as_user srun -J "$tag" -N1 --stage-image="$dir/missing.img:$dst" true 2>&1); then
                    res="FAIL srun accepted a missing source"
                elif ! grep -q "stagehand: --stage-image=$dir/missing.img:$dst: source '$dir/missing.img' does not exist" <<<"$st"; then
                    res="FAIL submit message: $st"
                fi ;;
            4) # refused on the nodes
                id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" \
                         --stage-image="$dir/a.img:/nvme/$tok/out/link/L$l" --wrap 'echo ran') ||
                    { echo "$i FAIL sbatch: $id"; continue; }
                echo "$i id $id"
                st=$(wait_job_end "$id" 120)
                if [ "$st" != FAILED ] || ! grep -q "is a symbolic link" "$out"; then
                    res="FAIL prolog-refused job $id ended $st: $(tr '\n' ' ' <"$out")"
                fi ;;
            5) # cancelled while staging (the source alternates: a real copy)
                src=$dir/b.img
                [ $((i / lanes / 6 % 2)) = 1 ] && src=$dir/a.img
                id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" \
                         --stage-image="$src:$dst" --wrap 'sleep 5') ||
                    { echo "$i FAIL sbatch: $id"; continue; }
                echo "$i id $id"
                sleep "0.$((RANDOM % 5))"
                as_user scancel "$id"
                st=$(wait_job_end "$id" 120)
                case "$st" in CANCELLED | COMPLETED) ;; *) res="FAIL cancelled job $id ended $st" ;; esac ;;
        esac
        echo "$i $res"
    done
}

start=$SECONDS
for ((l = 0; l < lanes; l++)); do lane "$l" >"$dir/lane$l.log" 2>&1 & done
wait
elapsed=$((SECONDS - start))
ids=$(cat "$dir"/lane*.log | awk '$2 == "id" {print $3}')
done_jobs=$(cat "$dir"/lane*.log | grep -cE '^[0-9]+ (ok|FAIL)')
failures=$(cat "$dir"/lane*.log | grep -E '^[0-9]+ FAIL' || true)
[ "$done_jobs" = "$total" ] || fail "only $done_jobs of $total jobs reported: $(cat "$dir"/lane*.log | tail -5)"
[ -z "$failures" ] || fail "$(echo "$failures" | wc -l) job(s) failed: $(echo "$failures" | head -5)"
echo "ok: $total jobs in $elapsed s ($lanes lanes): every outcome as expected"

# /run/stagehand entries of these jobs on every node (one look per node)
rundir_entries() {
    local n
    for n in $MINICLUSTER_NODES; do
        on_node "$n" sh -c 'ls /run/stagehand 2>/dev/null' | while read -r e; do
            case " $(one_line "$ids") " in *" ${e%%.*} "*) echo "$n:$e" ;; esac
        done
    done
}
# let the last epilogs run
for _ in $(seq 1 60); do
    [ -z "$(rundir_entries)" ] && break
    sleep 0.5
done
fds_after=$(slurmd_fds)
fd_leak=0
while read -r n before; do
    after=$(awk -v n="$n" '$1 == n {print $2}' <<<"$fds_after")
    [ "$after" -gt "$before" ] && fd_leak=$((fd_leak + after - before))
done <<<"$fds_before"
procs=0
for n in $MINICLUSTER_NODES; do
    # engines of these jobs, and agents / PMIx hosts whose job is one of
    # them or that lost their prolog (orphans)
    c=$(on_node "$n" sh -c '
        ids=" $2 "; c=0
        for p in $(pgrep --ns $$ --nslist net -f "stagehand-(agent|bcast)"); do
            if grep -q "$1" /proc/$p/cmdline 2>/dev/null; then c=$((c + 1)); continue; fi
            pp=$(ps -o ppid= -p $p | tr -d " ")
            if [ "$pp" = 1 ]; then c=$((c + 1)); continue; fi
            while [ -n "$pp" ] && [ "$pp" -gt 1 ]; do
                j=$(tr "\0" "\n" </proc/$pp/environ 2>/dev/null | sed -n "s/^SLURM_JOB_ID=//p")
                if [ -n "$j" ]; then case "$ids" in *" $j "*) c=$((c + 1)) ;; esac; break; fi
                pp=$(ps -o ppid= -p $pp | tr -d " ")
            done
        done
        echo $c' sh "$tok" "$(one_line "$ids")")
    procs=$((procs + c))
done
rundirs=$(rundir_entries | grep -c . || true)
temps=0
for ((l = 0; l < lanes; l++)); do temps=$((temps + $(temp_files_in "/nvme/$tok/L$l" | grep -c . || true))); done
drained=$(sinfo -h -N -o '%N %T' | grep -ciE 'drain|down|fail' || true)
echo "soak counts: leaked slurmd fds $fd_leak, leftover processes $procs, /run/stagehand entries $rundirs, temp files $temps, drained nodes $drained"
echo "slurmd fds before: $(one_line "$fds_before"); after: $(one_line "$fds_after")"
{ [ "$fd_leak" = 0 ] && [ "$procs" = 0 ] && [ "$rundirs" = 0 ] && [ "$temps" = 0 ] && [ "$drained" = 0 ]; } ||
    fail "leaks after the soak"
echo "ok: nothing leaked after $total jobs"

#!/usr/bin/env bash
# Issue 6 and issue 35 item 7 soak: N jobs mixing real stagings (the source
# alternates, so the engine runs), no-ops, user errors (refused at submit,
# and refused on the nodes: DST's parent a symlink), cancellations during
# staging and node faults (one node's engine killed (SIGKILL) in the middle
# of a copy: the job fails naming that node, no drain under the default
# policy), in 5 lanes of consecutive jobs (a lane's jobs run one after the
# other on every node; lanes overlap, as jobs of different users do). Each
# job's outcome is checked. At the end, all must be zero and are printed:
# processes of stagehand left on the nodes (staging processes, sentinels,
# agents, PMIx hosts, engines, task waits), file descriptors the slurmds
# gained, control-plane ports still listening, /run/stagehand entries of
# these jobs, temp files under the DSTs, partial DSTs (a DST that is not a
# whole copy of one of the sources), drained nodes.
#
# Size: STAGEHAND_SOAK_JOBS jobs if set, else 50 (about 3 min on the 3-node
# test cluster of tests/run.sh), 200 with STAGEHAND_TEST_FULL=1
# (tests/run.sh --full; the issue's 200 on 8 nodes). Cases F03, F06, F21.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

total=50
[ "${STAGEHAND_TEST_FULL:-0}" = 1 ] && total=200
total=${STAGEHAND_SOAK_JOBS:-$total}
[[ "$total" =~ ^[1-9][0-9]*$ ]] || fail "STAGEHAND_SOAK_JOBS must be a job count, got '$total'"
lanes=5
kinds=7
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
{ make_user_file "$dir/a.img" 2 && make_user_file "$dir/b.img" 3 &&
    make_slow_source "$dir/c0.img" 1024; } ||
    fail "cannot create sources"
sums=" $(md5sum "$dir"/*.img | cut -d' ' -f1 | tr '\n' ' ')"
victim=${MINICLUSTER_NODES##* }
line=$(grep '^required .*stagehand\.so' "$plugstack") || fail "no stagehand line in $plugstack"
port_base=$(grep -oE 'port_base=[0-9]+' <<<"$line" | cut -d= -f2)
port_range=$(grep -oE 'port_range=[0-9]+' <<<"$line" | cut -d= -f2)
port_base=${port_base:-300} port_range=${port_range:-200}
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
        kind=$((i / lanes % kinds))
        # one node fault at a time (lane 0: its 1 GiB copy must outlast the
        # look for its engine, and five would not fit the nodes' /nvme);
        # the other lanes stage b then
        [ $kind = 6 ] && [ "$l" != 0 ] && kind=2
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
            6) # node fault (lane 0): the last node's engine killed in the
               # middle of a copy of c (a DST of its own: every such job
               # copies to that node)
                on_node "$victim" rm -f "/nvme/$tok/L$l/c"
                id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" \
                         --stage-image="$dir/c$l.img:/nvme/$tok/L$l/c" --wrap 'echo ran') ||
                    { echo "$i FAIL sbatch: $id"; continue; }
                echo "$i id $id"
                pid=$(wait_engine_pid "$victim" "$tok/L$l/")
                killed=0
                [ -n "$pid" ] && kill_at_io "$victim" "$pid" wchar 1048576 >/dev/null && killed=1
                st=$(wait_job_end "$id" 120)
                if [ "$killed" = 1 ]; then
                    if [ "$st" != FAILED ] || ! grep -q "$victim" "$out" || grep -q '^ran$' "$out"; then
                        res="FAIL node-fault job $id ended $st: $(tr '\n' ' ' <"$out")"
                    fi
                    echo "$i fault"
                elif [ "$st" != COMPLETED ]; then
                    res="FAIL node-fault job $id (engine not caught) ended $st: $(tr '\n' ' ' <"$out")"
                fi ;;
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
faults=$(cat "$dir"/lane*.log | grep -cE '^[0-9]+ fault$' || true)
# a job whose outcome was not the expected one fails the test after the
# counts below: what leaked is printed either way
if [ -z "$failures" ]; then
    echo "ok: $total jobs on $k nodes in $elapsed s ($lanes lanes, $faults with a node fault): every outcome as expected"
else
    echo "$(echo "$failures" | wc -l) of $total jobs on $k nodes in $elapsed s ($lanes lanes, $faults with a node fault) did not end as expected:"
    echo "$failures" | head -5
fi

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
# every process of stagehand on the nodes: only this test's jobs ran
for n in $MINICLUSTER_NODES; do
    for name in stagehand-stage sh-sentinel stagehand-agent stagehand-bcast stagehand-wait; do
        procs=$((procs + $(named_pids "$n" "$name" | grep -c . || true)))
    done
done
# control-plane ports still listening on any node
ports=0
for n in $MINICLUSTER_NODES; do
    c=$(on_node "$n" ss -Hltn 2>/dev/null | awk -v lo="$port_base" -v hi=$((port_base + port_range)) '
        { p = $4; sub(/.*:/, "", p); if (p + 0 >= lo && p + 0 < hi) c++ } END { print c + 0 }')
    ports=$((ports + c))
done
# partial DSTs: a DST that is not a whole copy of one of the sources
partial=0
for n in $MINICLUSTER_NODES; do
    while read -r f; do
        [ -n "$f" ] || continue
        sum=$(node_md5 "$n" "$f")
        case "$sums" in *" $sum "*) ;; *) partial=$((partial + 1)); echo "partial DST: $n:$f" ;; esac
    done < <(on_node "$n" find "/nvme/$tok" -path "/nvme/$tok/out" -prune -o -type f ! -name '.*' -print 2>/dev/null)
done
rundirs=$(rundir_entries | grep -c . || true)
temps=0
for ((l = 0; l < lanes; l++)); do temps=$((temps + $(temp_files_in "/nvme/$tok/L$l" | grep -c . || true))); done
drained=$(sinfo -h -N -o '%N %T' | grep -ciE 'drain|down|fail' || true)
echo "soak counts ($total jobs, $k nodes): leftover processes $procs, leaked slurmd fds $fd_leak, listening control-plane ports $ports, /run/stagehand entries $rundirs, temp files $temps, partial DSTs $partial, drained nodes $drained"
echo "slurmd fds before: $(one_line "$fds_before"); after: $(one_line "$fds_after")"
{ [ "$fd_leak" = 0 ] && [ "$procs" = 0 ] && [ "$ports" = 0 ] && [ "$rundirs" = 0 ] &&
    [ "$temps" = 0 ] && [ "$partial" = 0 ] && [ "$drained" = 0 ]; } ||
    fail "leaks after the soak"
echo "ok: nothing leaked after $total jobs"
[ -z "$failures" ] || fail "$(echo "$failures" | wc -l) job(s) failed: $(echo "$failures" | head -5)"

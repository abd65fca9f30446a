#!/usr/bin/env bash
# Issue 35 item 3: array-job bursts and many jobs per node. An array of
# BURST_JOBS two-node jobs, every task on the same two nodes, submitted at
# once, each running BURST_SLEEP seconds so that they overlap:
#  (a) the image current on both nodes: the same array without
#      --stage-image and with it, alternating (BURST_ROUNDS pairs); every
#      task starts and completes, its image byte-identical (cmp in the job),
#      no drain, no "no free control-plane port", nothing left (sentinels,
#      agents, listeners); the peak number of tasks whose scripts ran at
#      the same time (from their own start and end times) and the peak of
#      listening control-plane ports on the first node (the sentinels of
#      those jobs) are printed and asserted; the median and p95 start delay
#      (submission to the task's script) of each array and the added time
#      are printed;
#  (b) the image stale at first (a new source for the same DST): every task
#      completes, exactly one copy per node (the agents' "copied" summary
#      lines on each node), the others waited and found it current, DST
#      byte-identical, no drain.
# Each task's script, after its check, waits until BURST_OVERLAP tasks of
# its array have started (a file each in the shared directory; at most
# BURST_HOLD seconds), then sleeps BURST_SLEEP seconds: the tasks overlap
# however slowly the host starts them (a loaded 2-core host started about
# 0.5 tasks a second with the option, so 30-40 s tasks ended before 100 had
# started). The overlap is still measured from the scripts' own start and
# end times and asserted.
# Default: 20 tasks, 10 s each (after the wait), at least 12 at once, 1 round, with the option
# only (the baseline without it is a measurement, --full), on the suite's
# cluster (16 CPUs a node: --oversubscribe; about 90 s, the CI budget).
# STAGEHAND_TEST_FULL=1 (tests/run.sh --full): 300 tasks of 40 s, at least
# 100 of them at once (one CPU each, at most 128), on an instance of its own
# (2 nodes of 128 CPUs, MessageTimeout 60 s, join_timeout and timeout 900 s
# so that every task's sentinel holds its control-plane port until the
# task's epilog however long the task waits, brought up and down here, like
# test_scale_32's); BURST_INNER=1 runs the checks on the current instance.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts run in the job's or the node's shell
# shellcheck disable=SC2030,SC2031  # the own instance's environment is its subshell's only, on purpose
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

full=${STAGEHAND_TEST_FULL:-0}
if [ "$full" = 1 ]; then
    jobs_n=${BURST_JOBS:-300} sleep_s=${BURST_SLEEP:-40} rounds=${BURST_ROUNDS:-1} want_overlap=${BURST_OVERLAP:-100}
    hold_s=${BURST_HOLD:-600}
    arms=${BURST_ARMS:-base stage}
else
    jobs_n=${BURST_JOBS:-20} sleep_s=${BURST_SLEEP:-10} rounds=${BURST_ROUNDS:-1} want_overlap=${BURST_OVERLAP:-12}
    hold_s=${BURST_HOLD:-120}
    # the same array without the option is the start delays' baseline, a
    # measurement: --full (or BURST_ARMS="base stage") only, for the CI budget
    arms=${BURST_ARMS:-stage}
fi

if [ "$full" = 1 ] && [ -z "${BURST_INNER:-}" ]; then
    # an instance name is 1-6 letters or digits
    big=${BURST_NAME:-$(printf '%.4s' "$(tr -dc 'a-z0-9' <<<"${MINICLUSTER_NAME:-mc}")")bu}
    netb=${BURST_NET:-${MINICLUSTER_NET%.*}.$(((${MINICLUSTER_NET##*.} + 96) % 256))}
    own_instance() (
        unset MINICLUSTER_STATE SLURM_CONF
        export MINICLUSTER_NAME=$big MINICLUSTER_NET=$netb MINICLUSTER_SHARED=${MINICLUSTER_SHARED}-bu
        # a batch launch of a loaded 2-core host's slurmd may take longer
        # than the default 20 s, which requeues the task (Slurm's own
        # doing, with or without stagehand)
        export MINICLUSTER_MESSAGE_TIMEOUT=60
        # a sentinel ends at its job's epilog or at join_timeout (60 s by
        # default), whichever comes first: tasks held up to BURST_HOLD
        # seconds keep their ports only with a join_timeout beyond that
        # (one above timeout= acts as timeout=: both)
        export MINICLUSTER_PLUGIN_ARGS="timeout=900s join_timeout=900s${MINICLUSTER_PLUGIN_ARGS:+ $MINICLUSTER_PLUGIN_ARGS}"
        trap '"$MINICLUSTER" down >/dev/null 2>&1' EXIT
        "$MINICLUSTER" down >/dev/null 2>&1
        "$MINICLUSTER" up --nodes 2 --cpus 128 --stack "${MINICLUSTER_STACK:-bookworm}" >/dev/null || exit 1
        eval "$("$MINICLUSTER" env)"
        BURST_INNER=1 bash "$0"
    )
    own_instance
    exit
fi

read -r n1 n2 _ <<<"$MINICLUSTER_NODES"
[ -n "$n2" ] || skip "needs 2 nodes"
cpus=$(scontrol -o show node "$n1" | grep -oE 'CPUTot=[0-9]+' | cut -d= -f2)
[ "$((cpus * 4))" -ge "$want_overlap" ] ||
    skip "$n1 has $cpus CPUs: $want_overlap tasks at once need $(((want_overlap + 3) / 4)) (minicluster up --cpus N)"
# one CPU a task where the nodes have enough (the full run: at most 128 at
# once on 2 x 128 CPUs), else 4 a CPU (the partition's OverSubscribe=YES)
share=()
[ "$cpus" -ge "$want_overlap" ] || share=(--oversubscribe)
line=$(grep '^required .*stagehand\.so' "$plugstack") || fail "no stagehand line in $plugstack"
port_base=$(grep -oE 'port_base=[0-9]+' <<<"$line" | cut -d= -f2)
port_range=$(grep -oE 'port_range=[0-9]+' <<<"$line" | cut -d= -f2)
port_base=${port_base:-300} port_range=${port_range:-200}
tok=burst$$
tag=burst.$$
dir=$MINICLUSTER_SHARED/$tok
dst=/nvme/$tok/img
cleanup() {
    kill "${sampler:-}" 2>/dev/null
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    rm -rf "$dir"
    for n in $n1 $n2; do on_node "$n" rm -rf "/nvme/$tok"; done
}
trap cleanup EXIT
{ mkdir -p "$dir" && chown "$MINICLUSTER_USER" "$dir"; } || fail "cannot create $dir"
{ make_user_file "$dir/a.img" 2 && make_user_file "$dir/b.img" 3; } || fail "cannot create sources"
log_at=$(log_offset "$n1") log_at2=$(log_offset "$n2")

# listening control-plane ports on node $1
ctl_ports() {
    on_node "$1" ss -Hltn 2>/dev/null | awk -v lo="$port_base" -v hi=$((port_base + port_range)) '
        { p = $4; sub(/.*:/, "", p); if (p + 0 >= lo && p + 0 < hi) c++ } END { print c + 0 }'
}

# run_array NAME IMAGE (""): submit the array, wait for every task, check
# each; sets arr_delays (start delays, s, one a line), arr_overlap,
# arr_ports (peak listening ports on n1), arr_secs, arr_requeued
run_array() {
    local name=$1 img=$2 opt=() t0 id end state peak=0 p out bad
    [ -n "$img" ] && opt=(--stage-image="$img:$dst")
    rm -rf "$dir/$name".*
    # the job: its start, the image checked (cmp on node 0, ours: DST), its
    # start file, the wait for want_overlap start files (shell builtins
    # only but sleep: 100 tasks poll at once), sleep, its end
    t0=$(date +%s.%N)
    { mkdir "$dir/$name.started" && chown "$MINICLUSTER_USER" "$dir/$name.started"; } ||
        fail "$name: cannot create $dir/$name.started"
    id=$(as_user sbatch --parsable -J "$tag" -N2 -w "$n1,$n2" "${share[@]}" --array="0-$((jobs_n - 1))" \
             --open-mode=append -o "$dir/$name.%a.out" "${opt[@]}" \
             --wrap "echo start \$(date +%s.%N); ${img:+cmp \"\$STAGEHAND_IMAGE\" $img || echo MISMATCH; }: >$dir/$name.started/\$SLURM_ARRAY_TASK_ID
w=0; while set -- $dir/$name.started/*; [ \$# -lt $((want_overlap < jobs_n ? want_overlap : jobs_n)) ] && [ \$w -lt $hold_s ]; do sleep 1; w=\$((w + 1)); done
echo held \$w; sleep $sleep_s; echo end \$(date +%s.%N); echo ran") ||
        fail "$name: sbatch: $id"
    # the peak of control-plane listeners on n1 while the array runs
    end=$((SECONDS + 600 + hold_s + jobs_n * 2))
    while [ "$SECONDS" -lt "$end" ]; do
        p=$(ctl_ports "$n1")
        [ "$p" -gt "$peak" ] && peak=$p
        [ -z "$(squeue -h -j "$id" -o %i 2>/dev/null)" ] && break
        sleep 0.5
    done
    arr_secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    [ -z "$(squeue -h -j "$id" -o %i 2>/dev/null)" ] || fail "$name: array $id still queued after $((SECONDS - end + 600 + hold_s + jobs_n * 2)) s: $(one_line "$(squeue -h -j "$id" -o '%i %T %r' | head -3)")"
    # each task's last start and end (a requeued task ran again), in one
    # pass over the outputs: a task without "ran", or whose image differed
    # (MISMATCH), is listed
    bad=$(for ((i = 0; i < jobs_n; i++)); do
        out=$dir/$name.$i.out
        [ -e "$out" ] || echo "$i: no output;"
    done)
    [ -z "$bad" ] || fail "$name: task(s) did not run:$(one_line "$bad")"
    awk -v t0="$t0" -v n="$jobs_n" -v pre="$dir/$name." '
        FILENAME != last { last = FILENAME; i = FILENAME; sub("^" pre, "", i); sub(/\.out$/, "", i) }
        $1 == "start" { s[i] = $2 } $1 == "end" { e[i] = $2 } $0 == "ran" { ran[i] = 1 }
        /MISMATCH/ { mis[i] = 1 } /DUE TO JOB REQUEUE/ { rq++ } $1 == "held" && $2 + 0 > held { held = $2 + 0 }
        END {
            for (j = 0; j < n; j++) {
                if (!(j in ran) || (j in mis)) printf "bad %d\n", j
                else { printf "delay %.3f\n", s[j] - t0; printf "ev %s 1\nev %s -1\n", s[j], e[j] }
            }
            printf "requeued %d\nheld %d\n", rq + 0, held + 0
        }' "$dir/$name".*.out >"$dir/$name.sum"
    bad=$(awk '$1 == "bad" { printf " %s", $2 }' "$dir/$name.sum")
    first=${bad# } first=${first%% *}
    [ -z "$bad" ] || fail "$name: task(s) did not complete with their image:$bad (task $first: $(tr '\n' ' ' <"$dir/$name.$first.out" | cut -c1-300))"
    arr_requeued=$(awk '$1 == "requeued" { print $2 }' "$dir/$name.sum")
    arr_held=$(awk '$1 == "held" { print $2 }' "$dir/$name.sum")
    arr_delays=$(awk '$1 == "delay" { print $2 }' "$dir/$name.sum")
    # most task scripts running at once, from their last start and end
    arr_overlap=$(awk '$1 == "ev" { print $2, $3 }' "$dir/$name.sum" | sort -n -k1,1 -k2,2n |
        awk '{ c += $2; if (c > m) m = c } END { print m + 0 }')
    arr_ports=$peak
    state=$(one_line "$(scontrol -o show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | sort | uniq -c)")
    echo "$name: $jobs_n tasks in $arr_secs s, at most $arr_overlap running at once, peak $arr_ports control-plane listeners on $n1, $arr_requeued requeued by Slurm ($state); the longest wait for $want_overlap started tasks $arr_held s"
}

# median and p95 of the numbers on stdin
quantiles() {
    sort -n | awk '{ v[NR] = $1 } END { m = v[int((NR + 1) / 2)]; p = v[int(NR * 0.95 + 0.999)]; printf "%.2f %.2f", m, p }'
}

# (a) current on both nodes
id=$(as_user sbatch --parsable -J "$tag" -N2 -w "$n1,$n2" -o "$dir/warm.out" \
         --stage-image="$dir/a.img:$dst" --wrap 'echo ran') || fail "warm-up: sbatch: $id"
st=$(wait_job_end "$id" 180)
[ "$st" = COMPLETED ] || fail "warm-up job $id ended $st: $(cat "$dir/warm.out")"
base_all="" stage_all=""
table="| round | array | tasks | wall (s) | at once | listeners on $n1 | requeued | start delay median (s) | p95 (s) |"$'\n'"|---|---|---|---|---|---|---|---|---|"
for ((r = 1; r <= rounds; r++)); do
    for arm in $arms; do
        img=""
        [ "$arm" = stage ] && img=$dir/a.img
        run_array "$arm$r" "$img"
        [ "$arr_overlap" -ge "$want_overlap" ] ||
            fail "$arm$r: at most $arr_overlap tasks ran at once, not $want_overlap (a slower host: BURST_SLEEP)"
        read -r med p95 < <(quantiles <<<"$arr_delays")
        table+=$'\n'"| $r | $arm | $jobs_n | $arr_secs | $arr_overlap | $arr_ports | $arr_requeued | $med | $p95 |"
        if [ "$arm" = base ]; then
            base_all+="$arr_delays"$'\n'
        else
            stage_all+="$arr_delays"$'\n'
            # the sentinels of the overlapping tasks held their ports at once
            [ "$arr_ports" -ge $((want_overlap / 2)) ] ||
                fail "$arm$r: at most $arr_ports control-plane listeners on $n1 with $arr_overlap tasks at once"
        fi
    done
done
read -r smed sp95 < <(grep . <<<"$stage_all" | quantiles)
echo "$table"
if [ -z "$base_all" ]; then
    echo "start delay, $rounds round(s) of $jobs_n tasks with --stage-image (current): median $smed s, p95 $sp95 s (the baseline without it: --full)"
else
read -r bmed bp95 < <(grep . <<<"$base_all" | quantiles)
echo "start delay, $rounds round(s) of $jobs_n tasks: without --stage-image median $bmed s, p95 $bp95 s; with it (current) median $smed s, p95 $sp95 s; added median $(awk -v a="$smed" -v b="$bmed" 'BEGIN { printf "%.2f", a - b }') s, p95 $(awk -v a="$sp95" -v b="$bp95" 'BEGIN { printf "%.2f", a - b }') s"
fi

# (b) stale at first: a new source for the same DST
stale_at=()
for n in $n1 $n2; do stale_at+=("$(log_offset "$n")"); done
run_array stale "$dir/b.img"
want=$(sha256sum <"$dir/b.img" | cut -d' ' -f1)
k=0
for n in $n1 $n2; do
    [ "$(node_sha "$n" "$dst")" = "$want" ] || fail "stale: $n: $dst is not byte-identical to the new source"
    # the summary of a staging that copied ("2 copied, 0 current of 2
    # nodes"); the others say "current on NODE, nothing copied there"
    # (found current at once) or "all 2 nodes current[ (staged by another
    # run meanwhile)], nothing copied" (their agents waited for DST's lock)
    copied=$(one_line "$(log_since "$n" "${stale_at[$k]}" |
        grep -E "stagehand: job [0-9]+ user [^:]*: $dst: [1-9][0-9]* copied" | grep -oE 'job [0-9]+')")
    current=$(log_since "$n" "${stale_at[$k]}" | grep -cE "stagehand: job [0-9]+ user [^:]*: $dst: (current on $n|all 2 nodes current[^,]*), nothing copied" || true)
    k=$((k + 1))
    [ "$(wc -w <<<"$copied")" = 2 ] || fail "stale: $n: not one copy: stagings that copied: ${copied:-none}"
    echo "stale: $n: one copy ($copied), $current staging(s) found it current"
    [ "$current" -ge $((jobs_n - 1)) ] || fail "stale: $n: only $current of the other $((jobs_n - 1)) tasks found $dst current"
done
echo "ok: stale at first: one copy per node, every other task waited and found it current, DST byte-identical"

# nothing of it left, no port exhaustion, no drain
assert_no_drain
! { log_since "$n1" "$log_at"; log_since "$n2" "$log_at2"; } | grep -q 'no free control-plane port' ||
    fail "a staging found no free control-plane port"
for _ in $(seq 1 60); do
    left=0
    for n in $n1 $n2; do
        for name in stagehand-stage sh-sentinel stagehand-agent stagehand-bcast stagehand-wait; do
            left=$((left + $(named_pids "$n" "$name" | grep -c . || true)))
        done
        left=$((left + $(ctl_ports "$n")))
    done
    [ "$left" = 0 ] && break
    sleep 1
done
[ "$left" = 0 ] || fail "stagehand processes or control-plane listeners left on $n1/$n2: $left"
echo "ok: $jobs_n-task bursts on 2 nodes: all completed, no port exhaustion, no drain, nothing left"

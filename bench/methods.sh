# shellcheck shell=bash
# The methods bench/run.sh measures, sourced by it: one function per method
# (run_plugin, run_engine, run_sbcast, run_cp, run_noop; for --fabric
# run_fabric_*, for --registry run_registry_job), each one run that appends
# a CSV row. Uses run.sh's variables and helpers (mc, engine, alloc,
# scratch, STATE, clean_dst, mem_mark, row, ...).
# shellcheck disable=SC2154  # run.sh's variables

alloc=""
open_alloc() { # nodes -> job id of an idle allocation on n[1-N]
    as_user salloc -N"$1" -w "n[1-$1]" --no-shell -t 60 -J bench-alloc 2>&1 |
        sed -n 's/.*Granted job allocation \([0-9]*\).*/\1/p'
}

run_engine() { # size nodes rep alg src dst
    local size=$1 n=$2 rep=$3 alg=$4 src=$5 dst=$6 s0 s1 t0 t1 ok=1 eng="" phases=""
    clean_dst $((n * size << 20))
    mem_mark
    s0=$(storage_rchar)
    t0=$(now)
    # --kill-on-bad-exit: a rank that dies ends the step at once (Open MPI
    # 4.1 has no fault tolerance; the survivors would wait for --timeout)
    as_user timeout 900 srun --jobid="$alloc" -N"$n" -n"$n" --ntasks-per-node=1 --mpi=pmix \
        --kill-on-bad-exit=1 "$engine" --source "$src" --dest "$dst" --check=never \
        --algorithm="$alg" --timeout=$((60 + size / 4))s --json \
        >"$scratch/engine.json" 2>"$scratch/engine.err" || ok=0
    t1=$(now)
    s1=$(storage_rchar)
    if [ "$ok" = 1 ]; then
        # the engine's total and its own phase times (start-up/metadata/
        # pre-check/transfer/verify/publish: where the time goes), one read
        read -r eng phases < <(engine_phases "$scratch/engine.json") || true
        [ -n "$eng" ] || ok=0
    fi
    [ "$ok" = 1 ] || { say "$alg N=$n failed: $(tail -3 "$scratch/engine.err" | tr '\n' ' ')"; }
    say "$alg N=$n rep $rep: $(sub "$t0" "$t1") s, $(mem_note)"
    row "$size" "$alg" "$n" "$rep" "$(sub "$t0" "$t1")" "$ok" $((s1 - s0)) "$eng" "" "" "$(load1)" "$phases" "$(mem_reported_mib)" "$(host_busy_pct)"
}

run_sbcast() { # size nodes rep src dst
    local size=$1 n=$2 rep=$3 src=$4 dst=$5 s0 s1 t0 t1 ok=1
    clean_dst $((n * size << 20))
    mem_mark
    s0=$(storage_rchar)
    t0=$(now)
    as_user timeout 900 srun --jobid="$alloc" -N1 -n1 -w n1 sbcast -f "$src" "$dst" \
        2>"$scratch/sbcast.err" || ok=0
    t1=$(now)
    s1=$(storage_rchar)
    [ "$ok" = 1 ] && { dst_ok "$n" "$dst" "$((size << 20))" || ok=0; }
    [ "$ok" = 1 ] || say "sbcast N=$n failed: $(tail -3 "$scratch/sbcast.err" | tr '\n' ' ')"
    row "$size" sbcast "$n" "$rep" "$(sub "$t0" "$t1")" "$ok" $((s1 - s0)) "" "" "" "$(load1)" "" "$(mem_reported_mib)" "$(host_busy_pct)"
}

run_cp() { # size nodes rep src dst
    local size=$1 n=$2 rep=$3 src=$4 dst=$5 s0 s1 t0 t1 ok=1
    clean_dst $((n * size << 20))
    mem_mark
    s0=$(storage_rchar)
    t0=$(now)
    as_user timeout 900 srun --jobid="$alloc" -N"$n" -n"$n" --ntasks-per-node=1 cp "$src" "$dst" \
        2>"$scratch/cp.err" || ok=0
    t1=$(now)
    s1=$(storage_rchar)
    [ "$ok" = 1 ] && { dst_ok "$n" "$dst" "$((size << 20))" || ok=0; }
    [ "$ok" = 1 ] || say "cp N=$n failed: $(tail -3 "$scratch/cp.err" | tr '\n' ' ')"
    row "$size" cp "$n" "$rep" "$(sub "$t0" "$t1")" "$ok" $((s1 - s0)) "" "" "" "$(load1)" "" "$(mem_reported_mib)" "$(host_busy_pct)"
}

# Epoch seconds at which slurmctld started job $1 ("sched: Allocate" or
# "backfill: Started", millisecond timestamps in its log), or "".
job_start_time() {
    local ts
    # the newest line: job ids start again at 1 in a new instance, the log stays
    ts=$(grep -aE "(sched: Allocate|Started) JobId=$1 " "$STATE/log/slurmctld.log" |
        tail -1 | sed -n 's/^\[\([0-9-]*\)T\([0-9:.]*\)\].*/\1 \2/p' || true)
    if [ -n "$ts" ]; then date -d "$ts" +%s.%N; fi
}

# No job of an earlier measurement still completing (its epilog holds nodes).
wait_settled() {
    local i
    for ((i = 0; i < 300; i++)); do
        [ -z "$(squeue -h -t CG -o %i 2>/dev/null)" ] && return 0
        sleep 0.1
    done
}

# One batch job on n[1-N]: "date; srun STEP; date", STEP $5 (default true;
# words, no quoting) on every node. With $4 = 1 it asks for staging. Prints
# "first job prolog ok": seconds from the job's start (the allocation, when
# the prolog starts) to the job script's start, i.e. the first step, and to
# the end of its first srun step; the agent's staging time.
batch_job() { # nodes src dst with_option(0/1) [step]
    local n=$1 src=$2 dst=$3 opt=$4 step=${5:-true} id t0 st first job prolog ok=1 i ms
    local args=(-N"$n" -w "n[1-$n]" -t 30 -J bench-job -o "/tmp/bench-job-%j.out")
    [ "$opt" = 1 ] && args+=(--stage-image="$src:$dst")
    wait_settled
    # the log outlives instances (job ids repeat): read only what this job adds
    local log="$STATE/log/slurmd.n1.log" logoff
    logoff=$(stat -c %s "$log" 2>/dev/null || echo 0)
    # shellcheck disable=SC2016
    id=$(as_user sbatch --parsable "${args[@]}" \
        --wrap 'date +%s.%N; srun -N'"$n"' --ntasks-per-node=1 '"$step"'; date +%s.%N') || { echo "nan nan nan 0"; return; }
    # Look at the job after 0.1 s, then doubling up to every 2 s. Every look
    # runs squeue: 18 ms of CPU on this host (a process start, and an RPC
    # that slurmctld answers), on the same 2 cores as the job. Looking every
    # 0.1 s took about 8 % of the cores for the whole staging, from the
    # plugin's runs only (srun waits without polling). The times come from
    # slurmctld's log and the job's own clock: a later look only ends this
    # wait later, it changes no result.
    ms=100
    for ((i = 0; i < 1000; i++)); do
        st=$(squeue -h -j "$id" -o %T 2>/dev/null || true)
        [ -z "$st" ] && break
        sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
        ms=$((ms * 2 > 2000 ? 2000 : ms * 2))
    done
    mapfile -t ts < <("$mc" exec n1 -- cat "/tmp/bench-job-$id.out" 2>/dev/null | grep -E '^[0-9]+\.[0-9]+$')
    "$mc" exec n1 -- rm -f "/tmp/bench-job-$id.out"
    t0=$(job_start_time "$id")
    if [ "${#ts[@]}" -ge 2 ] && [ -n "$t0" ]; then
        first=$(sub "$t0" "${ts[0]}")
        job=$(sub "$t0" "${ts[1]}")
    else
        first=nan job=nan ok=0
    fi
    prolog=""
    if [ "$opt" = 1 ]; then
        prolog=$(tail -c +"$((logoff + 1))" "$log" | grep -a "stagehand: job $id user" |
            sed -n 's/.* in \([0-9.]*\) s.*/\1/p; s/.*(\([0-9.]*\) s)$/\1/p' | sort -g | tail -1 || true)
        tail -c +"$((logoff + 1))" "$log" | grep -aq "stagehand: job $id user.*staging failed" && ok=0
    fi
    echo "$first $job ${prolog:-nan} $ok"
}

run_plugin() { # size nodes rep src dst
    local size=$1 n=$2 rep=$3 src=$4 dst=$5 s0 s1 first job prolog ok
    clean_dst $((n * size << 20))
    mem_mark
    s0=$(storage_rchar)
    read -r first job prolog ok < <(batch_job "$n" "$src" "$dst" 1)
    s1=$(storage_rchar)
    say "plugin N=$n rep $rep: agent ${prolog:-?} s, $(mem_note)"
    [ "$ok" = 1 ] && { dst_ok "$n" "$dst" "$((size << 20))" || ok=0; }
    [ "$ok" = 1 ] || say "plugin N=$n failed (job output or staging)"
    row "$size" plugin "$n" "$rep" "$first" "$ok" $((s1 - s0)) "" "$prolog" "$job" "$(load1)" "" "$(mem_reported_mib)" "$(host_busy_pct)"
}

run_noop() { # size nodes reps src dst: option with all nodes current vs none
    local size=$1 n=$2 reps=$3 src=$4 dst=$5 r s0 s1 first job prolog ok
    clean_dst
    read -r first job prolog ok < <(batch_job "$n" "$src" "$dst" 1)    # make current
    for ((r = 1; r <= reps; r++)); do
        s0=$(storage_rchar)
        read -r first job prolog ok < <(batch_job "$n" "$src" "$dst" 1)
        s1=$(storage_rchar)
        row "$size" noop "$n" "$r" "$first" "$ok" $((s1 - s0)) "" "$prolog" "$job" "$(load1)"
        s0=$(storage_rchar)
        read -r first job prolog ok < <(batch_job "$n" "$src" "$dst" 0)
        s1=$(storage_rchar)
        row "$size" nooption "$n" "$r" "$first" "$ok" $((s1 - s0)) "" "" "$job" "$(load1)"
    done
}

has() { [[ " $methods " == *" $1 "* ]]; }

# One engine step on n[1-N] of the allocation $alloc: srun of stagehand-bcast
# from SRC to DST (--check=never, --json) with the VAR=VALUE words before
# "--" as its environment and the words after it as further options; srun's
# own limit LIMIT seconds; the JSON summary and the log into
# $scratch/engine.json and engine.err. Fails when srun does.
# --kill-on-bad-exit: a rank that dies ends the step at once.
engine_step() { # nodes src dst limit [VAR=VALUE...] -- [option...]
    local n=$1 src=$2 dst=$3 lim=$4 envs=()
    shift 4
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    as_user env "${envs[@]}" timeout "$lim" srun --jobid="$alloc" -N"$n" -n"$n" \
        --ntasks-per-node=1 --mpi=pmix --kill-on-bad-exit=1 "$engine" --source "$src" \
        --dest "$dst" --check=never --json "$@" >"$scratch/engine.json" 2>"$scratch/engine.err"
}

# The engine's JSON summary $1 of a run that copied to every node, as "total
# start-up transfer cpu_reader cpu_forwarder cpu_last cpu_max cpu_write
# cpu_read" (seconds; the CPU of rank 0, the mean of the inner ranks ("-" at
# N=2), the last rank, the busiest rank, the writer threads' mean over the
# ranks (hashing and writing DST; "-" if not reported), rank 0's reader
# threads); nothing for a failed run.
# "total start-up/metadata/pre-check/transfer/verify/publish": the engine's
# total and its own phase times in seconds (where the time goes) from its
# JSON summary FILE; nothing when the staging failed.
engine_phases() { # file
    python3 -c 'import json,sys
d = json.load(open(sys.argv[1])); s = d["seconds"]
if d["status"] == "ok" and d["nodes_copied"] == d["nodes"]:
    print(s["total"], "/".join("%.3f" % s[k] for k in ("start-up", "metadata", "pre-check", "transfer", "verify", "publish")))' "$1" 2>/dev/null || true
}

engine_summary() {
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1])); s = d["seconds"]
if d["status"] == "ok" and d["nodes_copied"] == d["nodes"]:
    nr = [r["seconds"] for r in sorted(d["node_results"], key=lambda r: r["rank"])]
    cpu = [r["cpu"] for r in nr]
    mid = cpu[1:-1]
    wr = [r.get("cpu_write") for r in nr]
    print("%.3f %.3f %.3f %.3f %s %.3f %.3f %s %s" % (s["total"], s["start-up"], s["transfer"],
          cpu[0], "%.3f" % (sum(mid) / len(mid)) if mid else "-", cpu[-1], max(cpu),
          "%.3f" % (sum(wr) / len(wr)) if None not in wr else "-",
          "%.3f" % nr[0]["cpu_read"] if "cpu_read" in nr[0] else "-"))' "$1" 2>/dev/null || true
}

# ------------------------------------------------------------ --fabric ----
# The unshaped regime (issue 32): links as fast as the host's loopback and
# cores allow, where the engine's own CPU cost per byte decides. Rows go to
# $fcsv: wall seconds of the srun step, the method's own seconds (engine:
# its total and transfer phase; MPI_Bcast loop: the loop), and the engine's
# CPU seconds by role (rank 0 reads SRC, ranks 1..N-2 forward, rank N-1 is
# the last node; for --algorithm=bcast the same ranks: root, inner, last).
#
# The MPI environment of each pml is the one the agent gives the engine for
# the plugstack's pml= (sh_config_pml_env in core/common/config.c).
pml_env() { # ob1|ucx|ucxeager -> KEY=VALUE words for env(1)
    case "$1" in
        ob1) echo "OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_base_warn_component_unused=0" ;;
        ucx) echo "OMPI_MCA_pml=ucx OMPI_MCA_pml_ucx_tls=any OMPI_MCA_pml_ucx_devices=any UCX_TLS=tcp,self,sm UCX_LOG_FILE=stderr" ;;
        # not the agent's: segments up to 1 MiB eagerly in one TCP fragment
        # instead of UCX's rendezvous from 19 KiB (tried, no gain measured:
        # bench/results/fabric-ucx-2026-12-07.md)
        ucxeager) echo "$(pml_env ucx) UCX_RNDV_THRESH=1052672 UCX_TCP_TX_SEG_SIZE=1052672 UCX_TCP_RX_SEG_SIZE=1052672" ;;
    esac
}
frow() { echo "$*" | tr ' ' ',' >>"$fcsv"; }

run_fabric_engine() { # size nodes rep alg pml src dst
    local size=$1 n=$2 rep=$3 alg=$4 pml=$5 src=$6 dst=$7 t0 t1 ok=1 res="" penv
    read -ra penv <<<"$(pml_env "$pml")"
    clean_dst $((n * size << 20))
    mem_mark
    t0=$(now)
    engine_step "$n" "$src" "$dst" 900 "${penv[@]}" -- --algorithm="$alg" \
        --timeout=$((60 + size / 4))s || ok=0
    t1=$(now)
    if [ "$ok" = 1 ]; then
        # "total transfer cpu_reader cpu_forwarder cpu_last cpu_write
        # cpu_read" (forwarder: the mean of the inner ranks, "-" at N=2;
        # cpu_write: the writer threads' CPU (hashing and writing DST), mean
        # over the ranks; cpu_read: the reader rank's reader threads)
        local e
        read -ra e < <(engine_summary "$scratch/engine.json")
        [ "${#e[@]}" = 9 ] && res="${e[0]} ${e[2]} ${e[3]} ${e[4]} ${e[5]} ${e[7]} ${e[8]}"
        [ -n "$res" ] || ok=0
    fi
    [ "$ok" = 1 ] || { say "$alg/$pml N=$n failed: $(tail -3 "$scratch/engine.err" | tr '\n' ' ')"; res="- - - - - - -"; }
    say "$alg/$pml N=$n rep $rep: $(sub "$t0" "$t1") s (engine total transfer cpu: $res)"
    frow "$size" "$alg-$pml" "$n" "$rep" "$(sub "$t0" "$t1")" "$ok" "$res" "$(load1)" "$(host_busy_pct)"
}

run_fabric_mpibcast() { # size nodes rep: MPI_Bcast of S in memory, 64 MiB calls
    local size=$1 n=$2 rep=$3 t0 t1 ok=1 secs="" penv
    read -ra penv <<<"$(pml_env ob1)"
    clean_dst $((n * size << 20))
    mem_mark
    t0=$(now)
    as_user env "${penv[@]}" timeout 900 srun --jobid="$alloc" -N"$n" -n"$n" --ntasks-per-node=1 \
        --mpi=pmix --kill-on-bad-exit=1 "$bcast_loop" "$size" >"$scratch/bcast.out" 2>&1 || ok=0
    t1=$(now)
    secs=$(sed -n 's/^bcast ok: .* in \([0-9.]*\) s$/\1/p' "$scratch/bcast.out")
    [ -n "$secs" ] || { ok=0; secs=-; say "mpibcast N=$n failed: $(tail -3 "$scratch/bcast.out" | tr '\n' ' ')"; }
    say "mpibcast N=$n rep $rep: $(sub "$t0" "$t1") s (loop $secs s)"
    frow "$size" mpibcast-ob1 "$n" "$rep" "$(sub "$t0" "$t1")" "$ok" "$secs $secs - - - - -" "$(load1)" "$(host_busy_pct)"
}

run_fabric_cp() { # size nodes rep src dst: every node copies SRC at once
    local size=$1 n=$2 rep=$3 src=$4 dst=$5 t0 t1 ok=1
    clean_dst $((n * size << 20))
    mem_mark
    t0=$(now)
    as_user timeout 900 srun --jobid="$alloc" -N"$n" -n"$n" --ntasks-per-node=1 cp "$src" "$dst" \
        2>"$scratch/cp.err" || ok=0
    t1=$(now)
    [ "$ok" = 1 ] && { dst_ok "$n" "$dst" "$((size << 20))" || ok=0; }
    [ "$ok" = 1 ] || say "cp N=$n failed: $(tail -3 "$scratch/cp.err" | tr '\n' ' ')"
    say "cp N=$n rep $rep: $(sub "$t0" "$t1") s"
    frow "$size" cp "$n" "$rep" "$(sub "$t0" "$t1")" "$ok" "- - - - - - -" "$(load1)" "$(host_busy_pct)"
}

# Every method of --fabric (in $methods: chain-ob1 chain-ucx bcast-ob1
# mpibcast cp) once, in that order, for each repetition: alternating, so a
# slower minute of the shared host falls on every method alike.
run_fabric() { # size src dst
    local size=$1 src=$2 dst=$3 n rep m
    for n in $nodes; do
        say "fabric: S=$size MiB N=$n: $methods (x$reps; load $(load1))"
        alloc=$(open_alloc "$n")
        [ -n "$alloc" ] || { echo "bench/run.sh: salloc failed" >&2; exit 1; }
        for ((rep = 1; rep <= reps; rep++)); do
            for m in $methods; do
                case "$m" in
                    chain-ob1 | chain-ucx | chain-ucxeager | bcast-ob1 | bcast-ucx)
                        run_fabric_engine "$size" "$n" "$rep" "${m%-*}" "${m#*-}" "$src" "$dst" ;;
                    mpibcast) run_fabric_mpibcast "$size" "$n" "$rep" ;;
                    cp) run_fabric_cp "$size" "$n" "$rep" "$src" "$dst" ;;
                esac
            done
        done
        scancel "$alloc"
        alloc=""
    done
}

# ------------------------------------------------------------ --scale -----
# The link-bound regime at scale (issue 35 item 1): links shaped so slow
# that the host's 2 CPUs never limit, even with 32 nodes and other work on
# the host. Rows go to $scsv: the plugin (sbatch --stage-image: job start to
# the job script's first step, and the agent's own staging time) and the
# standalone chain (srun of the engine at the same segment size, its phases
# and CPU seconds by role, so each run shows how far from CPU-bound it was).
srow() { echo "$*" | tr ' ' ',' >>"$scsv"; }

run_scale_plugin() { # size nodes rep src dst
    local size=$1 n=$2 rep=$3 src=$4 dst=$5 s0 s1 first job prolog ok
    clean_dst $((n * size << 20))
    mem_mark
    s0=$(storage_rchar)
    read -r first job prolog ok < <(batch_job "$n" "$src" "$dst" 1)
    s1=$(storage_rchar)
    [ "$ok" = 1 ] && { dst_ok "$n" "$dst" "$((size << 20))" || ok=0; }
    say "plugin N=$n rep $rep: job start to first step ${first:-?} s, agent ${prolog:-?} s, $(mem_note)"
    srow "$size" plugin "$n" "$rep" "$first" "$ok" $((s1 - s0)) "$prolog" "- - - - - - -" "$(load1)" "$(host_busy_pct)"
}

run_scale_chain() { # size nodes rep src dst
    local size=$1 n=$2 rep=$3 src=$4 dst=$5 s0 s1 t0 t1 ok=1 res=""
    clean_dst $((n * size << 20))
    mem_mark
    s0=$(storage_rchar)
    t0=$(now)
    engine_step "$n" "$src" "$dst" 1800 -- --algorithm=chain --segment-size="$segment" \
        --timeout=1500s || ok=0
    t1=$(now)
    s1=$(storage_rchar)
    if [ "$ok" = 1 ]; then
        # "total start-up transfer cpu_reader cpu_forwarder cpu_last
        # cpu_max": the engine's own clock and CPU seconds (forwarder: the
        # mean of the inner ranks; cpu_max: the busiest rank)
        local e
        read -ra e < <(engine_summary "$scratch/engine.json")
        [ "${#e[@]}" = 9 ] && res="${e[*]:0:7}"
        [ -n "$res" ] || ok=0
    fi
    [ "$ok" = 1 ] || { say "chain N=$n failed: $(tail -3 "$scratch/engine.err" | tr '\n' ' ')"; res="- - - - - - -"; }
    say "chain N=$n rep $rep: $(sub "$t0" "$t1") s (engine total start-up transfer cpu: $res)"
    [ "$ok" = 0 ] || say "chain N=$n rep $rep: engine total and start-up/metadata/pre-check/transfer/verify/publish s: $(engine_phases "$scratch/engine.json")"
    srow "$size" chain "$n" "$rep" "$(sub "$t0" "$t1")" "$ok" $((s1 - s0)) "-" "$res" "$(load1)" "$(host_busy_pct)"
}

# Every N of --nodes within each repetition (2, 16, 32, 2, 16, 32, ...),
# each with the plugin and then the chain: alternating, so a slower minute
# of the shared host falls on every N alike, and T(32) / T(2) compares runs
# minutes apart.
run_scale() { # size src dst
    local size=$1 src=$2 dst=$3 n rep
    for ((rep = 1; rep <= reps; rep++)); do
        for n in $nodes; do
            say "scale: S=$size MiB N=$n rep $rep: $methods (load $(load1))"
            alloc=$(open_alloc "$n")
            [ -n "$alloc" ] || { echo "bench/run.sh: salloc failed" >&2; exit 1; }
            if has plugin; then run_scale_plugin "$size" "$n" "$rep" "$src" "$dst"; fi
            if has chain; then run_scale_chain "$size" "$n" "$rep" "$src" "$dst"; fi
            scancel "$alloc"
            alloc=""
        done
    done
}

# ------------------------------------------------------------ --registry --
# Job start for a registry image (issue 36 item 6), rows to $rcsv: stagehand
# (sbatch --stage-image=docker://REF:DST: node 0 resolves the tag and runs
# the site's importer once, the broadcast delivers the image) against
# "every-node", a job whose first step runs on every node what node 0 runs
# in stagehand: the shipped resolver, then the shipped importer into the
# node's own /nvme (the way a job imports when each node pulls the image
# itself). Both are timed from the job's start to the end of its first step
# (stagehand: srun true once the prolog has staged; every-node: the import
# step), when every node holds the image.

reglog=""
# "CLIENTS BYTES" since byte offset $1 of the registry's access log: the
# nodes that fetched a blob, and the body bytes of every GET it answered
# (manifests, configs, layers: what the registry served).
reg_served() {
    tail -c +"$(($1 + 1))" "$reglog" | awk '$1 ~ /^[0-9.]+$/ && $2 == "-" && $3 == "-" && $6 == "\"GET" {
        b += $10; if ($7 ~ /\/blobs\//) c[$1] = 1 }
        END { n = 0; for (k in c) n++; printf "%d %.0f\n", n, b }'
}

# "BYTES LAYERS" of one pull of REF: its manifest, config and layers as the
# registry serves them (skopeo inspect --raw: the manifest's own bytes and
# the sizes it lists).
image_bytes() { # REF
    skopeo inspect --raw --tls-verify=false "docker://$1" | python3 -c 'import json, sys
raw = sys.stdin.buffer.read()
m = json.loads(raw)
print(len(raw) + m["config"]["size"] + sum(l["size"] for l in m["layers"]), len(m["layers"]))'
}

# Every node 1..$1 holds a Squashfs image at $2 (its magic).
squashfs_on() { # nodes path
    local i
    for ((i = 1; i <= $1; i++)); do
        [ "$("$mc" exec "n$i" -- head -c 4 "$2" 2>/dev/null)" = hsqs ] || return 1
    done
}

# The script a node runs to import REF (REGISTRY/REPO:TAG) into DST on its
# own: resolve, import pinned to the digest in a private directory beside
# DST (as stagehand runs the two on node 0), then rename.
write_node_import() { # path
    cat >"$1" <<'SCRIPT'
#!/bin/sh
# bench/run.sh --registry: one node imports REF into DST on its own
set -eu
imp=$1 ref=$2 dst=$3
# the importer's environment as stagehand gives it: no XDG_RUNTIME_DIR (a
# login's lives on the login's host), temporary files beside DST
unset XDG_RUNTIME_DIR
TMPDIR=$(mktemp -d "$(dirname "$dst")/.import.XXXXXX")
export TMPDIR
trap 'chmod -R u+rwX "$TMPDIR" 2>/dev/null; rm -rf "$TMPDIR"' EXIT
digest=$("$imp" --insecure digest "$ref")
"$imp" --insecure import "${ref%:*}@$digest" "$TMPDIR/image.sqsh"
mv "$TMPDIR/image.sqsh" "$dst"
SCRIPT
    chmod 0755 "$1"
}

run_registry_job() { # method nodes rep ref dst image_bytes (rep 0: warm-up, no row)
    local m=$1 n=$2 rep=$3 ref=$4 dst=$5 ib=$6 off first job prolog ok clients bytes
    # back N images' worth of host memory, as for the other methods (an
    # import also holds the blobs and the unpacked root for a while: node 0
    # with stagehand, every node with every-node)
    clean_dst $((n * ib))
    mem_mark
    off=$(stat -c %s "$reglog")
    case "$m" in
        stagehand) read -r first job prolog ok < <(batch_job "$n" "docker://$ref" "$dst" 1) ;;
        every-node) read -r first job prolog ok < <(batch_job "$n" "" "" 0 "$STATE/bench/node-import.sh $importer $ref $dst") ;;
        *) echo "bench/run.sh: unknown --registry method '$m' (stagehand, every-node)" >&2; exit 2 ;;
    esac
    read -r clients bytes < <(reg_served "$off")
    [ "$ok" = 1 ] && { squashfs_on "$n" "$dst" || ok=0; }
    [ "$ok" = 1 ] || say "$m N=$n failed (job output, staging or an image missing on a node)"
    say "$m N=$n rep $rep: job start -> first step end $job s, registry served $bytes bytes" \
        "($(awk -v b="$bytes" -v i="$ib" 'BEGIN { printf "%.3f", b / i }') x image) to $clients node(s); $(mem_note)"
    [ "$rep" -gt 0 ] || return 0
    echo "$ib,$m,$n,$rep,$job,$ok,$bytes,$clients,$first,$prolog,$(load1),$(mem_reported_mib),$(host_busy_pct)" >>"$rcsv"
}

# --registry for an image of SIZE MiB of data: seed the registry, a warm-up
# staging at the largest N, then every method per repetition at each N.
run_registry() { # size
    local size=$1 ref ib layers t0 n rep m dst=/nvme/bench/img.sqsh
    "$mc" registry start >/dev/null
    [ "$("$mc" registry addr)" = "$reg_addr" ] || { echo "bench/run.sh: the registry is at $("$mc" registry addr), not $reg_addr" >&2; exit 1; }
    reglog=$STATE/log/registry.log
    write_node_import "$STATE/bench/node-import.sh"
    ref=$reg_addr/bench/img:s$size
    say "registry: building and pushing $ref ($size MiB of random data)"
    t0=$(now)
    "$mc" registry push "${ref#*/}" $((size << 10)) >/dev/null
    read -r ib layers < <(image_bytes "$ref")
    say "registry: pushed in $(sub "$t0" "$(now)") s: $ib bytes in $layers layers"
    {
        echo "image_ref=$ref"
        echo "image_mib=$size"
        echo "image_bytes=$ib"
        echo "image_layers=$layers"
        echo "push_seconds=$(sub "$t0" "$(now)")"
    } >>"$calib"
    say "warm-up: stagehand at N=$maxn (not recorded)"
    run_registry_job stagehand "$maxn" 0 "$ref" "$dst" "$ib"
    for n in $nodes; do
        say "registry: N=$n: $methods (x$reps; load $(load1))"
        for ((rep = 1; rep <= reps; rep++)); do
            for m in $methods; do run_registry_job "$m" "$n" "$rep" "$ref" "$dst" "$ib"; done
        done
    done
}

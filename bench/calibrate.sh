# shellcheck shell=bash
# Calibration of bench/run.sh, sourced by it after the cluster is up: the raw
# rates of the emulated fabric without MPI (node link, a raw TCP chain over
# every node, the storage host read by one and two nodes, a local write) and
# the host's speed probes, into $calib and $out/latest.calib.txt. Unless the
# rates were given (--link, --storage) it steps the shaping down while the
# raw chain cannot fill the link (the cores are in the way). Uses run.sh's
# variables and helpers (mc, R, STATE, NODES, maxn, link, storage,
# auto_rate, smoke, out, ...); sets calib, cal_bytes and the B_* rates.
# shellcheck disable=SC2154  # run.sh's variables

calib="$out/latest.calib"
raw_link() { # bytes: n1 -> n2, memory to memory
    local b=$1 res
    "$mc" exec n2 -- timeout 120 "$R" recv 5999 >/tmp/bench-raw.$$ &
    local rpid=$!
    res=$("$mc" exec n1 -- timeout 120 "$R" send "$(node_ip n2):5999" "$b")
    wait $rpid
    rm -f /tmp/bench-raw.$$
    echo "$res" | awk '{ printf "%.1f", $1 / $2 / 1e6 }'
}
raw_chain() { # bytes nodes: n1 -> n2 -> ... -> nK, each hop writes to /nvme
    # prints "MB/s busy%": the payload rate and how busy the host's CPUs were
    # (the start of the K processes included; the local cpu0 is the mark
    # host_busy_pct counts from, in place of mem_mark's)
    local b=$1 k=$2 i fwd pids=() res cpu0
    # shellcheck disable=SC2034  # read by host_busy_pct (dynamic scope)
    cpu0=$(cpu_ticks)
    for ((i = k; i >= 2; i--)); do
        fwd=()
        [ "$i" -lt "$k" ] && fwd=(--forward "$(node_ip "n$((i + 1))"):5999")
        "$mc" exec "n$i" -- timeout 120 "$R" recv 5999 "${fwd[@]}" --out /nvme/raw.tmp >/dev/null &
        pids+=($!)
    done
    res=$("$mc" exec n1 -- timeout 120 "$R" send "$(node_ip n2):5999" "$b")
    wait "${pids[@]}"
    echo "$res $(host_busy_pct)" | awk '{ printf "%.1f %s\n", $1 / $2 / 1e6, $3 }'
}
storage_read() { # bytes file nodes: K nodes read the file from /shared at once
    local b=$1 f=$2 k=$3 i t0 t1
    t0=$(now)
    for ((i = 1; i <= k; i++)); do
        "$mc" exec "n$i" -- dd if="$f" of=/dev/null bs=1M status=none &
    done
    wait
    t1=$(now)
    awk -v b="$b" -v k="$k" -v s="$(sub "$t0" "$t1")" 'BEGIN { printf "%.1f", b * k / s / 1e6 }'
}
local_write() { # bytes: dd to node n1's /nvme with fsync
    local b=$1 t0 t1
    t0=$(now)
    "$mc" exec n1 -- dd if=/dev/zero of=/nvme/cal.tmp bs=8M count=$((b >> 23)) conv=fsync status=none
    t1=$(now)
    "$mc" exec n1 -- rm -f /nvme/cal.tmp
    awk -v b="$b" -v s="$(sub "$t0" "$t1")" 'BEGIN { printf "%.1f", b / s / 1e6 }'
}


cal_bytes=$((${cal_mib:-256} << 20))
clean_dst
if [ "$smoke" = 1 ]; then
    : # the smoke run checks correctness and storage bytes only
else
say "calibration ($((cal_bytes >> 20)) MiB per transfer; load $(load1))"
calsrc=$(mk_source $((cal_bytes >> 20)))
# the cores must not be what limits a raw chain at the shaped link rate; one
# sample can be unlucky, so a rate is given up only when a second sample of
# the chain is under 95 % of the link too (the better one counts)
under95() { awk -v c="$1" -v l="$2" 'BEGIN { exit !(c < 0.95 * l) }'; }
chain_failed() { echo "bench/run.sh: calibration: the raw chain over $maxn nodes failed" >&2; exit 1; }
for step in 0 1 2; do
    B_link=$(raw_link "$cal_bytes")
    if ! sample1=$(raw_chain "$cal_bytes" "$maxn") || [ -z "$sample1" ]; then chain_failed; fi
    read -r B_chain B_chain_busy <<<"$sample1"
    if [ "$auto_rate" = 0 ] || [ "$step" = 2 ] || ! under95 "$B_chain" "$B_link"; then
        break
    fi
    if ! sample2=$(raw_chain "$cal_bytes" "$maxn") || [ -z "$sample2" ]; then chain_failed; fi
    read -r B_chain B_chain_busy < <(printf '%s\n' "$sample1" "$sample2" | sort -k1,1g | tail -1)
    under95 "$B_chain" "$B_link" || break
    rate_steps="${rate_steps:+$rate_steps; }at $link the raw chain reached $B_chain of $B_link MB/s with the host's CPUs $B_chain_busy % busy"
    link=$((${link%mbit} * 3 / 4))mbit storage=$((${storage%mbps} * 3 / 4))mbps
    say "the raw chain reaches $B_chain of $B_link MB/s (under 95 %): the cores are in the way; shaping --link $link --storage $storage"
    "$mc" shape --storage "$storage" --link "$link" 2>/dev/null
done
B_st1=$(storage_read "$cal_bytes" "$calsrc" 1)
B_st2=$(storage_read "$cal_bytes" "$calsrc" 2)
B_write=$(local_write "$cal_bytes")
read -r probe_exec probe_fault < <(host_probe)
rm -f "$export_dir/bench-$((cal_bytes >> 20)).img"
clean_dst
link_nom=$(awk -v r="$link" 'BEGIN { v = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u);
    m = (u ~ /^k/) ? 1e3 : (u ~ /^m/) ? 1e6 : (u ~ /^g/) ? 1e9 : 1;
    printf "%.1f", (u ~ /bit$/) ? v * m / 8 / 1e6 : v * m / 1e6 }')
st_nom=$(awk -v r="$storage" 'BEGIN { v = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u);
    m = (u ~ /^k/) ? 1e3 : (u ~ /^m/) ? 1e6 : (u ~ /^g/) ? 1e9 : 1;
    printf "%.1f", (u ~ /bit$/) ? v * m / 8 / 1e6 : v * m / 1e6 }')
cat >"$calib" <<EOF
stack=$stack
slurm_version=$v_slurm
openmpi_version=$v_ompi
pmix_version=$v_pmix
link_rate=$link
storage_rate=$storage
link_nominal_MBps=$link_nom
storage_nominal_MBps=$st_nom
link_raw_MBps=$B_link
chain_raw_MBps=$B_chain
chain_raw_nodes=$maxn
chain_raw_busy_pct=$B_chain_busy
storage_1reader_MBps=$B_st1
storage_2readers_MBps=$B_st2
local_write_MBps=$B_write
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
date_start=$(date -u +%Y-%m-%dT%H:%MZ)
prolog_local_check=1
staging_process=1
prolog_epilog_timeout=${MINICLUSTER_PROLOG_EPILOG_TIMEOUT:-180}
host_cpus=$(nproc)
host_exec_ms_start=$probe_exec
host_fault_us_start=$probe_fault
rate_steps=$rate_steps
rates_given=$((1 - auto_rate))
nvme_fs=${nvme_fs:-tmpfs}
segment_bytes=$(numfmt --from=iec "${segment:-512K}")
cal_bytes=$cal_bytes
EOF
limit_rate=$(printf '%s\n' "$B_link" "$B_st2" "$B_write" | sort -g | head -1)
{
    echo "calibration (MB/s = 10^6 bytes/s; payload rates of raw transfers, no MPI):"
    echo "  node link        shaped $link = $link_nom MB/s nominal; raw TCP n1->n2: $B_link MB/s"
    echo "  storage egress   shaped $storage = $st_nom MB/s nominal; sshfs read 1 node: $B_st1, 2 nodes: $B_st2 MB/s total"
    echo "  local write      dd to /nvme (${nvme_fs:-tmpfs}) with fsync: $B_write MB/s"
    echo "  CPU check        raw TCP chain over $maxn nodes (each hop forwards + writes): $B_chain MB/s, host CPUs $B_chain_busy % busy"
    echo "  host speed       /bin/true $probe_exec ms, first touch of a 4 KiB page $probe_fault us"
    echo "  physical limit   S / min(storage, link, local write) = S / $limit_rate MB/s"
} | tee "$out/latest.calib.txt" >&2
if [ "$link" != unshaped ] && under95 "$B_chain" "$B_link"; then
    say "WARNING: the raw chain reaches only $B_chain of $B_link MB/s: the CPUs limit at this link rate (use a lower --link and --storage)"
fi
fi

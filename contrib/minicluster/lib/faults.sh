# shellcheck shell=bash
# minicluster's fault-injection commands, for the fault tests: restart-slurmd,
# freeze/thaw of a node's processes, hold-rpcs/release-rpcs, shape.
# Sourced by contrib/minicluster/minicluster, whose globals (STATE, NAME,
# STACK, ...) and helpers (die, log, ns_run, ...) these functions use.

descendants() { # pid -> pid and all its descendants
    local p=$1 c
    echo "$p"
    for c in $(ps -o pid= --ppid "$p" 2>/dev/null); do descendants "$c"; done
}

cmd_restart_slurmd() {
    local n=${1:-}
    need_node "$n"
    stop_pid "slurmd.$n"
    start_slurmd "$n"
    wait_for "slurmd on $n" 20 cli bash -c "SLURM_CONF=$STATE/etc/slurm.conf scontrol ping >/dev/null && \
        SLURM_CONF=$STATE/etc/slurm.conf sinfo -h -n $n -o %T | grep -qvE 'down|unknown'" ||
        daemon_failed "slurmd on $n" "$STATE/log/slurmd.$n.log"
}

cmd_signal_tree() { # SIG node
    local sig=$1 n=${2:-}
    need_node "$n"
    local pid
    pid=$(read_pid "slurmd.$n")
    pid_alive "$pid" || die "slurmd on $n is not running"
    # The slurmd, and every process in the node's network namespace (steps,
    # prolog agents, engines), which slurmd started.
    # shellcheck disable=SC2046  # lists of pids
    kill "-$sig" $(descendants "$pid") $(ip netns pids "$NAME-$n") 2>/dev/null || true
}

# Hold slurmctld's requests to node $1's slurmd: an htb class of 8 bit/s on
# the controller's interface, for TCP to that node's SlurmdPort, lets a
# connection open (its SYN fits the class's burst) and queues what follows
# until release-rpcs. Steps launched from other nodes reach the node at once,
# the allocation's prolog request late (tests: a step before the prolog).
cmd_hold_rpcs() {
    local n=${1:-}
    need_node "$n"
    tc -n "$NAME-ctl" qdisc add dev eth0 root handle 1: htb default 20 ||
        die "hold-rpcs: requests are held already (release-rpcs first)"
    # every part or nothing: a hold without its class or filter holds nothing
    if ! tc -n "$NAME-ctl" class add dev eth0 parent 1: classid 1:20 htb rate 10gbit 2>/dev/null ||
        ! tc -n "$NAME-ctl" class add dev eth0 parent 1: classid 1:10 htb rate 8bit burst 1 cburst 1 2>/dev/null ||
        ! tc -n "$NAME-ctl" filter add dev eth0 parent 1: protocol ip prio 1 u32 \
            match ip dst "$(node_ip "$n")"/32 match ip dport "$SLURMD_PORT" 0xffff flowid 1:10; then
        tc -n "$NAME-ctl" qdisc del dev eth0 root 2>/dev/null || true
        die "hold-rpcs: cannot set up the tc htb class and u32 filter on the controller's eth0"
    fi
    log "hold-rpcs: slurmctld's requests to $n are held"
}

# Let the held requests go (the class first, so that nothing queued is
# dropped), then remove the qdisc. Idempotent: says whether anything was held.
cmd_release_rpcs() {
    if ! tc -n "$NAME-ctl" class change dev eth0 parent 1: classid 1:10 htb rate 10gbit 2>/dev/null; then
        tc -n "$NAME-ctl" qdisc del dev eth0 root 2>/dev/null || true
        log "release-rpcs: no requests were held"
        return 0
    fi
    sleep 0.5
    tc -n "$NAME-ctl" qdisc del dev eth0 root 2>/dev/null || true
    log "release-rpcs: slurmctld's held requests are let go"
}

rate_ok() { [[ "$1" =~ ^[0-9]+(\.[0-9]+)?([kKmMgG]?(bit|bps))$ ]]; }

# shape [--storage RATE] [--link RATE [--node nX]...] | --clear: every
# node link (or only those of the nodes given with --node) limited to RATE
# each way; any earlier shaping is cleared first.
cmd_shape() {
    load_state
    [ -f "$STATE/up" ] || die "shape: the cluster is not up"
    local storage="" link="" clear=0 only=()
    while [ $# -gt 0 ]; do
        case "$1" in
            --storage) storage=${2:?}; shift 2 ;;
            --link) link=${2:?}; shift 2 ;;
            --node)
                [[ " ${NODES[*]} " == *" ${2:?} "* ]] || die "shape: --node '$2' is not a node of this cluster"
                only+=("$2"); shift 2 ;;
            --clear) clear=1; shift ;;
            *) die "shape: unknown argument '$1'" ;;
        esac
    done
    [ -n "$link" ] || [ ${#only[@]} -eq 0 ] || die "shape: --node needs --link"
    local hosts=("${NODES[@]}")
    [ -e /run/netns/"$NAME"-st ] && hosts+=(st)
    for h in "${hosts[@]}"; do
        ip -n "$NAME-$h" link set eth0 up
        tc -n "$NAME-$h" qdisc del dev eth0 root 2>/dev/null || true
        tc qdisc del dev "${NAME}v-$h" root 2>/dev/null || true
    done
    [ "$clear" = 1 ] && { log "shape: cleared"; return 0; }
    if [ -n "$link" ]; then
        rate_ok "$link" || die "shape: --link '$link' is not a tc rate (e.g. 1gbit, 500mbit, 100mbps)"
        [ ${#only[@]} -gt 0 ] || only=("${NODES[@]}")
        for n in "${only[@]}"; do
            tc -n "$NAME-$n" qdisc add dev eth0 root tbf rate "$link" burst 256kb latency 50ms
            tc qdisc add dev "${NAME}v-$n" root tbf rate "$link" burst 256kb latency 50ms
        done
    fi
    if [ -n "$storage" ]; then
        rate_ok "$storage" || die "shape: --storage '$storage' is not a tc rate (e.g. 200mbps)"
        [ -e /run/netns/"$NAME"-st ] || die "shape: --storage needs 'up --shared sshfs' (no storage host)"
        tc -n "$NAME"-st qdisc add dev eth0 root tbf rate "$storage" burst 256kb latency 50ms
    fi
    log "shape: storage=${storage:-unlimited} link=${link:-unlimited}${link:+ (${only[*]})}"
}

# shellcheck shell=bash
# minicluster's daemons: munged, slurmctld, each node's slurmd, the storage
# host's sshd and the nodes' sshfs mounts.
# Sourced by contrib/minicluster/minicluster, whose globals (STATE, NAME,
# STACK, ...) and helpers (die, log, ns_run, ...) these functions use.

# --------------------------------------------------------------- daemons ---
start_munged() {
    # The socket directory must be searchable by everyone; the key is private.
    mkdir -p "$STATE/munge" "$STATE/munge-private"
    if [ ! -f "$STATE/munge-private/munge.key" ]; then
        head -c 1024 /dev/urandom >"$STATE/munge-private/munge.key"
    fi
    chown munge:munge "$STATE/munge" "$STATE/munge-private" "$STATE/munge-private/munge.key"
    chmod 0755 "$STATE/munge"
    chmod 0700 "$STATE/munge-private"
    chmod 0400 "$STATE/munge-private/munge.key"
    # In the login view, setpriv execs munged in place, so that the pid
    # recorded is munged's own (stopping runuser there left munged running).
    # (nsenter and setpriv exec: no function or subshell, $! is munged)
    local as_munge=(runuser -u munge --)
    on_root_stack && as_munge=(nsenter --mount="$STATE/ns/login.mnt" --
        setpriv --reuid=munge --regid=munge --init-groups)
    "${as_munge[@]}" /usr/sbin/munged -F \
        --socket="$STATE/munge/munge.socket" \
        --key-file="$STATE/munge-private/munge.key" \
        --pid-file="$STATE/munge-private/munged.pid" \
        --log-file="$STATE/munge-private/munged.log" \
        --seed-file="$STATE/munge-private/munged.seed" </dev/null >>"$STATE/log/munged.out" 2>&1 &
    record_pid munged $!
    wait_for "munged socket" 10 test -S "$STATE/munge/munge.socket" ||
        daemon_failed munged "$STATE/log/munged.out" "$STATE/munge-private/munged.log"
}

start_slurmctld() {
    ns_run ctl env SLURM_CONF="$STATE/etc/slurm.conf" \
        /usr/sbin/slurmctld -D -c -i -f "$STATE/etc/slurm.conf" \
        </dev/null >>"$STATE/log/slurmctld.out" 2>&1 &
    record_pid slurmctld $!
}

start_slurmd() { # node
    local n=$1
    mkdir -p "$STATE/spool/$n"
    ns_run "$n" env -i SLURM_CONF="$STATE/etc/slurm.conf" \
        PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        /usr/sbin/slurmd -D -N "$n" -f "$STATE/etc/slurm.conf" \
        </dev/null >>"$STATE/log/slurmd.$n.out" 2>&1 &
    record_pid "slurmd.$n" $!
}

wait_for() { # what seconds cmd...
    local what=$1 secs=$2
    shift 2
    local i
    for ((i = 0; i < secs * 10; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    log "timed out after ${secs}s waiting for $what"
    return 1
}

daemon_failed() { # name logfile...
    local name=$1
    shift
    echo "minicluster: $name did not come up; log tail:" >&2
    for f in "$@"; do
        [ -f "$f" ] && tail -n 25 "$f" >&2
    done
    exit 1
}

# -------------------------------------------------------------- sshfs ------
start_storage() {
    mkdir -p "$STATE/export" "$STATE/ssh"
    chmod 1777 "$STATE/export"
    [ -f "$STATE/ssh/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$STATE/ssh/host_ed25519"
    [ -f "$STATE/ssh/client_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$STATE/ssh/client_ed25519"
    cp "$STATE/ssh/client_ed25519.pub" "$STATE/ssh/authorized_keys"
    chmod 600 "$STATE/ssh/authorized_keys"
    cat >"$STATE/ssh/sshd_config" <<EOF
ListenAddress $NET.2
Port 22
HostKey $STATE/ssh/host_ed25519
PidFile $STATE/pids/sshd.daemon.pid
AuthorizedKeysFile $STATE/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
EOF
    ns_run st mkdir -p /run/sshd
    ns_run st /usr/sbin/sshd -D -e -f "$STATE/ssh/sshd_config" \
        </dev/null >>"$STATE/log/sshd.log" 2>&1 &
    record_pid sshd $!
    wait_for "storage sshd" 10 ns_run ctl bash -c "exec 3<>/dev/tcp/$NET.2/22" ||
        daemon_failed sshd "$STATE/log/sshd.log"
}

# Mount /shared over sshfs inside the current namespace (called via ns_run).
sshfs_opts() {
    echo "allow_other,default_permissions,cache=no,attr_timeout=0,entry_timeout=0,negative_timeout=0,IdentityFile=$STATE/ssh/client_ed25519,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,LogLevel=ERROR,reconnect,max_conns=4"
}

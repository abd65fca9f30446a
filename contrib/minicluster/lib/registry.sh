# shellcheck shell=bash
# The test cluster's container registry (issue 36): Debian's docker-registry
# on the storage host st ($NET.2, port 5000, plain HTTP on the cluster's own
# network), its data under $STATE/registry (kept across stop and start), its
# log (one access line per request, with the client's address) in
# $STATE/log/registry.log. A second instance on port 5001 serves the same
# data only to a client with credentials (htpasswd auth: one user, its
# bcrypt hash made by apache2-utils' htpasswd, the password random per
# cluster; `registry creds` prints USER:PASSWORD), its log in
# $STATE/log/registry-auth.log. Sourced by contrib/minicluster/minicluster,
# whose globals and helpers these functions use.

REGISTRY_PORT=5000
REGISTRY_AUTH_PORT=5001
REGISTRY_AUTH_USER=stagehand-test

registry_addr() { # [--auth]
    if [ "${1:-}" = --auth ]; then echo "$NET.2:$REGISTRY_AUTH_PORT"; else echo "$NET.2:$REGISTRY_PORT"; fi
}

registry_up() { # [PORT]
    ns_run ctl bash -c "exec 3<>/dev/tcp/$NET.2/${1:-$REGISTRY_PORT}" 2>/dev/null
}

# The auth instance's USER:PASSWORD, made once per cluster state (0600).
registry_creds() {
    local f=$STATE/registry/creds
    if [ ! -s "$f" ]; then
        mkdir -p "$STATE/registry"
        (umask 077 && printf '%s:%s\n' "$REGISTRY_AUTH_USER" \
            "$(head -c 18 /dev/urandom | base64 | tr -d '/+=')" >"$f")
    fi
    cat "$f"
}

# Start instance NAME (registry or registry-auth) with config CONF on PORT.
registry_serve() { # name conf port
    if pid_alive "$(read_pid "$1")"; then
        return 0
    fi
    # nsenter itself (no shell function in between) so that the recorded
    # PID is the registry's: nsenter execs it.
    nsenter --net="/run/netns/$NAME-st" -- /usr/bin/docker-registry serve "$2" \
        </dev/null >>"$STATE/log/$1.log" 2>&1 &
    record_pid "$1" $!
    wait_for "$1" 15 registry_up "$3" || daemon_failed "$1" "$STATE/log/$1.log"
}

registry_start() {
    [ -f "$STATE/up" ] || die "registry: the cluster is not up"
    command -v docker-registry >/dev/null || die "registry: docker-registry is not installed (contrib/setup.sh)"
    command -v htpasswd >/dev/null || die "registry: htpasswd is not installed (apache2-utils; contrib/setup.sh)"
    # The storage host exists with --shared sshfs; else it is made for the
    # registry alone (a network namespace, no mount namespace).
    [ -e "/run/netns/$NAME-st" ] || make_netns st
    mkdir -p "$STATE/registry/data" "$STATE/log" "$STATE/pids"
    cat >"$STATE/registry/config.yml" <<CONF
version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: $STATE/registry/data
  delete:
    enabled: true
http:
  addr: $(registry_addr)
CONF
    local creds
    creds=$(registry_creds)
    htpasswd -Bbc "$STATE/registry/htpasswd" "${creds%%:*}" "${creds#*:}" 2>/dev/null ||
        die "registry: htpasswd failed"
    sed -e "s|^  addr: .*|  addr: $(registry_addr --auth)|" "$STATE/registry/config.yml" \
        >"$STATE/registry/config-auth.yml"
    cat >>"$STATE/registry/config-auth.yml" <<CONF
auth:
  htpasswd:
    realm: minicluster
    path: $STATE/registry/htpasswd
CONF
    registry_serve registry "$STATE/registry/config.yml" "$REGISTRY_PORT"
    registry_serve registry-auth "$STATE/registry/config-auth.yml" "$REGISTRY_AUTH_PORT"
    log "registry: up at $(registry_addr) (log $STATE/log/registry.log), with credentials at $(registry_addr --auth) (log $STATE/log/registry-auth.log)"
}

# Build a small image from a root of a few files (a marker naming REPO:TAG
# and the time of the push, so each push is a new digest, and SIZE_KIB of
# random data) with umoci, push it with skopeo, print its manifest digest.
registry_push() { # REPO:TAG [SIZE_KIB]
    local ref=${1:?registry push REPO:TAG [SIZE_KIB]} kib=${2:-1024} tmp digest
    [[ "$ref" =~ ^[a-z0-9][a-z0-9._/-]*:[A-Za-z0-9_][A-Za-z0-9_.-]*$ ]] || die "registry push: '$ref' is not REPO:TAG"
    registry_up || die "registry push: no registry at $(registry_addr) (minicluster registry start)"
    tmp=$(mktemp -d)
    mkdir -p "$tmp/root/etc" "$tmp/root/data"
    printf 'image %s pushed %s\n' "$ref" "$(date +%s%N)" >"$tmp/root/etc/stagehand-test"
    head -c "$((kib * 1024))" /dev/urandom >"$tmp/root/data/blob"
    if ! { umoci init --layout "$tmp/oci" &&
        umoci new --image "$tmp/oci:img" &&
        umoci insert --image "$tmp/oci:img" "$tmp/root/etc" /etc &&
        umoci insert --image "$tmp/oci:img" "$tmp/root/data" /data &&
        skopeo copy -q --dest-tls-verify=false "oci:$tmp/oci:img" "docker://$(registry_addr)/$ref" >&2; }; then
        rm -rf "$tmp"
        die "registry push: building or pushing $ref failed"
    fi
    rm -rf "$tmp"
    digest=$(skopeo inspect --raw --tls-verify=false "docker://$(registry_addr)/$ref" | sha256sum | cut -d' ' -f1)
    echo "sha256:$digest"
}

cmd_registry() {
    load_state
    case "${1:-}" in
        start) registry_start ;;
        stop)
            stop_pid registry
            stop_pid registry-auth
            ! registry_up || die "registry: still answering at $(registry_addr)"
            ! registry_up "$REGISTRY_AUTH_PORT" || die "registry: still answering at $(registry_addr --auth)"
            log "registry: stopped" ;;
        push) shift; registry_push "$@" ;;
        addr) shift; registry_addr "$@" ;;
        creds) registry_creds ;;
        *) die "registry: expected start, stop, push REPO:TAG [SIZE_KIB], addr [--auth] or creds" ;;
    esac
}

#!/usr/bin/env bash
# Build the Debian package with dpkg-buildpackage, install it with apt-get,
# check the installed layout, and purge it again so nothing of it is left
# (issue 7), on either software stack (issue 31). Run as root on Debian 12:
#
#   tests/package/test_package.sh [--cluster] [--keep] [--nocheck]
#                                 [--stack bookworm|trixie]
#
#   --stack    bookworm (default): the host's own Debian 12; the package is
#              built and installed on the host. trixie: Debian 13 (Slurm
#              24.11), the root of contrib/minicluster/rootfs; the package is
#              built inside that root and installed in views of it, never on
#              the host: without --cluster in a private view (gone
#              afterwards), with --cluster in every node's view and the login
#              view of the test cluster, which runs that stack (`minicluster
#              up --stack trixie` first if it runs the other one or is down).
#   --cluster  also stage a file with `srun --stage-image`, as the test user,
#              on the local test cluster with plugstack.conf pointing at the
#              packaged plugin (agent and engine at the package's paths).
#              On a cluster up on the stack, plugstack.conf's stagehand line
#              (the cluster needs one: contrib/setup.sh --install [--stack
#              trixie]) is pointed at it and every slurmd restarted, as an
#              administrator would, then both are put back; bookworm, when
#              the cluster is down or on the other stack: it is brought up
#              with MINICLUSTER_PLUGIN, then back as it was (`minicluster
#              up`, twice). No one else may use the cluster
#              meanwhile. A cluster that was down is brought down again, one
#              on another stack back to that stack.
#   --keep     leave the package installed (no purge at the end; a trixie
#              cluster's views keep it until the cluster goes down).
#   --nocheck  build with DEB_BUILD_OPTIONS=nocheck: dh_auto_test does not
#              run the unit and agent tests (tests/run.sh runs the same
#              tests of the same sources under ASan and UBSan on each stack
#              already, and passes this unless --full: some 50 s a stack).
#
# The build happens in a copy of the source tree under build-pkg/ (trixie:
# build-pkg-trixie/); the .deb and the logs stay there. The last line is
# "N passed, N failed".
# (--steps LABEL STEP[,STEP...] DEB is internal: the script runs itself so,
# as root where the package goes, to install, check or purge it there.)
set -euo pipefail

self=$(readlink -f "$0")
top=$(cd "$(dirname "$self")/../.." && pwd)
pkg=slurm-stagehand
cluster=0
keep=0
nocheck=0
stack=bookworm
steps=""
label=""
deb=""
while [ $# -gt 0 ]; do
    case "$1" in
        --cluster) cluster=1 ;;
        --keep) keep=1 ;;
        --nocheck) nocheck=1 ;;
        --stack) stack=${2:?--stack needs bookworm or trixie}; shift ;;
        --stack=*) stack=${1#*=} ;;
        --steps)
            [ $# -ge 4 ] || { echo "test_package.sh: --steps LABEL STEPS DEB" >&2; exit 2; }
            label=$2 steps=$3 deb=$4
            shift 3
            ;;
        -h | --help) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "test_package.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
    shift
done
case "$stack" in
    bookworm | trixie) ;;
    *) echo "test_package.sh: --stack must be bookworm or trixie, got '$stack'" >&2; exit 2 ;;
esac
# One build directory per stack: tests/run.sh runs both stacks' tests at once.
out=$top/build-pkg
[ "$stack" = bookworm ] || out=$top/build-pkg-$stack
# The steps write their logs beside the package (a node's copy of both may
# be outside this tree: run_steps).
[ -z "$steps" ] || out=${deb%/*}
[ "$(id -u)" = 0 ] || { echo "test_package.sh: must run as root" >&2; exit 2; }
command -v dpkg >/dev/null || { echo "test_package.sh: needs a Debian system" >&2; exit 2; }
export DEBIAN_FRONTEND=noninteractive

passed=0
failed=0
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
check() { # description command...
    local what=$1
    shift
    if "$@"; then ok "$what"; else bad "$what"; fi
}
die() {
    echo "FAIL: $*"
    failed=$((failed + 1))
    exit 1
}

# The package's paths, for a multiarch triplet (x86_64-linux-gnu).
set_paths() {
    multiarch=$1
    plugin=/usr/lib/$multiarch/slurm-wlm/stagehand.so
    agent=/usr/libexec/stagehand-agent
    engine=/usr/bin/stagehand-bcast
    pmixmod=/usr/lib/$multiarch/stagehand/stagehand-pmix.so
}

# ---- steps: run where the package is installed ----------------------------
# The script runs itself with --steps on the system the package goes to: the
# host, or on trixie a view of the stack's root (run_steps below); the steps
# see that system's dpkg, libraries and Slurm. LABEL names the view in the
# logs' names ("" on the host).

step_install() {
    local log=$out/install${label:+-$label}.log f missing=""
    if apt-get install -y -qq --no-install-recommends "$deb" >"$log" 2>&1; then
        ok "apt-get install ./$(basename "$deb")"
    else
        tail -20 "$log"
        die "apt-get install $deb (see $log)"
    fi
    while IFS= read -r f; do
        [ -e "$f" ] || missing="$missing $f"
    done < <(dpkg-query -L "$pkg")
    if [ -z "$missing" ] &&
        [ "$(dpkg-query -W -f='${Status}' "$pkg")" = "install ok installed" ]; then
        ok "dpkg: $pkg is installed, every path it lists is in place"
    else
        bad "dpkg: $pkg: $(dpkg-query -W -f='${Status}' "$pkg"), missing:${missing:- none}"
    fi
}

step_purge() {
    local log=$out/purge${label:+-$label}.log files f left=""
    echo "== purging $pkg${label:+ in $label}"
    files=$(dpkg-query -L "$pkg" 2>/dev/null | grep -E '^/(usr|etc)/.*stagehand' || true)
    if apt-get purge -y -qq "$pkg" >"$log" 2>&1; then
        for f in $files; do
            [ -e "$f" ] && left="$left $f"
        done
        if [ -z "$left" ] && ! dpkg-query -W "$pkg" >/dev/null 2>&1; then
            ok "apt-get purge removes every file of the package"
        else
            bad "left after purge:${left:- (package still known to dpkg)}"
        fi
    else
        bad "apt-get purge $pkg (see $log)"
    fi
}

# The installed layout: files, modes, libraries, exports, versions, man
# pages, the example configuration, stagehand-keygen and the clients' --help
# with the packaged plugin; lintian on the .deb with this system's lintian.
step_check() {
    local version upstream listing f deps exports extra m text conf full k nkeys
    local kdir kf before hdir cmd help
    version=$(dpkg-deb -f "$deb" Version)
    if lintian --fail-on error "$deb" >"$out/lintian.log" 2>&1; then
        ok "lintian reports no errors ($(grep -c '^W:' "$out/lintian.log" || true) warnings, see $out/lintian.log)"
    else
        cat "$out/lintian.log"
        bad "lintian reports errors"
    fi

    listing=$(dpkg-query -L "$pkg")
    for f in "$plugin" "$agent" "$engine" "$pmixmod" /usr/sbin/stagehand-keygen \
        /usr/sbin/stagehand-cache /usr/share/man/man8/stagehand-cache.8.gz \
        /usr/share/man/man8/stagehand.8.gz /usr/share/man/man1/stagehand-bcast.1.gz \
        /usr/share/man/man8/stagehand-keygen.8.gz \
        /etc/slurm/plugstack.conf.d/stagehand.conf \
        /usr/share/doc/$pkg/copyright; do
        if grep -qxF "$f" <<<"$listing" && [ -f "$f" ]; then
            ok "installed: $f"
        else
            bad "missing from the package: $f"
        fi
    done
    for f in "$agent" "$engine" /usr/sbin/stagehand-keygen; do
        check "$f is executable by everyone" test "$(stat -c %a "$f")" = 755
    done
    check "the plugin is root-owned, mode 0644" test "$(stat -c '%U %a' "$plugin")" = "root 644"
    check "plugstack.conf.d/stagehand.conf is a conffile" \
        grep -q '/etc/slurm/plugstack.conf.d/stagehand.conf' \
        <<<"$(dpkg-query -W -f='${Conffiles}' "$pkg")"

    # Dependencies of the plugin: slurmd loads its own libslurm and libpmix.
    deps=$(ldd "$plugin")
    if grep -qE 'libcrypto|libpmix|libmpi|libslurm|not found' <<<"$deps"; then
        bad "ldd $plugin shows a forbidden or missing library: $deps"
    else
        ok "ldd: the plugin needs no libcrypto, libpmix, libmpi or libslurm"
    fi
    for f in "$agent" "$engine" "$pmixmod"; do
        if ldd "$f" | grep -q 'not found'; then
            bad "ldd $f: $(ldd "$f" | grep 'not found')"
        else
            ok "ldd: every library of $f is found"
        fi
    done
    # The agent maps libpmix only on a node that runs an engine, through its
    # module; the module resolves the agent's control-plane functions.
    check "ldd: the agent does not link libpmix" test -z "$(ldd "$agent" | grep libpmix || true)"
    check "ldd: the PMIx module links libpmix" grep -q libpmix <<<"$(ldd "$pmixmod")"
    check "the PMIx module exports only sh_pmix_module_ops" \
        test "$(nm -D --defined-only "$pmixmod" | awk '{ print $3 }')" = sh_pmix_module_ops
    check "the PMIx module is root-owned, mode 0644" test "$(stat -c '%U %a' "$pmixmod")" = "root 644"
    exports=$(nm -D --defined-only "$plugin" | awk '{ print $3 }')
    extra=$(grep -vE '^(plugin_(name|type|version)|slurm_spank_[a-z_]+)$' <<<"$exports" || true)
    if [ -z "$extra" ] && grep -q '^slurm_spank_init$' <<<"$exports" &&
        grep -q '^plugin_version$' <<<"$exports"; then
        ok "nm -D: the plugin exports only plugin_* and slurm_spank_*"
    else
        bad "nm -D: unexpected exports: ${extra:-(slurm_spank_init or plugin_version missing)}"
    fi

    upstream=${version%%-*}
    check "stagehand-bcast --version says $upstream" \
        grep -qx "stagehand-bcast $upstream" <<<"$("$engine" --version 2>&1)"
    check "stagehand-agent --version says $upstream" \
        grep -qx "stagehand-agent $upstream" <<<"$("$agent" --version 2>&1)"
    check "stagehand-bcast --help exits 0" "$engine" --help >/dev/null

    # Man pages render without warnings and name the installed paths.
    for m in /usr/share/man/man8/stagehand.8.gz /usr/share/man/man1/stagehand-bcast.1.gz \
        /usr/share/man/man8/stagehand-keygen.8.gz /usr/share/man/man8/stagehand-cache.8.gz; do
        text=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$m" 2>"$out/man.err") || true
        if [ -s "$out/man.err" ] || [ "$(wc -l <<<"$text")" -lt 20 ]; then
            bad "man -l $m: $(head -5 "$out/man.err")"
        else
            ok "man -l $m renders ($(wc -l <<<"$text") lines, no warnings)"
        fi
    done
    text=$(LC_ALL=C.UTF-8 MANWIDTH=200 man -l /usr/share/man/man8/stagehand.8.gz 2>/dev/null)
    for f in "$plugin" "$agent" "$engine" "$pmixmod" "${agent%/*}/stagehand-import"; do
        check "stagehand(8) names $f" grep -qF "$f" <<<"$text"
    done
    check "stagehand(8) has no unfilled @...@" test -z "$(grep -E '@[A-Z]+@' <<<"$text" || true)"

    # The example configuration: inert (every line a comment), every key of
    # the plugin's parser documented and spelled out on the commented plugin
    # line.
    conf=/etc/slurm/plugstack.conf.d/stagehand.conf
    check "$conf has only comments" test -z "$(grep -vE '^[[:space:]]*(#|$)' "$conf" || true)"
    check "$conf names the installed plugin" grep -qE "^#required $plugin allowed_dest=" "$conf"
    full=$(grep -E "^#required $plugin .*allow_shared_dst=" "$conf" || true)
    local keys=(allowed_dest default_dest key_file agent engine port_base port_range fanout
        segment_size pipeline_depth timeout check hash mpi_env on_node_fault
        submit_check verbose allow_shared_dst stall_timeout join_timeout read_ahead dest_dir_mode pml
        allowed_registries default_registry resolver importer cache cache_high cache_low cache_max)
    for k in "${keys[@]}"; do
        grep -qF "\"$k\"" "$top/core/common/config.c" || bad "key $k is not in core/common/config.c any more"
        if grep -qE "^# $k " "$conf" && { case $k in mpi_env | allowed_registries | default_registry | cache | cache_high | cache_low | cache_max) true ;; *) false ;; esac || grep -qE "(^| )$k=" <<<"$full"; }; then
            ok "$conf documents $k"
        else
            bad "$conf does not document $k"
        fi
    done
    nkeys=$(sed -n '/^static const char \*const keys\[\] = {/,/};/p' "$top/core/common/config.c" |
        grep -o '"[a-z_]*"' | wc -l)
    check "the example knows all $nkeys keys of the parser" test "$nkeys" = "${#keys[@]}"

    # stagehand-keygen: 0600 root, refuses to overwrite, --force replaces.
    kdir=$(mktemp -d)
    kf=$kdir/stagehand.key
    check "stagehand-keygen writes a key" /usr/sbin/stagehand-keygen "$kf"
    check "the key is root:root 0600 with 64 bytes" test "$(stat -c '%U:%G %a %s' "$kf")" = "root:root 600 64"
    before=$(sha256sum "$kf")
    if /usr/sbin/stagehand-keygen "$kf" >"$out/keygen.out" 2>&1; then
        bad "stagehand-keygen overwrote $kf without --force"
    elif grep -q -- '--force' "$out/keygen.out" && [ "$(sha256sum "$kf")" = "$before" ]; then
        ok "stagehand-keygen refuses to overwrite without --force"
    else
        bad "stagehand-keygen refusal: $(cat "$out/keygen.out")"
    fi
    check "stagehand-keygen --force --bytes 32 replaces the key" \
        /usr/sbin/stagehand-keygen --force --bytes 32 "$kf"
    check "the new key has 32 bytes" test "$(stat -c %s "$kf")" = 32
    rm -rf "$kdir"

    # Slurm loads the packaged plugin and shows its options in --help (no
    # daemon is needed for --help): a private slurm.conf whose plugstack
    # names it.
    hdir=$(mktemp -d)
    cat >"$hdir/slurm.conf" <<EOC
ClusterName=pkgtest
SlurmctldHost=localhost
PlugStackConfig=$hdir/plugstack.conf
NodeName=localhost CPUs=1 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES
EOC
    echo "required $plugin allowed_dest=/nvme" >"$hdir/plugstack.conf"
    chmod 0755 "$hdir"
    for cmd in srun sbatch salloc; do
        help=$(SLURM_CONF=$hdir/slurm.conf "$cmd" --help 2>&1) || true
        if grep -qF -- '--stage-image=SRC[:DST][,...]' <<<"$help" &&
            grep -qE -- '^ +--stage-verbose +[A-Z]' <<<"$help"; then
            ok "$cmd --help shows the packaged plugin's options"
        else
            bad "$cmd --help with the packaged plugin: $(grep -A3 'provided by plugins' <<<"$help")"
        fi
    done
    rm -rf "$hdir"
}

if [ -n "$steps" ]; then
    # A step that ends early (set -e) counts as a failure.
    trap 'rc=$?; [ "$rc" = 0 ] || [ "$failed" != 0 ] || bad "steps $steps ended early (exit $rc)"
        echo "$passed passed, $failed failed"' EXIT
    set_paths "$(dpkg-architecture -qDEB_HOST_MULTIARCH)"
    IFS=, read -ra todo <<<"$steps"
    for s in "${todo[@]}"; do
        case "$s" in
            install) step_install ;;
            check) step_check ;;
            purge) step_purge ;;
            *) die "unknown step '$s'" ;;
        esac
    done
    [ "$failed" = 0 ]
    exit
fi

# ---- where the package goes -------------------------------------------------
rootfs=$top/contrib/minicluster/rootfs
mc=$top/contrib/minicluster/minicluster

# run_on TARGET CMD...: run CMD as root on TARGET: "host" (this system),
# "view" (a private view of the stack's root with this tree in it, gone when
# CMD ends), "login" (the test cluster's login view) or a node (its view). In
# a view CMD gets a clean environment: the host's means nothing there.
view_env=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8
    DEBIAN_FRONTEND=noninteractive)
run_on() {
    local t=$1
    shift
    case "$t" in
        host) "$@" ;;
        view) "$rootfs" run "$stack" "$top" -- "${view_env[@]}" "$@" ;;
        login) nsenter --mount="$MINICLUSTER_STATE/ns/login.mnt" -- "${view_env[@]}" "$@" ;;
        *) "$mc" exec "$t" -- "${view_env[@]}" "$@" ;;
    esac
}

# The system the package is built on: the host, or a view of the stack's root.
in_root() {
    if [ "$stack" = bookworm ]; then run_on host "$@"; else run_on view "$@"; fi
}

# run_steps TARGET STEP[,STEP...]: this script's --steps on TARGET; its
# ok/FAIL lines count here (labelled with TARGET unless it is the host).
# True when the steps ended and none failed.
run_steps() {
    local t=$1 s=$2 lbl="" line count="" me=$self pkgfile=$deb
    [ "$t" = host ] || lbl=$t
    case "$t" in
        host | view | login) ;;
        *) if [ -n "$node_copy" ]; then
               me=$node_copy/${self##*/} pkgfile=$node_copy/${deb##*/}
           fi ;;
    esac
    while IFS= read -r line; do
        case "$line" in
            "ok: "*) ok "${lbl:+$lbl: }${line#ok: }" ;;
            "FAIL: "*) bad "${lbl:+$lbl: }${line#FAIL: }" ;;
            *[0-9]" passed, "*[0-9]" failed") count=$line ;;
            *) echo "$line" ;;
        esac
    done < <(run_on "$t" bash "$me" --stack "$stack" --steps "$lbl" "$s" "$pkgfile" 2>&1 || true)
    if [ -z "$count" ]; then
        bad "${lbl:-host}: the steps $s ended early"
        return 1
    fi
    [ "${count#* passed, }" = "0 failed" ]
}

# Targets the package was installed on, purged by finish unless --keep.
installed=()
# install_on TARGET [STEP...]: install the package there, then the further
# steps; the target is recorded for the purge as soon as dpkg knows the
# package there, and the test ends if it does not.
install_on() {
    local t=$1 s
    s=$(IFS=,; echo "install${2:+,}${*:2}")
    # shellcheck disable=SC2016  # dpkg-query's format, not the shell's
    if run_on "$t" dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'; then
        die "$pkg is already installed ($t); remove it first (apt-get purge $pkg) so this test leaves the system as it found it"
    fi
    echo "== apt-get install $deb ($t)"
    run_steps "$t" "$s" || true
    if run_on "$t" dpkg-query -W "$pkg" >/dev/null 2>&1; then
        installed+=("$t")
    else
        exit 1
    fi
}

# ---- the test cluster ---------------------------------------------------------
mc_changed=0
mc_was_up=0
node_copy=""
mc_plugin_before=
mc_stack_before=
mc_shape=()
nodes=()
plugstack=
plugstack_saved=

# The cluster as it is: "up: 3 nodes (n1 n2 n3), shared=bind, stack trixie".
read_cluster() {
    local status
    status=$("$mc" status 2>/dev/null) || return 0
    mc_was_up=1
    mc_plugin_before=$(eval "$("$mc" env)"; echo "$MINICLUSTER_LOADED_PLUGIN")
    status=$(head -1 <<<"$status")
    if [[ "$status" =~ ^up:\ ([0-9]+)\ nodes.*shared=([a-z]+)(,\ stack\ ([a-z]+))? ]]; then
        mc_shape=(--nodes "${BASH_REMATCH[1]}" --shared "${BASH_REMATCH[2]}")
        mc_stack_before=${BASH_REMATCH[4]:-bookworm}
    fi
}

# cluster_up PLUGIN: (re)build the cluster in its shape on $stack, loading
# PLUGIN ("" for minicluster's default); restore_cluster undoes it.
cluster_up() {
    mc_changed=1
    if ! MINICLUSTER_PLUGIN=$1 "$mc" up "${mc_shape[@]}" --stack "$stack" >"$out/cluster-up.log" 2>&1; then
        tail -20 "$out/cluster-up.log"
        die "minicluster up --stack $stack${1:+ with MINICLUSTER_PLUGIN=$1} (see $out/cluster-up.log)"
    fi
}

# shellcheck disable=SC2317  # called by finish (the EXIT trap)
restore_cluster() {
    if [ "$mc_was_up" = 1 ]; then
        echo "== test cluster: back to $mc_plugin_before, stack $mc_stack_before"
        MINICLUSTER_PLUGIN=$mc_plugin_before "$mc" up "${mc_shape[@]}" --stack "$mc_stack_before" \
            >"$out/cluster-restore.log" 2>&1 || bad "test cluster restored (see $out/cluster-restore.log)"
    else
        "$mc" down >"$out/cluster-restore.log" 2>&1 || bad "test cluster brought down again"
    fi
}

# (the nodes at once: one after the other cost some 2 s a node)
restart_slurmds() {
    local n
    declare -A pids
    for n in "${nodes[@]}"; do
        "$mc" restart-slurmd "$n" >>"$out/cluster-restart.$n.log" 2>&1 &
        pids[$n]=$!
    done
    for n in "${nodes[@]}"; do
        wait "${pids[$n]}" || bad "minicluster restart-slurmd $n (see $out/cluster-restart.$n.log)"
    done
}

# On a running cluster, as an administrator would: plugstack.conf's stagehand
# line names the packaged plugin (its arguments stay), every slurmd restarts.
switch_plugstack() {
    grep -qE '^required ' "$plugstack" ||
        die "$plugstack loads no stagehand plugin whose line could name $plugin (contrib/setup.sh --install --stack $stack, then minicluster up)"
    plugstack_saved=$out/plugstack.conf.saved
    cp -p "$plugstack" "$plugstack_saved"
    sed -i -E "s#^required [^ ]+#required $plugin#" "$plugstack"
    echo "== every slurmd restarted with $plugin"
    restart_slurmds
}

# shellcheck disable=SC2317  # called by finish (the EXIT trap)
restore_plugstack() {
    echo "== plugstack.conf and every slurmd back to $(awk '$1 == "required" { print $2 }' "$plugstack_saved")"
    if cp -p "$plugstack_saved" "$plugstack"; then
        restart_slurmds
    else
        bad "$plugstack restored from $plugstack_saved"
    fi
}

as_user() {
    (cd "$MINICLUSTER_SHARED" && runuser -u "$MINICLUSTER_USER" -- env SLURM_CONF="$SLURM_CONF" \
        PATH=/usr/local/bin:/usr/bin:/bin \
        HOME="$(getent passwd "$MINICLUSTER_USER" | cut -d: -f6)" "$@")
}

# Stage a file as the test user through the plugin plugstack.conf names, on
# every node; check each node's copy and that every node is idle again.
stage_file() {
    local user=$MINICLUSTER_USER srcf dst want run seen n got owner states="" l
    srcf=$MINICLUSTER_SHARED/pkgtest.$$.img
    dst=/nvme/pkgtest/pkgtest.$$.img
    as_user sh -c "head -c 8388608 /dev/urandom >'$srcf' && chmod 0644 '$srcf'"
    want=$(sha256sum "$srcf" | cut -d' ' -f1)
    # shellcheck disable=SC2016  # expanded by the task's shell
    if run=$(as_user srun -N"${#nodes[@]}" --ntasks-per-node=1 --stage-image="$srcf:$dst" \
        --stage-verbose sh -c 'sha256sum "$STAGEHAND_IMAGE"' 2>&1); then
        ok "srun --stage-image as $user against the packaged plugin"
    else
        bad "srun --stage-image as $user: $run"
    fi
    while IFS= read -r l; do echo "    $l"; done <<<"$run"
    seen=$(grep -c "^$want  $dst\$" <<<"$run" || true)
    check "every task saw the staged file as \$STAGEHAND_IMAGE" test "$seen" = "${#nodes[@]}"
    for n in "${nodes[@]}"; do
        got=$("$mc" exec "$n" -- sh -c "sha256sum '$dst' 2>/dev/null | cut -d' ' -f1")
        owner=$("$mc" exec "$n" -- stat -c %U "$dst" 2>/dev/null || true)
        check "$n: $dst is byte-identical and owned by $user" \
            test "$got:$owner" = "$want:$user"
        "$mc" exec "$n" -- rm -rf /nvme/pkgtest
    done
    for _ in $(seq 1 50); do
        states=$(sinfo -h -o '%T' | sort -u | tr '\n' ' ')
        [ "$states" = "idle " ] && break
        sleep 0.2
    done
    check "nodes are idle again, none drained ($states)" test "$states" = "idle "
    rm -f "$srcf"
}

# shellcheck disable=SC2317  # called by the EXIT trap
finish() {
    local rc=$? t
    # The cluster leaves the packaged plugin before the package goes away.
    if [ -n "$plugstack_saved" ]; then restore_plugstack; fi
    if [ "$keep" = 0 ]; then
        for t in "${installed[@]}"; do run_steps "$t" purge || true; done
    fi
    if [ "$mc_changed" = 1 ]; then restore_cluster; fi
    if [ -n "$node_copy" ]; then
        cp "$node_copy"/*.log "$out/" 2>/dev/null || true
        rm -rf "$node_copy"
    fi
    echo "$passed passed, $failed failed"
    if [ "$failed" -gt 0 ] && [ "$rc" = 0 ]; then rc=1; fi
    exit "$rc"
}
trap finish EXIT

if [ "$stack" = bookworm ] && dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'; then
    die "$pkg is already installed; remove it first (apt-get purge $pkg) so this test leaves the system as it found it"
fi

# ---- build ----------------------------------------------------------------------
mkdir -p "$out"
if [ "$stack" = bookworm ]; then
    echo "== build tools and build dependencies"
    need=()
    for p in dpkg-dev debhelper fakeroot lintian man-db binutils; do
        dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
    done
    if [ ${#need[@]} -gt 0 ]; then
        apt-get install -y -qq --no-install-recommends "${need[@]}" >"$out/apt.log" 2>&1 ||
            { tail -20 "$out/apt.log"; die "apt-get install ${need[*]}"; }
    fi
else
    # The root holds the build tools and every build dependency.
    echo "== the $stack root (contrib/minicluster/rootfs)"
    "$rootfs" build "$stack" || die "rootfs build $stack"
fi

# Build from a copy holding exactly the files git knows or would add (no
# build directories), so the checkout stays clean.
src=$out/src
rm -rf "$src"
mkdir -p "$src"
if git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
    git -C "$top" ls-files -z --cached --others --exclude-standard |
        (cd "$top" && tar --null -T - -cf -) | tar -xf - -C "$src"
else
    tar -C "$top" --exclude='./build*' -cf - . | tar -xf - -C "$src"
fi
if [ "$stack" = bookworm ]; then
    (cd "$src" && apt-get build-dep -y -qq ./ >"$out/build-dep.log" 2>&1) ||
        { tail -20 "$out/build-dep.log"; die "apt-get build-dep"; }
fi

build_opts=""
[ "$nocheck" = 0 ] || build_opts=nocheck
echo "== dpkg-buildpackage -us -uc -b on $stack${build_opts:+ (DEB_BUILD_OPTIONS=$build_opts)} (log: $out/build.log)"
rm -f "$out"/*.deb "$out"/*.buildinfo "$out"/*.changes
# shellcheck disable=SC2016  # expanded by the inner shell
if in_root bash -c 'cd "$1" || exit
        [ -z "$2" ] || export DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:+$DEB_BUILD_OPTIONS }$2"
        exec dpkg-buildpackage -us -uc -b' build "$src" "$build_opts" \
    >"$out/build.log" 2>&1; then
    ok "dpkg-buildpackage -us -uc -b"
else
    tail -40 "$out/build.log"
    die "dpkg-buildpackage -us -uc -b (see $out/build.log)"
fi
# dpkg-buildpackage writes to the parent of the source tree.
# shellcheck disable=SC2016  # expanded by the inner shell
read -r version arch multiarch < <(in_root sh -c 'echo "$(dpkg-parsechangelog -l "$1" -S Version)" \
    "$(dpkg-architecture -qDEB_HOST_ARCH)" "$(dpkg-architecture -qDEB_HOST_MULTIARCH)"' \
    sh "$src/debian/changelog")
set_paths "$multiarch"
deb=$out/${pkg}_${version}_${arch}.deb
[ -f "$deb" ] || die "no $deb after the build"

# The paths compiled into the plugin (meson's config.h) are the package's.
config_h=$(find "$src" -path "$src/debian" -prune -o -name config.h -path '*obj-*' -print | head -1)
check "plugin default agent= is $agent" grep -qF "#define SH_AGENT_PATH \"$agent\"" "$config_h"
check "plugin default engine= is $engine" grep -qF "#define SH_ENGINE_PATH \"$engine\"" "$config_h"
check "the agent loads its PMIx module from $pmixmod" \
    grep -qF "#define SH_PMIX_MODULE_PATH \"$pmixmod\"" "$config_h"

# ---- install, check ---------------------------------------------------------
if [ "$cluster" = 0 ]; then
    if [ "$stack" = bookworm ]; then
        install_on host check
    else
        # A private view: installed, checked and purged in one go.
        s=install,check
        [ "$keep" = 1 ] || s=$s,purge
        echo "== $s in a private view of the $stack root"
        run_steps view "$s" || true
    fi
    exit 0
fi

# ---- on the test cluster ------------------------------------------------------
read_cluster
switch=1
if [ "$stack" = bookworm ]; then
    install_on host check
    if [ "$mc_was_up" = 0 ] || [ "$mc_stack_before" != "$stack" ]; then
        echo "== test cluster with plugstack.conf naming $plugin"
        cluster_up "$plugin"
        switch=0
    fi
    eval "$("$mc" env)"
else
    if [ "$mc_was_up" = 0 ] || [ "$mc_stack_before" != "$stack" ]; then
        echo "== test cluster: up on $stack"
        cluster_up "$mc_plugin_before"
    fi
    eval "$("$mc" env)"
    run_on login test -f "$self" ||
        die "the cluster's views do not show $top: bring it up with $mc"
    read -ra nodes <<<"$MINICLUSTER_NODES"
    # A node's view has a /tmp of its own: a tree checked out under /tmp is
    # not in it. The nodes' steps then run from a copy of this script and
    # the package in the cluster's shared directory (removed by finish).
    if ! run_on "${nodes[0]}" test -f "$self"; then
        { node_copy=$(mktemp -d "$MINICLUSTER_SHARED/pkgtest.XXXXXX") &&
            cp "$self" "$deb" "$node_copy/" && chmod -R a+rX "$node_copy"; } ||
            die "cannot copy the script and the package to $MINICLUSTER_SHARED"
    fi
    install_on login check
    for n in "${nodes[@]}"; do install_on "$n"; done
fi
read -ra nodes <<<"$MINICLUSTER_NODES"
plugstack=$(sed -n 's/^PlugStackConfig=//p' "$SLURM_CONF")
[ "$switch" = 0 ] || switch_plugstack
line=$(grep -E '^required ' "$plugstack" || true)
check "plugstack.conf loads $plugin" grep -qE "^required $plugin " <<<"$line"
check "plugstack.conf leaves agent= and engine= at the plugin's defaults" \
    test -z "$(grep -oE ' (agent|engine)=' <<<"$line" || true)"
stage_file
exit 0

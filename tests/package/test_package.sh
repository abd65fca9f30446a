#!/usr/bin/env bash
# Build the Debian package with dpkg-buildpackage, install it with apt-get,
# check the installed layout, and purge it again so /usr is left clean
# (issue 7). Run as root on Debian 12:
#
#   tests/package/test_package.sh [--cluster] [--keep]
#
#   --cluster  also stage a file with `srun --stage-image`, as the test user,
#              on the local test cluster with plugstack.conf pointing at the
#              packaged plugin (agent and engine at the package's paths).
#              This restarts the cluster twice (`minicluster up` with
#              MINICLUSTER_PLUGIN, then back to the plugin it had), so no one
#              else may be using the cluster meanwhile. A cluster that was
#              down is brought down again.
#   --keep     leave the package installed (no purge at the end).
#
# The build happens in a copy of the source tree under build-pkg/; the .deb
# and the build log stay there. The last line is "N passed, N failed".
set -euo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
out=$top/build-pkg
pkg=slurm-stagehand
cluster=0
keep=0
for a in "$@"; do
    case "$a" in
        --cluster) cluster=1 ;;
        --keep) keep=1 ;;
        -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "test_package.sh: unknown argument '$a'" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "test_package.sh: must run as root" >&2; exit 2; }
command -v dpkg >/dev/null || { echo "test_package.sh: needs a Debian system" >&2; exit 2; }

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

installed_by_us=0
mc=$top/contrib/minicluster/minicluster
mc_changed=0
mc_was_up=0
mc_plugin_before=
mc_args=()

# shellcheck disable=SC2317  # called by the EXIT trap
finish() {
    local rc=$?
    if [ "$mc_changed" = 1 ]; then
        # Back to the plugin the cluster had, before the package goes away.
        if [ "$mc_was_up" = 1 ]; then
            echo "== test cluster: back to $mc_plugin_before"
            MINICLUSTER_PLUGIN=$mc_plugin_before "$mc" up "${mc_args[@]}" >"$out/cluster-restore.log" 2>&1 ||
                bad "test cluster restored (see $out/cluster-restore.log)"
        else
            "$mc" down >"$out/cluster-restore.log" 2>&1 || bad "test cluster brought down again"
        fi
    fi
    if [ "$installed_by_us" = 1 ] && [ "$keep" = 0 ]; then
        echo "== purging $pkg"
        local files
        files=$(dpkg-query -L "$pkg" 2>/dev/null | grep -E '^/(usr|etc)/.*stagehand' || true)
        if DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "$pkg" >"$out/purge.log" 2>&1; then
            local left=""
            for f in $files; do
                [ -e "$f" ] && left="$left $f"
            done
            if [ -z "$left" ] && ! dpkg-query -W "$pkg" >/dev/null 2>&1; then
                ok "apt-get purge removes every file of the package"
            else
                bad "left after purge:${left:- (package still known to dpkg)}"
            fi
        else
            bad "apt-get purge $pkg (see $out/purge.log)"
        fi
    fi
    echo "$passed passed, $failed failed"
    if [ "$failed" -gt 0 ] && [ "$rc" = 0 ]; then rc=1; fi
    exit "$rc"
}
trap finish EXIT

if dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'; then
    die "$pkg is already installed; remove it first (apt-get purge $pkg) so this test leaves the system as it found it"
fi

# ---- build -------------------------------------------------------------
export DEBIAN_FRONTEND=noninteractive
mkdir -p "$out"
echo "== build tools and build dependencies"
need=()
for p in dpkg-dev debhelper fakeroot lintian man-db binutils; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
    apt-get install -y -qq --no-install-recommends "${need[@]}" >"$out/apt.log" 2>&1 ||
        { tail -20 "$out/apt.log"; die "apt-get install ${need[*]}"; }
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
(cd "$src" && apt-get build-dep -y -qq ./ >"$out/build-dep.log" 2>&1) ||
    { tail -20 "$out/build-dep.log"; die "apt-get build-dep"; }

echo "== dpkg-buildpackage -us -uc -b (log: $out/build.log)"
rm -f "$out"/*.deb "$out"/*.buildinfo "$out"/*.changes
if (cd "$src" && dpkg-buildpackage -us -uc -b) >"$out/build.log" 2>&1; then
    ok "dpkg-buildpackage -us -uc -b"
else
    tail -40 "$out/build.log"
    die "dpkg-buildpackage -us -uc -b (see $out/build.log)"
fi
# dpkg-buildpackage writes to the parent of the source tree.
version=$(cd "$src" && dpkg-parsechangelog -S Version)
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
deb=$out/${pkg}_${version}_${arch}.deb
[ -f "$deb" ] || die "no $deb after the build"

if lintian --fail-on error "$deb" >"$out/lintian.log" 2>&1; then
    ok "lintian reports no errors ($(grep -c '^W:' "$out/lintian.log" || true) warnings, see $out/lintian.log)"
else
    cat "$out/lintian.log"
    bad "lintian reports errors"
fi

# The paths compiled into the plugin (meson's config.h) are the package's.
plugin=/usr/lib/$multiarch/slurm-wlm/stagehand.so
agent=/usr/libexec/stagehand-agent
engine=/usr/bin/stagehand-bcast
pmixmod=/usr/lib/$multiarch/stagehand/stagehand-pmix.so
config_h=$(find "$src" -path "$src/debian" -prune -o -name config.h -path '*obj-*' -print | head -1)
check "plugin default agent= is $agent" grep -qF "#define SH_AGENT_PATH \"$agent\"" "$config_h"
check "plugin default engine= is $engine" grep -qF "#define SH_ENGINE_PATH \"$engine\"" "$config_h"
check "the agent loads its PMIx module from $pmixmod" \
    grep -qF "#define SH_PMIX_MODULE_PATH \"$pmixmod\"" "$config_h"

# ---- install -----------------------------------------------------------
echo "== apt-get install $deb"
if apt-get install -y -qq --no-install-recommends "$deb" >"$out/install.log" 2>&1; then
    installed_by_us=1
    ok "apt-get install ./$(basename "$deb")"
else
    tail -20 "$out/install.log"
    die "apt-get install $deb (see $out/install.log)"
fi

# ---- installed layout --------------------------------------------------
listing=$(dpkg-query -L "$pkg")
for f in "$plugin" "$agent" "$engine" "$pmixmod" /usr/sbin/stagehand-keygen \
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
    /usr/share/man/man8/stagehand-keygen.8.gz; do
    text=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$m" 2>"$out/man.err") || true
    if [ -s "$out/man.err" ] || [ "$(wc -l <<<"$text")" -lt 20 ]; then
        bad "man -l $m: $(head -5 "$out/man.err")"
    else
        ok "man -l $m renders ($(wc -l <<<"$text") lines, no warnings)"
    fi
done
text=$(LC_ALL=C.UTF-8 MANWIDTH=200 man -l /usr/share/man/man8/stagehand.8.gz 2>/dev/null)
for p in "$plugin" "$agent" "$engine" "$pmixmod"; do
    check "stagehand(8) names $p" grep -qF "$p" <<<"$text"
done
check "stagehand(8) has no unfilled @...@" test -z "$(grep -E '@[A-Z]+@' <<<"$text" || true)"

# The example configuration: inert (every line a comment), every key of the
# plugin's parser documented and spelled out on the commented plugin line.
conf=/etc/slurm/plugstack.conf.d/stagehand.conf
check "$conf has only comments" test -z "$(grep -vE '^[[:space:]]*(#|$)' "$conf" || true)"
check "$conf names the installed plugin" grep -qE "^#required $plugin allowed_dest=" "$conf"
full=$(grep -E "^#required $plugin .*allow_shared_dst=" "$conf" || true)
keys=(allowed_dest default_dest key_file agent engine port_base port_range fanout
    segment_size pipeline_depth timeout check hash mpi_env on_node_fault
    submit_check verbose allow_shared_dst stall_timeout join_timeout read_ahead dest_dir_mode)
for k in "${keys[@]}"; do
    grep -qF "\"$k\"" "$top/core/common/config.c" || bad "key $k is not in core/common/config.c any more"
    if grep -qE "^# $k " "$conf" && { [ "$k" = mpi_env ] || grep -qE "(^| )$k=" <<<"$full"; }; then
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

# Slurm loads the packaged plugin and shows its options in --help (no daemon
# is needed for --help): a private slurm.conf whose plugstack names it.
hdir=$(mktemp -d)
cat >"$hdir/slurm.conf" <<EOF
ClusterName=pkgtest
SlurmctldHost=localhost
PlugStackConfig=$hdir/plugstack.conf
NodeName=localhost CPUs=1 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES
EOF
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

# ---- on the test cluster -----------------------------------------------
if [ "$cluster" = 1 ]; then
    echo "== test cluster with plugstack.conf naming $plugin"
    # Keep the cluster's shape: "up: 3 nodes (n1 n2 n3), shared=bind".
    mc_args=()
    if status=$("$mc" status 2>/dev/null); then
        mc_was_up=1
        mc_plugin_before=$(eval "$("$mc" env)"; echo "$MINICLUSTER_LOADED_PLUGIN")
        status=$(head -1 <<<"$status")
        if [[ "$status" =~ ^up:\ ([0-9]+)\ nodes.*shared=([a-z]+) ]]; then
            mc_args=(--nodes "${BASH_REMATCH[1]}" --shared "${BASH_REMATCH[2]}")
        fi
    fi
    mc_changed=1
    if ! MINICLUSTER_PLUGIN=$plugin "$mc" up "${mc_args[@]}" >"$out/cluster-up.log" 2>&1; then
        tail -20 "$out/cluster-up.log"
        die "minicluster up with MINICLUSTER_PLUGIN=$plugin (see $out/cluster-up.log)"
    fi
    eval "$("$mc" env)"
    line=$(grep -E '^required ' "$(dirname "$SLURM_CONF")/plugstack.conf" || true)
    check "plugstack.conf loads $plugin" grep -qE "^required $plugin " <<<"$line"
    check "plugstack.conf leaves agent= and engine= at the plugin's defaults" \
        test -z "$(grep -oE ' (agent|engine)=' <<<"$line" || true)"

    user=$MINICLUSTER_USER
    as_user() {
        (cd "$MINICLUSTER_SHARED" && runuser -u "$user" -- env SLURM_CONF="$SLURM_CONF" \
            PATH=/usr/local/bin:/usr/bin:/bin \
            HOME="$(getent passwd "$user" | cut -d: -f6)" "$@")
    }
    read -ra nodes <<<"$MINICLUSTER_NODES"
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
    states=""
    for _ in $(seq 1 50); do
        states=$(sinfo -h -o '%T' | sort -u | tr '\n' ' ')
        [ "$states" = "idle " ] && break
        sleep 0.2
    done
    check "nodes are idle again, none drained ($states)" test "$states" = "idle "
    rm -f "$srcf"
fi
exit 0

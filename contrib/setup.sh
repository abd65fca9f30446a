#!/usr/bin/env bash
# Shared set-up for tests/run.sh, contrib/quickstart.sh and bench/: install the
# Debian packages stagehand needs, then (with --install) build a release and
# install it into $STAGEHAND_PREFIX (default /opt/stagehand), a prefix every
# test-cluster node can see and the test user can execute.
#
#   contrib/setup.sh [--packages-only] [--install] [--stack bookworm|trixie]
#
# --stack trixie builds inside the trixie root of contrib/minicluster/rootfs
# (Slurm 24.11, Open MPI 5, PMIx 5; built first if it is not cached) in
# build-trixie/, and installs into the same prefix as seen from that root,
# which is where `minicluster up --stack trixie` nodes load the plugin from.
# The host's packages are not touched: the root holds every dependency.
# The default, bookworm, is the host's own Debian 12 (build-release/).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${STAGEHAND_PREFIX:-/opt/stagehand}
install=0
stack=bookworm
while [ $# -gt 0 ]; do
    case "$1" in
        --install) install=1 ;;
        --packages-only) install=0 ;;
        --stack) stack=${2:?--stack needs bookworm or trixie}; shift ;;
        --stack=*) stack=${1#*=} ;;
        *) echo "contrib/setup.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
    shift
done
builddir=build-release
case "$stack" in
    bookworm) ;;
    trixie)
        builddir=build-trixie
        # Inside the root (the re-run below) the build goes on as usual.
        if [ "${STAGEHAND_SETUP_IN_ROOT:-}" != "$stack" ]; then
            rootfs="$top/contrib/minicluster/rootfs"
            "$rootfs" build "$stack"
            [ "$install" = 1 ] || exit 0
            mkdir -p "$PREFIX"
            exec "$rootfs" run "$stack" "$top" "$PREFIX" -- \
                env STAGEHAND_SETUP_IN_ROOT="$stack" STAGEHAND_PREFIX="$PREFIX" \
                "$top/contrib/setup.sh" --install --stack "$stack"
        fi
        ;;
    *) echo "contrib/setup.sh: --stack must be bookworm or trixie, got '$stack'" >&2; exit 2 ;;
esac

packages=(meson ninja-build pkg-config gcc libc6-dev
    libslurm-dev slurm-wlm slurmctld slurmd slurm-client munge
    libopenmpi-dev openmpi-bin libpmix-dev libssl-dev libxxhash-dev libjson-c-dev check
    iproute2 util-linux procps attr openssh-server openssh-client sshfs fuse3
    squashfs-tools squashfuse cppcheck clang-tidy shellcheck mmdebstrap python3 python3-fusepy
    skopeo umoci docker-registry apache2-utils)
missing=()
[ "$stack" = bookworm ] || packages=()
for p in "${packages[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "== installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/tmp/stagehand-apt.log 2>&1; then
        tail -20 /tmp/stagehand-apt.log >&2
        echo "contrib/setup.sh: apt-get install failed" >&2
        exit 1
    fi
fi
# Debian starts packaged daemons only where systemd runs; the test cluster
# runs its own private munged, slurmctld and slurmd.

[ "$install" = 1 ] || exit 0
cd "$top"
if [ ! -f "$builddir/build.ninja" ]; then
    rm -rf "$builddir"
    meson setup "$builddir" --prefix="$PREFIX" -Dbuildtype=release \
        -Dslurm_plugindir="$PREFIX/lib/slurm" -Dinstall_tests=true >"$builddir.setup.log" 2>&1 ||
        { cat "$builddir.setup.log" >&2; exit 1; }
    rm -f "$builddir.setup.log"
else # made for another prefix, perhaps (each stack and the benchmark have their own)
    meson configure "$builddir" --prefix="$PREFIX" -Dslurm_plugindir="$PREFIX/lib/slurm" \
        -Dinstall_tests=true >/dev/null
fi
if ! ninja -C "$builddir" >"$builddir/build.out" 2>&1; then
    tail -40 "$builddir/build.out" >&2
    exit 1
fi
meson install -C "$builddir" --quiet >"$builddir/install.out" 2>&1 ||
    { tail -20 "$builddir/install.out" >&2; exit 1; }
echo "== installed stagehand ($stack) into $PREFIX"

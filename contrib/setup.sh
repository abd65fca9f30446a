#!/usr/bin/env bash
# Shared set-up for tests/run.sh, contrib/quickstart.sh and bench/: install the
# Debian packages stagehand needs, then (with --install) build a release and
# install it into $STAGEHAND_PREFIX (default /opt/stagehand), a prefix every
# test-cluster node can see and the test user can execute.
#
#   contrib/setup.sh [--packages-only] [--install]
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${STAGEHAND_PREFIX:-/opt/stagehand}
install=0
for a in "$@"; do
    case "$a" in
        --install) install=1 ;;
        --packages-only) install=0 ;;
        *) echo "contrib/setup.sh: unknown argument '$a'" >&2; exit 2 ;;
    esac
done

packages=(meson ninja-build pkg-config gcc libc6-dev
    libslurm-dev slurm-wlm slurmctld slurmd slurm-client munge
    libopenmpi-dev openmpi-bin libpmix-dev libssl-dev libxxhash-dev check
    iproute2 util-linux procps attr openssh-server openssh-client sshfs fuse3
    squashfs-tools squashfuse cppcheck clang-tidy python3 python3-fusepy)
missing=()
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
if [ ! -f build-release/build.ninja ]; then
    rm -rf build-release
    meson setup build-release --prefix="$PREFIX" -Dbuildtype=release \
        -Dslurm_plugindir="$PREFIX/lib/slurm" -Dinstall_tests=true >build-release.setup.log 2>&1 ||
        { cat build-release.setup.log >&2; exit 1; }
    rm -f build-release.setup.log
fi
if ! ninja -C build-release >build-release/build.out 2>&1; then
    tail -40 build-release/build.out >&2
    exit 1
fi
meson install -C build-release --quiet >build-release/install.out 2>&1 ||
    { tail -20 build-release/install.out >&2; exit 1; }
echo "== installed stagehand into $PREFIX"

#!/usr/bin/env bash
# stagehand quickstart: on a fresh Debian 12 machine (as root), install what is
# needed, build, bring up the local 3-node Slurm test cluster, build a real
# Squashfs image (a minimal Debian root filesystem), and stage it to every
# node with
#     sbatch -N3 --stage-image=/shared/images/rootfs.sqsh:/nvme/images/rootfs.sqsh
# then show that every node holds a byte-identical, readable image, re-submit
# to show the no-op path (each job's output starts with stagehand's summary
# line and the time it took), stage it once more without a destination, into
# the node image cache (cache=/nvme/stagehand-cache in the cluster's
# plugstack line), and leave the cluster up.
#
#   contrib/quickstart.sh [--stack bookworm|trixie] [--nodes K]
#
# --stack trixie runs the cluster on Debian 13's Slurm 24.11, Open MPI 5 and
# PMIx 5 (a root file system built from Debian's mirror and cached), with its
# own prefix /opt/stagehand-trixie, cluster instance "trixie" and shared
# directory /shared-trixie (STAGEHAND_PREFIX, MINICLUSTER_NAME, MINICLUSTER_NET
# and MINICLUSTER_SHARED, when set, name others); the default, bookworm, is the
# host's Debian 12.
# The image is a minimal Debian 12 root filesystem that pyxis/enroot can run
# (mmdebstrap from the host's Debian mirror, built once, then reused).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
MC="$top/contrib/minicluster/minicluster"
nodes=3
stack=bookworm
while [ $# -gt 0 ]; do
    case "$1" in
        --debootstrap) ;; # accepted as before: the image is always a Debian root
        --nodes) nodes=${2:?--nodes needs a number}; shift ;;
        --stack) stack=${2:?--stack needs bookworm or trixie}; shift ;;
        -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "quickstart: unknown argument '$1'" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "quickstart: run as root" >&2; exit 2; }

step() { printf '\n== %s\n' "$*"; }

# shellcheck source=stack-env.sh
source "$top/contrib/stack-env.sh"
# names the caller set win over the stack's defaults (an instance beside the
# suite's own "trixie")
given=(${STAGEHAND_PREFIX:+"STAGEHAND_PREFIX=$STAGEHAND_PREFIX"} ${MINICLUSTER_NAME:+"MINICLUSTER_NAME=$MINICLUSTER_NAME"}
       ${MINICLUSTER_NET:+"MINICLUSTER_NET=$MINICLUSTER_NET"} ${MINICLUSTER_SHARED:+"MINICLUSTER_SHARED=$MINICLUSTER_SHARED"})
stack_env "$stack" || exit 2
[ ${#given[@]} -eq 0 ] || export "${given[@]}"

step "install packages, build ($stack), install into $STAGEHAND_PREFIX"
contrib/setup.sh --install --stack "$stack"

step "bring up the $nodes-node test cluster ($stack)"
cache=/nvme/stagehand-cache
MINICLUSTER_PLUGIN_ARGS="${MINICLUSTER_PLUGIN_ARGS:-} cache=$cache" \
    "$MC" up --nodes "$nodes" --stack "$stack"
eval "$("$MC" env)"
user=$MINICLUSTER_USER
shared=$MINICLUSTER_SHARED
as_user() { (cd "$shared" && runuser -u "$user" -- env SLURM_CONF="$SLURM_CONF" PATH=/usr/bin:/bin "$@"); }

step "build a real Squashfs image in $shared/images"
mkdir -p "$shared/images"
img=$shared/images/rootfs.sqsh
# The image is a container root filesystem for pyxis/enroot: a minimal Debian
# 12 root (mmdebstrap, variant minbase, from the mirror the host's apt uses),
# /dev empty (an unprivileged enroot makes its own), no trace of this host
# (mmdebstrap copies its resolv.conf and hostname in, and writes the mirror
# it used into apt's sources: the image names no host), Squashfs with zstd (the
# nodes' kernel and squashfuse read it). Its recipe is recorded inside it, in
# $stamp; an image of the same recipe is reused, any other is rebuilt.
stamp=etc/stagehand-image
recipe="stagehand quickstart image 2
root: mmdebstrap --variant=minbase bookworm (the host's Debian mirror)
/dev: empty
/etc/resolv.conf, /etc/hostname: empty
apt sources: none
squashfs: -comp zstd -Xcompression-level 3"
if [ -s "$img" ] && [ "$(unsquashfs -cat "$img" "$stamp" 2>/dev/null)" = "$recipe" ]; then
    echo "reusing $img from an earlier run (built by the same recipe; remove it to build a new one)"
else
    work=$(mktemp -d /var/tmp/stagehand-quickstart.XXXXXX)
    mirror=$(contrib/minicluster/rootfs mirror)
    start=$(date +%s)
    if ! mmdebstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/mmdebstrap.log" 2>&1; then
        tail -20 "$work/mmdebstrap.log"
        echo "quickstart: mmdebstrap failed (log: $work/mmdebstrap.log)" >&2
        exit 1
    fi
    find "$work/rootfs/dev" -mindepth 1 -delete
    rm -f "$work/rootfs/etc/resolv.conf" "$work/rootfs/etc/hostname" # (never written through a link)
    touch "$work/rootfs/etc/resolv.conf" "$work/rootfs/etc/hostname"
    rm -f "$work/rootfs/etc/apt/sources.list" "$work/rootfs/etc/apt/sources.list.d/"*
    printf '%s\n' "$recipe" >"$work/rootfs/$stamp"
    mksquashfs "$work/rootfs" "$work/rootfs.sqsh" -noappend -comp zstd -Xcompression-level 3 -quiet -no-progress
    chmod 0644 "$work/rootfs.sqsh"
    mv "$work/rootfs.sqsh" "$img"
    rm -rf "$work"
    echo "built $img in $(($(date +%s) - start)) s"
fi
size=$(stat -c %s "$img")
sum=$(sha256sum "$img" | cut -d' ' -f1)
echo "image: $img, $size bytes, sha256 $sum"
unsquashfs -s "$img" | sed -n '1,3p'

cat >"$shared/quickstart-job.sh" <<'EOF'
#!/bin/bash
# Runs after stagehand staged the image on every node of the job.
echo "job $SLURM_JOB_ID: STAGEHAND_IMAGE=$STAGEHAND_IMAGE"
srun -N"$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \
    sh -c 'echo "$(hostname): $(sha256sum "$STAGEHAND_IMAGE" | cut -c1-16)... $(unsquashfs -l "$STAGEHAND_IMAGE" | wc -l) paths"'
EOF
chmod 0755 "$shared/quickstart-job.sh"

run_job() { # label [image]
    local out=$shared/quickstart-$1.out
    rm -f "$out"
    as_user sbatch --wait -N"$nodes" -o "$out" --stage-verbose \
        --stage-image="${2:-$img:/nvme/images/rootfs.sqsh}" "$shared/quickstart-job.sh" >/dev/null
    echo "job output ($1; the first line is stagehand's summary with the staging time):"
    sed 's/^/    /' "$out"
}

step "sbatch -N$nodes --stage-verbose --stage-image=$img:/nvme/images/rootfs.sqsh (first run: copies)"
run_job first

step "check every node's copy from inside its namespace"
for n in $MINICLUSTER_NODES; do
    got=$("$MC" exec "$n" sha256sum /nvme/images/rootfs.sqsh | cut -d' ' -f1)
    entries=$("$MC" exec "$n" unsquashfs -l /nvme/images/rootfs.sqsh | wc -l)
    if [ "$got" = "$sum" ]; then
        echo "$n: /nvme/images/rootfs.sqsh byte-identical (sha256 ${got:0:16}...), $entries paths listed by unsquashfs"
    else
        echo "$n: MISMATCH ($got)" >&2
        exit 1
    fi
done

step "re-submit the same job (no-op: every node is current)"
run_job again
echo "(each node that is current is done on its own, without waiting for the others: the summary above is n1's, the"
echo " batch node's; the other nodes' lines are in $MINICLUSTER_STATE/log/slurmd.nX.log)"

step "sbatch -N$nodes --stage-image=$img (no destination: the node image cache, $cache)"
run_job cache "$img"
echo "the cache on n1 (stagehand-cache(8); one read-only entry per content, shared by every job whose user can read SRC):"
"$MC" exec n1 -- "${STAGEHAND_PREFIX:-/opt/stagehand}/sbin/stagehand-cache" --cache "$cache" list | sed 's/^/    /'

step "done"
cat <<EOF
The cluster is still up. Try it yourself:
$([ "$stack" = bookworm ] || echo "    export MINICLUSTER_NAME=$MINICLUSTER_NAME   # the $stack cluster's instance")
    eval "\$($MC env)"
    cd $shared     # the job's output file goes to the submit directory
    runuser -u $user -- env SLURM_CONF=\$SLURM_CONF sbatch --wait -N$nodes -o try.out \\
        --stage-verbose --stage-image=$img:/nvme/images/try.sqsh --wrap 'srun hostname'
    cat try.out    # --stage-verbose: what was copied, and how fast (run it twice: a no-op)
    $MC exec n1 -- ls -l /nvme/images
The manual (installed under ${STAGEHAND_PREFIX:-/opt/stagehand}, outside man's default path):
    man -M ${STAGEHAND_PREFIX:-/opt/stagehand}/share/man stagehand
Slurm logs: $MINICLUSTER_STATE/log/. Bring it down with:
    $([ "$stack" = bookworm ] || echo "MINICLUSTER_NAME=$MINICLUSTER_NAME ")$MC down
EOF

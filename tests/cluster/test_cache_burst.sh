#!/usr/bin/env bash
# Issue 34 item 3: a burst of warm jobs on one node. One job caches SRC on
# n1 (cache=DIR); then B jobs of one node, one job array on n1, all stage
# the same SRC without DST at once: every one completes, its summary says
# "current" (nothing copied), its image is the entry's inode with SRC's
# bytes, none waited for another (no fill lock is taken for a cached
# image), and after their epilogs the entry has one link again and no fill
# lock file is left. B is 20 (at most n1's CPUs); under --full
# (STAGEHAND_TEST_FULL=1) 100, when n1 has that many CPUs (minicluster up
# --cpus; bench/cache.sh measures the same burst's start times).
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

node=${MINICLUSTER_NODES%% *}
cache=/nvme/stagehand-cache
tok=cburst$$
tag=cache-burst.$$
dir=$MINICLUSTER_SHARED/$tok
cpus=$(sinfo -h -N -n "$node" -o %c | head -1)
want_b=20
[ "${STAGEHAND_TEST_FULL:-0}" = 1 ] && want_b=100
b=$want_b
[ "$cpus" -ge "$b" ] || b=$cpus
[ "$b" -ge 2 ] || skip "$node has $cpus CPU(s)"
plugstack_save
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    plugstack_restore
    rm -rf "$dir"
    on_node "$node" rm -rf "$cache"
}
trap cleanup EXIT

mkdir -p "$dir/out"
chown -R "$MINICLUSTER_USER" "$dir"
src=$dir/img.sqsh
as_user sh -c "head -c 2000000 /dev/urandom >'$src' && chmod 0644 '$src'" || fail "cannot create $src"
want=$(sha256sum <"$src" | cut -d' ' -f1)
on_node "$node" rm -rf "$cache"
plugstack_add cache=$cache verbose=yes

# the entry
j0=$(as_user sbatch --parsable -J "$tag" -N1 -w "$node" -o "$dir/out/warm-up" \
         --stage-image="$src" --wrap true) || fail "sbatch: $j0"
st=$(wait_job_end "$j0" 120)
[ "$st" = COMPLETED ] || fail "warm-up job $j0 ended $st: $(cat "$dir/out/warm-up")"
key=$(on_node "$node" ls "$cache/entries")
ino=$(on_node "$node" stat -c %i "$cache/entries/$key")

# the burst
off=$(log_offset "$node")
t0=$SECONDS
# shellcheck disable=SC2016  # the job's own expansions
arr=$(as_user sbatch --parsable -J "$tag" -N1 -w "$node" -o "$dir/out/%A_%a" --array=1-"$b" \
          --stage-image="$src" \
          --wrap 'echo "img $(stat -c %i "$STAGEHAND_IMAGE") $(sha256sum <"$STAGEHAND_IMAGE" | cut -d" " -f1)"') ||
    fail "sbatch: $arr"
for _ in $(seq 1 900); do
    [ -z "$(squeue -h -j "$arr" -o %i 2>/dev/null)" ] && break
    sleep 0.2
done
secs=$((SECONDS - t0))
[ -z "$(squeue -h -j "$arr" -o %i 2>/dev/null)" ] || fail "the burst of $b jobs is not done after $secs s"
bad=$(sacct -n -X -P -j "$arr" -o JobID,State 2>/dev/null | grep -v '|COMPLETED$' || true)
if [ -z "$(sacct -n -X -P -j "$arr" -o JobID 2>/dev/null | head -1)" ]; then
    # no accounting on this cluster: the outputs decide
    bad=""
fi
[ -z "$bad" ] || fail "jobs of the burst did not complete: $bad"
n_out=$(find "$dir/out" -name "${arr}_*" | wc -l)
[ "$n_out" = "$b" ] || fail "$n_out outputs of $b jobs"
for f in "$dir/out/${arr}"_*; do
    grep -qx "img $ino $want" "$f" || fail "$(basename "$f"): not the entry's inode $ino with SRC's bytes: $(cat "$f")"
    grep -q "stagehand: $cache/job/.*/img.sqsh: current on" "$f" || fail "$(basename "$f"): not current: $(cat "$f")"
    grep -q "[1-9] copied" "$f" && fail "$(basename "$f") copied: $(cat "$f")"
done
log_since "$node" "$off" | grep -q "waiting for job .*node image cache" &&
    fail "a warm job waited: $(log_since "$node" "$off" | grep "waiting for job" | head -3)"
for _ in $(seq 1 100); do
    [ "$(on_node "$node" stat -c %h "$cache/entries/$key")" = 1 ] && break
    sleep 0.2
done
links=$(on_node "$node" stat -c %h "$cache/entries/$key")
[ "$links" = 1 ] || fail "the entry has $links links after the burst's epilogs"
left=$(on_node "$node" sh -c "ls -A '$cache/entries' | grep '^\\.' || true")
[ -z "$left" ] || fail "left in $cache/entries: $left"
assert_no_drain
note=""
[ "$b" = "$want_b" ] || note=" ($node has $cpus CPUs, not $want_b)"
echo "PASS: $b warm jobs at once on $node$note all completed in $secs s, each current on the entry's inode, none waited, one link left"

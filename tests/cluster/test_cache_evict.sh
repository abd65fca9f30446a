#!/usr/bin/env bash
# Issue 34 item 5: eviction from the node image cache (cache=) by cache_max=,
# its pre-check, and `stagehand-cache prune`. With cache_max=5M:
#  - image H (1.2 MB) is staged by a job that keeps running (its entry is
#    the least recently used one and has a job's link), then A1 and A2
#    (1.2 MB each, the sizes differ by a byte to tell the entries apart
#    without reading them: a read is a use) by jobs that end;
#  - staging B (2.0 MB) would bring the entries to 5.6 MB: on every node
#    A1, the least recently used unused entry, is evicted and nothing else
#    (H is older but held); B is copied, byte-identical, and published;
#  - staging C (4.2 MB) cannot fit even with every unused entry evicted
#    (H's 1.2 MB held + 4.2 MB > 5 MiB): the job fails before any copy, its
#    message names C, its size, free + evictable, the bytes in use by
#    running jobs and cache_max; nothing is evicted for it, no node drains;
#  - `prune --to P` on a node filled to just above P % evicts unused
#    entries least recently used first until under P, names each, exit 0;
#    `prune --to 0` evicts every unused entry, keeps H, exits 1;
#  - a node alone that cannot fit image D (an entry held there) refuses it
#    through its agent's vote: every node fails the job at once, naming
#    that node;
#  - nothing under a destination or entry name is partial: every entry left
#    holds one source's bytes and its name's size, no temp file anywhere.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
cache=/nvme/stagehand-cache
tok=scevict$$
tag=cache-evict.$$
dir=$MINICLUSTER_SHARED/$tok
out=$MINICLUSTER_SHARED/$tok.out
outh=$MINICLUSTER_SHARED/$tok.h.out
release=$dir/release
filler=/nvme/$tok.filler
tool=$STAGEHAND_PREFIX/sbin/stagehand-cache
[ -x "$tool" ] || tool=/usr/sbin/stagehand-cache
n1=$(echo "$MINICLUSTER_NODES" | cut -d' ' -f1)
n2=$(echo "$MINICLUSTER_NODES" | cut -d' ' -f2)
if [ -z "$n2" ] || [ "$n2" = "$n1" ]; then skip "needs 2 nodes"; fi
plugstack_save
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    plugstack_restore
    rm -rf "$dir" "$out" "$outh"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$cache" "$filler" "/nvme/$tok.hold"; done
}
trap cleanup EXIT

mkdir -p "$dir"
chown "$MINICLUSTER_USER" "$dir"
declare -A size=([H]=1200000 [A1]=1200001 [A2]=1200002 [B]=2000000 [C]=4200000)
declare -A sha
for i in H A1 A2 B C; do
    as_user sh -c "head -c ${size[$i]} /dev/urandom >'$dir/$i.sqsh' && chmod 0644 '$dir/$i.sqsh'" ||
        fail "cannot create $dir/$i.sqsh"
    sha[$i]=$(sha256sum <"$dir/$i.sqsh" | cut -d' ' -f1)
done
for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$cache"; done
plugstack_add cache=$cache cache_max=5M verbose=yes

# The entry of image @2 on node @1 ("" when it has none): its key, found by
# the size its name ends in (the sizes differ). Never read an entry's bytes
# before the evictions: a read sets its atime, its last use.
entry_of() {
    on_node "$1" sh -c "ls '$cache/entries' 2>/dev/null | grep -- '-${size[$2]}\$'; true"
}
# Every node has an entry of each image named in @1 and none of those in @2.
assert_entries() { # "present..." "absent..."
    local n i
    for n in $MINICLUSTER_NODES; do
        for i in $1; do
            [ -n "$(entry_of "$n" "$i")" ] || fail "$n: no entry of $i: $(on_node "$n" ls -la "$cache/entries")"
        done
        for i in $2; do
            [ -z "$(entry_of "$n" "$i")" ] || fail "$n: $i's entry is still there: $(on_node "$n" ls -la "$cache/entries")"
        done
    done
}
probe="srun -N$k --ntasks-per-node=1 sh -c 'echo \"\$(hostname) \$STAGEHAND_IMAGE \$(sha256sum <\"\$STAGEHAND_IMAGE\" | cut -d\" \" -f1)\"'"
# Stage image @1 in a job that ends: COMPLETED, "copied" on every node, the
# job's image holds @1's bytes on every node.
stage_ok() {
    stage_job_ends COMPLETED 120 "$dir/$1.sqsh" "$probe"
    grep -q "stagehand: .*: $k copied, 0 current of $k nodes" "$out" ||
        fail "job $job_id ($1)'s summary: $(cat "$out")"
    [ "$(grep -c " $cache/job/$job_id/$1.sqsh ${sha[$1]}\$" "$out")" = "$k" ] ||
        fail "job $job_id ($1)'s image on the nodes: $(cat "$out")"
}

# 1. H, held by a running job; then A1 and A2 by jobs that end
jh=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$outh" --stage-image="$dir/H.sqsh" \
    --wrap "$probe; while [ ! -e '$release' ]; do sleep 0.2; done") || fail "sbatch: $jh"
for _ in $(seq 1 240); do [ "$(grep -c " ${sha[H]}\$" "$outh" 2>/dev/null)" = "$k" ] && break; sleep 0.25; done
[ "$(grep -c " ${sha[H]}\$" "$outh" 2>/dev/null)" = "$k" ] || fail "job $jh (H): $(cat "$outh" 2>/dev/null)"
stage_ok A1
stage_ok A2
assert_entries "H A1 A2" ""
for n in $MINICLUSTER_NODES; do
    [ "$(on_node "$n" stat -c %h "$cache/entries/$(entry_of "$n" H)")" = 2 ] || fail "$n: H's entry is not held by job $jh"
done

# 2. B: A1 (least recently used and unused) goes, H (older, held) and A2 stay
stage_ok B
assert_entries "H A2 B" "A1"

# 3. C cannot fit even after eviction: a user's failure before any copy
lo=$(log_offset "$n1")
stage_job_ends FAILED 120 "$dir/C.sqsh"
grep -q script-ran "$out" && fail "job $job_id (C)'s script ran: $(cat "$out")"
msg=$(cat "$out")
for w in "$dir/C.sqsh: 4.01 MiB (4200000 bytes) cannot fit in the node image cache $cache" "${MINICLUSTER_NODES// /, }: " \
         "free " "+ evictable 3.05 MiB" "in use by running jobs 1.14 MiB" "limit cache_max=5.00 MiB (5242880 bytes)"; do
    grep -qF -- "$w" <<<"$msg" || fail "job $job_id (C)'s message lacks '$w': $msg"
done
assert_no_drain
assert_entries "H A2 B" "A1 C"
log_since "$n1" "$lo" | grep -q "evicted cache entry" && fail "$n1: evicted for C: $(log_since "$n1" "$lo" | grep evicted)"
for n in $MINICLUSTER_NODES; do
    left=$(on_node "$n" find "$cache" -type f -size "${size[C]}c")
    [ -z "$left" ] || fail "$n: a file of C's size in the cache: $left"
done

# 4. prune --to P on n1, filled to just above P %: LRU first (A2, then B)
# until under P, exit 0; H is held and stays
pct=1
read -r blocks bfree bs < <(on_node "$n1" stat -f -c '%b %f %S' /nvme)
target=$((blocks * bs / 100)) # 1 %, rounded down as prune does
used=$(((blocks - bfree) * bs))
fill=$((target - used + 500000))
[ "$fill" -gt 0 ] || fail "$n1: /nvme is above $pct % already: $used bytes in use"
on_node "$n1" sh -c "head -c $fill /dev/zero >'$filler'" || fail "$n1: cannot write $filler"
read -r blocks bfree bs < <(on_node "$n1" stat -f -c '%b %f %S' /nvme)
over=$(((blocks - bfree) * bs - target))
if [ "$over" -le 0 ]; then fail "$n1: the filler did not go over $pct %: $over"
elif [ "$over" -le "${size[A2]}" ]; then want="A2" keep="H B"
elif [ "$over" -le $((size[A2] + size[B])) ]; then want="A2 B" keep="H"
else fail "$n1: the filler went $over bytes over $pct %"; fi
keys=""
for i in $want; do keys+="$(entry_of "$n1" "$i") "; done
msg=$(on_node "$n1" "$tool" --cache "$cache" prune --to "$pct")
rc=$?
[ "$rc" = 0 ] || fail "prune --to $pct ($over bytes over): exit $rc: $msg"
got=$(grep -o '^[^ ]*: removed (' <<<"$msg" | cut -d: -f1 | tr '\n' ' ')
[ "$got" = "$keys" ] || fail "prune --to $pct ($over bytes over) removed '$got', want '$keys' (least recently used first): $msg"
for i in $keep; do [ -n "$(entry_of "$n1" "$i")" ] || fail "prune --to $pct took $i: $msg"; done
for i in $want; do [ -z "$(entry_of "$n1" "$i")" ] || fail "prune --to $pct left $i: $msg"; done
on_node "$n1" rm -f "$filler"

# 5. prune --to 0 on n2: every unused entry goes, named; H stays; exit 1
keys="$(entry_of "$n2" A2) $(entry_of "$n2" B) "
msg=$(on_node "$n2" "$tool" --cache "$cache" prune --to 0)
rc=$?
[ "$rc" = 1 ] || fail "prune --to 0 with H held: exit $rc: $msg"
got=$(grep -o '^[^ ]*: removed (' <<<"$msg" | cut -d: -f1 | tr '\n' ' ')
[ "$got" = "$keys" ] || fail "prune --to 0 removed '$got', want '$keys': $msg"
grep -q "still above 0%" <<<"$msg" || fail "prune --to 0: $msg"
[ "$(on_node "$n2" ls "$cache/entries")" = "$(entry_of "$n2" H)" ] ||
    fail "$n2: after prune --to 0: $(on_node "$n2" ls -la "$cache/entries")"

touch "$release"
st=$(wait_job_end "$jh" 120)
[ "$st" = COMPLETED ] || fail "job $jh (H) ended $st: $(cat "$outh")"

# 7. one node alone cannot fit D: an entry of 4 MB held there (a planted
# link) + D's 2.5 MB > 5 MiB. Its agent votes the refusal, so every node
# fails the job at once (not after join_timeout, 60 s), naming that node.
dsize=2500000
as_user sh -c "head -c $dsize /dev/urandom >'$dir/D.sqsh' && chmod 0644 '$dir/D.sqsh'" || fail "cannot create D"
held=$(printf '%032d' 0)-4000000
on_node "$n2" sh -c "head -c 4000000 /dev/zero >'$cache/entries/$held' && chmod 0444 '$cache/entries/$held' && ln '$cache/entries/$held' '/nvme/$tok.hold'" ||
    fail "$n2: cannot plant a held entry"
t0=$SECONDS
stage_job_ends FAILED 120 "$dir/D.sqsh"
took=$((SECONDS - t0))
on_node "$n2" rm -f "$cache/entries/$held" "/nvme/$tok.hold"
grep -q script-ran "$out" && fail "job $job_id (D)'s script ran: $(cat "$out")"
grep -qF ": $n2: $dir/D.sqsh: 2.38 MiB ($dsize bytes) cannot fit in the node image cache $cache" "$out" ||
    fail "job $job_id (D)'s message: $(cat "$out")"
grep -qF "in use by running jobs 3.81 MiB, limit cache_max=" "$out" || fail "job $job_id (D)'s message: $(cat "$out")"
[ "$took" -lt 50 ] || fail "job $job_id (D) took $took s to fail: the other nodes waited for $n2"
assert_no_drain
for n in $MINICLUSTER_NODES; do
    left=$(on_node "$n" find "$cache" -type f -size "${dsize}c")
    [ -z "$left" ] || fail "$n: a file of D's size in the cache: $left"
done

# 6. nothing partial: each entry holds a source's bytes and its name's size;
# no temp file in the cache
for n in $MINICLUSTER_NODES; do
    bad=$(on_node "$n" sh -c "cd '$cache/entries' && for e in * .[!.]*; do
        [ -e \"\$e\" ] || continue
        s=\$(sha256sum <\"\$e\" | cut -d' ' -f1)
        case ' ${sha[*]} ' in *\" \$s \"*) ;; *) echo \"\$e: not a source's bytes\"; continue ;; esac
        [ \"\${e##*-}\" = \"\$(stat -c %s \"\$e\")\" ] || echo \"\$e: size\"
    done")
    [ -z "$bad" ] || fail "$n: $bad"
    left=$(on_node "$n" find "$cache" -name '*.tmp' -o -name '.stage.*' -o -name '.evict-*')
    [ -z "$left" ] || fail "$n: temp files: $left"
done
assert_no_drain
echo "PASS: cache_max evicts the LRU unused entry (A1) on every node, never the held one (H); B copied and published; C refused before any copy naming its size, free + evictable, held and the limit; prune --to $pct ($over bytes over) removed $want, prune --to 0 every unused entry with exit 1; one node refusing D failed the job on all in $took s"

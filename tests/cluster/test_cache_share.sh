#!/usr/bin/env bash
# Issue 34 items 1-2: the node image cache (cache=DIR) shared safely.
# SRC lies in a directory the first user ($MINICLUSTER_USER) owns and the
# second ($MINICLUSTER_OTHER_USER) may enter through its group; the third
# ($MINICLUSTER_THIRD_USER) may not.
#  - the first user's job stages SRC without DST: "copied", STAGEHAND_IMAGE
#    is the job's link of a root-owned 0444 entry with SRC's bytes;
#  - the second user's job: "current", the same inode on every node (one
#    file on disk, two links while both jobs run);
#  - the third user's job (submit_check=no, so the node decides) is refused
#    with the reason, and the third user reads no byte of the entry by any
#    path: not the entry, not the cache's directories, not the running jobs'
#    links;
#  - two jobs of two users staging a new SRC into the cache at once: one
#    entry per node, both succeed and see the same inode;
#  - the epilogs drop the jobs' links: the entries stay with one link;
#  - a reference of a job no longer on the node is dropped by the next
#    staging there;
#  - a second source of the same bytes: its first job copies and joins the
#    entry (same inode, the entry records both sources), its next job (the
#    other user) is current without a copy.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
other=$MINICLUSTER_OTHER_USER
third=$MINICLUSTER_THIRD_USER
id -u "$other" >/dev/null 2>&1 || skip "no second user $other on this cluster"
id -u "$third" >/dev/null 2>&1 || skip "no third user $third on this cluster (minicluster up)"
cache=/nvme/stagehand-cache
tok=scache$$
tag=cache-share.$$
dir=$MINICLUSTER_SHARED/$tok
src=$dir/img.sqsh
src2=$dir/img2.sqsh
plugstack_save
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    plugstack_restore
    rm -rf "$dir" "$MINICLUSTER_SHARED/$tok".*.out
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$cache"; done
}
trap cleanup EXIT

mkdir -p "$dir"
chown "$MINICLUSTER_USER:$(id -gn "$other")" "$dir"
chmod 0750 "$dir"
as_user sh -c "head -c 3000000 /dev/urandom >'$src' && head -c 2000000 /dev/urandom >'$src2' && chmod 0644 '$src' '$src2'" ||
    fail "cannot create the sources"
want=$(sha256sum <"$src" | cut -d' ' -f1)
want2=$(sha256sum <"$src2" | cut -d' ' -f1)
as_other test -r "$src" || fail "$other cannot read $src: the test's set-up"
! as_third test -r "$src" || fail "$third can read $src: the test's set-up"
for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$cache"; done
plugstack_add cache=$cache verbose=yes submit_check=no

# A job that prints, on every node, its image's path, inode, links, owner,
# mode and digest, then (with $1) waits for the file $1 to exist.
probe() {
    printf '%s' "srun -N$k --ntasks-per-node=1 sh -c 'echo \"\$(hostname) \$STAGEHAND_IMAGE \$(stat -c \"%i %h %U %a\" \"\$STAGEHAND_IMAGE\") \$(sha256sum <\"\$STAGEHAND_IMAGE\" | cut -d\" \" -f1)\"'${1:+; while [ ! -e $1 ]; do sleep 0.2; done}"
}
submit() { # user out image script
    local who=$1
    shift
    run_as "$who" sbatch --parsable -J "$tag" -N"$k" -o "$1" --stage-image="$2" --wrap "$3"
}
# Wait (up to 60 s) until the files @2... together hold $k lines that end
# in digest @1, one per node.
wait_digests() { # digest file...
    local d=$1 got
    shift
    for _ in $(seq 1 240); do
        got=$(cat "$@" 2>/dev/null | grep -c " $d\$")
        [ "$got" = $((k * $#)) ] && return 0
        sleep 0.25
    done
    return 1
}
# Each node's inode of the image in output file @1 (lines of probe).
inode_on() { awk -v n="$1" '$1 == n { print $3 }' "$2"; }
release=$dir/release
out1=$MINICLUSTER_SHARED/$tok.1.out
out2=$MINICLUSTER_SHARED/$tok.2.out
out3=$MINICLUSTER_SHARED/$tok.3.out

# 1. the first user copies
j1=$(submit "$MINICLUSTER_USER" "$out1" "$src" "$(probe "$release")") || fail "sbatch: $j1"
wait_digests "$want" "$out1" || fail "job $j1: $(cat "$out1" 2>/dev/null)"
grep -q "stagehand: .*: $k copied, 0 current of $k nodes" "$out1" || fail "job $j1's summary: $(cat "$out1")"
grep " $want\$" "$out1" | grep -qv "$cache/job/$j1/img.sqsh [0-9]* 2 root 444 " &&
    fail "job $j1's image is not its link of a root-owned 0444 entry: $(cat "$out1")"

# 2. the second user shares it: current, the same inode
j2=$(submit "$other" "$out2" "$src" "$(probe "$release")") || fail "sbatch: $j2"
wait_digests "$want" "$out2" || fail "job $j2: $(cat "$out2" 2>/dev/null)"
grep -q "stagehand: $cache/job/$j2/img.sqsh: current on" "$out2" || fail "job $j2's summary: $(cat "$out2")"
grep -q "[0-9] copied" "$out2" && fail "job $j2 copied: $(cat "$out2")"
for n in $MINICLUSTER_NODES; do
    i1=$(inode_on "$n" "$out1")
    i2=$(awk -v n="$n" '$1 == n { print $3 " " $4 }' "$out2")
    if [ -z "$i1" ] || [ "$i2" != "$i1 3" ]; then
        fail "$n: job $j1's inode $i1, job $j2's '$i2' (want the same, 3 links)"
    fi
    [ "$(on_node "$n" sh -c "ls '$cache/entries' | wc -l")" = 1 ] || fail "$n: not one entry: $(on_node "$n" ls -la "$cache/entries")"
done

# 3. the third user: refused, and no path to the bytes while both jobs run
j3=$(submit "$third" "$out3" "$src" "echo script-ran") || fail "sbatch: $j3"
st=$(wait_job_end "$j3" 120)
[ "$st" = FAILED ] || fail "job $j3 of $third ended $st: $(cat "$out3" 2>/dev/null)"
grep -q "script-ran" "$out3" && fail "job $j3's script ran"
grep -qi "permission denied\|cannot read\|not readable" "$out3" || fail "job $j3's message: $(cat "$out3")"
n1=$(echo "$MINICLUSTER_NODES" | cut -d' ' -f1)
key=$(on_node "$n1" ls "$cache/entries")
for path in "$cache/entries/$key" "$cache/job/$j1/img.sqsh" "$cache/job/$j2/img.sqsh" \
            "$cache/job/$j3/img.sqsh"; do
    on_node_as_third "$n1" head -c 1 "$path" >/dev/null 2>&1 && fail "$third read $path"
done
for d in "$cache" "$cache/entries" "$cache/job" "$cache/job/$j1" "$cache/job/$j2"; do
    on_node_as_third "$n1" ls "$d" >/dev/null 2>&1 && fail "$third listed $d"
done
# nor the second user another job's link (its own is through its directory)
on_node_as_other "$n1" head -c 1 "$cache/job/$j1/img.sqsh" >/dev/null 2>&1 &&
    fail "$other read job $j1's link"
touch "$release"
for j in $j1 $j2; do
    st=$(wait_job_end "$j" 120)
    [ "$st" = COMPLETED ] || fail "job $j ended $st"
done
rm -f "$release"
for n in $MINICLUSTER_NODES; do
    links=$(on_node "$n" stat -c %h "$cache/entries/$key")
    [ "$links" = 1 ] || fail "$n: entry $key has $links links after the jobs' epilogs"
    [ "$(on_node "$n" sh -c "sha256sum <'$cache/entries/$key' | cut -d' ' -f1")" = "$want" ] ||
        fail "$n: the entry's bytes are not SRC's"
done

out=$MINICLUSTER_SHARED/$tok.5.out

# 4. two users stage a new SRC at once: one copy per node, both succeed
outa=$MINICLUSTER_SHARED/$tok.a.out
outb=$MINICLUSTER_SHARED/$tok.b.out
ja=$(submit "$MINICLUSTER_USER" "$outa" "$src2" "$(probe "$release")") || fail "sbatch: $ja"
jb=$(submit "$other" "$outb" "$src2" "$(probe "$release")") || fail "sbatch: $jb"
wait_digests "$want2" "$outa" "$outb" ||
    fail "concurrent jobs $ja, $jb: $(cat "$outa" "$outb" 2>/dev/null)"
grep -c " $want2\$" "$outa" "$outb" | grep -qv ":$k\$" &&
    fail "concurrent jobs $ja, $jb: $(cat "$outa" "$outb" 2>/dev/null)"
for n in $MINICLUSTER_NODES; do
    ia=$(inode_on "$n" "$outa")
    ib=$(inode_on "$n" "$outb")
    if [ -z "$ia" ] || [ "$ia" != "$ib" ]; then
        fail "$n: jobs $ja and $jb see inodes $ia and $ib"
    fi
    [ "$(on_node "$n" sh -c "ls '$cache/entries' | wc -l")" = 2 ] || fail "$n: entries: $(on_node "$n" ls -la "$cache/entries")"
done
touch "$release"
for j in $ja $jb; do
    st=$(wait_job_end "$j" 120)
    [ "$st" = COMPLETED ] || fail "job $j ended $st: $(cat "$outa" "$outb")"
done

# 5. a reference of a job that no longer exists on the node (its epilog never
# ran: a crash with the cache on a persistent disk) is dropped by the next
# staging there
ghost=4000000000
for n in $MINICLUSTER_NODES; do
    on_node "$n" sh -c "mkdir -p '$cache/job/$ghost' && ln '$cache/entries/$key' '$cache/job/$ghost/img.sqsh' && chown '$MINICLUSTER_USER' '$cache/job/$ghost'" ||
        fail "$n: cannot plant a dead job's reference"
done
[ "$(on_node "$n1" stat -c %h "$cache/entries/$key")" = 2 ] || fail "the planted reference did not take"
stage_job_ends COMPLETED 120 "$src"
for n in $MINICLUSTER_NODES; do
    on_node "$n" test -e "$cache/job/$ghost" && fail "$n: the dead job's reference stays"
    links=$(on_node "$n" stat -c %h "$cache/entries/$key")
    [ "$links" = 1 ] || fail "$n: entry $key has $links links"
done
# 6. a second source of the same bytes (issue 34): its first job copies, and
# the adoption links the entry that holds that content and adds the source
# to it; the next job of that source (another user) finds it current, no
# copy, the same inode; list shows both sources
copy=$dir/img-copy.sqsh
tool=$STAGEHAND_PREFIX/sbin/stagehand-cache
[ -x "$tool" ] || tool=/usr/sbin/stagehand-cache
as_user cp "$src" "$copy" || fail "cannot copy $src"
outc=$MINICLUSTER_SHARED/$tok.c.out
outd=$MINICLUSTER_SHARED/$tok.d.out
jc=$(submit "$MINICLUSTER_USER" "$outc" "$copy" "$(probe)") || fail "sbatch: $jc"
st=$(wait_job_end "$jc" 120)
[ "$st" = COMPLETED ] || fail "job $jc ($copy) ended $st: $(cat "$outc" 2>/dev/null)"
grep -q "stagehand: .*: $k copied, 0 current of $k nodes" "$outc" || fail "job $jc's summary: $(cat "$outc")"
jd=$(submit "$other" "$outd" "$copy" "$(probe)") || fail "sbatch: $jd"
st=$(wait_job_end "$jd" 120)
[ "$st" = COMPLETED ] || fail "job $jd ($copy) ended $st: $(cat "$outd" 2>/dev/null)"
grep -q "stagehand: $cache/job/$jd/img-copy.sqsh: current on" "$outd" ||
    fail "job $jd of the second source's second job is not current: $(cat "$outd")"
grep -q "[0-9] copied" "$outd" && fail "job $jd copied the second source again: $(cat "$outd")"
[ "$(grep -c " $want\$" "$outd")" = "$k" ] || fail "job $jd's image: $(cat "$outd")"
for n in $MINICLUSTER_NODES; do
    ie=$(on_node "$n" stat -c %i "$cache/entries/$key")
    for o in "$outc" "$outd"; do
        [ "$(inode_on "$n" "$o")" = "$ie" ] || fail "$n: $o's inode is not entry $key's ($ie): $(cat "$o")"
    done
    [ "$(on_node "$n" sh -c "ls '$cache/entries' | wc -l")" = 2 ] || fail "$n: entries: $(on_node "$n" ls -la "$cache/entries")"
done
line=$(on_node "$n1" "$tool" --cache "$cache" list | grep "^$key ")
case "$line" in
*" $src,$copy") ;;
*) fail "list does not show both sources of $key: '$line'" ;;
esac
on_node "$n1" "$tool" --cache "$cache" list --json |
    python3 -c "import json,sys; e=[x for x in json.load(sys.stdin) if x['key']=='$key'][0]; sys.exit(e['sources']!=['$src','$copy'])" ||
    fail "list --json does not give both sources of $key"
echo "PASS: two users share one entry per node (copied, then current; one inode), the third is refused and reads nothing, two concurrent stagings make one entry, a dead job's reference is dropped, a second source of the same bytes joins the entry and is then current"

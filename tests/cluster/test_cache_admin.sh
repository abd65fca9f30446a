#!/usr/bin/env bash
# Issue 34 items 6-7: stagehand-cache on a node. A job stages an image into
# the cache (cache=) and holds it: `list` and `list --json` show the entry
# with its size, source, the job and its user; `remove` keeps the entry while
# the job holds it and names the job; bad arguments get exit 2 and a message.
# After the job: a byte flipped in the entry is found by `verify`, which
# removes it and says so, and the next job copies the image again (its
# summary says copied) with the right bytes; `remove SRC` then removes it.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
cache=/nvme/stagehand-cache
tok=scadm$$
tag=cache-admin.$$
src=$MINICLUSTER_SHARED/$tok.img
out=$MINICLUSTER_SHARED/$tok.out
tool=$STAGEHAND_PREFIX/sbin/stagehand-cache
[ -x "$tool" ] || tool=/usr/sbin/stagehand-cache
n1=$(echo "$MINICLUSTER_NODES" | cut -d' ' -f1)
plugstack_save
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    plugstack_restore
    rm -f "$src" "$out" "$src.release"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$cache"; done
}
trap cleanup EXIT
adm() { on_node "$n1" "$tool" --cache "$cache" "$@"; }

for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$cache"; done
as_user sh -c "head -c 2500000 /dev/urandom >'$src' && chmod 0644 '$src'" || fail "cannot create $src"
want=$(sha256sum <"$src" | cut -d' ' -f1)
plugstack_add cache=$cache verbose=yes

job_id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src" \
    --wrap "echo staged; while [ ! -e '$src.release' ]; do sleep 0.2; done") || fail "sbatch: $job_id"
for _ in $(seq 1 240); do grep -q staged "$out" 2>/dev/null && break; sleep 0.25; done
grep -q staged "$out" || fail "job $job_id: $(cat "$out" 2>/dev/null)"
listing=$(adm list) || fail "list: $listing"
line=$(grep " 2500000 " <<<"$listing") || fail "list has no entry of 2500000 bytes: $listing"
for w in "$src" "$job_id" "$MINICLUSTER_USER"; do
    grep -qF -- "$w" <<<"$line" || fail "list does not name $w: $line"
done
key=$(awk '{ print $1 }' <<<"$line")
json=$(adm list --json) || fail "list --json: $json"
python3 -c '
import json, sys
e = json.loads(sys.argv[1])
assert len(e) == 1, e
e = e[0]
assert e["key"] == sys.argv[2] and e["size"] == 2500000 and e["source"] == sys.argv[3], e
assert e["jobs_using"] == 1 and e["jobs"] == sys.argv[4] and e["users"] == sys.argv[5], e
' "$json" "$key" "$src" "$job_id" "$MINICLUSTER_USER" || fail "list --json: $json"
msg=$(adm remove "$key" 2>&1)
grep -q "in use by job $job_id" <<<"$msg" || fail "remove of an entry in use: $msg"
on_node "$n1" test -e "$cache/entries/$key" || fail "remove took an entry in use"
for bad in "frob" "remove zz" "remove" "list extra"; do
    # shellcheck disable=SC2086 # the words are the arguments
    msg=$(adm $bad 2>&1)
    rc=$?
    if [ "$rc" != 2 ] || [ -z "$msg" ]; then fail "'$bad': exit $rc: $msg"; fi
done
# a directory that is not a cache: said so, exit 2, no table header
out_nc=$(on_node "$n1" "$tool" --cache /tmp list 2>/dev/null)
msg=$(on_node "$n1" "$tool" --cache /tmp list 2>&1)
rc=$?
if [ "$rc" != 2 ] || [ -n "$out_nc" ] ||
    [ "$msg" != "stagehand-cache: /tmp is not a node image cache (no entries directory)" ]; then
    fail "list of a directory that is not a cache: exit $rc: $msg"
fi
msg=$(on_node "$n1" "$tool" list 2>&1)
rc=$?
if [ "$rc" != 2 ] || ! grep -q -- "--cache" <<<"$msg"; then fail "list without --cache: $msg"; fi
touch "$src.release"
st=$(wait_job_end "$job_id" 120)
[ "$st" = COMPLETED ] || fail "job $job_id ended $st"

# a bit flip: verify finds it and removes the entry; the next job copies
msg=$(adm verify) || fail "verify of a good cache: $msg"
grep -q "$key: ok" <<<"$msg" || fail "verify: $msg"
on_node "$n1" python3 -c '
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(1000000); b = f.read(1); f.seek(1000000); f.write(bytes([b[0] ^ 1]))
' "$cache/entries/$key" || fail "cannot flip a byte"
msg=$(adm verify)
rc=$?
if [ "$rc" != 1 ] || ! grep -q "$key: corrupt" <<<"$msg"; then fail "verify after a bit flip: $msg"; fi
on_node "$n1" test -e "$cache/entries/$key" && fail "verify left the corrupt entry"
stage_job_ends COMPLETED 120 "$src" \
    "srun -N$k sh -c 'sha256sum <\"\$STAGEHAND_IMAGE\"'"
grep -q "$k copied\|1 copied" "$out" || fail "the next job did not copy: $(cat "$out")"
[ "$(grep -c "$want" "$out")" = "$k" ] || fail "the next job's image: $(cat "$out")"
msg=$(adm remove "$src") || fail "remove $src: $msg"
grep -q "removed" <<<"$msg" || fail "remove $src: $msg"
[ -z "$(on_node "$n1" ls "$cache/entries")" ] || fail "remove left: $(on_node "$n1" ls "$cache/entries")"
echo "PASS: list (text, --json), remove (kept in use, by SRC), bad arguments and a directory that is no cache (exit 2), verify finds a flipped byte and the next job copies again"

#!/usr/bin/env bash
# Issue 36, the registry image's limits (test_stage_registry.sh has the
# common path and the failures of a reachable, open registry):
# - credentials: the cluster's second registry instance serves only a client
#   with credentials (htpasswd). The job user's credentials in
#   ~/.config/containers/auth.json stage the image byte-identically, the
#   resolver (the tag) and the importer both using them; a user without
#   credentials (resolver) or with wrong ones in ~/.docker/config.json
#   (a pinned digest: the importer) fails naming the reference and
#   "unauthorized", with one import attempt at most, no drain, nothing
#   partial; the importer runs as the job user with the job user's HOME, so
#   another user's credentials are never used;
# - case F15 for a registry image: an image whose Squashfs file does not
#   fit the other nodes' DST filesystem (a small tmpfs there), and one whose
#   import does not fit the first node's: the job fails naming the reference and the sizes, no
#   drain, no import directory or partial DST on any node, and no node but
#   the first contacted the registry;
# - case F06 for a registry image: scancel while the imported image is
#   broadcast (one node's link shaped slow so the copy lasts seconds): the job's staging stops, no partial
#   DST or temp file, the import directory is gone, no drain.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

for t in docker-registry skopeo umoci htpasswd; do
    command -v "$t" >/dev/null || fail "$t is not installed on the host (contrib/setup.sh installs it)"
done

"$MINICLUSTER" registry start >/dev/null 2>&1 || fail "minicluster registry start failed"
reg=$("$MINICLUSTER" registry addr)
rega=$("$MINICLUSTER" registry addr --auth)
creds=$("$MINICLUSTER" registry creds)
reglog=$MINICLUSTER_STATE/log/registry.log
authlog=$MINICLUSTER_STATE/log/registry-auth.log
repo=test/lim$$
k=$(echo "$MINICLUSTER_NODES" | wc -w)
n0_ip=$(awk '$2 == "n1" {print $1; exit}' "$MINICLUSTER_STATE/etc/hosts")
[ -n "$n0_ip" ] || fail "no address of n1 in $MINICLUSTER_STATE/etc/hosts"
work=$MINICLUSTER_SHARED/t-rlim.$$
out=$work/job.out
tag=t-rlim$$
top=/nvme/t-rlim
mkdir -p "$work"
chmod 1777 "$work"

# The shipped importer, wrapped: each run leaves "user HOME reference" in
# $work/runs.
cat >"$work/importer.sh" <<EOF
#!/bin/sh
echo "\$(id -un) \$HOME \$1" >>"$work/runs"
exec $STAGEHAND_PREFIX/libexec/stagehand-import --insecure import "\$1" "\$2"
EOF
chmod 755 "$work/importer.sh"
: >"$work/runs"
chmod 666 "$work/runs"

# The users' credential files as they were (the homes are the host's,
# shared by every test cluster): each test entry is the registry's own key,
# added to what is there and removed again; a file the test made goes.
home_of() { getent passwd "$1" | cut -d: -f6; }
auth_user=$(home_of "$MINICLUSTER_USER")/.config/containers/auth.json
auth_other=$(home_of "$MINICLUSTER_OTHER_USER")/.docker/config.json
had_user="" had_other=""
[ ! -e "$auth_user" ] || had_user=1
[ ! -e "$auth_other" ] || had_other=1
auth_edit() { # user file add|remove [user:password]
    run_as "$1" python3 - "$2" "$3" "$rega" "${4:-}" <<'PY'
import base64, json, os, sys
path, op, reg, cred = sys.argv[1:5]
path = os.path.expanduser(path)
try:
    with open(path) as f:
        doc = json.load(f)
except FileNotFoundError:
    doc = {}
auths = doc.setdefault("auths", {})
if op == "add":
    auths[reg] = {"auth": base64.b64encode(cred.encode()).decode()}
else:
    auths.pop(reg, None)
os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
tmp = path + ".stagehand-test"
with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
    json.dump(doc, f)
os.replace(tmp, path)
PY
}
mounted=""
cleanup() {
    shape_clear
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    plugstack_restore
    if [ -n "$had_user" ]; then auth_edit "$MINICLUSTER_USER" "$auth_user" remove; else rm -f "$auth_user"; fi
    if [ -n "$had_other" ]; then auth_edit "$MINICLUSTER_OTHER_USER" "$auth_other" remove; else rm -f "$auth_other"; fi
    for m in $mounted; do on_node "${m%%:*}" umount "${m#*:}"; done
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$top" "$top-other" "$top-third"; done
    rm -rf "$work"
}
trap cleanup EXIT

plugstack_save
sed -i 's/ timeout=[^ ]*//' "$plugstack"
plugstack_add "timeout=60s allowed_registries=$reg,$rega" \
    "resolver=$STAGEHAND_PREFIX/libexec/stagehand-import,--insecure,digest,%r" \
    "importer=$work/importer.sh,%r,%o"

# Every client of both registries since offsets @1 (open) and @2 (auth) is node 0.
assert_only_node0() { # what open-offset auth-offset
    local c
    c=$({ registry_access "$reglog" "$2"; registry_access "$authlog" "$3"; } | awk '{print $1}' | sort -u)
    [ -z "$c" ] || [ "$c" = "$n0_ip" ] || fail "$1: the registry was contacted by '$c', not node 0 ($n0_ip) alone"
}

# stage RUNAS REF DST [SCRIPT]: a k-node job of user RUNAS (as_user,
# as_other, as_third) staging docker://REF to DST; sets job_id and st.
stage() {
    rm -f "$out"
    job_id=$("$1" sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-verbose \
        --stage-image="docker://$2:$3" --wrap "${4:-srun -N$k true}") || fail "sbatch: $job_id"
    st=$(wait_job_end "$job_id" 150)
}
runs() { wc -l <"$work/runs"; }

# The job fails naming @2 (a reference prefix) and @3; no drain, nothing of
# the staging left in directory @4, no runtime state, at most @5 new import runs.
assert_failed() { # what ref-prefix want dir runs-before
    [ "$st" = FAILED ] || fail "$1: job ended $st: $(cat "$out")"
    grep -qF "$2" "$out" || fail "$1: the message does not name $2: $(cat "$out")"
    grep -qiF -- "$3" "$out" || fail "$1: the message lacks '$3': $(cat "$out")"
    assert_no_drain
    assert_runtime_gone "$job_id"
    assert_no_entries "$4" '(\.sqsh$|\.import\.|\.stage\..*\.tmp$|\.part$)' "partial staging files"
    [ $(($(runs) - $5)) -le 1 ] || fail "$1: imported $(($(runs) - $5)) times"
    echo "ok: $1: $(grep -m1 -F "$2" "$out" | cut -c1-300)"
}

# ---- credentials ----
d1=$("$MINICLUSTER" registry push "$repo:v1" 1024) || fail "push $repo:v1"
# the instance with credentials refuses a client without them
if skopeo inspect --raw --tls-verify=false "docker://$rega/$repo:v1" >/dev/null 2>&1; then
    fail "$rega serves $repo:v1 without credentials"
fi
auth_edit "$MINICLUSTER_USER" "$auth_user" add "$creds" ||
    fail "cannot write $MINICLUSTER_USER's auth.json"
auth_edit "$MINICLUSTER_OTHER_USER" "$auth_other" add "${creds%%:*}:wrong$$" ||
    fail "cannot write $MINICLUSTER_OTHER_USER's config.json"

dst=$top/a.sqsh
o1=$(registry_log_offset "$reglog") o2=$(registry_log_offset "$authlog")
stage as_user "$rega/$repo:v1" "$dst" "srun -N$k sh -c 'unsquashfs -cat \$STAGEHAND_IMAGE etc/stagehand-test'"
[ "$st" = COMPLETED ] || fail "the user with credentials: job ended $st: $(cat "$out")"
grep -q "$dst: $k copied, 0 current of $k nodes" "$out" || fail "credentials: summary: $(cat "$out")"
[ "$(grep -c "image $repo:v1 pushed" "$out")" -eq "$k" ] || fail "credentials: srun did not read the image: $(cat "$out")"
sha=$(node_sha n1 "$dst")
[ -n "$sha" ] || fail "credentials: n1 has no $dst"
for n in $MINICLUSTER_NODES; do
    [ "$(node_sha "$n" "$dst")" = "$sha" ] || fail "credentials: $n: $dst differs from n1's"
done
[ "$(runs)" -eq 1 ] || fail "credentials: imported $(runs) times"
read -r u h r <"$work/runs"
[ "$u $h" = "$MINICLUSTER_USER $(home_of "$MINICLUSTER_USER")" ] ||
    fail "credentials: the importer ran as '$u' with HOME '$h'"
[ "$r" = "$rega/$repo@$d1" ] || fail "credentials: the import was not pinned to $d1: $r"
[ -n "$(registry_access "$authlog" "$o2" | awk '$2 == "GET" && $3 ~ /\/blobs\// && $4 == 200')" ] ||
    fail "credentials: no blob served by the instance with credentials: $(registry_access "$authlog" "$o2")"
assert_only_node0 "credentials" "$o1" "$o2"
echo "ok: credentials in ~/.config/containers/auth.json: resolved and imported once as $u, $k byte-identical copies"

# Without credentials (another user has them): the resolver is refused.
r0=$(runs) o1=$(registry_log_offset "$reglog") o2=$(registry_log_offset "$authlog")
stage as_third "$rega/$repo:v1" "$top-third/a.sqsh"
assert_failed "no credentials" "docker://$rega/$repo:v1" "unauthorized" "$top-third" "$r0"
grep -qF "cannot resolve the image's digest" "$out" || fail "no credentials: not the resolver's failure: $(cat "$out")"
[ "$(runs)" -eq "$r0" ] || fail "no credentials: the importer ran"
[ -n "$(registry_access "$authlog" "$o2" | awk '$4 == 401')" ] || fail "no credentials: the registry refused nothing: $(registry_access "$authlog" "$o2")"
[ -z "$(registry_access "$authlog" "$o2" | awk '$4 == 200 && $3 ~ /\/(manifests|blobs)\//')" ] ||
    fail "no credentials: the registry served the image: $(registry_access "$authlog" "$o2")"
assert_only_node0 "no credentials" "$o1" "$o2"

# Wrong credentials (~/.docker/config.json), a pinned digest: the importer
# alone asks, once, as that user, and is refused.
r0=$(runs) o1=$(registry_log_offset "$reglog") o2=$(registry_log_offset "$authlog")
stage as_other "$rega/$repo@$d1" "$top-other/a.sqsh"
assert_failed "wrong credentials" "docker://$rega/$repo@$d1" "unauthorized" "$top-other" "$r0"
grep -qF "the importer failed" "$out" || fail "wrong credentials: not the importer's failure: $(cat "$out")"
[ "$(runs)" -eq $((r0 + 1)) ] || fail "wrong credentials: $(($(runs) - r0)) import runs"
[ "$(tail -1 "$work/runs" | cut -d' ' -f1-2)" = "$MINICLUSTER_OTHER_USER $(home_of "$MINICLUSTER_OTHER_USER")" ] ||
    fail "wrong credentials: the importer ran as $(tail -1 "$work/runs")"
tail -c +"$((o2 + 1))" "$authlog" | grep -qF "error authenticating user \\\"${creds%%:*}\\\"" ||
    fail "wrong credentials: the registry saw no wrong password (were they read?)"
[ -z "$(registry_access "$authlog" "$o2" | awk '$4 == 200 && $3 ~ /\/(manifests|blobs)\//')" ] ||
    fail "wrong credentials: the registry served the image: $(registry_access "$authlog" "$o2")"
assert_only_node0 "wrong credentials" "$o1" "$o2"

# ---- an image too large for the nodes ----
# DST's filesystem: a tmpfs of 160 MiB on the first node (room for the
# import of a 32 MiB image: its layer, unpacked file and Squashfs file) and
# of 16 MiB on the others; then 16 MiB on the first too.
small=$top/small
for n in $MINICLUSTER_NODES; do
    size=16m
    [ "$n" = n1 ] && size=160m
    on_node "$n" sh -c "mkdir -p '$small' && mount -t tmpfs -o size=$size,mode=1777 tmpfs-rlim '$small'" ||
        fail "cannot mount a tmpfs on $n:$small"
    mounted="$n:$small $mounted"
done
db=$("$MINICLUSTER" registry push "$repo:big" 32768) || fail "push $repo:big"
r0=$(runs) o1=$(registry_log_offset "$reglog") o2=$(registry_log_offset "$authlog")
stage as_user "$reg/$repo:big" "$small/big.sqsh"
assert_failed "image larger than the other nodes' free space" "docker://$reg/$repo@$db: the image's Squashfs file is" \
    "more than the free space of $small/big.sqsh's filesystem on n2 (" "$small" "$r0"
for n in $MINICLUSTER_NODES; do
    [ "$n" = n1 ] && continue
    grep -qE "$n \([0-9.]+ [KMG]iB, [0-9]+ bytes\)" "$out" || fail "too large: $n's free space is not named: $(cat "$out")"
done
[ "$(runs)" -eq $((r0 + 1)) ] || fail "too large: $(($(runs) - r0)) import runs"
assert_only_node0 "too large" "$o1" "$o2"

on_node n1 umount "$small" || fail "cannot unmount n1:$small"
mounted=${mounted/n1:$small /}
on_node n1 mount -t tmpfs -o size=16m,mode=1777 tmpfs-rlim "$small" || fail "cannot mount 16 MiB on n1:$small"
mounted="n1:$small $mounted"
r0=$(runs) o1=$(registry_log_offset "$reglog") o2=$(registry_log_offset "$authlog")
stage as_user "$reg/$repo:big" "$small/big.sqsh"
assert_failed "import larger than the first node's free space" "docker://$reg/$repo@$db: the image does not fit the first node" \
    "no space left on device" "$small" "$r0"
grep -qE "$small's filesystem has [0-9.]+ [KMG]iB free of 16.00 MiB" "$out" || fail "import too large: the sizes are not named: $(cat "$out")"
assert_only_node0 "import too large" "$o1" "$o2"

# ---- scancel while the imported image is broadcast ----
cdst=$top/c.sqsh
# n2's link at 16 Mbit/s: the broadcast of the 32 MiB image takes some 17 s
# (the import, from the storage host to n1, is not shaped)
shape_links --link 16mbit --node n2 || fail "cannot shape n2's link"
r0=$(runs)
rm -f "$out"
job_id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" \
    --stage-image="docker://$reg/$repo:big:$cdst" --wrap 'echo script-ran') || fail "sbatch: $job_id"
# keyed on the copy running: n2's temp file beside DST (one node call a try)
copying=""
for _ in $(seq 1 600); do
    on_node n2 sh -c "ls -A '$top' 2>/dev/null | grep -qE '^\.c\.sqsh\.stage\..*\.tmp\$'" && copying=1 && break
    sleep 0.1
done
[ -n "$copying" ] || fail "broadcast: the copy to n2 did not start: $(cat "$out" 2>/dev/null)"
held=$(on_node n1 sh -c "ls -d $top/.c.sqsh.import.$job_id.* 2>/dev/null")
[ -n "$held" ] || fail "broadcast: no import directory on n1 while the copy runs: $(cat "$out" 2>/dev/null)"
sleep 0.5
as_user scancel "$job_id" || fail "scancel $job_id"
t0=$SECONDS
st=$(wait_job_end "$job_id" 30)
[ "$st" = CANCELLED ] || fail "broadcast: job ended $st after scancel: $(cat "$out")"
t1=$SECONDS
left=$(procs_left engine_pids "$cdst" 30)
[ -z "$left" ] || fail "broadcast: engines still run 30 s after scancel: $left"
assert_runtime_gone "$job_id" 30
for _ in $(seq 1 50); do
    [ -z "$(on_node n1 sh -c "ls -d $held 2>/dev/null")" ] && break
    sleep 0.2
done
[ -z "$(on_node n1 sh -c "ls -d $held 2>/dev/null")" ] || fail "broadcast: the import directory $held is left on n1"
for n in $MINICLUSTER_NODES; do
    got=$(node_sha "$n" "$cdst")
    [ -z "$got" ] || fail "broadcast: $n has $cdst after the scancel (the copy outran the shaped link?)"
done
assert_no_entries "$top" '(\.import\.|\.stage\..*\.tmp$|\.part$)' "partial staging files"
assert_no_drain
! grep -q script-ran "$out" 2>/dev/null || fail "broadcast: the cancelled job's script ran"
[ $(($(runs) - r0)) -eq 1 ] || fail "broadcast: imported $(($(runs) - r0)) times"
grep -q "@$db\$" "$work/runs" || fail "broadcast: not imported at $db"
echo "ok: scancel during the broadcast (job ended $((t1 - t0)) s after it, clean $((SECONDS - t0)) s after it): no engine, no partial DST or temp file, import directory gone, no drain"
shape_clear
echo "PASS"

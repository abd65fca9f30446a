#!/usr/bin/env bash
# Issue 36: --stage-image=docker://REGISTRY/REPO:TAG against the cluster's
# own registry (Debian's docker-registry on the storage host, minicluster
# registry): node 0 alone resolves the tag and imports the image once, the
# broadcast gives every node a byte-identical Squashfs copy that the job's
# srun reads; the registry's access log shows one client (node 0) pulling
# each blob once; a second job with the same tag copies nothing and pulls no
# blob; after the tag is pushed anew the next job imports again. Failures
# (unknown image, registry not allowed, registry down, importer fails,
# importer past the deadline): the job fails naming the reference and the
# reason, no node is drained, nothing partial is left, and no second import
# runs; no access (DST's directory not writable, an image the importer
# cannot read) likewise. scancel while the importer runs (its mksquashfs held after writing a
# partial image): no importer, skopeo, umoci or mksquashfs of the job is
# left, no import directory or partial file, no drain, and the same image
# then stages again, and that staging sweeps the markers the cancelled one
# left. The importer gets its import directory as XDG_DATA_HOME (skopeo's
# blob-info cache there, not in the home); one out of room names the sizes
# though a stack trace follows the error. Under cache= a registry image
# without DST is staged and each node's entry records the pinned reference.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

for t in docker-registry skopeo umoci; do
    command -v "$t" >/dev/null || fail "$t is not installed on the host (contrib/setup.sh installs it)"
done
for n in $MINICLUSTER_NODES; do
    on_node "$n" sh -c 'command -v skopeo && command -v umoci && command -v mksquashfs' >/dev/null ||
        fail "$n: skopeo, umoci or mksquashfs missing in the node's stack (contrib/setup.sh, contrib/minicluster/rootfs)"
done

"$MINICLUSTER" registry start >/dev/null 2>&1 || fail "minicluster registry start failed"
reg=$("$MINICLUSTER" registry addr)
reglog=$MINICLUSTER_STATE/log/registry.log
repo=test/reg$$
k=$(echo "$MINICLUSTER_NODES" | wc -w)
n0_ip=$(awk '$2 == "n1" {print $1; exit}' "$MINICLUSTER_STATE/etc/hosts")
[ -n "$n0_ip" ] || fail "no address of n1 in $MINICLUSTER_STATE/etc/hosts"
work=$MINICLUSTER_SHARED/t-reg.$$
out=$work/job.out
tag=t-reg$$
mkdir -p "$work"
chmod 1777 "$work"

# The site's importer, wrapped: each run leaves a line in $work/runs; the
# file $work/mode makes it the shipped one (real), fail with a message
# (fail), outlast the staging's deadline (sleep) or run the shipped one
# whose mksquashfs, once it has written its partial output, says so in
# $work/held and waits (hold).
cat >"$work/importer.sh" <<EOF
#!/bin/sh
echo "\$1" >>"$work/runs"
case "\$(cat "$work/mode")" in
    fail) echo "importer-broke on purpose" >&2; exit 3 ;;
    nospace)
        # umoci's way: the error, then a Go stack trace longer than the kept tail
        echo "write \$2: no space left on device" >&2
        for i in \$(seq 1 60); do echo "main.main()	/build/umoci/cmd/umoci/main.go:172 +0x2c frame \$i" >&2; done
        exit 1 ;;
    sleep) sleep 300 ;;
    hold) PATH=$work/bin:\$PATH; export PATH ;;
    real)
        # where skopeo's blob-info cache went (XDG_DATA_HOME: the import directory)
        $STAGEHAND_PREFIX/libexec/stagehand-import --insecure import "\$1" "\$2"
        rc=\$?
        ls "\${XDG_DATA_HOME:-/nonexistent}"/containers/cache/blob-info-cache-v1.* >>"$work/bic" 2>/dev/null
        exit \$rc ;;
esac
exec $STAGEHAND_PREFIX/libexec/stagehand-import --insecure import "\$1" "\$2"
EOF
mkdir -p "$work/bin"
cat >"$work/bin/mksquashfs" <<EOF
#!/bin/sh
/usr/bin/mksquashfs "\$@" || exit
echo "\$(hostname) \$2" >"$work/held"
sleep 300
EOF
chmod 755 "$work/importer.sh" "$work/bin/mksquashfs"
echo real >"$work/mode"
: >"$work/runs"
: >"$work/bic"
chmod 666 "$work/runs" "$work/bic"
# containers/image's blob-info cache under the user's home (the homes are
# the host's; .boltdb on bookworm, .sqlite on trixie): the importer must not
# write it there
bic_home=$(getent passwd "$MINICLUSTER_USER" | cut -d: -f6)/.local/share/containers/cache
rm -f "$bic_home"/blob-info-cache-v1.*
cache=/nvme/stagehand-cache

cleanup() {
    plugstack_restore
    "$MINICLUSTER" registry start >/dev/null 2>&1 || true
    rm -rf "$work"
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf /nvme/t-reg "$cache"; done
}
trap cleanup EXIT

# The cluster's allowed registry, resolver and importer, and a deadline a
# test can wait for (timeout= replaces the cluster's own).
plugstack_save
sed -i 's/ timeout=[^ ]*//' "$plugstack"
plugstack_add "timeout=30s allowed_registries=$reg" \
    "resolver=$STAGEHAND_PREFIX/libexec/stagehand-import,--insecure,digest,%r" \
    "importer=$work/importer.sh,%r,%o"

# Registry access lines since byte offset @1: "client method path status bytes".
reg_since() { registry_access "$reglog" "$1"; }
reg_off() { registry_log_offset "$reglog"; }
blob_gets() { reg_since "$1" | awk '$2 == "GET" && $3 ~ /\/blobs\//'; }

# stage REF DST [SCRIPT]: a k-node job staging docker://REF to DST; sets
# job_id and st (its end state).
stage() {
    rm -f "$out"
    job_id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-verbose \
        --stage-image="docker://$1:$2" --wrap "${3:-srun -N$k true}") || fail "sbatch: $job_id"
    st=$(wait_job_end "$job_id" 150)
}

# Nothing partial on any node: no DST @1, no import directory, no temp file.
assert_nothing_left() {
    assert_no_entries /nvme/t-reg "^(\\.?$(basename "$1")|.*\\.import\\..*|.*\\.stage\\..*\\.tmp)\$" "partial staging files"
}

# ---- one import, broadcast, read by the job's srun ----
d1=$("$MINICLUSTER" registry push "$repo:v1" 2048) || fail "push $repo:v1"
dst=/nvme/t-reg/img.sqsh
off=$(reg_off)
stage "$reg/$repo:v1" "$dst" "srun -N$k sh -c 'echo \$(hostname) \$(unsquashfs -cat \$STAGEHAND_IMAGE etc/stagehand-test)'"
[ "$st" = COMPLETED ] || fail "first job ended $st: $(cat "$out")"
grep -q "$dst: $k copied, 0 current of $k nodes" "$out" || fail "first job summary: $(cat "$out")"
[ "$(grep -c "image $repo:v1 pushed" "$out")" -eq "$k" ] || fail "the srun did not read the image on every node: $(cat "$out")"
sha=$(node_sha n1 "$dst")
[ -n "$sha" ] || fail "n1 has no $dst"
for n in $MINICLUSTER_NODES; do
    [ "$(node_sha "$n" "$dst")" = "$sha" ] || fail "$n: $dst differs from n1's"
    [ "$(on_node "$n" stat -c %U "$dst")" = "$MINICLUSTER_USER" ] || fail "$n: $dst is not the job user's"
done
clients=$(blob_gets "$off" | awk '{print $1}' | sort -u)
[ "$clients" = "$n0_ip" ] || fail "blobs pulled by '$clients', expected node 0 ($n0_ip) alone: $(reg_since "$off")"
[ "$(blob_gets "$off" | awk '{print $3}' | sort | uniq -d)" = "" ] || fail "a blob pulled twice: $(blob_gets "$off")"
[ "$(reg_since "$off" | awk '{print $1}' | sort -u)" = "$n0_ip" ] || fail "another node contacted the registry: $(reg_since "$off")"
[ "$(wc -l <"$work/runs")" -eq 1 ] || fail "imported $(wc -l <"$work/runs") times"
grep -q "@$d1\$" "$work/runs" || fail "the import was not pinned to $d1: $(cat "$work/runs")"
assert_nothing_left "$dst.absent"
grep -qE "^/nvme/(t-reg/)?\.img\.sqsh\.import\.$job_id\.[0-9]+/containers/cache/blob-info-cache-v1\.(boltdb|sqlite)\$" "$work/bic" ||
    fail "skopeo's blob-info cache was not in the import directory: '$(cat "$work/bic")'"
[ -z "$(ls -A "$bic_home" 2>/dev/null)" ] || fail "the importer wrote its blob-info cache in the user's home: $(ls -l "$bic_home")"
echo "ok: one import by node 0 ($(blob_gets "$off" | awk '{s += $5} END {print s}') blob bytes served), $k byte-identical copies, read by srun; skopeo's cache in the import directory, none in the home"

# ---- the same tag again: nothing copied, no blob pulled ----
ino=$(on_node n2 stat -c %i.%Y "$dst")
off=$(reg_off)
stage "$reg/$repo:v1" "$dst"
[ "$st" = COMPLETED ] || fail "second job ended $st: $(cat "$out")"
grep -q "$dst: all $k nodes current, nothing copied" "$out" || fail "second job copied: $(cat "$out")"
[ -z "$(blob_gets "$off")" ] || fail "the second job pulled blobs: $(blob_gets "$off")"
[ "$(wc -l <"$work/runs")" -eq 1 ] || fail "the second job ran the importer"
[ "$(on_node n2 stat -c %i.%Y "$dst")" = "$ino" ] || fail "n2's current copy was rewritten"
echo "ok: same tag, same digest: nothing copied, no blob pulled"

# ---- the tag pushed anew: imported again ----
d2=$("$MINICLUSTER" registry push "$repo:v1" 1024) || fail "push $repo:v1 again"
[ "$d2" != "$d1" ] || fail "the new push has the old digest"
off=$(reg_off)
stage "$reg/$repo:v1" "$dst" "srun -N$k sh -c 'unsquashfs -cat \$STAGEHAND_IMAGE etc/stagehand-test'"
[ "$st" = COMPLETED ] || fail "third job ended $st: $(cat "$out")"
grep -q "$dst: $k copied, 0 current of $k nodes" "$out" || fail "the moved tag was not imported again: $(cat "$out")"
[ "$(blob_gets "$off" | awk '{print $1}' | sort -u)" = "$n0_ip" ] || fail "blobs of the new push: $(blob_gets "$off")"
grep -q "@$d2\$" "$work/runs" || fail "not imported at $d2: $(cat "$work/runs")"
[ "$(node_sha n3 "$dst")" != "$sha" ] || fail "n3 still has the old image"
echo "ok: the tag pushed anew is imported again"

# ---- failures: the job fails naming the reference and the reason ----
# fail_case NAME REF DST WANT: the job fails, its output names the
# reference and WANT, no drain, nothing left, the importer ran at most once.
fail_case() {
    local name=$1 ref=$2 d=$3 want=$4 runs0
    runs0=$(wc -l <"$work/runs")
    stage "$ref" "$d"
    [ "$st" = FAILED ] || fail "$name: job ended $st: $(cat "$out")"
    grep -qF "docker://$ref" "$out" || grep -qF "docker://${ref%:*}@" "$out" ||
        fail "$name: the message does not name the reference: $(cat "$out")"
    grep -qF -- "$want" "$out" || fail "$name: the message lacks '$want': $(cat "$out")"
    assert_no_drain
    assert_runtime_gone "$job_id"
    assert_nothing_left "$d"
    [ $(($(wc -l <"$work/runs") - runs0)) -le 1 ] || fail "$name: imported more than once"
    echo "ok: $name: $(grep -m1 -F "docker://" "$out" | cut -c1-240)"
}

fail_case "unknown image" "$reg/$repo:no-such-tag" /nvme/t-reg/u.sqsh "cannot resolve the image's digest: the resolver failed (exit 1): Error parsing image name"
grep -q "manifest unknown" "$out" || fail "unknown image: the registry's reason is missing: $(cat "$out")"
[ "$(wc -l <"$work/runs")" -eq 2 ] || fail "the importer ran for an unknown image"

# A registry the site does not allow is refused at submit: no job.
if msg=$(as_user sbatch -N1 --stage-image="docker://10.9.9.9:5000/$repo:v1:/nvme/t-reg/x.sqsh" --wrap true 2>&1); then
    fail "a registry outside allowed_registries was accepted: $msg"
fi
grep -qF "registry '10.9.9.9:5000' is not allowed on this cluster (allowed: $reg)" <<<"$msg" ||
    fail "not-allowed message: $msg"
echo "ok: registry not allowed: refused at submit"

"$MINICLUSTER" registry stop >/dev/null 2>&1
fail_case "registry down" "$reg/$repo:v1" /nvme/t-reg/down.sqsh "cannot resolve the image's digest"
grep -q "connection refused" "$out" || fail "registry down: the reason is missing: $(cat "$out")"
"$MINICLUSTER" registry start >/dev/null 2>&1 || fail "registry start"

echo fail >"$work/mode"
fail_case "importer fails" "$reg/$repo:v1" /nvme/t-reg/f.sqsh "the importer failed (exit 3): importer-broke on purpose"
[ "$(wc -l <"$work/runs")" -eq 3 ] || fail "importer runs: $(cat "$work/runs")"

# the no-room message with the sizes (stagehand(8)), though a stack trace
# followed the error in the importer's output
echo nospace >"$work/mode"
fail_case "importer out of room" "$reg/$repo:v1" /nvme/t-reg/ns.sqsh "the image does not fit the first node"
grep -qF "(the importer failed: no space left on device)" "$out" || fail "out of room: the reason is missing: $(cat "$out")"
grep -qE "/nvme/t-reg's filesystem has [0-9.]+ [KMGT]iB free of [0-9.]+ [KMGT]iB" "$out" || fail "out of room: the sizes are missing: $(cat "$out")"

echo sleep >"$work/mode"
fail_case "importer past the deadline" "$reg/$repo:v1" /nvme/t-reg/s.sqsh "did not finish within the staging deadline"
[ "$(wc -l <"$work/runs")" -eq 5 ] || fail "importer runs: $(cat "$work/runs")"
for n in $MINICLUSTER_NODES; do
    [ -z "$(on_node "$n" pgrep -f "$work/[i]mporter.sh" || true)" ] || fail "$n: the importer still runs"
done

# No access: DST's directory is not the user's to write (the import
# directory cannot be made: the importer never runs); an image the
# importer cannot read (a digest the registry does not have).
for n in $MINICLUSTER_NODES; do on_node "$n" sh -c 'mkdir /nvme/t-reg/ro && chmod 0755 /nvme/t-reg/ro'; done
echo real >"$work/mode"
runs0=$(wc -l <"$work/runs")
fail_case "DST's directory not writable" "$reg/$repo:v1" /nvme/t-reg/ro/n.sqsh "cannot make the import directory /nvme/t-reg/ro/.n.sqsh.import."
grep -q "import\.$job_id\.[0-9]*: Permission denied" "$out" || fail "not writable: the reason is missing: $(cat "$out")"
[ "$(wc -l <"$work/runs")" -eq "$runs0" ] || fail "not writable: the importer ran"
assert_no_entries /nvme/t-reg/ro '^(\.[^.]|\.\..|[^.])' "entries in the directory the user cannot write"
fail_case "image the importer cannot read" "$reg/$repo@sha256:$(printf '%064d' 0)" /nvme/t-reg/p.sqsh "the importer failed (exit 1)"
grep -q "manifest unknown" "$out" || fail "cannot read: the registry's reason is missing: $(cat "$out")"

# ---- scancel while the importer runs: nothing of it is left ----
# (the agent gets the epilog's SIGTERM; the importer runs in its own process
# group, which the agent kills, then it removes the import directory)
echo hold >"$work/mode"
rm -f "$work/held"
cdst=/nvme/t-reg/c.sqsh
rm -f "$out"
job_id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-verbose \
    --stage-image="docker://$reg/$repo:v1:$cdst" --wrap "srun -N$k true") || fail "sbatch: $job_id"
for _ in $(seq 1 300); do
    [ -s "$work/held" ] && break
    sleep 0.2
done
[ -s "$work/held" ] || fail "cancel: the importer did not reach mksquashfs: $(cat "$out" 2>/dev/null)"
held=$(on_node n1 sh -c "ls -d /nvme/t-reg/.c.sqsh.import.$job_id.* 2>/dev/null")
[ -n "$held" ] || fail "cancel: no import directory on n1 while the importer runs"
on_node n1 sh -c "ls $held/image.sqsh.part" >/dev/null 2>&1 ||
    fail "cancel: no partial image in $held on n1"
hpid=$(node_pids n1 "$work/bin/[m]ksquashfs" | head -1)
[ -n "$hpid" ] || fail "cancel: the held mksquashfs is not running on n1"
# Live processes (zombies, which wait for their reaper, are not) of process
# group @1 (the nodes share one PID namespace): "pid comm".
live_in_group() {
    ps -e -o pgid=,stat=,pid=,comm= | awk -v g="$1" '$2 !~ /^Z/ && $1 == g {print $3, $4}'
}
# Live processes of the job user on node @1 named @2, @3... (one node call).
live_named() {
    local n=$1
    shift
    on_node "$n" sh -c 'u=$1; shift; for p; do pgrep --ns $$ --nslist net -u "$u" -r R,S,D,T -x "$p"; done; true' \
        sh "$MINICLUSTER_USER" "$@"
}
# its process group: stagehand-import (the wrapper exec'd it), mksquashfs, sleep
pgid=$(on_node n1 ps -o pgid= -p "$hpid" | tr -d ' ')
[ -n "$pgid" ] || fail "cancel: no process group of $hpid"
[ "$(live_in_group "$pgid" | wc -l)" -ge 3 ] || fail "cancel: the importer's process group $pgid: $(live_in_group "$pgid")"
as_user scancel "$job_id" || fail "scancel $job_id"
cancelled=$job_id
t0=$SECONDS
st=$(wait_job_end "$job_id" 30)
[ "$st" = CANCELLED ] || fail "cancel: job ended $st"
t1=$SECONDS
left=$(procs_left node_pids "$work/[bi]" 20)
[ -z "$left" ] || fail "cancel: the importer's processes still run 20 s after scancel: $left"
[ -z "$(live_in_group "$pgid")" ] || fail "cancel: the importer's group still runs: $(live_in_group "$pgid")"
for n in $MINICLUSTER_NODES; do
    [ -z "$(live_named "$n" skopeo umoci mksquashfs)" ] || fail "cancel: $n: skopeo, umoci or mksquashfs of the job user still runs"
done
assert_runtime_gone "$job_id" 20
for _ in $(seq 1 50); do
    [ -z "$(on_node n1 sh -c "ls -d $held 2>/dev/null")" ] && break
    sleep 0.2
done
assert_nothing_left "$cdst"
assert_no_entries /nvme/t-reg '\.part$' "partial image files"
assert_no_drain
# markers the stopped agents left (every node waited for the plan); the
# next staging into this directory sweeps them (below)
markers=0
for n in $MINICLUSTER_NODES; do
    markers=$((markers + $(on_node "$n" sh -c "ls -a /nvme/t-reg | grep -c '^\.stagehand-marker\.$cancelled\.' || true")))
done
echo "ok: cancelled during the import (ended in $((t1 - t0)) s, clean $((SECONDS - t0)) s after scancel): no importer process, no import directory or partial file, no drain"

echo real >"$work/mode"
runs0=$(wc -l <"$work/runs")
stage "$reg/$repo:v1" "$cdst" "srun -N$k sh -c 'unsquashfs -cat \$STAGEHAND_IMAGE etc/stagehand-test'"
[ "$st" = COMPLETED ] || fail "after the cancel: job ended $st: $(cat "$out")"
grep -q "$cdst: $k copied, 0 current of $k nodes" "$out" || fail "after the cancel: $(cat "$out")"
[ "$(grep -c "image $repo:v1 pushed" "$out")" -eq "$k" ] || fail "after the cancel: srun did not read the image: $(cat "$out")"
[ $(($(wc -l <"$work/runs") - runs0)) -eq 1 ] || fail "after the cancel: imported $(($(wc -l <"$work/runs") - runs0)) times"
csha=$(node_sha n1 "$cdst")
[ -n "$csha" ] || fail "after the cancel: n1 has no $cdst"
for n in $MINICLUSTER_NODES; do
    [ "$(node_sha "$n" "$cdst")" = "$csha" ] || fail "after the cancel: $n: $cdst differs from n1's"
done
assert_nothing_left "$cdst.absent"
# the cancelled job's markers (its agents were stopped while they stood)
# were swept by this staging into the same directory
assert_no_entries /nvme/t-reg "^\\.stagehand-marker\\.$cancelled\\." "markers of the cancelled job $cancelled"
echo "ok: the same image after the cancel: $k byte-identical copies, no marker of the cancelled job left ($markers after the cancel)"

# ---- the node image cache (cache=): a registry image without DST ----
# Staged into the job's directory of the cache and adopted: each node's
# entry records the reference pinned to its digest as its source.
plugstack_add cache=$cache
rm -f "$out"
job_id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-verbose \
    --stage-image="docker://$reg/$repo:v1" --wrap "srun -N$k sh -c 'echo \$(hostname) \$STAGEHAND_IMAGE \$(unsquashfs -cat \$STAGEHAND_IMAGE etc/stagehand-test)'") ||
    fail "sbatch: $job_id"
st=$(wait_job_end "$job_id" 150)
[ "$st" = COMPLETED ] || fail "cache: job ended $st: $(cat "$out")"
[ "$(grep -c "$cache/job/$job_id/.*image $repo:v1 pushed" "$out")" -eq "$k" ] ||
    fail "cache: srun did not read the image from the job's cache directory on every node: $(cat "$out")"
ctool=$STAGEHAND_PREFIX/sbin/stagehand-cache
for n in $MINICLUSTER_NODES; do
    on_node "$n" "$ctool" --cache "$cache" list | grep -qF " docker://$reg/$repo@$d2" ||
        fail "cache: $n has no entry recording docker://$reg/$repo@$d2: $(on_node "$n" "$ctool" --cache "$cache" list)"
done
echo "ok: cache=: the registry image staged without DST, each node's entry records docker://$reg/$repo@$d2"
echo "PASS"

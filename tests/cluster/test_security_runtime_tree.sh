#!/usr/bin/env bash
# Security issue 30 item 6: the job's runtime directory /run/stagehand/<jobid>
# belongs to the job user, who can fill it: it is a 64 MiB tmpfs of its own,
# so 80 MiB written there fail and the node's /run is safe. The epilog must
# remove whatever the job left there, at any depth, without following a
# symbolic link: a job that asked for staging makes a 12-level and a
# 2000-level tree there, plus symlinks to a directory and a file of its own
# outside it and to /etc; after the job, its runtime directory is gone on
# every node and everything the symlinks pointed to is still there. Run
# under on_node_fault=drain: no node drains.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

k=$(echo "$MINICLUSTER_NODES" | wc -w)
tok=srt$$
tag=sec-rtree.$$
src=$MINICLUSTER_SHARED/$tok.img
dst=/nvme/$tok/img
out=$MINICLUSTER_SHARED/$tok.out
script=$MINICLUSTER_SHARED/$tok.sh
id=""
plugstack_save
cleanup() {
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    plugstack_restore
    rm -f "$src" "$out" "$script"
    for n in $MINICLUSTER_NODES; do
        on_node "$n" rm -rf "/nvme/$tok" "/tmp/$tok.outside" ${id:+"/run/stagehand/$id"}
    done
}
trap cleanup EXIT

plugstack_add on_node_fault=drain
make_user_file "$src" 1 || fail "cannot create $src"
# outside the runtime directory, on each node: the user's own directory
# with a file (what a root walk that followed a link would remove)
for n in $MINICLUSTER_NODES; do
    on_node_as_user "$n" sh -c "mkdir -p /tmp/$tok.outside/keep && echo precious >/tmp/$tok.outside/keep/file" ||
        fail "$n: cannot make /tmp/$tok.outside"
done

# The job: in /run/stagehand/$SLURM_JOB_ID on every node, a 12-level and a
# 2000-level tree (made with relative paths: the full path is longer than
# PATH_MAX), each level with a file, symlinks to the outside directory, its
# file and /etc at the top and at the bottom of each tree.
cat >"$script" <<EOS
#!/bin/sh
set -e
r=/run/stagehand/\$SLURM_JOB_ID
[ -d "\$r" ] && [ -O "\$r" ] || { echo "no runtime directory \$r of mine"; exit 1; }
links() {
    ln -s /tmp/$tok.outside out_dir
    ln -s /tmp/$tok.outside/keep/file out_file
    ln -s /etc out_etc
}
for depth in 12 2000; do
    cd "\$r"
    mkdir t\$depth && cd t\$depth
    links
    i=0
    while [ \$i -lt \$depth ]; do
        echo x >f && mkdir d && cd d
        i=\$((i + 1))
    done
    links
done
cd "\$r" && ls -d t12 t2000 && echo trees-made
# a small file system of its own: 80 MiB do not fit, the node's /run is safe
if dd if=/dev/zero of="\$r/fill" bs=1M count=80 2>/dev/null; then echo filled-80m; else echo fill-stopped; fi
rm -f "\$r/fill"
EOS
chmod 0755 "$script"
id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$out" --stage-image="$src:$dst" \
         --wrap "srun -N$k $script") || fail "sbatch: $id"
st=$(wait_job_end "$id" 180)
[ "$st" = COMPLETED ] || fail "job $id ended $st: $(cat "$out" 2>/dev/null)"
[ "$(grep -c trees-made "$out")" = "$k" ] || fail "the trees were not made on every node: $(cat "$out")"
[ "$(grep -c fill-stopped "$out")" = "$k" ] ||
    fail "the job could write 80 MiB into its runtime directory (the node's /run) on some node: $(cat "$out")"
echo "ok: job $id made a 12-level and a 2000-level tree with outside symlinks in its runtime directory on $k nodes"

# The epilog runs after the job ends: its runtime directory must go.
for n in $MINICLUSTER_NODES; do
    left=""
    for _ in $(seq 1 100); do
        left=$(on_node "$n" sh -c "ls -d /run/stagehand/$id* 2>/dev/null" || true)
        [ -z "$left" ] && break
        sleep 0.2
    done
    [ -z "$left" ] || fail "$n: the epilog left $left (depth of what is left: $(on_node "$n" sh -c "cd /run/stagehand/$id/t2000 2>/dev/null && find . | awk -F/ '{ if (NF > m) m = NF } END { print m }'" || true))"
    on_node "$n" test -f "/tmp/$tok.outside/keep/file" || fail "$n: the file a symlink pointed to was removed"
    on_node "$n" test -f /etc/passwd || fail "$n: /etc/passwd is gone"
done
assert_no_drain
echo "ok: the epilog removed the whole runtime directory of job $id on every node; the symlinks' targets are intact; no drain"

#!/usr/bin/env bash
# Issue 6, bad input: a table-driven corpus of hostile and broken
# --stage-image values, run through sbatch, srun and salloc as the test user.
# Every value must be refused at submit with
#   <cmd>: error: stagehand: --stage-image=<value as shown>: <reason>
# (control bytes and bytes that are not UTF-8 shown as \xHH, and never raw:
# Slurm does not repeat the value), a non-zero exit,
# no job created, nothing written anywhere and no node drained (doc/design.md §5
# first row). Then bad plugstack arguments (private copy of slurm.conf and
# plugstack.conf via SLURM_CONF, as test_submit_misconfig.sh: the cluster is
# untouched): refused with "stagehand is misconfigured on this cluster: ...".
# Then the values only a node can judge (DST's place on the node, doc/design.md
# §6): the job fails at step start with the message in its output, no file
# lands outside the allowed root, no node is drained; a DST pre-planted as a
# symlink is replaced by rename and never followed; legal but odd names
# (spaces, quotes, non-UTF-8, escaped ':' and ',') stage correctly.
# Cases F17 (a: link to an unreadable file, b: planted symlink, c: FIFO and
# devices), F18, F23, F26, F27, F28, F31.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts expand in the job's or the node's shell
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

conf_dir=$(dirname "$SLURM_CONF")
grep -qs "^required .*stagehand.so" "$conf_dir/plugstack.conf" ||
    skip "stagehand.so is not in $conf_dir/plugstack.conf"
grep -qs "allowed_dest=/nvme " "$conf_dir/plugstack.conf" ||
    skip "the cluster's plugstack.conf does not use allowed_dest=/nvme"

user=$MINICLUSTER_USER
tok=badin$$
tag=badinput.$$
# Special files on the login side's local /tmp (no FIFOs or sockets on sshfs).
s=$(mktemp -d /tmp/stagehand-$tok.XXXXXX) || fail "mktemp"
shared=$MINICLUSTER_SHARED/$tok
cleanup() {
    rm -rf "$s" "$shared" "$shared.img"
    for n in $MINICLUSTER_NODES; do
        on_node "$n" sh -c "rm -rf /nvme/$tok /nvme/$tok-* /nvme/.$tok-* /tmp/$tok-*" 2>/dev/null
    done
}
trap cleanup EXIT
chmod 0755 "$s"
echo image >"$s/img.sqsh"
chmod 0644 "$s/img.sqsh"
echo secret >"$s/secret.sqsh"
chown "$user" "$s/secret.sqsh"
chmod 0000 "$s/secret.sqsh"
mkfifo "$s/fifo"
chmod 0644 "$s/fifo"
mkdir "$s/dir" "$s/closed"
echo x >"$s/closed/img.sqsh"
chmod 0700 "$s/closed"
python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$s/sock" ||
    fail "cannot make a socket"
ln -s /etc/shadow "$s/to-shadow"
ln -s "$s/nowhere" "$s/dangling"
ln -s "$s/loop" "$s/loop"
ln -s "$s/dir" "$s/to-dir"
blockdev=$(find /dev -maxdepth 1 -type b -print -quit)
[ -n "$blockdev" ] || blockdev=/dev/loop0

long_src="$MINICLUSTER_SHARED/$(head -c 5000 /dev/zero | tr '\0' a)"
long_name="$(head -c 300 /dev/zero | tr '\0' b)"
many=""
for i in $(seq 0 64); do many+="${many:+,}$s/img.sqsh:/nvme/$tok/m$i"; done

# ---------------------------------------------------------------- corpus --
# row VALUE REASON [SHOWN [FIRST]]: --stage-image=VALUE (after
# --stage-image=FIRST when given) must be refused with REASON (a substring of
# the stagehand line); SHOWN is how the value appears in the message (a
# prefix; default VALUE itself).
V=() R=() S=() F=()
row() { V+=("$1"); R+=("$2"); S+=("${3-$1}"); F+=("${4-}"); }

I="$s/img.sqsh"
# relative paths (F28)
row "img.sqsh" "source 'img.sqsh' is not an absolute path (relative paths are not accepted"
row "./img.sqsh:/nvme/$tok/x" "source './img.sqsh' is not an absolute path"
row "../img.sqsh:/nvme/$tok/x" "source '../img.sqsh' is not an absolute path"
# shellcheck disable=SC2088  # a literal "~" is the point
row "~/img.sqsh:/nvme/$tok/x" "source '~/img.sqsh' is not an absolute path"
row "$I:nvme/$tok/x" "destination 'nvme/$tok/x' is not an absolute path"
row "$I:./x" "destination './x' is not an absolute path"
row "$I,img2.sqsh" "source 'img2.sqsh' is not an absolute path (if the ',' before it is part of a path"
# '..' components
row "$MINICLUSTER_SHARED/../etc/passwd:/nvme/$tok/x" "source '$MINICLUSTER_SHARED/../etc/passwd': '..' components are not allowed"
row "$I:/nvme/../etc/$tok" "destination '/nvme/../etc/$tok': '..' components are not allowed"
row "$I:/nvme/$tok/../../etc/x" "'..' components are not allowed"
row "$I:/nvme/.." "destination '/nvme/..': '..' components are not allowed"
row "$I:/nvme/$tok/.." "'..' components are not allowed"
# empty parts
row "" "empty value (expected SRC[:DST])"
row "," "empty image (a stray ','?)"
row ",$I" "empty image (a stray ','?)"
row "$I," "empty image (a stray ','?)"
row "$I,,$I:/nvme/$tok/y" "empty image (a stray ','?)"
row ":/nvme/$tok/x" "empty source before ':'"
row ":" "empty source before ':'"
row "$I:" "empty destination after ':'"
row "$I:/nvme/$tok/x:/nvme/$tok/y" "more than one unescaped ':'"
# escapes
row "$I\\" "the value ends in a lone '\\'"
row "$I\\n:/nvme/$tok/x" "invalid escape '\\n'"
row "/data/a:b.sqsh" "destination 'b.sqsh' is not an absolute path: DST is where each node writes its copy, a full path under a directory the cluster allows (if the ':' is part of the source path, write it as '\\:': /data/a\\:b.sqsh)"
# paths that cannot name a file
row "$s/dir/:/nvme/$tok/x" "source '$s/dir/' ends in '/': it must name a file"
row "/" "source '/' ends in '/': it must name a file"
row "/.:/nvme/$tok/x" "source '/.' ends in '/': it must name a file"
# too long
row "$long_src" "the source path is too long (4096 bytes or more; PATH_MAX)" "$MINICLUSTER_SHARED/aaaa"
row "$I:/nvme/$tok/$long_name" "a component is longer than 255 bytes (NAME_MAX)" "$I:/nvme/$tok/bbbb"
row "$I:/nvme/$(for _ in $(seq 1 460); do printf 'abcdefgh/'; done)x" "the destination path is too long (4096 bytes or more; PATH_MAX)" "$I:/nvme/abcdefgh/"
row "$many" "more than 64 images in one job" "$I:/nvme/$tok/m0,"
# control bytes: refused, shown as \xHH
row "$MINICLUSTER_SHARED"$'/a\x01b.sqsh:/nvme/x' "control character (byte 0x01) in a path" "$MINICLUSTER_SHARED"'/a\x01b.sqsh:/nvme/x'
row "$MINICLUSTER_SHARED"$'/a\tb.sqsh' "control character (byte 0x09) in a path" "$MINICLUSTER_SHARED"'/a\x09b.sqsh'
row "$I:/nvme/$tok/a"$'\n'"b" "control character (byte 0x0a) in a path" "$I:/nvme/$tok/a\\x0ab"
row "$MINICLUSTER_SHARED"$'/\e[2J\e[Hfake.sqsh' "control character (byte 0x1b) in a path" "$MINICLUSTER_SHARED"'/\x1b[2J\x1b[Hfake.sqsh'
row "$MINICLUSTER_SHARED"$'/del\x7f.sqsh' "control character (byte 0x7f) in a path" "$MINICLUSTER_SHARED"'/del\x7f.sqsh'
row "$I:/nvme/$tok/"$'\r'"x" "control character (byte 0x0d) in a path" "$I:/nvme/$tok/\\x0dx"
# C1 controls in UTF-8 (U+009B is CSI to a terminal): refused as C0 ones are
row "$MINICLUSTER_SHARED"$'/a\xc2\x9b[31mx.sqsh' "control character (U+009B, bytes 0xc2 0x9b) in a path" "$MINICLUSTER_SHARED"'/a\xc2\x9b[31mx.sqsh'
row "$I:/nvme/$tok/"$'\xc2\x85'"x" "control character (U+0085, bytes 0xc2 0x85) in a path" "$I:/nvme/$tok/\\xc2\\x85x"
# bytes that are not UTF-8: legal in a path, but shown escaped
row "$MINICLUSTER_SHARED"$'/'"$tok"$'/a\xffb.sqsh:/nvme/x' "does not exist" "$MINICLUSTER_SHARED/$tok/a\\xffb.sqsh:/nvme/x"
row "$MINICLUSTER_SHARED"$'/'"$tok"$'/\xc3\x28.sqsh' "does not exist" "$MINICLUSTER_SHARED/$tok/\\xc3(.sqsh"
row "$MINICLUSTER_SHARED"$'/'"$tok"$'/\xed\xa0\x80.sqsh' "does not exist" "$MINICLUSTER_SHARED/$tok/\\xed\\xa0\\x80.sqsh"
# SRC: missing, unreadable, not a regular file (F17a, F17c, F18)
row "$s/missing.sqsh:/nvme/$tok/x" "source '$s/missing.sqsh' does not exist"
row "$s/a,b.sqsh:/nvme/$tok/x" "source 'b.sqsh' is not an absolute path (if the ',' before it is part of a path, write it as '\\,')"
row "$s/secret.sqsh:/nvme/$tok/x" "source '$s/secret.sqsh' is not readable by you: Permission denied"
row "$s/closed/img.sqsh:/nvme/$tok/x" "source '$s/closed/img.sqsh' is not readable by you: Permission denied"
row "/etc/shadow:/nvme/$tok/x" "source '/etc/shadow' is not readable by you: Permission denied"
row "$s/to-shadow:/nvme/$tok/x" "source '$s/to-shadow' is not readable by you: Permission denied"
row "$s/dangling:/nvme/$tok/x" "source '$s/dangling' does not exist"
row "$s/loop:/nvme/$tok/x" "cannot open source '$s/loop': Too many levels of symbolic links"
row "$I/x:/nvme/$tok/x" "cannot open source '$I/x': Not a directory"
row "$s/dir:/nvme/$tok/x" "source '$s/dir' is a directory, not a regular file"
row "$s/to-dir:/nvme/$tok/x" "source '$s/to-dir' is a directory, not a regular file"
row "$s/fifo:/nvme/$tok/x" "source '$s/fifo' is a FIFO, not a regular file"
row "$s/sock:/nvme/$tok/x" "source '$s/sock' is a socket, not a regular file"
row "/dev/zero:/nvme/$tok/x" "source '/dev/zero' is a character device, not a regular file"
row "/dev/null:/nvme/$tok/x" "source '/dev/null' is a character device, not a regular file"
row "/dev/urandom:/nvme/$tok/x" "source '/dev/urandom' is a character device, not a regular file"
row "$blockdev:/nvme/$tok/x" "source '$blockdev' is a block device, not a regular file"
# DST outside the allowed roots (F23)
row "$I:/tmp/$tok-x" "destination '/tmp/$tok-x' is not under a directory this cluster allows for staging (/nvme); /tmp and /dev/shm can be private to each job"
row "$I:/dev/shm/$tok-x" "/tmp and /dev/shm can be private to each job"
row "$I:/nvme2/$tok" "destination '/nvme2/$tok' is not under a directory this cluster allows for staging (/nvme)"
row "$I:/nvmex" "destination '/nvmex' is not under a directory this cluster allows for staging (/nvme)"
row "$I:/nvme" "destination '/nvme' is the allowed directory itself: give a file name inside it, e.g. /nvme/image.sqsh"
row "$I:/nvme/$tok/.x.stage.1.n1.1.tmp" "destination '/nvme/$tok/.x.stage.1.n1.1.tmp': names of the form .NAME.stage.*.tmp, .NAME.lock, .NAME.stagehand and .stagehand-marker.* are stagehand's own"
row "$I:/etc/$tok" "destination '/etc/$tok' is not under a directory this cluster allows for staging"
row "$I:/run/stagehand/$tok" "destination '/run/stagehand/$tok' is not under a directory this cluster allows"
row "$I:/home/$user/$tok" "is not under a directory this cluster allows for staging"
row "$I:/$tok" "destination '/$tok' is not under a directory this cluster allows for staging"
# DST equal to SRC, in any spelling
row "$I:$I" "destination '$I' is the source itself"
row "$I:$s//./img.sqsh" "destination '$I' is the source itself"
# a second value conflicting with the first (F27)
row "$s/fifo:/nvme/$tok/x" "destination '/nvme/$tok/x' specified multiple times with different sources ('$I' and '$s/fifo')" "" "$I:/nvme/$tok/x"
row "$I:/nvme/$tok/x/y" "destinations '/nvme/$tok/x' and '/nvme/$tok/x/y' overlap" "" "$I:/nvme/$tok/x"
row "$I:/nvme/$tok/a,$s/secret.sqsh:/nvme/$tok/a" "specified multiple times with different sources"
[ "${#V[@]}" -ge 60 ] || fail "corpus has only ${#V[@]} values"

# check CMD I OUT RC: the stagehand line for row I is in OUT, exit non-zero.
check() {
    local cmd=$1 i=$2 out=$3 rc=$4 shown=${S[$2]} line found=""
    [ -n "$shown" ] || shown=${V[$i]}
    [ "$rc" -ne 0 ] || fail "$cmd --stage-image=${S[$i]:-${V[$i]}}: exit 0: $out"
    [ "$rc" -ne 124 ] || fail "$cmd --stage-image=${V[$i]}: hung"
    while IFS= read -r line; do
        case "$line" in
            "$cmd: error: stagehand: --stage-image=$shown"*)
                [[ "$line" == *"${R[$i]}"* ]] && found=1 ;;
        esac
    done <<<"$out"
    [ -n "$found" ] || fail "$cmd row $i: expected a line
  $cmd: error: stagehand: --stage-image=$shown...: ...${R[$i]}...
got:
$out"
    case "$out" in
        *"Submitted batch job"* | *"Granted job allocation"* | *"queued and waiting"* | *"has been allocated"*)
            fail "$cmd row $i: a job was created: $out" ;;
    esac
    # the value reaches the terminal only escaped: not repeated raw by
    # Slurm's "Invalid --stage-image argument" line, no ESC or CSI byte
    case "$out" in
        *"Invalid --stage-image argument"* | *$'\e'* | *$'\xc2\x9b'*)
            fail "$cmd row $i: the value was shown raw: $(printf '%q' "$out")" ;;
    esac
}

# The three commands of a row run at once (each is refused in its own
# process, before any request to slurmctld); their outputs are checked in
# order afterwards.
start=$SECONDS
runs=0
rdir=$s/runs # (removed with $s)
mkdir "$rdir" || fail "mkdir $rdir"
declare -A pid
for i in "${!V[@]}"; do
    extra=()
    [ -n "${F[$i]}" ] && extra=(--stage-image="${F[$i]}")
    for cmd in sbatch srun salloc; do
        case "$cmd" in
            sbatch) as_user timeout 30 sbatch -J "$tag" -N1 -o /dev/null "${extra[@]}" \
                        --stage-image="${V[$i]}" --wrap=true ;;
            srun) as_user timeout 30 srun -J "$tag" -N1 "${extra[@]}" \
                      --stage-image="${V[$i]}" true ;;
            salloc) as_user timeout 30 salloc -J "$tag" -N1 "${extra[@]}" \
                        --stage-image="${V[$i]}" true ;;
        esac >"$rdir/$cmd.out" 2>&1 &
        pid[$cmd]=$!
    done
    for cmd in sbatch srun salloc; do
        rc=0
        wait "${pid[$cmd]}" || rc=$?
        check "$cmd" "$i" "$(cat "$rdir/$cmd.out")" "$rc"
        runs=$((runs + 1))
    done
done
# the option without a value at all
out=$(as_user timeout 30 sbatch -J "$tag" -N1 -o /dev/null --wrap=true --stage-image 2>&1) &&
    fail "sbatch --stage-image without a value was accepted: $out"
created=$(jobs_named "$tag")
[ -z "$created" ] || fail "jobs were created for rejected values: $created"
echo "ok: ${#V[@]} values x 3 commands ($runs runs) refused with the value and reason, no job ($((SECONDS - start)) s)"

# ------------------------------------------------- plugstack arguments ----
# A private slurm.conf whose PlugStackConfig is a copy of the cluster's with
# one argument changed; only sbatch/srun read it (plugin init, allocator
# side). Each must be refused with the reason, and other jobs still run.
pdir=$(mktemp -d /tmp/stagehand-$tok-conf.XXXXXX) || fail "mktemp"
chmod 0755 "$pdir"
trap 'cleanup; rm -rf "$pdir"' EXIT
grep -q '^PlugStackConfig=' "$SLURM_CONF" || skip "no PlugStackConfig= in $SLURM_CONF"
sed "s|^PlugStackConfig=.*|PlugStackConfig=$pdir/plugstack.conf|" "$SLURM_CONF" >"$pdir/slurm.conf"
chmod 0644 "$pdir/slurm.conf"
base_line=$(grep '^required .*stagehand.so' "$conf_dir/plugstack.conf")
# conf ARGS-SED REASON: the plugstack line edited by ARGS-SED (a sed
# expression) must make sbatch refuse a good value with REASON.
conf() {
    local edit=$1 reason=$2 out
    sed "$edit" <<<"$base_line" >"$pdir/plugstack.conf"
    chmod 0644 "$pdir/plugstack.conf"
    [ "$(cat "$pdir/plugstack.conf")" != "$base_line" ] || fail "sed '$edit' changed nothing"
    out=$(SLURM_CONF=$pdir/slurm.conf as_user timeout 30 sbatch -J "$tag" -N1 -o /dev/null \
              --stage-image="$I:/nvme/$tok/x" --wrap=true 2>&1) &&
        fail "plugstack '$(cat "$pdir/plugstack.conf")': job accepted: $out"
    grep -F -- "sbatch: error: stagehand: --stage-image=$I:/nvme/$tok/x: stagehand is misconfigured on this cluster: " <<<"$out" |
        grep -qF -- "$reason" ||
        fail "plugstack edit '$edit': expected reason '$reason', got: $out"
}
ncfg=0
c() { conf "$@"; ncfg=$((ncfg + 1)); }
c 's|$| bogus_key=1|' "unknown key 'bogus_key' in 'bogus_key=1'"
c 's|$| timeout|' "'timeout': expected key=value"
c 's|$| =5|' "'=5': expected key=value"
c 's|$| fanout=|' "fanout=: empty value"
c 's|allowed_dest=/nvme|allowed_dest=nvme|' "allowed_dest=nvme: 'nvme' is not an absolute path"
c 's|allowed_dest=/nvme|allowed_dest=/|' "allowed_dest=/: '/' would allow every path"
c 's|allowed_dest=/nvme|allowed_dest=/nvme::/scratch|' "empty directory in the list"
c 's|allowed_dest=/nvme|allowed_dest=/nvme/../etc|' "'..' components are not allowed"
c 's|allowed_dest=/nvme ||' "allowed_dest is required"
c 's|$| allowed_dest=/scratch|' "allowed_dest=/scratch: allowed_dest is given more than once"
c 's|$| default_dest=/tmp/%u|' "default_dest=/tmp/%u: '/tmp/user' is not under allowed_dest"
c 's|$| default_dest=/nvme/%x|' "only %u (user name) and %% may follow '%'"
c 's|$| default_dest=stage|' "default_dest=stage: not an absolute path"
c 's|$| port_base=0|' "port_base=0: must be between 1 and 65535"
c 's|$| port_base=65000 port_range=1000|' "port_base=65000 port_range=1000: ports beyond 65535"
c 's|$| port_range=0|' "port_range=0: must be between 1 and 65535"
c 's|$| fanout=-1|' "fanout=-1: expected a decimal number"
c 's|$| fanout=0x10|' "fanout=0x10: expected a decimal number"
c 's|$| segment_size=0|' "segment_size=0: must be more than 0 and at most 1G"
c 's|$| segment_size=2G|' "segment_size=2G: must be more than 0 and at most 1G"
c 's|$| segment_size=lots|' "segment_size=lots: expected a size such as 8M or 64MiB"
c 's|$| pipeline_depth=1000|' "pipeline_depth=1000: must be between 1 and 64"
c 's|timeout=120s|timeout=0s|' "timeout=0s: must be between 1s and 24h"
c 's|timeout=120s|timeout=soon|' "timeout=soon: expected a duration such as 600s or 10m"
c 's|timeout=120s|timeout=25h|' "timeout=25h: must be between 1s and 24h"
c 's|timeout=120s|timeout=2d|' "timeout=2d: expected a duration such as 600s or 10m"
c 's|$| check=sometimes|' "check=sometimes: expected meta, content, size or never"
c 's|$| hash=md5|' "hash=md5: expected xxh3 or sha256"
c 's|$| on_node_fault=reboot|' "on_node_fault=reboot: expected fail or drain"
c 's|$| submit_check=maybe|' "submit_check=maybe: expected yes or no"
c 's|$| verbose=1|' "verbose=1: expected yes or no"
c 's|$| agent=stagehand-agent|' "agent=stagehand-agent: 'stagehand-agent' is not an absolute path"
c 's|$| engine=/opt/../bin/x|' "'..' components are not allowed"
c "s|\$| mpi_env=/etc/$(printf 'a\001b')|" "control character (byte 0x01) in a path"
# under the last bad config, a job without --stage-image runs quietly
out=$(SLURM_CONF=$pdir/slurm.conf as_user timeout 60 srun -J "$tag" -N1 echo plain 2>&1) ||
    fail "a job without --stage-image failed under a bad plugstack: $out"
[ "$out" = plain ] || fail "a job without --stage-image printed more than its output: $out"
out=$(SLURM_CONF=$pdir/slurm.conf as_user timeout 30 salloc -J "$tag" -N1 \
          --stage-image="$I:/nvme/$tok/x" true 2>&1) && fail "salloc accepted under a bad plugstack: $out"
grep -qF "salloc: error: stagehand: --stage-image=$I:/nvme/$tok/x: stagehand is misconfigured on this cluster: " <<<"$out" ||
    fail "salloc under a bad plugstack: $out"
echo "ok: $ncfg bad plugstack arguments refused with the reason; other jobs run"

# ------------------------------------------ values only a node can judge ---
# Set up DST's surroundings on every node, as the user where a user could
# do it and as root for another user's files (nobody).
make_user_file "$shared.img" 1 || fail "cannot create $shared.img"
mkdir -p "$shared" && chown "$user" "$shared"
cp "$shared.img" "$MINICLUSTER_SHARED"$'/'"$tok"$'/img\xff \'$(id)\';"x.sqsh' && chown "$user" "$shared"/img*
cp "$shared.img" "$shared/with:colon,comma.sqsh" && chown "$user" "$shared/with:colon,comma.sqsh"
for n in $MINICLUSTER_NODES; do
    on_node_as_user "$n" sh -c "
        mkdir -p /nvme/$tok/u /nvme/$tok/ww /tmp/$tok-out &&
        echo precious >/tmp/$tok-out/planted &&
        ln -s /tmp/$tok-out /nvme/$tok/u/link &&
        ln -s /tmp/$tok-out/planted /nvme/$tok/u/planted &&
        echo file >/nvme/$tok/u/afile && mkdir /nvme/$tok/u/isdir &&
        chmod 0777 /nvme/$tok/ww" || fail "$n: user set-up failed"
    on_node "$n" sh -c "
        echo theirs >/nvme/$tok-theirs && chown nobody /nvme/$tok-theirs &&
        echo roots >/nvme/$tok-roots && ln -s /nvme/$tok-roots /nvme/$tok-rootlink &&
        mkdir /nvme/$tok-nobody && chown nobody /nvme/$tok-nobody" || fail "$n: root set-up failed"
done
k=$(echo "$MINICLUSTER_NODES" | wc -w)
read -ra node_list <<<"$MINICLUSTER_NODES"
all_nodes=$(printf '%s\n' "${node_list[@]}" | paste -sd, - | sed 's/,/, /g')
img="$shared.img"
want=$(sha256sum "$img" | cut -d' ' -f1)

# prolog_case NAME DST REASON: an sbatch job on every node with DST fails at
# step start with REASON in its output, the batch script does not run, no
# node is drained. Jobs run concurrently; results are checked afterwards.
P_NAME=() P_DST=() P_REASON=() P_ID=()
prolog_case() {
    local id
    id=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$shared/$1.out" \
             --stage-image="$img:$2" --wrap 'echo script-ran') || fail "$1: sbatch refused: $id"
    P_NAME+=("$1") P_DST+=("$2") P_REASON+=("$3") P_ID+=("$id")
}
prolog_case parent-symlink "/nvme/$tok/u/link/img" \
    "destination /nvme/$tok/u/link/img: /nvme/$tok/u/link is a symbolic link (staging never follows links below the allowed directory /nvme)"
prolog_case parent-file "/nvme/$tok/u/afile/img" \
    "destination /nvme/$tok/u/afile/img: /nvme/$tok/u/afile is not a directory"
prolog_case dst-dir "/nvme/$tok/u/isdir" "destination /nvme/$tok/u/isdir is a directory"
prolog_case dst-theirs "/nvme/$tok-theirs" \
    "destination /nvme/$tok-theirs belongs to another user (uid 65534) and its directory is sticky: it cannot be replaced"
# the new-user trial's case: root's file (or link) in the sticky /nvme is as
# much beyond replacing as another user's; refused before the copy, not at
# publish
prolog_case dst-roots "/nvme/$tok-roots" \
    "destination /nvme/$tok-roots belongs to another user (uid 0) and its directory is sticky: it cannot be replaced"
prolog_case dst-rootlink "/nvme/$tok-rootlink" \
    "destination /nvme/$tok-rootlink (a symbolic link) belongs to another user (uid 0) and its directory is sticky: it cannot be replaced"
prolog_case dir-theirs "/nvme/$tok-nobody/img" \
    "destination /nvme/$tok-nobody/img: directory /nvme/$tok-nobody belongs to another user (uid 65534)"
prolog_case world-writable "/nvme/$tok/ww/img" \
    "destination /nvme/$tok/ww/img: directory /nvme/$tok/ww is writable by every user (mode 0777)"

# F17b: a DST the user planted as a symlink is replaced, never followed.
planted=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$shared/planted.out" \
              --stage-image="$img:/nvme/$tok/u/planted" --wrap 'echo script-ran') || fail "sbatch planted"
# odd but legal names stage correctly (grammar escapes, quotes, non-UTF-8)
odd1=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$shared/odd1.out" \
           --stage-image="$MINICLUSTER_SHARED"$'/'"$tok"$'/img\xff \'$(id)\';"x.sqsh:/nvme/'"$tok"$'/d\xfe \'q\'/i"mg' \
           --wrap 'ls "$STAGEHAND_IMAGE" >/dev/null && echo script-ran') || fail "sbatch odd1"
odd2=$(as_user sbatch --parsable -J "$tag" -N"$k" -o "$shared/odd2.out" \
           --stage-image="$shared/with\\:colon\\,comma.sqsh:/nvme/$tok/c\\:d\\,e" \
           --wrap 'test "$STAGEHAND_IMAGE_0" = "/nvme/'"$tok"'/c:d,e" && echo script-ran') || fail "sbatch odd2"

for j in "${!P_ID[@]}"; do
    st=$(wait_job_end "${P_ID[$j]}" 90)
    o="$shared/${P_NAME[$j]}.out"
    [ "$st" = FAILED ] || fail "${P_NAME[$j]}: job ${P_ID[$j]} ended $st, expected FAILED: $(cat "$o")"
    grep -qF "stagehand: --stage-image failed: image ${P_DST[$j]}: " "$o" ||
        fail "${P_NAME[$j]}: no failure line in the job output: $(cat "$o")"
    # every node has the same reason: said once, naming them all
    grep -qF "$all_nodes: ${P_REASON[$j]}" "$o" ||
        fail "${P_NAME[$j]}: '$all_nodes: ${P_REASON[$j]}' not in: $(cat "$o")"
    ! grep -q script-ran "$o" || fail "${P_NAME[$j]}: the batch script ran without its image"
    echo "ok: ${P_NAME[$j]}: job failed at step start naming each node and the reason"
done
for j in $planted $odd1 $odd2; do
    st=$(wait_job_end "$j" 90)
    [ "$st" = COMPLETED ] || fail "job $j ended $st: $(cat "$shared"/*.out)"
done
{ grep -q script-ran "$shared/odd1.out" && grep -q script-ran "$shared/odd2.out"; } ||
    fail "odd names: $(cat "$shared/odd1.out" "$shared/odd2.out")"
for n in $MINICLUSTER_NODES; do
    [ "$(node_sha "$n" "/nvme/$tok/u/planted")" = "$want" ] || fail "$n: planted symlink not replaced by the image"
    on_node "$n" test ! -L "/nvme/$tok/u/planted" || fail "$n: DST is still a symlink"
    [ "$(on_node "$n" cat "/tmp/$tok-out/planted")" = precious ] || fail "$n: the symlink's target was written"
    left=$(on_node "$n" ls -A "/tmp/$tok-out")
    [ "$left" = planted ] || fail "$n: files written through the parent symlink: $left"
    for f in "/nvme/$tok/u/afile" "/nvme/$tok-theirs" "/nvme/$tok-roots"; do
        [ "$(on_node "$n" stat -c %s "$f")" -lt 100 ] || fail "$n: $f was replaced"
    done
    on_node "$n" test ! -e "/nvme/$tok-nobody/img" -a ! -e "/nvme/$tok/ww/img" -a ! -e "/nvme/$tok/u/isdir/img" ||
        fail "$n: an image was written where it was refused"
    [ "$(on_node "$n" sh -c "cat /nvme/$tok/c:d,e" | sha256sum | cut -d' ' -f1)" = "$want" ] ||
        fail "$n: /nvme/$tok/c:d,e differs"
    [ "$(on_node "$n" sh -c "cat /nvme/$tok/d*/i*mg" | sha256sum | cut -d' ' -f1)" = "$want" ] ||
        fail "$n: the non-UTF-8 DST differs"
done
echo "ok: planted symlink replaced by rename (target untouched); odd legal names staged"

# the same node-side refusal through srun and salloc
out=$(as_user timeout 60 srun -J "$tag" -N"$k" --stage-image="$img:/nvme/$tok/u/link/img2" echo task-ran 2>&1) &&
    fail "srun with a parent symlink succeeded: $out"
{ grep -qF "stagehand: --stage-image failed: image /nvme/$tok/u/link/img2: " <<<"$out" &&
    grep -qF "is a symbolic link" <<<"$out"; } || fail "srun: message missing: $out"
! grep -q task-ran <<<"$out" || fail "srun: a task ran without its image"
out=$(as_user timeout 60 salloc -J "$tag" -N"$k" --stage-image="$img:/nvme/$tok-nobody/img3" \
          srun echo task-ran 2>&1) && fail "salloc with another user's directory succeeded: $out"
grep -qF "directory /nvme/$tok-nobody belongs to another user (uid 65534)" <<<"$out" ||
    fail "salloc: message missing: $out"
! grep -q task-ran <<<"$out" || fail "salloc: a task ran without its image"
echo "ok: srun and salloc fail at step start with the node's reason"

# nothing written outside the allowed roots, anywhere
for n in login $MINICLUSTER_NODES; do
    if [ "$n" = login ]; then
        found=$(find /etc /home /var/tmp /dev/shm /run -xdev -name "*$tok*" 2>/dev/null | head -5)
    else
        found=$(on_node "$n" sh -c "find /etc /home /var/tmp /dev/shm /run /tmp -xdev -name '*$tok*' 2>/dev/null | grep -v '^/tmp/$tok-out' | head -5")
    fi
    [ -z "$found" ] || fail "$n: written outside the allowed roots: $found"
done
assert_no_temp_files "/nvme/$tok/u/x"
# every job's runtime state at once: one look per node (the job ids as one
# pattern), not one per job and node
ids=("${P_ID[@]}" "$planted" "$odd1" "$odd2")
assert_runtime_gone "($(IFS='|'; echo "${ids[*]}"))"
assert_no_drain
echo "ok: nothing outside the allowed roots, no runtime state left, no node drained"

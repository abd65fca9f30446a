#!/usr/bin/env bash
# Issue 34 item 3: one producer per cache entry and node (fill locks,
# doc/design.md §2 step 11). Jobs of one node each, on the same node, stage
# the same new SRC without DST into the cache (cache=DIR):
#  1. three jobs of two users at once: the first one's engine waits at a
#     gate (a wrapper) as it starts, so the other two certainly arrive while
#     it copies; they wait for it (the node's slurmd log says so, naming the
#     producer), no second engine starts, and once the producer goes on all
#     three complete: one "copied", two "current", one entry with SRC's
#     bytes, the same inode in all three jobs, no fill lock file left;
#  2. the producer of a second SRC is cancelled while a waiter waits for it
#     (its engine at the gate): the waiter takes over, copies ("copied") and
#     completes; one entry, SRC's bytes;
#  3. a warm job (the entry exists) takes no fill lock and waits for
#     nobody: it completes "current" while another job's copy of a third
#     SRC waits at the gate and holds that SRC's fill lock;
#  5. (while 3's producer is held) a producer of a fourth SRC killed
#     (SIGKILL of its staging process: no release) leaves its fill lock
#     file, and the job's epilog removes it (its log says so), while 3's
#     producer, alive, keeps its own until its release and then completes;
#  6. a job of two nodes (join_timeout=10s here) waits for a producer of one
#     node on the node they share, whose adoption is held (a wrapper of
#     stagehand-cache), at most join_timeout less 5 s, then copies on its
#     own and completes; once the producer goes on it completes too: one
#     entry on each node, SRC's bytes, the same inode in both jobs;
#  7. under on_node_fault=drain (the slurmds restarted with it) a second job
#     does not wait for a producer held at the gate: its own engine starts
#     and it completes while the producer's is still held, its log line says
#     it copied without waiting (no "waiting" line); the producer then
#     completes on the same entry;
#  4. (STAGEHAND_TEST_FULL=1 only, as 8: they restart the slurmds and wait
#     for deadlines) with timeout=15s, a producer held at the gate fails at
#     its deadline while a job waits for it: that job takes over, copies (one
#     engine start) and completes; no node is drained;
#  8. (STAGEHAND_TEST_FULL=1 only) with timeout=15s, a job of one node waits
#     for a producer whose adoption is held (past its bound: its copy is
#     done, its seal and hash go on) for timeout= plus 10 s, then fails with
#     the message naming SRC, the producer and the node, its batch script
#     not run; nothing of it is left (no job directory, no entry, no drain);
#     the producer then completes.
# shellcheck source=lib.sh disable=SC2016  # single-quoted scripts run on the node
source "$(dirname "$0")/lib.sh"
# shellcheck source=faultlib.sh
source "$(dirname "$0")/faultlib.sh"

other=$MINICLUSTER_OTHER_USER
id -u "$other" >/dev/null 2>&1 || skip "no second user $other on this cluster"
node=${MINICLUSTER_NODES%% *}
cache=/nvme/stagehand-cache
tok=cfill$$
tag=cache-fill.$$
dir=$MINICLUSTER_SHARED/$tok
node2=$(echo "$MINICLUSTER_NODES" | awk '{ print $2 }')
engine="$STAGEHAND_PREFIX/bin/stagehand-bcast"
[ -x "$engine" ] || fail "$engine not installed"
tool="$STAGEHAND_PREFIX/sbin/stagehand-cache"
[ -x "$tool" ] || fail "$tool not installed"
plugstack_save
cleanup() {
    on_node "$node" touch "/tmp/$tok.go" "/tmp/$tok.ago"
    unwrap_on_node "$node" "$engine"
    unwrap_on_node "$node" "$tool"
    on_node "$node" sh -c "rm -f /tmp/$tok.*"
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    plugstack_restore
    rm -rf "$dir" "$MINICLUSTER_SHARED/$tok".*.out
    for n in $MINICLUSTER_NODES; do on_node "$n" rm -rf "$cache"; done
}
trap cleanup EXIT

mkdir -p "$dir"
chown "$MINICLUSTER_USER:$(id -gn "$other")" "$dir"
chmod 0750 "$dir"
for f in a b c d e g h i; do
    as_user sh -c "head -c 4000000 /dev/urandom >'$dir/$f.sqsh' && chmod 0644 '$dir/$f.sqsh'" ||
        fail "cannot create the sources"
done
on_node "$node" rm -rf "$cache"
# join_timeout: the wait of a job of several nodes (case 6); jobs of one
# node do not join
plugstack_add cache=$cache verbose=yes join_timeout=10s

# submit USER NAME SRC SCRIPT: a job of one node on $node, output $tok.NAME.out
submit() {
    run_as "$1" sbatch --parsable -J "$tag" -N1 -w "$node" -o "$MINICLUSTER_SHARED/$tok.$2.out" \
        --stage-image="$3" --wrap "$4"
}
probe='echo "img $(stat -c "%i %U %a" "$STAGEHAND_IMAGE") $(sha256sum <"$STAGEHAND_IMAGE" | cut -d" " -f1)"'
out_of() { cat "$MINICLUSTER_SHARED/$tok.$1.out" 2>/dev/null; }
# On $node the engine waits at a gate (/tmp/$tok.go; a job with a pass,
# /tmp/$tok.pass.<jobid>, goes through, one with a block,
# /tmp/$tok.block.<jobid>, never) and logs the job id of each start in
# /tmp/$tok.starts: the producer's copy cannot end before the test has seen
# the other jobs wait, however fast the host.
on_node "$node" sh -c "cp '$engine' /tmp/$tok.engine && chmod 755 /tmp/$tok.engine && : >/tmp/$tok.starts && chmod 666 /tmp/$tok.starts" ||
    fail "cannot copy the engine on $node"
wrap_on_node "$node" "$engine" "echo \"\$SLURM_JOBID\" >>/tmp/$tok.starts
while [ -e /tmp/$tok.block.\$SLURM_JOBID ] || { [ ! -e /tmp/$tok.go ] && [ ! -e /tmp/$tok.pass.\$SLURM_JOBID ]; }; do sleep 0.1; done
exec /tmp/$tok.engine \"\$@\"" || fail "cannot wrap the engine on $node"
gate_open() { on_node "$node" touch "/tmp/$tok.go"; }
gate_close() { on_node "$node" rm -f "/tmp/$tok.go"; }
starts_of() { on_node "$node" grep -cx "$1" "/tmp/$tok.starts"; }
# On $node the adoption (stagehand-cache adopt, root's, after the copy, with
# the fill lock still held) of a job listed in /tmp/$tok.hold waits at a
# gate of its own (/tmp/$tok.ago) and logs the job id in /tmp/$tok.adopts:
# a producer whose copy is done but whose fill goes on (a long hash).
on_node "$node" sh -c "cp '$tool' /tmp/$tok.tool && chmod 755 /tmp/$tok.tool && : >/tmp/$tok.hold && : >/tmp/$tok.adopts" ||
    fail "cannot copy stagehand-cache on $node"
wrap_on_node "$node" "$tool" "PATH=/usr/sbin:/usr/bin:/sbin:/bin
in=\$(cat)
for j in \$(cat /tmp/$tok.hold); do
    case \"\$in\" in *\"/job/\$j/\"*)
        echo \"\$j\" >>/tmp/$tok.adopts
        while [ ! -e /tmp/$tok.ago ]; do sleep 0.1; done ;;
    esac
done
printf '%s\\n' \"\$in\" | exec /tmp/$tok.tool \"\$@\"" || fail "cannot wrap stagehand-cache on $node"
# hold_adopt JOB: job JOB's adoption on $node waits at the gate (closed here)
hold_adopt() { on_node "$node" sh -c "rm -f /tmp/$tok.ago && echo $1 >>/tmp/$tok.hold"; }
# Wait (60 s) until job @1's adoption on $node is held at the gate.
wait_adopt_held() {
    for _ in $(seq 1 300); do
        on_node "$node" grep -qx "$1" "/tmp/$tok.adopts" && return 0
        sleep 0.2
    done
    fail "job $1's adoption never came to the gate on $node: $(out_of "${2:-}")"
}
# Wait (60 s) until job @1's engine has started on $node (at the gate).
wait_started() {
    for _ in $(seq 1 300); do
        [ "$(starts_of "$1")" -ge 1 ] && return 0
        sleep 0.2
    done
    fail "no engine of job $1 started on $node: $(out_of "${2:-}")"
}
# Wait (60 s) until $node's log from offset @1 says that job @2 waits for job @3.
wait_waiting() { # offset waiter producer
    for _ in $(seq 1 300); do
        log_since "$node" "$1" | grep -q "job $2: .*waiting for job $3's copy into the node image cache" &&
            return 0
        sleep 0.2
    done
    fail "job $2 never waited for job $3: $(log_since "$node" "$1" | grep -i "job $2" | tail -5)"
}
# The entries in $node's cache (dot names, e.g. fill locks, are none).
entry_count() { on_node "$node" sh -c "ls '$cache/entries' | wc -l"; }
# begin NAME SOURCE: src, its digest want and the log offset off for a case;
# job NAME of the test user stages SRC with its engine held at the gate
# (closed here); its id in held.
begin() {
    src=$dir/$2
    want=$(sha256sum <"$src" | cut -d' ' -f1)
    off=$(log_offset "$node")
    gate_close
    held=$(submit "$MINICLUSTER_USER" "$1" "$src" "$probe") || fail "sbatch: $held"
    wait_started "$held" "$1"
}

# The fill lock files in $node's cache, one a line.
fill_locks() { on_node "$node" sh -c "ls -A '$cache/entries' | grep '^\\.fill-' || true"; }
# Fail unless nothing but entries is left in $node's cache (no fill lock, no
# temp file, no ".evict-*").
assert_only_entries() {
    left=$(on_node "$node" sh -c "ls -A '$cache/entries' | grep '^\\.' || true")
    [ -z "$left" ] || fail "left in $cache/entries $1: $left"
}
# The engine processes (the gate's wrapper too: the engine's environment)
# of job @1 on $node.
engines_of() {
    on_node "$node" sh -c 'for p in $(pgrep --ns $$ --nslist net -u "$2"); do
            e=$( { tr "\0" "\n" </proc/$p/environ; } 2>/dev/null)
            echo "$e" | grep -qx "SLURM_JOBID=$1" && echo "$e" | grep -q "^STAGEHAND_BCAST_SOURCE=" &&
                echo "$p"
        done; true' sh "$1" "$MINICLUSTER_USER"
}

# assert_one_entry CASE NAME...: the images of the jobs NAME... (their
# output's names) are one file (the first's inode), root's, 0444, with
# SRC's bytes ($want), and $node holds one entry more than $n_entries.
assert_one_entry() {
    local what=$1 first line i
    shift
    first=$(out_of "$1" | awk '$1 == "img" { print $2 }')
    for i in "$@"; do
        line=$(out_of "$i" | grep '^img ')
        [ "$line" = "img $first root 444 $want" ] ||
            fail "job $i of $what sees '$line' (want 'img $first root 444 $want')"
    done
    [ "$(entry_count)" = $((n_entries + 1)) ] ||
        fail "entries on $node after $what: $(on_node "$node" ls -la "$cache/entries")"
}

# 1. three jobs at once: one copies, two wait and share
begin 1 a.sqsh
j1=$held
j2=$(submit "$other" 2 "$src" "$probe") || fail "sbatch: $j2"
j3=$(submit "$MINICLUSTER_USER" 3 "$src" "$probe") || fail "sbatch: $j3"
wait_waiting "$off" "$j2" "$j1"
wait_waiting "$off" "$j3" "$j1"
sleep 1 # a second engine would have started by now
for j in "$j2" "$j3"; do
    [ "$(starts_of "$j")" = 0 ] || fail "job $j started an engine while job $j1 copied"
done
gate_open
for j in "$j1" "$j2" "$j3"; do
    st=$(wait_job_end "$j" 120)
    [ "$st" = COMPLETED ] || fail "job $j ended $st: $(out_of 1; out_of 2; out_of 3)"
done
grep -q ": 1 copied, 0 current of 1 nodes" <<<"$(out_of 1)" || fail "job $j1's summary: $(out_of 1)"
for i in 2 3; do
    grep -q "stagehand: $cache/job/.*/a.sqsh: current on" <<<"$(out_of $i)" ||
        fail "job $i of 3's summary (want current): $(out_of $i)"
    grep -q "[1-9] copied" <<<"$(out_of $i)" && fail "job $i of 3 copied: $(out_of $i)"
done
i1=$(out_of 1 | awk '$1 == "img" { print $2 }')
for i in 1 2 3; do
    line=$(out_of $i | grep '^img ')
    [ "$line" = "img $i1 root 444 $want" ] || fail "job $i of 3 sees '$line' (want 'img $i1 root 444 $want')"
done
for j in "$j2" "$j3"; do
    [ "$(starts_of "$j")" = 0 ] || fail "job $j started an engine"
done
[ "$(entry_count)" = 1 ] || fail "entries after three jobs: $(on_node "$node" ls -la "$cache/entries")"
echo "one copy for three jobs: $j1 copied, $j2 and $j3 waited and shared it"

# 2. the producer is cancelled while another job waits: that one takes over
begin 4 b.sqsh
j4=$held
j5=$(submit "$other" 5 "$src" "$probe") || fail "sbatch: $j5"
wait_waiting "$off" "$j5" "$j4"
scancel "$j4"
st=$(wait_job_end "$j4" 60)
[ "$st" = CANCELLED ] || fail "job $j4 ended $st after its cancel"
gate_open
st=$(wait_job_end "$j5" 120)
[ "$st" = COMPLETED ] || fail "job $j5 ended $st after it took over: $(out_of 5)"
grep -q ": 1 copied, 0 current of 1 nodes" <<<"$(out_of 5)" || fail "job $j5's summary: $(out_of 5)"
[ "$(out_of 5 | grep '^img ' | awk '{ print $3, $4, $5 }')" = "root 444 $want" ] ||
    fail "job $j5's image: $(out_of 5)"
[ "$(entry_count)" = 2 ] || fail "entries after the takeover: $(on_node "$node" ls -la "$cache/entries")"
echo "takeover: job $j4 cancelled while it copied, job $j5 copied instead"

# 3. a warm job passes a held at the gate fill of another source
begin 6 c.sqsh
j6=$held
t0=$SECONDS
j7=$(submit "$other" 7 "$dir/a.sqsh" "$probe") || fail "sbatch: $j7"
st=$(wait_job_end "$j7" 60)
[ "$st" = COMPLETED ] || fail "warm job $j7 ended $st while job $j6's fill was held at the gate: $(out_of 7)"
grep -q "stagehand: $cache/job/$j7/a.sqsh: current on" <<<"$(out_of 7)" || fail "job $j7's summary: $(out_of 7)"
log_since "$node" "$off" | grep -q "job $j7: .*waiting" && fail "warm job $j7 waited"
echo "warm job $j7 completed in $((SECONDS - t0)) s while job $j6's fill was held at the gate"
# 5. while job $j6 (alive, at the gate) holds its fill lock, the staging
# process of a producer of another SRC is killed (SIGKILL: no release): its
# fill lock file stays until that job's epilog removes it; job $j6's stays
live=$(fill_locks)
[ "$(grep -c . <<<"$live")" = 1 ] || fail "fill locks while job $j6 copies: $live"
begin 10 e.sqsh
j10=$held
[ "$(fill_locks | grep -c .)" = 2 ] || fail "fill locks while jobs $j6 and $j10 copy: $(fill_locks)"
stager=$(on_node "$node" sh -c 'read -r p t <"/run/stagehand/$1.agent" && [ "$(cat /proc/$p/comm)" = stagehand-stage ] && echo "$p"' sh "$j10") ||
    fail "no staging process of job $j10 on $node"
on_node "$node" touch "/tmp/$tok.block.$j10"
on_node "$node" kill -9 "$stager" || fail "cannot kill job $j10's staging process $stager"
st=$(wait_job_end "$j10" 60)
[ "$st" = FAILED ] || fail "job $j10 ended $st after its staging process was killed: $(out_of 10)"
wait_log_line "$node" "$off" "job $j10: removed 1 fill lock of the node image cache whose staging ended without letting go" ||
    fail "job $j10's epilog did not remove its fill lock: $(log_since "$node" "$off" | grep "job $j10" | tail -5); left: $(fill_locks)"
[ "$(fill_locks)" = "$live" ] || fail "fill locks after job $j10's epilog: '$(fill_locks)' (want job $j6's alone: $live)"
# job $j6 goes on; job $j10's engine stays at the gate until its agent ends
# it (looked for after case 7)
on_node "$node" touch "/tmp/$tok.pass.$j6"
st=$(wait_job_end "$j6" 120)
[ "$st" = COMPLETED ] || fail "job $j6 ended $st: $(out_of 6)"
grep -q ": 1 copied, 0 current of 1 nodes" <<<"$(out_of 6)" || fail "job $j6's summary: $(out_of 6)"
assert_only_entries "after job $j6's release"
echo "a killed producer's fill lock: job $j10's epilog removed it, job $j6's (alive) stayed until its release"

# 6. a job of two nodes waits for a producer of one node at most
# join_timeout (10 s) less 5 s, then copies on its own: one entry
if [ -n "$node2" ]; then
    n_entries=$(entry_count)
    begin 12 g.sqsh
    j12=$held
    hold_adopt "$j12"
    gate_open
    wait_adopt_held "$j12" 12
    j13=$(run_as "$MINICLUSTER_USER" sbatch --parsable -J "$tag" -N2 -w "$node,$node2" \
              -o "$MINICLUSTER_SHARED/$tok.13.out" --stage-image="$src" --wrap "$probe") ||
        fail "sbatch: $j13"
    wait_waiting "$off" "$j13" "$j12"
    st=$(wait_job_end "$j13" 120)
    [ "$st" = COMPLETED ] || fail "job $j13 of two nodes ended $st: $(out_of 13)"
    log_since "$node" "$off" | grep -q "job $j13: .*g.sqsh: job $j12 still copies it into the node image cache after 5 s: copied without it" ||
        fail "job $j13 did not copy on its own after its wait: $(log_since "$node" "$off" | grep "job $j13" | tail -5)"
    grep -q ": 2 copied, 0 current of 2 nodes" <<<"$(out_of 13)" || fail "job $j13's summary: $(out_of 13)"
    [ "$(starts_of "$j13")" = 1 ] || fail "job $j13 started $(starts_of "$j13") engines on $node"
    on_node "$node" touch "/tmp/$tok.ago"
    st=$(wait_job_end "$j12" 60)
    [ "$st" = COMPLETED ] || fail "job $j12 ended $st once its adoption went on: $(out_of 12)"
    assert_one_entry "case 6" 13 12
    [ "$(on_node "$node2" sh -c "ls '$cache/entries' | wc -l")" = 1 ] ||
        fail "entries on $node2: $(on_node "$node2" ls -la "$cache/entries")"
    assert_only_entries "after jobs $j12 and $j13"
    echo "job $j13 of two nodes waited 5 s for job $j12 (one node), copied on its own, one entry kept"
fi

# 7. under on_node_fault=drain no job waits for another's fill (the jobs
# run on $node alone: its slurmd is restarted with it, the others at the end)
sed -i 's|^\(required .*stagehand\.so.*\)$|\1 on_node_fault=drain|' "$plugstack"
"$MINICLUSTER" restart-slurmd "$node" >/dev/null || fail "cannot restart $node's slurmd"
n_entries=$(entry_count)
begin 14 h.sqsh
j14=$held
t0=$SECONDS
j15=$(submit "$other" 15 "$src" "$probe") || fail "sbatch: $j15"
on_node "$node" touch "/tmp/$tok.pass.$j15"
st=$(wait_job_end "$j15" 90)
[ "$st" = COMPLETED ] || fail "job $j15 ended $st under on_node_fault=drain: $(out_of 15)"
took=$((SECONDS - t0))
out_of 14 | grep -q '^img ' && fail "job $j14's script ran before its engine left the gate"
[ "$(starts_of "$j15")" = 1 ] || fail "job $j15 started $(starts_of "$j15") engines (want 1, its own copy)"
log_since "$node" "$off" | grep -q "job $j15: .*h.sqsh: copied into the node image cache without waiting for job $j14's copy (on_node_fault=drain" ||
    fail "job $j15's log does not say it copied without waiting: $(log_since "$node" "$off" | grep "job $j15" | tail -5)"
log_since "$node" "$off" | grep -q "job $j15: .*: waiting for job" && fail "job $j15 waited under on_node_fault=drain"
grep -q ": 1 copied, 0 current of 1 nodes" <<<"$(out_of 15)" || fail "job $j15's summary: $(out_of 15)"
gate_open
st=$(wait_job_end "$j14" 120)
[ "$st" = COMPLETED ] || fail "job $j14 ended $st: $(out_of 14)"
assert_one_entry "case 7" 15 14
echo "on_node_fault=drain: job $j15 copied without waiting for job $j14 (held at the gate) and completed in $took s; one entry"

for _ in $(seq 1 150); do
    [ -z "$(engines_of "$j10")" ] && break
    sleep 0.2
done
[ -z "$(engines_of "$j10")" ] || fail "job $j10's engine still runs after its staging process was killed (case 5)"

if [ "${STAGEHAND_TEST_FULL:-0}" != 1 ]; then
    assert_only_entries "at the end"
    assert_no_drain
    echo "PASS: one producer per entry: three jobs at once made one copy and shared it, a waiter took over from a cancelled producer, a warm job waited for nobody, a killed producer's fill lock went at its epilog, a job of two nodes copied on its own after its bounded wait, no job waited under on_node_fault=drain (cases 4 and 8, a producer failing at its deadline and a waiter of one node at its bound: --full)"
    exit 0
fi
# 4. a producer that fails (its deadline, timeout=15s, passes at the gate):
# the waiter takes over and completes
sed -i 's/ timeout=[^ ]*//; s/ on_node_fault=drain//; s|^\(required .*stagehand\.so.*\)$|\1 timeout=15s|' "$plugstack"
restart_slurmds || fail "cannot restart the slurmds"
begin 8 d.sqsh
j8=$held
j9=$(submit "$other" 9 "$src" "$probe") || fail "sbatch: $j9"
wait_waiting "$off" "$j9" "$j8"
# the gate opens as soon as job $j9 has the lock (its own deadline runs)
for _ in $(seq 1 300); do
    log_since "$node" "$off" | grep -q "job $j9: .*the node image cache's fill is free" && break
    sleep 0.2
done
gate_open
log_since "$node" "$off" | grep -q "job $j9: .*the node image cache's fill is free" ||
    fail "job $j9 never took the fill lock: $(log_since "$node" "$off" | grep "job $j8\|job $j9" | tail -5)"
st=$(wait_job_end "$j8" 90)
[ "$st" = FAILED ] || fail "producer $j8 ended $st with its engine held past timeout=15s: $(out_of 8)"
grep -qi "deadline" <<<"$(out_of 8)" || fail "producer $j8's message: $(out_of 8)"
st=$(wait_job_end "$j9" 90)
[ "$st" = COMPLETED ] || fail "job $j9 ended $st after its producer failed: $(out_of 9)"
grep -q ": 1 copied, 0 current of 1 nodes" <<<"$(out_of 9)" || fail "job $j9's summary: $(out_of 9)"
[ "$(out_of 9 | grep '^img ' | awk '{ print $3, $4, $5 }')" = "root 444 $want" ] ||
    fail "job $j9's image: $(out_of 9)"
[ "$(starts_of "$j9")" = 1 ] || fail "job $j9 started $(starts_of "$j9") engines (want 1, after job $j8 failed)"
echo "takeover after a failure: job $j8 failed at its deadline, job $j9 copied instead"

# 8. a job of one node waits timeout= plus 10 s (25 s) for a producer whose
# fill goes on (its adoption held), then fails naming SRC, it and the node
n_entries=$(entry_count)
begin 16 i.sqsh
j16=$held
hold_adopt "$j16"
gate_open
wait_adopt_held "$j16" 16
t0=$SECONDS
j17=$(submit "$other" 17 "$src" "$probe") || fail "sbatch: $j17"
wait_waiting "$off" "$j17" "$j16"
st=$(wait_job_end "$j17" 120)
took=$((SECONDS - t0))
[ "$st" = FAILED ] || fail "job $j17 ended $st after its wait for job $j16: $(out_of 17)"
[ "$took" -ge 25 ] || fail "job $j17 failed after $took s (want its bound, timeout=15s plus 10 s)"
said="$src: job $j16 was still copying it into the node image cache of $node after this job waited 25 s for it"
grep -qF "$said" <<<"$(out_of 17)" || fail "job $j17's message (want '$said'): $(out_of 17)"
grep -q '^stagehand: --stage-image failed: ' <<<"$(out_of 17)" || fail "job $j17's message: $(out_of 17)"
grep -q '^img ' <<<"$(out_of 17)" && fail "job $j17's script ran without its image"
echo "  job $j17 after $took s: $(grep '^stagehand:' <<<"$(out_of 17)" | head -1)"
for _ in $(seq 1 100); do
    on_node "$node" test -e "$cache/job/$j17" || break
    sleep 0.2
done
on_node "$node" test -e "$cache/job/$j17" && fail "job $j17's cache directory is left"
[ "$(entry_count)" = "$n_entries" ] || fail "entries after job $j17 failed: $(on_node "$node" ls -la "$cache/entries")"
assert_no_drain
on_node "$node" touch "/tmp/$tok.ago"
st=$(wait_job_end "$j16" 60)
[ "$st" = COMPLETED ] || fail "job $j16 ended $st once its adoption went on: $(out_of 16)"
grep -q ": 1 copied, 0 current of 1 nodes" <<<"$(out_of 16)" || fail "job $j16's summary: $(out_of 16)"
[ "$(out_of 16 | grep '^img ' | awk '{ print $3, $4, $5 }')" = "root 444 $want" ] ||
    fail "job $j16's image: $(out_of 16)"
[ "$(entry_count)" = $((n_entries + 1)) ] || fail "entries after job $j16: $(on_node "$node" ls -la "$cache/entries")"
echo "a waiter of one node at its bound: job $j17 failed after $took s naming $src, job $j16 and $node; job $j16 then completed"
assert_only_entries "at the end"
assert_no_drain
echo "PASS: one producer per entry: three jobs at once made one copy and shared it, a waiter took over from a cancelled producer, a warm job waited for nobody, a killed producer's fill lock went at its epilog, a job of two nodes copied on its own after its bounded wait, no job waited under on_node_fault=drain, a waiter took over from a producer that failed at its deadline, a waiter of one node failed at its bound naming SRC, the producer and the node"

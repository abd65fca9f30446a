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
#  4. (STAGEHAND_TEST_FULL=1 only: it restarts the slurmds twice and waits
#     for a deadline) with timeout=15s, a producer held at the gate fails at
#     its deadline while a job waits for it: that job takes over, copies (one
#     engine start) and completes; no node is drained.
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
engine="$STAGEHAND_PREFIX/bin/stagehand-bcast"
[ -x "$engine" ] || fail "$engine not installed"
plugstack_save
cleanup() {
    on_node "$node" touch "/tmp/$tok.go"
    unwrap_on_node "$node" "$engine"
    on_node "$node" rm -f "/tmp/$tok.engine" "/tmp/$tok.go" "/tmp/$tok.starts"
    for j in $(jobs_named "$tag"); do scancel "$j" 2>/dev/null; done
    plugstack_restore
    rm -rf "$dir" "$MINICLUSTER_SHARED/$tok".*.out
    on_node "$node" rm -rf "$cache"
}
trap cleanup EXIT

mkdir -p "$dir"
chown "$MINICLUSTER_USER:$(id -gn "$other")" "$dir"
chmod 0750 "$dir"
for f in a b c d; do
    as_user sh -c "head -c 4000000 /dev/urandom >'$dir/$f.sqsh' && chmod 0644 '$dir/$f.sqsh'" ||
        fail "cannot create the sources"
done
on_node "$node" rm -rf "$cache"
plugstack_add cache=$cache verbose=yes

# submit USER NAME SRC SCRIPT: a job of one node on $node, output $tok.NAME.out
submit() {
    run_as "$1" sbatch --parsable -J "$tag" -N1 -w "$node" -o "$MINICLUSTER_SHARED/$tok.$2.out" \
        --stage-image="$3" --wrap "$4"
}
probe='echo "img $(stat -c "%i %U %a" "$STAGEHAND_IMAGE") $(sha256sum <"$STAGEHAND_IMAGE" | cut -d" " -f1)"'
out_of() { cat "$MINICLUSTER_SHARED/$tok.$1.out" 2>/dev/null; }
# On $node the engine waits at a gate (/tmp/$tok.go) and logs the job id
# of each start in /tmp/$tok.starts: the producer's copy cannot end before
# the test has seen the other jobs wait, however fast the host.
on_node "$node" sh -c "cp '$engine' /tmp/$tok.engine && chmod 755 /tmp/$tok.engine && : >/tmp/$tok.starts && chmod 666 /tmp/$tok.starts" ||
    fail "cannot copy the engine on $node"
wrap_on_node "$node" "$engine" "echo \"\$SLURM_JOBID\" >>/tmp/$tok.starts
while [ ! -e /tmp/$tok.go ]; do sleep 0.1; done
exec /tmp/$tok.engine \"\$@\"" || fail "cannot wrap the engine on $node"
gate_open() { on_node "$node" touch "/tmp/$tok.go"; }
gate_close() { on_node "$node" rm -f "/tmp/$tok.go"; }
starts_of() { on_node "$node" grep -cx "$1" "/tmp/$tok.starts"; }
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
entry_count() { on_node "$node" sh -c "ls -A '$cache/entries' | wc -l"; }
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
gate_open
st=$(wait_job_end "$j6" 120)
[ "$st" = COMPLETED ] || fail "job $j6 ended $st: $(out_of 6)"
# 4. a producer that fails (its deadline, timeout=15s, passes at the gate):
# the waiter takes over and completes
if [ "${STAGEHAND_TEST_FULL:-0}" != 1 ]; then
    left=$(on_node "$node" sh -c "ls -A '$cache/entries' | grep '^\\.' || true")
    [ -z "$left" ] || fail "left in $cache/entries: $left"
    assert_no_drain
    echo "PASS: one producer per entry: three jobs at once made one copy and shared it, a waiter took over from a cancelled producer, a warm job waited for nobody (case 4, a producer failing at its deadline: --full)"
    exit 0
fi
sed -i 's/ timeout=[^ ]*//; s|^\(required .*stagehand\.so.*\)$|\1 timeout=15s|' "$plugstack"
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
left=$(on_node "$node" sh -c "ls -A '$cache/entries' | grep '^\\.' || true")
[ -z "$left" ] || fail "left in $cache/entries: $left"
assert_no_drain
echo "PASS: one producer per entry: three jobs at once made one copy and shared it, a waiter took over from a cancelled producer, a warm job waited for nobody, a waiter took over from a producer that failed at its deadline"

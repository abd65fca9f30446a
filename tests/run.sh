#!/usr/bin/env bash
# stagehand test runner: the one command CI and developers run.
#
#   tests/run.sh [--full] [--no-cluster] [--keep-cluster] [--only PATTERN]
#
# On a fresh Debian 12 machine (as root) it installs the Debian packages it
# needs, builds, runs the unit tests under AddressSanitizer and
# UndefinedBehaviorSanitizer, lints (cppcheck, clang-tidy), installs a release
# build into /opt/stagehand, brings the local Slurm test cluster up, runs every
# cluster test, the Debian package test and the benchmark's smoke variant,
# brings the cluster down (also on failure), and ends with the line
#   N passed, N failed[, N skipped]
# counting every test it ran. Exit status is non-zero if any test failed.
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 2

full=0
cluster=1
keep=0
only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --full) full=1 ;;
        --no-cluster) cluster=0 ;;
        --keep-cluster) keep=1 ;;
        --only) only=${2:?--only needs a pattern}; shift ;;
        -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "tests/run.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
    shift
done
export STAGEHAND_TEST_FULL=$full

[ "$(id -u)" = 0 ] || { echo "tests/run.sh: run as root (it installs packages and starts a test cluster)" >&2; exit 2; }

PREFIX=${STAGEHAND_PREFIX:-/opt/stagehand}
MC="$top/contrib/minicluster/minicluster"
passed=0
failed=0
skipped=0
failures=()

note_result() { # name rc
    case "$2" in
        0) passed=$((passed + 1)); echo "PASS  $1" ;;
        77) skipped=$((skipped + 1)); echo "SKIP  $1" ;;
        *) failed=$((failed + 1)); failures+=("$1"); echo "FAIL  $1 (exit $2)" ;;
    esac
}

finish() {
    echo
    if [ ${#failures[@]} -gt 0 ]; then
        echo "failed tests:"
        printf '  %s\n' "${failures[@]}"
    fi
    if [ "$skipped" -gt 0 ]; then
        echo "$passed passed, $failed failed, $skipped skipped"
    else
        echo "$passed passed, $failed failed"
    fi
    [ "$failed" -eq 0 ]
    exit $?
}

# ------------------------------------------------------------ packages ----
contrib/setup.sh --packages-only || { echo "tests/run.sh: package installation failed" >&2; exit 2; }

# ------------------------------------------------------------ unit tests --
echo "== unit tests (ASan + UBSan)"
if [ ! -d build-asan ]; then
    meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dtests=enabled >/dev/null ||
        { note_result "build (asan)" 1; finish; }
fi
if ! ninja -C build-asan >build-asan/build.out 2>&1; then
    tail -40 build-asan/build.out
    note_result "build (asan)" 1
    finish
fi
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
meson test -C build-asan --suite unit --print-errorlogs >build-asan/unit.out 2>&1
unit_rc=$?
# Count individual Check tests ("NN%: Checks: N, Failures: F, Errors: E").
unit_checks=0 unit_bad=0
while read -r checks fails errs; do
    unit_checks=$((unit_checks + checks))
    unit_bad=$((unit_bad + fails + errs))
done < <(grep -oE 'Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' build-asan/meson-logs/testlog.txt |
    sed -E 's/Checks: ([0-9]+), Failures: ([0-9]+), Errors: ([0-9]+)/\1 \2 \3/')
passed=$((passed + unit_checks - unit_bad))
failed=$((failed + unit_bad))
grep -E '^ *[0-9]+/[0-9]+ ' build-asan/unit.out
# The final count takes every Check test singly, not the programs listed above.
echo "   $unit_checks Check tests in these programs: $((unit_checks - unit_bad)) passed, $unit_bad failed (each counts once in the total)"
if [ "$unit_rc" -ne 0 ]; then
    grep -E 'runtime error|AddressSanitizer|LeakSanitizer|:[EF]:' build-asan/meson-logs/testlog.txt | head -40
    # A test program that crashed or timed out before Check printed a summary
    # still counts as a failure.
    bad_exes=$(grep -cE '^ *[0-9]+/[0-9]+ .* (FAIL|TIMEOUT|ERROR) ' build-asan/unit.out || true)
    if [ "$bad_exes" -gt 0 ] && [ "$failed" -eq 0 ]; then failed=$bad_exes; fi
    failures+=("unit tests (see build-asan/meson-logs/testlog.txt)")
fi

# One-host end-to-end tests of the agent (control plane + PMIx host + engine):
# each meson test is one test here.
echo "== agent tests (ASan + UBSan)"
meson test -C build-asan --suite agent --print-errorlogs >build-asan/agent.out 2>&1
while read -r name verdict; do
    note_result "agent: $name" "$([ "$verdict" = OK ] && echo 0 || echo 1)"
done < <(sed -nE 's/^ *[0-9]+\/[0-9]+ stagehand:agent \/ ([a-z_0-9]+) +([A-Z]+).*/\1 \2/p' build-asan/agent.out)

# ------------------------------------------------------------------ lint --
echo "== lint"
if cppcheck --quiet --error-exitcode=1 --enable=warning,performance,portability \
    --inline-suppr --std=c11 -D_GNU_SOURCE '-DSPANK_PLUGIN(n,v)=' -I include -I build-asan \
    core spank tests/unit tests/mpi >build-asan/cppcheck.out 2>&1; then
    note_result "cppcheck" 0
else
    cat build-asan/cppcheck.out
    note_result "cppcheck" 1
fi

# clang-tidy with the checks in .clang-tidy (each exclusion says why), over
# the sources that build-asan compiles: two files at a time.
if printf '%s\n' core/*/*.c spank/*.c |
    xargs -P2 -n4 clang-tidy -p build-asan --quiet >build-asan/clang-tidy.out 2>/dev/null; then
    note_result "clang-tidy" 0
else
    grep -E '(warning|error):' build-asan/clang-tidy.out | head -40
    note_result "clang-tidy" 1
fi

[ "$cluster" = 1 ] || finish

# ---------------------------------------------------------- install -------
echo "== release build, install into $PREFIX"
if contrib/setup.sh --install >build-asan/install.out 2>&1; then
    note_result "build and install (release)" 0
else
    tail -40 build-asan/install.out
    note_result "build and install (release)" 1
    finish
fi

# ---------------------------------------------------------- cluster -------
echo "== test cluster"
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
    if [ "$keep" = 0 ]; then
        "$MC" down >/dev/null 2>&1 || true
    fi
}
trap cleanup EXIT
if ! "$MC" up --nodes 3; then
    note_result "minicluster up" 1
    finish
fi
note_result "minicluster up" 0
eval "$("$MC" env)"

for t in tests/cluster/test_*.sh; do
    [ -e "$t" ] || continue
    name=$(basename "$t" .sh)
    if [ -n "$only" ] && [[ "$name" != *$only* ]]; then continue; fi
    start=$(date +%s%N)
    out=$(timeout -k 10 "${STAGEHAND_TEST_TIMEOUT:-300}" bash "$t" 2>&1)
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    secs=$((ms / 1000)).$(printf '%03d' $((ms % 1000)))
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] || [ -n "${STAGEHAND_TEST_VERBOSE:-}" ]; then
        printf '%s\n' "$out" | tail -40 | sed 's/^/    /'
    elif [ "$rc" -eq 77 ]; then
        printf '%s\n' "$out" | grep -E '^SKIP' | sed 's/^/    /'
    fi
    note_result "$name (${secs}s)" "$rc"
done

# Issue 7: the Debian package builds, installs and stages a file on the
# cluster through the packaged plugin (then it is purged again).
if [ -z "$only" ] || [[ package == *$only* ]]; then
    echo "== Debian package"
    if timeout -k 10 900 bash tests/package/test_package.sh --cluster >build-asan/package.out 2>&1; then
        note_result "package: dpkg-buildpackage, install, stage through the packaged plugin, purge" 0
    else
        grep -E '^(FAIL|not ok|bad)|failed' build-asan/package.out | tail -20 | sed 's/^/    /'
        tail -5 build-asan/package.out | sed 's/^/    /'
        note_result "package: dpkg-buildpackage, install, stage through the packaged plugin, purge" 1
    fi
fi

# Issue 5: the benchmark's smoke variant (32 MiB, N=2: the plugin and the
# chain, with the image on the sshfs storage host and shaped links, in its own
# minicluster instance "bench"): both succeed, every copy matches the source,
# and the storage host serves the image exactly once per staging.
if [ -z "$only" ] || [[ bench == *$only* ]]; then
    echo "== benchmark smoke"
    if timeout -k 10 600 bench/run.sh --smoke >build-asan/bench-smoke.out 2>&1; then
        grep '^smoke: ' build-asan/bench-smoke.out | sed 's/^/    /'
        note_result "bench --smoke: plugin and chain over sshfs, copies match, storage read 1.00 x S" 0
    else
        tail -20 build-asan/bench-smoke.out | sed 's/^/    /'
        note_result "bench --smoke: plugin and chain over sshfs, copies match, storage read 1.00 x S" 1
    fi
fi

if [ "$keep" = 0 ]; then
    trap - EXIT
    "$MC" down >/dev/null 2>&1
    # Teardown must leave no namespace, veth, mount or daemon behind.
    leftovers=$( (ip netns list | grep -E '^mc-'; ip -br link | grep -E '^(mcv-|mcbr0)';
        grep -E ' /var/lib/minicluster/ns' /proc/self/mountinfo) 2>/dev/null)
    if [ -z "$leftovers" ]; then
        note_result "minicluster down leaves nothing behind" 0
    else
        printf '    %s\n' "$leftovers"
        note_result "minicluster down leaves nothing behind" 1
    fi
fi
finish

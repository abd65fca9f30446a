#!/usr/bin/env bash
# stagehand test runner: the one command CI and developers run.
#
#   tests/run.sh [--stack bookworm|trixie|all] [--serial] [--full] [--no-cluster]
#                [--keep-cluster] [--only PATTERN]
#
# On a fresh Debian 12 machine (as root) it installs the Debian packages it
# needs, builds, runs the unit tests under AddressSanitizer and
# UndefinedBehaviorSanitizer, lints (cppcheck, clang-tidy, shellcheck, docs),
# installs a release build, brings a local Slurm test cluster up, runs every
# cluster test, the Debian package test and the benchmark's smoke variant,
# (trixie) the PrologFlags tests again on clusters with Contain and RunInJob,
# brings the cluster down (also on failure), and ends with the line
#   N passed, N failed[, N skipped]
# counting every test it ran. Exit status is non-zero if any test failed.
#
# It does so for each software stack (--stack, default all): bookworm is the
# host's Debian 12 (Slurm 22.05, Open MPI 4.1, PMIx 4.2), trixie a Debian 13
# root (Slurm 24.11, Open MPI 5, PMIx 5; contrib/minicluster/rootfs). A
# trixie test's name starts with "trixie: ". Each stack has its own prefix,
# test cluster and shared directory, so the two cluster suites run side by
# side (--serial: one after the other).
set -uo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 2

full=0
cluster=1
keep=0
only=""
stack_arg=all
serial=0
while [ $# -gt 0 ]; do
    case "$1" in
        --full) full=1 ;;
        --no-cluster) cluster=0 ;;
        --keep-cluster) keep=1 ;;
        --only) only=${2:?--only needs a pattern}; shift ;;
        --stack) stack_arg=${2:?--stack needs bookworm, trixie or all}; shift ;;
        --stack=*) stack_arg=${1#*=} ;;
        --serial) serial=1 ;;
        -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "tests/run.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
    shift
done
export STAGEHAND_TEST_FULL=$full
case "$stack_arg" in
    all) stacks=(bookworm trixie) ;;
    bookworm | trixie) stacks=("$stack_arg") ;;
    *) echo "tests/run.sh: --stack must be bookworm, trixie or all, got '$stack_arg'" >&2; exit 2 ;;
esac

[ "$(id -u)" = 0 ] || { echo "tests/run.sh: run as root (it installs packages and starts a test cluster)" >&2; exit 2; }

MC="$top/contrib/minicluster/minicluster"
ROOTFS="$top/contrib/minicluster/rootfs"
# Each part of the run (the host's unit tests and lint, one cluster suite per
# stack) writes its verdicts, one "PASS|FAIL|SKIP<tab>name" line each, to a
# file of its own here; the total counts them all.
verdicts=$top/build-tests
rm -rf "$verdicts"
mkdir -p "$verdicts/v"
verdict_file=$verdicts/v/host

note_result() { # name rc
    case "$2" in
        0) printf 'PASS\t%s\n' "$1" >>"$verdict_file"; echo "PASS  $1" ;;
        77) printf 'SKIP\t%s\n' "$1" >>"$verdict_file"; echo "SKIP  $1" ;;
        *) printf 'FAIL\t%s\n' "$1" >>"$verdict_file"; echo "FAIL  $1 (exit $2)" ;;
    esac
}

# The Check tests of a unit-test program count one each: "checks N" adds N
# verdicts, of which "bad" failed.
note_checks() { # prefix checks bad
    printf 'CHECKS\t%s\t%s\t%s\n' "$2" "$3" "$1" >>"$verdict_file"
}

finish() {
    local passed=0 failed=0 skipped=0 kind a b
    local failures=()
    while IFS=$'\t' read -r kind a b _; do
        case "$kind" in
            PASS) passed=$((passed + 1)) ;;
            SKIP) skipped=$((skipped + 1)) ;;
            FAIL) failed=$((failed + 1)); failures+=("$a") ;;
            CHECKS) passed=$((passed + a - b)); failed=$((failed + b)) ;;
        esac
    done < <(cat "$verdicts"/v/* 2>/dev/null)
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

# A command in a stack's software: the host's for bookworm, else in a view
# of the stack's root with the source tree bound in.
in_stack() { # stack command...
    local stack=$1
    shift
    if [ "$stack" = bookworm ]; then "$@"; else "$ROOTFS" run "$stack" "$top" -- "$@"; fi
}

# A stack's install prefix, test cluster and shared directory (stack_env).
# shellcheck source=../contrib/stack-env.sh
source "$top/contrib/stack-env.sh"

label() { # stack -> the prefix of its tests' names
    if [ "$1" = bookworm ] && [ "$stack_arg" = bookworm ]; then echo ""; else echo "$1: "; fi
}

# ------------------------------------------------------------ packages ----
contrib/setup.sh --packages-only || { echo "tests/run.sh: package installation failed" >&2; exit 2; }
for s in "${stacks[@]}"; do
    [ "$s" = bookworm ] && continue
    "$ROOTFS" build "$s" || { note_result "$s: root file system (rootfs build $s)" 1; finish; }
done

# ------------------------------------------------------------ unit tests --
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# The unit and one-host agent tests of one stack, in build directory $2.
unit_tests() { # stack builddir
    local s=$1 b=$2 p unit_rc checks fails errs unit_checks=0 unit_bad=0 name verdict
    p=$(label "$s")
    echo "== ${p}unit tests (ASan + UBSan)"
    if ! in_stack "$s" bash -c "cd '$top' && { [ -f '$b/build.ninja' ] ||
            meson setup '$b' -Db_sanitize=address,undefined -Db_lundef=false -Dtests=enabled >/dev/null; } &&
            ninja -C '$b' >'$b/build.out' 2>&1"; then
        tail -40 "$b/build.out" 2>/dev/null
        note_result "${p}build (asan)" 1
        return 1
    fi
    in_stack "$s" meson test -C "$top/$b" --suite unit --print-errorlogs >"$b/unit.out" 2>&1
    unit_rc=$?
    # Count individual Check tests ("NN%: Checks: N, Failures: F, Errors: E").
    while read -r checks fails errs; do
        unit_checks=$((unit_checks + checks))
        unit_bad=$((unit_bad + fails + errs))
    done < <(grep -oE 'Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$b/meson-logs/testlog.txt" |
        sed -E 's/Checks: ([0-9]+), Failures: ([0-9]+), Errors: ([0-9]+)/\1 \2 \3/')
    grep -E '^ *[0-9]+/[0-9]+ ' "$b/unit.out"
    # The final count takes every Check test singly, not the programs listed above.
    echo "   $unit_checks Check tests in these programs: $((unit_checks - unit_bad)) passed, $unit_bad failed (each counts once in the total)"
    note_checks "$p" "$unit_checks" "$unit_bad"
    if [ "$unit_rc" -ne 0 ]; then
        grep -E 'runtime error|AddressSanitizer|LeakSanitizer|:[EF]:' "$b/meson-logs/testlog.txt" | head -40
        # A test program that crashed or timed out before Check printed a
        # summary still counts as a failure.
        if [ "$unit_bad" -eq 0 ]; then
            note_result "${p}unit test programs (see $b/meson-logs/testlog.txt)" 1
        fi
    fi

    # One-host end-to-end tests of the agent (control plane + PMIx host +
    # engine): each meson test is one test here.
    echo "== ${p}agent tests (ASan + UBSan)"
    in_stack "$s" meson test -C "$top/$b" --suite agent --print-errorlogs >"$b/agent.out" 2>&1
    while read -r name verdict; do
        note_result "${p}agent: $name" "$([ "$verdict" = OK ] && echo 0 || echo 1)"
    done < <(sed -nE 's/^ *[0-9]+\/[0-9]+ stagehand:agent \/ ([a-z_0-9]+) +([A-Z]+).*/\1 \2/p' "$b/agent.out")
}

for s in "${stacks[@]}"; do
    if [ "$s" = bookworm ]; then unit_tests bookworm build-asan; else unit_tests "$s" "build-$s-asan"; fi
done

# ------------------------------------------------------------------ lint --
# Once, over the sources, with the host's headers (bookworm's build-asan).
echo "== lint"
[ -f build-asan/build.ninja ] || meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false \
    -Dtests=enabled >/dev/null
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

# Lint: shellcheck over every shell script of the project (settings in
# .shellcheckrc; each disable in a script says why): *.sh and every file whose
# first line names a shell, outside the build directories; two at a time.
shell_scripts() {
    find . \( -name .git -o -path './build*' -o -name __pycache__ \) -prune -o -type f \
        \( -name '*.sh' -print -o -exec awk 'FNR == 1 && /^#! *(\/usr)?\/bin\/(env +)?(ba|da)?sh( |$)/ {
            print FILENAME } { nextfile }' {} + \) | sort
}
shell_scripts >build-asan/shellcheck.files
echo "shellcheck: $(wc -l <build-asan/shellcheck.files) scripts (list: build-asan/shellcheck.files)"
if xargs -P2 -n12 shellcheck -f gcc <build-asan/shellcheck.files >build-asan/shellcheck.out 2>&1; then
    note_result "shellcheck" 0
else
    head -40 build-asan/shellcheck.out
    note_result "shellcheck" 1
fi

# Lint: the documentation's links, field-case ids and that nothing points
# outside the repository (tests/lint/docs.py says what each check is).
if python3 tests/lint/docs.py >build-asan/docs-lint.out 2>&1; then
    note_result "docs lint" 0
else
    head -40 build-asan/docs-lint.out
    note_result "docs lint" 1
fi

[ "$cluster" = 1 ] || finish

# ---------------------------------------------------------- install -------
for s in "${stacks[@]}"; do
    p=$(label "$s")
    echo "== ${p}release build, install"
    if (stack_env "$s"; contrib/setup.sh --install --stack "$s") >"build-tests/install-$s.out" 2>&1; then
        note_result "${p}build and install (release)" 0
    else
        tail -40 "build-tests/install-$s.out"
        note_result "${p}build and install (release)" 1
        finish
    fi
done

# ---------------------------------------------------------- cluster -------
# One stack's cluster part: its test cluster, every cluster test, the Debian
# package test, the benchmark's smoke run, (trixie) other PrologFlags, and the
# teardown check.
# Runs in a subshell of its own (its environment is the stack's).
cluster_suite() { # stack
    local s=$1 p name leftovers state pkg_args
    p=$(label "$s")
    stack_env "$s"
    verdict_file=$verdicts/v/$s
    # shellcheck disable=SC2317  # called by the EXIT trap
    cleanup() {
        if [ "$keep" = 0 ]; then
            "$MC" down >/dev/null 2>&1 || true
        fi
    }
    trap cleanup EXIT
    echo "== ${p}test cluster"
    if ! "$MC" up --nodes 3 --stack "$s"; then
        note_result "${p}minicluster up" 1
        return
    fi
    note_result "${p}minicluster up" 0
    eval "$("$MC" env)"

    # run_tests LABEL TEST...: each cluster test (tests/cluster/NAME.sh)
    # that --only selects, its verdict named "$p${LABEL}NAME (seconds)".
    # Tests that run only under --full (STAGEHAND_TEST_FULL=1; they skip
    # otherwise) and bring up an instance of their own get a longer bound:
    # test_scale_32 (32 nodes: bring-up, a staging, a no-op, teardown) and
    # test_scale_burst (three 300-task arrays on 2 nodes of 128 CPUs).
    run_tests() {
        local l=$1 t name start out rc ms secs tmo
        shift
        for t in "$@"; do
            [ -e "$t" ] || continue
            name=$(basename "$t" .sh)
            if [ -n "$only" ] && [[ "$name" != *$only* ]]; then continue; fi
            tmo=${STAGEHAND_TEST_TIMEOUT:-300}
            [ "$full" = 1 ] && [ "$name" = test_scale_32 ] && tmo=${STAGEHAND_TEST_TIMEOUT:-1200}
            [ "$full" = 1 ] && [ "$name" = test_scale_burst ] && tmo=${STAGEHAND_TEST_TIMEOUT:-2700}
            start=$(date +%s%N)
            out=$(timeout -k 10 "$tmo" bash "$t" 2>&1)
            rc=$?
            ms=$((($(date +%s%N) - start) / 1000000))
            secs=$((ms / 1000)).$(printf '%03d' $((ms % 1000)))
            if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] || [ -n "${STAGEHAND_TEST_VERBOSE:-}" ]; then
                printf '%s\n' "$out" | tail -40 | sed 's/^/    /'
            elif [ "$rc" -eq 77 ]; then
                printf '%s\n' "$out" | grep -E '^SKIP' | sed 's/^/    /'
            fi
            note_result "$p$l$name (${secs}s)" "$rc"
        done
    }
    run_tests "" tests/cluster/test_*.sh

    # Issue 7: the Debian package builds, installs and stages a file on the
    # cluster through the packaged plugin (then it is purged again).
    if [ -z "$only" ] || [[ package == *$only* ]]; then
        echo "== ${p}Debian package"
        pkg_args=(--cluster)
        [ "$s" = bookworm ] || pkg_args+=(--stack "$s")
        # the package's own dh_auto_test runs the unit and agent tests this
        # run has run on this stack already (ASan + UBSan): --full only
        [ "$full" = 1 ] || pkg_args+=(--nocheck)
        if timeout -k 10 900 bash tests/package/test_package.sh "${pkg_args[@]}" \
            >"$verdicts/package-$s.out" 2>&1; then
            note_result "${p}package: dpkg-buildpackage, install, stage through the packaged plugin, purge" 0
        else
            grep -E '^(FAIL|not ok|bad)|failed' "$verdicts/package-$s.out" | tail -20 | sed 's/^/    /'
            tail -5 "$verdicts/package-$s.out" | sed 's/^/    /'
            note_result "${p}package: dpkg-buildpackage, install, stage through the packaged plugin, purge" 1
        fi
    fi

    # Issue 5: the benchmark's smoke variant (32 MiB, N=2: the plugin and the
    # chain, with the image on the sshfs storage host and shaped links, in the
    # stack's own minicluster instance, bench or benchx): both succeed, every
    # copy matches the source, and the storage host serves the image exactly
    # once per staging.
    if [ -z "$only" ] || [[ bench == *$only* ]]; then
        echo "== ${p}benchmark smoke"
        if timeout -k 10 900 env -u MINICLUSTER_NAME -u MINICLUSTER_NET -u MINICLUSTER_SHARED \
            -u STAGEHAND_PREFIX bench/run.sh --smoke --stack "$s" >"$verdicts/bench-smoke-$s.out" 2>&1; then
            grep '^smoke: ' "$verdicts/bench-smoke-$s.out" | sed 's/^/    /'
            note_result "${p}bench --smoke: plugin and chain over sshfs, copies match, storage read 1.00 x S" 0
        else
            tail -20 "$verdicts/bench-smoke-$s.out" | sed 's/^/    /'
            note_result "${p}bench --smoke: plugin and chain over sshfs, copies match, storage read 1.00 x S" 1
        fi
    fi

    # Issue 31: other PrologFlags on the newer stack, where RunInJob exists.
    # The cluster is rebuilt with each; Contain tracks jobs with
    # proctrack/cgroup (cgroup v1 freezer) where the host has it.
    if [ "$s" != bookworm ]; then
        local pt=linuxproc pf tests
        [ -d /sys/fs/cgroup/freezer ] && pt=cgroup
        for pf in "Alloc,Contain,RunInJob" "Alloc,Contain"; do
            tests=(tests/cluster/test_stage_prologflags.sh)
            [[ "$pf" == *RunInJob* ]] && tests+=(tests/cluster/test_stage_step.sh)
            if [ -n "$only" ] && ! printf '%s\n' "${tests[@]}" | grep -q -- "$only"; then continue; fi
            echo "== ${p}test cluster with PrologFlags=$pf, proctrack/$pt"
            if ! "$MC" up --nodes 3 --stack "$s" --prolog-flags "$pf" --proctrack "$pt"; then
                note_result "${p}minicluster up --prolog-flags $pf --proctrack $pt" 1
                continue
            fi
            eval "$("$MC" env)"
            run_tests "$pf/$pt: " "${tests[@]}"
        done
    fi

    if [ "$keep" = 0 ]; then
        trap - EXIT
        "$MC" down >/dev/null 2>&1
        # Teardown must leave no namespace, veth, mount or daemon behind.
        name=${MINICLUSTER_NAME:-mc}
        if [ "$name" = mc ]; then state=/var/lib/minicluster; else state=/var/lib/minicluster-$name; fi
        leftovers=$( (ip netns list | grep -E "^$name-"; ip -br link | grep -E "^(${name}v-|${name}br0)";
            grep -E " $state/ns" /proc/self/mountinfo) 2>/dev/null)
        if [ -z "$leftovers" ]; then
            note_result "${p}minicluster down leaves nothing behind" 0
        else
            printf '    %s\n' "$leftovers"
            note_result "${p}minicluster down leaves nothing behind" 1
        fi
    fi
}

# The stacks' suites side by side: the first in the foreground, the others'
# output is shown as each ends.
pids=()
for s in "${stacks[@]:1}"; do
    if [ "$serial" = 1 ]; then break; fi
    (cluster_suite "$s") >"$verdicts/cluster-$s.out" 2>&1 &
    pids+=("$s:$!")
done
(cluster_suite "${stacks[0]}")
for ps in "${pids[@]}"; do
    wait "${ps#*:}"
    cat "$verdicts/cluster-${ps%%:*}.out"
done
if [ "$serial" = 1 ]; then
    for s in "${stacks[@]:1}"; do (cluster_suite "$s"); done
fi
finish

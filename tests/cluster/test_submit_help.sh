#!/usr/bin/env bash
# --stage-image and --stage-verbose are shown in sbatch/srun/salloc --help
# (issue 4, user interface), each with a one-line help (issue 7), and a job
# that does not use them is untouched.
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

plugin=${MINICLUSTER_LOADED_PLUGIN:-$STAGEHAND_PREFIX/lib/slurm/stagehand.so}
[ -f "$plugin" ] || skip "plugin not installed at $plugin"
grep -qs "^required .*stagehand.so" "$(dirname "$SLURM_CONF")/plugstack.conf" ||
    skip "stagehand.so is not in plugstack.conf"

# Lines of help text of option --$1 in a --help listing: the text after the
# option on its own line (when it fits there) plus the continuation lines
# indented to the help column below it.
help_lines() {
    awk -v opt="--$1" '
        !found && $1 ~ "^" opt "([=[]|$)" {
            found = 1
            n = (NF > 1) ? 1 : 0
            next
        }
        found && /^                              [^ ]/ { n++; next }
        found { exit }
        END { print found ? n : "no" }'
}

for cmd in sbatch srun salloc; do
    out=$(as_user "$cmd" --help 2>&1) || fail "$cmd --help failed: $out"
    grep -qE -- '--stage-image=SRC\[:DST\]' <<<"$out" ||
        fail "$cmd --help does not show --stage-image=SRC[:DST]: $out"
    grep -qE -- '--stage-verbose' <<<"$out" ||
        fail "$cmd --help does not show --stage-verbose"
    for opt in stage-image stage-verbose; do
        n=$(help_lines "$opt" <<<"$out")
        [ "$n" = 1 ] || fail "$cmd --help: --$opt has $n lines of help, want 1: $out"
    done
    echo "ok: $cmd --help shows the options, one help line each"
done

out=$(as_user srun -N1 echo plain 2>&1) || fail "plain srun failed: $out"
[ "$out" = plain ] || fail "plain srun printed: $out"
wait_nodes_idle || fail "nodes not idle"
echo "ok: a job without --stage-image runs unchanged"

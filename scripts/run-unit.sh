#!/bin/sh
# Runs each unit-test binary given and sums their "N passed, N failed"
# lines. Quiet when all is well: one line, "N passed, N failed (B
# binaries)". A binary that fails, crashes or ends without its counts has
# everything it printed shown, under its name. VERBOSE=1 shows every
# binary's output.
set -u

total_passed=0
total_failed=0
binaries=0
bad=0

for bin in "$@"; do
    binaries=$((binaries + 1))
    out=$("$bin" 2>&1)
    rc=$?
    [ "${VERBOSE:-0}" = 1 ] && printf '== %s\n%s\n' "$bin" "$out"
    counts=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    why=""
    if [ -z "$counts" ]; then
        why="ended without a summary (exit status $rc)"
        total_failed=$((total_failed + 1))
    else
        p=${counts%% passed*}
        f=${counts#*passed, }
        f=${f%% failed}
        total_passed=$((total_passed + p))
        total_failed=$((total_failed + f))
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            why="exited with status $rc"
            total_failed=$((total_failed + 1))
        elif [ "$rc" -ne 0 ]; then
            why="$f failed"
        fi
    fi
    if [ -n "$why" ]; then
        bad=1
        [ "${VERBOSE:-0}" = 1 ] || printf '== %s\n%s\n' "$bin" "$out"
        echo "run-unit: $bin $why" >&2
    fi
done

echo "$total_passed passed, $total_failed failed ($binaries binaries)"
[ "$bad" -eq 0 ] && [ "$total_failed" -eq 0 ]

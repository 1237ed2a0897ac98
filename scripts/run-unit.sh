#!/bin/sh
# Runs each unit-test binary given, shows its output, and sums the
# "N passed, N failed" lines. Fails when a binary fails, crashes or does not
# report its counts.
set -u

total_passed=0
total_failed=0
bad=0

for bin in "$@"; do
    echo "== $bin"
    out=$("$bin" 2>&1)
    rc=$?
    printf '%s\n' "$out"
    counts=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$counts" ]; then
        echo "run-unit: $bin ended without a summary (exit status $rc)" >&2
        total_failed=$((total_failed + 1))
        bad=1
        continue
    fi
    p=${counts%% passed*}
    f=${counts#*passed, }
    f=${f%% failed}
    total_passed=$((total_passed + p))
    total_failed=$((total_failed + f))
    if [ "$rc" -ne 0 ]; then
        if [ "$f" -eq 0 ]; then
            echo "run-unit: $bin exited with status $rc" >&2
            total_failed=$((total_failed + 1))
        fi
        bad=1
    fi
done

echo "$total_passed passed, $total_failed failed"
[ "$bad" -eq 0 ] && [ "$total_failed" -eq 0 ]

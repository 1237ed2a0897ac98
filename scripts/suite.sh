#!/bin/sh
# Runs one suite of `make test` and says how it went in one line:
#   scripts/suite.sh LOGDIR NAME COMMAND [ARG...]
#   unit ........ ok  512 passed, 0 failed  (41 s)
# Everything COMMAND prints (compiler lines, each test's output) goes to
# LOGDIR/NAME.log. The line's middle is the log's last summary line: a
# "N passed" count, the fuzzer's executions, or "NAME: ok". When COMMAND
# fails the whole log follows the line, so a failure is read in full without
# opening a file, and the exit status is COMMAND's.
set -u
[ $# -ge 3 ] || {
    echo "usage: scripts/suite.sh LOGDIR NAME COMMAND [ARG...]" >&2
    exit 2
}
logdir=$1
name=$2
shift 2
mkdir -p "$logdir" || exit 1
log=$logdir/$name.log

# the name and dots first, so a long suite shows what it is doing
printf '%s ' "$(printf '%-12s' "$name" | tr ' ' '.')"
start=$(date +%s)
"$@" >"$log" 2>&1
rc=$?
secs=$(($(date +%s) - start))
if [ "$secs" -ge 120 ]; then
    took="$((secs / 60)) min $((secs % 60)) s"
else
    took="$secs s"
fi
summary=$(grep -E '[0-9]+ (passed|failed)|[0-9?]+ executions|^[a-z-]+: ok$|^PASS: ' "$log" |
    tail -n 1 | sed -e "s/^$name: //" -e 's/^fuzz: //' -e 's/^=* *//' -e 's/ *=*$//')
[ "$summary" = ok ] && summary=""
if [ "$rc" -eq 0 ]; then
    echo "ok  ${summary:+$summary  }($took)"
    exit 0
fi
echo "FAILED (exit status $rc, $took); its log, $log:"
cat "$log"
echo "$name: FAILED (exit status $rc); log: $log"
exit "$rc"

#!/bin/sh
# comm_expect_fail.sh PATTERN... -- COMMAND... — runs COMMAND (a multi-rank job in which one rank
# skips a collective) and passes when it exits non-zero and its output contains every PATTERN
# (fixed strings; "!PATTERN": must not contain it).
patterns=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  patterns="$patterns$1
"
  shift
done
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
[ "$rc" -ne 0 ] || { echo "FAIL: the job exited 0: a skipped collective must end every rank"; exit 1; }
status=0
while IFS= read -r p; do
  [ -n "$p" ] || continue
  case "$p" in
    !*) printf '%s' "$out" | grep -qF -- "${p#!}" && { echo "FAIL: output contains '${p#!}'"; status=1; } ;;
    *) printf '%s' "$out" | grep -qF -- "$p" || { echo "FAIL: output lacks '$p'"; status=1; } ;;
  esac
done <<END
$patterns
END
exit $status

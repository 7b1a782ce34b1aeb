#!/usr/bin/env bash
# memory_report.sh MCC GRANULARITY keeps|drops — `mcc compile --memory-report` on tiny-llama with
# --recompute-granularity GRANULARITY: mcc exits 0, the report names the peak and what is live
# there by the op that made it, and the SwiGLU outputs are among them (keeps: no recompute) or
# not (drops: recomputed in the backward).
set -uo pipefail
mcc=$1; granularity=$2; swiglu=$3
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
report=$("$mcc" compile "$root/models/tiny-llama.json" --target cpu --memory-report \
         --recompute-granularity "$granularity" -o "$work/train_rank" 2>&1)
status=$?
fail() { printf '%s\n' "$report"; echo "FAIL: $*"; exit 1; }
[ $status = 0 ] || fail "mcc compile --memory-report exited with status $status"
grep -Eq '^peak activations: [0-9.]+ [KMG]iB live in micro_step at instruction [0-9]+ \([a-z_]+\), of its [0-9.]+ [KMG]iB arena; by the op that made them:$' <<<"$report" ||
  fail "no line 'peak activations: ... by the op that made them:'"
grep -A1 'by the op that made them:$' <<<"$report" | grep -Eq '^  [a-z_]+ +[0-9.]+ [KMG]iB +\([0-9]+ values\)$' ||
  fail "no 'OP SIZE (N values)' line after the peak"
if grep -q '^  swiglu ' <<<"$report"; then
  [ "$swiglu" = keeps ] || fail "the SwiGLU outputs are live at the peak under --recompute-granularity $granularity"
else
  [ "$swiglu" = drops ] || fail "the SwiGLU outputs are not live at the peak without recompute"
fi
echo "memory report ok ($granularity: SwiGLU outputs $swiglu)"

#!/usr/bin/env bash
# cp_flops.sh MCC — the compute a step reported by `mcc compile` (the memory plan's count of each
# instruction's multiply-adds, ir_work_macs) splits over context parallelism: every cp_comm_type
# at CP=2 counts half the single rank's FLOPs a rank (attention over gathered keys counts every
# key, a ring piece one rank's, Ulysses every token of half the heads); and its communication line
# (memory_plan.c's comm_sent_bytes) counts bytes over cp under each, none on the single rank.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
flops() { "$mcc" compile "$root/models/tiny-llama.json" --target cpu "$@" -o "$work/plan" 2>&1 |
  sed -n 's/.*compute a step: \([0-9.e+-]*\) GFLOP per rank.*/\1/p'; }
single=$(flops)
[ -n "$single" ] || { echo "FAIL: no 'compute a step' line in mcc compile's report"; exit 1; }
status=0
for comm in all_gather p2p a2a; do
  got=$(flops --cp 2 --cp-comm-type "$comm")
  if ! /usr/bin/python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(2 * a - b) > 1e-9 * b)" \
    "$got" "$single"; then
    echo "FAIL: --cp 2 --cp-comm-type $comm counts $got GFLOP a rank, not half the single rank's $single"; status=1
  fi
done
sent_cp() { "$mcc" compile "$root/models/tiny-llama.json" --target cpu "$@" -o "$work/plan" 2>&1 |
  sed -n 's/^communication a step: .* cp \([0-9.e+-]*\) GiB.*/\1/p'; }
if "$mcc" compile "$root/models/tiny-llama.json" --target cpu -o "$work/plan" 2>&1 | grep -q '^communication a step'; then
  echo "FAIL: the single rank reports communication"; status=1
fi
for comm in all_gather p2p a2a; do
  [ -n "$(sent_cp --cp 2 --cp-comm-type "$comm")" ] ||
    { echo "FAIL: --cp 2 --cp-comm-type $comm reports no bytes sent over cp"; status=1; }
done
[ $status = 0 ] && echo "cp 2 counts half the single rank's $single GFLOP a rank under all_gather, p2p and a2a, and bytes over cp"
exit $status

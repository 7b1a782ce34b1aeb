#!/usr/bin/env bash
# cp_flops.sh MCC — the compute a step reported by `mcc compile` (the memory plan's count of each
# instruction's multiply-adds, ir_work_macs) splits over context parallelism: every cp_comm_type
# at CP=2 counts half the single rank's FLOPs a rank (attention over gathered keys counts every
# key, a ring piece one rank's, Ulysses every token of half the heads).
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
[ $status = 0 ] && echo "cp 2 counts half the single rank's $single GFLOP a rank under all_gather, p2p and a2a"
exit $status

#!/usr/bin/env bash
# moe_cuda_compile.sh MCC — no GPU needed: MoE models compile for --target cuda (their kernels are
# kernels_templates/moe.cuh, the grouped GEMMs runtime/cuda/matmul.c): tiny-moe and the two MoE
# benchmark configs write a train_rank, and the plan's grouped GEMMs are host waits (no CUDA graph).
set -uo pipefail
mcc=$1 root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
for spec in models/tiny-moe.json bench/configs/moe-8x1B.json bench/configs/moe-32x8.json; do
  "$mcc" compile "$root/$spec" --target cuda -o "$work/train_rank" >"$work/log" 2>&1 ||
    { cat "$work/log"; echo "FAIL: mcc compile $spec --target cuda"; exit 1; }
  [ -x "$work/train_rank" ] || { echo "FAIL: mcc compile $spec --target cuda wrote no train_rank"; exit 1; }
done
# token dropping: the kept weights are bf16 there (moe_sort takes them in the working dtype)
"$mcc" compile "$root/models/tiny-moe.json" --target cuda --moe-expert-capacity-factor 1.0 -o "$work/train_rank" \
  >"$work/log" 2>&1 || { cat "$work/log"; echo "FAIL: tiny-moe with a capacity factor, --target cuda"; exit 1; }
n=$("$mcc" ir "$root/models/tiny-moe.json" --target cuda 2>/dev/null | grep -c 'moe_grouped_matmul')
[ "$n" -gt 0 ] || { echo "FAIL: tiny-moe's CUDA plan has no moe_grouped_matmul"; exit 1; }
echo "ok: MoE models compile for --target cuda ($n grouped matmuls in tiny-moe's plan)"

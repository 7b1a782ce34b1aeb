#!/usr/bin/env bash
# llvm_kernels.sh MCC MODEL — the elementwise CPU kernels mcc generates as LLVM IR compute what
# the C kernels compute: one executable, run with its generated kernels and with
# MCC_CPU_KERNELS=c, must give the same logits, gradients, final weights and 10 losses (1e-5;
# only the float rounding of the formulas' order may differ).
set -euo pipefail
mcc=$1; model=$2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
"$mcc" compile "$root/models/$model.json" --target cpu --keep-logits -o "$work/train_rank" 2>/dev/null
symbols=$(nm "$work/train_rank")
grep -q " mcc_cpu_add$" <<<"$symbols" || { echo "no generated kernels in the executable"; exit 1; }
args=(--data-path "$work/text_text_document" --train-iters 10 --eval-iters 0)
"$work/train_rank" "${args[@]}" --dump-dir "$work/llvm" >/dev/null
MCC_CPU_KERNELS=c "$work/train_rank" "${args[@]}" --dump-dir "$work/c" >/dev/null
/usr/bin/python3 "$root/tests/compare_dumps.py" --cpu "$work/c" --gpu "$work/llvm" --tol 1e-5 --loss-tol 1e-5 --final

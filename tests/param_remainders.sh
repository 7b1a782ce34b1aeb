#!/usr/bin/env bash
# param_remainders.sh MCC — store_param_remainders (Megatron's, with --use-precision-aware-optimizer):
# on the CUDA target each bf16 parameter's fp32 master is held as its bf16 copy and an i16
# remainder, so `mcc compile` plans 4 bytes a parameter instead of 6 (llama3-8b: exactly 2/3 of the
# parameters' memory, the rest unchanged), under TP and PP too; not applied, and so not planned,
# with --no-store-param-remainders, without the precision-aware optimizer, under the distributed
# optimizer or CPU offload (whole fp32 masters), or on the CPU target (fp32 parameters); and every
# plan that has it verifies (no function names a parameter held so: ir/verify.c). The arithmetic
# (AdamW on the pair equals AdamW on the master, bit for bit) is cpu_kernels_test's, on the host,
# and cuda_ops_test's on a GPU.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
status=0
bytes() { # KIND FLAGS...: the plan's bytes of KIND (parameters, total) from --memory-report's GiB line
  local kind=$1; shift
  "$mcc" compile "$root/models/llama3-8b.json" --target cuda --global-batch-size 1 --gpu-memory 1000 "$@" -o "$work/tr" >"$work/c.log" 2>&1 ||
    { cat "$work/c.log"; exit 1; }
  sed -n "s/^  $kind  *\([0-9.]*\) GiB.*/\1/p" "$work/c.log" | head -1
}
whole=$(bytes parameters)
pair=$(bytes parameters --use-precision-aware-optimizer)
ratio=$(python3 -c "print(f'{$pair / $whole:.4f}')")
if [ "$ratio" = 0.6667 ]; then echo "ok: llama3-8b parameters $whole -> $pair GiB (4/6)"; else
  echo "FAIL: llama3-8b parameters $whole -> $pair GiB, ratio $ratio, not 4/6"; status=1; fi
grads=$(bytes gradients) grads_pair=$(bytes gradients --use-precision-aware-optimizer)
[ "$grads" = "$grads_pair" ] || { echo "FAIL: gradients $grads -> $grads_pair GiB: remainders change only parameters"; status=1; }
for flags in "--tp 2" "--pp 2" "--tp 2 --sequence-parallel --pp 2"; do
  # shellcheck disable=SC2086
  w=$(bytes parameters $flags) p=$(bytes parameters $flags --use-precision-aware-optimizer)
  r=$(python3 -c "print(f'{$p / $w:.3f}')")
  if [ "$r" = 0.667 ]; then echo "ok: $flags: $w -> $p GiB"; else echo "FAIL: $flags: $w -> $p GiB ($r)"; status=1; fi
done
for flags in "--use-precision-aware-optimizer --no-store-param-remainders" \
             "--use-precision-aware-optimizer --store-param-remainders false" \
             "--use-precision-aware-optimizer --dp 2 --use-distributed-optimizer" \
             "--use-precision-aware-optimizer --optimizer-cpu-offload" "--store-param-remainders true"; do
  # shellcheck disable=SC2086
  "$mcc" ir "$root/models/tiny-llama.json" --target cuda $flags --after memory_plan >"$work/ir" 2>"$work/ir.err" ||
    { cat "$work/ir.err"; exit 1; }
  if grep -q 'kind=remainder' "$work/ir"; then echo "FAIL: $flags: remainders planned"; status=1; else
    echo "ok: $flags: whole fp32 masters"; fi
done
"$mcc" ir "$root/models/tiny-llama.json" --target cpu --use-precision-aware-optimizer --after memory_plan >"$work/ir" 2>/dev/null
grep -q 'kind=remainder' "$work/ir" && { echo "FAIL: the CPU target (fp32 parameters) planned remainders"; status=1; }
"$mcc" ir "$root/models/tiny-moe.json" --target cuda --use-precision-aware-optimizer --tp 2 --sequence-parallel --dp 2 \
  --expert-model-parallel-size 2 --after memory_plan >"$work/ir" 2>/dev/null
params=$(grep -c '{kind=param,' "$work/ir") rems=$(grep -c '{kind=remainder,' "$work/ir")
adamw_pairs=$(grep -cE '^  adamw %[0-9]+, .*, %[0-9]+ \{' "$work/ir")
if [ "$params" = "$rems" ] && [ "$rems" -gt 0 ]; then echo "ok: tiny-moe tp2 sp dp2 ep2: $rems of $params parameters as pairs, $adamw_pairs eight-operand AdamWs"
else echo "FAIL: tiny-moe tp2 sp dp2 ep2: $rems remainders for $params parameters"; status=1; fi
exit $status

#!/usr/bin/env bash
# step_cost.sh MCC — the step-time model (passes/step_cost.h) against the H100 steps it was fitted to
# (bench/calibration/h100-steps.tsv, measured by bench/calibrate.sh): mcc compile --target h100 of each
# of bench/calibrate.sh's 30 one-GPU configs predicts its measured step within 5% (MoE's, whose
# experts' rows follow the routing, within 12%), and within 3% on average. A change to what the plans
# run, or to the model, that moves a prediction off its measurement fails here: recalibrate
# (bench/calibrate.sh, bench/calibrate.py) or fix it. The model's error on configs it was not fitted
# to (each left out of the fit) is bench/calibration/h100-fit.txt's. And DeepSeek-V3's grouped GEMMs
# behind expert parallelism: by their routed rows, within the datasheet's peak, and its run sorts and
# the elementwise ops between the GEMMs by the rows received. And llama3-8b's offloaded host step
# under --clip-grad 0 counted beside the last micro-batch's backward, not after it.
set -uo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fails=0 sum=0 n=0
while read -r name config flags; do
  want=$(awk -v n="$name" '$1 == n { print $2 }' "$root/bench/calibration/h100-steps.tsv")
  [ -n "$want" ] || { echo "FAIL: $name has no measured step in bench/calibration/h100-steps.tsv"; fails=$((fails + 1)); continue; }
  # shellcheck disable=SC2086 # the flags split as words
  "$mcc" compile "$root/bench/configs/$config.json" $flags --target h100 --mock-data -o "$work/x" 2>"$work/c.log" ||
    { echo "FAIL: $name does not compile: $(grep error "$work/c.log")"; fails=$((fails + 1)); continue; }
  got=$(grep -o 'step time (compute, no collectives): ~[0-9.]* ms predicted' "$work/c.log" | grep -o '[0-9.]* ms' | cut -d' ' -f1)
  [ -n "$got" ] || { echo "FAIL: $name: no calibrated prediction printed"; fails=$((fails + 1)); continue; }
  limit=5; [[ $name == moe-* ]] && limit=12
  read -r err ok < <(awk -v g="$got" -v w="$want" -v l="$limit" 'BEGIN { e = 100 * (g - w) / w; a = e < 0 ? -e : e;
    printf "%.2f %d\n", a, a <= l }')
  printf '%-22s measured %8.2f ms  predicted %8.2f ms  %5.2f%%\n' "$name" "$want" "$got" "$err"
  [ "$ok" = 1 ] || { echo "FAIL: $name predicted $got ms, measured $want ms: more than $limit% off"; fails=$((fails + 1)); }
  sum=$(awk -v s="$sum" -v e="$err" 'BEGIN { print s + e }'); n=$((n + 1))
done < <(bash "$root/bench/calibrate.sh" list)
mean=$(awk -v s="$sum" -v n="$n" 'BEGIN { printf "%.2f", n ? s / n : 0 }')
echo "$n configs, mean |error| $mean%"
[ "$n" -ge 30 ] || { echo "FAIL: $n configs, bench/calibrate.sh lists 30"; fails=$((fails + 1)); }
awk -v m="$mean" 'BEGIN { exit !(m <= 3) }' || { echo "FAIL: mean error $mean% above 3%"; fails=$((fails + 1)); }
# Beyond the configs: DeepSeek-V3 at DeepSeek's PP16 x EP64 on 2,048, a middle stage's grouped GEMMs
# (4 experts a rank, 8,192 rows each at balanced routing) are costed by the rows routed to them, not by
# their receive buffer's dropless room (32 times as many rows), and never past the H100's datasheet
# 989 TFLOP/s: each between 500 and 989 (counted whole the room made them ~61).
"$mcc" compile "$root/models/deepseek-v3.json" --tp 1 --pp 16 --expert-model-parallel-size 64 --world-size 2048 \
  --use-distributed-optimizer --decoder-first-pipeline-num-layers 4 --decoder-last-pipeline-num-layers 1 \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --grad-reduce-in-bf16 \
  --target h100 --cost-table "$work/ds3.tsv" -o "$work/x" >/dev/null 2>"$work/ds3.log" ||
  { echo "FAIL: DeepSeek-V3 at PP16 x EP64 does not compile: $(grep error "$work/ds3.log")"; fails=$((fails + 1)); }
read -r lo hi < <(awk -F'\t' '$3 ~ /^moe_grouped/ { r = $6 / ($9 * 1e-6) / 1e12; lo = !n++ || r < lo ? r : lo; hi = r > hi ? r : hi }
  END { printf "%.0f %.0f\n", lo, hi }' "$work/ds3.tsv.stage1" 2>/dev/null)
echo "DeepSeek-V3's grouped GEMMs at ep 64: ${lo:-none} to ${hi:-none} TFLOP/s predicted"
awk -v lo="${lo:-0}" -v hi="${hi:-0}" 'BEGIN { exit !(lo >= 500 && hi <= 989) }' ||
  { echo "FAIL: DeepSeek-V3's grouped GEMMs predicted at ${lo:-none}-${hi:-none} TFLOP/s, not within 500-989"; fails=$((fails + 1)); }
# Its run sorts (moe_sort_runs, moe_unsort_runs: a block a row received, kernels_templates/moe.cuh)
# by the 32,768 rows received too: 2 x 32,768 x 7,168 bf16 = 0.94 GB a call, not the room's 30.1 GB.
gb=$(awk -F'\t' '$3 ~ /^moe_(un)?sort_runs$/ { b = $7 > b ? $7 : b } END { printf "%.2f", b / 1e9 }' "$work/ds3.tsv.stage1" 2>/dev/null)
echo "DeepSeek-V3's run sorts at ep 64: ${gb:-none} GB a call predicted"
awk -v g="${gb:-0}" 'BEGIN { exit !(g >= 0.9 && g <= 1.0) }' ||
  { echo "FAIL: DeepSeek-V3's run sorts cost ${gb:-none} GB a call, not the 0.94 GB of the rows received"; fails=$((fails + 1)); }
# The elementwise ops over those buffers (swiglu, swiglu_grad, the add of the up and gate projections'
# input gradients: bounded by the rows received, passes/row_bounds.c) by those rows too: the add, the
# largest, 3 x 32,768 x 7,168 bf16 = 1.41 GB a call, not the room's 45.1 GB.
gb=$(awk -F'\t' '$3 ~ /^(swiglu|swiglu_grad|add)$/ { b = $7 > b ? $7 : b } END { printf "%.2f", b / 1e9 }' "$work/ds3.tsv.stage1" 2>/dev/null)
echo "DeepSeek-V3's elementwise ops over the received rows at ep 64: at most ${gb:-none} GB a call predicted"
awk -v g="${gb:-0}" 'BEGIN { exit !(g >= 1.3 && g <= 1.5) }' ||
  { echo "FAIL: DeepSeek-V3's swiglu, swiglu_grad and add cost up to ${gb:-none} GB a call, not the 1.41 GB of the rows received"; fails=$((fails + 1)); }
# llama3-8b with --optimizer-cpu-offload (8 micro-batches of one): under --clip-grad 0 the host's update
# runs beside the last micro-batch's backward (passes/grad_ready.c), so the predicted step is shorter
# than the clipped one's (host after the backward), by no more than that micro-batch's share of the step.
offl="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --optimizer-cpu-offload
      --global-batch-size 8 --host-memory 120 --mock-data --target h100"
for clip in 1 0; do
  # shellcheck disable=SC2086 # the flags split as words
  "$mcc" compile "$root/models/llama3-8b.json" $offl --clip-grad $clip -o "$work/x" 2>"$work/offl$clip.log" ||
    { echo "FAIL: llama3-8b offload --clip-grad $clip does not compile: $(grep error "$work/offl$clip.log")"; fails=$((fails + 1)); }
done
read -r clipped beside < <(for clip in 1 0; do grep -o 'step time (compute, no collectives): ~[0-9.]* ms' "$work/offl$clip.log" |
  grep -o '[0-9.]* ms' | cut -d' ' -f1; done | paste -sd' ')
echo "llama3-8b offload: ${clipped:-none} ms clipped (host after the backward), ${beside:-none} ms with --clip-grad 0 (beside it)"
awk -v c="${clipped:-0}" -v b="${beside:-0}" 'BEGIN { exit !(b > 0 && b < c && c - b <= c / 8) }' ||
  { echo "FAIL: llama3-8b offload's step under --clip-grad 0 predicted ${beside:-none} ms against ${clipped:-none} clipped: not shorter, or shorter by more than one micro-batch's share"; fails=$((fails + 1)); }
[ "$fails" = 0 ] && echo "ok: the step-time model reproduces its measurements" || exit 1

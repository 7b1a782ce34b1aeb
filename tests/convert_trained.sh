#!/usr/bin/env bash
# convert_trained.sh MCC MODEL NP "MODEL FLAGS" [LAYOUT FLAGS...] — a trained model through Hugging
# Face and back: MODEL compiled with MODEL FLAGS and the layout (--tp 2 --dp 2
# --use-distributed-optimizer on NP CPU ranks) trains 3 steps with --save; `mcc convert --to hf` exports the checkpoint; the HF forward (by hand in
# tests/convert_hf.py, transformers' conventions) on the exported weights gives train_rank's step-1
# logits of a one-rank run of the checkpoint (--load --finetune, --dump-dir) on the same tokens;
# (the same without --spec: the manifest records the model);
# `mcc convert --from hf` imports the export: every weight equals the trained checkpoint's to the bit
# (the vocabulary's padding rows, which HF has not, come back zero), and train_rank compiled from the
# spec the import wrote loads it and gives the HF forward's logits (and, its step being one
# micro-batch, their lm loss) too.
set -euo pipefail
mcc=$1; model=$2; np=$3; read -r -a mflags <<<"$4"; shift 4
root=$(cd "$(dirname "$0")/.." && pwd)
py="/usr/bin/python3 $root/tests/convert_hf.py"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} # Open MPI's allocations (parallel_e2e.sh)
run() { if [ "$np" = 1 ]; then "$@"; else mpirun -np "$np" --oversubscribe "$@"; fi; }
spec="$root/models/$model.json"
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
data=(--data-path "$work/text_text_document")
"$mcc" compile "$spec" --target cpu "${mflags[@]}" "$@" -o "$work/train" 2>"$work/c.log" || { cat "$work/c.log"; exit 1; }
run "$work/train" "${data[@]}" --train-iters 3 --save "$work/ck" >"$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
"$mcc" convert --to hf "$work/ck" "$work/hf" --spec "$spec" "${mflags[@]}" "$@"
# the checkpoint records its model: without --spec the export is the same, byte for byte
"$mcc" convert --to hf "$work/ck" "$work/hf0" 2>/dev/null
$py same "$work/hf" "$work/hf0" --export-defaults
# the trained weights on one rank: step 1 of a fine-tuning run computes with them (a tp layout pads
# the vocabulary to a multiple of its own, which the model flags make the same)
"$mcc" compile "$spec" --target cpu --keep-logits --lr-warmup-iters 0 "${mflags[@]}" -o "$work/one" 2>"$work/c1.log" || { cat "$work/c1.log"; exit 1; }
"$work/one" "${data[@]}" --train-iters 1 --load "$work/ck" --finetune --dump-dir "$work/d" >"$work/one.log" 2>&1 ||
  { cat "$work/one.log"; exit 1; }
$py logits --hf "$work/hf" --dump "$work/d"
"$mcc" convert --from hf "$work/hf" "$work/ck2"
eb=() # an MoE model's expert biases (DeepSeek-V3's e_score_correction_bias): the trained checkpoint's
if grep -q '"expert_bias"' "$work"/ck/iter_*/manifest.json; then eb=(--expert-bias-from "$work/ck"); fi
$py ckpt-same "$work/d/params_init.mcct" "$work/ck2" "${eb[@]}"
"$mcc" compile "$work/ck2/spec.json" --target cpu --keep-logits -o "$work/two" 2>"$work/c2.log" || { cat "$work/c2.log"; exit 1; }
"$work/two" "${data[@]}" --train-iters 1 --load "$work/ck2" --finetune --dump-dir "$work/d2" >"$work/two.log" 2>&1 ||
  { cat "$work/two.log"; exit 1; }
grep -q "loaded checkpoint .*weights only" "$work/two.log" || { echo "FAIL: the import was not loaded"; cat "$work/two.log"; exit 1; }
$py logits --hf "$work/hf" --dump "$work/d2"
echo PASS

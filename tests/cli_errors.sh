#!/usr/bin/env bash
# cli_errors.sh MCC — bad command lines and specs given to `mcc` and to a compiled train_rank
# must each exit with status 1 or 2 (never a signal or sanitizer abort) and print their own
# message naming what to fix.
set -uo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fails=0
# expect SUBSTRING -- COMMAND...
expect() {
  local want=$1; shift 2
  "$@" >"$work/out" 2>&1; local rc=$?
  if [ $rc -eq 0 ] || [ $rc -gt 2 ] || ! grep -qF -- "$want" "$work/out"; then
    echo "FAIL (exit $rc): $*"; echo "  wanted: $want"; sed 's/^/  got: /' "$work/out" | head -5; fails=$((fails + 1))
  else
    echo "ok: $want"
  fi
}
tiny=$root/models/tiny-gpt2.json
printf '{"model": {"num_layers": 2}}' > "$work/partial.json"
printf '{"model": ' > "$work/broken.json"
expect "usage" -- "$mcc"
expect "unknown command 'frobnicate'" -- "$mcc" frobnicate
expect "model.num_layers, model.hidden_size, model.num_attention_heads, model.seq_length, model.vocab_size are required" -- "$mcc" compile -o x
expect "-o OUT is required" -- "$mcc" compile "$tiny"
expect "no such pass" -- "$mcc" ir "$tiny" --after nonsense
expect "unknown flag '--bogus'" -- "$mcc" ir "$tiny" --bogus 3
expect "--target gpu" -- "$mcc" compile "$tiny" --target gpu -o "$work/x"
expect "--hidden-size" -- "$mcc" compile "$tiny" --hidden-size abc -o "$work/x"
expect "--hidden-size (66) must be divisible by model.num_attention_heads" -- "$mcc" compile "$tiny" --hidden-size 66 -o "$work/x"
expect "model.hidden_size" -- "$mcc" compile "$work/partial.json" -o "$work/x"
expect "broken.json" -- "$mcc" compile "$work/broken.json" -o "$work/x"
expect "--input" -- "$mcc" data preprocess --output-prefix "$work/d"
fp8=(--fp8-format hybrid --fp8-recipe tensorwise)
# FP8 for the CUDA target: the fp8 pass builds it (the passes only: NVRTC would take a minute)
fp8_ir=$("$mcc" ir "$tiny" "${fp8[@]}" --target cuda --after fp8 2>&1)
grep -q fp8_matmul <<<"$fp8_ir" ||
    { echo "FAIL: mcc ir --fp8-format hybrid --target cuda made no fp8_matmul"; exit 1; }
# FP8 experts, for both targets: the routed experts' grouped GEMMs on per-expert scales, the router's
# matmul kept in its dtype (no amax history of its own); blockwise ones on block scales (the wgrad's
# operands quantized with the counts), and refused with the fix where an expert's weight does not
# tile by 128
for target in cpu cuda; do
  moe_ir=$("$mcc" ir "$root/models/tiny-moe.json" --fp8-format hybrid --fp8-recipe delayed --target $target 2>&1)
  grep -q "= fp8_grouped_matmul" <<<"$moe_ir" && grep -q "fp8_grouped_wgrad" <<<"$moe_ir" &&
    ! grep -q "router.weight.amax_history" <<<"$moe_ir" ||
    { echo "FAIL: mcc ir tiny-moe --fp8-format hybrid --target $target: no FP8 grouped GEMMs, or the router in FP8";
      echo "$moe_ir" | tail -3; exit 1; }
done
moe_bw=(--fp8-format e4m3 --fp8-recipe blockwise --hidden-size 128 --ffn-hidden-size 256 --num-attention-heads 2
        --num-query-groups 2 --moe-shared-expert-intermediate-size 128)
for target in cpu cuda; do
  moe_ir=$("$mcc" ir "$root/models/tiny-moe.json" "${moe_bw[@]}" --moe-ffn-hidden-size 128 --target $target 2>&1)
  grep -qE "= fp8_grouped_matmul .* : (f32|bf16)\[[0-9]+,128\]" <<<"$moe_ir" &&
    grep -qE "fp8_block_quantize %[0-9]+, %[0-9]+ \{rows=1, cols=128, transpose=1, experts=0\}" <<<"$moe_ir" ||
    { echo "FAIL: mcc ir tiny-moe --fp8-recipe blockwise --target $target: no blockwise FP8 grouped GEMMs";
      echo "$moe_ir" | tail -3; exit 1; }
done
expect "blockwise FP8 cuts each expert's weight into 128x128 blocks: make hidden_size and moe_ffn_hidden_size" -- \
  "$mcc" ir "$root/models/tiny-moe.json" "${moe_bw[@]}" --target cpu
# delayed scaling's fields without it
expect "--fp8-margin is set but --fp8-recipe is tensorwise: it configures delayed scaling" -- "$mcc" compile "$tiny" "${fp8[@]}" --fp8-margin 1 --target cpu -o "$work/x"
# blockwise FP8: a layer whose matmuls do not tile by 128; for the cuda target the whole pipeline
# builds it, every block-scaled GEMM K-major (ta=0, tb=1: cuBLASLt's block scale modes are TN only)
blockwise=(--fp8-format e4m3 --fp8-recipe blockwise)
expect "blockwise FP8 cuts each into 128-wide tiles: make hidden_size, ffn_hidden_size" -- "$mcc" ir "$tiny" "${blockwise[@]}" --target cpu
bw_ir=$("$mcc" ir "$tiny" "${blockwise[@]}" --hidden-size 128 --ffn-hidden-size 256 --num-attention-heads 2 --target cuda 2>&1)
bw_gemms=$(grep -cE "= fp8_matmul|fp8_matmul_accumulate" <<<"$bw_ir")
bw_tn=$(grep -E "= fp8_matmul|fp8_matmul_accumulate" <<<"$bw_ir" | grep -c "{ta=0, tb=1")
[ "$bw_gemms" -gt 0 ] && [ "$bw_gemms" = "$bw_tn" ] ||
  { echo "FAIL: mcc ir --fp8-recipe blockwise --target cuda: $bw_tn of $bw_gemms FP8 GEMMs K-major"; echo "$bw_ir" | tail -3; exit 1; }
expect "--fp8-recipe is blockwise with tensor_model_parallel_size 2" -- "$mcc" ir "$tiny" "${blockwise[@]}" \
  --hidden-size 128 --ffn-hidden-size 256 --num-attention-heads 2 --tp 2 --target cuda
# train_rank: compile one and feed it bad flags and data
"$mcc" compile "$tiny" --target cpu -o "$work/train_rank" 2>/dev/null || { echo "FAIL: could not compile $tiny"; exit 1; }
"$mcc" compile "$tiny" --target cpu --vocab-size 100 -o "$work/train_small_vocab" 2>/dev/null
printf 'hello world, this is a small document for the test\n' > "$work/doc.txt"
"$mcc" data preprocess --input "$work/doc.txt" --output-prefix "$work/doc" --append-eod >/dev/null 2>&1
expect "--data-path is required" -- "$work/train_rank"
expect "unknown or incomplete flag '--frob' (train_rank --help lists its flags)" -- "$work/train_rank" --frob
expect "--lr is compiled into the plan (its config lr, which \`train_rank --print-plan\` shows): recompile with \`mcc compile SPEC --lr VALUE ...\`" -- "$work/train_rank" --data-path "$work/doc_text_document" --lr 1e-4
expect "train_rank: error: --train-iters" -- "$work/train_rank" --data-path "$work/doc_text_document" --train-iters -3
expect "--data-path $work/missing" -- "$work/train_rank" --data-path "$work/missing"
expect "recompile with --vocab-size" -- "$work/train_small_vocab" --data-path "$work/doc_text_document"
expect "--tp-comm-interleave splits the micro-batch into two halves" -- "$mcc" ir "$tiny" --tp 2 \
  --sequence-parallel --tp-comm-interleave --micro-batch-size 3 --global-batch-size 9 --vocab-size 258
expect "two ways of overlapping the same collectives" -- "$mcc" ir "$tiny" --tp 2 --sequence-parallel --tp-comm-interleave \
  --tp-comm-overlap --vocab-size 258
[ $fails = 0 ] && echo "all CLI error cases pass"
exit $((fails > 0))

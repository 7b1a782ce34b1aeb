#!/usr/bin/env bash
# single_rank_ref.sh MCC MODEL DIR ITERS [SPEC_FLAGS...] — the single-rank run a parallel layout is
# compared with (tests/parallel_e2e.sh): MODEL compiled with the layouts' common flags and
# SPEC_FLAGS, trained ITERS steps on the numerics corpus, into DIR: the dataset
# (text_text_document.*), the compile flags the layout's program must share (compile_flags, one a
# line), the dumps (ref/) and the metrics (ref.jsonl). One run serves every layout of the same
# reference (tests/harness.cmake's fixtures); DIR is replaced whole, or left absent on a failure.
set -euo pipefail
mcc=$1; model=$2; dir=$3; iters=$4; shift 4
root=$(cd "$(dirname "$0")/.." && pwd)
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
rm -rf "$dir" "$dir.tmp"
mkdir -p "$dir.tmp"
work=$dir.tmp
trap 'rm -rf "$work"' EXIT
# the spec's own sizes, made divisible by every layout tested (vocab 257 -> 260 for tp 2, 4),
# unpadded: Megatron's padding (to a multiple of 128 * tp) would give each tp another vocabulary
common=(--target cpu --keep-logits --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16 "$@")
printf '%s\n' "${common[@]}" >"$work/compile_flags"
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
"$mcc" compile "$root/models/$model.json" "${common[@]}" -o "$work/single" 2>"$work/c1.log" || { cat "$work/c1.log"; exit 1; }
"$work/single" --data-path "$work/text_text_document" --train-iters "$iters" --dump-dir "$work/ref" \
  --metrics-file "$work/ref.jsonl" >"$work/ref.log" || { cat "$work/ref.log"; exit 1; }
rm -f "$work/single"
mv "$work" "$dir"
trap - EXIT
echo "single rank: $model, $iters steps, spec flags: ${*:-none} -> $dir"

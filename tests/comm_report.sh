#!/usr/bin/env bash
# comm_report.sh MCC — the pipeline's bytes in `mcc compile`'s communication line (memory_plan.c:
# the train program's send steps) against a hand count, on each stage: LLaMA-3 8B at pp 2 on CPU
# ranks sends each of its 512 micro-batches' boundary, 1 x 8192 x 4096 fp32 = 128 MiB, down (stage
# 0's activations) or up (stage 1's gradients): 64 GiB a step; tiny GPT-2 at pp 2 sends its 2
# micro-batches' 4 x 32 x 64 fp32 (32 KiB each) and once a step its tied embedding's gradient, 384
# (257 padded) x 64 fp32 = 96 KiB: 160 KiB, and stage 1 also the 64-float gradient of the bias its
# boundary activation ends with, summed over the rows (sum_rows) where the rows' gradient is made.
# (Both stages also all-reduce a few scalars over pp: under the line's 4 digits.)
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
status=0
check() { # MODEL "STAGE0_GIB STAGE1_GIB" FLAGS...
  local model=$1 want=$2; shift 2
  "$mcc" compile "$root/models/$model.json" --target cpu --pp 2 "$@" -o "$work/plan" 2>"$work/log" ||
    { cat "$work/log"; exit 1; }
  local got
  got=$(sed -n 's/^communication a step: .* pp \([0-9.e+-]*\) GiB.*/\1/p' "$work/log" | tr '\n' ' ')
  if ! /usr/bin/python3 -c "import sys; w, g = (list(map(float, a.split())) for a in sys.argv[1:3]); sys.exit(len(g) != 2 or any(abs(x - y) > 1e-3 * y for x, y in zip(g, w)))" "$want" "$got"; then
    echo "FAIL: $model at pp 2 reports pp [${got}] GiB a step on its stages, the hand count $want"; status=1
  else
    echo "ok: $model at pp 2: pp ${got}GiB a step on each stage, the hand count $want"
  fi
}
check llama3-8b "64 64"
check tiny-gpt2 "$(/usr/bin/python3 -c 'a, t, b = 4 * 32 * 64 * 4, 384 * 64 * 4, 64 * 4; print((2 * a + t) / 2**30, (2 * (a + b) + t) / 2**30)')"
exit $status

#!/usr/bin/env bash
# knobs.sh MCC — the MCC_* environment variables (common/knobs.h), on the tiny GPT (CPU):
# (1) a misspelt MCC_ variable and a bad value are refused by mcc and by train_rank at start-up,
#     status 2, naming the variable, "did you mean" and the choices or range; a retired one
#     (MCC_COMM_LANES) names the compile flag that replaced it;
# (2) a valid setting is shown in train_rank's start-up box and is the metrics file's first
#     record, which `mcc plot` reads past;
# (3) docs/gpus.md's Knobs table has a row for every knob of the table.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for v in $(env | grep -o '^MCC_[A-Za-z0-9_]*'); do unset "$v"; done # the test's own environment
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
"$mcc" compile "$root/models/tiny-gpt2.json" --target cpu -o "$work/tr" 2>/dev/null
train() { "$work/tr" --data-path "$work/text_text_document" --train-iters 2 --eval-iters 0 "$@"; }

# (1) refused: ENV=VALUE WANT, by both programs
refused() {
  local setting=$1 want=$2
  for prog in mcc train_rank; do
    local rc=0
    if [ $prog = mcc ]; then env "$setting" "$mcc" --version > /dev/null 2> "$work/err" || rc=$?
    else env "$setting" "$work/tr" --data-path "$work/text_text_document" > /dev/null 2> "$work/err" || rc=$?; fi
    [ "$rc" = 2 ] || fail "$prog with $setting exited $rc, want 2: $(cat "$work/err")"
    grep -qF -- "$prog: error: $want" "$work/err" || fail "$prog with $setting: want '$want' in: $(cat "$work/err")"
  done
}
refused MCC_CUDA_GRAPH=0 "MCC_CUDA_GRAPH is not an mcc environment variable: did you mean MCC_CUDA_GRAPHS?"
refused MCC_NO_SUCH_THING=1 "MCC_NO_SUCH_THING is not an mcc environment variable; unset it. The knobs are: MCC_ANCHORS MCC_ATTENTION"
refused MCC_ATTENTION=cudn \
  "MCC_ATTENTION=cudn: expects one of auto|mcc|cudnn (did you mean cudnn?); unset it for the default (auto)"
refused MCC_COMM_LANES=none "MCC_COMM_LANES is no longer read: the lanes are compiled into the plan, so its memory \
report counts their buffers: unset it and compile with \`mcc compile --comm-lanes copy|side|side,copy|none\`"
refused MCC_TP_NCCL_CTAS=abc "MCC_TP_NCCL_CTAS expects an integer in 1..64, got 'abc'; unset it for the default (64)"
refused MCC_SIDE_NCCL_CTAS=0 "MCC_SIDE_NCCL_CTAS 0 is out of range: give an integer in 1..64"
refused MCC_COLLECTIVE_TIMEOUT_S=-1 "MCC_COLLECTIVE_TIMEOUT_S -1 is out of range: give a number in (0"
refused MCC_PROFILE=yes "MCC_PROFILE=yes: expects one of 0|1"

# (2) shown: in the box (only what is set) and as the metrics file's first record
MCC_CPU_KERNELS=c MCC_CUDA_GRAPHS=0 train --metrics-file "$work/m.jsonl" > "$work/log" 2>&1 ||
  fail "a valid setting: $(cat "$work/log")"
grep -q '^| MCC_CUDA_GRAPHS=0  *|$' "$work/log" || fail "the box lacks MCC_CUDA_GRAPHS: $(cat "$work/log")"
grep -q '^| MCC_CPU_KERNELS=c  *|$' "$work/log" || fail "the box lacks MCC_CPU_KERNELS: $(cat "$work/log")"
! grep -q 'MCC_PROFILE' "$work/log" || fail "the box shows an unset knob: $(cat "$work/log")"
first='{"iteration": 0, "knobs": {"MCC_CPU_KERNELS": "c", "MCC_CUDA_GRAPHS": "0"}}'
[ "$(head -n 1 "$work/m.jsonl")" = "$first" ] || fail "first record: $(head -n 1 "$work/m.jsonl")"
[ "$(grep -c '"loss"' "$work/m.jsonl")" = 2 ] || fail "training records: $(cat "$work/m.jsonl")"
"$mcc" plot "$work/m.jsonl" -o "$work/m.svg" 2> "$work/plot.err" || fail "mcc plot: $(cat "$work/plot.err")"
grep -q '(2 training, 0 validation records)' "$work/plot.err" || fail "mcc plot: $(cat "$work/plot.err")"
train --metrics-file "$work/none.jsonl" > "$work/log" 2>&1 || fail "no knobs: $(cat "$work/log")"
! grep -q 'knobs\|MCC_' "$work/none.jsonl" "$work/log" || fail "knobs shown with none set"

# (3) docs/gpus.md: a row `MCC_X` for each knob mcc knows (the list from its own error message)
MCC_NO_SUCH_THING=1 "$mcc" --version 2> "$work/err" || true
knobs=$(sed -n 's/.*The knobs are: //p' "$work/err")
[ -n "$knobs" ] || fail "no knob list in: $(cat "$work/err")"
for k in $knobs; do
  grep -q "^| \`$k\` |" "$root/docs/gpus.md" || fail "docs/gpus.md's Knobs table has no row for $k"
done
echo "ok: $(echo "$knobs" | wc -w) knobs"

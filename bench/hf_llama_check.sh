#!/usr/bin/env bash
# hf_llama_check.sh [CONFIG] — on the GPU machine, from devrun/ (bench/bundle.sh with HF_LLAMA=1,
# which adds devrun/bin/mcc-convert: `mcc convert` without the compiler's libraries): the bench
# config (default llama-1B; its spec bench/configs/CONFIG.json, else models/CONFIG.json) trained 10
# steps with --save, exported by mcc-convert --to hf; one step of `--load --finetune --dump-dir`
# then gives mcc's loss with the checkpoint's weights on its first batch (steps.txt) and that batch
# (batches.mcct); bench/hf_llama_check.py loads the export in transformers and computes the loss on
# the same batch: equal within bf16 tolerance. Logs in $O/hf-CONFIG-*.log; exit 0 when equal.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
c=${1:-llama-1B}
bin=devrun/bin/bench-$c conv=devrun/bin/mcc-convert spec=${HF_LLAMA_SPEC:-bench/configs/$c.json}
[ -f "$spec" ] || spec=models/$c.json # HF_LLAMA_SPEC: the spec bin was compiled from, where not these
work=${HF_LLAMA_WORK:-/tmp/hf-$c}
data=(--data-path devrun/data/brown_text_document --split 100,0,0 --eval-iters 0)
# step NAME CMD...: runs CMD (its output in $O/hf-$c-NAME.log), says its exit status
step() {
  local what=$1; shift
  timeout 300 "$@" >"$O/hf-$c-$what.log" 2>&1
  local rc=$?
  echo "$c $what: exit $rc"; [ $rc = 0 ] || tail -5 "$O/hf-$c-$what.log"
  return $rc
}
check() {
  [ -x "$bin" ] && [ -x "$conv" ] || { echo "$c: $bin or $conv missing (bench/bundle.sh with HF_LLAMA=1)"; return 1; }
  rm -rf "$work" && mkdir -p "$work"
  step train "$bin" "${data[@]}" --train-iters 10 --log-interval 5 --save "$work/ck" || return 1
  grep -hE "saved checkpoint|iteration +10/" "$O/hf-$c-train.log"
  step export "$conv" --to hf "$work/ck" "$work/hf" --spec "$spec" || return 1
  # step 1 only (--exit-interval 1: the schedule's length, which must exceed its warm-up, is not
  # what stops it); its loss is the forward of the loaded weights, before any update
  step finetune "$bin" "${data[@]}" --train-iters 100 --exit-interval 1 --load "$work/ck" --finetune --dump-dir "$work/d" ||
    return 1
  step check python3 bench/hf_llama_check.py --hf "$work/hf" --dump "$work/d" --spec "$spec"
  local rc=$?
  [ $rc != 0 ] || cat "$O/hf-$c-check.log"
  du -sh "$work"/*
  return $rc
}
check; status=$?
rm -rf "$work" # the device's disk holds a few of them only
exit $status

#!/usr/bin/env bash
# tune_seed.sh MCC — `mcc tune` on the seed's recipes, H100s 8 a node: LLaMA-2 7B and 13B on 8
# GPUs, LLaMA-3 70B on 64, LLaMA-3 405B on 128, DeepSeek-V3 (61 layers and a multi-token depth) on
# 2,048. Each search ends with a first layout, and that layout's printed mcc compile command plans a
# fitting program (the 405B's only with the optimizer on the host: its host memory given as a
# node's) at the GiB tune listed.
set -uo pipefail
mcc=$(realpath "$1")
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
for row in "llama2-7b 8" "llama2-13b 8" "llama3-70b 64" "llama3-405b 128" "deepseek-v3 2048"; do
  read -r model world <<<"$row"
  "$mcc" tune "$root/models/$model.json" --world-size "$world" --target h100 --top 1 >"$work/$model" 2>/dev/null ||
    { bad "$model on $world: mcc tune exited $?: $(tail -2 "$work/$model")"; continue; }
  cmd=$(grep -A1 "^The first, compiled:" "$work/$model" | tail -1)
  [ -n "$cmd" ] || { bad "$model: no first layout: $(tail -3 "$work/$model")"; continue; }
  read -r -a args <<<"${cmd#*mcc compile }"
  args=("${args[@]/#-o/-o}")
  "$mcc" compile "${args[@]:0:${#args[@]}-2}" -o "$work/x" --host-memory 2048 >/dev/null 2>"$work/$model.log" &&
    grep -q "the plan fits" "$work/$model.log" ||
    bad "$model's first layout does not compile to a fitting plan: $cmd: $(grep -E 'error' "$work/$model.log" | head -2)"
  gib=$(awk '$1 == 1 { print $9 }' "$work/$model")
  got=$(grep -o "the plan fits: [0-9.]* GiB" "$work/$model.log" | grep -o "[0-9.][0-9.]*" | sort -n | tail -1) # the busiest stage's
  awk -v a="$got" -v b="$gib" 'BEGIN { exit !(a - b < 0.051 && b - a < 0.051) }' ||
    bad "$model: tune says $gib GiB, mcc compile $got"
done
[ "$fails" = 0 ] && echo "ok: the seed's recipes: each first layout compiles and fits" || exit 1

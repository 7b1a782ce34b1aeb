#!/usr/bin/env bash
# tune_seed.sh [MCC] — `mcc tune` on the seed's table of layouts (issue 41): LLaMA-3 8B on 8 GPUs, 70B
# on 64 at TP4 x PP4, 405B on 128 at TP8 x PP8 x CP2, each on H100s (8 a node), and where the seed's
# layout ranks among the tuner's: its row in the --explain listing beside the tuner's first, with the
# seconds the search took. (A 13B, the seed's fourth, has no spec in models/.) What it prints goes to
# bench/RESULTS.md; the step times are the calibrated one-GPU compute and the collectives' bytes at
# the link rate, not measured on those machines (none are lent).
set -uo pipefail
cd "$(dirname "$0")/.."
mcc=${1:-build-fast/mcc}
for row in "llama3-8b 8 tp 1 pp 1 cp 1" "llama3-70b 64 tp 4 pp 4 cp 1" "llama3-405b 128 tp 8 pp 8 cp 2"; do
  read -r model world _ tp _ pp _ cp <<<"$row"
  echo "=== $model on $world H100s; the seed's layout: tp $tp pp $pp cp $cp"
  start=$(date +%s.%N)
  "$mcc" tune models/$model.json --world-size "$world" --target h100 --top 3 --explain > /tmp/tune-$model.txt 2>/dev/null
  rc=$?
  secs=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.0f", e - s }')
  echo "exit $rc, ${secs} s: $(head -1 /tmp/tune-$model.txt)"
  grep -E "^ +1 " /tmp/tune-$model.txt | sed 's/^/  first: /'
  grep -E "^  tp $tp pp $pp cp $cp dp [0-9]+ ep 1:" /tmp/tune-$model.txt | sed 's/^/  seed''s: /'
done

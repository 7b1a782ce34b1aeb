#!/usr/bin/env bash
# update_golden.sh [MCC] — rewrites tests/golden/ from the current compiler (review the diff!).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mcc=${1:-$root/build/mcc}
mkdir -p "$root/tests/golden"
for model in tiny-gpt2 tiny-llama; do
  for pass in $("$mcc" ir --list-passes | awk '{print $1}'); do
    "$mcc" ir "$root/models/$model.json" --target cpu --after "$pass" > "$root/tests/golden/$model.$pass.ir"
  done
done
echo "rewrote $(ls "$root/tests/golden" | wc -l) files in tests/golden"

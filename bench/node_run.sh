#!/usr/bin/env bash
# node_run.sh MODEL [GPUS] — the node-scale benchmark (issue 6) on the 4- or 8-GPU machine, from
# devrun/ made by `NODE_GPUS=8 bash bench/bundle.sh` (carry ["devrun.tar.xz"]): each layout of
# bench/node_layouts.sh trains the same 50 steps as the reference; bench/node_report.py then checks
# every loss curve against the reference's and prints tokens/s per GPU, MFU, measured and
# predicted memory and the scaling efficiency; DDP_BASELINE=1 (the default) adds PyTorch's DDP
# (ZeroRedundancyOptimizer for the 8B model) for the data-parallel rows. MODEL: llama-1B or llama3-8b.
set -uo pipefail
model=$1 gpus=${2:-$(nvidia-smi -L | wc -l)}
source "$(dirname "$0")/device_env.sh"
source bench/node_layouts.sh
node_spec "$model" > /dev/null || exit 2
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | sort | uniq -c
while IFS=: read -r name ranks flags; do
  bin=devrun/bin/node-$model-$name
  [ -x "$bin" ] || { echo "$model $name: not compiled (NODE_GPUS=$gpus bash bench/bundle.sh)"; continue; }
  launch=(); [ "$ranks" -gt 1 ] && launch=(--nproc-per-node "$ranks")
  cp "$bin.compile.log" "$O/node-$model-$name.compile.log"
  timeout 400 "$bin" "${launch[@]}" --data-path devrun/data/brown_text_document --split 100,0,0 --log-interval 1 \
    --eval-iters 0 > "$O/node-$model-$name.log" 2>&1
  echo "$model $name ($ranks ranks: $flags) exit $?"
done < <(node_layouts "$model" "$gpus")
if [ "${DDP_BASELINE:-1}" != 0 ]; then
  zero=(); [ "$model" = llama3-8b ] && zero=(--zero)
  timeout 400 python3 -m torch.distributed.run --nproc_per_node="$gpus" bench/torch_ddp_baseline.py --config "$model" \
    "${zero[@]}" 2>> "$O/node-ddp-$model.err" | tee "$O/node-ddp-$model.jsonl"
fi
python3 bench/node_report.py "$O" "$model" $(node_layouts "$model" "$gpus" | cut -d: -f1,2) | tee "$O/node-$model-table.txt"

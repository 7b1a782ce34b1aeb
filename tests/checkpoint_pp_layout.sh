#!/usr/bin/env bash
# checkpoint_pp_layout.sh MCC MODEL — a checkpoint saved under one --pipeline-model-parallel-layout
# loads under another: MODEL with 4 layers and a multi-token depth, saved at iteration 5 by PP=2
# with the layout Et|tttmL (rank 0 the embedding and layer 0, rank 1 layers 1-3, the depth, the
# loss), then loaded by PP=2 with Ettt|tmL (layers 0-2 on rank 0), by PP=2 x 2 virtual stages with
# Et|t|tt|mL (rank 0 layers 0 and 2-3, rank 1 layer 1 and, in its last chunk, the depth alone
# beside the head) and by one rank: losses 6-10
# equal the uninterrupted run's within 1e-6 (fp32 CPU ranks: the layouts' sums differ in order
# only). Checkpoints name tensors by layer (layers.<l>...), not by stage, so no mapping is needed;
# this says so of the layout's uneven stages and of a stage that holds no decoder layer.
set -euo pipefail
mcc=$1; model=$2
root=$(cd "$(dirname "$0")/.." && pwd)
common=(--target cpu --num-layers 4 --mtp-num-layers 1 --vocab-size 260 --make-vocab-size-divisible-by 1
        --global-batch-size 16)
source "$root/tests/checkpoint_check.sh"
compile saver --pp 2 --pipeline-model-parallel-layout 'Et|tttmL'
compile front --pp 2 --pipeline-model-parallel-layout 'Ettt|tmL'
compile interleaved --pp 2 --pipeline-model-parallel-layout 'Et|t|tt|mL'
compile single
# the layouts took: each plan's stages hold the layers its layout gives them
grep -q "pipeline stage 1 of 2 (layers 1-3, multi-token depth 0)" "$work/saver.c.log" &&
  grep -q "pipeline stage 0 of 2 (layers 0-2)" "$work/front.c.log" &&
  grep -q "pipeline stage 0 of 2 (layers 0, 2-3)" "$work/interleaved.c.log" &&
  grep -q "pipeline stage 1 of 2 (layers 1, multi-token depth 0)" "$work/interleaved.c.log" ||
  { echo "FAIL: a plan's stages do not hold its layout's layers"; grep -h "pipeline stage" "$work"/*.c.log; exit 1; }
flags=(--data-path "$work/text_text_document" --train-iters 10 --eval-iters 0)
save saver 2 "Et|tttmL"
check front 2 1e-6
check interleaved 2 1e-6
check single 1 1e-6

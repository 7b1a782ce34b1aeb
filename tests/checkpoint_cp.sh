#!/usr/bin/env bash
# checkpoint_cp.sh MCC MODEL — a checkpoint saved under context parallelism loads under other layouts:
# saved at iteration 5 by CP=2 (ring attention, p2p) x DP=2 with the distributed optimizer (each
# parameter a replica over cp and dp, written by the rank at coordinate 0 of both; the master and
# Adam shards over dp x cp, layout record `dp_cp:flat`, one a rank), loaded by one rank, by DP=4
# with the distributed optimizer (shards over dp), by CP=4 with it (shards over dp_cp, in another
# order of the ranks' tokens) and by the saving layout; each resumed run's losses at iterations
# 6-10 equal the uninterrupted CP=2 x DP=2 run's within 1e-5 (fp32 CPU ranks: the layouts' sums
# differ in order only).
set -euo pipefail
mcc=$1; model=$2
root=$(cd "$(dirname "$0")/.." && pwd)
common=(--target cpu --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16)
source "$root/tests/checkpoint_check.sh"
compile cp2 --context-parallel-size 2 --cp-comm-type p2p --dp 2 --use-distributed-optimizer
compile cp4 --context-parallel-size 4 --cp-comm-type p2p --use-distributed-optimizer
compile dp4 --dp 4 --use-distributed-optimizer
compile single
flags=(--data-path "$work/text_text_document" --train-iters 10 --eval-iters 0)
save cp2 4 "cp2 x dp2 ZeRO"
# every rank wrote its own block of each Adam moment, over dp x cp
for r in 0 1 2 3; do
  grep -q '"layout": "dp_cp:flat"' "$work/ck/iter_0000005/rank_0000$r.json" ||
    { echo "FAIL: rank $r's file records no dp_cp:flat part"; cat "$work/ck/iter_0000005/rank_0000$r.json"; exit 1; }
done
check single 1 1e-5
check dp4 4 1e-5
check cp4 4 1e-5
check cp2 4 1e-5

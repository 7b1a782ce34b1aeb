#!/usr/bin/env bash
# checkpoint_ep.sh MCC MODEL [NP FLAGS...] — an MoE checkpoint saved at iteration 5 by EP=2 x DP=2
# (each rank writes its own experts: the expert weights split over ep; or on NP ranks compiled with
# FLAGS, e.g. 4 --dp 4 --expert-model-parallel-size 2 --use-distributed-optimizer, whose expert
# optimizer state is in edp blocks) loads with no conversion on one rank, at DP=2 without EP and
# in its own layout;
# each resumed run's losses at iterations 6-10 equal the uninterrupted EP run's within 1e-5 (fp32
# CPU ranks: the layouts sum in another order). CHECKPOINT_SPEC_FLAGS: spec flags of every program
# (e.g. FP8 delayed scaling, whose expert weights' amax histories split over ep with their experts).
set -euo pipefail
mcc=$1; model=$2; np=${3:-2}
ep_flags=("${@:4}"); [ ${#ep_flags[@]} -gt 0 ] || ep_flags=(--dp 2 --expert-model-parallel-size 2)
root=$(cd "$(dirname "$0")/.." && pwd)
read -r -a spec_flags <<<"${CHECKPOINT_SPEC_FLAGS:-}"
common=(--target cpu --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16 "${spec_flags[@]}")
source "$root/tests/checkpoint_check.sh"
compile ep2 "${ep_flags[@]}"
compile dp2 --dp 2
compile single
flags=(--data-path "$work/text_text_document" --train-iters 10 --eval-iters 0)
save ep2 "$np" "ep (${ep_flags[*]})"
check single 1 1e-5
check dp2 2 1e-5
check ep2 "$np" 1e-5 # its own layout: the experts' blocks loaded back

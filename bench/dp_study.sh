#!/usr/bin/env bash
# dp_study.sh — one call on the 2-GPU machine (after bench/bundle.sh; carry ["devrun.tar.xz"], then
# `tar xJf devrun.tar.xz && bash bench/dp_study.sh`): where data parallelism's time goes, and
# whether the copy lane pays for it (--comm-lanes copy, the default: gradient buckets reduced
# beside the backward by the copy engines, SMs only for the sums; none: NCCL's kernels; bundle.sh
# compiles both). In order:
#   - the GPU numerics of dp2 and dp2ov (--overlap-grad-reduce), plain and on the copy lane,
#     against one GPU (a variant whose numerics fail is not timed);
#   - ROUNDS times, each of CONFIGS on one GPU, then DP=2 with overlap plain and on the copy lane:
#     alternating, so drift over the call falls on all alike;
#   - two 1-GPU runs at once, one per GPU: what the other GPU's load costs a GPU that does not
#     communicate (power, the host);
#   - MCC_PROFILE of the first config on one GPU and of both DP variants (PROFILE=0: none).
# nvidia-smi samples clocks and power all along (dps-smi.csv); the logs come back as one tarball.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
export MCC_COLLECTIVE_TIMEOUT_S=60 # a hang ends in a minute, not the default five
L=/tmp/dps-logs; rm -rf $L; mkdir -p $L
nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 1000 \
  > "$O/dps-smi.csv" 2>&1 &
smi=$!
numerics "" "$L" dp2: dp2ov: dp2ov:copy
lanes=(none); case "$numerics_failed" in *"!dp2ov:copy;"*) echo "copy lane: not timed (numerics failed)" ;; *) lanes+=(copy) ;; esac
configs=${CONFIGS:-llama-1B gpt2-1.5B}
for r in $(seq "${ROUNDS:-2}"); do
  for c in $configs; do
    echo "round $r:"
    OUT=$L bash bench/env_sweep.sh bench-$c 1 ""
    for l in "${lanes[@]}"; do OUT=$L bash bench/env_sweep.sh "$(lanes_bin bench-$c-dp2ov $l)" 2 ""; done
  done
done
c=${configs%% *}
run25="--data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 25 --log-interval 1 --eval-iters 0"
for g in 0 1; do CUDA_VISIBLE_DEVICES=$g timeout 150 devrun/bin/bench-$c $run25 > "$L/pair-gpu$g.log" 2>&1 & done
wait $(jobs -p | grep -v "^$smi\$")
for g in 0 1; do python3 bench/median_tok_s.py "bench-$c alone on GPU $g, the other GPU running the same" < "$L/pair-gpu$g.log"; done
profile() { # binary, ranks, environment
  local launch=(); [ "$2" -gt 1 ] && launch=(--nproc-per-node "$2")
  env ${3//,/ } MCC_PROFILE=1 timeout 150 devrun/bin/$1 "${launch[@]}" ${run25/--train-iters 25/--train-iters 12} \
    > "$L/profile-$1-${3:-plain}.log" 2>&1
  echo "== profile $1 ${3:-plain}"; grep -m1 -A14 "GPU time by op" "$L/profile-$1-${3:-plain}.log"
}
if [ "${PROFILE:-1}" != 0 ]; then
  profile bench-$c 1 ""
  for l in "${lanes[@]}"; do profile "$(lanes_bin bench-$c-dp2ov $l)" 2 ""; done
fi
kill $smi 2>/dev/null
tar czf "$O/dps-logs.tar.gz" -C $L .

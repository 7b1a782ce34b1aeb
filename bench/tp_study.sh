#!/usr/bin/env bash
# tp_study.sh — one call on the 2-GPU machine (after bench/bundle.sh; carry ["devrun.tar.xz"], then
# `tar xJf devrun.tar.xz && bash bench/tp_study.sh`): how fast tensor parallelism runs, variant
# against variant and, with `PREV=COMMIT bash bench/bundle.sh`, this commit against an earlier one.
# The variants of bench/bundle.sh: tp2sp (sequence parallelism as Megatron: one NCCL call per
# batch row), tp2spb (split by batch rows: one contiguous block per collective), tp2spbi (that,
# with the micro-batch's halves interleaved: --tp-comm-interleave, 7% slower in the sixth
# session), tp2spo/tp2spbo (--tp-comm-overlap's fused ops, slower in the fifth); -prev: the same
# from PREV's mcc. First the GPU numerics (RUNS, variant:lanes; a variant whose numerics fail on
# the copy lane is not timed), data parallel's numerics, then ROUNDS rounds of the 1-GPU reference
# and each variant (TP_ENVS: environments for each, default the default: the copy lane), and one
# MCC_PROFILE run (PROFILE, variant:lanes) whose lines on overlapped collectives say what the
# overlap hid and which collectives the compute stream waited for, with the work beside them.
# Narrower calls: VARIANTS, TP_CONFIGS (default llama-1B), DP_CHECK=0, OVERLAP_BENCH=1.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
export MCC_COLLECTIVE_TIMEOUT_S=60 # a hang ends in a minute, not the default five
# GPU numerics: the fused ops, the batch split, the lanes (CUDA graphs included)
numerics -v258 "$O" ${RUNS:-tp2sp:copy tp2spb:copy tp2sp:none tp2spb:none tp2spb:side,copy}
[ "${OVERLAP_BENCH:-0}" != 0 ] && bash bench/overlap_bench.sh
[ "${DP_CHECK:-1}" != 0 ] && numerics "" "$O" dp2:copy dp2ov:copy # data parallel's default path
timed() { case "$numerics_failed" in *"!$1:$2;"*) echo "$1 ${2:-main}: skipped (numerics failed)"; return 1 ;; esac; }
variants=${VARIANTS:-tp2sp tp2spb}
[ -z "${VARIANTS:-}" ] && [ -x devrun/bin/bench-llama-1B-tp2spb-prev ] && variants="tp2spb tp2spb-prev tp2sp tp2sp-prev"
read -ra envs <<< "${TP_ENVS:-}"
[ ${#envs[@]} -eq 0 ] && envs=("")
for c in ${TP_CONFIGS:-llama-1B}; do
  for r in $(seq "${ROUNDS:-2}"); do
    echo "round $r:"
    bash bench/env_sweep.sh bench-$c 1 ""
    for v in $variants; do
      [ -x devrun/bin/bench-$c-$v ] && timed "${v%-prev}" copy && bash bench/env_sweep.sh bench-$c-$v 2 "${envs[@]}"
    done
  done
done
profiled=${PROFILE:-tp2spb:copy} # variant:lanes
if timed ${profiled%%:*} "${profiled#*:}"; then
  MCC_PROFILE=1 timeout 150 devrun/bin/$(lanes_bin bench-llama-1B-${profiled%%:*} "${profiled#*:}") --nproc-per-node 2 \
    --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 12 --log-interval 1 --eval-iters 0 \
    > "$O/tps-profile.log" 2>&1
  grep -m1 -A30 "GPU time by op" "$O/tps-profile.log"
  grep -m1 -A12 "most waited for" "$O/tps-profile.log"
fi
# the device tool brings back only a few files: the logs go home in one archive
(cd "$O" && tar czf /tmp/tps-logs.tar.gz ./*.log && rm -f ./*.log && mv /tmp/tps-logs.tar.gz .)

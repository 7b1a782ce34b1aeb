#!/usr/bin/env bash
# tp_study.sh — one call on the 2-GPU machine (after bench/bundle.sh; carry ["devrun.tar.xz"], then
# `tar xJf devrun.tar.xz && bash bench/tp_study.sh`): which way of running tensor parallelism's
# collectives is fastest. The variants of bench/bundle.sh: tp2sp (sequence parallelism as
# Megatron: one NCCL call per batch row), tp2spb (split by batch rows: one contiguous block per
# collective), tp2spbi (that, with the micro-batch's halves interleaved: --tp-comm-interleave),
# tp2spo/tp2spbo (--tp-comm-overlap's fused ops, measured slower in the fifth session; by VARIANTS
# only); each on the tp group's 64-CTA communicator, with the copy lane (MCC_COMM_LANES=copy:
# collectives beside computation on the copy engines), and with it GEMMs leaving 8 SMs free.
# First the GPU numerics (a variant whose numerics fail is not timed; OVERLAP_BENCH=1 adds
# overlap_bench), data parallel's numerics, then the 1-GPU reference, the timings, and one MCC_PROFILE run (default
# tp2spbi on the copy lane) whose lines on overlapped collectives say what the overlap hid and
# which collectives the compute stream waited for.
# Narrower calls: RUNS (variant:lanes for the numerics), VARIANTS (timed), PROFILE (variant:lanes),
# TP_CONFIGS (default llama-1B), DP_CHECK=0.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
export MCC_COLLECTIVE_TIMEOUT_S=60 # a hang ends in a minute, not the default five
data="--data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0"
ok=""
for m in tiny-gpt2 tiny-llama; do # GPU numerics: the fused ops, the batch split, the lanes (CUDA graphs included)
  timeout 60 devrun/bin/$m-cuda-v258 $data --dump-dir /tmp/tps-ref-$m > /dev/null 2>&1
  for run in ${RUNS:-tp2sp: tp2spb: tp2spbi: tp2sp:side,copy tp2spb:side,copy tp2spbi:side,copy}; do
    v=${run%%:*} lanes=${run#*:}
    MCC_COMM_LANES=$lanes timeout 90 devrun/bin/$m-cuda-$v --nproc-per-node 2 $data --dump-dir /tmp/tps-$v-$m \
      > "$O/tps-$m-$v-${lanes:-main}.log" 2>&1
    rc=$?
    verdict=$(python3 tests/compare_dumps.py --cpu /tmp/tps-ref-$m --gpu /tmp/tps-$v-$m 2>&1 | tail -1)
    echo "$m $v lanes=${lanes:-main} exit $rc: $verdict"
    [ $rc = 0 ] && [ "$verdict" = PASS ] || ok="$ok !$v:${lanes};"
    rm -rf /tmp/tps-$v-$m
  done
done
[ "${OVERLAP_BENCH:-0}" != 0 ] && bash bench/overlap_bench.sh
for m in $([ "${DP_CHECK:-1}" != 0 ] && echo tiny-gpt2 tiny-llama); do # data parallel's default path: grouped buckets
  timeout 60 devrun/bin/$m-cuda $data --dump-dir /tmp/tps-dpref-$m > /dev/null 2>&1
  for v in dp2 dp2ov; do
    timeout 90 devrun/bin/$m-cuda-$v --nproc-per-node 2 $data --dump-dir /tmp/tps-$v-$m > "$O/tps-$m-$v.log" 2>&1
    rc=$?
    echo "$m $v exit $rc: $(python3 tests/compare_dumps.py --cpu /tmp/tps-dpref-$m --gpu /tmp/tps-$v-$m 2>&1 | tail -1)"
    rm -rf /tmp/tps-$v-$m
  done
done
timed() { case "$ok" in *"!$1:$2;"*) echo "$1 ${2:-main}: skipped (numerics failed)"; return 1 ;; esac; }
for c in ${TP_CONFIGS:-llama-1B}; do
  bash bench/env_sweep.sh bench-$c 1 ""
  for v in ${VARIANTS:-tp2sp tp2spb tp2spbi}; do
    envs=()
    timed $v "" && envs+=("MCC_COMM_LANES=none")
    # the copy lane, and with it GEMMs beside collectives leaving 8 SMs free (best of the fifth session)
    timed $v side,copy && envs+=("MCC_COMM_LANES=copy" "MCC_COMM_LANES=copy,MCC_OVERLAP_GEMM_SMS=124")
    [ ${#envs[@]} -gt 0 ] && bash bench/env_sweep.sh bench-$c-$v 2 "${envs[@]}"
  done
done
profiled=${PROFILE:-tp2spbi:copy} # variant:lanes
timed ${profiled%%:*} "${profiled#*:}" || exit 0
MCC_COMM_LANES=${profiled#*:} MCC_PROFILE=1 timeout 150 devrun/bin/bench-llama-1B-${profiled%%:*} --nproc-per-node 2 \
  --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 12 --log-interval 1 --eval-iters 0 \
  > "$O/tps-profile.log" 2>&1
grep -m1 -A30 "GPU time by op" "$O/tps-profile.log"

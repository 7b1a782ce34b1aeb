#!/usr/bin/env bash
# tp_study.sh — one call on the 2-GPU machine (after bench/bundle.sh; carry ["devrun.tar.xz"], then
# `tar xJf devrun.tar.xz && bash bench/tp_study.sh`): which way of running tensor parallelism's
# collectives is fastest. Sequence parallelism split by sequence (tp2sp, one NCCL call per batch
# row) or by batch rows (tp2spb, one contiguous block, and the forward's all-gathers and
# reduce-scatters fused with their matmuls: all_gather_matmul, matmul_add_reduce_scatter, which
# overlap them with this rank's own rows' GEMMs), each with the collectives on the tp
# group's 64-CTA communicator or with the all-gathers on the copy engines (MCC_COMM_LANES=copy)
# and the overlapped reduce-scatters on 16 CTAs (side); first the copy lane's numerics, then the
# 1-GPU reference, then one MCC_PROFILE run whose last line says how much of the overlapped
# collectives' time the overlap hid.
set -uo pipefail
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/devrun/lib:${LD_LIBRARY_PATH:-}
torch_cudnn=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib 2>/dev/null | head -1)
[ -n "$torch_cudnn" ] && export LD_LIBRARY_PATH=$torch_cudnn:$LD_LIBRARY_PATH
export NCCL_NVLS_ENABLE=0
O=${OUT:-/tmp/out}; mkdir -p "$O"
export MCC_COLLECTIVE_TIMEOUT_S=60 # a hang ends in a minute, not the default five
data="--data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0"
batch_ok=1
for m in tiny-gpt2 tiny-llama; do # GPU numerics: the batch split's fused ops, and the lanes (CUDA graphs included)
  timeout 60 devrun/bin/$m-cuda-v258 $data --dump-dir /tmp/tps-ref-$m > /dev/null 2>&1
  for run in "tp2spb:" "tp2sp:side,copy" "tp2spb:side,copy"; do
    v=${run%%:*} lanes=${run#*:}
    MCC_COMM_LANES=$lanes timeout 90 devrun/bin/$m-cuda-$v --nproc-per-node 2 $data --dump-dir /tmp/tps-$v-$m \
      > "$O/tps-$m-$v-${lanes:-main}.log" 2>&1
    rc=$?
    verdict=$(python3 tests/compare_dumps.py --cpu /tmp/tps-ref-$m --gpu /tmp/tps-$v-$m 2>&1 | tail -1)
    echo "$m $v lanes=${lanes:-main} exit $rc: $verdict"
    [ "$v" = tp2spb ] && { [ $rc = 0 ] && [ "$verdict" = PASS ] || batch_ok=0; }
    rm -rf /tmp/tps-$v-$m
  done
done
for c in ${TP_CONFIGS:-llama-1B}; do
  bash bench/env_sweep.sh bench-$c 1 ""
  bash bench/env_sweep.sh bench-$c-tp2sp 2 "" "MCC_COMM_LANES=copy"
  if [ $batch_ok = 1 ]; then
    bash bench/env_sweep.sh bench-$c-tp2spb 2 "" "MCC_COMM_LANES=copy" "MCC_COMM_LANES=side,copy"
  else
    echo "$c tp2spb: skipped (its numerics failed above)"
  fi
done
[ $batch_ok = 1 ] || exit 0
MCC_COMM_LANES=copy MCC_PROFILE=1 timeout 150 devrun/bin/bench-llama-1B-tp2spb --nproc-per-node 2 \
  --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 12 --log-interval 1 --eval-iters 0 \
  > "$O/tps-profile.log" 2>&1
grep -m2 "overlapped collectives" "$O/tps-profile.log"

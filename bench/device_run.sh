#!/usr/bin/env bash
# device_run.sh — everything one GPU-machine call checks and measures, from devrun/ (made by
# bench/bundle.sh; carry ["devrun"]): kernel tests, GPU-vs-CPU numerics of the tiny models,
# a 200-step loss curve against the CPU's, then the benchmark beside the PyTorch baseline.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
# everything printed also goes home whole (the device tool returns only the output's tail)
exec > >(tee "$O/device_run.out") 2>&1
anchors=devrun/anchors # bundle.sh copies ../shared/anchors/torch_baseline.py there
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
section() { echo; echo "=== $*"; }
# compare [--always] ARGS...: tests/compare_dumps.py --detail; on a failure (with --always on a pass
# too) its five worst checks, the largest of each kind and where each failing tensor differs; then its verdict
compare() {
  local always=0; [ "${1:-}" = --always ] && { always=1; shift; }
  python3 tests/compare_dumps.py --detail "$@" > /tmp/compare.txt 2>&1; local rc=$?
  [ $rc = 0 ] && [ $always = 0 ] || { grep -E ' (ok|FAIL)$' /tmp/compare.txt | head -5; grep -E '^largest' /tmp/compare.txt;
                                      grep -E '^  ' /tmp/compare.txt | head -6 | cut -c1-300; }
  tail -2 /tmp/compare.txt | cut -c1-300; return $rc
}
# CHECKS=0 skips the kernel tests, the GPU-vs-CPU numerics and the loss curves (a benchmark-only call);
# KERNEL_TESTS=0 and CURVES=0 skip only those parts
if [ "${CHECKS:-1}" != 0 ]; then
section "kernel tests"
for t in $([ "${KERNEL_TESTS:-1}" != 0 ] && echo ${KERNEL_TEST_NAMES:-cuda_ops_test attention_test dropout_test}); do
  [ -x devrun/bin/$t ] || { echo "$t: not built"; continue; }
  timeout 300 devrun/bin/$t > "$O/$t.log" 2>&1; echo "$t exit $?"; tail -3 "$O/$t.log"
done
if [ "${ATTN_BENCH:-0}" != 0 ]; then
  section "attention: mcc's kernels and cuDNN's, TFLOP/s"
  timeout 300 devrun/bin/attention_bench 2>&1 | tee "$O/attention_bench.log"
  timeout 200 python3 bench/sdpa_bench.py 2>&1 | tail -8
fi
section "GPU (bf16) vs CPU (fp32) numerics, 10 steps"
for m in tiny-gpt2 tiny-llama; do
  timeout 120 devrun/bin/$m-cuda --data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 --dump-dir /tmp/gpu-$m > "$O/$m-gpu10.log" 2>&1
  echo "$m train exit $?"; tail -2 "$O/$m-gpu10.log"
  compare --cpu devrun/cpu/$m --gpu /tmp/gpu-$m
  timeout 120 devrun/bin/$m-cuda-gb4 --data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 \
    --dump-dir /tmp/gpu-gb4-$m > "$O/$m-gpu10-gb4.log" 2>&1
  echo "$m one micro-batch per step: train exit $?"
  compare --cpu devrun/cpu/$m-gb4 --gpu /tmp/gpu-gb4-$m
  if [ -x devrun/bin/$m-cuda-gbf16 ]; then # --grad-reduce-in-bf16 (bundle.sh): bf16 gradient buffers
    timeout 120 devrun/bin/$m-cuda-gbf16 --data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 \
      --dump-dir /tmp/gpu-gbf16-$m > "$O/$m-gpu10-gbf16.log" 2>&1
    echo "$m --grad-reduce-in-bf16: train exit $?"
    compare --cpu devrun/cpu/$m-gbf16 --gpu /tmp/gpu-gbf16-$m
  fi
done
fi

# README's walkthrough (bundle.sh): Megatron's LLaMA-3 8B H100 FP8 script's flags compiled with no
# spec, at 4 layers; launched by torchrun --no-python with no flags (mock data baked in); its
# measured memory beside the plan's
if [ "${WALKTHROUGH:-1}" != 0 ] && [ -x devrun/bin/recipe-8b-l4 ]; then
  section "Megatron's LLaMA-3 8B FP8 script (4 layers, global batch 8), torchrun --no-python"
  timeout 300 torchrun --nproc-per-node 1 --no-python devrun/bin/recipe-8b-l4 > "$O/recipe-8b-l4.log" 2>&1
  echo "torchrun exit $?"; grep -E "data train|first step|iteration +(2|12)/" "$O/recipe-8b-l4.log" | cut -c1-400
  echo "planned: $(grep -E '^  total' devrun/bin/recipe-8b-l4.compile.log)"
fi

# MOE=1 (bundle.sh's MOE=1 too): tiny-moe's router, permutation and grouped GEMMs (kernels_templates/moe.cuh,
# runtime/cuda/matmul.c) on the GPU against the CPU oracle, as the tiny models above
if [ "${CHECKS:-1}" != 0 ] && [ "${MOE:-0}" != 0 ]; then
  section "MoE: tiny-moe GPU (bf16) vs CPU (fp32), 10 steps"
  if [ -x devrun/bin/tiny-moe-cuda ]; then
    timeout 120 devrun/bin/tiny-moe-cuda --data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 \
      --dump-dir /tmp/gpu-tiny-moe > "$O/tiny-moe-gpu10.log" 2>&1
    echo "tiny-moe train exit $?"; tail -2 "$O/tiny-moe-gpu10.log"
    compare --cpu devrun/cpu/tiny-moe --gpu /tmp/gpu-tiny-moe
  else
    echo "tiny-moe: not compiled (bundle.sh MOE=1)"
  fi
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  if [ -x devrun/bin/tiny-moe-cuda-full ]; then # full recompute: the CPU's full recompute is its none, bit for bit
    timeout 120 devrun/bin/tiny-moe-cuda-full --data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 \
      --dump-dir /tmp/gpu-full-tiny-moe > "$O/tiny-moe-full.log" 2>&1
    echo "tiny-moe full recompute exit $?"; compare --cpu devrun/cpu/tiny-moe --gpu /tmp/gpu-full-tiny-moe
  fi
  for v in cap:1 cap_cp2:2; do # token dropping, one rank and cp 2 sharing the GPU
    t=${v%%:*} np=${v#*:}
    [ -x devrun/bin/tiny-moe-cuda-$t ] || { echo "tiny-moe $t: not compiled (bundle.sh MOE=1)"; continue; }
    rm -rf /tmp/gpu-$t-tiny-moe
    timeout 120 mpirun -np $np --oversubscribe devrun/bin/tiny-moe-cuda-$t --data-path devrun/data/numerics_text_document \
      --train-iters 10 --eval-iters 0 --dump-dir /tmp/gpu-$t-tiny-moe > "$O/tiny-moe-$t.log" 2>&1
    echo "tiny-moe $t ($np ranks) exit $?"; grep -m2 -o "dropped fraction: [0-9.]*" "$O/tiny-moe-$t.log" | tr '\n' ' '; echo
    compare --cpu devrun/cpu/cap-tiny-moe --gpu /tmp/gpu-$t-tiny-moe
  done
fi

# ZERO=1 (bundle.sh's ZERO=1): the distributed optimizer with ranks sharing the GPU against the CPU
# oracle's one rank: no rank holds a whole fp32 master; the blocks are initialised on the GPU
if [ "${ZERO:-0}" != 0 ]; then
  section "distributed optimizer on one GPU (ranks sharing it), 10 steps against the CPU"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  for v in tiny-gpt2:zero_dp2:2 tiny-llama:zero_dp2:2 tiny-moe:ddp_dp4ep2:4 tiny-moe:zero_dp4ep2:4 tiny-moe:ddp_tp2dp4ep2:8 tiny-moe:zero_tp2dp4ep2:8; do
    m=${v%%:*} t=$(echo $v | cut -d: -f2) np=${v##*:}
    [ -x devrun/bin/$m-cuda-$t ] || { echo "$m $t: not compiled (bundle.sh ZERO=1)"; continue; }
    rm -rf /tmp/zero-$t-$m
    timeout ${CHECK_TIMEOUT:-120} mpirun -np $np --oversubscribe devrun/bin/$m-cuda-$t --data-path \
      devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 --dump-dir /tmp/zero-$t-$m > "$O/zero-$t-$m.log" 2>&1
    echo "$m $t ($np ranks) exit $?"; grep -m1 "plan memory" "$O/zero-$t-$m.log"
    ref=devrun/cpu/$m; [ $m = tiny-moe ] && ref=devrun/cpu/moe-mb2-tiny-moe # bundle.sh says why
    compare --cpu $ref --gpu /tmp/zero-$t-$m
  done
fi

# MLA=1 (bundle.sh's MLA=1 too): tiny-deepseek-v3's multi-latent attention, values narrower than q and k
# through cuDNN's fused attention (cuDNN 9.19: device_env.sh puts PyTorch's first), against the CPU oracle
if [ "${CHECKS:-1}" != 0 ] && [ "${MLA:-0}" != 0 ]; then
  section "MLA: tiny-deepseek-v3 GPU (bf16, cuDNN's attention) vs CPU (fp32), 10 steps"
  if [ -x devrun/bin/tiny-deepseek-v3-cuda ]; then
    timeout 120 devrun/bin/tiny-deepseek-v3-cuda --data-path devrun/data/numerics_text_document --train-iters 10 \
      --eval-iters 0 --dump-dir /tmp/gpu-tiny-deepseek-v3 > "$O/tiny-deepseek-v3-gpu10.log" 2>&1
    echo "tiny-deepseek-v3 train exit $?"; tail -2 "$O/tiny-deepseek-v3-gpu10.log"
    compare --cpu devrun/cpu/tiny-deepseek-v3 --gpu /tmp/gpu-tiny-deepseek-v3
  else
    echo "tiny-deepseek-v3: not compiled (bundle.sh MLA=1)"
  fi
fi

# MOE_LAYOUTS=1 (bundle.sh's MOE_LAYOUTS=1): tiny-moe's layouts with ranks sharing the GPU, each against
# the CPU oracle (micro-batch 2) and against the one-GPU run of the same spec (lay_one): a layout's own
# difference on the GPU, apart from bf16's against fp32; and token dropping with the position policy
# and with a factor that drops nothing, each against its CPU oracle
if [ "${MOE_LAYOUTS:-0}" != 0 ]; then
  section "MoE layouts on one GPU: against the CPU and against one GPU, 10 steps"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # k4_*: the same layouts at top-4 of 4 experts, where every token goes to every expert, so no routing
  # choice can flip between bf16 and fp32 or between layouts (bundle.sh says why)
  for v in ${MOE_LAYOUT_RUNS-lay_one:1 lay_ep2:2 lay_tp2:2 lay_tp2dp2:4 lay_tp2ep2:4 lay_tp2dp4ep2:8 drop_pos:1 drop_none:1 \
           k4_one:1 k4_tp2:2 k4_tp2dp4ep2:8 k4_tp2dp4ep2_full:8 k4_dp2ep2_ov:2 k4_tp2dp4ep2_ov:8}; do
    t=${v%%:*} np=${v#*:}
    [ -x devrun/bin/tiny-moe-cuda-$t ] || { echo "tiny-moe $t: not compiled (bundle.sh MOE_LAYOUTS=1)"; continue; }
    rm -rf /tmp/lay-$t
    timeout ${CHECK_TIMEOUT:-120} mpirun -np $np --oversubscribe devrun/bin/tiny-moe-cuda-$t --data-path \
      devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 --dump-dir /tmp/lay-$t > "$O/lay-$t.log" 2>&1
    echo "--- tiny-moe $t ($np ranks) exit $?"; grep -m2 -o "dropped fraction: [0-9.]*" "$O/lay-$t.log" | tr '\n' ' '
    case $t in
      lay_*|k4_*) set=${t%%_*} ref=devrun/cpu/moe-mb2-tiny-moe; [ $set = k4 ] && ref=devrun/cpu/moe-mb2-k4-tiny-moe
             echo "vs CPU:"; compare --always --cpu $ref --gpu /tmp/lay-$t
             [ $t != ${set}_one ] && { echo "vs one GPU:"; compare --always --cpu /tmp/lay-${set}_one --gpu /tmp/lay-$t; } ;;
      *) echo "vs CPU:"; compare --always --cpu devrun/cpu/$t-tiny-moe --gpu /tmp/lay-$t ;;
    esac
  done
fi

# MEM42=1 (bundle.sh's MEM42=1): issue 42's memory levers (the head over 4 chunks of the tokens,
# selective recompute with swiglu_grad_product, masters as remainders) on the tiny models against the
# CPU oracle's plain dumps, and cuda_ops_test's swiglu_grad cases
if [ "${MEM42:-0}" != 0 ]; then
  section "issue 42's memory levers: the head over chunks, selective recompute, remainders"
  OPS_TEST_ONLY=swiglu_grad timeout 120 devrun/bin/cuda_ops_test 2>&1 | tail -6
  for m in tiny-gpt2 tiny-llama; do
    timeout 120 devrun/bin/$m-cuda-mem42 --data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 \
      --dump-dir /tmp/gpu-mem42-$m > "$O/$m-gpu10-mem42.log" 2>&1
    echo "$m memory levers: train exit $?"; grep -E "iteration +10/" "$O/$m-gpu10-mem42.log" | grep -o "lm loss: [0-9.E+-]*"
    compare --cpu devrun/cpu/$m --gpu /tmp/gpu-mem42-$m
  done
fi
# REMAINDERS=1 (bundle.sh's REMAINDERS=1): fp32 masters held as bf16 copy + i16 remainder
# (--use-precision-aware-optimizer's store_param_remainders): AdamW on the pair against AdamW on the
# fp32 master (cuda_ops_test's adamw cases), the tiny models against the CPU oracle and beside the
# whole-master GPU run's losses, and a save/resume equal to the last bit
if [ "${REMAINDERS:-0}" != 0 ]; then
  section "masters as bf16 copy + remainder (store_param_remainders)"
  OPS_TEST_ONLY=adamw timeout 120 devrun/bin/cuda_ops_test 2>&1 | tail -6
  for m in tiny-gpt2 tiny-llama; do
    timeout 120 devrun/bin/$m-cuda-rem --data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 \
      --dump-dir /tmp/gpu-rem-$m > "$O/$m-gpu10-rem.log" 2>&1
    echo "$m remainders: train exit $?"; grep -E "iteration +10/" "$O/$m-gpu10-rem.log" | grep -o "lm loss: [0-9.E+-]*"
    [ -f "$O/$m-gpu10.log" ] && { echo -n "  whole masters: "; grep -E "iteration +10/" "$O/$m-gpu10.log" | grep -o "lm loss: [0-9.E+-]*"; }
    compare --cpu devrun/cpu/$m --gpu /tmp/gpu-rem-$m
  done
  bash bench/checkpoint_gpu.sh tiny-llama-rem 2>&1 | tail -6
fi

section "FP8 (hybrid tensorwise and delayed, E4M3 blockwise) on the GPU vs the CPU's FP8 emulation, 10 steps"
# tolerances as bf16's: the GPU's bf16 activations can round to another FP8 value than the CPU's fp32
# ones, so a failure here is first a question of tolerance, then of the kernels (tests/gpu/ops_test.c)
if [ "${CHECKS:-1}" != 0 ] && [ "${FP8_CHECK:-1}" != 0 ]; then # FP8_CHECK=0 skips it
for m in tiny-gpt2 tiny-llama; do
  for r in ${FP8_RECIPES:-tensorwise delayed blockwise}; do
    [ -x devrun/bin/$m-cuda-fp8-$r ] || { echo "$m fp8 $r: not compiled"; continue; }
    timeout 120 devrun/bin/$m-cuda-fp8-$r --data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 \
      --dump-dir /tmp/gpu-fp8-$r-$m > "$O/$m-gpu10-fp8-$r.log" 2>&1
    echo "$m fp8 $r: train exit $?"; tail -2 "$O/$m-gpu10-fp8-$r.log"
    compare --cpu devrun/cpu/$m-fp8-$r --gpu /tmp/gpu-fp8-$r-$m
  done
done
fi

section "data parallel on 2 GPUs (NCCL) vs 1 GPU, 10 steps"
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && [ "${DP2_CHECK:-1}" != 0 ]; then
  for m in tiny-gpt2 tiny-llama; do
    [ -d /tmp/gpu-$m ] || timeout 120 devrun/bin/$m-cuda --data-path devrun/data/numerics_text_document --train-iters 10 \
      --eval-iters 0 --dump-dir /tmp/gpu-$m > /dev/null 2>&1
    timeout ${CHECK_TIMEOUT:-120} devrun/bin/$m-cuda-dp2 --nproc-per-node 2 --data-path devrun/data/numerics_text_document --train-iters 10 \
      --eval-iters 0 --dump-dir /tmp/gpu-dp2-$m > "$O/$m-dp2.log" 2>&1; echo "$m dp2 exit $?"; tail -1 "$O/$m-dp2.log"
    compare --cpu /tmp/gpu-$m --gpu /tmp/gpu-dp2-$m
    # ZeRO-1: the same data-parallel run with the optimizer state sharded over the two GPUs
    timeout ${CHECK_TIMEOUT:-120} devrun/bin/$m-cuda-zero2 --nproc-per-node 2 --data-path devrun/data/numerics_text_document --train-iters 10 \
      --eval-iters 0 --dump-dir /tmp/gpu-zero2-$m > "$O/$m-zero2.log" 2>&1; echo "$m zero2 exit $?"; tail -1 "$O/$m-zero2.log"
    compare --cpu /tmp/gpu-$m --gpu /tmp/gpu-zero2-$m
    # --overlap-grad-reduce: the buckets all-reduced inside the backward, on the comm stream
    timeout ${CHECK_TIMEOUT:-120} devrun/bin/$m-cuda-dp2ov --nproc-per-node 2 --data-path devrun/data/numerics_text_document --train-iters 10 \
      --eval-iters 0 --dump-dir /tmp/gpu-dp2ov-$m > "$O/$m-dp2ov.log" 2>&1; echo "$m dp2 overlap exit $?"; tail -1 "$O/$m-dp2ov.log"
    compare --cpu /tmp/gpu-$m --gpu /tmp/gpu-dp2ov-$m
  done
else
  echo "one GPU: skipped"
fi

if [ "${CHECKS:-1}" != 0 ] && [ "${CURVES:-1}" != 0 ]; then
section "200 steps on the Brown corpus: GPU vs CPU loss curves"
for m in tiny-gpt2 tiny-llama; do
  timeout 120 devrun/bin/$m-cuda --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 200 --log-interval 1 --eval-iters 0 > "$O/$m-gpu200.log" 2>&1
  python3 - "$O/$m-gpu200.log" "devrun/cpu/$m-200.log" <<'PY'
import re, sys
g, c = ([float(x) for x in re.findall(r'\| lm loss: ([0-9.E+-]+) \|', open(p).read())] for p in sys.argv[1:])
if len(g) != 200 or len(c) != 200:
    print(f'curve: {len(g)} GPU / {len(c)} CPU steps: FAIL'); sys.exit()
diff = max(abs(a - b) for a, b in zip(g, c))
mean_g, mean_c = sum(g[-20:]) / 20, sum(c[-20:]) / 20
ok = abs(mean_g - mean_c) / mean_c < 0.02
print(f'{sys.argv[1].split("/")[-1]}: first {g[0]:.4f}/{c[0]:.4f}, last-20 mean {mean_g:.4f} (gpu) vs {mean_c:.4f} (cpu), max step diff {diff:.4f}: {"ok" if ok else "FAIL"}')
PY
done
fi

# PP1=0 skips: pipeline stages as ranks sharing one GPU (collectives and transfers through host
# memory: MCC_GPU_COMM=auto picks the staged path when ranks outnumber GPUs), each against the CPU
# oracle of its spec (bundle.sh's pp section); then llama-1B at PP=2 on the one GPU against one rank,
# the same 8 micro-batches, with each process's GPU memory (nvidia-smi) beside its plan's
if [ "${PP1:-1}" != 0 ]; then
section "pipeline stages on one GPU (ranks sharing it), 10 steps against the CPU"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# first the host-staged backend they go through, alone: 4 ranks, a 2x2 mesh's groups
[ -x devrun/bin/comm_nccl_test ] && { timeout 120 mpirun -np 4 --oversubscribe devrun/bin/comm_nccl_test staged 2>&1 | tail -12; }
pp_data="--data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0"
for m in tiny-gpt2 tiny-llama; do
  for v in ${PP1_VARIANTS:-pp2:2 pp2-1f1b:2 pp2-v2:2 pp4:4 pp2tp2sp:4 pp2dp2zero:4 pp2-dropout:2}; do
    name=${v%%:*} np=${v#*:} ref=pp-$m
    [ "$name" = pp2-dropout ] && ref=pp-dropout-$m
    [ -x devrun/bin/$m-cuda-$name ] || { echo "$m $name: not compiled"; continue; }
    rm -rf /tmp/pp1-$name-$m
    timeout ${CHECK_TIMEOUT:-120} mpirun -np $np --oversubscribe devrun/bin/$m-cuda-$name $pp_data \
      --dump-dir /tmp/pp1-$name-$m > "$O/pp1-$m-$name.log" 2>&1
    echo "$m $name ($np ranks) exit $?"
    compare --cpu devrun/cpu/$ref --gpu /tmp/pp1-$name-$m
  done
done
section "llama-1B, 8 micro-batches: one rank vs PP=2 on the same GPU, 12 steps"
pp_bench="--data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 12 --log-interval 1 --eval-iters 0"
if [ "${PP1_MB8:-1}" != 0 ] && [ -x devrun/bin/bench-llama-1B-mb8 ]; then
  timeout 200 devrun/bin/bench-llama-1B-mb8 $pp_bench > "$O/pp1-llama-1B-mb8.log" 2>&1
  echo "one rank exit $?"; grep -E "first step|iteration +12/" "$O/pp1-llama-1B-mb8.log"
  for v in pp2 pp2-zb pp2-v2; do
    [ -x devrun/bin/bench-llama-1B-mb8-$v ] || { echo "$v: not compiled"; continue; }
    mpirun -np 2 --oversubscribe devrun/bin/bench-llama-1B-mb8-$v $pp_bench > "$O/pp1-llama-1B-mb8-$v.log" 2>&1 &
    run=$!; peak="$O/pp1-llama-1B-mb8-$v.mem"; : > "$peak"
    while kill -0 $run 2>/dev/null; do # each process's GPU memory, by its rank
      nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
        while IFS=', ' read -r pid mib; do
          r=$(tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
          [ -n "$r" ] && echo "$r $mib" >> "$peak"
        done
      sleep 1
    done
    wait $run; echo "$v exit $?"; grep -E "first step|iteration +12/|plan:|memory" "$O/pp1-llama-1B-mb8-$v.log" | head -8
    sort -k1,1n -k2,2n "$peak" | awk '{m[$1]=$2} END {for (r in m) printf "rank %s: peak %.2f GiB in use (nvidia-smi)\n", r, m[r]/1024}'
    python3 - "$O/pp1-llama-1B-mb8.log" "$O/pp1-llama-1B-mb8-$v.log" <<'PY'
import re, sys
a, b = ([float(x) for x in re.findall(r'\| lm loss: ([0-9.E+-]+) \|', open(p).read())] for p in sys.argv[1:])
n = min(len(a), len(b))
d = max((abs(x - y) / abs(x) for x, y in zip(a, b)), default=float('nan'))
print(f'losses: {n} steps compared, max relative difference {d:.2e} ({"ok" if n == 12 and d < 2e-2 else "FAIL"})')
PY
  done
fi
fi

# CP=1 (bundle.sh's CP=1 too): context parallelism at cp 2 with each comm type as two ranks sharing
# one GPU (the staged comm backend, as PP1's), each model against the CPU oracle's one-rank dumps
if [ "${CHECKS:-1}" != 0 ] && [ "${CP:-0}" != 0 ]; then
section "context parallelism on one GPU (cp 2, 2 ranks sharing it), 10 steps against the CPU"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# (variant:ranks:oracle; the oracle's dumps devrun/cpu/<oracle><model>)
for m in tiny-gpt2 tiny-llama tiny-moe; do
  for v in p2p:2: all_gather:2: a2a:2: p2p-hdrop:2:hdrop- tpsp-hdrop:4:hdrop-; do
    t=${v%%:*} np=$(echo $v | cut -d: -f2) ref=devrun/cpu/$(echo $v | cut -d: -f3)$m
    [ -x devrun/bin/$m-cuda-cp2-$t ] || { [ $m = tiny-moe ] || echo "$m cp2 $t: not compiled (bundle.sh CP=1)"; continue; }
    rm -rf /tmp/cp1-$t-$m
    timeout ${CHECK_TIMEOUT:-120} mpirun -np $np --oversubscribe devrun/bin/$m-cuda-cp2-$t --data-path \
      devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 --dump-dir /tmp/cp1-$t-$m > "$O/cp1-$t-$m.log" 2>&1
    echo "$m cp2 $t ($np ranks) exit $?"
    compare --cpu $ref --gpu /tmp/cp1-$t-$m
  done
done
fi

section "tensor parallel on 2 GPUs (NCCL) vs 1 GPU, 10 steps"
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ] && [ "${TP2_CHECK:-1}" != 0 ]; then
  for m in tiny-gpt2 tiny-llama; do
    timeout 120 devrun/bin/$m-cuda-v258 --data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0 \
      --dump-dir /tmp/gpu-v258-$m > /dev/null 2>&1
    for v in tp2 tp2sp tp2spo tp2spb tp2spbo tp2spbi; do
      timeout ${CHECK_TIMEOUT:-120} devrun/bin/$m-cuda-$v --nproc-per-node 2 --data-path devrun/data/numerics_text_document \
        --train-iters 10 --eval-iters 0 --dump-dir /tmp/gpu-$v-$m > "$O/$m-$v.log" 2>&1
      echo "$m $v exit $?"; tail -1 "$O/$m-$v.log"
      compare --cpu /tmp/gpu-v258-$m --gpu /tmp/gpu-$v-$m
    done
  done
fi

section "benchmark: train_rank"
# FP8 configs: llama-1B-fp8-tensorwise llama-1B-fp8-delayed llama-1B-fp8-blockwise and llama-8B-L4's
# (bundle.sh), beside llama-1B and llama-8B-L4 in the same BENCH_CONFIGS
for c in ${BENCH_CONFIGS-gpt2-124M gpt2-1.5B llama-1B llama-1B-gqa}; do
  [ -x devrun/bin/bench-$c ] || { echo "$c: not compiled"; continue; }
  timeout 150 devrun/bin/bench-$c --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 25 --log-interval 1 --eval-iters 0 > "$O/bench-$c.log" 2>&1
  echo "$c exit $?"; grep -E "first step|iteration +25/" "$O/bench-$c.log"
done
# attention tiles: every candidate of bench/attention_tiles.txt (cubins compiled by bundle.sh)
if [ "${ATTN_SWEEP:-0}" != 0 ]; then
  section "attention tile sweep"
  MCC_CACHE_DIR=devrun/cache timeout 300 devrun/bin/attention_bench $(grep -v '^#' bench/attention_tiles.txt) 2>&1
fi
# selective recompute: the same configs with recompute_granularity = selective
for c in ${RECOMPUTE_CONFIGS-}; do
  [ -x devrun/bin/bench-$c-rc ] || { echo "$c-rc: not compiled"; continue; }
  timeout 150 devrun/bin/bench-$c-rc --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 25 --log-interval 1 --eval-iters 0 > "$O/bench-$c-rc.log" 2>&1
  echo "$c-rc exit $?"; grep -E "first step|iteration +25/" "$O/bench-$c-rc.log"
done
# per-op GPU time (eager, an event pair around every instruction): where a step's time goes
# (a name ending -tp2sp*, -dp2 or -dp2ov runs its two ranks)
for c in ${PROFILE_CONFIGS-}; do
  launch=(); case $c in *-tp2sp*|*-dp2|*-dp2ov) launch=(--nproc-per-node 2) ;; esac
  MCC_PROFILE=1 MCC_PROFILE_DUMP="$O/profile-$c.tsv" timeout 150 devrun/bin/bench-$c "${launch[@]}" --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 12 --log-interval 1 --eval-iters 0 > "$O/profile-$c.log" 2>&1
  echo "$c profile exit $?"; grep -A40 "GPU time by op" "$O/profile-$c.log" | head -60
done
# AB_CONFIGS="gpt2-124M llama-1B": each config against its bench-<config>-prev (bundle.sh PREV=),
# AB_ROUNDS (3) alternating rounds of 25 steps: the median tokens/s and the memory in use of each
for c in ${AB_CONFIGS-}; do
  section "A/B: $c now vs PREV"
  for round in $(seq "${AB_ROUNDS:-3}"); do
    for side in "" -prev; do
      [ -x devrun/bin/bench-$c$side ] || { echo "bench-$c$side: not compiled (bundle.sh PREV=)"; continue; }
      log="$O/ab-$c$side-$round.log"
      timeout 150 devrun/bin/bench-$c$side --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 25 \
        --log-interval 1 --eval-iters 0 > "$log" 2>&1
      echo "exit $? $(python3 bench/median_tok_s.py "round $round $c$side" < "$log") $(grep -o 'memory in use: [0-9.]* GiB' "$log" | tail -1)"
    done
  done
done
# CP_BENCH=1 (bundle.sh's CP_BENCH=1 too): ring attention's compute cost on one GPU
# (bench/cp_attention_bench.c's table: the whole sequence against one cp rank's pieces, checked at
# 8K and 16K), then llama-1B at seq 32K beside the PyTorch baseline's llama-1B-32k
if [ "${CP_BENCH:-0}" != 0 ]; then
  section "context parallelism: one rank's ring pieces vs the whole sequence's attention"
  if [ -x devrun/bin/cp_attention_bench ]; then
    timeout 400 devrun/bin/cp_attention_bench > "$O/cp_attention_bench.log" 2>&1; echo "cp_attention_bench exit $?"
    cat "$O/cp_attention_bench.log"
  fi
  section "llama-1B at seq 32K (one sequence a step): train_rank beside PyTorch"
  if [ -x devrun/bin/bench-llama-1B-32k ]; then
    timeout 240 devrun/bin/bench-llama-1B-32k --data-path devrun/data/brown_text_document --split 100,0,0 \
      --train-iters 12 --log-interval 1 --eval-iters 0 > "$O/bench-llama-1B-32k.log" 2>&1
    echo "llama-1B-32k exit $?"; grep -E "first step|iteration +12/|memory" "$O/bench-llama-1B-32k.log" | head -4
  fi
  timeout 300 python3 $anchors/torch_baseline.py --config llama-1B-32k --steps 10 >> "$O/baseline.jsonl" 2>>"$O/baseline.err"
  echo "torch llama-1B-32k exit $?"; tail -1 "$O/baseline.jsonl"
fi
section "benchmark: PyTorch baseline"
for c in ${BASELINES-gpt2-124M gpt2-1.5B llama-1B llama-1B-gqa}; do
  timeout 170 python3 $anchors/torch_baseline.py --config $c --steps 20 >> "$O/baseline.jsonl" 2>>"$O/baseline.err"
done
# MOE=1: the MoE configs (bundle.sh MOE=1), train_rank then torch_moe_baseline.py (grouped GEMMs over
# sorted tokens, torch.compile) in the same call, then a MCC_PROFILE=1 run of each: the step's time in
# the router, the permutation, the grouped GEMMs and attention (summarize.py's table has both)
if [ "${MOE:-0}" != 0 ]; then
  section "benchmark: MoE, train_rank beside PyTorch"
  cut=${MOE_LAYERS:+-L$MOE_LAYERS} # MOE_LAYERS=8: both sides at 8 layers (bundle.sh's MOE_LAYERS=8)
  for c in ${MOE_CONFIGS-moe-8x1B moe-32x8}; do
    for v in ${MOE_VARIANTS-base -lean}; do # base: as the config; -lean: remainders + selective recompute;
      v=${v#base}                            # -full: remainders + full recompute (bundle.sh)
      [ -x devrun/bin/bench-$c$cut$v ] || { echo "$c$cut$v: not compiled (bundle.sh MOE=1)"; continue; }
      timeout 200 devrun/bin/bench-$c$cut$v --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 25 \
        --log-interval 1 --eval-iters 0 > "$O/bench-$c$cut$v.log" 2>&1
      echo "$c$cut$v exit $?"; grep -E "first step|iteration +25/|plan memory" "$O/bench-$c$cut$v.log" | head -5
    done
    timeout 300 python3 bench/torch_moe_memory.py $anchors $c 20 ${MOE_LAYERS:-} >> "$O/baseline.jsonl" 2>>"$O/baseline.err"
    echo "$c$cut baseline exit $?"; tail -2 "$O/baseline.jsonl"
  done
  for c in ${MOE_PROFILE-${MOE_CONFIGS-moe-8x1B moe-32x8}}; do # MOE_PROFILE_VARIANT: of which binary (-full: on an H100)
    [ -x devrun/bin/bench-$c$cut${MOE_PROFILE_VARIANT-} ] || continue
    MCC_PROFILE=1 timeout 200 devrun/bin/bench-$c$cut${MOE_PROFILE_VARIANT-} --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 12 \
      --log-interval 1 --eval-iters 0 > "$O/profile-$c.log" 2>&1
    echo "$c profile exit $?"; grep -A40 "GPU time by op" "$O/profile-$c.log" | head -60
  done
fi
# MOE_GEMM_BENCH=1: the experts' grouped GEMMs (equal and skewed groups, forward and wgrad) against
# one dense GEMM of the same FLOPs at moe-8x1B's and moe-32x8's shapes (bench/moe_gemm_bench.c; its
# checks fail it with exit 1)
if [ "${MOE_GEMM_BENCH:-0}" != 0 ]; then
  section "MoE: grouped GEMMs vs a dense GEMM of the same FLOPs"
  if [ -x devrun/bin/moe_gemm_bench ]; then
    timeout 400 devrun/bin/moe_gemm_bench > "$O/moe_gemm_bench.log" 2>&1; echo "moe_gemm_bench exit $?"
    cat "$O/moe_gemm_bench.log"
  else
    echo "moe_gemm_bench: not built"
  fi
fi
# OVERLAP_BENCH=1: a collective beside GEMMs under NCCL's CTA policies (bench/overlap_bench.c)
if [ "${OVERLAP_BENCH:-0}" != 0 ] && [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  section "collectives beside GEMMs (overlap_bench)"
  bash bench/overlap_bench.sh
fi
section "benchmark: data parallel on 2 GPUs"
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  for c in ${DP2_CONFIGS-gpt2-124M llama-1B gpt2-1.5B}; do
    timeout 150 devrun/bin/bench-$c-dp2 --nproc-per-node 2 --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 25 \
      --log-interval 1 --eval-iters 0 > "$O/bench-$c-dp2.log" 2>&1
    echo "$c dp2 exit $?"; grep -E "first step|iteration +25/" "$O/bench-$c-dp2.log"
    timeout 150 devrun/bin/bench-$c-dp2ov --nproc-per-node 2 --data-path devrun/data/brown_text_document --split 100,0,0 \
      --train-iters 25 --log-interval 1 --eval-iters 0 > "$O/bench-$c-dp2ov.log" 2>&1
    echo "$c dp2 overlap exit $?"; grep -E "first step|iteration +25/" "$O/bench-$c-dp2ov.log"
    # LANES_ALT: dp2ov also compiled with --comm-lanes $LANES_ALT (bench/bundle.sh; default none:
    # NCCL's kernels; 0: not run)
    if [ "${LANES_ALT:-none}" != 0 ]; then
      timeout 150 devrun/bin/$(lanes_bin bench-$c-dp2ov "${LANES_ALT:-none}") --nproc-per-node 2 \
        --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 25 --log-interval 1 --eval-iters 0 \
        > "$O/bench-$c-dp2ov-${LANES_ALT:-none}.log" 2>&1
      echo "$c dp2 overlap, lanes ${LANES_ALT:-none} exit $?"; grep -E "first step|iteration +25/" "$O/bench-$c-dp2ov-${LANES_ALT:-none}.log"
    fi
    # DDP_CONFIGS: those of DP2_CONFIGS also run by PyTorch's DDP on the same two GPUs (bench/torch_ddp_baseline.py)
    case " ${DDP_CONFIGS-} " in *" $c "*) ;; *) continue ;; esac
    timeout 300 python3 -m torch.distributed.run --nproc_per_node=2 \
      bench/torch_ddp_baseline.py --config $c 2>>"$O/baseline.err" | tee -a "$O/baseline_ddp.jsonl"
  done
fi


if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  for c in ${TP2_CONFIGS-llama-1B llama-1B-gqa}; do
    for v in ${TP2_VARIANTS-tp2sp tp2spb}; do # bench/bundle.sh says what each is
      [ -x devrun/bin/bench-$c-$v ] || continue
      timeout 150 devrun/bin/bench-$c-$v --nproc-per-node 2 --data-path devrun/data/brown_text_document --split 100,0,0 \
        --train-iters 15 --log-interval 1 --eval-iters 0 > "$O/bench-$c-$v.log" 2>&1
      echo "$c $v exit $?"; grep -E "first step|iteration +15/" "$O/bench-$c-$v.log"
      [ "${LANES_ALT:-none}" != 0 ] || continue # as dp2ov: also compiled with --comm-lanes $LANES_ALT
      timeout 150 devrun/bin/$(lanes_bin bench-$c-$v "${LANES_ALT:-none}") --nproc-per-node 2 \
        --data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 15 --log-interval 1 --eval-iters 0 \
        > "$O/bench-$c-$v-${LANES_ALT:-none}.log" 2>&1
      echo "$c $v lanes ${LANES_ALT:-none} exit $?"; grep -E "first step|iteration +15/" "$O/bench-$c-$v-${LANES_ALT:-none}.log"
    done
  done
fi

# HF_LLAMA=1 (bundle.sh's too): llama-1B trained 10 steps with --save, exported by mcc-convert,
# loaded in transformers: its loss on mcc's batch against mcc's
if [ "${HF_LLAMA:-0}" != 0 ]; then
  section "Hugging Face: llama-1B exported by mcc-convert, its loss in transformers against mcc's"
  bash bench/hf_llama_check.sh llama-1B
fi

# LEVERS=1 (bundle.sh's MEMORY_LEVERS=1): the recompute table and llama3-8b on one GPU with full
# recompute and CPU optimizer offload, beside PyTorch's llama3-8b (bench/memory_levers.sh)
if [ "${LEVERS:-0}" != 0 ]; then
  section "memory levers: recompute table, llama3-8b on one GPU"
  source bench/memory_levers.sh
  levers_run "$O"
fi

section "table"
touch "$O/baseline.jsonl"; python3 bench/summarize.py "$O" | tee "$O/table.txt"
# the device tool brings back only a few files (8): every other file goes home in one archive
(cd "$O" && tar czf /tmp/mcc-logs.tar.gz --exclude table.txt --exclude device_run.out . && \
  find . -type f ! -name table.txt ! -name device_run.out -delete && mv /tmp/mcc-logs.tar.gz logs.tar.gz)

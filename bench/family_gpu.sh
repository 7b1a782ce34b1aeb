#!/usr/bin/env bash
# family_gpu.sh prepare | run — the model features of the Hugging Face families (issue 40) on the GPU
# against the CPU oracle, as tests/gpu_numerics.sh checks the tiny models: Qwen's attention (q, k, v
# biases, each head's q and k normalised before rope, a head width of its own: --kv-channels 64
# beside hidden 64 / 4 heads) on tiny-llama, on one GPU and at tp 2 with sequence parallelism (two
# ranks sharing the GPU through the staged path: the q/k norms over split heads), and Qwen3-MoE's
# (tiny-moe without its shared expert, q/k norms) on one GPU, also at top-4 of its 4 experts, where
# no routing choice can flip between bf16 and fp32 (at top-2 a flipped choice moves a token's
# gradient to another expert: the experts' step-1 gradients then differ by ~3e-2, measured); 10 steps,
# step-1 logits and gradients and the losses within bf16's tolerance (tests/compare_dumps.py).
#   prepare (here, where mcc builds): family/ with the CUDA executables, the CPU oracle's dumps, the
#     data and the libraries the GPU machine lacks, as family.tar.xz; carry ["family.tar.xz"] and
#     run `tar xJf family.tar.xz && bash bench/family_gpu.sh run` there
#   run (on the GPU machine): each against its oracle; exit 1 if any differs
set -euo pipefail
cd "$(dirname "$0")/.."
qwen=(--add-qkv-bias --qk-layernorm --kv-channels 64)
v258=(--vocab-size 258 --make-vocab-size-divisible-by 1 --global-batch-size 16)
# case NAME MODEL RANKS SPEC_FLAGS... | LAYOUT_FLAGS...
cases=("qwen-attention tiny-llama 1 ${qwen[*]} ${v258[*]} |"
       "qwen-attention-tp2-sp tiny-llama 2 ${qwen[*]} ${v258[*]} | --tp 2 --sequence-parallel"
       "qwen3-moe tiny-moe 1 --qk-layernorm --kv-channels 64 --moe-shared-expert-intermediate-size 0 ${v258[*]} |"
       "qwen3-moe-k4 tiny-moe 1 --qk-layernorm --kv-channels 64 --moe-shared-expert-intermediate-size 0 --moe-router-topk 4 ${v258[*]} |")
data=(--train-iters 10 --eval-iters 0)
if [ "${1:-}" = prepare ]; then
  B=build-dev
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DBLA_VENDOR=Generic >/dev/null
  cmake --build $B -j"$(nproc)" --target mcc >/dev/null
  rm -rf family && mkdir -p family/bin family/cpu family/lib family/data
  $B/mcc data preprocess --input tests/data/numerics.txt --output-prefix family/data/numerics --append-eod >/dev/null 2>&1
  for c in "${cases[@]}"; do
    read -r name model ranks rest <<<"$c"
    spec=${rest%%|*} layout=${rest#*|}
    # shellcheck disable=SC2086 # the flags split as words
    $B/mcc compile models/$model.json --target cpu --keep-logits $spec -o /tmp/family-cpu 2>/dev/null
    /tmp/family-cpu --data-path family/data/numerics_text_document "${data[@]}" --dump-dir family/cpu/$name >/dev/null
    # shellcheck disable=SC2086
    $B/mcc compile models/$model.json --target cuda --keep-logits $spec $layout -o family/bin/$name 2>/dev/null
  done
  rm -f /tmp/family-cpu
  source bench/bundle_libs.sh && bundle_libs family/lib
  tar cf - --sort=name family | xz -T0 > family.tar.xz
  du -sh family family.tar.xz
  exit 0
fi
[ "${1:-}" = run ] || { echo "usage: bench/family_gpu.sh prepare | run"; exit 2; }
DEVICE_BUNDLE=family source bench/device_env.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
status=0
for c in "${cases[@]}"; do
  read -r name model ranks _ <<<"$c"
  launch=(family/bin/$name)
  [ "$ranks" -gt 1 ] && launch=(mpirun -np "$ranks" --oversubscribe family/bin/$name)
  echo "--- $name ($model, $ranks rank(s) on one GPU)"
  if ! timeout 120 "${launch[@]}" --data-path family/data/numerics_text_document "${data[@]}" --dump-dir /tmp/family-$name \
      >/tmp/family-$name.log 2>&1; then
    tail -5 /tmp/family-$name.log; status=1; continue
  fi
  grep -E "iteration +10/" /tmp/family-$name.log | grep -o "lm loss: [0-9.E+-]*" || true
  python3 tests/compare_dumps.py --cpu family/cpu/$name --gpu /tmp/family-$name > /tmp/family-$name.cmp 2>&1 || status=1
  tail -2 /tmp/family-$name.cmp
done
exit $status

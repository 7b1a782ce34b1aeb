#!/usr/bin/env bash
# decoupled_lr.sh MCC — --decoupled-lr, Megatron's learning rate of its own for the input embedding
# and the output layer (is_embedding_or_output_parameter), on CPU ranks:
# (1) at 0 (with --decoupled-min-lr 0) the word embedding and the output layer do not move in 3
#     steps while every other parameter does: on one rank, under --tp 2 (the vocabulary split) and
#     --pp 2 (the two on different stages), for the untied tiny LLaMA and the tied tiny GPT (its
#     one table on both stages);
# (2) one step at a constant lr with --decoupled-lr 4 times it: Adam's first update moves a weight
#     by lr g / (|g| + eps) plus the decay lr wd p, so the median |change| of the output layer is
#     the decoupled lr and that of every other matrix the lr (to 2%).
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} # Open MPI's allocations (parallel_e2e.sh)
fail() { echo "FAIL: $*"; exit 1; }
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
common=(--target cpu --vocab-size 260 --make-vocab-size-divisible-by 1)

# train MODEL NAME ITERS FLAGS...: compiled with FLAGS, run on the ranks its layout takes, dumps in $work/NAME
train() {
  local model=$1 name=$2 iters=$3; shift 3
  "$mcc" compile "$root/models/$model.json" "${common[@]}" "$@" -o "$work/$name.bin" 2>"$work/$name.c.log" ||
    { cat "$work/$name.c.log"; fail "$name did not compile"; }
  local np=1 run=()
  [[ " $* " == *" --tp 2 "* || " $* " == *" --pp 2 "* ]] && np=2 run=(mpirun -np 2 --oversubscribe)
  "${run[@]}" "$work/$name.bin" --data-path "$work/text_text_document" --train-iters "$iters" --eval-iters 0 \
    --dump-dir "$work/$name" >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name did not run"; }
}

for model in tiny-llama tiny-gpt2; do
  for layout in "" "--tp 2" "--pp 2"; do
    name=${model}_${layout//[- ]/}
    read -ra lf <<<"$layout"
    train "$model" "$name" 3 --decoupled-lr 0 --decoupled-min-lr 0 "${lf[@]}"
    /usr/bin/python3 - "$root/tests" "$work/$name" <<'PY' || fail "$name: --decoupled-lr 0"
import glob, sys
sys.path.insert(0, sys.argv[1])
from compare_dumps import read_mcct
frozen = {"embedding.word", "output.weight"}  # Megatron's is_embedding_or_output_parameter
for init_file in sorted(glob.glob(f"{sys.argv[2]}/params_init*.mcct")):
    init, final = read_mcct(init_file), read_mcct(init_file.replace("params_init", "params_final"))
    for name, p0 in init.items():
        moved = abs(final[name] - p0).max()
        assert (moved == 0) == (name in frozen), f"{init_file}: {name} moved {moved}"
print(f"ok: {sys.argv[2].rsplit('/', 1)[1]}: the embedding and output layer stay, the rest move")
PY
  done
done

train tiny-llama step 1 --lr 1e-3 --lr-decay-style constant --lr-warmup-iters 0 --decoupled-lr 4e-3
/usr/bin/python3 - "$root/tests" "$work/step" <<'PY' || fail "one step at --decoupled-lr 4e-3"
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from compare_dumps import read_mcct
init, final = read_mcct(f"{sys.argv[2]}/params_init.mcct"), read_mcct(f"{sys.argv[2]}/params_final.mcct")
for name, p0 in init.items():
    if p0.ndim < 2 or name == "embedding.word":  # the embedding: only the batch's rows have a gradient
        continue
    want = 4e-3 if name == "output.weight" else 1e-3
    step = np.median(abs(final[name] - p0))
    assert abs(step / want - 1) < 0.02, f"{name}: median step {step:.4g}, want its lr {want}"
print("ok: one step moves the output layer by the decoupled lr, the rest by the lr")
PY
echo "decoupled lr ok"

#!/usr/bin/env bash
# checkpoint_pp.sh MCC MODEL — checkpoints under pipeline parallelism: saved at iteration 5 by
# PP=2 (each stage's ranks write their own stage's tensors; the manifest, written by rank 0, names
# every stage's; a parameter two stages share, GPT-2's tied embedding, is written once), then
#   - resumed at PP=2: losses 6-10 equal the uninterrupted PP=2 run's bit for bit;
#   - loaded by PP=4, by one rank and by TP=2 x PP=2: losses 6-10 equal the uninterrupted run's
#     within 1e-6 (fp32 CPU ranks: the layouts' sums differ in order only).
# The model has 4 layers so that PP=4 has one a stage.
set -euo pipefail
mcc=$1; model=$2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
common=(--target cpu --num-layers 4 --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16)
compile() { local out=$1; shift; "$mcc" compile "$root/models/$model.json" "${common[@]}" "$@" -o "$work/$out" \
              2>"$work/$out.c.log" || { cat "$work/$out.c.log"; exit 1; }; }
compile pp2 --pp 2
compile pp4 --pp 4
compile single
compile tp2_pp2 --tp 2 --pp 2
flags=(--data-path "$work/text_text_document" --train-iters 10 --eval-iters 0)
mpirun -np 2 "$work/pp2" "${flags[@]}" --dump-dir "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
mpirun -np 2 "$work/pp2" "${flags[@]}" --save "$work/ck" --exit-interval 5 >"$work/save.log" 2>&1 ||
  { cat "$work/save.log"; exit 1; }
# every stage's tensors are in the manifest, each once
/usr/bin/python3 - "$work/ck/iter_0000005/manifest.json" <<'PY'
import json, sys
names = list(json.load(open(sys.argv[1]))["tensors"])  # a JSON object: each name once
for want in ("embedding.word", "layers.0.mlp.down.weight", "layers.3.mlp.down.weight", "layers.3.mlp.down.weight.adam_m"):
    assert want in names, f"the manifest lacks {want}: it names {len(names)} tensors"
print(f"manifest: {len(names)} tensors, every stage's")
PY
check() { # NAME NP TOL: resume the checkpoint under layout NAME on NP ranks; TOL 0: bit for bit
  local name=$1 np=$2 tol=$3 launch=()
  [ "$np" = 1 ] || launch=(mpirun -np "$np" --oversubscribe)
  "${launch[@]}" "$work/$name" "${flags[@]}" --load "$work/ck" --dump-dir "$work/$name.out" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; exit 1; }
  grep -q "loaded checkpoint .*saved by 2 ranks.* at iteration 5 " "$work/$name.log" ||
    { echo "FAIL: $name loaded nothing"; cat "$work/$name.log"; exit 1; }
  /usr/bin/python3 - "$work/ref/steps.txt" "$work/$name.out/steps.txt" "$name" "$tol" <<'PY'
import sys
ref = {int(l.split()[0]): l.split()[1] for l in open(sys.argv[1])}
got = {int(l.split()[0]): l.split()[1] for l in open(sys.argv[2])}
name, tol = sys.argv[3], float(sys.argv[4])
assert sorted(got) == list(range(6, 11)), f"{name}: resumed steps {sorted(got)}, expected 6..10"
for it, v in sorted(got.items()):
    err = abs(float(v) - float(ref[it])) / abs(float(ref[it]))
    if (tol == 0 and v != ref[it]) or err > tol:
        sys.exit(f"FAIL: {name}: loss at iteration {it} is {v}, the uninterrupted pp2 run's {ref[it]} "
                 f"(relative error {err:.2e}, allowed {'0: bit for bit' if tol == 0 else tol})")
print(f"{name}: losses 6-10 after loading the pp2 checkpoint equal the uninterrupted run's"
      + (" bit for bit" if tol == 0 else f" within {tol}"))
PY
}
check pp2 2 0
check pp4 4 1e-6
check single 1 1e-6
check tp2_pp2 4 1e-6

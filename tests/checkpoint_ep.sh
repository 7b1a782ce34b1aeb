#!/usr/bin/env bash
# checkpoint_ep.sh MCC MODEL [NP FLAGS...] — an MoE checkpoint saved at iteration 5 by EP=2 x DP=2
# (each rank writes its own experts: the expert weights split over ep; or on NP ranks compiled with
# FLAGS, e.g. 4 --dp 4 --expert-model-parallel-size 2 --use-distributed-optimizer, whose expert
# optimizer state is in edp blocks) loads with no conversion on one rank, at DP=2 without EP and
# in its own layout;
# each resumed run's losses at iterations 6-10 equal the uninterrupted EP run's within 1e-5 (fp32
# CPU ranks: the layouts sum in another order).
set -euo pipefail
mcc=$1; model=$2; np=${3:-2}
ep_flags=("${@:4}"); [ ${#ep_flags[@]} -gt 0 ] || ep_flags=(--dp 2 --expert-model-parallel-size 2)
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
common=(--target cpu --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16)
compile() { local out=$1; shift; "$mcc" compile "$root/models/$model.json" "${common[@]}" "$@" -o "$work/$out" \
              2>"$work/$out.c.log" || { cat "$work/$out.c.log"; exit 1; }; }
compile ep2 "${ep_flags[@]}"
compile dp2 --dp 2
compile single
flags=(--data-path "$work/text_text_document" --train-iters 10 --eval-iters 0)
mpirun -np "$np" "$work/ep2" "${flags[@]}" --dump-dir "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
mpirun -np "$np" "$work/ep2" "${flags[@]}" --save "$work/ck" --exit-interval 5 >"$work/save.log" 2>&1 ||
  { cat "$work/save.log"; exit 1; }
check() { # NAME NP: resume the checkpoint under layout NAME on NP ranks
  local name=$1 ranks=$2 launch=()
  [ "$ranks" = 1 ] || launch=(mpirun -np "$ranks" --oversubscribe)
  "${launch[@]}" "$work/$name" "${flags[@]}" --load "$work/ck" --dump-dir "$work/$name.out" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; exit 1; }
  grep -q "loaded checkpoint .*saved by $np ranks.* at iteration 5 " "$work/$name.log" ||
    { echo "FAIL: $name loaded nothing"; cat "$work/$name.log"; exit 1; }
  /usr/bin/python3 - "$work/ref/steps.txt" "$work/$name.out/steps.txt" "$name" <<'PY'
import sys
ref = {int(l.split()[0]): float(l.split()[1]) for l in open(sys.argv[1])}
got = {int(l.split()[0]): float(l.split()[1]) for l in open(sys.argv[2])}
assert sorted(got) == list(range(6, 11)), f"{sys.argv[3]}: resumed steps {sorted(got)}, expected 6..10"
for it, v in sorted(got.items()):
    err = abs(v - ref[it]) / abs(ref[it])
    if err > 1e-5:
        sys.exit(f"FAIL: {sys.argv[3]}: loss at iteration {it} is {v!r}, the uninterrupted ep run's "
                 f"{ref[it]!r} (relative error {err:.2e} > 1e-5)")
print(f"{sys.argv[3]}: losses 6-10 after loading the ep checkpoint equal the uninterrupted run's")
PY
}
check single 1
check dp2 2
check ep2 "$np" # its own layout: the experts' blocks loaded back

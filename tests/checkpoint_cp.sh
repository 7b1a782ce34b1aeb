#!/usr/bin/env bash
# checkpoint_cp.sh MCC MODEL — a checkpoint saved under context parallelism loads without it: saved at
# iteration 5 by CP=2 (ring attention, p2p) x DP=2 with the distributed optimizer (each parameter a replica over cp, written
# by the cp rank at coordinate 0; the ZeRO shards over dp), loaded by one rank; the resumed run's
# losses at iterations 6-10 equal an uninterrupted run's within 1e-5 (one rank's: the CP=2 x DP=2
# run equals it, cp2_dp2_zero_equals_single_rank; fp32 CPU ranks, the sums differ in order only).
set -euo pipefail
mcc=$1; model=$2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
common=(--target cpu --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16)
compile() { local out=$1; shift; "$mcc" compile "$root/models/$model.json" "${common[@]}" "$@" -o "$work/$out" \
              2>"$work/$out.c.log" || { cat "$work/$out.c.log"; exit 1; }; }
compile cp2 --context-parallel-size 2 --cp-comm-type p2p --dp 2 --use-distributed-optimizer
compile single
flags=(--data-path "$work/text_text_document" --train-iters 10 --eval-iters 0)
"$work/single" "${flags[@]}" --dump-dir "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
mpirun -np 4 "$work/cp2" "${flags[@]}" --save "$work/ck" --exit-interval 5 >"$work/save.log" 2>&1 ||
  { cat "$work/save.log"; exit 1; }
"$work/single" "${flags[@]}" --load "$work/ck" --dump-dir "$work/single.out" >"$work/single.log" 2>&1 ||
  { cat "$work/single.log"; exit 1; }
grep -q "loaded checkpoint .*saved by 4 ranks.* at iteration 5 " "$work/single.log" ||
  { echo "FAIL: the single rank loaded nothing"; cat "$work/single.log"; exit 1; }
/usr/bin/python3 - "$work/ref/steps.txt" "$work/single.out/steps.txt" <<'PY'
import sys
ref = {int(l.split()[0]): float(l.split()[1]) for l in open(sys.argv[1])}
got = {int(l.split()[0]): float(l.split()[1]) for l in open(sys.argv[2])}
assert sorted(got) == list(range(6, 11)), f"resumed steps {sorted(got)}, expected 6..10"
for it, v in sorted(got.items()):
    err = abs(v - ref[it]) / abs(ref[it])
    if err > 1e-5:
        sys.exit(f"FAIL: loss at iteration {it} is {v!r}, the uninterrupted run's {ref[it]!r} "
                 f"(relative error {err:.2e} > 1e-5)")
print("losses 6-10 of one rank after loading the cp2 x dp2 ZeRO checkpoint equal the uninterrupted run's")
PY

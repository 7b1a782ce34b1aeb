#!/usr/bin/env bash
# parallel_e2e.sh MCC MODEL NP [SPEC_FLAGS... --] FLAGS... — a parallel layout on CPU ranks under
# mpirun must compute what the single-rank program computes: the model compiled with FLAGS (e.g.
# --tp 2 --dp 2) and run on NP ranks against the same spec compiled with no parallel flags, both
# for the same global batch: the same loss, lr and grad norm at each of 10 steps, the same step-1
# logits and gradients (fp32, relative error <= 1e-5) and the same final weights, per tensor
# (2e-5: the 84 layouts' largest is 4.5e-6, tp 2 with sequence parallel and dropout, the median
# 1e-6), and an MoE model's router metrics (1e-5); split tensors are gathered by rank 0 before
# they are written. SPEC_FLAGS, before a `--`, change what is computed (e.g. --hidden-dropout 0.1)
# and go to both programs. For a spec
# whose gradients are ill-conditioned (large logits: saturated softmaxes), PARALLEL_E2E_ITERS
# (default 10) and PARALLEL_E2E_TOL (of the tensors and grad norms) shorten the run and loosen
# all but the losses, which keep 1e-5; PARALLEL_E2E_FINAL_TOL loosens the final weights' alone;
# PARALLEL_E2E_PLAN names a line the parallel compile must print.
# The single-rank run is tests/single_rank_ref.sh's: read from PARALLEL_E2E_REF where it names one
# that ran already for the same model, iterations and SPEC_FLAGS (tests/harness.cmake's fixtures
# share one between the layouts), else run here.
set -euo pipefail
mcc=$1; model=$2; np=$3; shift 3
spec=()
sep=0 # a loop, not printf | grep -q: under pipefail printf's SIGPIPE made the test fail at random
for a in "$@"; do [ "$a" = -- ] && sep=1; done
if [ $sep = 1 ]; then
  while [ "$1" != -- ]; do spec+=("$1"); shift; done
  shift
fi
iters=${PARALLEL_E2E_ITERS:-10} tol=${PARALLEL_E2E_TOL:-1e-5} final_tol=${PARALLEL_E2E_FINAL_TOL:-${PARALLEL_E2E_TOL:-2e-5}}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# Open MPI keeps allocations of components it unloaded, which LeakSanitizer cannot attribute
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
if [ -n "${PARALLEL_E2E_REF:-}" ]; then
  ref=$PARALLEL_E2E_REF
else
  ref=$work/single
  "$root/tests/single_rank_ref.sh" "$mcc" "$model" "$ref" "$iters" "${spec[@]}" >/dev/null
fi
mapfile -t common <"$ref/compile_flags"
"$mcc" compile "$root/models/$model.json" "${common[@]}" "$@" -o "$work/parallel" 2>"$work/c2.log" ||
  { cat "$work/c2.log"; exit 1; }
# PARALLEL_E2E_PLAN: a line mcc compile must print for the layout (e.g. a stage's layers: that the
# flags took, where the numbers alone would not tell)
[ -z "${PARALLEL_E2E_PLAN:-}" ] || grep -qF -- "$PARALLEL_E2E_PLAN" "$work/c2.log" ||
  { echo "FAIL: mcc compile did not print \"$PARALLEL_E2E_PLAN\":"; grep "pipeline stage" "$work/c2.log"; exit 1; }
# one plan serves every rank of the layout's pipeline stage (its rank terms resolved as each loads
# it): the executable holds one config block a stage, whatever the layout
plans=$(grep -a -c '^  tensor_model_parallel_size = "' "$work/parallel" || true)
stages=$( (grep -a -o '; stage [0-9]* of [0-9]*' "$work/parallel" || true) | wc -l)
[ "$stages" -gt 0 ] || stages=1
[ "$plans" = "$stages" ] || { echo "FAIL: $work/parallel holds $plans plans for $stages stages; one should serve every rank of a stage"; exit 1; }
mpirun -np "$np" --oversubscribe "$work/parallel" --data-path "$ref/text_text_document" --train-iters "$iters" \
  --dump-dir "$work/par" --metrics-file "$work/par.jsonl" >"$work/par.log" 2>&1 || { cat "$work/par.log"; exit 1; }
# an MoE model's router metrics (runtime/moe_stats.c), combined over the stages and ranks holding
# the layers, are the single rank's: the same keys, each within 1e-5; the load imbalance only
# without dp (it is the mean of each dp rank's own tokens' imbalance)
dp=$(grep -a -o -m1 '^  data_parallel_size = "[0-9]*"' "$work/parallel" | tr -dc 0-9)
# (neither run recording a router metric, the two agree: a dense model's)
grep -q '"moe_' "$ref/ref.jsonl" "$work/par.jsonl" && /usr/bin/python3 - "$ref/ref.jsonl" "$work/par.jsonl" "$dp" <<'PY'
import json, sys
ref, par = ([{k: v for k, v in json.loads(l).items() if k.startswith("moe_")} for l in open(f)] for f in sys.argv[1:3])
for it, (want, got) in enumerate(zip(ref, par), 1):
    if sorted(got) != sorted(want):
        sys.exit(f"FAIL: step {it}'s MoE metrics are {sorted(got)}, the single rank's {sorted(want)}")
    if sys.argv[3] != "1":
        want.pop("moe_load_imbalance", None)
    for k, v in want.items():
        if v is None or got[k] is None:  # a metric the model does not have (no z loss): null in both
            if v is not got[k]:
                sys.exit(f"FAIL: step {it}'s {k} is {got[k]!r}, the single rank's {v!r}")
            continue
        if abs(got[k] - v) > 1e-5 * max(abs(v), 1e-3):
            sys.exit(f"FAIL: step {it}'s {k} is {got[k]!r}, the single rank's {v!r}")
if ref and ref[0]:
    print(f"MoE metrics of {len(ref)} steps equal the single rank's: {', '.join(sorted(ref[0]))} (dp {sys.argv[3]})")
PY
/usr/bin/python3 "$root/tests/compare_dumps.py" --cpu "$ref/ref" --gpu "$work/par" --tol "$tol" --loss-tol 1e-5 --final \
  --final-tol "$final_tol"

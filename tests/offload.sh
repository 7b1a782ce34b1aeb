#!/usr/bin/env bash
# offload.sh MCC NP FLAGS... — CPU optimizer offload changes no bit: tiny GPT-2 compiled with FLAGS
# (a layout: --dp 2 --use-distributed-optimizer, --pp 2, ...) on NP CPU ranks, and again with
# --optimizer-cpu-offload at fraction 1.0 and at 0.5 (with --overlap-cpu-optimizer-d2h-h2d), must
# give the same step-1 gradients, every step's loss, lr and grad norm and the same final weights,
# byte for byte: on CPU ranks the host's AdamW is the CPU kernel's arithmetic, run by train_rank's
# host executor (runtime/host_optimizer.c) on MCC_HOST_OPTIMIZER_THREADS=3 threads over the host
# globals the plan places there (the offloaded parameters themselves on the host), the evals' losses
# too, and a checkpoint saved with offload resumed without it and the reverse (steps 6-10 the same
# text, the same final weights). On one rank it also checks gradient accumulation off (the update's
# other zeroing path), bf16 Adam moments, mcc compile's host memory line and its --host-memory
# refusal, and --clip-grad 0's host update beside the backward (ready marks in the plan, the host
# function on its own thread in their order; two micro-batches a step and one): equal too. Every log line of the offload run ends with the host step's time split, consistent with
# its metrics record.
set -euo pipefail
mcc=$1; np=$2; shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} MCC_HOST_OPTIMIZER_THREADS=3 # (parallel_e2e.sh)
run() { if [ "$np" = 1 ]; then "$@"; else mpirun -np "$np" --oversubscribe "$@"; fi; }
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
data=(--data-path "$work/text_text_document" --split 50,50,0 --train-iters 10 --eval-interval 5 --eval-iters 1)
compile() { # NAME FLAGS...
  local name=$1; shift
  "$mcc" compile "$root/models/tiny-gpt2.json" --target cpu --vocab-size 260 --make-vocab-size-divisible-by 1 "$@" \
    -o "$work/bin_$name" 2>"$work/$name.clog" || { cat "$work/$name.clog"; exit 1; }
}
train() { # NAME DUMP FLAGS...
  local name=$1 dump=$2; shift 2
  run "$work/bin_$name" "${data[@]}" --dump-dir "$work/$dump" "$@" >"$work/$dump.log" 2>&1 || { cat "$work/$dump.log"; exit 1; }
}
same() { # A B WHAT: the dumps of runs A and B byte for byte (a pipeline's: a file a stage), and their evals
  for f in "$work/$1"/*; do
    cmp -s "$f" "$work/$2/${f##*/}" || { echo "FAIL: $3: ${f##*/} differs from the run without offload"; exit 1; }
  done
  evals() { grep -o "validation loss at iteration [0-9]* | lm loss value: [^|]*" "$work/$1.log"; }
  [ "$(evals "$1" | wc -l)" = 2 ] && diff <(evals "$1") <(evals "$2") >/dev/null ||
    { echo "FAIL: $3: the validation losses differ from the run without offload"; evals "$1"; evals "$2"; grep -i valid "$work/$1.log" | head -3; exit 1; }
  echo "ok: $3 equals the run without offload, bit for bit"
}
offload=(--optimizer-cpu-offload)
compile ref "$@"
compile full "$@" "${offload[@]}"
compile half "$@" "${offload[@]}" --optimizer-offload-fraction 0.5 --overlap-cpu-optimizer-d2h-h2d
grep -q "host memory .*page-locked" "$work/full.clog" || { echo "FAIL: no host memory line"; cat "$work/full.clog"; exit 1; }
# the fp32 value of an offloaded parameter lives on the host only (the parameter global itself is
# host, or under the distributed optimizer its blocks, which hold it); the device keeps the working
# copy the step reads (CPU target: f32, @<p>.f32)
held='global @embedding.word : f32\[[0-9]*,64\] \({shard=[^}]*} \)\{0,1\}{kind=param, .*host}' # a tp shard's too
[[ " $* " == *" --use-distributed-optimizer "* ]] &&
  held='global @embedding.word.master_shard : f32\[[0-9]*\] {shard=\[dp\]} {kind=master_shard, .*host}'
for bin in full half; do
  grep -aq "$held" "$work/bin_$bin" &&
    grep -aq "global @embedding.word.f32 : f32\[[0-9]*,64\] \({shard=[^}]*} \)\{0,1\}{kind=copy, init=zeros, of=@embedding.word[,}]" "$work/bin_$bin" ||
    { echo "FAIL: $bin: the offloaded @embedding.word is not a host global beside a device working copy"; exit 1; }
done
! grep -aq "global @final_norm.bias : .*host}" "$work/bin_half" || { echo "FAIL: fraction 0.5 put the last parameter on the host"; exit 1; }
echo "ok: the plan holds the offloaded parameters on the host, their working copies on the device"
if [[ " $* " == *" --clip-grad 0 "* ]]; then # a layout run beside the backward: the plan marks the gradients ready
  grep -aq "grad_ready %[0-9]* {slot=0}" "$work/bin_full" || { echo "FAIL: --clip-grad 0 $*: no ready marks"; exit 1; }
  echo "ok: under --clip-grad 0 the plan marks the offloaded gradients ready (the host step beside the backward)"
fi
! grep -q "host memory" "$work/ref.clog" || { echo "FAIL: a host memory line without offload"; exit 1; }
train ref ref; train full full --metrics-file "$work/full.jsonl"; train half half
same ref full "fraction 1.0"
# the host step's time split ends every log line of an offload run (after Megatron's fields) and is
# in its metrics records: waiting for gradient chunks, AdamW and the copies up sum to at most the
# whole (the log's one-decimal rounding allowed); no such field without offload
python3 - "$work/full.log" "$work/full.jsonl" <<'PY' || exit 1
import json, re, sys
lines = [l for l in open(sys.argv[1]) if " iteration " in l and "lm loss:" in l]
pat = re.compile(r"memory \(GiB\): [0-9.]+ \| host step \(ms\): ([0-9.]+) \(copies down ([0-9.]+), adam ([0-9.]+), up ([0-9.]+)\) \|$")
recs = [r for r in map(json.loads, open(sys.argv[2])) if "loss" in r]
ok = lines and recs and all(pat.search(l.rstrip("\n")) for l in lines)
for l in lines if ok else []:
    whole, *parts = map(float, pat.search(l.rstrip("\n")).groups())
    ok &= whole > 0 and sum(parts) <= whole + 0.2
for r in recs if ok else []:
    parts = [r["host_copies_down_ms"], r["host_adam_ms"], r["host_up_ms"]]
    ok &= r["host_step_ms"] > 0 and min(parts) >= 0 and sum(parts) <= r["host_step_ms"]
if not ok:
    sys.exit("FAIL: the log lines or metrics records lack a consistent host step split:\n" + "".join(lines[:2]) + str(recs[:1]))
PY
! grep -q "host step" "$work/ref.log" || { echo "FAIL: a host step field without offload"; exit 1; }
echo "ok: each log line and metrics record splits the host step into copies down, AdamW and copies up"
same ref half "fraction 0.5, overlapped copies"
# checkpoints hold the same tensors either way (under ZeRO the master blocks): saved at 5 by one,
# resumed to 10 by the other
for pair in "full ref" "ref full"; do
  read -r saver loader <<<"$pair"
  rm -rf "$work/ck"
  train "$saver" "save_$saver" --save "$work/ck" --save-interval 5 --exit-interval 5
  train "$loader" "load_$loader" --load "$work/ck"
  diff <(sed -n 6,10p "$work/ref/steps.txt") "$work/load_$loader/steps.txt" >/dev/null ||
    { echo "FAIL: saved by $saver at 5, resumed by $loader: steps 6-10 differ"; exit 1; }
  for f in "$work/ref"/params_final*.mcct; do # a pipeline's: a file a stage
    cmp -s "$f" "$work/load_$loader/${f##*/}" ||
      { echo "FAIL: saved by $saver at 5, resumed by $loader: the final weights differ (${f##*/})"; exit 1; }
  done
  echo "ok: a checkpoint saved by $saver resumes in $loader bit for bit"
done
[ "$np" = 1 ] || exit 0
# train_rank allocates the host memory mcc compile reported
host_bytes=$(sed -n 's/.*host memory .*(\([0-9]*\) bytes, page-locked.*/\1/p' "$work/full.clog")
grep -q "| host memory, bytes  *| *$host_bytes |" "$work/full.log" ||
  { echo "FAIL: train_rank's host memory is not mcc compile's $host_bytes bytes"; grep "memory" "$work/full.log"; exit 1; }
echo "ok: train_rank's host memory is mcc compile's, $host_bytes bytes"
# one micro-batch a step: micro_step's first writes assign the gradients, nothing is zeroed
compile ref1 --global-batch-size 4
compile half1 --global-batch-size 4 "${offload[@]}" --optimizer-offload-fraction 0.5
train ref1 ref1; train half1 half1
same ref1 half1 "fraction 0.5, one micro-batch a step"
# --clip-grad 0: the host's update runs beside the last micro-batch's backward (passes/grad_ready.c:
# each offloaded gradient's ready mark, the host's updates in that order, on a thread of their own),
# with several micro-batches a step and with one; a clipped plan has no marks (its host step waits for
# the norm over every gradient)
grep -aq "grad_ready %[0-9]* {slot=" "$work/bin_full" && { echo "FAIL: a clipped plan (--clip-grad 1) marks gradients ready"; exit 1; }
compile ref0 --clip-grad 0
compile beside0 --clip-grad 0 "${offload[@]}"
compile ref01 --clip-grad 0 --global-batch-size 4
compile beside01 --clip-grad 0 --global-batch-size 4 "${offload[@]}" --optimizer-offload-fraction 0.5
for bin in beside0 beside01; do
  grep -aq "grad_ready %[0-9]* {slot=0}" "$work/bin_$bin" && grep -aq "fill {value=1} : f32\[\]" "$work/bin_$bin" ||
    { echo "FAIL: $bin: --clip-grad 0 gives no ready marks or no constant clipping coefficient"; exit 1; }
done
train ref0 ref0; train beside0 beside0; train ref01 ref01; train beside01 beside01
same ref0 beside0 "--clip-grad 0, the host's update beside the backward, 2 micro-batches a step"
same ref01 beside01 "--clip-grad 0, the host's update beside the backward, one micro-batch a step, fraction 0.5"
# --skip-nan-steps checks the norm before any update: the marked plan's host step then runs after it
train beside0 beside0_skip --skip-nan-steps
same ref0 beside0_skip "--clip-grad 0 with --skip-nan-steps (the host step after the norm's check)"
# bf16 Adam moments (--use-precision-aware-optimizer): the host's rounding is the device's
bf16=(--use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16)
compile ref16 "${bf16[@]}"
compile half16 "${bf16[@]}" "${offload[@]}" --optimizer-offload-fraction 0.5
grep -q "global @embedding.word.adam_m : bf16\[260,64\] {kind=adam_m, .*host}" "$work/bin_half16" ||
  { echo "FAIL: the offloaded moments are not bf16 host globals in the plan"; exit 1; }
train ref16 ref16; train half16 half16
same ref16 half16 "bf16 moments, fraction 0.5"
# the host memory must fit: the refusal names the fixes
if "$mcc" compile "$root/models/tiny-gpt2.json" --target cpu "${offload[@]}" --host-memory 0.001 -o "$work/x" 2>"$work/x.log"; then
  echo "FAIL: --host-memory 0.001 compiled"; exit 1
fi
grep -q "host memory per rank.*(--host-memory)" "$work/x.log" && grep -q -- "--optimizer-offload-fraction 0.5: half as many" "$work/x.log" ||
  { echo "FAIL: the refusal does not say what needs what, or the fix"; cat "$work/x.log"; exit 1; }
echo "ok: --host-memory 0.001 is refused, naming the fixes"

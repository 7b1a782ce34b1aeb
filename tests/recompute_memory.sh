#!/usr/bin/env bash
# recompute_memory.sh MCC — the memory plan and the cost model count full recompute exactly, on
# tiny-llama (2 layers, micro-batch 4 x 32 tokens, hidden 64, f32 on the CPU target; 2 micro-batches
# a step): a micro-batch's forward values the backward reads ("saved for the backward") shrink
# from no recompute to selective to block 1 to uniform 1 to uniform 2; uniform 2 keeps one
# checkpoint input (4 x 32 x 64 x 4 bytes) fewer than uniform 1, which keeps, beside the layers'
# inputs, only what the head's backward reads (the last layer's output, the final norm's, the
# logits and the loss); and the step's planned FLOPs grow by exactly the FLOPs the backward
# replays, once a micro-batch; the pipeline's balanced split counts the replay too. Selective
# mla_up_proj on tiny-deepseek-v3 keeps exactly its attention inputs fewer, and mlp, moe, moe_act
# and shared_experts exactly their regions' values.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
compile() { # NAME FLAGS...: saved bytes, step GFLOP and replayed GFLOP into $work/NAME
  local name=$1; shift
  "$mcc" compile "$root/models/tiny-llama.json" --target cpu "$@" -o "$work/tr" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; exit 1; }
  local saved step again
  saved=$(sed -n 's/^  saved for the backward .*(\([0-9]*\) bytes a micro-batch.*/\1/p' "$work/$name.log")
  step=$(sed -n 's/^compute a step: \([0-9.e+-]*\) GFLOP per rank.*/\1/p' "$work/$name.log")
  again=$(sed -n 's/^  of which recompute: the backward replays \([0-9.e+-]*\) GFLOP.*/\1/p' "$work/$name.log")
  [ -n "$saved" ] && [ -n "$step" ] || fail "$name: no saved bytes or step FLOPs in: $(cat "$work/$name.log")"
  echo "$saved ${step} ${again:-0}" >"$work/$name"
  echo "$name: saved $saved bytes, step $step GFLOP, replayed ${again:-0} GFLOP a micro-batch"
}
compile none
compile selective --recompute-granularity selective
compile block1 --recompute-granularity full --recompute-method block --recompute-num-layers 1
compile uniform1 --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
compile uniform2 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2
read -r s_none f_none _ <"$work/none"
prev=$s_none
for k in selective block1 uniform1 uniform2; do
  read -r s f again <"$work/$k"
  [ "$s" -lt "$prev" ] || fail "$k saves $s bytes, not fewer than the previous ($prev)"
  prev=$s
  [ "$k" = selective ] && continue
  python3 -c "import sys; f, n, a = map(float, sys.argv[1:]); sys.exit(abs(f - n - 2 * a) > 1e-5 * f)" \
    "$f" "$f_none" "$again" || fail "$k: the step's $f GFLOP are not the $f_none without recompute + 2 x $again replayed"
done
layer_input=$((4 * 32 * 64 * 4))
read -r s1 _ <"$work/uniform1"; read -r s2 _ <"$work/uniform2"
[ $((s1 - s2)) = $layer_input ] || fail "uniform 1 keeps $s1 bytes, uniform 2 $s2: not one layer input ($layer_input) apart"
head=$((2 * layer_input + 4 * 32 * 384 * 4 + 4))
[ "$s1" = $((2 * layer_input + head)) ] || fail "uniform 1 keeps $s1 bytes, not 2 layer inputs + the head's $head"
# the pipeline's balanced split weighs a layer with its replay: llama3-70b at TP4 x PP4 x DP4 gives
# the first rank a layer more and the last one fewer (its head) without recompute, none under full
# uniform, where a layer costs a third more and the head no more
split() {
  "$mcc" schedule "$root/models/llama3-70b.json" --tp 4 --pp 4 --dp 4 --global-batch-size 1024 --micro-batch-size 1 \
    "$@" 2>&1 | sed -n 's/^stage split .*: \(rank 0: .*\)$/\1/p'
}
[ "$(split)" = "rank 0: 21; rank 1: 20; rank 2: 20; rank 3: 19" ] || fail "llama3-70b's balanced split: $(split)"
got=$(split --recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
[ "$got" = "rank 0: 20; rank 1: 20; rank 2: 20; rank 3: 20" ] || fail "llama3-70b's split under full uniform: $got"
# mcc schedule times a backward with the forward it replays: full uniform's step is about 4/3 of
# none's (F : B : W = 1 : 1 : 1 a layer, B gaining an F), block 2 (of 20 a stage) a little longer
makespan() {
  "$mcc" schedule "$root/models/llama3-70b.json" --tp 4 --pp 4 --dp 4 --global-batch-size 1024 --micro-batch-size 1 \
    --pipeline-schedule 1f1b "$@" 2>&1 | sed -n 's/^bubble: .*; makespan \([0-9.]*\) s$/\1/p'
}
none=$(makespan) uniform=$(makespan --recompute-granularity full --recompute-method uniform --recompute-num-layers 1)
block=$(makespan --recompute-granularity full --recompute-method block --recompute-num-layers 2)
awk -v n="$none" -v u="$uniform" -v b="$block" 'BEGIN { exit !(n > 0 && u / n > 1.25 && u / n < 1.40 && b / n > 1.01 && b / n < 1.10) }' ||
  fail "mcc schedule's makespan: none $none s, full uniform 1 $uniform s, block 2 $block s (want ~4/3 and a little above 1)"
# selective mla_up_proj on tiny-deepseek-v3 (2 layers, 4 x 32 tokens, 4 heads, q and k 16 + 8
# channels, values 16, f32): each layer's attention inputs q, k and v are no longer saved, and k_pe's
# rope (8 channels of one head) is, which the recomputed concatenation reads
saved() {
  "$mcc" compile "$root/models/tiny-deepseek-v3.json" --target cpu "$@" -o "$work/tr" 2>&1 |
    sed -n 's/^  saved for the backward .*(\([0-9]*\) bytes a micro-batch.*/\1/p'
}
s_none=$(saved) s_up=$(saved --recompute-granularity selective --recompute-modules mla_up_proj)
want=$((2 * 4 * 32 * (4 * (24 + 24 + 16) - 8) * 4))
[ -n "$s_none" ] && [ $((s_none - s_up)) = $want ] ||
  fail "mla_up_proj saves ${s_up:-?} bytes against none's ${s_none:-?}: not $want fewer"
echo "mla_up_proj: saved $s_up bytes against none's $s_none"
# the other regions, on the same model (N = 4 x 32 tokens, top 2: 2N routed rows): mlp no longer
# saves the dense layer's up, gate and SwiGLU outputs (3 x N x 128 channels), moe the routed
# experts' (3 x 2N x 32), moe_act their SwiGLU output alone (2N x 32), shared_experts the shared
# expert's three (3 x N x 32)
N=$((4 * 32))
for m in "mlp $((3 * N * 128 * 4))" "moe $((3 * 2 * N * 32 * 4))" "moe_act $((2 * N * 32 * 4))" \
         "shared_experts $((3 * N * 32 * 4))"; do
  set -- $m
  s=$(saved --recompute-granularity selective --recompute-modules "$1")
  [ -n "$s" ] && [ $((s_none - s)) = "$2" ] || fail "$1 saves ${s:-?} bytes against none's $s_none: not $2 fewer"
  echo "$1: saved $s bytes against none's $s_none"
done
# under FP8 the experts' down projection keeps only the activation's quantized copy (1 byte, not
# the f32's 4): moe_act recomputes that copy with the activation, freeing a quarter of its f32 bytes
moe_saved() {
  "$mcc" compile "$root/models/tiny-moe.json" --target cpu "$@" -o "$work/tr" 2>&1 |
    sed -n 's/^  saved for the backward .*(\([0-9]*\) bytes a micro-batch.*/\1/p'
}
sel=(--recompute-granularity selective --recompute-modules moe_act) fp8=(--fp8-format hybrid --fp8-recipe delayed)
f32=$(( $(moe_saved) - $(moe_saved "${sel[@]}") )) q=$(( $(moe_saved "${fp8[@]}") - $(moe_saved "${fp8[@]}" "${sel[@]}") ))
[ "$f32" -gt 0 ] && [ $((4 * q)) = "$f32" ] || fail "moe_act frees $f32 bytes in f32 and $q under FP8: not a quarter"
echo "moe_act: $f32 bytes in f32, $q under FP8"
# the regions under FP8 (delayed): tiny-llama's mlp frees its two layers' up and gate outputs (f32)
# and the SwiGLU output's quantized copy (1 byte): 9 bytes x N x 128 a layer, no FP8 weight kept
# for the replay; tiny-moe's moe the experts' alike, 9/4 of what moe_act frees in f32
llama_saved() {
  "$mcc" compile "$root/models/tiny-llama.json" --target cpu "${fp8[@]}" "$@" -o "$work/tr" 2>&1 |
    sed -n 's/^  saved for the backward .*(\([0-9]*\) bytes a micro-batch.*/\1/p'
}
got=$(( $(llama_saved) - $(llama_saved --recompute-granularity selective --recompute-modules mlp) ))
[ "$got" = $((2 * 9 * N * 128)) ] || fail "FP8 mlp frees $got bytes on tiny-llama: not $((2 * 9 * N * 128))"
got=$(( $(moe_saved "${fp8[@]}") - $(moe_saved "${fp8[@]}" --recompute-granularity selective --recompute-modules moe) ))
[ $((4 * got)) = $((9 * f32)) ] || fail "FP8 moe frees $got bytes on tiny-moe: not 9/4 of moe_act's $f32"
echo "FP8 regions: mlp and moe free what their values and quantized copies took"
# a module the model lacks is accepted with a note, and changes nothing
note=$("$mcc" compile "$root/models/tiny-llama.json" --target cpu --recompute-granularity selective \
  --recompute-modules layernorm,moe -o "$work/tr" 2>&1 | grep -c "moe: accepted, nothing to recompute: the model has no MoE layers" || true)
[ "$note" = 1 ] || fail "tiny-llama with --recompute-modules layernorm,moe: no note that it has no MoE layers"
echo "PASS"

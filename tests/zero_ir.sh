#!/usr/bin/env bash
# zero_ir.sh MCC — the distributed optimizer (ZeRO-1) as `mcc ir` shows it, on tiny-gpt2 with dp 2:
# reduce_grads reduce-scatters every gradient into its block; the optimizer all-reduces the blocks'
# sum of squares, runs AdamW on the blocks of master, gradient and Adam state, and all-gathers
# every parameter back; setup cuts the master blocks. Also: the flag is a no-op at dp 1, optimizer
# state per rank shrinks by dp in the memory report, and a dp that splits no parameter evenly is
# refused naming the flag.
set -uo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
fail() { echo "FAIL: $*"; status=1; }

ir=$("$mcc" ir "$root/models/tiny-gpt2.json" --target cpu --dp 2 --use-distributed-optimizer --after optimizer 2>&1) ||
  { echo "$ir"; exit 1; }
# count FUNC OP: instructions `OP` in function FUNC
count() { awk -v f="$1" -v op="$2" '/^func /{in_f = ($2 == f)} in_f && ($1 == op || $3 == op)' <<<"$ir" | wc -l; }
n=$(grep -c '{kind=param' <<<"$ir")
[ "$n" -gt 0 ] || fail "no parameters in the dump"
for want in "reduce_grads reduce_scatter $n" "reduce_grads all_reduce_inplace 0" "setup local_shard $n" \
            "optimizer all_reduce 1" "optimizer adamw $n" "optimizer all_gather $n" "grad_norm all_reduce 1"; do
  set -- $want
  got=$(count "$1" "$2"); [ "$got" = "$3" ] || fail "$1 has $got $2, want $3"
done
# shard types: the word embedding [384,64] (257 padded) is split in two blocks of 12288
for g in grad_shard master_shard adam_m adam_v; do
  grep -q "^global @embedding.word.$g : f32\[12288\] {shard=\[dp\]}" <<<"$ir" || fail "@embedding.word.$g is not f32[12288] {shard=[dp]}"
done
grep -q "reduce_scatter %[0-9]* {axis=1} : f32\[12288\] {shard=\[dp\]}" <<<"$ir" || fail "no reduce_scatter into f32[12288] {shard=[dp]}"
grep -q "all_gather %[0-9]* {axis=1} : f32\[24576\]$" <<<"$ir" || fail "no all_gather back to f32[24576]"
# every adamw of the optimizer updates blocks: (master_shard, grad_shard, adam_m, adam_v) of one parameter
bad=$(awk '/^func /{in_f = ($2 == "optimizer")}
  in_f && $3 == "global" {name[$1] = substr($4, 2)}
  in_f && $1 == "adamw" {
    for (i = 2; i <= 5; i++) { gsub(",", "", $i); op[i] = name[$i] }
    p = op[2]; sub(/\.master_shard$/, "", p)
    if (op[2] != p ".master_shard" || op[3] != p ".grad_shard" || op[4] != p ".adam_m" || op[5] != p ".adam_v") print
  }' <<<"$ir")
[ -z "$bad" ] || fail "adamw not on the blocks of one parameter: $bad"

# at dp 1 the flag changes nothing but its config line
diff <("$mcc" ir "$root/models/tiny-gpt2.json" --target cpu --use-distributed-optimizer 2>/dev/null | grep -v use_distributed_optimizer) \
     <("$mcc" ir "$root/models/tiny-gpt2.json" --target cpu 2>/dev/null) >/dev/null || fail "--use-distributed-optimizer changes the dp 1 plan"

# optimizer state per rank: 1/dp of the replicated optimizer's (gpt2-124m, dp 4)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
state() { "$mcc" compile "$root/models/gpt2-124m.json" --target cpu --dp 4 "$@" -o "$work/train" 2>&1 | awk '/optimizer state/ {print $3}'; }
whole=$(state); quarter=$(state --use-distributed-optimizer)
awk -v w="$whole" -v q="$quarter" 'BEGIN {exit !(w > 0 && q > 0 && (q * 4 - w) ^ 2 < 1e-4)}' ||
  fail "optimizer state $quarter GiB with ZeRO at dp 4, want a quarter of $whole GiB"

# dp 3 cannot split the [257,64] embedding (unpadded) evenly: refused, naming the flag and the parameter
msg=$("$mcc" ir "$root/models/tiny-gpt2.json" --target cpu --dp 3 --global-batch-size 12 --use-distributed-optimizer \
  --make-vocab-size-divisible-by 1 2>&1) &&
  fail "dp 3 with --use-distributed-optimizer was accepted"
grep -q -- "--use-distributed-optimizer.*@embedding.word.grad has 16448 elements" <<<"$msg" || fail "unclear refusal: $msg"

[ $status = 0 ] && echo "distributed optimizer IR ok ($n parameters)"
exit $status

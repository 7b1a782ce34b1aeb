#!/usr/bin/env bash
# zero_ir.sh MCC — the distributed optimizer (ZeRO-1) on tiny-gpt2 beyond one pass's output (what
# data_parallel and optimizer write is checked by tests/passes/zero_*.ir): the flag is a no-op at
# dp 1 and cp 1 (one replica), optimizer state per rank shrinks by dp in the memory report (by
# dp x cp under context parallelism, the shards over dp_cp), and a dp that splits no parameter
# evenly is refused naming the flag.
set -uo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
status=0
fail() { echo "FAIL: $*"; status=1; }

# at dp 1 the flag changes nothing but its config line
diff <("$mcc" ir "$root/models/tiny-gpt2.json" --target cpu --use-distributed-optimizer 2>/dev/null | grep -v use_distributed_optimizer) \
     <("$mcc" ir "$root/models/tiny-gpt2.json" --target cpu 2>/dev/null) >/dev/null || fail "--use-distributed-optimizer changes the dp 1 plan"

# optimizer state per rank: 1/dp of the replicated optimizer's (gpt2-124m, dp 4)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
state() { "$mcc" compile "$root/models/gpt2-124m.json" --target cpu "$@" -o "$work/train" 2>&1 | awk '/optimizer state/ {print $3}'; }
whole=$(state --dp 4); quarter=$(state --dp 4 --use-distributed-optimizer)
awk -v w="$whole" -v q="$quarter" 'BEGIN {exit !(w > 0 && q > 0 && (q * 4 - w) ^ 2 < 1e-4)}' ||
  fail "optimizer state $quarter GiB with ZeRO at dp 4, want a quarter of $whole GiB"

# under context parallelism the shards span dp x cp (dp_cp, Megatron's data_parallel_group_with_cp):
# at cp 2 x dp 2 a quarter of the replicated state, each parameter's master block 1/4 over dp_cp
whole=$(state --cp 2 --dp 2); quarter=$(state --cp 2 --dp 2 --use-distributed-optimizer)
awk -v w="$whole" -v q="$quarter" 'BEGIN {exit !(w > 0 && q > 0 && (q * 4 - w) ^ 2 < 1e-4)}' ||
  fail "optimizer state $quarter GiB with ZeRO at cp 2 x dp 2, want a quarter of $whole GiB"
blocks=$("$mcc" ir "$root/models/tiny-gpt2.json" --target cpu --cp 2 --dp 2 --use-distributed-optimizer --num-layers 1 \
  2>/dev/null | grep -c "^global @.*\.master_shard : f32\[[0-9]*\] {shard=\[dp_cp\]}.*layout=\[dp_cp:flat\]")
[ "$blocks" = 20 ] || fail "$blocks of tiny-gpt2's 20 master blocks span dp_cp at cp 2 x dp 2"

# dp 3 cannot split the [257,64] embedding (unpadded) evenly: refused, naming the flag and the parameter
msg=$("$mcc" ir "$root/models/tiny-gpt2.json" --target cpu --dp 3 --global-batch-size 12 --use-distributed-optimizer \
  --make-vocab-size-divisible-by 1 2>&1) &&
  fail "dp 3 with --use-distributed-optimizer was accepted"
grep -q -- "--use-distributed-optimizer.*@embedding.word.grad has 16448 elements" <<<"$msg" || fail "unclear refusal: $msg"

[ $status = 0 ] && echo "distributed optimizer ok"
exit $status

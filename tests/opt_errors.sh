#!/usr/bin/env bash
# opt_errors.sh MCC — `mcc opt` refuses what it cannot run with exit 2 and a message naming the
# file, flag or pass and the fix: a missing file, no --pass, an unknown pass, a --rank past the
# config's layout, an unknown --target, a pass the target cannot serve (the copy lane on the CPU),
# a text of another plan format version, a parse error (its line, with a caret under the column),
# an input the verifier rejects (blamed on the input, not the pass; a row bound that is no i32
# counts, an extra operand on an op that takes no row bound), an input's role twice or
# with a stage it does not carry; and one pass on a well-formed module prints it, an older text's
# inputs given their roles from their names.
set -uo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
status=0
expect() { # MESSAGE_REGEX ARGS...: exit 2, and stderr matches
  local want=$1 rc; shift
  "$mcc" opt "$@" >"$work/out" 2>"$work/err"; rc=$?
  if [ $rc -ne 2 ] || ! grep -Eq -- "$want" "$work/err"; then
    echo "FAIL: mcc opt $* (exit $rc): want /$want/, got: $(cat "$work/err")"; status=1
  fi
}
in=$root/tests/passes/shard_tp2.ir
expect "$work/none.ir: cannot read: No such file" "$work/none.ir" --pass shard
expect "--pass NAME is required" "$in"
expect "shard_tp2.ir: --pass shardd: no such pass \(mcc ir --list-passes" "$in" --pass shardd
expect "--rank 2: .*shard_tp2.ir's config has 2 ranks.*give 0..1" "$in" --pass shard --rank 2
expect "--rank expects an integer >= 0, got .x." "$in" --pass shard --rank x
expect "unknown flag '--after' for mcc opt" "$in" --pass shard --after recompute
expect "--target h300: no such target: choose h200\|h100\|h100-pcie\|cpu\|cuda \\(= h200\\)" "$in" --pass shard --target h300
expect "memory_plan_exchange.ir: pass memory_plan: config comm_copy_lane = 1, but the cpu target's copy engines do not \
serve collectives \(compile with --comm-lanes side or none" "$root/tests/passes/memory_plan_exchange.ir" --pass memory_plan \
  --target cpu
printf 'func f {kind=step, arena=0} {\n  %%0 = input @x : f32[4]\n  %%1 = gelux %%0 : f32[4]\n}\n' >"$work/parse.ir"
expect "parse.ir: line 3: unknown op \`gelux\`" "$work/parse.ir" --pass fusion
grep -q "^         \^ column 8$" "$work/err" || { echo "FAIL: no caret under column 8: $(cat "$work/err")"; status=1; }
printf 'func f {kind=step, arena=0} {\n  %%0 = input @x : f32[4]\n  %%1 = gelu %%0 : f32[8]\n}\n' >"$work/verify.ir"
expect "verify.ir: the input fails verification \(before pass fusion\)" "$work/verify.ir" --pass fusion
printf 'func f {kind=step, arena=0} {\n  %%0 = input @x : f32[4,2]\n  %%1 = input @n : f32[2]\n  %%2 = gelu %%0, %%1 : f32[4,2]\n}\n' >"$work/bound.ir"
expect "gelu's row bound %1 must be i32\\[S\\] \\(a dispatch's local counts\\), got f32\\[2\\]" "$work/bound.ir" --pass fusion
printf 'func f {kind=step, arena=0} {\n  %%0 = input @x : f32[4]\n  %%1 = input @n : i32[2]\n  %%2 = bias_add %%0, %%1, %%1 : f32[4]\n}\n' >"$work/bound2.ir"
expect "line 4: wrong operand count for bias_add: expected 2, got 3" "$work/bound2.ir" --pass fusion
# blockwise FP8 experts' rows quantized with their counts: transposed only (the wgrad's operands)
printf 'func f {kind=step, arena=0} {\n  %%0 = input @x : f32[300,256]\n  %%1 = input @n : i32[8]\n  %%2, %%3 = fp8_block_quantize %%0, %%1 {rows=1, cols=128, transpose=0, experts=0} : fp8e4m3[256,1408], f32[11,256]\n}\n' >"$work/bq.ir"
expect "fp8_block_quantize with counts quantizes the experts' rows x\\[R, C\\] \\(got f32\\[300,256\\]\\) transposed in 1x128 tiles: rows=1, transpose=1" "$work/bq.ir" --pass fusion
printf 'config {\n  plan_version = "999"\n}\n\nfunc f {kind=step, arena=0} {\n  %%0 = input @x : f32[4]\n}\n' >"$work/version.ir"
expect "version.ir: the plan's format is version 999 but this mcc reads version 1: recompile" "$work/version.ir" --pass fusion
printf 'func f {kind=step, arena=0} {\n  %%0 = input @x : f32[4]\n  %%1 = gelu %%0 : f32[4]\n}\n' >"$work/ok.ir"
{ "$mcc" opt "$work/ok.ir" --pass fusion >"$work/out" 2>"$work/err" && grep -q "gelu %0 : f32\[4\]" "$work/out"; } ||
  { echo "FAIL: mcc opt on a well-formed module: $(cat "$work/err")"; status=1; }
printf 'func f {kind=optimizer, arena=0} {\n  %%0 = input @a {role=lr} : f32[]\n  %%1 = input @b {role=lr} : f32[]\n}\n' >"$work/role2.ir"
expect "role2.ir: the input fails verification.*an earlier input has this one's role lr" "$work/role2.ir" --pass fusion
printf 'func f {kind=optimizer, arena=0} {\n  %%0 = input @lr {role=lr, stage=1} : f32[]\n}\n' >"$work/stage.ir"
expect "stage.ir: line 2: role lr takes no stage" "$work/stage.ir" --pass fusion
printf 'func f {kind=forward, arena=0} {\n  %%0 = input @stage1.act.2 : f32[4]\n  output @stage2.grad.0 %%0\n}\n' >"$work/old.ir"
{ "$mcc" opt "$work/old.ir" --pass fusion >"$work/out" 2>"$work/err" &&
  grep -q "input @stage1.act.2 {role=pp_act, stage=1, index=2} : f32\[4\]" "$work/out" &&
  grep -q "output @stage2.grad.0 %0 {role=pp_grad, stage=2, index=0}" "$work/out"; } ||
  { echo "FAIL: an older text's boundary roles from their names: $(cat "$work/out" "$work/err")"; status=1; }
[ $status = 0 ] && echo "mcc opt errors ok"
exit $status

#!/usr/bin/env bash
# layout_errors.sh MCC — a global's role and layout record are checked when a module is read:
# `mcc opt` refuses a companion without its parameter (of=), an owner that is not a parameter, a
# layout that disagrees with the type's {shard=[...]} or with the owner's, a flat block that is
# not last or does not make the whole, and malformed text, each with a message naming the global
# and the fix. A well-formed ZeRO block over a tp split reads, verifies and prints back unchanged.
set -uo pipefail
mcc=$1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
status=0
cfg='config {\n  tensor_model_parallel_size = "2"\n  data_parallel_size = "2"\n}\n'
p='global @w : f32[4,8] {shard=[tp,-]} {kind=param, init=zeros, placement=column, layout=[tp:dim0]}\n'
expect() { # MESSAGE GLOBALS: mcc opt exits 2 naming MESSAGE
  local want=$1 rc
  printf "$cfg$2" >"$work/in.ir"
  "$mcc" opt "$work/in.ir" --pass shard >/dev/null 2>"$work/err"; rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$want" "$work/err"; then
    echo "FAIL: $2 (exit $rc): want '$want', got: $(cat "$work/err")"; status=1
  fi
}
expect "global @w.grad (kind=grad) needs of=@<its parameter>" \
  "$p"'global @w.grad : f32[4,8] {shard=[tp,-]} {kind=grad, init=zeros, layout=[tp:dim0]}\n'
expect "global @w.adam_m is of=@w.grad, which is a grad, not a parameter" \
  "$p"'global @w.grad : f32[4,8] {shard=[tp,-]} {kind=grad, init=zeros, of=@w, layout=[tp:dim0]}\nglobal @w.adam_m : f32[4,8] {shard=[tp,-]} {kind=adam_m, init=zeros, of=@w.grad, layout=[tp:dim0]}\n'
expect "global @w is a parameter but names an owner" \
  'global @v : f32[4] {kind=param, init=zeros}\nglobal @w : f32[4] {kind=param, init=zeros, of=@v}\n'
expect "global @w has layout=[tp:dim1] but its type splits dimension 0 over tp" \
  'global @w : f32[4,8] {shard=[tp,-]} {kind=param, init=zeros, layout=[tp:dim1]}\n'
expect "global @w has layout=[] but its type splits dimension 0 over tp" \
  'global @w : f32[4,8] {shard=[tp,-]} {kind=param, init=zeros}\n'
expect "global @w has layout=[tp:dim2], splitting dimension 2 of a 2-dimensional tensor" \
  'global @w : f32[4,8] {kind=param, init=zeros, layout=[tp:dim2]}\n'
expect "global @w.grad has layout=[] but its parameter @w has layout=[tp:dim0]: a companion's layout begins with its parameter's" \
  "$p"'global @w.grad : f32[8,8] {kind=grad, init=zeros, of=@w}\n'
expect "global @w.grad_shard has layout=[dp:flat, tp:dim0]: a flat split is the last" \
  "$p"'global @w.grad_shard : f32[8] {shard=[dp]} {kind=grad_shard, init=zeros, of=@w, layout=[dp:flat, tp:dim0]}\n'
expect "global @w.grad_shard has layout=[tp:dim0, dp:flat]: dp's 2 ranks hold 8 elements of @w's 32, which do not make it whole" \
  "$p"'global @w.grad_shard : f32[8] {shard=[dp]} {kind=grad_shard, init=zeros, of=@w, layout=[tp:dim0, dp:flat]}\n'
expect "global @w.grad_shard has layout=[tp:dim0, dp:flat] but is not a 1-D block {shard=[dp]}" \
  "$p"'global @w.grad_shard : f32[16] {kind=grad_shard, init=zeros, of=@w, layout=[tp:dim0, dp:flat]}\n'
expect "global @w.grad has a placement but is not a parameter" \
  "$p"'global @w.grad : f32[4,8] {shard=[tp,-]} {kind=grad, init=zeros, of=@w, placement=column, layout=[tp:dim0]}\n'
expect "global @b is placement=row, which splits dimension 1, but has 1" \
  'global @b : f32[4] {kind=param, init=zeros, placement=row}\n'
expect "global @w.grad has layer=1 but its parameter @w has -1" \
  "$p"'global @w.grad : f32[4,8] {shard=[tp,-]} {kind=grad, init=zeros, of=@w, layer=1, layout=[tp:dim0]}\n'
expect "expected dim0..dim3 (split along that dimension), balanced0..balanced3 (context parallelism's 2 n chunks) or flat" \
  'global @w : f32[4,8] {kind=param, init=zeros, layout=[tp:rows]}\n'
expect "the layout splits over tp twice" \
  'global @w : f32[4,8] {kind=param, init=zeros, layout=[tp:dim0, tp:dim1]}\n'
expect "of= names no global declared before it" \
  'global @w.grad : f32[4] {kind=grad, init=zeros, of=@w}\nglobal @w : f32[4] {kind=param, init=zeros}\n'
expect "layer= needs a layer number >= 0" \
  'global @w : f32[4] {kind=param, init=zeros, layer=-1}\n'
expect "expected a single value, not a list" \
  'global @w : f32[4] {kind=param, init=zeros, placement=[column]}\n'
# a ZeRO block of a tp-split parameter: read, verified and printed back as written
ok="$p"'global @w.grad_shard : f32[16] {shard=[dp]} {kind=grad_shard, init=zeros, of=@w, layer=2, layout=[tp:dim0, dp:flat]}\n'
ok=${ok//placement=column, layout/placement=column, layer=2, layout}
printf "$cfg$ok" >"$work/ok.ir"
if ! "$mcc" opt "$work/ok.ir" --pass data_parallel >"$work/out" 2>"$work/err" ||
   [ "$(grep '^global' "$work/out")" != "$(printf "$ok" | sed '/^$/d')" ]; then
  echo "FAIL: a well-formed layout does not read back as written: $(cat "$work/err")"; diff <(grep '^global' "$work/out") <(printf "$ok"); status=1
fi
[ $status = 0 ] && echo "layout errors ok"
exit $status

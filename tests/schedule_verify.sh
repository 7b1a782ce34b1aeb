#!/usr/bin/env bash
# schedule_verify.sh MCC — the verifier's checks of function kinds and the schedule programs, on
# small modules through `mcc opt`: a well-formed module (calls, and a pipeline send and recv)
# passes; each broken one exits 2 with the message that names the program, the step as printed
# and what is wrong. Each case changes the good module in one place.
set -uo pipefail
mcc=$1
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
status=0

# module TRAIN_STEPS [EXTRA_FUNCS [ACCUM]]: two micro-batches a step unless ACCUM says otherwise.
module() {
  cat <<EOF
config {
  accum_steps = "${3:-2}"
}

func step {kind=step, arena=0} {
  %0 = input @tokens : i32[4]
  output @hidden %0 {role=pp_act, stage=1, index=0}
}

func ev {kind=eval, arena=0} {
}

func red {kind=reduce, arena=0} {
}

func opt {kind=optimizer, arena=0} {
}

func norm {kind=grad_norm, arena=0} {
}
${2:-}
schedule train {
$1
}

schedule eval {
  call ev mb=0
  call ev mb=1
}
EOF
}
good='  call step mb=0
  call step mb=1
  call red
  call opt'

# expect NAME MESSAGE TRAIN_STEPS [EXTRA_FUNCS [ACCUM]]: mcc opt refuses the module with MESSAGE.
expect() {
  local name=$1 want=$2 rc; shift 2
  module "$@" >"$work/$name.ir"
  "$mcc" opt "$work/$name.ir" --pass fusion >"$work/out" 2>"$work/err"; rc=$?
  if [ $rc -ne 2 ] || ! grep -Fq -- "$want" "$work/err"; then
    echo "FAIL: $name (exit $rc): want '$want', got: $(cat "$work/err")"; status=1
  fi
}

module "$good" >"$work/good.ir"
"$mcc" opt "$work/good.ir" --pass fusion >"$work/out" 2>"$work/err" && grep -q "^  call red$" "$work/out" ||
  { echo "FAIL: the good module: $(cat "$work/err")"; status=1; }
module '  recv step @tokens mb=0 from=prev
  call step mb=0
  send step @hidden mb=0 to=next
  call step mb=1
  call red
  call opt' >"$work/p2p.ir"
"$mcc" opt "$work/p2p.ir" --pass fusion >"$work/out" 2>"$work/err" && grep -q "^  send step @hidden mb=0 to=next$" "$work/out" ||
  { echo "FAIL: a module with send and recv: $(cat "$work/err")"; status=1; }

expect out_of_range "schedule train, step 1 (\`call step mb=2\`): micro-batch 2 is out of range: accum_steps is 2 (micro-batches 0..1)" \
  "${good/mb=1/mb=2}"
expect once "schedule train: calls step (kind step) 1 times: it runs once on each micro-batch (accum_steps of them)" \
  '  call step mb=0
  call red
  call opt'
expect twice "schedule train: calls step on no micro-batch 1: it runs once on each of 0..1" "${good/mb=1/mb=0}"
expect no_mb "schedule train, step 1 (\`call step\`): step (kind step) runs on a micro-batch: give mb=0..1" "${good/ mb=1/}"
expect opt_mb "schedule train, step 3 (\`call opt mb=1\`): opt (kind optimizer) runs once a program, not on a micro-batch: drop mb=" \
  "${good/call opt/call opt mb=1}"
expect opt_early "schedule train, step 1 (\`call opt\`): comes before the micro-batch step 3: a once-a-program call follows them all" \
  '  call step mb=0
  call opt
  call red
  call step mb=1'
expect reduce_late "schedule train, step 3 (\`call red\`): comes after step 2: kind reduce runs before kind optimizer" \
  '  call step mb=0
  call step mb=1
  call opt
  call red'
expect no_opt "schedule train: calls opt (kind optimizer) 0 times: it runs once a program" "${good/  call opt/}"
expect eval_in_train "schedule train, step 4 (\`call ev mb=0\`): ev (kind eval) runs in schedule eval, not train" \
  "$good
  call ev mb=0"
expect norm_in_train "schedule train, step 4 (\`call norm\`): norm (kind grad_norm) is run by train_rank itself (at start-up, or for --skip-nan-steps), not by a schedule" \
  "$good
  call norm"
expect unknown_func "line 27: schedule train names unknown function \`nothing\` (functions come before the schedule)" \
  "$good
  call nothing"
expect send_what "schedule train, step 1 (\`send step @loss mb=0 to=next\`): step has no \`output @loss\` with a role to send" \
  '  call step mb=0
  send step @loss mb=0 to=next
  call step mb=1
  call red
  call opt'
expect send_early "schedule train, step 0 (\`send step @hidden mb=0 to=next\`): comes before the call of step on micro-batch 0 (step 1)" \
  "  send step @hidden mb=0 to=next
$good"
expect recv_late "schedule train, step 2 (\`recv step @tokens mb=1 from=prev\`): comes after the call of step on micro-batch 1 (step 1)" \
  "${good/  call red/  recv step @tokens mb=1 from=prev
  call red}"
expect two_steps "functions step and step2 are both of kind step: a module has at most one" "$good" \
  'func step2 {kind=step, arena=0} {
}'
expect no_micro_batches "schedule train: accum_steps is 0: the programs run on micro-batches 0..accum_steps-1, so it must be >= 1" \
  "$good" "" 0

# A stash of span fw (passes/pipeline.c's zero-bubble cut: W reads it): a call names its buffer by
# slot_fw=, in range; slot= is the fb span's, which the function does not touch; span= is a stash's.
stash_module() {
  cat <<EOF
config {
  accum_steps = "2"
}

global @s : f32[4] {$1}

func step {kind=step, arena=0} {
  %0 = input @tokens : i32[4]
  %1 = global @s : f32[4]
  output @hidden %0 {role=pp_act, stage=1, index=0}
}

func red {kind=reduce, arena=0} {
}

func opt {kind=optimizer, arena=0} {
}

schedule train {
  call step mb=0 slot_fw=0
  call step mb=1 $2
  call red
  call opt
}
EOF
}
# expect_stash NAME MESSAGE GLOBAL_ATTRS SLOT: mcc opt refuses the module with MESSAGE ("": accepts it)
expect_stash() {
  local name=$1 want=$2 rc; shift 2
  stash_module "$@" >"$work/$name.ir"
  "$mcc" opt "$work/$name.ir" --pass fusion >"$work/out" 2>"$work/err"; rc=$?
  if [ -z "$want" ]; then
    { [ $rc -eq 0 ] && grep -q "call step mb=1 $2\$" "$work/out"; } || { echo "FAIL: $name (exit $rc): $(cat "$work/err")"; status=1; }
  elif [ $rc -ne 2 ] || ! grep -Fq -- "$want" "$work/err"; then
    echo "FAIL: $name (exit $rc): want '$want', got: $(cat "$work/err")"; status=1
  fi
}
expect_stash stash_fw "" "kind=stash, init=zeros, slots=2, span=fw" "slot_fw=1"
expect_stash stash_fb_slot "step 1 (\`call step mb=1 slot=1\`): slot= names a stash buffer, but the function touches no stash global of that span" \
  "kind=stash, init=zeros, slots=2, span=fw" "slot=1"
expect_stash stash_no_slot "step 1 (\`call step mb=1\`): step reads or writes stash globals of span fw: give their buffer, slot_fw=0..1" \
  "kind=stash, init=zeros, slots=2, span=fw" ""
expect_stash stash_range "slot_fw 2 is out of range: step's stash globals of span fw have 2 buffers" \
  "kind=stash, init=zeros, slots=2, span=fw" "slot_fw=2"
expect_stash span_of_param "global @s: span= goes with kind=stash, and only with it" "kind=param, init=zeros, span=fw" "slot_fw=1"

[ $status = 0 ] && echo "schedule verifier errors ok"
exit $status

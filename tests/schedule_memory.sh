#!/usr/bin/env bash
# schedule_memory.sh MCC — `mcc schedule` reports the plan's own memory per pipeline rank: for
# 1f1b and zb-h1 on tiny-llama at PP=2 its "memory per rank of pipeline stage" blocks equal mcc
# compile's, byte for byte (one planning, frontend/plan.c, not an estimate of its own).
set -uo pipefail
mcc=$1
source "$(dirname "$0")/cli_check.sh"
blocks() { awk '/^memory per rank of pipeline stage/ {on = 1} on && /^  / {print; next} on && !/^memory per rank of/ {on = 0} on {print}' "$1"; }
for sched in 1f1b zb-h1; do
  args=("$root/models/tiny-llama.json" --pp 2 --global-batch-size 16 --pipeline-schedule "$sched" --target cpu)
  "$mcc" schedule "${args[@]}" >"$work/schedule" 2>&1 || fail "mcc schedule $sched exited $?: $(tail -3 "$work/schedule")"
  "$mcc" compile "${args[@]}" -o "$work/train_rank" >"$work/compile" 2>&1 || fail "mcc compile $sched exited $?: $(tail -3 "$work/compile")"
  blocks "$work/schedule" >"$work/a"
  blocks "$work/compile" >"$work/b"
  [ "$(grep -c 'memory per rank of pipeline stage' "$work/a")" -eq 2 ] || fail "$sched: mcc schedule prints no plan memory for both stages"
  diff "$work/a" "$work/b" >"$work/diff" || fail "$sched: mcc schedule's memory differs from mcc compile's: $(cat "$work/diff")"
done
[ $fails -eq 0 ] && echo "schedule_memory: ok"
exit $((fails > 0))

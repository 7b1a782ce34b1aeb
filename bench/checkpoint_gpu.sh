#!/usr/bin/env bash
# checkpoint_gpu.sh [CONFIG...] — on the GPU machine, for each bench config of devrun/
# (bench/bundle.sh; default llama-1B): 20 steps saving at 10 (--save-interval 10) against a run
# resumed from that save (--load, steps 11-20); the losses of steps 11-20 must be equal to the
# last bit (the metrics files print %.9g). Prints each save's blocking time and write rate
# beside the step time: with --async-save (the GPU default) the blocking time is the copy to host
# memory, and the write overlaps steps 11-20 (their times show what it costs them); CKPT_SYNC=1
# also runs the saving run with --no-async-save, for the blocking time of a synchronous save.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
status=0
for c in "${@:-llama-1B}"; do
  bin=devrun/bin/bench-$c ck=/tmp/ckpt-$c
  [ -x "$bin" ] || { echo "$c: not compiled"; continue; }
  rm -rf "$ck" "$O/ck-$c-"*
  common=(--data-path devrun/data/brown_text_document --split 100,0,0 --train-iters 20 --log-interval 1 --eval-iters 0)
  timeout 200 "$bin" "${common[@]}" --save "$ck" --save-interval 10 --metrics-file "$O/ck-$c-full.jsonl" \
    > "$O/ck-$c-full.log" 2>&1; echo "$c full run exit $?"
  grep -h "saved checkpoint" "$O/ck-$c-full.log"
  grep -hE "iteration +1[1-5]/" "$O/ck-$c-full.log" | grep -o "elapsed time per iteration (ms): [0-9.]*" | tr '\n' ' '; echo
  if [ "${CKPT_SYNC:-0}" != 0 ]; then
    timeout 200 "$bin" "${common[@]}" --train-iters 10 --save "$ck-sync" --no-async-save > "$O/ck-$c-sync.log" 2>&1
    echo "$c --no-async-save exit $?"; grep -h "saved checkpoint" "$O/ck-$c-sync.log"; rm -rf "$ck-sync"
  fi
  grep -h "iteration *10/" "$O/ck-$c-full.log" | grep -o "elapsed time per iteration (ms): [0-9.]*"
  rm -rf "$ck/iter_0000020"; echo 10 > "$ck/latest_checkpointed_iteration.txt" # resume from step 10's save
  timeout 200 "$bin" "${common[@]}" --load "$ck" --metrics-file "$O/ck-$c-resumed.jsonl" > "$O/ck-$c-resumed.log" 2>&1
  echo "$c resumed run exit $?"
  python3 - "$O/ck-$c-full.jsonl" "$O/ck-$c-resumed.jsonl" <<'PY' || status=1
import json, sys
def losses(p):
    return {r["iteration"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r and r.get("iteration", 0) > 10}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
same = sorted(a) == sorted(b) == list(range(11, 21)) and all(a[i] == b[i] for i in a)
print(f"steps 11-20 resumed against uninterrupted: {'bit for bit' if same else 'DIFFERENT'}", a.get(11), b.get(11), a.get(20), b.get(20))
sys.exit(0 if same else 1)
PY
  du -sh "$ck"; rm -rf "$ck" # the device's disk holds a few of them only
done
exit $status

#!/usr/bin/env bash
# front_door_gpu.sh — issue 15's run-time items on a GPU, from devrun/ (bench/bundle.sh): a CUDA
# train_rank stopped by SIGTERM finishes its iteration and says so (exit 143, the metrics file's
# last record whole), --tensorboard-dir's event file read back by tests/tensorboard_read.py, and
# the NVTX ranges per iteration, micro-batch and plan function (when nsys is on the machine).
set -uo pipefail
O=${OUT:-/tmp}
bin=devrun/bin/tiny-gpt2-cuda
data=(--data-path devrun/data/brown_text_document --split 100,0,0 --eval-iters 0)
echo "=== SIGTERM stops a CUDA run after the iteration in flight"
rm -f "$O/stop.jsonl"
$bin "${data[@]}" --train-iters 1000000 --log-interval 50 --metrics-file "$O/stop.jsonl" > "$O/stop.log" 2> "$O/stop.err" &
pid=$!; sleep 8; kill -TERM $pid; wait $pid; rc=$?
echo "exit $rc (want 143)"; grep "stopped by" "$O/stop.err"
python3 -c "
import json, sys
recs = [json.loads(l) for l in open('$O/stop.jsonl')]
print(f'{len(recs)} records, all whole; last iteration {recs[-1][\"iteration\"]}')" || echo "metrics file: FAIL"
echo "=== --tensorboard-dir on the GPU"
rm -rf "$O/tb"
$bin "${data[@]}" --train-iters 20 --log-interval 5 --tensorboard-dir "$O/tb" > /dev/null 2>&1; echo "exit $?"
python3 tests/tensorboard_read.py "$O/tb" | awk -F'\t' '{n[$1]++} END {for (t in n) printf "%s: %d scalars\n", t, n[t]}' | sort
echo "=== NVTX ranges"
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$nsys" ]; then
  "$nsys" profile -o "$O/nvtx" --trace=cuda,nvtx --force-overwrite true $bin "${data[@]}" --train-iters 4 > /dev/null 2>&1
  "$nsys" stats --report nvtx_sum "$O/nvtx.nsys-rep" 2>/dev/null | head -20
else
  echo "no nsys on this machine: the ranges are not checked here"
fi

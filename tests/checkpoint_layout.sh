#!/usr/bin/env bash
# checkpoint_layout.sh MCC MODEL — a checkpoint loads under any layout with no conversion: saved at
# iteration 5 by TP=2 x DP=2 with the distributed optimizer (ZeRO-1: master and Adam shards),
# loaded by TP=1 x DP=4 without it, by one rank, and by TP=2 x DP=1 (4 ranks' files into 2); each
# resumed run's losses at iterations 6-10 equal the uninterrupted TP=2 x DP=2 run's within 1e-6
# (fp32 CPU ranks: the layouts' sums differ in order only). A rank's files missing from the 4, or
# a manifest that names 3 ranks, is an error naming what is missing, nothing loaded. A rank reads
# only the saved parts it needs.
set -euo pipefail
mcc=$1; model=$2
root=$(cd "$(dirname "$0")/.." && pwd)
common=(--target cpu --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16)
source "$root/tests/checkpoint_check.sh"
compile zero22 --tp 2 --dp 2 --use-distributed-optimizer
compile dp4 --dp 4
compile single
compile tp2 --tp 2
flags=(--data-path "$work/text_text_document" --train-iters 10 --eval-iters 0)
save zero22 4 "tp2 x dp2 ZeRO"
check dp4 4 1e-6
check single 1 1e-6
check tp2 2 1e-6
# a rank reads only the saved parts that overlap its own, each verified by its own checksum: under
# the saving layout a byte flipped in rank 3's last tensor is seen by the ranks that need that part
# (rank 3, and its tp peer for a part replicated over tp), not by every rank (as when every rank
# read every file), and nothing trains
rm -rf "$work/bad"; cp -r "$work/ck" "$work/bad"; f="$work/bad/iter_0000005/rank_00003.safetensors"
printf '\x55' | dd of="$f" bs=1 seek=$(($(stat -c %s "$f") - 3)) conv=notrunc status=none
set +e; mpirun -np 4 "$work/zero22" "${flags[@]}" --load "$work/bad" >"$work/own.log" 2>&1; rc=$?; set -e
seen=$(grep -c "rank_00003.safetensors: checksum mismatch in tensor" "$work/own.log" || true)
[ "$rc" != 0 ] && [ "$seen" -ge 1 ] && [ "$seen" -lt 4 ] && ! grep -q "iteration  *6/" "$work/own.log" ||
  { echo "FAIL: a flipped byte of rank 3's file: exit status $rc, seen by $seen of 4 ranks (want 1 or 2)"; cat "$work/own.log"; exit 1; }
echo "rank 3's flipped byte seen by $seen of the 4 ranks loading under the saving layout"
bad() { # NAME PATTERN: the one-rank load of the changed copy in $work/bad fails with PATTERN
  set +e; "$work/single" "${flags[@]}" --load "$work/bad" >"$work/$1.log" 2>&1; local rc=$?; set -e
  [ "$rc" = 1 ] && grep -qE -- "$2" "$work/$1.log" && ! grep -q "iteration  *6/" "$work/$1.log" ||
    { echo "FAIL: $1: exit status $rc, expected 1 and '$2'"; cat "$work/$1.log"; exit 1; }
  grep -m1 error "$work/$1.log"
}
rm -rf "$work/bad"; cp -r "$work/ck" "$work/bad"; rm "$work/bad/iter_0000005/rank_00003.safetensors"
bad missing-rank "rank_00003.safetensors: missing: the checkpoint was saved by 4 ranks and rank 3's file is gone"
rm -rf "$work/bad"; cp -r "$work/ck" "$work/bad"; sed -i 's/"ranks": 4/"ranks": 3/' "$work/bad/iter_0000005/manifest.json"
bad missing-part "tensor [a-z.]+: no rank file holds its element [0-9]+: a part is missing"

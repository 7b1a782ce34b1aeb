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
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
common=(--target cpu --vocab-size 260 --make-vocab-size-divisible-by 1 --global-batch-size 16)
compile() { local out=$1; shift; "$mcc" compile "$root/models/$model.json" "${common[@]}" "$@" -o "$work/$out" \
              2>"$work/$out.c.log" || { cat "$work/$out.c.log"; exit 1; }; }
compile zero22 --tp 2 --dp 2 --use-distributed-optimizer
compile dp4 --dp 4
compile single
compile tp2 --tp 2
flags=(--data-path "$work/text_text_document" --train-iters 10 --eval-iters 0)
mpirun -np 4 "$work/zero22" "${flags[@]}" --dump-dir "$work/ref" >"$work/ref.log" 2>&1 || { cat "$work/ref.log"; exit 1; }
mpirun -np 4 "$work/zero22" "${flags[@]}" --save "$work/ck" --exit-interval 5 >"$work/save.log" 2>&1 ||
  { cat "$work/save.log"; exit 1; }
check() { # NAME NP: resume the checkpoint under layout NAME on NP ranks
  local name=$1 np=$2 launch=()
  [ "$np" = 1 ] || launch=(mpirun -np "$np" --oversubscribe)
  "${launch[@]}" "$work/$name" "${flags[@]}" --load "$work/ck" --dump-dir "$work/$name.out" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; exit 1; }
  grep -q "loaded checkpoint .*saved by 4 ranks.* at iteration 5 " "$work/$name.log" ||
    { echo "FAIL: $name loaded nothing"; cat "$work/$name.log"; exit 1; }
  /usr/bin/python3 - "$work/ref/steps.txt" "$work/$name.out/steps.txt" "$name" <<'PY'
import sys
ref = {int(l.split()[0]): float(l.split()[1]) for l in open(sys.argv[1])}
got = {int(l.split()[0]): float(l.split()[1]) for l in open(sys.argv[2])}
assert sorted(got) == list(range(6, 11)), f"{sys.argv[3]}: resumed steps {sorted(got)}, expected 6..10"
for it, v in sorted(got.items()):
    err = abs(v - ref[it]) / abs(ref[it])
    if err > 1e-6:
        sys.exit(f"FAIL: {sys.argv[3]}: loss at iteration {it} is {v!r}, the uninterrupted tp2 x dp2 run's "
                 f"{ref[it]!r} (relative error {err:.2e} > 1e-6)")
print(f"{sys.argv[3]}: losses 6-10 after loading the tp2 x dp2 ZeRO checkpoint equal the uninterrupted run's")
PY
}
check dp4 4
check single 1
check tp2 2
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

#!/usr/bin/env bash
# train_rank_io.sh MCC [MPIRUN] — what train_rank writes and how it stops, on the tiny GPT (CPU):
# (1) numeric flags are checked whole and named (--eval-iters '', --train-iters abc, --log-interval
#     0), --flag=value and torchrun's --nproc_per_node spellings work, --version is mcc's;
# (2) the log line carries Megatron's field names in Megatron's order, validation too;
# (3) the metrics file is appended to, a record at a time: SIGKILL leaves only whole records and
#     `mcc plot` draws them (a cut last line is skipped with a warning, a bad middle line is an
#     error); SIGTERM/SIGINT stop after the iteration in flight with a message and 128 + signal,
#     its record the last one, also through the --nproc-per-node launcher;
# (4) a full disk or a file size limit stops the run naming the file (metrics and --dump-dir);
# (5) with MPIRUN, 2 data-parallel ranks stop at the same iteration when only rank 1 is signalled.
set -euo pipefail
mcc=$1; mpirun=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix "$work/text" --append-eod >/dev/null 2>&1
"$mcc" compile "$root/models/tiny-gpt2.json" --target cpu -o "$work/tr" 2>/dev/null
data=(--data-path "$work/text_text_document")
run() { "$work/tr" "${data[@]}" "$@"; }

# (1) an error naming the flag, status 2, no signal
refused() { # WANT FLAGS...
  local want=$1 rc=0; shift
  run "$@" > /dev/null 2> "$work/err" || rc=$?
  [ "$rc" = 2 ] || fail "$* exited $rc, want 2: $(cat "$work/err")"
  grep -qF -- "$want" "$work/err" || fail "$*: want '$want' in: $(cat "$work/err")"
}
refused "--eval-iters expects an integer in 0..1000000000, got ''" --eval-iters ''
refused "--train-iters expects an integer in 1..1000000000, got 'abc'" --train-iters abc
refused "--log-interval 0 is out of range" --log-interval 0
refused "--log-interval 0 is out of range" --log-interval=0
refused "--nproc_per_node expects an integer in 1..1024, got 'x'" --nproc_per_node=x
run --train-iters=3 --eval-iters=0 > "$work/eq.log" || fail "--train-iters=3"
[ "$(grep -c ' iteration .*/ *3 |' "$work/eq.log")" = 3 ] || fail "--train-iters=3 ran: $(cat "$work/eq.log")"
[ "$("$work/tr" --version)" = "train_rank ($("$mcc" --version))" ] || fail "--version: $("$work/tr" --version 2>&1)"
for launch in "--nproc-per-node=1" "--nproc_per_node 1" "--nproc_per_node=1"; do
  # shellcheck disable=SC2086
  run $launch --train-iters 2 --eval-iters 0 > "$work/launch.log" 2>&1 || fail "$launch: $(cat "$work/launch.log")"
  grep -q ' iteration        2/' "$work/launch.log" || fail "$launch: $(cat "$work/launch.log")"
done

# (2) Megatron's training_log fields, names and order; ours after them
run --train-iters 3 --eval-interval 3 --eval-iters 1 --split 60,40,0 > "$work/meg.log"
/usr/bin/python3 - "$work/meg.log" <<'PY' || fail "Megatron's log fields: $(grep iteration "$work/meg.log")"
import re, sys
t = open(sys.argv[1]).read()
fields = [r"iteration +\d+/ +\d+", r"consumed samples: +\d+", r"elapsed time per iteration \(ms\): [\d.]+",
          r"throughput per GPU \(TFLOP/s/GPU\): [\d.]+", r"learning rate: \d\.\d{6}E[+-]\d\d",
          r"global batch size: +\d+", r"lm loss: \d\.\d{6}E[+-]\d\d", r"loss scale: 1\.0", r"grad norm: [\d.]+",
          r"number of skipped iterations: +0", r"number of nan iterations: +0", r"tokens/s/GPU: [\d.]+", r"MFU: -",
          r"memory \(GiB\): [\d.]+"]
line = r"^ \[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] " + " \| ".join(fields) + r" \|$"
assert len(re.findall(line, t, re.M)) == 3, "three training lines"
assert "iteration        3/       3 | consumed samples:           24 |" in t
v = r"^ validation loss at iteration 3 \| lm loss value: \d\.\d{6}E[+-]\d\d \| lm loss PPL: \d\.\d{6}E[+-]\d\d \|"
assert re.search(v, t, re.M), "validation line"
PY

# (3) the metrics file: records appended whole, however the run ends
lines() { [ -f "$1" ] && wc -l < "$1" || echo 0; }
wait_records() { # FILE N: until FILE holds N records (30 s at most)
  for _ in $(seq 300); do [ "$(lines "$1")" -ge "$2" ] && return; sleep 0.1; done
  fail "$1 has $(lines "$1") records after 30 s"
}
check_jsonl() { # FILE: every line a whole JSON record, training iterations 1, 2, ... in order; prints the last
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
train = [r["iteration"] for r in recs if "loss" in r]
assert train == list(range(1, len(train) + 1)), train
print(train[-1])
PY
}
run --train-iters 2 --eval-iters 0 --metrics-file "$work/append.jsonl" > /dev/null
run --train-iters 2 --eval-iters 0 --metrics-file "$work/append.jsonl" > /dev/null
[ "$(lines "$work/append.jsonl")" = 4 ] || fail "a second run did not append: $(cat "$work/append.jsonl")"

"$work/tr" "${data[@]}" --train-iters 20000 --eval-iters 0 --metrics-file "$work/kill.jsonl" > /dev/null & pid=$!
wait_records "$work/kill.jsonl" 3
kill -KILL $pid; wait $pid || true
check_jsonl "$work/kill.jsonl" > /dev/null || fail "SIGKILL left a broken metrics file: $(tail -c 300 "$work/kill.jsonl")"
"$mcc" plot "$work/kill.jsonl" -o "$work/kill.svg" 2> "$work/plot.err" || fail "plot of a killed run: $(cat "$work/plot.err")"
grep -q '<polyline' "$work/kill.svg" || fail "plot of a killed run draws no curve"
# a record cut short (as a kernel's cut or an older writer leaves it) is skipped, once, named
n=$(lines "$work/kill.jsonl")
head -n 1 "$work/kill.jsonl" | head -c 40 >> "$work/kill.jsonl"
"$mcc" plot "$work/kill.jsonl" -o "$work/cut.svg" 2> "$work/plot.err" || fail "plot of a cut file: $(cat "$work/plot.err")"
grep -q "warning: .*kill.jsonl:$((n + 1)): the last line is cut" "$work/plot.err" || fail "cut line: $(cat "$work/plot.err")"
[ "$(grep -c warning "$work/plot.err")" = 1 ] || fail "want one warning: $(cat "$work/plot.err")"
{ head -n 1 "$work/kill.jsonl"; echo '{"iteration": 2, "loss": '; tail -n +2 "$work/kill.jsonl"; } > "$work/bad.jsonl"
! "$mcc" plot "$work/bad.jsonl" -o "$work/bad.svg" 2> "$work/plot.err" || fail "plot took a bad middle line"
grep -q "bad.jsonl:2: not a metrics record" "$work/plot.err" || fail "bad line: $(cat "$work/plot.err")"

stopped() { # SIGNAL STATUS FLAGS...: signalled after 3 records, the run ends after the iteration in flight
  local sig=$1 want=$2 rc=0; shift 2
  rm -f "$work/stop.jsonl"
  "$work/tr" "${data[@]}" "$@" --train-iters 20000 --eval-iters 0 --metrics-file "$work/stop.jsonl" > "$work/stop.log" \
    2> "$work/stop.err" &
  local pid=$!
  wait_records "$work/stop.jsonl" 3
  kill -"$sig" $pid
  wait $pid || rc=$?
  [ "$rc" = "$want" ] || fail "after SIG$sig ($*): status $rc, want $want: $(cat "$work/stop.err")"
  local last
  last=$(check_jsonl "$work/stop.jsonl") || fail "SIG$sig: metrics file $(tail -c 300 "$work/stop.jsonl")"
  grep -q "^train_rank: stopped by SIG$sig after iteration $last of 20000; the metrics file .*stop.jsonl has every record up to it$" \
    "$work/stop.err" || fail "SIG$sig: the last record is iteration $last; stderr: $(cat "$work/stop.err")"
  ! grep -q "exited with status\|killed by signal" "$work/stop.err" || fail "the launcher reported a failure: $(cat "$work/stop.err")"
  grep -q " iteration  *$last/" "$work/stop.log" || fail "SIG$sig: no log line for iteration $last"
}
stopped TERM 143
stopped INT 130 --nproc-per-node 1 # forwarded by the launcher
"$mcc" plot "$work/stop.jsonl" -o "$work/stop.svg" 2> /dev/null || fail "plot of a stopped run"

# (4) write errors stop the run, naming the file and the reason
rc=0; run --train-iters 3 --eval-iters 0 --metrics-file /dev/full > /dev/null 2> "$work/err" || rc=$?
[ "$rc" = 1 ] && grep -q -- "--metrics-file /dev/full: cannot append the record of iteration 1: No space left" "$work/err" ||
  fail "/dev/full: status $rc: $(cat "$work/err")"
# a file size limit (1 KiB: 3 records) with SIGXFSZ ignored: write(2) fails with EFBIG
rc=0; (ulimit -f 1; trap '' XFSZ; run --train-iters 10 --eval-iters 0 --metrics-file "$work/big.jsonl" > /dev/null 2> "$work/err") || rc=$?
[ "$rc" = 1 ] && grep -q -- "--metrics-file .*big.jsonl: cannot append the record of iteration [0-9]*: File too large" "$work/err" ||
  fail "file size limit: status $rc: $(cat "$work/err")"
check_jsonl "$work/big.jsonl" > /dev/null || fail "the partial record was not cut back: $(tail -c 200 "$work/big.jsonl")"
rc=0; (ulimit -f 64; trap '' XFSZ; run --train-iters 2 --eval-iters 0 --dump-dir "$work/dump" > /dev/null 2> "$work/err") || rc=$?
[ "$rc" = 1 ] && grep -q -- "--dump-dir: cannot write .*dump/params_init.mcct: File too large" "$work/err" ||
  fail "--dump-dir over the size limit: status $rc: $(cat "$work/err")"

# (5) 2 ranks: SIGTERM to rank 1 alone; rank 0 learns it at the step's end and both stop there
if [ -n "$mpirun" ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
  "$mcc" compile "$root/models/tiny-gpt2.json" --target cpu --dp 2 -o "$work/dp2" 2>/dev/null
  timeout 120 "$mpirun" --oversubscribe -np 2 "$work/dp2" "${data[@]}" --train-iters 20000 --eval-iters 0 \
    --metrics-file "$work/dp2.jsonl" > /dev/null 2> "$work/dp2.err" & pid=$!
  wait_records "$work/dp2.jsonl" 3
  rank1=
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/exe" 2>/dev/null)" = "$work/dp2" ] && tr '\0' '\n' < "$p/environ" 2>/dev/null |
      grep -qx OMPI_COMM_WORLD_RANK=1 && rank1=${p#/proc/}
  done
  [ -n "$rank1" ] || fail "rank 1 not found"
  kill -TERM "$rank1"
  rc=0; wait $pid || rc=$?
  [ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "2 ranks after SIGTERM to rank 1: status $rc: $(cat "$work/dp2.err")"
  last=$(check_jsonl "$work/dp2.jsonl") || fail "2 ranks: metrics file"
  grep -q "^train_rank: stopped by SIGTERM after iteration $last of 20000" "$work/dp2.err" ||
    fail "rank 0 did not stop with rank 1 (last record $last): $(cat "$work/dp2.err")"
fi
echo "train_rank io ok"

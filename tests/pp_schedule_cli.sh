#!/usr/bin/env bash
# pp_schedule_cli.sh MCC — `mcc schedule` (frontend/schedule_cmd.c): llama3-70b at TP=4 x PP=4 x DP=4
# with 2 virtual stages prints each schedule's ideal bubble by its formula, a simulated bubble no
# better than it, the micro-batches in flight the schedules peak at (1F1B and ZB-H1: p;
# interleaved: Megatron's 2(p-1) + (v-1)p warm-up + 1), the plan's memory per stage and an SVG
# with a row per rank; bad values are refused naming the flag.
set -uo pipefail
mcc=$1
source "$(dirname "$0")/cli_check.sh"
llama=$root/models/llama3-70b.json
layout=(--tp 4 --pipeline-model-parallel-size 4 --dp 4 --global-batch-size 1024 --micro-batch-size 1)

start=$(date +%s)
"$mcc" schedule "$llama" "${layout[@]}" --num-virtual-stages-per-pipeline-rank 2 --svg "$work/x.svg" >"$work/out" 2>&1 ||
  fail "mcc schedule exited $?: $(head -3 "$work/out")"
# the plan's memory runs compile's passes on the 70B layout: about a minute in the sanitized
# debug build on a shared machine (the schedules themselves take well under a second)
[ $(($(date +%s) - start)) -le 60 ] || fail "mcc schedule took more than 60 s"
grep -q "memory per rank of pipeline stage 3 of 4 (layers 30-39, 70-79):" "$work/out" || fail "the plan's memory per stage"
grep -q "256 micro-batches of 1 per step, 2 virtual stages per rank" "$work/out" || fail "layout line"
grep -q "rank 0: 10 10; rank 1: 10 10; rank 2: 10 10; rank 3: 10 10" "$work/out" || fail "the even split"
grep -q "schedule interleaved (auto" "$work/out" || fail "auto picks interleaved for 2 virtual stages"
grep -q "ideal (p-1)/(v m) = 0.00586" "$work/out" || fail "interleaved's ideal 3/512"
# schedule v bubble idle/compute ideal makespan peak-slots: ideal by formula (p=4, m=256),
# the simulated idle/compute at least the ideal, the peak slots
python3 - "$work/out" <<'PY' || fails=$((fails + 1))
import sys
rows = {l.split()[0]: l.split() for l in open(sys.argv[1]) if l.startswith("  ") and l.split()[0] in
        ("1f1b", "interleaved", "zb-h1")}
want = {"1f1b": (3 / 256, 4), "interleaved": (3 / 512, 2 * 3 + 4 + 1), "zb-h1": (3 / 768, 4)}
bad = False
for k, (ideal, peak) in want.items():
    r = rows.get(k)
    if not r:
        print(f"FAIL: no row for {k}"); bad = True; continue
    bubble, ratio, got_ideal, slots = float(r[2]), float(r[3]), float(r[4]), int(r[6])
    if abs(got_ideal - ideal) > 1e-5 or ratio < ideal - 1e-5 or not 0 < bubble < 1 or slots != peak:
        print(f"FAIL: {k}: {r}, want ideal {ideal:.5f} <= idle/compute, peak slots {peak}"); bad = True
if not bad and not float(rows["zb-h1"][2]) < float(rows["1f1b"][2]):
    print("FAIL: zb-h1's bubble is not below 1f1b's"); bad = True
sys.exit(1 if bad else 0)
PY
[ "$(grep -c '^rank [0-3] ' "$work/out")" -eq 4 ] || fail "a text row per rank"
grep -q '^<svg ' "$work/x.svg" && grep -q '</svg>' "$work/x.svg" && [ "$(grep -c '>rank [0-3]</text>' "$work/x.svg")" -eq 4 ] ||
  fail "the SVG has a row per rank"

expect "--num-virtual-stages-per-pipeline-rank" -- schedule "$llama" "${layout[@]}" --num-virtual-stages-per-pipeline-rank 3
expect "--num-layers-per-virtual-pipeline-stage 3 must divide the 20 layers" -- schedule "$llama" "${layout[@]}" \
  --num-layers-per-virtual-pipeline-stage 3
expect "are two ways of giving the same thing" -- schedule "$llama" "${layout[@]}" \
  --num-layers-per-virtual-pipeline-stage 5 --num-virtual-stages-per-pipeline-rank 2
expect "--pipeline-schedule: unknown value \"zb-h2\"" -- schedule "$llama" "${layout[@]}" --pipeline-schedule zb-h2
expect "--pipeline-schedule interleaved: the number of micro-batches (255) must be divisible by --pipeline-model-parallel-size (4)" \
  -- schedule "$llama" "${layout[@]}" --global-batch-size 1020 --num-virtual-stages-per-pipeline-rank 2
expect "--pipeline-schedule zb-h1 runs one stage per pipeline rank" -- schedule "$llama" "${layout[@]}" \
  --num-virtual-stages-per-pipeline-rank 2 --pipeline-schedule zb-h1
expect "--decoder-first-pipeline-num-layers (81)" -- schedule "$llama" "${layout[@]}" --decoder-first-pipeline-num-layers 81
expect "drop --account-for-loss-in-pipeline-split" -- schedule "$llama" "${layout[@]}" \
  --decoder-last-pipeline-num-layers 20 --account-for-loss-in-pipeline-split
expect "num_layers + 1 (loss) = 81 must be divisible by --pipeline-model-parallel-size (4)" -- schedule "$llama" \
  "${layout[@]}" --account-for-loss-in-pipeline-split
expect "--columns" -- schedule "$llama" "${layout[@]}" --columns 0
expect "--svg needs a value" -- schedule "$llama" "${layout[@]}" --svg
expect "--svg $work/no/x.svg: cannot write" -- schedule "$llama" "${layout[@]}" --svg "$work/no/x.svg"
expect "did you mean --svg" -- schedule "$llama" "${layout[@]}" --svgg x.svg
expect "--target tpu: choose" -- schedule "$llama" "${layout[@]}" --target tpu
"$mcc" schedule --help >"$work/help" 2>&1 && grep -q -- "--num-virtual-stages-per-pipeline-rank" "$work/help" &&
  grep -q -- "--svg OUT.svg" "$work/help" || fail "mcc schedule --help lists its flags and the spec's"
[ $fails -eq 0 ] && echo "pp_schedule_cli: ok"
exit $((fails > 0))

#!/usr/bin/env bash
# pp_layout_cli.sh MCC — Megatron's --pipeline-model-parallel-layout through mcc's commands: its
# H100 DeepSeek-V3 recipe (TP2 PP8 VP4 EP64 on 1,024 GPUs, "Et|(tt|)*30mL": 32 virtual stages, the
# last of only the multi-token depth and the loss) compiled for the h100 target plans every stage's
# memory with the layers the layout gives it, and `mcc schedule` splits and times the same; the
# spec file's field, the plan's config key and the help carry it; mcc tune and the flags Megatron
# refuses beside it are refused, naming the flag.
set -uo pipefail
mcc=$1
source "$(dirname "$0")/cli_check.sh"
ds=$root/models/deepseek-v3.json
recipe=(--target h100 --world-size 1024 --tp 2 --pp 8 --expert-model-parallel-size 64 --sequence-parallel
        --use-distributed-optimizer --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
        --pipeline-model-parallel-layout 'Et|(tt|)*30mL')
# stage g on rank g mod 8, chunk g div 8: rank 0 holds E and layer 0, then 15-16, 31-32, 47-48; rank
# 7's last chunk only the depth (layers 13-14, 29-30, 45-46 in its first three)
stages=("0 of 8 (layers 0, 15-16, 31-32, 47-48)" "1 of 8 (layers 1-2, 17-18, 33-34, 49-50)"
        "6 of 8 (layers 11-12, 27-28, 43-44, 59-60)" "7 of 8 (layers 13-14, 29-30, 45-46, multi-token depth 0)")
"$mcc" compile "$ds" "${recipe[@]}" -o "$work/ds" >"$work/compile" 2>&1; rc=$?
# it plans; whether it fits 79.2 GiB less the runtime's is the plan's to say (the last stage is near it)
[ $rc -eq 0 ] || grep -q "the plan needs .* GiB per GPU" "$work/compile" || fail "mcc compile exited $rc: $(tail -3 "$work/compile")"
for s in "${stages[@]}"; do
  grep -qF "memory per rank of pipeline stage $s:" "$work/compile" || fail "mcc compile: no stage $s"
done
[ "$(grep -c '^  total ' "$work/compile")" -eq 8 ] || fail "mcc compile: not 8 stages' totals"
"$mcc" schedule "$ds" "${recipe[@]}" >"$work/schedule" 2>&1 || fail "mcc schedule exited $?: $(tail -3 "$work/schedule")"
grep -qF "rank 0: 1 2 2 2; rank 1: 2 2 2 2;" "$work/schedule" && grep -qF "rank 7: 2 2 2 0" "$work/schedule" ||
  fail "mcc schedule's stage split is not the layout's: $(grep 'stage split' "$work/schedule")"
grep -qF "4 virtual stages per rank" "$work/schedule" || fail "mcc schedule: the layout's 4 virtual stages a rank"
for s in "${stages[@]}"; do
  grep -qF "memory per rank of pipeline stage $s:" "$work/schedule" || fail "mcc schedule: no stage $s"
done

# the spec file's field gives the same plan; the plan's config carries the layout
llama=$root/models/tiny-llama.json
python3 - "$llama" "$work/spec.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
s["model"]["num_layers"] = 4
s["parallel"].update(pipeline_model_parallel_size=2, pipeline_model_parallel_layout="Et|t|t|tL")
json.dump(s, open(sys.argv[2], "w"))
PY
"$mcc" compile "$work/spec.json" --target cpu -o "$work/l" >"$work/spec" 2>&1 || fail "spec file's layout: $(tail -2 "$work/spec")"
grep -qF "pipeline stage 0 of 2 (layers 0, 2)" "$work/spec" || fail "spec file's layout not taken: $(grep 'pipeline stage' "$work/spec")"
"$mcc" ir "$work/spec.json" --target cpu --after shard >"$work/ir" 2>&1
grep -qF 'pipeline_model_parallel_layout = "Et|t|t|tL"' "$work/ir" ||
  fail "the plan's config lacks pipeline_model_parallel_layout"
"$mcc" help fields >"$work/help" 2>&1
grep -q -- "--pipeline-model-parallel-layout  *text" "$work/help" || fail "mcc help fields lists the flag"

tiny=(compile "$llama" --target cpu --num-layers 4 --pp 2 -o "$work/x")
expect "drop --decoder-first-pipeline-num-layers (Megatron-LM refuses the two together)" -- "${tiny[@]}" \
  --pipeline-model-parallel-layout 'Et|tttL' --decoder-first-pipeline-num-layers 1
expect "drop --num-virtual-stages-per-pipeline-rank" -- "${tiny[@]}" --pipeline-model-parallel-layout 'Et|t|t|tL' \
  --num-virtual-stages-per-pipeline-rank 2
expect "--pipeline-model-parallel-layout \"Et|tt\" has no loss: end it with L" -- "${tiny[@]}" --pipeline-model-parallel-layout 'Et|tt'
expect "'x' at character 3 is not one of E (embedding)" -- "${tiny[@]}" --pipeline-model-parallel-layout 'Etx|ttL'
expect "has 3 decoder layers t: num_layers is 4" -- "${tiny[@]}" --pipeline-model-parallel-layout 'Et|ttL'
expect "stage 1 (rank 1, chunk 0) holds no decoder layer" -- "${tiny[@]}" --pipeline-model-parallel-layout 'Etttt|L'
expect "a multi-token depth m on stage 0 (rank 0, chunk 0)" -- "${tiny[@]}" --mtp-num-layers 1 \
  --pipeline-model-parallel-layout 'Ettm|ttL'
expect "has 3 stages: give a multiple of --pipeline-model-parallel-size (2)" -- "${tiny[@]}" \
  --pipeline-model-parallel-layout 'Et|tt|tL'
expect "mcc tune searches (it tries the even split and uneven first/last ranks, not layouts)" -- tune "$ds" \
  --world-size 1024 --pipeline-model-parallel-layout 'Et|(tt|)*30mL'
[ $fails -eq 0 ] && echo "pp_layout_cli: ok"

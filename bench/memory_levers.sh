#!/usr/bin/env bash
# memory_levers.sh — issue 20's memory levers on one GPU, sourced by bench/bundle.sh (levers_compile,
# MEMORY_LEVERS=1) and bench/device_run.sh (levers_run, LEVERS=1):
#   - the recompute table: llama-1B and gpt2-1.5B under each recompute granularity, method and N,
#     the plan's memory (mcc compile's report) beside the memory measured (the runtime's and
#     nvidia-smi's) and the step time;
#   - llama3-8b (seq 8192, micro-batch 1, 8 micro-batches a step) on one GPU with full recompute and
#     CPU optimizer offload: device and host memory planned and measured, tokens/s, the host step's
#     time; beside PyTorch's llama3-8b on the same GPU (its error where it does not fit).
# Each table row is printed by bench/levers_table.py from the logs.

# name:flags of the recompute table (HALF: half the model's layers, for block)
levers_recompute_variants() {
  cat <<'EOF'
none:--recompute-granularity none --recompute-num-layers 0
sel:--recompute-granularity selective --recompute-num-layers 0
sel-mlp_act:--recompute-granularity selective --recompute-modules mlp_act --recompute-num-layers 0
full-u1:--recompute-granularity full --recompute-method uniform --recompute-num-layers 1
full-u2:--recompute-granularity full --recompute-method uniform --recompute-num-layers 2
full-u4:--recompute-granularity full --recompute-method uniform --recompute-num-layers 4
full-bhalf:--recompute-granularity full --recompute-method block --recompute-num-layers HALF
EOF
}

# name:flags of llama3-8b on one GPU. The device machine's host has 128 GiB (--host-memory 120 says
# so): with the gradients streamed down in chunks (no host copy of them), fp32 Adam moments for
# every parameter pin 89.9 GiB of it, so that variant offloads all of them (it offloaded three
# quarters while a host copy of the gradients made it 119.8 GiB); bf16 moments 60.0 GiB. The
# -overlap variants queue the host step's copies beside its AdamW (--overlap-cpu-optimizer-d2h-h2d)
levers_8b_variants() {
  local full="--recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
  # the spec's 2000 warmup iterations are longer than a 6-step run (train_rank refuses that)
  local short="--lr-warmup-iters 1"
  cat <<EOF
full-offload:$full $short --optimizer-cpu-offload --global-batch-size 8 --host-memory 120
full-offload-bf16m:$full $short --optimizer-cpu-offload --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --global-batch-size 8 --host-memory 120
full-offload-overlap:$full $short --optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d --global-batch-size 8 --host-memory 120
full-offload-bf16m-overlap:$full $short --optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --global-batch-size 8 --host-memory 120
full:$full $short --global-batch-size 8
EOF
}

# levers_compile MCC: every variant into devrun/bin/lever-<config>-<name>, its report beside it
# (.compile.log: the plan's memory, or why mcc refused it)
levers_compile() {
  local mcc=$1 c name flags layers
  for c in llama-1B gpt2-1.5B; do
    layers=$(python3 -c "import json; print(json.load(open('bench/configs/$c.json'))['model']['num_layers'])")
    while IFS=: read -r name flags; do
      flags=${flags//HALF/$((layers / 2))}
      # shellcheck disable=SC2086
      "$mcc" compile bench/configs/$c.json --target cuda $flags -o devrun/bin/lever-$c-$name \
        > devrun/bin/lever-$c-$name.compile.log 2>&1 || echo "lever-$c-$name: mcc refused it (its .compile.log says why)"
    done < <(levers_recompute_variants)
  done
  while IFS=: read -r name flags; do
    # shellcheck disable=SC2086
    "$mcc" compile models/llama3-8b.json --target cuda $flags -o devrun/bin/lever-llama3-8b-$name \
      > devrun/bin/lever-llama3-8b-$name.compile.log 2>&1 || echo "lever-llama3-8b-$name: mcc refused it (its .compile.log says why)"
  done < <(levers_8b_variants)
}

# levers_watch PID OUT: until PID ends, the peak GPU memory (nvidia-smi, MiB) and resident host
# memory (VmHWM, kB) of train_rank, PID's child (PID is timeout's), into OUT as "gpu_mib host_kb".
# nvidia-smi lists no processes inside the device machine's container (it read 0 there on
# 2026-12-02): its column then stays 0, and the runtime's figure is the one to read
levers_watch() {
  local pid=$1 out=$2 gpu=0 host=0 g h child
  while kill -0 "$pid" 2>/dev/null; do
    child=$(pgrep -P "$pid" | head -1); child=${child:-$pid}
    g=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
      awk -F', ' -v p="$child" '$1 == p {print $2}')
    h=$(awk '/^VmHWM:/ {print $2}' /proc/"$child"/status 2>/dev/null)
    [ -n "$g" ] && [ "$g" -gt "$gpu" ] && gpu=$g
    [ -n "$h" ] && [ "$h" -gt "$host" ] && host=$h
    sleep 1
  done
  echo "$gpu $host" > "$out"
}

# levers_run OUTDIR: each compiled variant for a few steps (llama3-8b 6, the others 15), then the table.
# LEVERS_MATCH (globs after "lever-", default *) picks variants; LEVERS_TORCH=0 skips PyTorch's llama3-8b
levers_run() {
  local O=$1 bin name steps run pat pick data="--data-path devrun/data/brown_text_document --split 100,0,0 --log-interval 1 --eval-iters 0"
  local -a pats
  read -ra pats <<< "${LEVERS_MATCH:-*}"
  for bin in devrun/bin/lever-*; do
    case $bin in *.log) continue ;; esac
    [ -x "$bin" ] || continue
    name=${bin#devrun/bin/}
    pick=0
    for pat in "${pats[@]}"; do [[ $name == lever-$pat ]] && pick=1; done
    [ $pick = 1 ] || continue
    steps=15; case $name in *llama3-8b*) steps=6 ;; esac
    # shellcheck disable=SC2086
    timeout "${LEVERS_TIMEOUT:-300}" "$bin" $data --train-iters $steps > "$O/$name.log" 2>&1 &
    run=$!
    levers_watch $run "$O/$name.mem"
    wait $run; echo "$name exit $?"; grep -E "first step|iteration +$steps/" "$O/$name.log" | cut -c1-400
    cp "$bin.compile.log" "$O/$name.compile.log"
  done
  for bin in devrun/bin/lever-*.compile.log; do # the refused ones: their reason into the table
    name=${bin#devrun/bin/}; name=${name%.compile.log}
    [ -x "devrun/bin/$name" ] || cp "$bin" "$O/$name.compile.log"
  done
  # PyTorch on llama3-8b, the same GPU: its tokens/s, or its error
  if [ "${LEVERS_TORCH:-1}" != 0 ]; then
    timeout 300 python3 devrun/anchors/torch_baseline.py --config llama3-8b --steps 6 > "$O/lever-torch-llama3-8b.jsonl" \
      2> "$O/lever-torch-llama3-8b.err"; echo "torch llama3-8b exit $?"; tail -2 "$O/lever-torch-llama3-8b.err"
  fi
  python3 bench/levers_table.py "$O" | tee "$O/levers_table.txt"
}

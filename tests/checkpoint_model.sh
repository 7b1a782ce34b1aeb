#!/usr/bin/env bash
# checkpoint_model.sh MCC — a checkpoint records its model's function (ir/config.def's IR_CFG_MODEL
# keys in manifest.json): tiny-llama trained with LLaMA 3.1's rope (scaled, base 500000) and eps
# 1e-6 exports without --spec to a config.json that says so; train_rank --load under a plan of
# another function (eps, rope scaling factor, padded vocabulary) and --to hf with a spec or a flag
# of another are refused, naming the field; another seq_length is no other function and loads.
# A manifest of an earlier mcc (shapes alone) still loads with a note and converts with --spec.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cd "$work"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
spec=$root/models/tiny-llama.json
model=(--rotary-base 500000 --norm-epsilon 1e-6 --use-rope-scaling --rope-scaling-factor 8)
data=(--data-path text_text_document)
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix text --append-eod >/dev/null 2>&1
compile() { local out=$1; shift; "$mcc" compile "$spec" --target cpu "$@" -o "$out" 2>c.log || { cat c.log; exit 1; }; }
# refuses: MESSAGE-PART COMMAND...: a failure with MESSAGE-PART in its output, no sanitizer report
refuses() {
    local want=$1; shift
    if "$@" >out.txt 2>&1; then echo "FAIL: accepted: $*"; cat out.txt; exit 1; fi
    ! grep -q Sanitizer out.txt && grep -qF -- "$want" out.txt || { echo "FAIL: $* said:"; cat out.txt; echo "(want: $want)"; exit 1; }
}
compile train "${model[@]}"
./train "${data[@]}" --train-iters 2 --eval-iters 0 --save ck >train.log 2>&1 || { cat train.log; exit 1; }

# the export needs no spec, and its config.json is the trained model's
"$mcc" convert --to hf ck hf 2>/dev/null
/usr/bin/python3 - hf/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
want = {"rope_theta": 500000.0, "rms_norm_eps": 1e-6, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        "vocab_size": 257, "num_key_value_heads": 2, "tie_word_embeddings": False}
bad = {k: c.get(k) for k, v in want.items() if c.get(k) != v}
sys.exit(f"FAIL: config.json has {bad}, the trained model {({k: want[k] for k in bad})}" if bad else 0)
PY
refuses "norm_epsilon is 1e-06 in the checkpoint but 1e-05 in $spec's model" "$mcc" convert --to hf ck x --spec "$spec"
refuses "rope_scaling_factor is 8 in the checkpoint but 32 in the flags given" \
    "$mcc" convert --to hf ck x --rope-scaling-factor 32
"$mcc" convert --to hf ck hf2 --spec "$spec" "${model[@]}" 2>/dev/null
cmp hf/model.safetensors hf2/model.safetensors && cmp hf/config.json hf2/config.json

# --load under a plan of another function: refused by field, not only by shape
compile plain
refuses "norm_epsilon is 1e-06 in the checkpoint but 1e-05 in this plan" ./plain "${data[@]}" --train-iters 3 --load ck
compile factor "${model[@]}" --rope-scaling-factor 32
refuses "rope_scaling_factor is 8 in the checkpoint but 32 in this plan" ./factor "${data[@]}" --train-iters 3 --load ck
compile padded "${model[@]}" --make-vocab-size-divisible-by 256
refuses "vocab_size is 384 in the checkpoint but 512 in this plan" ./padded "${data[@]}" --train-iters 3 --load ck
# another sequence length is the same function (a rope model's max_position_embeddings, its context, too)
compile short "${model[@]}" --seq-length 16 --max-position-embeddings 16
./short "${data[@]}" --train-iters 3 --eval-iters 0 --load ck >short.log 2>&1 || { cat short.log; exit 1; }
grep -q "loaded checkpoint .* at iteration 2" short.log || { echo "FAIL: not resumed"; cat short.log; exit 1; }

# an earlier mcc's manifest (the shapes' keys alone): a note on load; --to hf needs --spec
cp -r ck old
/usr/bin/python3 - old/iter_0000002/manifest.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["model"] = {"num_layers": 2, "hidden_size": 64, "vocab_size": 384, "seq_length": 32, "num_params": 0}
json.dump(m, open(sys.argv[1], "w"), indent=2)
PY
./train "${data[@]}" --train-iters 3 --eval-iters 0 --load old >old.log 2>&1 || { cat old.log; exit 1; }
grep -q "records the model's shapes alone" old.log || { echo "FAIL: no note on an earlier manifest"; cat old.log; exit 1; }
refuses "give --spec SPEC.json" "$mcc" convert --to hf old x
"$mcc" convert --to hf old hf3 --spec "$spec" "${model[@]}" 2>note.txt
grep -q "records the model's shapes alone" note.txt || { echo "FAIL: no note"; cat note.txt; exit 1; }
cmp hf/model.safetensors hf3/model.safetensors && cmp hf/config.json hf3/config.json
echo PASS

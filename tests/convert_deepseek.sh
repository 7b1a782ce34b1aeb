#!/usr/bin/env bash
# convert_deepseek.sh MCC — what `mcc convert` refuses of DeepSeek-V3 (DeepseekV3ForCausalLM), each
# by its field or key (exit status 2): tiny-deepseek-v3 as it is (its groups scored by their top 1,
# transformers' by their top 2; YaRN at factor 4 with max_position_embeddings not 4 x 16, which
# transformers up to 4.5x take for the factor), and an export's config.json edited into what does
# not map (FP8 quantization, rope_interleave false, norm_topk_prob
# against mcc's router, a group choice mcc computes otherwise, layers not k dense then all MoE,
# biases, a softmax router). The export itself round-trips (tests/convert_trained.sh proves its
# function). A model with a multi-token prediction layer (DeepSeek-V3's num_nextn_predict_layers 1:
# the tensors of layer num_hidden_layers) imports with a note, those tensors not read, and one past
# it is refused.
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cd "$work"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
spec="$root/models/tiny-deepseek-v3.json"

refuses() { # refuses MESSAGE-PART COMMAND...: exit status 2, MESSAGE-PART in the error, no sanitizer report
    local want=$1 rc=0; shift
    "$@" 2>err.txt || rc=$?
    [ "$rc" = 2 ] || { echo "FAIL: exit status $rc, not 2: $*"; cat err.txt; exit 1; }
    ! grep -q Sanitizer err.txt || { echo "FAIL: a sanitizer report:"; cat err.txt; exit 1; }
    grep -qF -- "$want" err.txt || { echo "FAIL: the error lacks \"$want\":"; cat err.txt; exit 1; }
}
setkey() { # setkey CONFIG KEY VALUE (JSON; "-" deletes it)
    /usr/bin/python3 -c 'import json, sys
p, k, v = sys.argv[1:]
c = json.load(open(p))
c.pop(k) if v == "-" else c.__setitem__(k, json.loads(v))
json.dump(c, open(p, "w"), indent=2)' "$@"
}
"$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix text --append-eod >/dev/null 2>&1
train() { # train DIR FLAGS...: 3 steps of tiny-deepseek-v3 with FLAGS, saved in DIR
    local dir=$1; shift
    "$mcc" compile "$spec" --target cpu "$@" -o "$dir.bin" 2>c.log || { cat c.log; exit 1; }
    "./$dir.bin" --data-path text_text_document --train-iters 3 --save "$dir" >t.log 2>&1 || { cat t.log; exit 1; }
}
train as_is
refuses "set --max-position-embeddings 64" "$mcc" convert --to hf as_is hf
train long --max-position-embeddings 64
refuses "set moe_router_topk twice moe_router_group_topk" "$mcc" convert --to hf long hf
train ok --moe-router-topk 4 --max-position-embeddings 64
"$mcc" convert --to hf ok hf 2>/dev/null
"$mcc" convert --from hf hf ck 2>/dev/null
"$mcc" convert --to hf ck hf2 2>/dev/null
cmp hf/model.safetensors hf2/model.safetensors || { echo "FAIL: the import's export differs"; exit 1; }
# config.json's keys that do not map, each in a copy of the export
bad() { # bad MESSAGE-PART KEY VALUE [KEY VALUE]
    local want=$1; shift
    rm -rf e && cp -r hf e
    while [ $# -gt 0 ]; do setkey e/config.json "$1" "$2"; shift 2; done
    refuses "$want" "$mcc" convert --from hf e eck
}
bad '"quantization_config" is set' quantization_config '{"quant_method": "fp8"}'
bad '"rope_interleave" is false' rope_interleave false
bad '"norm_topk_prob" is false' norm_topk_prob false
bad 'is not twice topk_group' topk_group 1
bad '"moe_layer_freq" is 2' moe_layer_freq 2
bad '"attention_bias" is true' attention_bias true
bad '"scoring_func" is "softmax"' scoring_func '"softmax"'
bad '"num_key_value_heads" (1)' num_key_value_heads 1
bad '"rope_scaling" is of rope_type "llama3"' rope_scaling '{"rope_type": "llama3", "factor": 8}'
bad 'transformers up to 4.5x take that ratio' max_position_embeddings 128
bad 'mscale 0.707 and mscale_all_dim 0 differ' rope_scaling \
    '{"type": "yarn", "factor": 4, "original_max_position_embeddings": 16, "mscale": 0.707, "mscale_all_dim": 0}'
# the multi-token prediction layer: its tensors (model.layers.2.*, after tiny's 2 layers) not read
with_extra() { # with_extra LAYER: a copy of the export in e/ with a tensor of model.layers.LAYER, mtp 1
    rm -rf e eck && cp -r hf e
    /usr/bin/python3 - e "$1" "$root/tests" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[3])
import convert_hf
d, layer = sys.argv[1:3]
t, _ = convert_hf.st_read(d + "/model.safetensors")
w = {n: convert_hf.widen(dt, a) for n, (dt, a) in t.items()}
w[f"model.layers.{layer}.eh_proj.weight"] = np.ones((64, 128))
convert_hf.st_write(d + "/model.safetensors", w, "F32")
PY
    setkey e/config.json num_nextn_predict_layers 1
}
with_extra 2
"$mcc" convert --from hf e eck 2>err.txt || { cat err.txt; exit 1; }
grep -qF '"num_nextn_predict_layers" 1' err.txt || { echo "FAIL: no note of the mtp layer"; cat err.txt; exit 1; }
"$mcc" convert --to hf eck e2 2>/dev/null
cmp hf/model.safetensors e2/model.safetensors || { echo "FAIL: the import beside an mtp layer differs"; exit 1; }
with_extra 3
refuses "tensor model.layers.3.eh_proj.weight is not one of" "$mcc" convert --from hf e eck
echo PASS

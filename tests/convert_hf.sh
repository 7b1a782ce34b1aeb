#!/usr/bin/env bash
# convert_hf.sh MCC ARCH — `mcc convert` on random Hugging Face models of ARCH (tests/convert_hf.py
# makes them; --variant the second): gpt2 F32 sharded with the index, and F16 named as
# openai-community/gpt2's file names them; the rest BF16 in one file, and an F16 variant: llama (tied
# embeddings, biases, LLaMA 3.1's rope scaling), mixtral (4 experts, top 2; tied, top 1), qwen2 (q, k, v
# biased; tied), qwen3 (q_norm/k_norm, head_dim 32 of hidden 64 / 4 heads; tied, rope_theta 1e6),
# mistral (exported with --architecture MistralForCausalLM: sliding_window 4096 and head_dim 32;
# both null), qwen3_moe (Qwen3's attention, layer 0 dense by mlp_only_layers, top 2 renormalised; top
# 1 not renormalised, layer 1 alone sparse by decoder_sparse_step).
# --from hf writes a checkpoint and its spec, --to hf writes the model back, which must equal the
# input to the bit, and the HF forward (written by hand from transformers' conventions) on the
# exported weights must equal tests/torch_ref.py's mcc forward on the checkpoint's (float64). The
# imports of every architecture but gpt2 and llama (tests/convert_trained.sh trains those) also run
# in train_rank (compiled from the spec the import wrote, --load --finetune): its step-1 logits and
# lm loss are the HF forward's on its tokens. Then the bad inputs, each refused (exit status 2)
# naming the file, key, tensor or spec field.
set -euo pipefail
mcc=$1; arch=$2
root=$(cd "$(dirname "$0")/.." && pwd)
py="/usr/bin/python3 $root/tests/convert_hf.py"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cd "$work"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}

# said FRAGMENT...: err.txt (a refused command's stderr) has every FRAGMENT and no sanitizer report
said() {
    local f
    ! grep -q Sanitizer err.txt || { echo "FAIL: a sanitizer report:"; cat err.txt; exit 1; }
    for f in "$@"; do
        grep -qF -- "$f" err.txt || { echo "FAIL: the error lacks \"$f\":"; cat err.txt; exit 1; }
    done
}
# refuses MESSAGE-PART COMMAND...: exit status 2 and MESSAGE-PART in the error
refuses() {
    local want=$1 rc=0; shift
    "$@" 2>err.txt || rc=$?
    [ "$rc" = 2 ] || { echo "FAIL: exit status $rc, not 2: $*"; cat err.txt; exit 1; }
    said "$want"
}
# setkey CONFIG KEY VALUE: one key of a config.json set (VALUE JSON; "-" deletes it), without torch
setkey() {
    /usr/bin/python3 -c 'import json, sys
p, k, v = sys.argv[1:]
c = json.load(open(p))
c.pop(k) if v == "-" else c.__setitem__(k, json.loads(v))
json.dump(c, open(p, "w"), indent=2)' "$@"
}
# key CONFIG KEY: a config.json's (or spec's model section's) value of KEY, as JSON
key() {
    /usr/bin/python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
print(json.dumps(c.get("model", c).get(sys.argv[2])))' "$@"
}
# in_train_rank CKPT HF: train_rank compiled from the import's spec loads it; its step-1 logits and
# loss are the HF forward's on HF
in_train_rank() {
    [ -f text_text_document.bin ] ||
        "$mcc" data preprocess --input "$root/tests/data/numerics.txt" --output-prefix text --append-eod >/dev/null 2>&1
    "$mcc" compile "$1/spec.json" --target cpu --keep-logits -o "$1.one" 2>c.log || { cat c.log; exit 1; }
    "./$1.one" --data-path text_text_document --train-iters 1 --load "$1" --finetune --dump-dir "$1.d" >one.log 2>&1 ||
        { cat one.log; exit 1; }
    $py logits --hf "$2" --dump "$1.d"
}

# MistralForCausalLM is LLaMA's function: exported as Mistral only when named
xarch=()
if [ "$arch" = mistral ]; then xarch=(--architecture MistralForCausalLM); fi
if [ "$arch" = gpt2 ]; then make_flags="--shard-bytes 200000"; else make_flags="--dtype BF16"; fi
$py make --arch "$arch" --out hf1 $make_flags
"$mcc" convert --from hf hf1 ck 2>err.txt || { cat err.txt; exit 1; }
if [ "$arch" = mistral ]; then said sliding_window; fi # 4096, past seq_length 32: imported, with a note
"$mcc" convert --to hf ck hf2 --spec ck/spec.json --max-shard-size 150000 "${xarch[@]}"
$py same hf1 hf2 --spec ck/spec.json --ckpt ck
$py make --arch "$arch" --out hfv --dtype F16 --variant
"$mcc" convert --from hf hfv ckv
"$mcc" convert --to hf ckv hfv2 --spec ckv/spec.json "${xarch[@]}"
$py same hfv hfv2 --spec ckv/spec.json --ckpt ckv
case $arch in
gpt2 | llama) ;;
qwen3_moe) # top 2 renormalised; top 1 not, one layer sparse
    in_train_rank ck hf1
    in_train_rank ckv hfv
    ;;
*) in_train_rank ck hf1 ;;
esac
# exported unsharded (the default 5 GB): one model.safetensors and no index left from the sharded
# export (the sharding is the architecture's own in no way: the dense ones check it)
if [ "$arch" != mixtral ] && [ "$arch" != qwen3_moe ]; then
    "$mcc" convert --to hf ck hf2 --spec ck/spec.json "${xarch[@]}"
    [ -f hf2/model.safetensors ] && [ ! -f hf2/model.safetensors.index.json ] || { echo "FAIL: a stale index"; exit 1; }
    $py same hf1 hf2
fi
if [ "$arch" = mistral ]; then # without --architecture: LlamaForCausalLM, the same tensors, the same logits
    "$mcc" convert --to hf ck hfl
    [ "$(key hfl/config.json architectures)" = '["LlamaForCausalLM"]' ] ||
        { echo "FAIL: exported as $(key hfl/config.json architectures), not LlamaForCausalLM"; exit 1; }
    $py same hf2 hfl --other-architecture --spec ck/spec.json --ckpt ck
fi

cp -r hf1 bad && rm bad/config.json
refuses "bad/config.json: cannot read" "$mcc" convert --from hf bad out
cp hf1/config.json bad/ && setkey bad/config.json architectures '["BertModel"]'
refuses 'architecture "BertModel" is not one mcc knows' "$mcc" convert --from hf bad out
cp hf1/config.json bad/ && setkey bad/config.json vocab_size 300
refuses "but config.json makes it [300, 64]: the weights and config.json are of different models" "$mcc" convert --from hf bad out
case $arch in
gpt2)
    rm bad/model-00003-of-00003.safetensors && cp hf1/config.json bad/
    refuses "bad/model-00003-of-00003.safetensors: " "$mcc" convert --from hf bad out
    setkey bad/config.json n_head -
    refuses 'bad/config.json: "n_head" is missing' "$mcc" convert --from hf bad out
    cp hf1/config.json bad/ && setkey bad/config.json scale_attn_weights false
    refuses '"scale_attn_weights" is false: mcc'"'"'s GPT-2 scales attention scores by 1/sqrt(head_dim) alone' \
        "$mcc" convert --from hf bad out
    ;;
mixtral)
    cp hf1/config.json bad/ && setkey bad/config.json num_local_experts 8
    refuses "tensor model.layers.0.block_sparse_moe.gate.weight is [4, 64] but config.json makes it [8, 64]" \
        "$mcc" convert --from hf bad out
    cp hf1/config.json bad/ && setkey bad/config.json num_local_experts -
    refuses 'bad/config.json: "num_local_experts" is missing' "$mcc" convert --from hf bad out
    cp hf1/config.json bad/ && setkey bad/config.json n_shared_experts 1
    refuses 'bad/config.json: "n_shared_experts" is set: MixtralForCausalLM has no shared expert' "$mcc" convert --from hf bad out
    cp hf1/config.json bad/ && setkey bad/config.json scoring_func '"sigmoid"'
    refuses '"scoring_func" is "sigmoid": MixtralForCausalLM'"'"'s router is a softmax' "$mcc" convert --from hf bad out
    cp hf1/config.json bad/ && setkey bad/config.json router_jitter_noise 0.01
    refuses '"router_jitter_noise" is not 0' "$mcc" convert --from hf bad out
    cp hf1/config.json bad/ && setkey bad/config.json sliding_window 16
    refuses '"sliding_window" is set' "$mcc" convert --from hf bad out
    # --to hf: a spec whose MoE transformers' Mixtral does not compute
    refuses "no Hugging Face architecture fits: MixtralForCausalLM has no shared expert" \
        "$mcc" convert --to hf ck out --spec ck/spec.json --moe-shared-expert-intermediate-size 16
    refuses "MixtralForCausalLM's router is a softmax: moe_router_score_function is sigmoid" \
        "$mcc" convert --to hf ck out --spec ck/spec.json --moe-router-score-function sigmoid
    refuses "MixtralForCausalLM renormalises its top-k weights: moe_router_pre_softmax is true" \
        "$mcc" convert --to hf ck out --spec ck/spec.json --moe-router-pre-softmax
    refuses "MixtralForCausalLM has an MoE layer in every layer" \
        "$mcc" convert --to hf ck out --spec ck/spec.json --moe-layer-freq 2
    refuses "num_experts is 4 in the checkpoint but 2 in ck/spec.json's model" \
        "$mcc" convert --to hf ck out --spec ck/spec.json --num-experts 2
    ;;
*) # LLaMA's dense kin and Qwen3-MoE
    layers=$(key hf1/config.json num_hidden_layers)
    cp hf1/config.json bad/ && setkey bad/config.json hidden_act '"gelu"'
    refuses '"hidden_act" is "gelu": mcc'"'"'s SwiGLU MLP is silu(gate) * up' "$mcc" convert --from hf bad out
    cp hf1/config.json bad/ && setkey bad/config.json num_hidden_layers $((layers + 1))
    refuses "no tensor model.layers.$layers.input_layernorm.weight in model.safetensors" "$mcc" convert --from hf bad out
    cp hf1/config.json bad/ && setkey bad/config.json tie_word_embeddings true
    refuses "bad/model.safetensors: tensor lm_head.weight" "$mcc" convert --from hf bad out
    cp hf1/config.json bad/ && setkey bad/config.json rope_scaling '{"rope_type": "yarn", "factor": 4.0}'
    refuses '"rope_scaling" is of rope_type "yarn": mcc computes LLaMA 3.1'"'"'s scaling alone' "$mcc" convert --from hf bad out
    ;;
esac
case $arch in
llama)
    cp hfv/config.json bad/ && setkey bad/config.json rope_scaling \
        '{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 2.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}'
    refuses '"rope_scaling"."low_freq_factor" is not 1' "$mcc" convert --from hf bad out
    # the export's rope scaling, base and eps are the checkpoint's: a spec that differs is refused by field
    refuses "use_rope_scaling is true in the checkpoint but false in $root/models/tiny-llama.json's model" \
        "$mcc" convert --to hf ckv out --spec "$root/models/tiny-llama.json" --rotary-base 500000 --norm-epsilon 1e-6 \
        --untie-embeddings-and-output-weights false --add-bias-linear
    ;;
qwen2)
    cp hf1/config.json bad/ && setkey bad/config.json use_sliding_window true
    refuses use_sliding_window "$mcc" convert --from hf bad out
    # --architecture: one that does not compute the model, one mcc does not know
    refuses qk_layernorm "$mcc" convert --to hf ck out --architecture Qwen3ForCausalLM
    refuses Bogus "$mcc" convert --to hf ck out --architecture Bogus
    said LlamaForCausalLM MistralForCausalLM Qwen2ForCausalLM Qwen3ForCausalLM Qwen3MoeForCausalLM
    ;;
qwen3)
    cp hf1/config.json bad/ && setkey bad/config.json head_dim 16 # q_proj is [128, 64]: head_dim 32
    refuses "but config.json makes it" "$mcc" convert --from hf bad out
    # attention_bias biases q, k, v and o but not the MLP, which no spec of mcc's does
    cp hf1/config.json bad/ && setkey bad/config.json attention_bias true
    refuses attention_bias "$mcc" convert --from hf bad out
    refuses qk_layernorm "$mcc" convert --to hf ck out --architecture LlamaForCausalLM
    ;;
mistral)
    cp hf1/config.json bad/ && setkey bad/config.json sliding_window 16 # under seq_length 32
    refuses sliding_window "$mcc" convert --from hf bad out
    ;;
qwen3_moe)
    cp hf1/config.json bad/ && setkey bad/config.json mlp_only_layers '[0, 5]'
    refuses mlp_only_layers "$mcc" convert --from hf bad out
    cp hf1/config.json bad/ && setkey bad/config.json num_experts 8
    refuses "tensor model.layers.1.mlp.gate.weight is [4, 64] but config.json makes it [8, 64]" \
        "$mcc" convert --from hf bad out
    # Qwen2-MoE's shared expert has a sigmoid gate (shared_expert_gate) mcc does not build
    cp hf1/config.json bad/ && setkey bad/config.json architectures '["Qwen2MoeForCausalLM"]'
    setkey bad/config.json model_type '"qwen2_moe"' && setkey bad/config.json shared_expert_intermediate_size 96
    refuses shared_expert_gate "$mcc" convert --from hf bad out
    # without norm_topk_prob, Qwen3MoeConfig's default: false, the top k not renormalised
    cp hf1/config.json bad/ && setkey bad/config.json norm_topk_prob -
    "$mcc" convert --from hf bad ckd 2>/dev/null
    [ "$(key ckd/spec.json moe_router_pre_softmax)" = true ] ||
        { echo "FAIL: no norm_topk_prob imported as moe_router_pre_softmax $(key ckd/spec.json moe_router_pre_softmax)"; exit 1; }
    # Mixtral: no q/k norms, no dense layer
    refuses "MixtralForCausalLM does not compute this model" "$mcc" convert --to hf ck out --architecture MixtralForCausalLM
    ;;
esac
# --to hf without --spec: the model the manifest records, the same files; a spec or flag of
# another model is refused by its field
"$mcc" convert --to hf ckv hfv3 "${xarch[@]}" 2>/dev/null
$py same hfv2 hfv3 --export-defaults
if [ "$arch" = gpt2 ] || [ "$arch" = llama ]; then
    refuses "num_layers is 2 in the checkpoint but 1 in $root/models/tiny-$arch.json's model" \
        "$mcc" convert --to hf ck out --spec "$root/models/tiny-$arch.json" --num-layers 1
fi
eps=$(/usr/bin/python3 -c 'import json, sys; print("%g" % json.load(open(sys.argv[1]))["model"]["norm_epsilon"])' ck/spec.json)
refuses "norm_epsilon is $eps in the checkpoint but 0.001 in the flags given" "$mcc" convert --to hf ck out --norm-epsilon 1e-3
refuses "unknown flag '--max-shard-sise' for mcc convert --to hf: did you mean --max-shard-size?" "$mcc" convert --to hf ck out --spec ck/spec.json --max-shard-sise 5
refuses "ck/iter_0000007/manifest.json: missing" "$mcc" convert --to hf ck out --spec ck/spec.json --iteration 7
refuses "--to gguf: the format mcc converts is hf" "$mcc" convert --to gguf ck out
refuses "--max-shard-size" "$mcc" convert --to hf ck out --spec ck/spec.json --max-shard-size 0
if [ "$arch" = gpt2 ]; then other=rope; else other=learned_absolute; fi
refuses "no Hugging Face architecture fits" "$mcc" convert --to hf ck out --spec ck/spec.json --position-embedding-type $other
if [ "$arch" = llama ]; then # DeepSeek-V3's multi-token depths: not converted before DeepseekV3ForCausalLM is
    refuses "multi-token prediction's depths (mtp_num_layers 1) are not converted yet" \
        "$mcc" convert --to hf ck out --spec ck/spec.json --mtp-num-layers 1
fi
echo PASS

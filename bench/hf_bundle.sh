#!/usr/bin/env bash
# hf_bundle.sh [MCC [NAME-REGEX]] — prepares hfcheck/ for bench/hf_transformers_check.py on the GPU machine
# (which has transformers; this one has not): tiny models of each architecture `mcc convert` writes,
# trained 3 steps on the CPU with --save, exported by `mcc convert --to hf`, and a one-rank --load
# --finetune run's step-1 tokens and logits (what mcc computes with the trained weights) as .npy
# beside each export. The table below: the model's spec and flags, the export's flags and the
# architecture config.json must name. tiny-gpt2 and tiny-llama are exported with --spec; the rest
# without (the checkpoint records its model): tiny-llama-rope-scaling is LLaMA 3.1's rope
# (rope_scaling llama3, factor 8, base 500000) with eps 1e-6 over 128 positions; tiny-qwen2 tiny-llama
# with q, k, v biases; tiny-qwen3 with q/k norms and head_dim 32 (hidden 64, 4 heads); tiny-mistral
# tiny-llama named MistralForCausalLM; tiny-mixtral tiny-moe with every layer MoE and no shared
# expert; tiny-qwen3-moe tiny-moe without the shared expert, with Qwen3's attention (layer 0 dense);
# tiny-deepseek-v3 (DeepseekV3ForCausalLM: MLA with a q latent, YaRN factor 4 over 16 positions with
# max_position_embeddings 64, the ratio transformers up to 4.5x take for the factor; top 4 of 8 experts
# in 4 groups of which 2 kept, a group scored by its top 2 as transformers' is; the shared expert, the
# expert bias) and tiny-deepseek-v3-plain (no q latent: q_proj; plain rope: rope_scaling null; no
# groups; the sequence-wise aux loss: seq_aux). NAME-REGEX: only the models whose name matches
# (bash's =~), e.g. deepseek.
# Each export's logits are first checked here by tests/convert_hf.py's hand-written HF forward.
set -euo pipefail
cd "$(dirname "$0")/.."
mcc=${1:-build-dev/mcc} only=${2:-}
out=hfcheck work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
rm -rf "$out" && mkdir -p "$out"
$mcc data preprocess --input tests/data/numerics.txt --output-prefix "$work/text" --append-eod >/dev/null 2>&1
rope="--rotary-base 500000 --norm-epsilon 1e-6 --use-rope-scaling --rope-scaling-factor 8 --seq-length 128 --max-position-embeddings 128"
qk="--qk-layernorm --kv-channels 32"
plain="--q-lora-rank 0 --rotary-scaling-factor 1 --moe-router-num-groups 0 --moe-router-group-topk 0 --moe-router-load-balancing-type seq_aux_loss"
# NAME | SPEC | MODEL FLAGS | EXPORT FLAGS | ARCHITECTURE
while IFS='|' read -r -u 3 m spec flags export arch; do
  [[ $m =~ $only ]] || continue
  read -r -a flags <<<"$flags"
  read -r -a export <<<"$export"
  $mcc compile "$spec" --target cpu "${flags[@]}" -o "$work/$m" 2>/dev/null
  "$work/$m" --data-path "$work/text_text_document" --train-iters 3 --save "$work/ck-$m" >/dev/null
  $mcc convert --to hf "$work/ck-$m" "$out/$m" "${export[@]}" 2>/dev/null
  grep -q "\"$arch\"" "$out/$m/config.json" || { echo "FAIL: $m exported as:"; grep -A1 architectures "$out/$m/config.json"; exit 1; }
  $mcc compile "$spec" --target cpu --keep-logits --lr-warmup-iters 0 "${flags[@]}" -o "$work/$m-one" 2>/dev/null
  "$work/$m-one" --data-path "$work/text_text_document" --train-iters 1 --load "$work/ck-$m" --finetune \
    --dump-dir "$work/d-$m" >/dev/null
  /usr/bin/python3 tests/convert_hf.py logits --hf "$out/$m" --dump "$work/d-$m"
  /usr/bin/python3 - "$work/d-$m" "$out/$m" <<'PY'
import os, sys
import numpy as np
sys.path.insert(0, "tests")
import torch_ref
d, o = sys.argv[1:]
np.save(os.path.join(o, "tokens.npy"), torch_ref.read_mcct(os.path.join(d, "batches.mcct"))["tokens.1.0"].astype(np.int64))
np.save(os.path.join(o, "targets.npy"), torch_ref.read_mcct(os.path.join(d, "batches.mcct"))["targets.1.0"].astype(np.int64))
np.save(os.path.join(o, "logits.npy"), torch_ref.read_mcct(os.path.join(d, "logits_step1.mcct"))["logits"].astype(np.float32))
PY
done 3<<EOF
tiny-gpt2|models/tiny-gpt2.json||--spec models/tiny-gpt2.json|GPT2LMHeadModel
tiny-llama|models/tiny-llama.json||--spec models/tiny-llama.json|LlamaForCausalLM
tiny-llama-rope-scaling|models/tiny-llama.json|$rope||LlamaForCausalLM
tiny-qwen2|models/tiny-llama.json|--add-qkv-bias||Qwen2ForCausalLM
tiny-qwen3|models/tiny-llama.json|$qk||Qwen3ForCausalLM
tiny-mistral|models/tiny-llama.json||--architecture MistralForCausalLM|MistralForCausalLM
tiny-mixtral|models/tiny-moe.json|--moe-layer-freq 1 --moe-shared-expert-intermediate-size 0||MixtralForCausalLM
tiny-qwen3-moe|models/tiny-moe.json|--moe-shared-expert-intermediate-size 0 $qk||Qwen3MoeForCausalLM
tiny-deepseek-v3|models/tiny-deepseek-v3.json|--max-position-embeddings 64 --moe-router-topk 4||DeepseekV3ForCausalLM
tiny-deepseek-v3-plain|models/tiny-deepseek-v3.json|$plain||DeepseekV3ForCausalLM
EOF
du -sh "$out"

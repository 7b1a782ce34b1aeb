#!/usr/bin/env bash
# convert_stream.sh MCC_CONVERT — `mcc convert` streams (issue 40): a LlamaForCausalLM of 96M
# parameters (384 MB in f32; BF16 on disk) imported and exported back holds one parameter and one HF
# tensor at a time (16 MB each here), so mcc-convert's peak resident memory stays under 96 MB, a
# quarter of the model, each way (measured 44 and 52 MB; the import that gathered the model first
# peaked at 451 MB), and the export equals the input to the bit. (mcc-convert: mcc's own start-up
# alone, LLVM's libraries loaded, is 84 MB.)
set -euo pipefail
mcc=$1
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cd "$work"
/usr/bin/python3 - <<'PY'
import json, os, struct
import numpy as np
L, d, F, V, H = 6, 1024, 4096, 512, 8
config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": L, "hidden_size": d,
          "num_attention_heads": H, "num_key_value_heads": H, "intermediate_size": F, "max_position_embeddings": 64,
          "vocab_size": V, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu"}
shapes = {"model.embed_tokens.weight": (V, d), "model.norm.weight": (d,), "lm_head.weight": (V, d)}
for i in range(L):
    p = f"model.layers.{i}."
    for n, s in (("input_layernorm.weight", (d,)), ("post_attention_layernorm.weight", (d,)),
                 ("self_attn.q_proj.weight", (d, d)), ("self_attn.k_proj.weight", (d, d)),
                 ("self_attn.v_proj.weight", (d, d)), ("self_attn.o_proj.weight", (d, d)),
                 ("mlp.gate_proj.weight", (F, d)), ("mlp.up_proj.weight", (F, d)), ("mlp.down_proj.weight", (d, F))):
        shapes[p + n] = s
os.makedirs("hf1")
json.dump(config, open("hf1/config.json", "w"))
header, off = {"__metadata__": {"format": "pt"}}, 0
for n, s in shapes.items():
    nb = 2 * int(np.prod(s))
    header[n] = {"dtype": "BF16", "shape": list(s), "data_offsets": [off, off + nb]}
    off += nb
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
rng = np.random.default_rng(5)
with open("hf1/model.safetensors", "wb") as f:  # one tensor in memory at a time here too
    f.write(struct.pack("<Q", len(text)) + text)
    for n, s in shapes.items():
        f.write((rng.standard_normal(s, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes())
PY
peak() { # peak KiB of COMMAND under /usr/bin/time, which must stay below the limit
    local limit_kib=$1; shift
    /usr/bin/time -f %M -o rss.txt "$@" 2>log.txt || { cat log.txt; exit 1; }
    local kib; kib=$(tail -1 rss.txt)
    echo "$* : peak $((kib / 1024)) MiB (limit $((limit_kib / 1024)))"
    [ "$kib" -lt "$limit_kib" ] || { echo "FAIL: peak resident memory above the limit"; exit 1; }
}
peak $((96 * 1024)) "$mcc" --from hf hf1 ck
peak $((96 * 1024)) "$mcc" --to hf ck hf2 --max-shard-size 200000000
/usr/bin/python3 "$root/tests/convert_hf.py" same hf1 hf2
echo PASS

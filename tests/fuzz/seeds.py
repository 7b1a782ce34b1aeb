"""seeds.py — the fuzzers' seed corpora (tests/fuzz.cmake runs it at build time), from what tests/
already holds, one directory a target under OUT:

  spec/         models/*.json, and every case of tests/bad_specs.txt (its JSON, then its flags)
  ir/           tests/passes/*.ir and tests/ep_layer.ir
  idx/          tests/megatron_indexed.py's synthetic datasets (data_test's: every integer dtype)
  safetensors/  tiny GPT-2 and LLaMA model files as tests/convert_hf.py writes them, and the rank
                files of the checkpoints below
  checkpoint/   the checkpoints `mcc-convert --from hf` writes from those models
  hf_config/    their config.json files (convert_hf.py's configs, Mixtral's too), in tiny sizes

and each target's regressions/TARGET/*: the inputs on which a fuzzer found a bug, kept so that every
run tries them first. A file of several parts joins them with fuzz.h's FUZZ_SEP line.

  seeds.py --mcc-convert PATH --out DIR
"""
import argparse
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)
SEP = b"\n%%\n"
sys.path.insert(0, TESTS)
import megatron_indexed  # noqa: E402


def put(out, target, name, data):
    os.makedirs(os.path.join(out, target), exist_ok=True)
    with open(os.path.join(out, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def bad_spec_cases():
    """(name, json text, flags) of each case of tests/bad_specs.txt."""
    cases, cur = [], None
    for line in open(os.path.join(TESTS, "bad_specs.txt")):
        if line.startswith("== "):
            cur = [line[3:].strip(), [], []]
            cases.append(cur)
        elif cur is None or line.startswith("expect:"):
            continue
        elif line.startswith("flags:"):
            cur[2] = line[len("flags:"):].split()
        else:
            cur[1].append(line)
    return [(n, "".join(j).strip(), f) for n, j, f in cases]


def st_bytes(tensors, meta=None):
    """A safetensors file of tensors {name: (dtype, shape)}, each element's bytes 0x3c (0.0117 in F32)."""
    size = {"F32": 4, "BF16": 2, "F16": 2, "I32": 4, "I64": 8}
    header, off = ({"__metadata__": meta} if meta else {}), 0
    for name, (dt, shape) in tensors.items():
        n = size[dt]
        for s in shape:
            n *= s
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"\x3c" * off


def hf_models():
    """(name, config, {tensor: shape}) of tiny GPT-2 and LLaMA models, named as convert_hf.py's."""
    L, d, H, T, V, F = 1, 16, 2, 8, 32, 32
    gpt2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": L, "n_embd": d, "n_head": H,
            "n_positions": T, "vocab_size": V, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
    g = {"transformer.wte.weight": (V, d), "transformer.wpe.weight": (T, d),
         "transformer.ln_f.weight": (d,), "transformer.ln_f.bias": (d,)}
    for n, s in (("ln_1.weight", (d,)), ("ln_1.bias", (d,)), ("attn.c_attn.weight", (d, 3 * d)),
                 ("attn.c_attn.bias", (3 * d,)), ("attn.c_proj.weight", (d, d)), ("attn.c_proj.bias", (d,)),
                 ("ln_2.weight", (d,)), ("ln_2.bias", (d,)), ("mlp.c_fc.weight", (d, 4 * d)),
                 ("mlp.c_fc.bias", (4 * d,)), ("mlp.c_proj.weight", (4 * d, d)), ("mlp.c_proj.bias", (d,))):
        g["transformer.h.0." + n] = s
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": L, "hidden_size": d,
             "num_attention_heads": H, "num_key_value_heads": 1, "intermediate_size": F,
             "max_position_embeddings": T, "vocab_size": V, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
             "tie_word_embeddings": False, "hidden_act": "silu"}
    kv = d // H
    ll = {"model.embed_tokens.weight": (V, d), "model.norm.weight": (d,), "lm_head.weight": (V, d)}
    for n, s in (("input_layernorm.weight", (d,)), ("self_attn.q_proj.weight", (d, d)),
                 ("self_attn.k_proj.weight", (kv, d)), ("self_attn.v_proj.weight", (kv, d)),
                 ("self_attn.o_proj.weight", (d, d)), ("post_attention_layernorm.weight", (d,)),
                 ("mlp.gate_proj.weight", (F, d)), ("mlp.up_proj.weight", (F, d)), ("mlp.down_proj.weight", (d, F))):
        ll["model.layers.0." + n] = s
    mixtral = dict(llama, architectures=["MixtralForCausalLM"], model_type="mixtral", num_local_experts=4,
                   num_experts_per_tok=2, router_aux_loss_coef=0.02, output_router_logits=False,
                   router_jitter_noise=0.0, sliding_window=None, rope_theta=1e6)
    qwen2 = dict(llama, architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False,
                 sliding_window=4096, max_window_layers=L)
    qwen3 = dict(qwen2, architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=2 * kv, attention_bias=False)
    mistral = dict(llama, architectures=["MistralForCausalLM"], model_type="mistral", head_dim=None, sliding_window=None)
    qwen3_moe = dict(qwen3, architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", num_experts=4,
                     num_experts_per_tok=2, moe_intermediate_size=F // 2, decoder_sparse_step=1, mlp_only_layers=[0],
                     norm_topk_prob=True, router_aux_loss_coef=0.001)
    return [("gpt2", gpt2, g), ("llama", llama, ll), ("mixtral", mixtral, None), ("qwen2", qwen2, None),
            ("qwen3", qwen3, None), ("mistral", mistral, None), ("qwen3_moe", qwen3_moe, None)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mcc-convert", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.out, ignore_errors=True)
    for path in glob.glob(os.path.join(ROOT, "models", "*.json")):
        put(a.out, "spec", os.path.basename(path), open(path, "rb").read())
    for i, (name, text, flags) in enumerate(bad_spec_cases()):
        put(a.out, "spec", "bad_%03d" % i, text.encode() + (SEP + "\n".join(flags).encode() if flags else b""))
    put(a.out, "spec", "flags_only", SEP + b"--num-layers\n2\n--hidden-size\n64\n--num-attention-heads\n4\n"
        b"--seq-length\n32\n--max-position-embeddings\n32\n--vocab-size\n257\n--tp\n2\n--sequence-parallel")
    for path in glob.glob(os.path.join(TESTS, "passes", "*.ir")) + [os.path.join(TESTS, "ep_layer.ir")]:
        put(a.out, "ir", os.path.basename(path), open(path, "rb").read())
    with tempfile.TemporaryDirectory() as tmp:
        megatron_indexed.cmd_synthetic(argparse.Namespace(prefix=os.path.join(tmp, "syn")))
        for idx in glob.glob(os.path.join(tmp, "syn_*.idx")):
            data = open(idx, "rb").read() + SEP + open(idx[:-4] + ".bin", "rb").read()
            put(a.out, "idx", os.path.basename(idx)[:-4], data)
        put(a.out, "safetensors", "dtypes", st_bytes({"a": ("F32", (2, 3)), "b": ("BF16", (3,)), "c": ("F16", ()),
                                                      "d": ("I32", (1, 1, 2)), "e": ("I64", (0, 4))}, {"format": "pt"}))
        for name, config, shapes in hf_models():
            put(a.out, "hf_config", name + ".json", json.dumps(config, indent=2))
            if not shapes:
                continue
            hf, ck = os.path.join(tmp, "hf_" + name), os.path.join(tmp, "ck_" + name)
            os.makedirs(hf)
            json.dump(config, open(os.path.join(hf, "config.json"), "w"))
            st = st_bytes({n: ("F32", s) for n, s in shapes.items()}, {"format": "pt"})
            open(os.path.join(hf, "model.safetensors"), "wb").write(st)
            put(a.out, "safetensors", "hf_" + name, st)
            subprocess.run([a.mcc_convert, "--from", "hf", hf, ck], check=True, stderr=subprocess.DEVNULL)
            it = os.path.join(ck, "iter_0000000")
            files = [open(os.path.join(it, f), "rb").read()
                     for f in ("manifest.json", "rank_00000.json", "rank_00000.safetensors")]
            put(a.out, "checkpoint", "ck_" + name, SEP.join(files))
            put(a.out, "safetensors", "rank_" + name, files[2])
    for path in glob.glob(os.path.join(HERE, "regressions", "*", "*")):
        put(a.out, os.path.basename(os.path.dirname(path)), os.path.basename(path), open(path, "rb").read())
    return 0


if __name__ == "__main__":
    sys.exit(main())

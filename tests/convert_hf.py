#!/usr/bin/python3
"""convert_hf.py — the Hugging Face side of `mcc convert`'s tests, without transformers: a
safetensors reader and writer written from the format's spec, and the forwards of GPT2LMHeadModel
and of LlamaForCausalLM's kin (MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM,
Qwen3ForCausalLM, Qwen3MoeForCausalLM) and DeepseekV3ForCausalLM (deepseek_forward) written by hand from transformers' conventions (Conv1D
weights [in, out], c_attn's fused q|k|v, rotate_half rope, repeat_kv, an explicit head_dim, Qwen2's
q/k/v biases, Qwen3's q_norm/k_norm before rope, a sliding window, the sparse MoE blocks of Mixtral
and Qwen3-MoE: the softmax of the router's logits over every expert, its top k, renormalised (Qwen3-MoE:
under norm_topk_prob), down(silu(gate x) * up x); Qwen3-MoE's dense layers by mlp_only_layers and
decoder_sparse_step), in float64.

  convert_hf.py make --arch gpt2|llama|mixtral|qwen2|qwen3|mistral|qwen3_moe --out DIR [--shard-bytes N]
                     [--dtype F32|BF16|F16] [--variant]
      a random model directory (config.json, model.safetensors or shards with the index)
  convert_hf.py same HF_A HF_B [--spec SPEC --ckpt CKPT_DIR] [--export-defaults] [--other-architecture]
      every tensor of B equals A's to the bit (after widening A's to f32), configs agree as the
      model reads them (model_config; but the training settings EXPORT_DEFAULTS, with
      --export-defaults, and the architecture's name, with --other-architecture, which wants it to
      differ); with
      --spec, then `logits --hf HF_B` in the same process (one start of torch the fewer)
  convert_hf.py logits --hf DIR --spec SPEC --ckpt CKPT_DIR [-- spec flags]
      the HF forward on DIR's weights equals tests/torch_ref.py's mcc forward on the checkpoint's
  convert_hf.py ckpt-same PARAMS.mcct CKPT_DIR [--expert-bias-from TRAINED_CKPT]
      the one-rank checkpoint's parameters equal the dumped ones to the bit (its vocabulary's padding
      rows zero: an import's), and its MoE expert biases TRAINED_CKPT's (DeepSeek-V3's
      e_score_correction_bias)
  convert_hf.py logits --hf DIR --dump DUMP_DIR
      the HF forward on the tokens train_rank dumped equals its dumped step-1 logits, and where step 1
      was one micro-batch, the cross entropy of those logits its step-1 lm loss (steps.txt)
Run with /usr/bin/python3 (Debian's torch 1.13 CPU). Exit status 1 naming what differs."""
import argparse
import glob
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rope_scaling_ref  # noqa: E402
import torch_ref  # noqa: E402

# ---- safetensors: u64 header length, JSON header, raw little-endian data ----------------------

ST_DTYPES = {"F32": (np.float32, 4), "BF16": (np.uint16, 2), "F16": (np.float16, 2), "I32": (np.int32, 4),
             "I64": (np.int64, 8)}


def st_read(path):
    """{name: (dtype name, np array as stored)}, checking the header against the file."""
    buf = open(path, "rb").read()
    (n,) = struct.unpack_from("<Q", buf, 0)
    if 8 + n > len(buf):
        sys.exit(f"{path}: header length {n} past the file's {len(buf)} bytes")
    header = json.loads(buf[8:8 + n])
    meta = header.pop("__metadata__", {})
    out, end = {}, 0
    for name, t in header.items():
        dt, size = ST_DTYPES[t["dtype"]]
        b, e = t["data_offsets"]
        count = int(np.prod(t["shape"], dtype=np.int64))
        if e - b != count * size or 8 + n + e > len(buf):
            sys.exit(f"{path}: tensor {name}: offsets {b}..{e} do not hold {t['shape']} of {t['dtype']}")
        out[name] = (t["dtype"], np.frombuffer(buf, dt, count, 8 + n + b).reshape(t["shape"]))
        end = max(end, e)
    if 8 + n + end != len(buf):
        sys.exit(f"{path}: {len(buf) - 8 - n - end} bytes after the last tensor")
    return out, meta


def st_write(path, tensors, dtype):
    """tensors: {name: float64 array}, stored as dtype (F32, BF16 by truncation, F16)."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        f32 = np.ascontiguousarray(a, np.float32)
        raw = {"F32": f32, "BF16": (f32.view(np.uint32) >> 16).astype(np.uint16), "F16": f32.astype(np.float16)}[dtype]
        blob = raw.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(blob)]}
        blobs.append(blob)
        off += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def widen(dtype, a):
    """The stored values as float32, exactly."""
    if dtype == "BF16":
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float32)


def hf_load(d):
    """A model directory: (config, {name: float32 array}), single file or sharded with the index."""
    config = json.load(open(os.path.join(d, "config.json")))
    single = os.path.join(d, "model.safetensors")
    files = [single] if os.path.exists(single) else \
        sorted({os.path.join(d, f) for f in json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"].values()})
    weights = {}
    for path in files:
        tensors, meta = st_read(path)
        if meta.get("format") != "pt":
            sys.exit(f"{path}: __metadata__ has no \"format\": \"pt\" (transformers refuses such a file)")
        weights.update({n: widen(dt, a) for n, (dt, a) in tensors.items()})
    return config, weights


# ---- the HF models' forwards, float64 ---------------------------------------------------------

def gpt2_forward(c, w, tokens):
    p = {n: torch.tensor(a, dtype=torch.float64) for n, a in w.items()}
    H, d = c["n_head"], c["n_embd"]
    B, T = tokens.shape
    x = p["transformer.wte.weight"][tokens] + p["transformer.wpe.weight"][:T]
    for i in range(c["n_layer"]):
        h = f"transformer.h.{i}."
        y = F.layer_norm(x, (d,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], c["layer_norm_epsilon"])
        qkv = y @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]  # Conv1D: x W + b, W [in, out]
        q, k, v = (t.view(B, T, H, d // H).transpose(1, 2) for t in qkv.split(d, dim=2))
        s = (q @ k.transpose(-1, -2)) / math.sqrt(d // H)
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        a = (s @ v).transpose(1, 2).reshape(B, T, d)
        x = x + a @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        y = F.layer_norm(x, (d,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], c["layer_norm_epsilon"])
        y = F.gelu(y @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"], approximate="tanh")  # gelu_new
        x = x + y @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (d,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], c["layer_norm_epsilon"])
    return x @ p["transformer.wte.weight"].T  # lm_head tied to wte


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def sparse_moe(x, p, prefix, experts, k, renorm, names):
    """A sparse MoE block on x [N,d] (MixtralSparseMoeBlock, Qwen3MoeSparseMoeBlock): the softmax of
    the router's logits over every expert, its top k (renormalised to sum 1 where renorm), expert e's
    down(silu(gate x) * up x) weighted; names: the (gate, up, down) matrices' names under
    prefix.experts.{e}., the router prefix.gate."""
    weights, chosen = torch.topk((x @ p[prefix + "gate.weight"].T).softmax(-1), k, dim=-1)
    if renorm:
        weights = weights / weights.sum(-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(experts):
        tok, slot = (chosen == e).nonzero(as_tuple=True)
        gate, up, down = (p[f"{prefix}experts.{e}.{m}.weight"] for m in names)
        xe = x[tok]
        out = out.index_add(0, tok, weights[tok, slot, None] * ((F.silu(xe @ gate.T) * (xe @ up.T)) @ down.T))
    return out


def qwen3_moe_sparse(c, i):
    """Qwen3MoeDecoderLayer's choice: layer i's MLP is the sparse block, or the dense one."""
    return c.get("num_experts", 0) > 0 and i not in (c.get("mlp_only_layers") or []) and \
        (i + 1) % c.get("decoder_sparse_step", 1) == 0


def sliding_window(c, i):
    """Layer i's attention window as transformers reads config.json (None: every earlier position):
    Mistral's and Mixtral's sliding_window; Qwen's only under use_sliding_window, from layer
    max_window_layers on."""
    if c["model_type"] in ("mistral", "mixtral"):
        return c.get("sliding_window")
    if c.get("use_sliding_window") and i >= c.get("max_window_layers", 0):
        return c.get("sliding_window")
    return None


def llama_forward(c, w, tokens):
    """LlamaForCausalLM and its kin, on config.json's keys: an explicit head_dim (q [H*Dh, d], o
    [d, H*Dh]), any projection's bias the file has (LLaMA's attention_bias and mlp_bias, Qwen2's q, k,
    v), Qwen3's q_norm and k_norm (RMSNorm over each head's Dh of q and k, before rope), a sliding
    window, and the MLP of the layer: dense, Mixtral's sparse block, or Qwen3-MoE's."""
    p = {n: torch.tensor(a, dtype=torch.float64) for n, a in w.items()}
    H, G, d = c["num_attention_heads"], c["num_key_value_heads"], c["hidden_size"]
    Dh, eps = c.get("head_dim") or d // H, c["rms_norm_eps"]
    B, T = tokens.shape

    def rms(x, wt):
        return wt * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def lin(x, name):
        return x @ p[name + ".weight"].T + (p[name + ".bias"] if name + ".bias" in p else 0)

    def heads(y, h, proj, n):  # [B,T,d] -> [B,n,T,Dh], q_norm / k_norm on the [B,T,n,Dh] view
        t = lin(y, f"{h}self_attn.{proj}_proj").view(B, T, n, Dh)
        norm = f"{h}self_attn.{proj}_norm.weight"
        return (rms(t, p[norm]) if norm in p else t).transpose(1, 2)

    inv_freq = rope_scaling_ref.inv_freq(c, Dh)  # transformers' (rope_scaling llama3 too)
    emb = torch.cat([torch.arange(T, dtype=torch.float64)[:, None] * inv_freq] * 2, dim=-1)  # [T, Dh]
    cos, sin = emb.cos(), emb.sin()
    pos = torch.arange(T)
    x = p["model.embed_tokens.weight"][tokens]
    for i in range(c["num_hidden_layers"]):
        h = f"model.layers.{i}."
        y = rms(x, p[h + "input_layernorm.weight"])
        q, k, v = heads(y, h, "q", H), heads(y, h, "k", G), heads(y, h, "v", G)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // G, dim=1), v.repeat_interleave(H // G, dim=1)  # repeat_kv
        s = (q @ k.transpose(-1, -2)) / math.sqrt(Dh)
        masked = pos[None, :] > pos[:, None]  # causal: key j after query i
        window = sliding_window(c, i)
        if window is not None:
            masked = masked | (pos[:, None] - pos[None, :] >= window)
        s = s.masked_fill(masked, float("-inf")).softmax(-1)
        x = x + lin((s @ v).transpose(1, 2).reshape(B, T, H * Dh), h + "self_attn.o_proj")
        y = rms(x, p[h + "post_attention_layernorm.weight"]).reshape(-1, d)
        if "num_local_experts" in c:
            y = sparse_moe(y, p, h + "block_sparse_moe.", c["num_local_experts"], c["num_experts_per_tok"], True,
                           ("w1", "w3", "w2"))
        elif qwen3_moe_sparse(c, i):
            y = sparse_moe(y, p, h + "mlp.", c["num_experts"], c["num_experts_per_tok"],
                           c.get("norm_topk_prob", False), ("gate_proj", "up_proj", "down_proj"))
        else:
            y = lin(F.silu(lin(y, h + "mlp.gate_proj")) * lin(y, h + "mlp.up_proj"), h + "mlp.down_proj")
        x = x + y.reshape(B, T, d)
    x = rms(x, p["model.norm.weight"])
    head = p["model.embed_tokens.weight"] if c.get("tie_word_embeddings") else p["lm_head.weight"]
    return x @ head.T


def deepseek_moe(x, p, prefix, c):
    """DeepseekV3MoE on x [N,d]: DeepseekV3TopkRouter's sigmoid of the logits, the expert bias
    (e_score_correction_bias) added for choosing only; n_group groups each scored by the sum of its
    top 2, the best topk_group kept (the others' experts masked to 0.0, transformers' fill); the top
    num_experts_per_tok of those, weighted by their sigmoid (renormalised under norm_topk_prob),
    times routed_scaling_factor; plus shared_experts on every token."""
    E, K = c["n_routed_experts"], c["num_experts_per_tok"]
    groups, keep = c.get("n_group", 1), c.get("topk_group", 1)
    scores = (x @ p[prefix + "gate.weight"].T).sigmoid()
    choice = scores + p[prefix + "gate.e_score_correction_bias"]
    group_scores = choice.view(-1, groups, E // groups).topk(2, dim=-1)[0].sum(-1)
    kept = torch.zeros_like(group_scores).scatter(1, torch.topk(group_scores, keep, dim=-1)[1], 1)
    mask = kept.unsqueeze(-1).expand(-1, groups, E // groups).reshape(-1, E)
    chosen = torch.topk(choice.masked_fill(~mask.bool(), 0.0), K, dim=-1)[1]
    weights = scores.gather(1, chosen)
    if c.get("norm_topk_prob", True):
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
    weights = weights * c.get("routed_scaling_factor", 1.0)

    def mlp(y, h):
        return (F.silu(y @ p[h + "gate_proj.weight"].T) * (y @ p[h + "up_proj.weight"].T)) @ p[h + "down_proj.weight"].T

    out = torch.zeros_like(x)
    for e in range(E):
        tok, slot = (chosen == e).nonzero(as_tuple=True)
        out = out.index_add(0, tok, weights[tok, slot, None] * mlp(x[tok], f"{prefix}experts.{e}."))
    return out + mlp(x, prefix + "shared_experts.")


def deepseek_forward(c, w, tokens):
    """DeepseekV3ForCausalLM as transformers computes it: multi-latent attention (q through q_a_proj,
    q_a_layernorm and q_b_proj, or q_proj; kv_a_proj_with_mqa's kv latent, normed, through kv_b_proj
    into each head's k_nope and v, its last qk_rope_head_dim channels the rope key every head
    shares), rope on q_pe and k_pe after apply_rotary_pos_emb_interleave's view (Dr/2, 2) and
    transpose (the checkpoint's rope channels interleaved), YaRN's frequencies and cos/sin scaled by
    its attention factor, the softmax scale qk_head_dim^-0.5 times yarn_get_mscale(factor,
    mscale_all_dim)^2; dense MLPs before first_k_dense_replace, DeepseekV3MoE after."""
    p = {n: torch.tensor(a, dtype=torch.float64) for n, a in w.items()}
    H, d, eps = c["num_attention_heads"], c["hidden_size"], c["rms_norm_eps"]
    Dn, Dr, Dv, R = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
    B, T = tokens.shape
    scale = (Dn + Dr) ** -0.5
    rs = c.get("rope_scaling")
    if rs:
        f = rs["factor"]
        inv, _ = rope_scaling_ref.yarn_inv_freq(c["rope_theta"], Dr, f, rs["original_max_position_embeddings"],
                                                rs.get("beta_fast") or 32, rs.get("beta_slow") or 1, 1, 0)
        mscale, mad = rs.get("mscale"), rs.get("mscale_all_dim")
        get = rope_scaling_ref.yarn_get_mscale
        attention_factor = get(f, mscale) / get(f, mad) if mscale and mad else get(f, 1)
        if mad:
            scale *= get(f, mad) ** 2
    else:
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, Dr, 2, dtype=torch.float64) / Dr))
        attention_factor = 1.0
    emb = torch.cat([torch.arange(T, dtype=torch.float64)[:, None] * inv] * 2, dim=-1)  # [T, Dr]
    cos, sin = emb.cos() * attention_factor, emb.sin() * attention_factor

    def rms(x, wt):
        return wt * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rope(t):  # apply_rotary_pos_emb_interleave
        t = t.view(*t.shape[:-1], Dr // 2, 2).transpose(-1, -2).reshape(t.shape)
        return t * cos + rotate_half(t) * sin

    pos = torch.arange(T)
    x = p["model.embed_tokens.weight"][tokens]
    for i in range(c["num_hidden_layers"]):
        h = f"model.layers.{i}."
        a = h + "self_attn."
        y = rms(x, p[h + "input_layernorm.weight"])
        if c.get("q_lora_rank"):
            q = rms(y @ p[a + "q_a_proj.weight"].T, p[a + "q_a_layernorm.weight"]) @ p[a + "q_b_proj.weight"].T
        else:
            q = y @ p[a + "q_proj.weight"].T
        q = q.view(B, T, H, Dn + Dr).transpose(1, 2)
        ckv = y @ p[a + "kv_a_proj_with_mqa.weight"].T
        c_kv, k_pe = ckv[..., :R], ckv[..., R:].reshape(B, 1, T, Dr)
        kv = (rms(c_kv, p[a + "kv_a_layernorm.weight"]) @ p[a + "kv_b_proj.weight"].T).view(B, T, H, Dn + Dv)
        kv = kv.transpose(1, 2)
        q = torch.cat([q[..., :Dn], rope(q[..., Dn:])], -1)
        k = torch.cat([kv[..., :Dn], rope(k_pe).expand(B, H, T, Dr)], -1)
        s = (q @ k.transpose(-1, -2)) * scale
        s = s.masked_fill(pos[None, :] > pos[:, None], float("-inf")).softmax(-1)
        o = (s @ kv[..., Dn:]).transpose(1, 2).reshape(B, T, H * Dv)
        x = x + o @ p[a + "o_proj.weight"].T
        y = rms(x, p[h + "post_attention_layernorm.weight"]).reshape(-1, d)
        if i >= c.get("first_k_dense_replace", 0):
            y = deepseek_moe(y, p, h + "mlp.", c)
        else:
            m = h + "mlp."
            y = (F.silu(y @ p[m + "gate_proj.weight"].T) * (y @ p[m + "up_proj.weight"].T)) @ p[m + "down_proj.weight"].T
        x = x + y.reshape(B, T, d)
    x = rms(x, p["model.norm.weight"])
    head = p["model.embed_tokens.weight"] if c.get("tie_word_embeddings") else p["lm_head.weight"]
    return x @ head.T


HF_FORWARDS = {"GPT2LMHeadModel": gpt2_forward, "LlamaForCausalLM": llama_forward, "MistralForCausalLM": llama_forward,
               "MixtralForCausalLM": llama_forward, "Qwen2ForCausalLM": llama_forward, "Qwen3ForCausalLM": llama_forward,
               "Qwen3MoeForCausalLM": llama_forward, "DeepseekV3ForCausalLM": deepseek_forward}


def hf_forward(config, weights, tokens):
    return HF_FORWARDS[config["architectures"][0]](config, weights, tokens)


# ---- commands -----------------------------------------------------------------------------------

# config.json of each LLaMA-family architecture, its keys as the named model's file has them (the
# sizes tiny), and what --variant changes
FAMILY = {
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    # mistralai/Mixtral-8x7B-v0.1
    "mixtral": {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 4,
                "num_experts_per_tok": 2, "intermediate_size": 48, "router_aux_loss_coef": 0.02,
                "output_router_logits": False, "router_jitter_noise": 0.0, "sliding_window": None, "rope_theta": 1e6},
    # Qwen/Qwen2.5-0.5B: q, k, v biased, no head_dim key, the window off
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "rms_norm_eps": 1e-6, "rope_theta": 1e6,
              "use_sliding_window": False, "sliding_window": 32, "max_window_layers": 2, "attention_dropout": 0.0},
    # Qwen/Qwen3-0.6B: head_dim 32, not hidden_size / heads 16; q_norm, k_norm
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "head_dim": 32, "attention_bias": False,
              "attention_dropout": 0.0, "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2,
              "rope_scaling": None, "rms_norm_eps": 1e-6},
    # mistralai/Mistral-7B-v0.1's window (4096: past the model's positions), Mistral-Nemo's head_dim (128 of
    # 5120 / 32 heads: here 32 of 64 / 4)
    "mistral": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "head_dim": 32, "sliding_window": 4096,
                "attention_dropout": 0.0},
    # Qwen/Qwen3-30B-A3B: Qwen3's attention; 3 layers, the first dense (mlp_only_layers)
    "qwen3_moe": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_hidden_layers": 3,
                  "head_dim": 32, "attention_bias": False, "attention_dropout": 0.0, "use_sliding_window": False,
                  "sliding_window": None, "max_window_layers": 3, "rope_scaling": None, "rope_theta": 1e6,
                  "rms_norm_eps": 1e-6, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48,
                  "decoder_sparse_step": 1, "mlp_only_layers": [0], "norm_topk_prob": True,
                  "router_aux_loss_coef": 0.001, "output_router_logits": False},
}
VARIANT = {
    "llama": dict(tie_word_embeddings=True, attention_bias=True, mlp_bias=True, rms_norm_eps=1e-6,
                  **rope_scaling_ref.llama3_config(500000.0, 8.0)),  # LLaMA 3.1's rope (scaled, base 500000), biases
    "mixtral": dict(tie_word_embeddings=True, num_experts_per_tok=1),
    "qwen2": dict(tie_word_embeddings=True),
    "qwen3": dict(tie_word_embeddings=True, rope_theta=1e6),
    "mistral": dict(sliding_window=None, head_dim=None),
    # the weights of the top 1 as the softmax gave them; layer 1 alone sparse (decoder_sparse_step)
    "qwen3_moe": dict(norm_topk_prob=False, num_experts_per_tok=1, decoder_sparse_step=2, mlp_only_layers=[]),
}


def llama_family(arch, variant, L, d, V, T):
    """(config.json, {name: shape}) of a random ARCH model: 4 heads, 2 kv heads."""
    config = {"architectures": None, "model_type": None, "num_hidden_layers": L, "hidden_size": d,
              "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
              "max_position_embeddings": T, "vocab_size": V, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "tie_word_embeddings": False, "hidden_act": "silu"}
    config.update(FAMILY[arch], **(VARIANT[arch] if variant else {}))
    H, G, L = config["num_attention_heads"], config["num_key_value_heads"], config["num_hidden_layers"]
    Dh, Fh = config.get("head_dim") or d // H, config["intermediate_size"]
    dense = [("mlp.gate_proj.weight", (Fh, d)), ("mlp.up_proj.weight", (Fh, d)), ("mlp.down_proj.weight", (d, Fh))]
    shapes = {"model.embed_tokens.weight": (V, d)}
    for i in range(L):
        h = f"model.layers.{i}."
        attn = [("input_layernorm.weight", (d,)), ("self_attn.q_proj.weight", (H * Dh, d)),
                ("self_attn.k_proj.weight", (G * Dh, d)), ("self_attn.v_proj.weight", (G * Dh, d)),
                ("self_attn.o_proj.weight", (d, H * Dh)), ("post_attention_layernorm.weight", (d,))]
        if arch == "qwen2":  # Qwen2Attention: q, k, v biased, o not
            attn += [(f"self_attn.{m}_proj.bias", (n * Dh,)) for m, n in (("q", H), ("k", G), ("v", G))]
        if arch.startswith("qwen3"):
            attn += [("self_attn.q_norm.weight", (Dh,)), ("self_attn.k_norm.weight", (Dh,))]
        if arch == "mixtral":
            E, Fe = config["num_local_experts"], config["intermediate_size"]
            mlp = [("block_sparse_moe.gate.weight", (E, d))] + \
                [(f"block_sparse_moe.experts.{e}.{m}.weight", s) for e in range(E)
                 for m, s in (("w1", (Fe, d)), ("w2", (d, Fe)), ("w3", (Fe, d)))]
        elif arch == "qwen3_moe" and qwen3_moe_sparse(config, i):
            E, Fe = config["num_experts"], config["moe_intermediate_size"]
            mlp = [("mlp.gate.weight", (E, d))] + \
                [(f"mlp.experts.{e}.{m}.weight", s) for e in range(E)
                 for m, s in (("gate_proj", (Fe, d)), ("up_proj", (Fe, d)), ("down_proj", (d, Fe)))]
        else:
            mlp = dense
        shapes.update({h + n: s for n, s in attn + mlp})
    shapes["model.norm.weight"] = (d,)
    if config.get("attention_bias") and config.get("mlp_bias"):  # LLaMA's variant: every projection biased
        shapes.update({n[:-len("weight")] + "bias": s[:1] for n, s in list(shapes.items()) if n.endswith("_proj.weight")})
    if not config["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (V, d)
    return config, shapes


def make(a):
    rng = np.random.default_rng(7)
    L, d, V, T = 2, 64, 257, 32
    if a.arch == "gpt2":
        config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": L, "n_embd": d, "n_head": 4,
                  "n_positions": T, "vocab_size": V, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
        shapes = {"transformer.wte.weight": (V, d), "transformer.wpe.weight": (T, d)}
        for i in range(L):
            h = f"transformer.h.{i}."
            for n, s in (("ln_1.weight", (d,)), ("ln_1.bias", (d,)), ("attn.c_attn.weight", (d, 3 * d)),
                         ("attn.c_attn.bias", (3 * d,)), ("attn.c_proj.weight", (d, d)), ("attn.c_proj.bias", (d,)),
                         ("ln_2.weight", (d,)), ("ln_2.bias", (d,)), ("mlp.c_fc.weight", (d, 4 * d)),
                         ("mlp.c_fc.bias", (4 * d,)), ("mlp.c_proj.weight", (4 * d, d)), ("mlp.c_proj.bias", (d,))):
                shapes[h + n] = s
        shapes["transformer.ln_f.weight"] = shapes["transformer.ln_f.bias"] = (d,)
        buffers = {f"transformer.h.{i}.attn.bias": np.tril(np.ones((1, 1, T, T))) for i in range(L)}  # old files' mask
    else:
        config, shapes = llama_family(a.arch, a.variant, L, d, V, T)
        buffers = {}
    weights = {n: (1.0 + 0.1 * rng.standard_normal(s)) if n.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight",
                                                                       "layernorm.weight", "norm.weight"))
               else 0.05 * rng.standard_normal(s) for n, s in shapes.items()}
    weights.update(buffers)
    if a.variant and a.arch == "gpt2":  # names as openai-community/gpt2's own file has them
        weights = {n[len("transformer."):]: w for n, w in weights.items()}
    os.makedirs(a.out, exist_ok=True)
    json.dump(config, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    if not a.shard_bytes:
        st_write(os.path.join(a.out, "model.safetensors"), weights, a.dtype)
        return 0
    shards, cur, size = [], {}, 0
    for n, w in weights.items():
        if cur and size + w.size * 4 > a.shard_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[n], size = w, size + w.size * 4
    shards.append(cur)
    weight_map = {}
    for i, s in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        st_write(os.path.join(a.out, name), s, a.dtype)
        weight_map.update({n: name for n in s})
    json.dump({"metadata": {}, "weight_map": weight_map}, open(os.path.join(a.out, "model.safetensors.index.json"), "w"))
    return 0


def bits_equal(a, b):
    return a.shape == b.shape and a.dtype == b.dtype == np.float32 and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def verdict(what, failed):
    print(f"{what}, {len(failed)} differ")
    for f in failed:
        print("FAIL: " + f)
    return 1 if failed else 0


# config.json's training settings, not the model's function, which an export without --spec takes
# from mcc's defaults (the checkpoint does not record them): dropout, init std, the MoE aux loss
EXPORT_DEFAULTS = {"attention_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop", "initializer_range",
                   "router_aux_loss_coef", "aux_loss_alpha", "seq_aux"}
# what tells one architecture's file from another's (same --other-architecture)
ARCH_KEYS = {"architectures", "model_type"}


def model_config(c):
    """config.json as the model's function reads it: transformers' defaults written out (head_dim,
    Qwen3-MoE's norm_topk_prob), keys that compute nothing dropped (a Qwen window without
    use_sliding_window, a Mistral window past every position), Qwen3-MoE's decoder_sparse_step and
    mlp_only_layers as the list of its sparse layers. Two files of one function then agree."""
    c = dict(c)
    if "hidden_size" not in c or c["model_type"] == "deepseek_v3":  # GPT-2's keys are its own; DeepSeek's head_dim
        return c
    c["head_dim"] = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    if c["model_type"] in ("mistral", "mixtral"):
        if c.get("sliding_window") is not None and c["sliding_window"] >= c["max_position_embeddings"]:
            c["sliding_window"] = None
    elif c["model_type"].startswith("qwen") and not c.get("use_sliding_window", False):
        c["sliding_window"] = c["max_window_layers"] = None
    if c["model_type"] == "qwen3_moe":
        c["sparse_layers"] = [i for i in range(c["num_hidden_layers"]) if qwen3_moe_sparse(c, i)]
        c["norm_topk_prob"] = c.get("norm_topk_prob", False)
        c.pop("decoder_sparse_step", None)
        c.pop("mlp_only_layers", None)
    return c


def same(a):
    ca, wa = hf_load(a.a)
    cb, wb = hf_load(a.b)
    failed = []
    wa = {n: w for n, w in wa.items() if not n.endswith(".attn.bias")}  # buffers mcc does not keep
    if any(n.startswith("transformer.") for n in wb):  # GPT-2's own files name them without the prefix
        wa = {n if n.startswith("transformer.") else "transformer." + n: w for n, w in wa.items()}
    if set(wa) != set(wb):
        failed.append(f"tensor names differ: {sorted(set(wa) ^ set(wb))}")
    for n in sorted(set(wa) & set(wb)):
        if not bits_equal(wa[n], wb[n]):
            failed.append(f"{n}: {wb[n].dtype}{list(wb[n].shape)} is not {a.a}'s f32{list(wa[n].shape)} to the bit")
    if a.other_architecture and ca["architectures"] == cb["architectures"]:
        failed.append(f"config.json architectures: both {ca['architectures']!r}, want two")
    ca, cb = model_config(ca), model_config(cb)
    for k, v in ca.items():
        if (a.export_defaults and k in EXPORT_DEFAULTS) or (a.other_architecture and k in ARCH_KEYS):
            continue
        if k in cb and cb[k] != v and not (isinstance(v, float) and math.isclose(v, cb[k], rel_tol=1e-15)):
            failed.append(f"config.json {k}: {cb[k]!r} != {v!r}")
    status = verdict(f"{len(wb)} tensors compared bit for bit", failed)
    if status or not a.spec:
        return status
    return logits(argparse.Namespace(hf=a.b, spec=a.spec, ckpt=a.ckpt, dump=None, flags=[]))


def mcc_weights(ckpt):
    """The parameters of a one-rank mcc checkpoint (its latest iteration), by mcc's names."""
    it = int(open(os.path.join(ckpt, "latest_checkpointed_iteration.txt")).read())
    files = glob.glob(os.path.join(ckpt, f"iter_{it:07d}", "rank_*.safetensors"))
    if len(files) != 1:
        sys.exit(f"{ckpt}: want a checkpoint of one rank, found {len(files)} rank files")
    tensors, _ = st_read(files[0])
    return {n: widen(dt, a) for n, (dt, a) in tensors.items() if not n.endswith((".adam_m", ".adam_v"))}


def ckpt_same(a):
    want, got = torch_ref.read_mcct(a.params), mcc_weights(a.ckpt)
    failed = []
    if a.expert_bias_from:  # an import's expert biases [2, E]: the trained checkpoint's bias row, counts zero
        ref = mcc_weights(a.expert_bias_from)
        for n in sorted(n for n in ref if n.endswith(".expert_bias")):
            g = got.pop(n, None)
            if g is None or g.shape != ref[n].shape or np.any(g[0] != 0) or not bits_equal(g[1], ref[n][1]):
                failed.append(f"{n}: not {a.expert_bias_from}'s bias row (row 0 zero)")
    failed += [f"tensor names differ: {sorted(set(want) ^ set(got))}"] if set(want) != set(got) else []
    vocab = json.load(open(os.path.join(a.ckpt, "spec.json")))["model"]["vocab_size"]
    for n in sorted(set(want) & set(got)):
        w, g = want[n], got[n]
        if n in ("embedding.word", "output.weight"):  # padded rows (to each layout's own multiple): not in HF's
            if np.any(g[vocab:] != 0):
                failed.append(f"{n}: the vocabulary's padding rows {vocab}.. are not zero")
            w, g = w[:vocab], g[:vocab]
        if not bits_equal(w, g):
            failed.append(f"{n}: {list(g.shape)} differs from the dumped {list(w.shape)}")
    return verdict(f"{len(got)} tensors of {a.ckpt} compared bit for bit with {a.params}", failed)


def logits(a):
    config, weights = hf_load(a.hf)
    if a.dump:
        batches = torch_ref.read_mcct(os.path.join(a.dump, "batches.mcct"))
        tokens = torch.from_numpy(batches["tokens.1.0"].astype(np.int64))
        want = torch_ref.read_mcct(os.path.join(a.dump, "logits_step1.mcct"))["logits"].astype(np.float64)
        what, rtol = "train_rank's step-1 logits (f32)", 1e-4
    else:
        c = torch_ref.load_config(a.spec, a.flags)
        tokens = torch.from_numpy(np.random.default_rng(3).integers(0, config["vocab_size"], (2, c["seq_length"])))
        p = {n: torch.tensor(w, dtype=torch.float64) for n, w in mcc_weights(a.ckpt).items()}
        want = torch_ref.forward(p, tokens, c, torch_ref.Dropout(c, 0)).numpy()
        what, rtol = "tests/torch_ref.py's mcc model on the checkpoint (float64)", 1e-9
    got = hf_forward(config, weights, tokens).numpy()
    V = config["vocab_size"]
    if got.shape[-1] != V or want.shape[-1] < V:
        sys.exit(f"FAIL: logits have {got.shape[-1]} columns, vocab_size {V}, the reference {want.shape[-1]}")
    err = torch_ref.rel_err(got, want[..., :V])
    print(f"HF forward of {a.hf} vs {what}: rel err {err:.3e} (rtol {rtol:g}) over {list(got.shape)}")
    if not err <= rtol:
        print("FAIL: the logits differ")
        return 1
    if a.dump and "tokens.1.1" not in batches:  # step 1's loss is this micro-batch's alone
        # mcc's softmax includes the padded vocabulary's columns (train_rank's: zero for an import)
        targets = torch.from_numpy(batches["targets.1.0"].astype(np.int64))
        padded = np.concatenate([got, want[..., V:]], -1)
        hf_loss = F.cross_entropy(torch.from_numpy(padded).reshape(-1, padded.shape[-1]), targets.reshape(-1)).item()
        loss = float(open(os.path.join(a.dump, "steps.txt")).readline().split()[1])
        print(f"HF cross entropy {hf_loss:.8f} (with train_rank's {padded.shape[-1] - V} padding columns) vs "
              f"train_rank's step-1 lm loss {loss:.8f}")
        if not math.isclose(hf_loss, loss, rel_tol=1e-6):
            print("FAIL: the losses differ")
            return 1
    print("PASS")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--arch", choices=["gpt2"] + list(FAMILY), required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--shard-bytes", type=int, default=0)
    m.add_argument("--dtype", choices=["F32", "BF16", "F16"], default="F32")
    m.add_argument("--variant", action="store_true",
                   help="gpt2: names without the transformer. prefix; the others: VARIANT's keys (llama: tied "
                        "embeddings, biases, LLaMA 3.1 rope; mixtral: tied, top 1; qwen2: tied; qwen3: tied, "
                        "rope_theta 1e6; mistral: sliding_window and head_dim null; qwen3_moe: top 1 not "
                        "renormalised, layer 1 alone sparse)")
    s = sub.add_parser("same")
    s.add_argument("a")
    s.add_argument("b")
    s.add_argument("--spec")
    s.add_argument("--ckpt")
    s.add_argument("--export-defaults", action="store_true",
                   help="B is an export without --spec: its EXPORT_DEFAULTS keys may differ from A's")
    s.add_argument("--other-architecture", action="store_true",
                   help="B is the same model as another architecture (Mistral's as LLaMA's): its ARCH_KEYS differ")
    cs = sub.add_parser("ckpt-same")
    cs.add_argument("params")
    cs.add_argument("ckpt")
    cs.add_argument("--expert-bias-from", help="the checkpoint whose expert biases (row 1) the import's must be")
    lg = sub.add_parser("logits")
    lg.add_argument("--hf", required=True)
    lg.add_argument("--spec")
    lg.add_argument("--ckpt")
    lg.add_argument("--dump")
    lg.add_argument("flags", nargs="*")
    a = ap.parse_args()
    return {"make": make, "same": same, "ckpt-same": ckpt_same, "logits": logits}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())

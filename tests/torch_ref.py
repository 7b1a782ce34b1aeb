#!/usr/bin/python3
"""torch_ref.py — checks a train_rank dump (--dump-dir) against a float64 PyTorch reference.

Loads the dumped initial parameters, rebuilds the model of SPEC.json in float64, replays every
dumped step (same batches, grad accumulation, clipping, AdamW, lr schedule, dropout masks) and
compares logits and gradients of step 1, each step's loss, lr and grad_norm and the final
parameters with what train_rank wrote. Spec fields the model was compiled with by flag are given after `--`, as mcc
takes them (e.g. -- --hidden-dropout 0.1). Exit status 0 when everything is within --rtol, 1
otherwise (each failure named). Run with /usr/bin/python3 (Debian's torch 1.13 CPU).
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_dumps import noise_driven, rel  # noqa: E402
import rope_scaling_ref  # noqa: E402

MCCT_DTYPES = {0: np.float32, 5: np.int32}  # the ir dtype codes a dump may use


def read_mcct(path):
    """Reads a .mcct file: b"MCCT", u32 version 1, u32 count, then per tensor u32 name_len,
    name, u32 dtype, u32 ndim, i64 dims[ndim], row-major data. Returns {name: np.ndarray}."""
    if not os.path.exists(path):
        sys.exit(f"torch_ref: {path} is missing: did train_rank run with --dump-dir?")
    buf = open(path, "rb").read()
    if buf[:4] != b"MCCT":
        sys.exit(f"torch_ref: {path} does not start with the magic b'MCCT'")
    version, count = struct.unpack_from("<II", buf, 4)
    if version != 1:
        sys.exit(f"torch_ref: {path} has .mcct version {version}; this reader knows version 1")
    pos, out = 12, {}
    for _ in range(count):
        (name_len,) = struct.unpack_from("<I", buf, pos)
        name = buf[pos + 4:pos + 4 + name_len].decode("utf-8")
        dtype, ndim = struct.unpack_from("<II", buf, pos + 4 + name_len)
        pos += 12 + name_len
        dims = struct.unpack_from(f"<{ndim}q", buf, pos)
        pos += 8 * ndim
        if dtype not in MCCT_DTYPES:
            sys.exit(f"torch_ref: {path}: tensor '{name}' has dtype code {dtype}; expected 0 (f32) or 5 (i32)")
        if name in out:
            sys.exit(f"torch_ref: {path}: tensor '{name}' appears twice")
        n = int(np.prod(dims, dtype=np.int64))
        out[name] = np.frombuffer(buf, MCCT_DTYPES[dtype], n, pos).reshape(dims)
        pos += n * 4
    if pos != len(buf):
        sys.exit(f"torch_ref: {path}: {len(buf) - pos} bytes after the last of {count} tensors")
    return out


def load_config(path, flags=()):
    """SPEC.json (model/parallel/training sections, Megatron names) with mcc's defaults; flags
    (`--hidden-dropout 0.1`, `--swiglu`) override fields as in mcc."""
    spec = json.load(open(path))
    c = {}
    for section in ("model", "parallel", "training"):
        c.update(spec.get(section, {}))
    flags = list(flags)
    while flags:
        key = flags.pop(0)
        if not key.startswith("--"):
            sys.exit(f"torch_ref: expected a --flag after --, got '{key}'")
        value = flags.pop(0) if flags and not flags[0].startswith("--") else "true"
        try:
            c[key[2:].replace("-", "_")] = json.loads(value)  # numbers, true, false
        except ValueError:
            c[key[2:].replace("-", "_")] = value  # a choice, e.g. selective
    c.setdefault("num_query_groups", c["num_attention_heads"])
    c.setdefault("max_position_embeddings", c["seq_length"])
    c.setdefault("ffn_hidden_size", 4 * c["hidden_size"])
    c.setdefault("normalization", "LayerNorm")
    c.setdefault("swiglu", c["normalization"] == "RMSNorm")  # frontend/spec.h: rmsnorm => swiglu
    if c.get("multi_latent_attention"):  # Megatron's MLA takes YaRN's rope by default (frontend/spec.c)
        c.setdefault("rope_type", "yarn")
    defaults = dict(position_embedding_type="learned_absolute", untie_embeddings_and_output_weights=False,
                    add_bias_linear=True, add_qkv_bias=False, qk_layernorm=False, norm_epsilon=1e-5, rotary_base=10000.0, use_rope_scaling=False,
                    squared_relu=False, apply_layernorm_1p=False, rotary_percent=1.0,
                    multi_latent_attention=False, q_lora_rank=0, kv_lora_rank=32, qk_head_dim=128,
                    qk_pos_emb_head_dim=64, v_head_dim=128,
                    rope_scaling_factor=8.0, rope_type="rope", rotary_scaling_factor=1.0,
                    yarn_original_max_position_embeddings=4096, yarn_beta_fast=32.0, yarn_beta_slow=1.0, mscale=1.0,
                    mscale_all_dim=0.0, micro_batch_size=1,
                    data_parallel_size=1, lr_decay_style="cosine", lr_warmup_iters=0, min_lr=0.0,
                    weight_decay=0.01, clip_grad=1.0, adam_beta1=0.9, adam_beta2=0.999, adam_eps=1e-8,
                    train_iters=10, seed=1234, attention_dropout=0.0, hidden_dropout=0.0,
                    mtp_num_layers=0, mtp_loss_scaling_factor=0.1)
    for k, v in defaults.items():
        c.setdefault(k, v)
    c.setdefault("global_batch_size", c["micro_batch_size"] * c["data_parallel_size"])
    c.setdefault("kv_channels", c["hidden_size"] // c["num_attention_heads"])
    # the vocabulary padded as Megatron's _vocab_size_with_padding does (mcc too): the embedding
    # and the logits have the padded rows, which no token reaches but the softmax includes
    multiple = c.get("make_vocab_size_divisible_by", 128) * c.get("tensor_model_parallel_size", 1)
    c["vocab_size"] = -(-c["vocab_size"] // multiple) * multiple
    return c


def param_shapes(c):
    """{name: shape} of every parameter the contract says train_rank has."""
    d, V, F_, L = c["hidden_size"], c["vocab_size"], c["ffn_hidden_size"], c["num_layers"]
    Dh = c["kv_channels"]
    qd, kvd = c["num_attention_heads"] * Dh, c["num_query_groups"] * Dh
    bias, layernorm = c["add_bias_linear"], c["normalization"] == "LayerNorm"
    shapes = {"embedding.word": (V, d)}
    if c["position_embedding_type"] == "learned_absolute":
        shapes["embedding.position"] = (c["max_position_embeddings"], d)

    def add(name, w_shape, has_bias):
        shapes[name + ".weight"] = w_shape
        if has_bias:
            shapes[name + ".bias"] = w_shape[:1]

    for i in range(L + c["mtp_num_layers"]):  # then the multi-token depths', layers L.. (mtp_depth)
        p = f"layers.{i}."
        if i >= L:
            for n in ("enorm", "hnorm", "final_norm"):
                add(p + n, (d,), layernorm)
            add(p + "eh_proj", (d, 2 * d), False)
        add(p + "input_norm", (d,), layernorm)
        if c["multi_latent_attention"]:
            mla_shapes(c, p + "attention.", add)
        else:
            for proj, rows in (("q", qd), ("k", kvd), ("v", kvd)):
                add(p + "attention." + proj, (rows, d), bias or c["add_qkv_bias"])
            if c["qk_layernorm"]:  # one norm over each head's Dh, for every head of q (and of k)
                add(p + "attention.q_norm", (Dh,), layernorm)
                add(p + "attention.k_norm", (Dh,), layernorm)
            add(p + "attention.out", (d, qd), bias)
        add(p + "post_attention_norm", (d,), layernorm)
        if is_moe_layer(c, i):
            shapes.update(moe_shapes(c, p + "mlp."))
            continue
        add(p + "mlp.up", (F_, d), bias)
        if c["swiglu"]:
            add(p + "mlp.gate", (F_, d), bias)
        add(p + "mlp.down", (d, F_), bias)
    add("final_norm", (d,), layernorm)
    if c["untie_embeddings_and_output_weights"]:
        shapes["output.weight"] = (V, d)
    return shapes


def mla_shapes(c, p, add):
    """Multi-latent attention's parameters (frontend/model.c's mla_block): q through its latent
    (q_down, its norm with qk_layernorm, q_up) or one projection (q), kv_down to the kv latent and the
    rope key, its norm, kv_up to every head's k and v, out; no biases but out's."""
    d, H, layernorm = c["hidden_size"], c["num_attention_heads"], c["normalization"] == "LayerNorm"
    qk, rank = c["qk_head_dim"] + c["qk_pos_emb_head_dim"], c["kv_lora_rank"]
    if c["q_lora_rank"]:
        add(p + "q_down", (c["q_lora_rank"], d), False)
        if c["qk_layernorm"]:
            add(p + "q_down_norm", (c["q_lora_rank"],), layernorm)
        add(p + "q_up", (H * qk, c["q_lora_rank"]), False)
    else:
        add(p + "q", (H * qk, d), False)
    add(p + "kv_down", (rank + c["qk_pos_emb_head_dim"], d), False)
    if c["qk_layernorm"]:
        add(p + "kv_down_norm", (rank,), layernorm)
    add(p + "kv_up", (H * (c["qk_head_dim"] + c["v_head_dim"]), rank), False)
    add(p + "out", (d, H * c["v_head_dim"]), c["add_bias_linear"])


# ---- dropout masks, as mcc draws them (kernels_templates/philox.cuh), written anew in numpy ----

PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # Random123's philox4x32 round multipliers
PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # and key increments
U32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(ctr, key):
    """Philox4x32-10 of counters ctr (4 arrays of 32-bit words, as uint64) under key (k0, k1)."""
    c0, c1, c2, c3 = (np.asarray(w, np.uint64) for w in ctr)
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + PHILOX_W[0]) & 0xFFFFFFFF, (k1 + PHILOX_W[1]) & 0xFFFFFFFF
        p0, p1 = c0 * np.uint64(PHILOX_M[0]), c2 * np.uint64(PHILOX_M[1])  # < 2^64: exact
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & U32, (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & U32
    return c0, c1, c2, c3


def dropout_factors(shape, first, p, seed, site):
    """The factors (0 or 1/(1-p)) of shape [B, *sample]: element e (row-major in its sample) of
    sample first + b takes word e % 4 of Philox4x32-10 at counter (e // 4, its high word, the
    sample, its high word) under key (seed, site), and is kept iff that word >= ceil(p 2^32)."""
    n = int(np.prod(shape[1:]))
    e = np.arange(n, dtype=np.uint64)[None, :]
    s = (first + np.arange(shape[0], dtype=np.uint64))[:, None]
    j = e >> np.uint64(2)
    words = philox4x32_10((j & U32, j >> np.uint64(32), s & U32, s >> np.uint64(32)), (seed, site))
    word = np.choose((e % np.uint64(4)).astype(np.int64) + np.zeros_like(s, dtype=np.int64), words)
    keep = word >= np.uint64(min(math.ceil(p * 2.0 ** 32), 2 ** 32 - 1))
    return torch.from_numpy(keep.reshape(shape) / (1.0 - p))


def dropout_site(layer, kind):
    """frontend/model.c's numbering of the sites: 0 the embedding output, then per layer its
    attention probabilities (kind 0), attention output (1) and MLP output (2), the multi-token
    depths' layers after the model's; then each depth k's embedding output (mtp_embedding_site)."""
    return 1 + 3 * layer + kind


def mtp_embedding_site(c, k):
    return dropout_site(c["num_layers"] + c["mtp_num_layers"], 0) + k - 1


class Dropout:
    """The training forward's dropout of one micro-batch whose first sample is `first` (its
    global index)."""

    def __init__(self, c, first):
        self.c, self.first = c, first

    def apply(self, x, p, site):
        return x if p == 0 else x * dropout_factors(tuple(x.shape), self.first, p, self.c["seed"], site)

    def hidden(self, x, site):
        return self.apply(x, self.c["hidden_dropout"], site)

    def probs(self, x, layer):
        return self.apply(x, self.c["attention_dropout"], dropout_site(layer, 0))


# ---- FP8 (passes/fp8.c, runtime/fp8.c), rounded by hand: torch 1.13 has no float8 -------------

FP8_FORMATS = {"e4m3": (3, 7, 448.0), "e5m2": (2, 15, 57344.0)}  # mantissa bits, bias, largest finite
FP8 = {}  # set by fp8_setup: the layers in FP8, the gradients' format, whether wgrad is FP8


def fp8_round(x, fmt):
    """x onto fmt's grid: nearest, ties to the even mantissa (torch.round), saturating at the
    largest finite value as CUDA's __NV_SATFINITE conversion; NaN stays NaN."""
    mbits, bias, top = FP8_FORMATS[fmt]
    a = x.abs()
    _, e = torch.frexp(a)  # a = f 2^e, f in [0.5, 1): a's exponent is e - 1
    e = (e - 1).clamp(min=1 - bias).to(x.dtype)  # the subnormals share the smallest normal quantum
    quantum = torch.pow(2.0, e - mbits)
    r = (torch.round(a / quantum) * quantum).clamp(max=top)
    return torch.where(torch.isnan(x), x, torch.copysign(r, x))


def fp8_quantize(x, fmt, key):
    """Dequantized: round(x * scale) * scale_inv. Tensorwise current scaling: scale = max / amax
    (1 when amax is 0). Delayed (FP8["delayed"]): the amax from the tensor's history as the step
    began (FP8["history"][key]: [the step's amax so far, the last steps' amaxes, the last first];
    most_recent or max of them), scale = max / amax / 2^margin, and x's amax folded into the step's
    (fp8_roll rolls it in after the optimizer step), as ops.def's fp8_history_amax, fp8_amax_fold.
    Scale and product in float32 as runtime/cpu_kernels.c computes them, so a tensor both hold
    exactly (the weights at step 1) rounds the same: float64's product would flip an element lying
    within half a float32 ulp of a tie (tiny-gpt2 has one: 45.9999970 x scale)."""
    x32 = x.detach().float()
    amax, margin = x32.abs().max(), 0
    if FP8["delayed"]:
        h = FP8["history"].setdefault(key, [torch.tensor(0.0)] * (1 + FP8["history_len"]))
        h[0] = torch.maximum(h[0], amax)
        amax = max(h[1:]) if FP8["algo"] == "max" else h[1]
        margin = FP8["margin"]
    scale = torch.tensor(FP8_FORMATS[fmt][2], dtype=torch.float32) / amax / 2.0**margin if amax > 0 else torch.tensor(1.0)
    return fp8_round((x32 * scale).double(), fmt) * (1 / scale).double()


def fp8_block_quantize(x, rows, cols):
    """Dequantized, blockwise (ops.def's fp8_block_quantize): x viewed as [R, C], a scale per rows x
    cols block, 448 / the block's amax rounded down to a power of 2 (1 when amax is 0), E4M3. An
    expert's rows (R not a multiple of rows: its wgrad's tiles along them) from its first row, the
    last block partial, its amax over the rows there (zero rows padded in, then cut off)."""
    x32 = x.detach().float().reshape(-1, x.shape[-1])
    R, C = x32.shape
    x32 = torch.cat([x32, x32.new_zeros(-R % rows, C)])
    blocks = x32.reshape(-1, rows, C // cols, cols)
    amax = blocks.abs().amax(dim=(1, 3), keepdim=True)
    _, e = torch.frexp(torch.tensor(448.0, dtype=torch.float32) / amax)
    scale = torch.where(amax > 0, torch.pow(2.0, (e - 1).float()), torch.ones_like(amax))
    q = fp8_round((blocks * scale).double(), "e4m3") * (1 / scale).double()
    return q.reshape(-1, C)[:R].reshape(x.shape)


def fp8_roll():
    """After the optimizer step: each history's step amax rolled in (ops.def's fp8_history_update)."""
    for h in FP8.get("history", {}).values():
        h[:] = [torch.tensor(0.0), h[0]] + h[1:-1]


def fp8_key(name, what, expert):
    """The amax history of `what` (x, w, dy) of weight `name`'s GEMM: mcc's global's name, and for
    expert e of a routed experts' weight its row e (`#e`: mcc's history is [E, 1 + len])."""
    return f"{name}.weight.amax_history.{what}" + ("" if expert is None else f"#{expert}")


class Fp8Linear(torch.autograd.Function):
    """y = q(x) q(w)^T, both E4M3; backward: dy quantized once in the gradient's format, dx = q(dy)
    q(w), dw = q(dy)^T q(x) (or dy^T x without FP8 wgrad), as fp8_matmul's gradient rule. name: the
    weight's, which names the three tensors' amax histories. An expert's GEMM (expert e of a routed
    experts' weight, Transformer Engine's GroupedLinear) is the same on its own rows and weight: each
    of x, w and dy scaled by its own amax (its own history row)."""

    @staticmethod
    def forward(ctx, x, w, name, expert=None):
        if FP8["blockwise"]:  # x in 1x128 tiles along K, w in 128x128 blocks
            qx, qw = fp8_block_quantize(x, 1, 128), fp8_block_quantize(w, 128, 128)
            ctx.save_for_backward(x, qx, qw)
            return qx @ qw.T
        qx, qw = fp8_quantize(x, "e4m3", fp8_key(name, "x", expert)), fp8_quantize(w, "e4m3", fp8_key(name, "w", expert))
        ctx.save_for_backward(x, qx, qw)
        ctx.name, ctx.expert = name, expert
        return qx @ qw.T

    @staticmethod
    def backward(ctx, dy):
        x, qx, qw = ctx.saved_tensors
        if FP8["blockwise"]:  # each GEMM's operands tiled along its reduction dim: N for dx, the tokens for dw
            a, b = (fp8_block_quantize(dy, 128, 1), fp8_block_quantize(x, 128, 1)) if FP8["wgrad"] else (dy, x)
            return fp8_block_quantize(dy, 1, 128) @ qw, a.reshape(-1, a.shape[-1]).T @ b.reshape(-1, b.shape[-1]), None, None
        qdy = fp8_quantize(dy, FP8["grad"], fp8_key(ctx.name, "dy", ctx.expert))
        a, b = (qdy, qx) if FP8["wgrad"] else (dy, x)
        return qdy @ qw, a.reshape(-1, a.shape[-1]).T @ b.reshape(-1, b.shape[-1]), None, None


def fp8_setup(c):
    """The FP8 flags as mcc reads them (frontend/spec.c): --fp8-format (or --fp8-hybrid),
    --no-fp8-wgrad (or --fp8-wgrad false), --first-last-layers-bf16 with its two counts, and
    --fp8-recipe (delayed, Megatron's default) with --fp8-amax-history-len, --fp8-amax-compute-algo
    and --fp8-margin (Megatron's defaults 1, most_recent, 0); blockwise: E4M3 throughout, no history."""
    fmt = "hybrid" if c.get("fp8_hybrid") else c.get("fp8_format", "none")
    if fmt == "none":
        return
    L, start, end = c["num_layers"], 0, 0
    if c.get("first_last_layers_bf16"):
        start, end = c.get("num_layers_at_start_in_bf16", 1), c.get("num_layers_at_end_in_bf16", 1)
    mtp = range(L, L + c["mtp_num_layers"])  # the multi-token depths' layers: always (Megatron's global context)
    FP8.update(layers=set(range(start, L - end)) | set(mtp), grad="e5m2" if fmt == "hybrid" else "e4m3",
               wgrad=c.get("fp8_wgrad", True) and not c.get("no_fp8_wgrad"),
               delayed=c.get("fp8_recipe", "delayed") == "delayed", history={},
               blockwise=c.get("fp8_recipe") == "blockwise",
               history_len=c.get("fp8_amax_history_len", 1), algo=c.get("fp8_amax_compute_algo", "most_recent"),
               margin=c.get("fp8_margin", 0))


# ---- the model, float64 -----------------------------------------------------------------------

def linear(x, p, name):
    parts = name.split(".")
    if FP8 and parts[0] == "layers" and int(parts[1]) in FP8["layers"]:
        y = Fp8Linear.apply(x, p[name + ".weight"], name)
    else:
        y = x @ p[name + ".weight"].T
    return y + p[name + ".bias"] if name + ".bias" in p else y


def norm(x, p, name, c):
    w, eps = p[name + ".weight"], c["norm_epsilon"]
    if c["apply_layernorm_1p"]:  # Megatron's --apply-layernorm-1p (either norm): the stored weight is zero-centred
        w = 1 + w
    if c["normalization"] == "RMSNorm":  # torch 1.13 has no nn.RMSNorm
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
    return F.layer_norm(x, w.shape, w, p[name + ".bias"], eps)


def rope(x, c):
    """Rotate-half rope of x [B,T,heads,Dh]: pairs (i, i + Dh/2) turn by t * base^(-2i/Dh), LLaMA 3.1's
    frequencies with use_rope_scaling (tests/rope_scaling_ref.py: transformers' definition), YaRN's with
    rope_type yarn (rope_scaling_ref.yarn_inv_freq: Megatron's; cos and sin times its concentration). With
    rotary_percent < 1 (Megatron's apply_rotary_pos_emb) only the first int(Dh * percent) channels
    turn, Dh being that width in the frequencies; the rest pass through."""
    rot = int(x.shape[3] * c["rotary_percent"])
    if rot < x.shape[3]:
        return torch.cat([rope(x[..., :rot], dict(c, rotary_percent=1.0)), x[..., rot:]], dim=-1)
    T, Dh = x.shape[1], x.shape[3]
    base = c["rotary_base"]
    inv_freq = base ** (-2.0 * torch.arange(Dh // 2, dtype=x.dtype) / Dh)
    concentration = 1.0
    if c["use_rope_scaling"]:
        inv_freq = rope_scaling_ref.inv_freq(rope_scaling_ref.llama3_config(base, c["rope_scaling_factor"]), Dh).to(x.dtype)
    if c["rope_type"] == "yarn":
        inv_freq, concentration = rope_scaling_ref.yarn_inv_freq(
            base, Dh, c["rotary_scaling_factor"], c["yarn_original_max_position_embeddings"], c["yarn_beta_fast"],
            c["yarn_beta_slow"], c["mscale"], c["mscale_all_dim"])
        inv_freq = inv_freq.to(x.dtype)
    angle = torch.arange(T, dtype=x.dtype)[:, None] * inv_freq  # [T, Dh/2]
    cos, sin = concentration * angle.cos()[:, None, :], concentration * angle.sin()[:, None, :]
    x1, x2 = x[..., :Dh // 2], x[..., Dh // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def causal_attention(q, k, v, drop, layer, scale=1.0):
    """softmax(scale q k^T / sqrt(D)) v, causal, of q, k [B,T,H,D] and v [B,T,H,Dv] -> [B,T,H Dv]"""
    B, T, H, D = q.shape
    scores = torch.einsum("bthd,bshd->bhts", q, k) * scale / math.sqrt(D)  # [B,H,T,T]
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)
    probs = drop.probs(scores.masked_fill(causal, float("-inf")).softmax(-1), layer)  # [B,H,T,T]
    return torch.einsum("bhts,bshd->bthd", probs, v).reshape(B, T, H * v.shape[3])


def mla_attention(x, p, name, c, drop, layer):
    """DeepSeek-V3's multi-latent attention (HF's DeepseekV3Attention with rotate-half rope, as
    Megatron's MLASelfAttention after its de-interleave): q and k of each head its qk_head_dim
    channels without position and qk_pos_emb_head_dim turned by rope, k's shared by every head."""
    B, T, _ = x.shape
    H, Dn, Dr, Dv, rank = (c["num_attention_heads"], c["qk_head_dim"], c["qk_pos_emb_head_dim"], c["v_head_dim"],
                           c["kv_lora_rank"])
    whole = dict(c, rotary_percent=1.0)

    def latent(y, norm_name):
        return norm(y, p, norm_name, c) if c["qk_layernorm"] else y

    if c["q_lora_rank"]:
        q = linear(latent(linear(x, p, name + ".q_down"), name + ".q_down_norm"), p, name + ".q_up")
    else:
        q = linear(x, p, name + ".q")
    q = q.view(B, T, H, Dn + Dr)
    q = torch.cat([q[..., :Dn], rope(q[..., Dn:], whole)], dim=-1)
    ckv = linear(x, p, name + ".kv_down")  # [B,T,rank+Dr]
    k_pe = rope(ckv[..., rank:].reshape(B, T, 1, Dr), whole)
    kv = linear(latent(ckv[..., :rank], name + ".kv_down_norm"), p, name + ".kv_up").view(B, T, H, Dn + Dv)
    k = torch.cat([kv[..., :Dn], k_pe.expand(B, T, H, Dr)], dim=-1)
    # Megatron's MLA softmax scale under YaRN: mscale(factor, mscale_all_dim)^2 / sqrt(Dn + Dr)
    scale = rope_scaling_ref.yarn_get_mscale(c["rotary_scaling_factor"], c["mscale_all_dim"]) ** 2 \
        if c["rope_type"] == "yarn" else 1.0
    return linear(causal_attention(q, k, kv[..., Dn:], drop, layer, scale), p, name + ".out")


def attention(x, p, name, c, drop, layer):
    if c["multi_latent_attention"]:
        return mla_attention(x, p, name, c, drop, layer)
    B, T, _ = x.shape
    H, G = c["num_attention_heads"], c["num_query_groups"]
    Dh = c["kv_channels"]
    q = linear(x, p, name + ".q").view(B, T, H, Dh)
    k = linear(x, p, name + ".k").view(B, T, G, Dh)
    v = linear(x, p, name + ".v").view(B, T, G, Dh)
    if c["qk_layernorm"]:  # Megatron's q_layernorm / k_layernorm: each head alone, before rope
        q, k = norm(q, p, name + ".q_norm", c), norm(k, p, name + ".k_norm", c)
    if c["position_embedding_type"] == "rope":
        q, k = rope(q, c), rope(k, c)
    k, v = k.repeat_interleave(H // G, dim=2), v.repeat_interleave(H // G, dim=2)  # head h -> kv h//(H/G)
    return linear(causal_attention(q, k, v, drop, layer), p, name + ".out")


def mlp(x, p, name, c):
    if c["swiglu"]:
        return linear(F.silu(linear(x, p, name + ".gate")) * linear(x, p, name + ".up"), p, name + ".down")
    return linear(activation(linear(x, p, name + ".up"), c), p, name + ".down")


def activation(h, c):
    """The MLP's activation of its up-projection without a gate: Megatron's squared_relu, else GELU's
    tanh form."""
    return F.relu(h).pow(2) if c["squared_relu"] else F.gelu(h, approximate="tanh")


# ---- mixture of experts (frontend/model.c's MoE block, Megatron's router and experts) ----------

def is_moe_layer(c, i):
    """moe_layer_freq as Megatron reads it: N (every N-th layer from 0) or a list of 0/1, also as
    the Python expression its recipes pass (\"([0]*3+[1]*58)\")."""
    if not c.get("num_experts"):
        return False
    i = min(i, c["num_layers"] - 1)  # a multi-token depth's layer is of the last layer's kind (Megatron's)
    freq = c.get("moe_layer_freq", 1)
    if isinstance(freq, str):
        freq = eval(freq, {"__builtins__": {}})  # noqa: S307 -- Megatron's own reading of the flag
    return bool(freq[i]) if isinstance(freq, (list, tuple)) else i % freq == 0


def moe_shapes(c, p):
    """The MoE layer's parameters under prefix p (\"layers.L.mlp.\"): no biases (mcc refuses them)."""
    d, E = c["hidden_size"], c["num_experts"]
    F_, S = c.get("moe_ffn_hidden_size", c["ffn_hidden_size"]), c.get("moe_shared_expert_intermediate_size", 0)
    mats = ("up", "gate") if c["swiglu"] else ("up",)
    shapes = {p + "router.weight": (E, d), p + "experts.down.weight": (E, d, F_)}
    shapes.update({p + f"experts.{m}.weight": (E, F_, d) for m in mats})
    if S:
        shapes.update({p + f"shared_expert.{m}.weight": (S, d) for m in mats})
        shapes[p + "shared_expert.down.weight"] = (d, S)
    return shapes


# Aux-loss-free balancing (moe_router_enable_expert_bias): each MoE layer's [the step's tokens per
# expert so far, the bias], as its EXPERT_BIAS global (ir/ir.h) holds them.
EXPERT_BIAS = {}


def expert_bias_update(c):
    """After the optimizer step (Megatron's get_updated_expert_bias, ops.def's moe_bias_update):
    bias += rate sign(mean count - count), the counts then zero."""
    rate = c.get("moe_router_bias_update_rate", 1e-3)
    for h in EXPERT_BIAS.values():
        h[1] = h[1] + rate * torch.sign(h[0].mean() - h[0])
        h[0] = torch.zeros_like(h[0])


def note_topk_margin(scores, k):
    """scores [N, E], unchanged; NEAR_TIES["topk"] takes the smallest k-th score over the next."""
    if k < scores.shape[1]:
        top = torch.topk(scores.detach(), k + 1, dim=1)[0]
        gaps = top[:, k - 1] - top[:, k]
        if (gaps > 0).any():
            note_margin("topk", float(gaps[gaps > 0].min()))
    return scores


def compute_topk(scores, k, c):
    """Megatron's _compute_topk: the top k of scores [N, E] (values, ids); with group-limited routing
    (moe_router_num_groups G, moe_router_group_topk K: its group_limited_topk) the E experts are G
    runs, each scored by the sum of its top k/K, and the top k taken among the best K groups' experts
    (the others masked to -inf). The groups' margin joins the top k's."""
    groups, keep = c.get("moe_router_num_groups", 0), c.get("moe_router_group_topk", 0)
    if keep:
        N, E = scores.shape
        group_scores = scores.detach().view(N, groups, E // groups).topk(k // keep, dim=-1)[0].sum(-1)
        kept = torch.topk(note_topk_margin(group_scores, keep), keep, dim=-1)[1]
        mask = torch.zeros(N, groups, dtype=torch.bool).scatter(1, kept, True)
        scores = scores.masked_fill(~mask.repeat_interleave(E // groups, dim=1), -math.inf)
    return torch.topk(note_topk_margin(scores, k), k, dim=1)


def router(logits, c, name=None, log=None):
    """Megatron's topk_routing_with_score_function with its capacity: (weights [N,k], expert ids
    [N,k], the capacity's keep mask or None). With expert bias (sigmoid) the top k of sigmoid + the
    layer's bias are chosen, weighted by the sigmoid alone, and a training step (log) counts the kept
    pairs per expert. The scaling factor multiplies the weights after their normalisation."""
    k = c.get("moe_router_topk", 2)
    bias = None
    if c.get("moe_router_enable_expert_bias"):
        bias = EXPERT_BIAS.setdefault(name, [torch.zeros(logits.shape[1], dtype=logits.dtype)] * 2)
    if c.get("moe_router_score_function", "softmax") == "softmax":
        if c.get("moe_router_pre_softmax"):
            w, ids = compute_topk(logits.softmax(-1), k, c)
        else:
            top, ids = compute_topk(logits, k, c)
            w = top.softmax(-1)
    else:
        scores = torch.sigmoid(logits)
        if bias is None:
            w, ids = compute_topk(scores, k, c)
        else:
            ids = compute_topk(scores.detach() + bias[1], k, c)[1]
            w = scores.gather(1, ids)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) if k > 1 else w
    scaling = c.get("moe_router_topk_scaling_factor", 0)
    w = w * scaling if scaling else w
    keep = capacity_keep(w.detach(), ids, c) if c.get("moe_expert_capacity_factor", 0) > 0 else None
    if bias is not None and log is not None:
        kept = torch.ones_like(w) if keep is None else keep
        bias[0] = bias[0] + torch.zeros_like(bias[0]).index_add(0, ids.reshape(-1), kept.detach().reshape(-1))
    return (w if keep is None else w * keep), ids, keep


# The smallest margin by which the reference's routing chose: the capacity's (probs policy: the
# last kept pair's weight over the first dropped one's) and the top k's (the k-th score over the
# next). A choice closer than the runs' differences (their BLAS's order of sums, fp32 against the
# reference's float64) could go the other way in mcc: the check would then hinge on a near-tie, not
# on what is computed, so main() refuses a capacity margin under MIN_CAPACITY_MARGIN. An exact tie
# (0: two tokens whose rows are the same computation, such as one token id opening two sequences)
# is no near-tie: both sides compute equal values and break it alike, to the earlier token.
NEAR_TIES = {"capacity": math.inf, "topk": math.inf}
MIN_CAPACITY_MARGIN = 1e-5  # tiny-moe's runs: logits 4e-7 apart at step 1, final weights 1.6e-6


def note_margin(kind, margin):
    if margin > 0:
        NEAR_TIES[kind] = min(NEAR_TIES[kind], margin)


def capacity_keep(w, ids, c):
    """Megatron's token dropping: each expert keeps get_capacity's ceil(N k / E * factor) of the
    pairs routed to it, those of the largest weights (moe_token_drop_policy probs; a tie to the
    earlier token) or the earliest tokens (position). Returns the keep mask [N,k]."""
    N, k = ids.shape
    capacity = math.ceil(N * k / c["num_experts"] * c["moe_expert_capacity_factor"])
    keep = torch.zeros(N * k, dtype=w.dtype)
    flat_ids, flat_w = ids.reshape(-1), w.reshape(-1)
    for e in range(c["num_experts"]):
        pairs = (flat_ids == e).nonzero().flatten().tolist()  # in token order
        if c.get("moe_token_drop_policy", "probs") == "probs":
            pairs.sort(key=lambda q: -float(flat_w[q]))  # stable: ties stay in token order
            if len(pairs) > capacity:  # the last kept pair's weight over the first dropped one's
                note_margin("capacity", float(flat_w[pairs[capacity - 1]] - flat_w[pairs[capacity]]))
        keep[pairs[:capacity]] = 1
    return keep.reshape(N, k)


class RouterLog:
    """A training micro-batch's MoE router: the losses Megatron's router adds to the objective
    (MoEAuxLossAutoScaler), each times its coefficient, and what train_rank reports of them: the
    unscaled losses and each layer's tokens per expert."""

    def __init__(self):
        self.objective, self.aux, self.z, self.counts, self.keep = [], [], [], [], []

    def add(self, logits, ids, keep, c):
        """The Switch load-balancing loss (switch_load_balancing_loss_func on the full scores and
        the token counts) and the z loss (z_loss_func) of one layer's logits [N,E] and ids [N,k]."""
        N, E = logits.shape
        k = ids.shape[1]
        counts = F.one_hot(ids.reshape(-1), E).sum(0).to(logits.dtype)
        self.counts.append(counts)  # the tokens each expert computes: with a capacity, those it kept
        if keep is not None:  # the pairs kept at the experts' capacity
            self.keep.append(keep)
            self.counts[-1] = (F.one_hot(ids.reshape(-1), E) * keep.reshape(-1, 1)).sum(0).to(logits.dtype)
        if c.get("moe_z_loss_coeff", 0) > 0:
            self.z.append(torch.logsumexp(logits, -1).square().mean())
            self.objective.append(c["moe_z_loss_coeff"] * self.z[-1])
        balance = c.get("moe_router_load_balancing_type", "aux_loss")
        if balance in ("aux_loss", "seq_aux_loss") and c.get("moe_aux_loss_coeff", 0) > 0:
            if c.get("moe_router_score_function", "softmax") == "softmax":
                scores = logits.softmax(-1)
            else:
                q = torch.sigmoid(logits)
                scores = q / (q.sum(-1, keepdim=True) + 1e-20)
            if balance == "aux_loss":
                self.aux.append((scores.sum(0) * counts).sum() * E / (k * N * N))
            else:
                self.aux.append(seq_aux_loss(scores, ids, c["seq_length"], k, E))
            self.objective.append(c["moe_aux_loss_coeff"] * self.aux[-1])


def seq_aux_loss(scores, ids, T, k, E):
    """Megatron's _apply_seq_aux_loss on this reference's tokens [B*T] (batch-major): the scores and
    routing map laid out as Megatron's [T, B*E] (sequence-first, each sequence its own E columns), the
    switch loss over those B*E 'experts' with num_experts E and T tokens, divided by B: the mean over
    the sequences of E / (k T^2) sum_e (sum_t scores) (tokens routed to e in the sequence)."""
    B = scores.shape[0] // T
    routing = F.one_hot(ids, E).sum(1).to(scores.dtype)  # [N,E]: 1 where the token chose e
    seq_first = lambda t: t.reshape(B, T, E).transpose(0, 1).reshape(T, B * E)  # noqa: E731
    probs, tokens_per_expert = seq_first(scores), seq_first(routing).sum(0)
    return (probs.sum(0) * tokens_per_expert).sum() * E / (k * T * T) / B


def expert_mlp(x, p, name, e, c):
    """Expert e's MLP: the e-th [F, d] matrices of name.experts.{up,gate,down}; in an FP8 layer each
    GEMM on its own rows and weight quantized with the expert's own scales (Fp8Linear's expert)."""
    fp8 = FP8 and int(name.split(".")[1]) in FP8["layers"]

    def lin(x, m):
        w = p[f"{name}.experts.{m}.weight"][e]
        return Fp8Linear.apply(x, w, f"{name}.experts.{m}", e) if fp8 else x @ w.T
    h = F.silu(lin(x, "gate")) * lin(x, "up") if c["swiglu"] else activation(lin(x, "up"), c)
    return lin(h, "down")


def router_gating_linear(x, weight, c):
    """The router's logits [N,E] as Megatron's RouterGatingLinearFunction: with moe_router_dtype
    fp32 the GEMM on both operands cast to float32 (below this reference's float64, as mcc's f32),
    its gradients cast back by autograd; the routing then runs on the fp32 logits."""
    dtype = {"fp32": torch.float32}.get(c.get("moe_router_dtype", "none"))
    if dtype is None:
        return x @ weight.T
    return x.to(dtype) @ weight.to(dtype).T


def moe(x, p, name, c, log):
    """x [B,T,d] through the MoE layer: each token's top-k experts, weighted, plus the shared
    expert; a training step's router losses into log, a RouterLog (None: eval)."""
    B, T, d = x.shape
    xf = x.reshape(-1, d)
    logits = router_gating_linear(xf, p[name + ".router.weight"], c)
    w, ids, keep = router(logits, c, name, log)
    if log is not None:
        log.add(logits, ids, keep, c)
    y = torch.zeros_like(xf)
    for e in range(c["num_experts"]):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel():
            y = y.index_add(0, tok, w[tok, slot, None] * expert_mlp(xf[tok], p, name, e, c))
    if c.get("moe_shared_expert_intermediate_size", 0):
        y = y + mlp(xf, p, name + ".shared_expert", c)
    return y.reshape(B, T, d)


def layer(x, p, i, c, drop, log):
    """Transformer layer i on the residual stream x [B,T,d]."""
    y = attention(norm(x, p, f"layers.{i}.input_norm", c), p, f"layers.{i}.attention", c, drop, i)
    h = x + drop.hidden(y, dropout_site(i, 1))
    y = norm(h, p, f"layers.{i}.post_attention_norm", c)
    y = moe(y, p, f"layers.{i}.mlp", c, log) if is_moe_layer(c, i) else mlp(y, p, f"layers.{i}.mlp", c)
    return h + drop.hidden(y, dropout_site(i, 2))


def forward(p, tokens, c, drop, log=None, hidden=False):
    """Logits [B,T,V] of tokens [B,T], with the micro-batch's dropout; an MoE model's router
    losses into log (a training step's RouterLog); with hidden, (logits, the last layer's output)."""
    x = p["embedding.word"][tokens]
    if "embedding.position" in p:
        x = x + p["embedding.position"][:tokens.shape[1]]
    x = drop.hidden(x, 0)
    for i in range(c["num_layers"]):
        x = layer(x, p, i, c, drop, log)
    logits = norm(x, p, "final_norm", c) @ p.get("output.weight", p["embedding.word"]).T
    return (logits, x) if hidden else logits


def roll_left(t, k):
    """Megatron's roll_tensor k times over the sequence (dim 1): t[:, s + k] at s, 0 rolled in."""
    out = torch.zeros_like(t)
    out[:, :t.shape[1] - k] = t[:, k:]
    return out


def mtp_losses(h, tokens, targets, p, c, drop, log):
    """Multi-token prediction (Megatron's MultiTokenPredictionLayer, process_mtp_loss) on h, the last
    layer's output [B,T,d]: depth k's hidden states from depth k-1's beside the embedding of the
    tokens rolled k left, through layer L+k-1; its loss the mean cross entropy of the shared head
    against the targets rolled k left over the positions the rolled loss mask keeps (t < T - k).
    Returns the depths' losses."""
    L, T, losses = c["num_layers"], tokens.shape[1], []
    w_out = p.get("output.weight", p["embedding.word"])
    for k in range(1, c["mtp_num_layers"] + 1):
        i = L + k - 1
        e = norm(drop.hidden(p["embedding.word"][roll_left(tokens, k)], mtp_embedding_site(c, k)), p,
                 f"layers.{i}.enorm", c)
        x = linear(torch.cat([e, norm(h, p, f"layers.{i}.hnorm", c)], -1), p, f"layers.{i}.eh_proj")
        h = layer(x, p, i, c, drop, log)
        logits = norm(h, p, f"layers.{i}.final_norm", c) @ w_out.T
        mask = roll_left(torch.ones_like(targets), k).reshape(-1).bool()
        per_token = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), roll_left(targets, k).reshape(-1),
                                    reduction="none")
        losses.append((per_token * mask).sum() / mask.sum())
    return losses


def lr_at(it, n_iters, c):
    lr, warmup = c["lr"], c["lr_warmup_iters"]
    if warmup > 0 and it <= warmup:
        return lr * it / warmup
    progress = (it - warmup) / (n_iters - warmup)
    style = c["lr_decay_style"]
    if style == "constant":
        return lr
    if style == "linear":
        return lr - (lr - c["min_lr"]) * progress
    return c["min_lr"] + (lr - c["min_lr"]) * 0.5 * (1 + math.cos(math.pi * progress))


def round_moments(opt, c):
    """--use-precision-aware-optimizer: Adam's moments stored in bf16 (--exp-avg-dtype, --exp-avg-sq-dtype),
    the step itself in full precision: each new moment rounded once stored, as mcc does (through
    float32, to nearest even), before the next step reads it."""
    if not c.get("use_precision_aware_optimizer"):
        return
    for key, field in (("exp_avg", "exp_avg_dtype"), ("exp_avg_sq", "exp_avg_sq_dtype")):
        if c.get(field, "fp32") == "bf16":
            for st in opt.state.values():
                st[key].copy_(st[key].to(torch.float32).to(torch.bfloat16).to(torch.float64))


def train(init, batches, n_steps, n_iters, c):
    """Replays n_steps steps. Returns (logits of step 1 micro 0, grads of step 1, [(loss, lr, norm)],
    the parameters after the last step)."""
    p = {n: torch.tensor(a, dtype=torch.float64, requires_grad=True) for n, a in init.items()}
    decay = [t for t in p.values() if t.ndim >= 2]
    no_decay = [t for t in p.values() if t.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=c["lr"], betas=(c["adam_beta1"], c["adam_beta2"]), eps=c["adam_eps"])
    accum = c["global_batch_size"] // c["micro_batch_size"]
    logits1, grads1, steps = None, None, []
    for it in range(1, n_steps + 1):
        opt.zero_grad()
        loss_sum, logs, mtp_sums = 0.0, [], [0.0] * c["mtp_num_layers"]
        for m in range(accum):
            tokens, targets = (batch_tensor(batches, kind, it, m) for kind in ("tokens", "targets"))
            first = (it - 1) * c["global_batch_size"] + m * c["micro_batch_size"]  # one rank's sample order
            log = RouterLog()  # MoE: the objective is the lm loss plus the router losses; the lm loss is reported
            logits, h = forward(p, tokens, c, Dropout(c, first), log, hidden=True)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            mtp = mtp_losses(h, tokens, targets, p, c, Dropout(c, first), log)  # [] without depths
            mtp_objective = c["mtp_loss_scaling_factor"] / max(len(mtp), 1) * sum(mtp)
            ((loss + sum(log.objective) + mtp_objective) / accum).backward()
            mtp_sums = [a + float(m) for a, m in zip(mtp_sums, mtp)]
            logs.append(log)
            loss_sum += loss.item()
            if it == 1 and m == 0:
                logits1 = logits.detach()
        grads = {n: t.grad for n, t in p.items()}
        if it == 1:
            grads1 = {n: g.clone() for n, g in grads.items()}
        grad_norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads.values()))
        if c["clip_grad"] > 0:
            coef = min(1.0, c["clip_grad"] / (grad_norm + 1e-6))
            for g in grads.values():
                g.mul_(coef)
        lr = lr_at(it, n_iters, c)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.step()
        round_moments(opt, c)
        fp8_roll()
        expert_bias_update(c)
        report = moe_report(logs)
        report.update({f"mtp_{k + 1}_loss": a / accum for k, a in enumerate(mtp_sums)})  # train_rank's log
        if EXPERT_BIAS:  # the log line's bias range after the step, over every layer's experts
            report["moe_expert_bias_min"] = min(float(h[1].min()) for h in EXPERT_BIAS.values())
            report["moe_expert_bias_max"] = max(float(h[1].max()) for h in EXPERT_BIAS.values())
        steps.append((loss_sum / accum, lr, grad_norm, report))
    return logits1, grads1, steps, {n: t.detach() for n, t in p.items()}


def moe_report(logs):
    """train_rank's MoE metrics of a step from its micro-batches' RouterLogs (runtime/moe_stats.c):
    the losses' means over micro-batches and layers, and the largest over the layers of max/mean
    tokens per expert of the step's tokens; {} for a dense model."""
    if not logs or not logs[0].counts:
        return {}
    mean = lambda xs: sum(float(x) for x in xs) / len(xs)  # noqa: E731
    out = {}
    if logs[0].aux:
        out["moe_load_balancing_loss"] = mean([a for g in logs for a in g.aux])
    if logs[0].z:
        out["moe_z_loss"] = mean([z for g in logs for z in g.z])
    layers = [sum(g.counts[l] for g in logs) for l in range(len(logs[0].counts))]
    out["moe_load_imbalance"] = max(float(t.max() / t.mean()) for t in layers)
    if logs[0].keep:
        out["moe_dropped_fraction"] = mean([1 - k.mean() for g in logs for k in g.keep])
    return out


def batch_tensor(batches, kind, step, micro):
    name = f"{kind}.{step}.{micro}"
    if name not in batches:
        sys.exit(f"torch_ref: batches.mcct has no '{name}': a step has global_batch_size/micro_batch_size micro-batches")
    return torch.from_numpy(batches[name].astype(np.int64))


# ---- comparison --------------------------------------------------------------------------------

def rel_err(got, want, floor=0.0):
    """max |got - want| / max(max |want|, floor): one number per tensor or scalar."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(float(np.abs(want).max(initial=0.0)), floor)
    diff = float(np.abs(got - want).max(initial=0.0))
    return diff / scale if scale > 0 else diff


def read_steps(path, first=1):
    """steps.txt: one `iter loss lr grad_norm` line per step (lines that are not numbers skipped),
    from step `first` (a resumed run's first)."""
    if not os.path.exists(path):
        sys.exit(f"torch_ref: {path} is missing: did train_rank run with --dump-dir?")
    rows = []
    for line in open(path):
        f = line.split()
        if len(f) == 4 and f[0].isdigit():
            rows.append((int(f[0]), float(f[1]), float(f[2]), float(f[3])))
    if [r[0] for r in rows] != list(range(first, first + len(rows))) or not rows:
        sys.exit(f"torch_ref: {path} must list steps {first}, {first + 1}, ... as `iter loss lr grad_norm` lines")
    return rows


def read_metrics(path):
    """train_rank's --metrics-file: {iteration: record} of its JSON lines (train records only)."""
    records = (json.loads(line) for line in open(path) if line.strip())
    return {r["iteration"]: r for r in records if "loss" in r}


def compare(dump, c, n_iters, metrics_file=None):
    """Returns [(check name, rel error, note)] for everything train_rank dumped (and, given its
    metrics file, an MoE model's router metrics)."""
    init = read_mcct(os.path.join(dump, "params_init.mcct"))
    grads = read_mcct(os.path.join(dump, "grads_step1.mcct"))
    logits = read_mcct(os.path.join(dump, "logits_step1.mcct"))
    batches = read_mcct(os.path.join(dump, "batches.mcct"))
    dumped_steps = read_steps(os.path.join(dump, "steps.txt"))
    rows = []
    expected = param_shapes(c)
    for label, tensors in (("params_init", init), ("grads_step1", grads)):
        for n in sorted(set(expected) - set(tensors)):
            rows.append((f"{label}: {n}", math.inf, "missing"))
        for n in sorted(set(tensors) - set(expected)):
            rows.append((f"{label}: {n}", math.inf, "unexpected name"))
        for n in sorted(set(expected) & set(tensors)):
            if tuple(tensors[n].shape) != expected[n]:
                rows.append((f"{label}: {n}", math.inf, f"shape {list(tensors[n].shape)} != {list(expected[n])}"))
    if rows:  # the model cannot be built from mismatched names/shapes
        return rows
    fp8_setup(c)
    ref_logits, ref_grads, ref_steps, ref_final = train(init, batches, len(dumped_steps), n_iters or len(dumped_steps), c)
    if "logits" not in logits or logits["logits"].shape != tuple(ref_logits.shape):
        rows.append(("logits (step 1, micro 0)", math.inf, f"want one tensor 'logits' {list(ref_logits.shape)}"))
    else:
        rows.append(("logits (step 1, micro 0)", rel(logits["logits"], ref_logits.numpy()), "norms (FP8)") if FP8 else
                    ("logits (step 1, micro 0)", rel_err(logits["logits"], ref_logits), ""))
    # A gradient that is zero in exact arithmetic (e.g. the k bias: softmax ignores a constant
    # per query) is rounding noise in float32; measure such tensors against the rms of all grads.
    numel = sum(g.numel() for g in ref_grads.values())
    rms = math.sqrt(sum(float(g.pow(2).sum()) for g in ref_grads.values()) / numel)
    for n in expected:
        small = float(ref_grads[n].abs().max()) < rms
        rows.append((f"grad {n}", rel_err(grads[n], ref_grads[n], floor=rms), "vs rms of all grads" if small else ""))
    metrics = read_metrics(metrics_file) if metrics_file else {}
    for (it, loss, lr, norm_), (ref_loss, ref_lr, ref_norm, ref_moe) in zip(dumped_steps, ref_steps):
        rows.append((f"step {it} loss", rel_err(loss, ref_loss), f"{loss:.7g} vs {ref_loss:.7g}"))
        for key, want in ref_moe.items() if metrics_file else ():  # an MoE model's and MTP's metrics records
            got = metrics.get(it, {}).get(key)
            rows.append((f"step {it} {key}", math.inf if got is None else rel_err(got, want),
                         "missing" if got is None else f"{got:.7g} vs {want:.7g}"))
        rows.append((f"step {it} lr", rel_err(lr, ref_lr, floor=c["lr"]), f"{lr:.7g} vs {ref_lr:.7g}"))
        rows.append((f"step {it} grad_norm", rel_err(norm_, ref_norm), f"{norm_:.7g} vs {ref_norm:.7g}"))
    # the weights after the last step, per tensor: what the optimizer did to each (weight decay
    # only on the matrices, say), which the losses show only faintly. Relative error of norms:
    # Adam moves an element whose gradient is near 0 by +-lr in a direction rounding may flip.
    final = read_mcct(os.path.join(dump, "params_final.mcct"))
    noise = noise_driven({n: g.numpy() for n, g in ref_grads.items()})
    for n in expected:
        if n not in final or final[n].shape != expected[n]:
            rows.append((f"final {n}", math.inf, "missing" if n not in final else f"shape {list(final[n].shape)}"))
        elif n not in noise:
            rows.append((f"final {n}", rel(final[n], ref_final[n].numpy()), "norms"))
    # delayed scaling: each amax history after the last step (mcc's globals, named as FP8's keys;
    # an activation several matmuls share has one, the first's), the amaxes themselves: what a
    # wrong fold, roll or gradient scale would change by a factor, which the FP8 grid's invariance
    # to powers of two hides from the rest
    # hides from the rest. By norms at 0.25 (the last steps' gradient amaxes follow the runs'
    # drift, 5e-2; a factor of two is 0.5 off); where the history reaches back to step 1, its amax
    # there (the runs' weights still equal) at the run's own rtol.
    if FP8 and FP8["delayed"]:
        steps = len(dumped_steps)
        for n, h in read_mcct(os.path.join(dump, "fp8_histories_final.mcct")).items():
            keys = [n] if h.ndim == 1 else [f"{n}#{e}" for e in range(h.shape[0])]  # an expert weight's: a row each
            if any(k not in FP8["history"] for k in keys):
                rows.append((f"fp8 history {n}", math.inf, "not in the reference"))
                continue
            want = np.stack([torch.stack(FP8["history"][k]).double().numpy() for k in keys]).reshape(h.shape)
            rows.append((f"fp8 history {n}", rel(h, want), "norms"))
            if h.shape[-1] > steps:
                rows.append((f"fp8 step-1 amax {n}", rel_err(h[..., steps], want[..., steps]),
                             " ".join(f"{v:.7g}" for v in np.atleast_1d(h[..., steps]))))
    # expert bias: each MoE layer's after the last step (the counts row zero), exactly a sum of
    # +-rate steps, so a wrong sign or count shows by a whole step
    if c.get("moe_router_enable_expert_bias"):
        dumped = read_mcct(os.path.join(dump, "expert_biases_final.mcct"))
        for n, h in EXPERT_BIAS.items():
            got = dumped.get(n + ".router.expert_bias")
            want = torch.stack(h).numpy()
            rows.append((f"expert bias {n}", math.inf if got is None else rel_err(got, want, floor=c.get(
                "moe_router_bias_update_rate", 1e-3)), "missing" if got is None else f"max {float(abs(want).max()):.4g}"))
    return rows


def report(rows, rtol, shown=15, tol_of=None):
    """Prints the worst rows (and every failure); returns the failed check names. tol_of(name):
    a check's own tolerance (default rtol)."""
    tol_of = tol_of or (lambda name: rtol)
    rows = sorted(rows, key=lambda r: -r[1] if r[1] == r[1] else -math.inf)  # NaN first
    failed = [r for r in rows if not r[1] <= tol_of(r[0])]
    print(f"{'check':<48} {'rel err':>10}  status")
    for name, err, note in [r for i, r in enumerate(rows) if i < shown or r in failed]:
        tol = tol_of(name)
        print(f"{name:<48} {err:>10.3e}  {'ok' if err <= tol else 'FAIL'}  {note}{'' if tol == rtol else f' (tol {tol:g})'}")
    print(f"{len(rows)} checks, {len(failed)} failed (rtol {rtol:g})")
    return [r[0] for r in failed]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True, help="the SPEC.json train_rank was compiled from")
    ap.add_argument("--dump-dir", required=True, help="the --dump-dir train_rank wrote")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--metrics-file", help="train_rank's --metrics-file: an MoE model's router metrics are checked")
    ap.add_argument("--train-iters", type=int, default=0,
                    help="iterations of the lr schedule (default: the number of steps in steps.txt)")
    # Under FP8 one float32-vs-float64 difference can flip an element onto the next FP8 value (a
    # 6-25% jump) where it lies within float32's rounding of a tie, and the rest of the step
    # spreads it: tiny-llama's step 1 has such elements (an E5M2 gradient at 9215.9989, ties at
    # 9216). So the logits are compared by norms, which one flip moves little (a reference without
    # FP8 is 2-3e-2 off), and the other checks only for gross errors (a scale, a transpose).
    ap.add_argument("--fp8-logits-rtol", type=float, default=3e-3, help="under FP8: the logits' (by norms)")
    ap.add_argument("--fp8-rtol", type=float, default=5e-2, help="under FP8: every other check's")
    ap.add_argument("--bf16-moments-final-rtol", type=float, default=5e-4,
                    help="with Adam's moments in bf16: the final weights' (by norms)")
    ap.add_argument("flags", nargs="*", help="after --: the spec flags mcc compiled with, e.g. --hidden-dropout 0.1")
    a = ap.parse_args()
    c = load_config(a.spec, a.flags)
    rows = compare(a.dump_dir, c, a.train_iters, a.metrics_file)
    # the amax histories: at 0.25 where the runs drift apart (above), at 1e-3 where the weights stay
    # (lr 0: each step is computed afresh from the same weights; tiny-llama's histories agree to 6e-7,
    # tiny-gpt2's but one, whose dy an element flipped upstream moves by 1.1e-4)
    fp8_tol = lambda name: (a.fp8_logits_rtol if name.startswith("logits") else  # noqa: E731
                            a.rtol if name.startswith("fp8 step-1 amax") else
                            (0.25 if c["lr"] > 0 else 1e-3) if name.startswith("fp8 history") else a.fp8_rtol)
    # bf16 moments (--use-precision-aware-optimizer): a moment whose fp32 value (mcc) and float64
    # value (here) lie on either side of a bf16 rounding boundary is stored one bf16 step (2^-8)
    # apart, which moves that element's later updates by as much; over 10 steps the final weights
    # then differ by more than the fp32 runs' 1e-4 (1.3e-4 seen on an attention bias, on some CPUs'
    # BLAS kernels and not others), so they get --bf16-moments-final-rtol; every other check keeps rtol
    bf16_moments = c.get("use_precision_aware_optimizer") and "bf16" in (c.get("exp_avg_dtype"), c.get("exp_avg_sq_dtype"))
    moments_tol = lambda name: a.bf16_moments_final_rtol if name.startswith("final ") else a.rtol  # noqa: E731
    failed = report(rows, a.rtol, tol_of=fp8_tol if FP8 else moments_tol if bf16_moments else None)
    if c.get("num_experts"):
        print("routing margins (the reference's): top k %.3g, capacity %.3g" % (NEAR_TIES["topk"], NEAR_TIES["capacity"]))
        if NEAR_TIES["capacity"] < MIN_CAPACITY_MARGIN:
            failed.append(f"capacity margin {NEAR_TIES['capacity']:.3g} < {MIN_CAPACITY_MARGIN:g}: a pair kept or dropped "
                          "by a near-tie, which rounding may break either way; choose data or a seed without one")
    if failed:
        print("FAIL: " + ", ".join(failed))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())

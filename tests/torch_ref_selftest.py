#!/usr/bin/python3
"""torch_ref_selftest.py — proves tests/torch_ref.py passes a right dump and fails a wrong one.

For two tiny specs (GPT-2 style and Llama style) it writes a dump directory the way train_rank
would, computed by an independent float32 implementation (its own .mcct writer, norms, rope,
attention, cross entropy, AdamW), runs torch_ref.py on it (must pass), then corrupts one
gradient element and one step's loss and checks that torch_ref.py fails naming exactly those.
It also checks torch_ref's Philox4x32-10 (its dropout masks) against Random123's known answers.
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

TORCH_REF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_ref.py")

GPT = {"model": {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "ffn_hidden_size": 64,
                 "seq_length": 8, "max_position_embeddings": 12, "vocab_size": 50, "make_vocab_size_divisible_by": 1},
       "parallel": {"data_parallel_size": 1},
       "training": {"micro_batch_size": 2, "global_batch_size": 4, "train_iters": 5, "lr": 3e-3,
                    "min_lr": 1e-4, "lr_warmup_iters": 1, "lr_decay_style": "cosine"}}
LLAMA = {"model": {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "num_query_groups": 2,
                   "ffn_hidden_size": 48, "seq_length": 8, "vocab_size": 50, "normalization": "RMSNorm",
                   "position_embedding_type": "rope", "swiglu": True, "add_bias_linear": False,
                   "untie_embeddings_and_output_weights": True, "norm_epsilon": 1e-6, "rotary_base": 500.0},
         "parallel": {"data_parallel_size": 1},
         "training": {"micro_batch_size": 2, "global_batch_size": 2, "train_iters": 5, "lr": 3e-3,
                      "lr_decay_style": "linear", "weight_decay": 0.1, "clip_grad": 0.3,
                      "adam_beta2": 0.95}}


def write_mcct(path, tensors):
    """The .mcct layout of the contract, written independently of torch_ref's reader."""
    codes = {np.dtype(np.float32): 0, np.dtype(np.int32): 5}
    with open(path, "wb") as f:
        f.write(b"MCCT" + struct.pack("<II", 1, len(tensors)))
        for name, a in tensors.items():
            a = np.ascontiguousarray(a)
            f.write(struct.pack("<I", len(name.encode())) + name.encode())
            f.write(struct.pack("<II", codes[a.dtype], a.ndim) + struct.pack(f"<{a.ndim}q", *a.shape))
            f.write(a.tobytes())


class Model32:
    """The contract's model in float32, written without torch_ref's code."""

    def __init__(self, m, gen):
        self.m, self.p = m, {}
        d, heads = m["hidden_size"], m["num_attention_heads"]
        self.dh, self.groups = d // heads, m.get("num_query_groups", heads)
        self.rms = m.get("normalization") == "RMSNorm"
        self.bias = m.get("add_bias_linear", True)
        # the vocabulary padded to a multiple of make_vocab_size_divisible_by (Megatron's rule, at tp 1)
        step = m.get("make_vocab_size_divisible_by", 128)
        self.vocab = -(-m["vocab_size"] // step) * step
        self.new("embedding.word", self.vocab, d, gen=gen)
        if m.get("position_embedding_type") != "rope":
            self.new("embedding.position", m.get("max_position_embeddings", m["seq_length"]), d, gen=gen)
        for i in range(m["num_layers"]):
            self.new_norm(f"layers.{i}.input_norm", d, gen)
            for proj, rows in (("q", heads), ("k", self.groups), ("v", self.groups)):
                self.new_linear(f"layers.{i}.attention.{proj}", rows * self.dh, d, gen)
            self.new_linear(f"layers.{i}.attention.out", d, heads * self.dh, gen)
            self.new_norm(f"layers.{i}.post_attention_norm", d, gen)
            for proj in ("up", "gate") if m.get("swiglu") else ("up",):
                self.new_linear(f"layers.{i}.mlp.{proj}", m["ffn_hidden_size"], d, gen)
            self.new_linear(f"layers.{i}.mlp.down", d, m["ffn_hidden_size"], gen)
        self.new_norm("final_norm", d, gen)
        if m.get("untie_embeddings_and_output_weights"):
            self.new("output.weight", self.vocab, d, gen=gen)

    def new(self, name, *shape, gen, mean=0.0, std=0.1):
        self.p[name] = (mean + std * torch.randn(*shape, generator=gen)).requires_grad_()

    def new_linear(self, name, n_out, n_in, gen):
        self.new(name + ".weight", n_out, n_in, gen=gen)
        if self.bias:
            self.new(name + ".bias", n_out, gen=gen, std=0.02)

    def new_norm(self, name, d, gen):
        self.new(name + ".weight", d, gen=gen, mean=1.0)
        if not self.rms:
            self.new(name + ".bias", d, gen=gen, std=0.02)

    def lin(self, x, name):
        return torch.nn.functional.linear(x, self.p[name + ".weight"], self.p.get(name + ".bias"))

    def norm(self, x, name):
        eps = self.m.get("norm_epsilon", 1e-5)
        if self.rms:
            return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * self.p[name + ".weight"]
        centered = x - x.mean(-1, keepdim=True)
        var = (centered * centered).mean(-1, keepdim=True)
        return centered / torch.sqrt(var + eps) * self.p[name + ".weight"] + self.p[name + ".bias"]

    def rope(self, x):  # x [B,T,heads,Dh], the cos/sin-table form of rotate-half
        T, dh = x.shape[1], x.shape[3]
        freqs = 1.0 / self.m.get("rotary_base", 10000.0) ** (torch.arange(0, dh, 2).float() / dh)
        angle = torch.outer(torch.arange(T).float(), freqs).repeat(1, 2)[:, None, :]  # [T,1,Dh]
        rotated = torch.cat([-x[..., dh // 2:], x[..., :dh // 2]], dim=-1)
        return x * angle.cos() + rotated * angle.sin()

    def attention(self, x, name):
        B, T, _ = x.shape
        heads = self.m["num_attention_heads"]
        q, k, v = (self.lin(x, f"{name}.{s}").view(B, T, -1, self.dh) for s in "qkv")
        if self.m.get("position_embedding_type") == "rope":
            q, k = self.rope(q), self.rope(k)
        mask = torch.full((T, T), -1e30).triu(1)
        outs = []
        for h in range(heads):
            g = h // (heads // self.groups)
            scores = q[:, :, h] @ k[:, :, g].transpose(1, 2) / math.sqrt(self.dh) + mask  # [B,T,T]
            outs.append(torch.softmax(scores, -1) @ v[:, :, g])
        return self.lin(torch.stack(outs, 2).reshape(B, T, -1), name + ".out")

    def mlp(self, x, name):
        up = self.lin(x, name + ".up")
        if self.m.get("swiglu"):
            gate = self.lin(x, name + ".gate")
            act = gate * torch.sigmoid(gate) * up
        else:
            act = 0.5 * up * (1 + torch.tanh(math.sqrt(2 / math.pi) * (up + 0.044715 * up ** 3)))
        return self.lin(act, name + ".down")

    def logits(self, tokens):
        x = self.p["embedding.word"][tokens]
        if "embedding.position" in self.p:
            x = x + self.p["embedding.position"][:tokens.shape[1]]
        for i in range(self.m["num_layers"]):
            h = x + self.attention(self.norm(x, f"layers.{i}.input_norm"), f"layers.{i}.attention")
            x = h + self.mlp(self.norm(h, f"layers.{i}.post_attention_norm"), f"layers.{i}.mlp")
        head = self.p.get("output.weight", self.p["embedding.word"])
        return self.norm(x, "final_norm") @ head.T


def schedule(it, t):
    """lr at 1-based iteration it, from the training section t."""
    lr, lo, warm, n = t["lr"], t.get("min_lr", 0.0), t.get("lr_warmup_iters", 0), t["train_iters"]
    if it <= warm:
        return lr * it / warm
    frac = (it - warm) / (n - warm)
    style = t.get("lr_decay_style", "cosine")
    return {"constant": lr, "linear": lr + (lo - lr) * frac,
            "cosine": lo + (lr - lo) * (1 + math.cos(math.pi * frac)) / 2}[style]


def make_dump(spec, dump, seed):
    """Writes params_init, grads_step1, logits_step1, batches, steps.txt and params_final as train_rank would;
    returns the step-1 gradients and the final parameters, {name: f32 array} each."""
    gen = torch.Generator().manual_seed(seed)
    model, t = Model32(spec["model"], gen), spec["training"]
    vocab, B, T = spec["model"]["vocab_size"], t["micro_batch_size"], spec["model"]["seq_length"]
    accum = t["global_batch_size"] // B
    b1, b2, eps = t.get("adam_beta1", 0.9), t.get("adam_beta2", 0.999), t.get("adam_eps", 1e-8)
    clip, wd = t.get("clip_grad", 1.0), t.get("weight_decay", 0.01)
    write_mcct(f"{dump}/params_init.mcct", {n: p.detach().numpy() for n, p in model.p.items()})
    moments = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in model.p.items()}
    batches, lines = {}, []
    for it in range(1, t["train_iters"] + 1):
        for p in model.p.values():
            p.grad = None
        losses = []
        for mb in range(accum):
            seq = torch.randint(vocab, (B, T + 1), generator=gen, dtype=torch.int32)
            batches[f"tokens.{it}.{mb}"], batches[f"targets.{it}.{mb}"] = seq[:, :-1].numpy(), seq[:, 1:].numpy()
            logits = model.logits(seq[:, :-1].long())  # [B,T,V]
            target = seq[:, 1:].long()
            loss = (torch.logsumexp(logits, -1) - logits.gather(-1, target[..., None])[..., 0]).mean()
            (loss / accum).backward()
            losses.append(loss.item())
            if it == 1 and mb == 0:
                write_mcct(f"{dump}/logits_step1.mcct", {"logits": logits.detach().numpy()})
        if it == 1:
            grads1 = {n: p.grad.numpy().copy() for n, p in model.p.items()}
            write_mcct(f"{dump}/grads_step1.mcct", grads1)
        norm = torch.sqrt(sum((p.grad * p.grad).sum() for p in model.p.values())).item()
        coef = min(1.0, clip / (norm + 1e-6)) if clip > 0 else 1.0
        lr = schedule(it, t)
        with torch.no_grad():
            for n, p in model.p.items():
                g, (m, v) = p.grad * coef, moments[n]
                m.mul_(b1).add_((1 - b1) * g)
                v.mul_(b2).add_((1 - b2) * g * g)
                p.mul_(1 - lr * (wd if p.ndim >= 2 else 0.0))
                p.sub_(lr * (m / (1 - b1 ** it)) / (torch.sqrt(v / (1 - b2 ** it)) + eps))
        lines.append(f"{it} {sum(losses) / accum:.9g} {lr:.9g} {norm:.9g}\n")
    write_mcct(f"{dump}/batches.mcct", batches)
    open(f"{dump}/steps.txt", "w").writelines(lines)
    final = {n: p.detach().numpy() for n, p in model.p.items()}
    write_mcct(f"{dump}/params_final.mcct", final)
    return grads1, final


def run_ref(spec_path, dump):
    r = subprocess.run([sys.executable, TORCH_REF, "--spec", spec_path, "--dump-dir", dump],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def expect(spec_path, dump, want_rc, want_last_line, what):
    rc, out = run_ref(spec_path, dump)
    last = out.strip().splitlines()[-1] if out.strip() else ""
    if rc != want_rc or last != want_last_line:
        print(out)
        sys.exit(f"selftest FAILED ({what}): torch_ref exited {rc} with '{last}'; "
                 f"wanted {want_rc} with '{want_last_line}'")
    print(f"ok: {what}")


def check_spec(name, spec, seed, root):
    dump = os.path.join(root, name)
    os.makedirs(dump)
    spec_path = os.path.join(root, name + ".json")
    json.dump(spec, open(spec_path, "w"), indent=1)
    grads, final = make_dump(spec, dump, seed)
    expect(spec_path, dump, 0, "PASS", f"{name}: the float32 dump matches the float64 reference")

    bad = shutil.copytree(dump, dump + "-bad-grad")
    g = grads["layers.1.mlp.up.weight"]  # [F,d]
    g[3, 5] += 1e-3 * np.abs(g).max()
    write_mcct(f"{bad}/grads_step1.mcct", grads)
    expect(spec_path, bad, 1, "FAIL: grad layers.1.mlp.up.weight", f"{name}: a corrupted gradient element is named")

    bad = shutil.copytree(dump, dump + "-bad-loss")
    lines = open(f"{bad}/steps.txt").read().splitlines()
    it, loss, rest = lines[1].split(" ", 2)
    lines[1] = f"{it} {float(loss) * (1 + 1e-3):.9g} {rest}"
    open(f"{bad}/steps.txt", "w").write("\n".join(lines) + "\n")
    expect(spec_path, bad, 1, "FAIL: step 2 loss", f"{name}: a corrupted step-2 loss is named")

    bad = shutil.copytree(dump, dump + "-bad-final")
    final["final_norm.weight"] *= 1 - 1e-3  # one step of a weight decay norms must not have
    write_mcct(f"{bad}/params_final.mcct", final)
    expect(spec_path, bad, 1, "FAIL: final final_norm.weight", f"{name}: a decayed final norm weight is named")


def check_philox():
    """Random123's tests/kat_vectors, the three philox4x32 10 lines: counter, key, result."""
    sys.path.insert(0, os.path.dirname(TORCH_REF))
    from torch_ref import philox4x32_10
    kat = [((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
           ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
           ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
            (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
    for ctr, key, want in kat:
        got = tuple(int(w) for w in philox4x32_10(ctr, key))
        if got != want:
            sys.exit(f"selftest FAILED: torch_ref's philox4x32_10{ctr, key} = {[hex(w) for w in got]}")
    print("ok: torch_ref's Philox4x32-10 gives Random123's known answers")


def main():
    torch.set_num_threads(1)
    check_philox()
    with tempfile.TemporaryDirectory(prefix="torch_ref_selftest.") as root:
        check_spec("tiny-gpt", GPT, 1, root)
        check_spec("tiny-llama", LLAMA, 2, root)
    print("torch_ref selftest passed")


if __name__ == "__main__":
    main()

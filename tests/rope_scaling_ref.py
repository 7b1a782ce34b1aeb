#!/usr/bin/env python3
"""rope_scaling_ref.py — LLaMA 3.1's and YaRN's rope frequencies from their definitions, independent of mcc.

inv_freq(config) transcribes transformers' _compute_default_rope_parameters and
_compute_llama3_parameters (modeling_rope_utils.py, rope_type "llama3") from its config.json keys, in
float64 (transformers computes in float32; mcc's ir_rope_freq in double). tests/convert_hf.py's
LLaMA forward takes its frequencies from here, and the table it writes is what
tests/cpu_kernels_test.c checks mcc's ir_rope_freq and rope kernel against:

    rope_scaling_ref.py write tests/data/rope_llama3_freqs.txt   # the table, once
    rope_scaling_ref.py check tests/data/rope_llama3_freqs.txt   # ctest rope_scaling_reference

yarn_inv_freq transcribes Megatron-LM's YarnRotaryEmbedding (yarn_rotary_pos_embedding.py:
_yarn_find_correction_range with round_to_int, _yarn_linear_ramp_mask, the concentration factor
_yarn_get_mscale(f, mscale) / _yarn_get_mscale(f, mscale_all_dim)), the same as transformers'
DeepSeek-V3 rope; its table (tests/data/rope_yarn_freqs.txt, one line a case: theta head_dim
factor original_context beta_fast beta_slow mscale mscale_all_dim concentration, then the
frequencies) is made and checked by the same commands with a file named *yarn*.
"""
import math
import sys

import torch

# (rope_theta, head_dim, factor): LLaMA 3.1 8B, LLaMA 3.2 1B, and a head as small as tiny-llama's
CASES = [(500000.0, 128, 8.0), (500000.0, 64, 32.0), (500000.0, 16, 8.0), (10000.0, 16, 4.0)]


def inv_freq(config, dim):
    base = config["rope_theta"]
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).double() / dim))
    scaling = config.get("rope_scaling")
    if not scaling:
        return inv
    assert scaling.get("rope_type", scaling.get("type")) == "llama3"
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv / factor, inv)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


# (theta, rotary dim, factor, original context, beta_fast, beta_slow, mscale, mscale_all_dim): DeepSeek-V3's
# (its rope part 64 channels), Megatron's MLA defaults (mscale_all_dim 0: cos and sin scaled), a tiny head
YARN_CASES = [(10000.0, 64, 40.0, 4096, 32.0, 1.0, 1.0, 1.0), (10000.0, 64, 40.0, 4096, 32.0, 1.0, 1.0, 0.0),
              (10000.0, 16, 4.0, 64, 32.0, 1.0, 0.707, 0.5), (500000.0, 128, 8.0, 8192, 16.0, 2.0, 1.0, 0.0)]


def yarn_get_mscale(scale, mscale):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_inv_freq(theta, dim, factor, context, beta_fast, beta_slow, mscale, mscale_all_dim):
    """(frequencies, concentration) as Megatron's YarnRotaryEmbedding, in float64."""
    extra = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    inter = 1.0 / (factor * theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))

    def correction_dim(rotations):
        return (dim * math.log(context / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low), 0, 1)
    mask = 1.0 - ramp
    return inter * (1 - mask) + extra * mask, yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)


def yarn_table():
    lines = []
    for case in YARN_CASES:
        f, conc = yarn_inv_freq(*case)
        plain = inv_freq({"rope_theta": case[0]}, case[1])
        assert (f != plain).any() and (f == plain).any(), "a case should keep some frequencies and scale others"
        lines.append(" ".join(f"{v:.17g}" for v in case) + f" {conc:.17g} " + " ".join(f"{v:.17g}" for v in f.tolist()))
    return "\n".join(lines) + "\n"


def llama3_config(theta, factor):
    """A LLaMA 3.1 config.json's rope keys (meta-llama/Llama-3.1-8B's, factor as given)."""
    return {"rope_theta": theta, "rope_scaling": {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
                                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}


def table():
    """One line a case: theta head_dim factor, then its head_dim / 2 frequencies."""
    lines = []
    for theta, dim, factor in CASES:
        f = inv_freq(llama3_config(theta, factor), dim)
        plain = inv_freq({"rope_theta": theta}, dim)
        assert (f != plain).any(), "a case whose scaling changes nothing tests nothing"
        lines.append(f"{theta:.17g} {dim} {factor:.17g} " + " ".join(f"{v:.17g}" for v in f.tolist()))
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "check"):
        sys.exit(__doc__)
    yarn = "yarn" in sys.argv[2]
    if sys.argv[1] == "write":
        open(sys.argv[2], "w").write(yarn_table() if yarn else table())
        return 0
    got = [line.split() for line in open(sys.argv[2]).read().splitlines()]
    want = [line.split() for line in (yarn_table() if yarn else table()).splitlines()]
    key = 8 if yarn else 3
    bad = [i for i, (g, w) in enumerate(zip(got, want))
           if g[:key] != w[:key] or len(g) != len(w) or
           any(not math.isclose(float(a), float(b), rel_tol=1e-14) for a, b in zip(g[key:], w[key:]))]
    if len(got) != len(want) or bad:
        print(f"FAIL: {sys.argv[2]} is not the {'yarn' if yarn else 'llama3'} frequencies (lines {bad}): rewrite it "
              f"with `{sys.argv[0]} write {sys.argv[2]}`")
        return 1
    if yarn:
        print(f"PASS: {len(got)} YaRN cases")
        return 0
    changed = sum(int((inv_freq(llama3_config(t, f), d) != inv_freq({"rope_theta": t}, d)).sum()) for t, d, f in CASES)
    print(f"PASS: {len(got)} cases, {changed} of {sum(d // 2 for _, d, _ in CASES)} frequencies scaled")
    return 0


if __name__ == "__main__":
    sys.exit(main())

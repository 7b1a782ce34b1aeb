# hf_transformers_check.py [DIR] — on the GPU machine: each export of hfcheck/ (bench/hf_bundle.sh:
# GPT-2, LLaMA, Mistral, Qwen2, Qwen3, Mixtral, Qwen3-MoE, DeepSeek-V3) loaded by transformers
# (AutoModelForCausalLM.from_pretrained, fp32, TF32 off; Qwen3 wants transformers >= 4.51) as the class
# config.json names, every weight of the files used and none missing, gives on the same tokens the
# logits mcc computed with the same trained weights, and so the same loss. An MoE model's line adds
# the smallest gap between the k-th and the next router score (a near-tie there could route
# differently in fp32 on either side). DeepSeek-V3 (transformers >= 4.51: DeepseekV3ForCausalLM) is
# the check of mcc convert's rope-row permutation (mcc's rotate-half against the checkpoint's
# interleaved pairs, which apply_rotary_pos_emb_interleave reads) and of its router (sigmoid, the
# expert bias e_score_correction_bias for choosing, groups by their top 2): its gap is that of the
# scores it chooses by (sigmoid + bias among the kept groups), taken by a hook on each mlp.gate.
import glob, os, sys
import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda" if torch.cuda.is_available() else "cpu"


def load(d):
    """The model, or the reason it is not the files' own: another class, weights missing, unused or
    of another shape (transformers would initialise or drop them and still run)."""
    model, info = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32, output_loading_info=True)
    want = model.config.architectures[0]
    tied = {"lm_head.weight"} if model.config.tie_word_embeddings else set()
    bad = [f"{k}: {sorted(map(str, set(v) - tied))}" for k, v in info.items()
           if k != "error_msgs" and isinstance(v, (list, set, tuple)) and set(v) - tied]
    bad += [f"error_msgs: {info['error_msgs']}"] if info.get("error_msgs") else []
    if type(model).__name__ != want:
        bad.append(f"loaded as {type(model).__name__}, config.json names {want}")
    return model.to(dev).eval(), bad


def topk_gap(out, k):
    """The smallest k-th over (k+1)-th router score of any token in any MoE layer (None: no router)."""
    gaps = []
    for s in getattr(out, "router_logits", None) or ():  # a dense layer's is None
        if s is not None and s.shape[-1] > k:
            top = s.float().reshape(-1, s.shape[-1]).topk(k + 1, dim=-1)[0]
            gaps.append(float((top[:, k - 1] - top[:, k]).min()))
    return min(gaps) if gaps else None


def deepseek_gaps(model, k):
    """Hooks on every DeepseekV3TopkRouter (mlp.gate) recording, of its input, the smallest gap
    between the k-th and the next score it chooses by: sigmoid(logits) + e_score_correction_bias,
    the experts outside the best topk_group groups (each scored by its top 2) masked to 0."""
    gaps, c = [], model.config

    def hook(m, inp, out):
        x = inp[0].reshape(-1, inp[0].shape[-1]).float()
        s = torch.sigmoid(x @ m.weight.float().T) + m.e_score_correction_bias.float()
        E, G = s.shape[-1], c.n_group
        group = s.view(-1, G, E // G).topk(2, dim=-1)[0].sum(-1)
        keep = torch.zeros_like(group).scatter(1, group.topk(c.topk_group, dim=-1)[1], 1)
        s = s.masked_fill(~keep.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E).bool(), 0.0)
        if E > k:
            top = s.topk(k + 1, dim=-1)[0]
            gaps.append(float((top[:, k - 1] - top[:, k]).min()))

    for name, m in model.named_modules():
        if name.endswith("mlp.gate") and hasattr(m, "e_score_correction_bias"):
            m.register_forward_hook(hook)
    return gaps


status = 0
for d in sorted(glob.glob(os.path.join(sys.argv[1] if len(sys.argv) > 1 else "hfcheck", "*", "config.json"))):
    d = os.path.dirname(d)
    name = os.path.basename(d)
    try:
        model, bad = load(d)
    except Exception as e:  # an architecture this transformers does not have, a config it refuses
        print(f"{name}: FAIL: transformers did not load it: {type(e).__name__}: {e}")
        status = 1
        continue
    tokens = torch.from_numpy(np.load(os.path.join(d, "tokens.npy"))).to(dev)
    targets = torch.from_numpy(np.load(os.path.join(d, "targets.npy"))).to(dev)
    want = torch.from_numpy(np.load(os.path.join(d, "logits.npy"))).to(dev).double()
    k = getattr(model.config, "num_experts_per_tok", None)
    deepseek = model.config.model_type == "deepseek_v3"
    ds_gaps = deepseek_gaps(model, k) if deepseek else None
    with torch.no_grad():
        out = model(tokens, output_router_logits=True) if k and not deepseek else model(tokens)
    got = out.logits.double()
    V = got.shape[-1]
    err = ((got - want[..., :V]).norm() / want[..., :V].norm()).item()
    loss_hf = F.cross_entropy(got.reshape(-1, V), targets.reshape(-1)).item()
    # mcc's loss is over its padded vocabulary, as Megatron's: the padding columns join its softmax
    loss_mcc = F.cross_entropy(want.reshape(-1, want.shape[-1]), targets.reshape(-1)).item()
    gap = (min(ds_gaps) if ds_gaps else None) if deepseek else topk_gap(out, k)
    ok = err < 1e-4 and not bad
    print(f"{name}: {type(model).__name__} logits rel err {err:.3e} vs mcc; loss {loss_hf:.6f} (transformers) "
          f"{loss_mcc:.6f} (mcc, padded vocab)" + (f"; router top-{k} gap {gap:.3e}" if gap is not None else "") +
          f" {'ok' if ok else 'FAIL'}")
    for b in bad:
        print(f"  FAIL: {b}")
    status |= not ok
sys.exit(status)

# hf_llama_check.py --hf DIR --dump DIR --spec SPEC.json [--tol 2e-2] — on the GPU machine (bench/hf_llama_check.sh):
# the Hugging Face export DIR (mcc-convert --to hf) loaded by transformers gives, on the batch of
# train_rank's --dump-dir (batches.mcct: tokens.1.0, targets.1.0 of every micro-batch of step 1),
# the loss mcc computed on it with the same weights (steps.txt's first line: a --load --finetune
# run, whose step 1 runs forward on the loaded weights). mcc computes in bf16 against transformers'
# fp32, so they agree within --tol (relative; tests/compare_dumps.py's GPU-vs-CPU loss tolerance);
# the bf16 transformers loss is printed beside it. The spec must not pad the vocabulary (llama-1B's
# 32000 is a multiple of 128): mcc's softmax would include the padding columns, which the export
# drops, and the losses would differ by that.
import argparse, json, os, sys
import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from torch_ref import read_mcct  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--hf", required=True)
ap.add_argument("--dump", required=True)
ap.add_argument("--spec", required=True)
ap.add_argument("--tol", type=float, default=2e-2)
a = ap.parse_args()
model_spec = json.load(open(a.spec))["model"]
vocab, div = model_spec["vocab_size"], model_spec.get("make_vocab_size_divisible_by", 128)
tp = json.load(open(a.spec)).get("parallel", {}).get("tensor_model_parallel_size", 1)
if vocab % (div * tp):
    sys.exit(f"hf_llama_check: {a.spec}: vocab_size {vocab} is padded to a multiple of {div * tp}: mcc's loss "
             "includes the padding columns the export drops; check a spec whose vocabulary needs no padding")
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda" if torch.cuda.is_available() else "cpu"
batches = read_mcct(os.path.join(a.dump, "batches.mcct"))
micro = sorted(int(k.split(".")[2]) for k in batches if k.startswith("tokens.1."))
if not micro:
    sys.exit(f"hf_llama_check: {a.dump}/batches.mcct has no tokens.1.* (step 1's batch)")
with open(os.path.join(a.dump, "steps.txt")) as f:
    it, loss_mcc = f.readline().split()[:2]
if it != "1":
    sys.exit(f"hf_llama_check: {a.dump}/steps.txt starts at iteration {it}, not 1 (run with --load --finetune)")
loss_mcc = float(loss_mcc)


def loss_of(model):
    """The mean cross entropy over every token of step 1's micro-batches (mcc's loss: the mean of the
    micro-batches' means, each over B*T tokens)."""
    total = 0.0
    with torch.no_grad():
        for m in micro:
            tokens = torch.from_numpy(batches[f"tokens.1.{m}"].astype(np.int64)).to(dev)
            targets = torch.from_numpy(batches[f"targets.1.{m}"].astype(np.int64)).to(dev)
            for b in range(tokens.shape[0]):  # a row at a time: fp32 logits of [T, V]
                logits = model(tokens[b:b + 1]).logits[0].float()
                total += F.cross_entropy(logits, targets[b]).item() / tokens.shape[0]
    return total / len(micro)


status = 0
for dtype in (torch.float32, torch.bfloat16):
    model = AutoModelForCausalLM.from_pretrained(a.hf, torch_dtype=dtype).to(dev).eval()
    loss_hf = loss_of(model)
    rel = abs(loss_hf - loss_mcc) / abs(loss_hf)
    verdict = "" if dtype != torch.float32 else (" ok" if rel < a.tol else " FAIL")
    print(f"{type(model).__name__} ({str(dtype).split('.')[-1]}): loss {loss_hf:.6f} on step 1's batch "
          f"({len(micro)} micro-batch(es) of {list(batches[f'tokens.1.{micro[0]}'].shape)}); mcc's {loss_mcc:.6f}; "
          f"rel diff {rel:.2e}{verdict}")
    if dtype == torch.float32:
        status = int(rel >= a.tol)
    del model
    torch.cuda.empty_cache() if dev == "cuda" else None
sys.exit(status)

# hf_transformers_check.py [DIR] — on the GPU machine: each export of hfcheck/ (bench/hf_bundle.sh)
# loaded by transformers (AutoModelForCausalLM.from_pretrained, fp32, TF32 off) gives on the same
# tokens the logits mcc computed with the same trained weights, and so the same loss.
import glob, os, sys
import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda" if torch.cuda.is_available() else "cpu"
status = 0
for d in sorted(glob.glob(os.path.join(sys.argv[1] if len(sys.argv) > 1 else "hfcheck", "*", "config.json"))):
    d = os.path.dirname(d)
    model = AutoModelForCausalLM.from_pretrained(d, torch_dtype=torch.float32).to(dev).eval()
    tokens = torch.from_numpy(np.load(os.path.join(d, "tokens.npy"))).to(dev)
    targets = torch.from_numpy(np.load(os.path.join(d, "targets.npy"))).to(dev)
    want = torch.from_numpy(np.load(os.path.join(d, "logits.npy"))).to(dev).double()
    with torch.no_grad():
        got = model(tokens).logits.double()
    V = got.shape[-1]
    err = ((got - want[..., :V]).norm() / want[..., :V].norm()).item()
    loss_hf = F.cross_entropy(got.reshape(-1, V), targets.reshape(-1)).item()
    # mcc's loss is over its padded vocabulary, as Megatron's: the padding columns join its softmax
    loss_mcc = F.cross_entropy(want.reshape(-1, want.shape[-1]), targets.reshape(-1)).item()
    ok = err < 1e-4
    print(f"{os.path.basename(d)}: {type(model).__name__} logits rel err {err:.3e} vs mcc; loss {loss_hf:.6f} (transformers) "
          f"{loss_mcc:.6f} (mcc, padded vocab) {'ok' if ok else 'FAIL'}")
    status |= not ok
sys.exit(status)

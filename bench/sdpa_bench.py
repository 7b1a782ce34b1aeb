# sdpa_bench.py — PyTorch's causal SDPA (what the baseline uses) on bench/attention_bench.c's
# shapes, forward and backward, with the same causal FLOP counts: the target for our kernel.
import torch, torch.nn.functional as F

SHAPES = [(4, 4096, 16, 16, 128), (32, 1024, 12, 12, 64), (4, 4096, 32, 8, 64)]


def time_ms(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return sorted(ts)[len(ts) // 2]


for B, T, H, Hk, D in SHAPES:
    q = torch.randn(B, H, T, D, device='cuda', dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, Hk, T, D, device='cuda', dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, Hk, T, D, device='cuda', dtype=torch.bfloat16, requires_grad=True)
    fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=H != Hk)
    y = fwd(); dy = torch.randn_like(y)
    f_ms = time_ms(fwd)
    b_ms = time_ms(lambda: torch.autograd.grad(y, (q, k, v), dy, retain_graph=True))
    flops = 4 * B * H * T * T * D / 2
    print(f'torch sdpa B={B} T={T} H={H} Hk={Hk} D={D}: fwd {f_ms:.3f} ms {flops / f_ms / 1e9:.0f} TFLOP/s, '
          f'bwd {b_ms:.3f} ms {2.5 * flops / b_ms / 1e9:.0f} TFLOP/s', flush=True)

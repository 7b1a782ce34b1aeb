# torch_ddp_baseline.py — the PyTorch baseline (../shared/anchors/torch_baseline.py: same models,
# bf16 autocast, flash SDPA, fused AdamW, torch.compile) data-parallel under torchrun: DDP, or
# with --zero PyTorch's ZeroRedundancyOptimizer (the analog of --use-distributed-optimizer).
# Prints one JSON line (rank 0) with tokens/s per GPU, MFU and the peak memory of rank 0, for the
# data-parallel rows of the node-scale benchmark (issue 6) and DP=2 (bench/device_run.sh).
#
#   torchrun --nproc_per_node=8 bench/torch_ddp_baseline.py --config llama-1B
#   torchrun --nproc_per_node=8 bench/torch_ddp_baseline.py --config llama3-8b --zero
import argparse, json, os, sys, time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

ANCHORS = os.environ.get('MCC_ANCHORS', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'devrun', 'anchors'))
sys.path.insert(0, ANCHORS)
import torch_baseline as tb  # noqa: E402  (GPT, CONFIGS, flops_per_token, PEAK)

# Megatron's llama3-8b shape at the micro-batch issue 6 uses (models/llama3-8b.json)
tb.CONFIGS.setdefault('llama3-8b', dict(V=128256, T=8192, d=4096, h=32, kv=8, L=32, ffn=14336, llama=True, B=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--config', default='llama-1B', help='one of %s' % ', '.join(tb.CONFIGS))
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--zero', action='store_true', help='shard AdamW state over the ranks (ZeroRedundancyOptimizer)')
    ap.add_argument('--eager', action='store_true', help='skip torch.compile')
    a = ap.parse_args()
    if a.config not in tb.CONFIGS:
        sys.exit('torch_ddp_baseline: unknown --config %s (one of %s)' % (a.config, ', '.join(tb.CONFIGS)))
    dist.init_process_group('nccl')
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get('LOCAL_RANK', rank)))
    c = tb.CONFIGS[a.config]
    torch.manual_seed(0)
    m = tb.GPT(c).cuda()
    ddp = DDP(m, gradient_as_bucket_view=True)
    if a.zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(m.parameters(), optimizer_class=torch.optim.AdamW, lr=3e-4, weight_decay=0.1,
                                      fused=True)
    else:
        opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    f = ddp if a.eager else torch.compile(ddp)
    B, T = c['B'], c['T']
    g = torch.Generator(device='cuda').manual_seed(rank)
    data = torch.randint(0, c['V'], (8, B, T + 1), device='cuda', generator=g)

    def step(i):
        x, y = data[i % 8, :, :-1], data[i % 8, :, 1:]
        with torch.autocast('cuda', dtype=torch.bfloat16):
            loss = f(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)  # each rank's grads are already the global mean
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.time()
    for i in range(5):
        step(i)
    torch.cuda.synchronize()
    warm = time.time() - t0
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dist.barrier()
    e0.record()
    for i in range(a.steps):
        loss = step(i)
    e1.record()
    torch.cuda.synchronize()
    dt = e0.elapsed_time(e1) / 1e3 / a.steps
    tok_s = B * T / dt  # per GPU: each rank its own micro-batch
    if rank == 0:
        print(json.dumps(dict(system='pytorch-ddp' + ('-zero' if a.zero else ''), name=a.config, world=world,
                              compile=not a.eager, B=B, T=T, step_ms=round(dt * 1e3, 2), tok_s_per_gpu=round(tok_s),
                              mfu=round(tb.flops_per_token(m, c) * tok_s / tb.PEAK, 4),
                              peak_mem_GiB=round(torch.cuda.max_memory_allocated() / 2**30, 2),
                              first_5_steps_s=round(warm, 1), loss=round(loss.item(), 4))), flush=True)
    dist.destroy_process_group()


if __name__ == '__main__':
    main()

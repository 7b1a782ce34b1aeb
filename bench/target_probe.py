#!/usr/bin/env python3
"""target_probe.py — measures on the GPU machine what a passes/target.c row holds: the GPU's name,
SMs and memory as CUDA reports them, bf16 GEMM rates (8192^3, and a LLaMA-3 8B step's MLP and
attention projection shapes at 8192 tokens), the FP8 GEMM rate (e4m3, torch._scaled_mm) and the
device-to-device copy rate. CUDA events around 20 runs after 5 warm-ups, the median; random data.
The link rate needs two GPUs (bench/overlap_bench.sh). Usage: python3 bench/target_probe.py"""
import statistics

import torch


def timed(fn, runs=20, warm=5):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(runs):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def gemm_rate(m, n, k, dtype=torch.bfloat16):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    if dtype == torch.float8_e4m3fn:
        xq, wq = x.to(dtype), w.to(dtype)
        one = torch.tensor(1.0, device="cuda")
        s = timed(lambda: torch._scaled_mm(xq, wq.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
    else:
        s = timed(lambda: x @ w.t())
    return 2 * m * n * k / s


def main():
    p = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info()
    print(f"gpu: {p.name}, {p.multi_processor_count} SMs, memory {total >> 20} MiB as CUDA reports it "
          f"({free >> 20} MiB free), sm_{p.major}{p.minor}")
    rows = [("bf16 8192^3", gemm_rate(8192, 8192, 8192)),
            ("bf16 MLP up (8192 x 14336 x 4096)", gemm_rate(8192, 14336, 4096)),
            ("bf16 MLP down (8192 x 4096 x 14336)", gemm_rate(8192, 4096, 14336)),
            ("bf16 attention q (8192 x 4096 x 4096)", gemm_rate(8192, 4096, 4096)),
            ("fp8 e4m3 8192^3", gemm_rate(8192, 8192, 8192, torch.float8_e4m3fn))]
    for name, rate in rows:
        print(f"{name:40s} {rate / 1e12:7.1f} TFLOP/s")
    n = 1 << 30
    src, dst = torch.empty(n, dtype=torch.uint8, device="cuda"), torch.empty(n, dtype=torch.uint8, device="cuda")
    s = timed(lambda: dst.copy_(src))
    print(f"{'device-to-device copy (1 GiB)':40s} {2 * n / s / 1e9:7.1f} GB/s (read + write)")
    step = statistics.median(r for name, r in rows[1:4])
    print(f"target.c: .gemm_bf16_flops = {step / 1e12:.0f}e12 (the step shapes' median), "
          f".memory_bytes = {total >> 20}ll << 20, .sms = {p.multi_processor_count}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""summarize.py LOGDIR — the benchmark table: train_rank (bench-<config>.log) beside the PyTorch
baseline (baseline.jsonl) from the same device call. FLOPs per token 6N + 12·L·d·T (N: every
parameter but position embeddings, a tied head once; of an MoE layer the top k experts, the router
and the shared expert: the active parameters), MFU against 989 TFLOP/s."""
import json, re, statistics, sys

PEAK = 989e12
CONFIGS = ['gpt2-124M', 'gpt2-1.5B', 'llama-1B', 'llama-1B-gqa', 'llama-8B-L4', 'moe-8x1B', 'moe-32x8']


def flops_per_token(spec):
    m = spec['model']
    V, T, d, h, L, f = (m[k] for k in ('vocab_size', 'seq_length', 'hidden_size', 'num_attention_heads',
                                        'num_layers', 'ffn_hidden_size'))
    kv = m.get('num_query_groups', h)
    hd = d // h
    llama = m.get('normalization') == 'RMSNorm'
    bias = not llama
    attn = d * (h + 2 * kv) * hd + d * d + (((h + 2 * kv) * hd + d) if bias else 0)
    mlp = (2 * f * d + f * d) if llama else (2 * f * d + (f + d))
    norms = 2 * d * (1 if llama else 2)
    n = V * d + L * (attn + mlp + norms) + d * (1 if llama else 2) + (V * d if llama else 0)
    E = m.get('num_experts', 0)
    if E:  # MoE layers count the top k experts a token runs (active parameters, as torch_moe_baseline.py)
        freq = m.get('moe_layer_freq', 1)
        moe_layers = sum(freq) if isinstance(freq, list) else sum(1 for i in range(L) if i % freq == 0)
        fm, k, shared = m.get('moe_ffn_hidden_size', f), m['moe_router_topk'], m.get('moe_shared_expert_intermediate_size', 0)
        n += moe_layers * (k * 3 * fm * d + d * E + 3 * shared * d - mlp)
    return 6 * n + 12 * L * d * T


def ours(logdir, name):
    try:
        text = open(f'{logdir}/bench-{name}.log').read()
    except OSError:
        return None
    toks = [float(x) for x in re.findall(r'\| tokens/s/GPU: ([0-9.]+) \|', text)]  # per GPU
    first = re.search(r'time to first step: ([0-9.]+) s(?: \| cuda memory in use: ([0-9.]+) GiB)?', text)
    if len(toks) < 8 or not first:
        return dict(error=text.strip().splitlines()[-1] if text.strip() else 'no output')
    return dict(tok_s=statistics.median(toks[5:]), first_s=float(first.group(1)),
                mem=float(first.group(2)) if first.group(2) else None)


def main():
    logdir = sys.argv[1]
    base = {}
    for line in open(f'{logdir}/baseline.jsonl', errors='replace'):
        if line.startswith('{'):
            r = json.loads(line)  # a config's lines merged (torch_moe_memory.py adds a memory line)
            base.setdefault(r.get('name'), {}).update(r)
    print(f'{"config":14s} {"mcc tok/s":>10s} {"MFU":>6s} {"mem GiB":>8s} {"1st step s":>10s} | '
          f'{"torch tok/s":>11s} {"MFU":>6s} {"mem GiB":>8s} {"5 steps s":>9s} | {"ratio":>5s}')
    for name in CONFIGS:
        spec = json.load(open(f'bench/configs/{name}.json'))
        fpt = flops_per_token(spec)
        o, b = ours(logdir, name), base.get(name)
        if o and 'error' not in o:
            mine = f'{o["tok_s"]:10.0f} {fpt * o["tok_s"] / PEAK * 100:5.1f}% {o["mem"] or 0:8.1f} {o["first_s"]:10.1f}'
        else:
            mine = f'{"failed: " + (o or {}).get("error", "no log")[:40]:>37s}'
        theirs = (f'{b["tok_s"]:11.0f} {b["mfu"] * 100:5.1f}% {b["peak_mem_GiB"]:8.1f} {b["first_5_steps_s"]:9.1f}'
                  if b else f'{"(no baseline)":>37s}')
        ratio = f'{o["tok_s"] / b["tok_s"]:5.2f}' if b and o and 'error' not in o else '    -'
        print(f'{name:14s} {mine} | {theirs} | {ratio}')
    scaling(logdir)


LAYOUTS = [('dp2', 'DP=2'), ('dp2ov', 'DP=2, --overlap-grad-reduce'), ('tp2sp', 'TP=2 + SP'),
           ('tp2spo', 'TP=2 + SP, --tp-comm-overlap'), ('tp2spb', 'TP=2 + SP split by batch'),
           ('tp2spbo', 'TP=2 + SP by batch, overlap'), ('tp2spbi', 'TP=2 + SP by batch, interleaved halves')]
# each also compiled with other lanes (device_run.sh's LANES_ALT: --comm-lanes, MCC_COMM_LANES before
# issue 17; copy was the default's name for it in the sixth session's third call)
LAYOUTS = [l for s, label in LAYOUTS
           for l in ((s, label), *((f'{s}-{lanes}', f'{label}, --comm-lanes {lanes}') for lanes in ('none', 'copy')))]


def scaling(logdir):
    """Two GPUs against one from the same call: efficiency = tok/s per GPU / 1-GPU tok/s."""
    rows = []
    for name in CONFIGS:
        one = ours(logdir, name)
        for suffix, label in LAYOUTS:
            two = ours(logdir, f'{name}-{suffix}')
            if two is None:
                continue
            if 'error' in two or not one or 'error' in one:
                rows.append(f'{name:14s} {label:44s} failed: {(two.get("error") or one and one.get("error") or "")[:50]}')
                continue
            rows.append(f'{name:14s} {label:44s} {two["tok_s"]:10.0f} {one["tok_s"]:10.0f} {two["tok_s"] / one["tok_s"]:6.3f}')
    if rows:
        print(f'\n{"config":14s} {"layout":44s} {"tok/s/GPU":>10s} {"1 GPU":>10s} {"eff.":>6s}')
        print('\n'.join(rows))


if __name__ == '__main__':
    main()

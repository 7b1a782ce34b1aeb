# node_report.py OUT MODEL NAME:RANKS... — the node-scale table from bench/node_run.sh's logs:
# per layout the loss curve against the reference's (the first NAME), tokens/s per GPU and MFU
# (medians of steps 6 and later), the memory in use after the first step (rank 0) beside the
# compile-time prediction, and the scaling efficiency: per-GPU tokens/s over the reference's
# (for llama3-8b the reference has two GPUs). A curve matches when no step's loss differs by more
# than 0.05 and the last 10 steps' mean by less than 1% (bf16 runs are not bitwise alike).
import json, os, re, statistics, sys

out, model, layouts = sys.argv[1], sys.argv[2], [a.split(':') for a in sys.argv[3:]]


def parse(name):
    p = os.path.join(out, f'node-{model}-{name}.log')
    t = open(p).read() if os.path.exists(p) else ''
    steps = re.findall(r'iteration +\d+/ *\d+ .*?\| lm loss: ([0-9.E+-]+) .*?\| tokens/s/GPU: ([0-9.]+) \| MFU: ([0-9.]+%|-)', t)
    mem = re.search(r'memory in use: ([0-9.]+) GiB', t)
    c = os.path.join(out, f'node-{model}-{name}.compile.log')
    pred = re.search(r'total +([0-9.]+) GiB', open(c).read()) if os.path.exists(c) else None
    return dict(loss=[float(s[0]) for s in steps], tok=[float(s[1]) for s in steps],
                mfu=[float(s[2].rstrip('%')) for s in steps if s[2] != '-'],
                mem=float(mem.group(1)) if mem else None, pred=float(pred.group(1)) if pred else None,
                errors=[l for l in t.splitlines() if 'error' in l.lower()][:2])


def med(v):
    return statistics.median(v[5:]) if len(v) > 5 else None


runs = {name: parse(name) for name, _ in layouts}
ref = runs[layouts[0][0]]
ref_tok = med(ref['tok'])
print(f'{model}: {"layout":12} {"ranks":>5} {"tok/s/GPU":>10} {"MFU":>6} {"mem GiB":>8} {"pred":>6} {"eff":>5}  curve vs {layouts[0][0]}')
for name, ranks in layouts:
    r = runs[name]
    tok = med(r['tok'])
    if tok is None:
        print(f'{"":{len(model) + 2}}{name:12} {ranks:>5} failed: {len(r["loss"])} steps logged {" | ".join(r["errors"])}')
        continue
    curve = 'reference'
    if name != layouts[0][0]:
        n = min(len(r['loss']), len(ref['loss']))
        diff = max((abs(a - b) for a, b in zip(r['loss'], ref['loss'])), default=float('inf'))
        last = lambda v: sum(v[n - 10:n]) / 10
        rel = abs(last(r['loss']) - last(ref['loss'])) / last(ref['loss']) if n >= 10 else float('inf')
        ok = n == len(ref['loss']) and diff <= 0.05 and rel < 0.01
        curve = f'max step diff {diff:.4f}, last-10 mean {rel * 100:.2f}%: {"ok" if ok else "FAIL"}'
    eff = tok / ref_tok if ref_tok else float('nan')
    mem = f'{r["mem"]:.1f}' if r['mem'] is not None else '-'
    pred = f'{r["pred"]:.1f}' if r['pred'] is not None else '-'
    mfu = f'{med(r["mfu"]):5.1f}%' if med(r['mfu']) is not None else '     -'
    print(f'{"":{len(model) + 2}}{name:12} {ranks:>5} {tok:10.0f} {mfu} {mem:>8} {pred:>6} {eff:5.2f}  {curve}')
ddp = os.path.join(out, f'node-ddp-{model}.jsonl')
for line in open(ddp).read().splitlines() if os.path.exists(ddp) else []:
    d = json.loads(line)
    print(f'{"":{len(model) + 2}}PyTorch {d["system"]} on {d["world"]} GPUs: {d["tok_s_per_gpu"]} tok/s/GPU, MFU {d["mfu"] * 100:.1f}%, '
          f'{d["peak_mem_GiB"]} GiB')

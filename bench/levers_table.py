#!/usr/bin/env python3
"""levers_table.py OUTDIR — the memory-levers table (bench/memory_levers.sh) from its logs: per
variant the plan's device and host memory (mcc compile's report), the memory measured (the
runtime's own count at the last step, nvidia-smi's peak of the process, the host's peak resident
set), the mean step time and tokens/s over the steps after the first two, MFU, and the step time
against the same model's variant `none` (the recompute table) or `full` (llama3-8b). A variant mcc
refused shows its reason; PyTorch's llama3-8b its figures or its error."""
import glob
import json
import os
import re
import sys

out = sys.argv[1]
ITER = re.compile(r'iteration +(\d+)/ *\d+ .*?elapsed time per iteration \(ms\): ([0-9.]+) .*?'
                  r'tokens/s/GPU: ([0-9]+) \| MFU: ([^ ]+) \| memory \(GiB\): ([0-9.]+)')


def planned(text, key):
    m = re.search(r'^  ' + key + r' +([0-9.]+) GiB', text, re.M)
    return float(m.group(1)) if m else None


def row(name):
    compile_log = open(os.path.join(out, name + '.compile.log')).read()
    r = {'name': name[len('lever-'):], 'plan': planned(compile_log, 'total'), 'host_plan': planned(compile_log, 'host memory')}
    err = re.search(r'^mcc: error: (.*)$', compile_log, re.M)
    log_path = os.path.join(out, name + '.log')
    if err or not os.path.exists(log_path):
        r['note'] = 'refused: ' + (err.group(1) if err else 'not run')
        return r
    iters = [(int(i), float(ms), int(t), mfu, float(mem)) for i, ms, t, mfu, mem in ITER.findall(open(log_path).read())]
    late = [x for x in iters if x[0] > 2] or iters
    if not late:
        r['note'] = 'no step finished (see %s.log)' % name
        return r
    r['ms'] = sum(x[1] for x in late) / len(late)
    r['tok_s'] = sum(x[2] for x in late) / len(late)
    r['mfu'], r['mem'] = late[-1][3], late[-1][4]
    mem_path = os.path.join(out, name + '.mem')
    if os.path.exists(mem_path):
        gpu_mib, host_kb = (int(v) for v in open(mem_path).read().split())
        r['smi'], r['host'] = gpu_mib / 1024, host_kb / 1048576
    return r


def fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else '-'


rows = [row(os.path.basename(p)[:-len('.compile.log')]) for p in sorted(glob.glob(os.path.join(out, 'lever-*.compile.log')))]
base = {}
for r in rows:
    for model in ('llama-1B', 'gpt2-1.5B', 'llama3-8b'):
        if r['name'].startswith(model + '-'):
            r['model'], r['variant'] = model, r['name'][len(model) + 1:]
    if r.get('variant') == ('full' if r.get('model') == 'llama3-8b' else 'none') and 'ms' in r:
        base[r['model']] = r['ms']
print('| model | variant | plan GiB | runtime GiB | nvidia-smi GiB | host plan GiB | host peak GiB | ms/step | tok/s | MFU | vs base |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
for r in rows:
    ratio = r['ms'] / base[r['model']] if 'ms' in r and r.get('model') in base else None
    cells = [r.get('model', '?'), r.get('variant', r['name']), fmt(r['plan'], '.2f'), fmt(r.get('mem'), '.2f'),
             fmt(r.get('smi'), '.2f'), fmt(r['host_plan'], '.2f'), fmt(r.get('host'), '.2f'), fmt(r.get('ms'), '.0f'),
             fmt(r.get('tok_s'), '.0f'), r.get('mfu', '-'), fmt(ratio, '.2f') + ('x' if ratio else '')]
    print('| ' + ' | '.join(cells) + ' |' + ('  ' + r['note'] if 'note' in r else ''))
torch = os.path.join(out, 'lever-torch-llama3-8b.jsonl')
if os.path.exists(torch) and os.path.getsize(torch):
    for line in open(torch):
        b = json.loads(line)
        print(f'PyTorch llama3-8b: {b.get("tok_s", 0):.0f} tok/s, MFU {100 * b.get("mfu", 0):.1f}%, '
              f'peak {b.get("peak_mem_GiB", 0):.1f} GiB')
elif os.path.exists(os.path.join(out, 'lever-torch-llama3-8b.err')):
    tail = open(os.path.join(out, 'lever-torch-llama3-8b.err')).read().strip().splitlines()[-1:] or ['no output']
    print('PyTorch llama3-8b: ' + tail[0][:300])

#!/usr/bin/env python3
"""comm_overlap_cover.py TP MAX_SHORT < IR — what the comm_overlap pass is for: every sequence
collective it overlaps (overlap=1 in micro_step of `mcc ir ... --after comm_overlap`) has weight-
gradient GEMMs beside it (matmul_accumulates between it and its result's first reader) whose
multiply-adds cover the time its bytes take on the wire: MACS_PER_WIRE_BYTE (comm_overlap.c) times
the bytes each of the TP ranks sends. Prints each one short of that and fails when more than
MAX_SHORT are (the backward's first all-gather has nothing before it to take)."""
import re
import sys

MACS_PER_WIRE_BYTE = 1700  # passes/comm_overlap.c
DTYPE_BYTES = {'bf16': 2, 'f32': 4, 'f16': 2, 'i32': 4, 'fp8e4m3': 1}

tp, max_short = int(sys.argv[1]), int(sys.argv[2])
text = sys.stdin.read()
func = re.search(r'^func micro_step.*?^}', text, re.S | re.M)
if not func:
    sys.exit('FAIL: no micro_step in the IR')
lines = [l.strip() for l in func.group(0).split('\n')[1:-1]]

types = {}  # value -> (dtype, dims)


def parse(line):
    """(results, op, operands, attributes, result types) of one instruction line."""
    head, _, tail = line.partition(' : ')
    lhs, eq, rhs = head.partition(' = ')
    if not eq or '{' in lhs:
        lhs, rhs = '', head
    results = re.findall(r'%(\d+)', lhs)
    op = rhs.split()[0]
    operands = re.findall(r'%(\d+)', rhs.split('{')[0])
    attrs = dict(re.findall(r'(\w+)=([^,} ]+)', rhs[rhs.find('{'):] if '{' in rhs else ''))
    rtypes = [(t[0], [int(d) for d in t[1].split(',')] if t[1] else []) for t in re.findall(r'(\w+)\[([0-9,]*)\]', tail)]
    return results, op, operands, attrs, rtypes


def numel(t):
    n = 1
    for d in t[1]:
        n *= d
    return n


instrs = []
for line in lines:
    if not line or line.startswith('//'):
        continue
    ins = parse(line)
    for r, t in zip(ins[0], ins[4]):
        types[r] = t
    instrs.append(ins)


def macs(ins):
    """Multiply-adds of matmul_accumulate dst += op(a) op(b)."""
    _, _, operands, attrs, _ = ins
    a, b = types[operands[1]], types[operands[2]]
    contracted = numel(a) // a[1][-1] if attrs.get('ta') == '1' else a[1][-1]
    return numel(a) * numel(b) / contracted


overlapped = short = 0
lack = 0.0
for i, (results, op, operands, attrs, rtypes) in enumerate(instrs):
    if op not in ('all_gather_seq', 'reduce_scatter_seq') or attrs.get('overlap') != '1':
        continue
    overlapped += 1
    whole = types[operands[0]] if op == 'reduce_scatter_seq' else types[results[0]]
    target = MACS_PER_WIRE_BYTE * numel(whole) * DTYPE_BYTES[whole[0]] * (tp - 1) / tp
    cover = 0
    for later in instrs[i + 1:]:
        if set(later[2]) & set(results):
            break
        if later[1] == 'matmul_accumulate':
            cover += macs(later)
    if cover < target:
        short += 1
        lack += target - cover
        print(f'short: {op} %{results[0]}: {cover / 1e9:.1f}G multiply-adds beside it, {target / 1e9:.1f}G to hide it')
print(f'{short} of {overlapped} overlapped collectives short of their target (at most {max_short}), '
      f'{lack / 1e9:.1f}G multiply-adds short in all')
if overlapped == 0 or short > max_short:
    print('FAIL')
    sys.exit(1)
print('PASS')

#!/usr/bin/env python3
"""compare_dumps.py — checks one train_rank dump against another of the same spec: initial
parameters, step-1 logits and gradients, final parameters (when both have them) and every
step's loss. Used for a GPU (bf16) run against the CPU (fp32) oracle, and for a parallel layout
against the single-rank run (with tolerances of 1e-5).

  compare_dumps.py --cpu DIR --gpu DIR [--tol 3e-2] [--loss-tol 2e-2]   (DIR: reference, run)

Tensors are compared by relative error of norms, ||gpu - cpu|| / ||cpu||, which bf16 rounding of
activations keeps near 1e-2 while a wrong kernel gives O(1). Exits 1 naming what differs."""
import argparse, os, struct, sys

import numpy as np

DTYPES = {0: np.float32, 1: 'bf16', 5: np.int32}


def read_mcct(path):
    data = open(path, 'rb').read()
    if data[:4] != b'MCCT':
        sys.exit(f'{path}: not an .mcct file')
    version, count = struct.unpack_from('<II', data, 4)
    off, out = 12, {}
    for _ in range(count):
        (n,) = struct.unpack_from('<I', data, off); off += 4
        name = data[off:off + n].decode(); off += n
        dtype, ndim = struct.unpack_from('<II', data, off); off += 8
        dims = struct.unpack_from(f'<{ndim}q', data, off); off += 8 * ndim
        count_el = int(np.prod(dims)) if ndim else 1
        if DTYPES.get(dtype) == 'bf16':
            raw = np.frombuffer(data, np.uint16, count_el, off); off += 2 * count_el
            arr = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            dt = DTYPES[dtype]
            arr = np.frombuffer(data, dt, count_el, off); off += arr.nbytes
        out[name] = arr.reshape(dims).astype(np.float64)
    return out


def rel(a, b, floor=1e-30):
    """||a - b|| / ||b||; `floor` stands in for ||b|| when b is (near) zero in exact arithmetic,
    e.g. the key bias's gradient (softmax ignores a constant added to every score of a row)."""
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), floor))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--cpu', required=True)
    ap.add_argument('--gpu', required=True)
    ap.add_argument('--tol', type=float, default=3e-2)
    ap.add_argument('--loss-tol', type=float, default=2e-2)
    ap.add_argument('--final', action='store_true', help='also compare params_final.mcct (fp32 layouts; in bf16 '
                    'the noise-driven parameters, like the key bias, drift apart in a few steps)')
    a = ap.parse_args()
    rows, failed = [], []

    def check(what, err, tol):
        rows.append((what, err, tol))
        if not np.isfinite(err) or err > tol:
            failed.append(what)

    files = [('params_init.mcct', 1e-6), ('logits_step1.mcct', a.tol), ('grads_step1.mcct', a.tol)]
    if a.final:
        # Adam divides by sqrt(v): a gradient that is pure rounding noise (the key bias's) still
        # moves its parameter by ~lr a step, in a noise-set direction, so final weights get 100x
        # (the losses of every step, checked at --loss-tol, are the primary check).
        files.append(('params_final.mcct', 100 * a.tol))
    for file, tol in files:
        cpu, gpu = read_mcct(f'{a.cpu}/{file}'), read_mcct(f'{a.gpu}/{file}')
        if set(cpu) != set(gpu):
            failed.append(f'{file}: tensor names differ: {sorted(set(cpu) ^ set(gpu))}')
        names = sorted(set(cpu) & set(gpu))
        # per-tensor floor: 1e-3 of the RMS tensor norm of the file (only bites on ~zero tensors)
        floor = 1e-3 * float(np.sqrt(np.mean([np.linalg.norm(cpu[n]) ** 2 for n in names]))) if names else 1e-30
        for name in names:
            ref = cpu[name]
            if file == 'logits_step1.mcct' and gpu[name].ndim == ref.ndim and gpu[name].shape[1:] == ref.shape[1:] \
                    and gpu[name].shape[0] < ref.shape[0]:
                ref = ref[:gpu[name].shape[0]]  # a smaller micro-batch: step 1's first samples
            if gpu[name].shape != ref.shape:
                failed.append(f'{file}: {name} is {list(gpu[name].shape)}, the reference {list(ref.shape)}')
                continue
            check(f'{file[:-5]} {name}', rel(gpu[name], ref, floor), tol)
    cpu_steps = [list(map(float, l.split())) for l in open(f'{a.cpu}/steps.txt')]
    gpu_steps = [list(map(float, l.split())) for l in open(f'{a.gpu}/steps.txt')]
    if len(cpu_steps) != len(gpu_steps):
        failed.append('steps.txt: different step counts')
    for c, g in zip(cpu_steps, gpu_steps):
        check(f'step {int(c[0])} loss', abs(g[1] - c[1]) / abs(c[1]), a.loss_tol)
    rows.sort(key=lambda r: -r[1] / r[2])
    print(f'{"check":52s} {"rel err":>10s} {"tol":>8s}')
    for what, err, tol in rows[:20]:
        print(f'{what:52s} {err:10.3e} {tol:8.1e} {"ok" if err <= tol else "FAIL"}')
    print(f'{len(rows)} checks, {len(failed)} failed')
    if failed:
        print('FAIL: ' + ', '.join(failed))
        sys.exit(1)
    print('PASS')


if __name__ == '__main__':
    main()

#!/usr/bin/env python3
"""compare_dumps.py — checks one train_rank dump against another of the same spec: initial
parameters, step-1 logits and gradients, final parameters (--final) and every column of
steps.txt (each step's loss, lr and grad norm). Used for a GPU (bf16) run against the CPU (fp32)
oracle, and for a parallel layout against the single-rank run (with tolerances of 1e-5).

  compare_dumps.py --cpu DIR --gpu DIR [--tol 3e-2] [--loss-tol 2e-2] [--norm-tol T] [--lr-tol T]
                   [--final [--final-tol T]]   (DIR: reference, run)

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


def read_dump(directory, file):
    """NAME.mcct, or under pipeline parallelism the stages' NAME.stageS.mcct together."""
    import glob
    parts = sorted(glob.glob(f'{directory}/{file[:-5]}.stage*.mcct'))
    if not parts:
        return read_mcct(f'{directory}/{file}')
    out = {}
    for part in parts:
        out.update(read_mcct(part))
    return out


def rel(a, b, floor=1e-30):
    """||a - b|| / ||b||; `floor` stands in for ||b|| when b is (near) zero in exact arithmetic,
    e.g. the key bias's gradient (softmax ignores a constant added to every score of a row)."""
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), floor))


def read_steps(path):
    """steps.txt: one `iteration loss lr grad_norm` line per applied step."""
    rows = []
    for n, line in enumerate(open(path), 1):
        f = line.split()
        if len(f) != 4:
            sys.exit(f'{path}:{n}: want `iteration loss lr grad_norm`, got {line.strip()!r}')
        rows.append((int(f[0]), *map(float, f[1:])))
    return rows


def noise_driven(grads):
    """The parameters whose gradient is zero in exact arithmetic (the key bias's: softmax ignores a
    constant added to every score of a row), found as a step-1 gradient below 1e-6 of the largest:
    rounding noise. Adam moves them by noise, in a direction the reduction order sets, so their
    final values cannot be compared (Adam's eps keeps them near 0)."""
    norms = {n: float(np.linalg.norm(g)) for n, g in grads.items()}
    top = max(norms.values(), default=0.0)
    return {n for n, v in norms.items() if v < 1e-6 * top}


def detail(what, run, ref):
    """Where a failing tensor differs: the count and first index of elements off by more than 1e-3
    of the tensor's largest, and whether the run's values are the reference's moved elsewhere."""
    off = np.abs(run - ref) > 1e-3 * max(float(np.abs(ref).max()), 1e-30)
    first = np.unravel_index(int(np.argmax(off)), ref.shape) if off.any() else None
    moved = bool(np.array_equal(np.sort(run, axis=None), np.sort(ref, axis=None)))
    rows = sorted({int(i) for i in np.nonzero(off.reshape(ref.shape[0], -1).any(axis=1))[0]}) if ref.ndim else []
    print(f'  {what}: {int(off.sum())} of {off.size} elements differ, first at {first}; rows {rows[:12]}'
          f'{"..." if len(rows) > 12 else ""} of {ref.shape[0] if ref.ndim else 1}; '
          f'{"the same values in other places" if moved else "other values"}; '
          f'zeros in run {int((run == 0).sum())}, in reference {int((ref == 0).sum())}')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--cpu', required=True)
    ap.add_argument('--gpu', required=True)
    ap.add_argument('--tol', type=float, default=3e-2)
    ap.add_argument('--loss-tol', type=float, default=2e-2)
    ap.add_argument('--norm-tol', type=float, help='of each step\'s grad norm (default: --tol, the gradients\')')
    # the host computes the lr in double and steps.txt prints it with 9 digits: any layout, any
    # precision writes the same text, so only the printing's rounding is allowed
    ap.add_argument('--lr-tol', type=float, default=1e-8)
    ap.add_argument('--final', action='store_true', help='also compare params_final.mcct (fp32 layouts; in bf16 '
                    'the parameters drift apart with the steps)')
    ap.add_argument('--final-tol', type=float, help='of each final parameter (default: --tol)')
    ap.add_argument('--detail', action='store_true', help='for each tensor that fails: how many elements differ, '
                    'the first, and whether the run holds the reference\'s values in other places (a layout fault)')
    a = ap.parse_args()
    norm_tol = a.tol if a.norm_tol is None else a.norm_tol
    final_tol = a.tol if a.final_tol is None else a.final_tol
    rows, failed, skipped = [], [], []

    def check(what, err, tol, kind):
        rows.append((what, err, tol, kind))
        if not np.isfinite(err) or err > tol:
            failed.append(what)

    files = [('params_init.mcct', 1e-6), ('logits_step1.mcct', a.tol), ('grads_step1.mcct', a.tol)]
    if a.final:
        files.append(('params_final.mcct', final_tol))
    noise = noise_driven(read_dump(a.cpu, 'grads_step1.mcct'))
    for file, tol in files:
        cpu, gpu = read_dump(a.cpu, file), read_dump(a.gpu, file)
        if set(cpu) != set(gpu):
            failed.append(f'{file}: tensor names differ: {sorted(set(cpu) ^ set(gpu))}')
        names = sorted(set(cpu) & set(gpu))
        # per-tensor floor: 1e-3 of the RMS tensor norm of the file (only bites on ~zero tensors)
        floor = 1e-3 * float(np.sqrt(np.mean([np.linalg.norm(cpu[n]) ** 2 for n in names]))) if names else 1e-30
        for name in names:
            if file == 'params_final.mcct' and name in noise:
                skipped.append(name)
                continue
            ref = cpu[name]
            if file == 'logits_step1.mcct' and gpu[name].ndim == ref.ndim and gpu[name].shape[1:] == ref.shape[1:] \
                    and gpu[name].shape[0] < ref.shape[0]:
                ref = ref[:gpu[name].shape[0]]  # a smaller micro-batch: step 1's first samples
            if gpu[name].shape != ref.shape:
                failed.append(f'{file}: {name} is {list(gpu[name].shape)}, the reference {list(ref.shape)}')
                continue
            check(f'{file[:-5]} {name}', rel(gpu[name], ref, floor), tol, file[:-5])
            if a.detail and failed and failed[-1] == f'{file[:-5]} {name}':
                detail(f'{file[:-5]} {name}', gpu[name], ref)
    cpu_steps, gpu_steps = read_steps(f'{a.cpu}/steps.txt'), read_steps(f'{a.gpu}/steps.txt')
    if [c[0] for c in cpu_steps] != [g[0] for g in gpu_steps]:
        failed.append(f'steps.txt: iterations {[g[0] for g in gpu_steps]}, the reference {[c[0] for c in cpu_steps]}')
    for c, g in zip(cpu_steps, gpu_steps):
        for col, what, tol in ((1, 'loss', a.loss_tol), (2, 'lr', a.lr_tol), (3, 'grad norm', norm_tol)):
            check(f'step {c[0]} {what}', abs(g[col] - c[col]) / max(abs(c[col]), 1e-30), tol, what)
    rows.sort(key=lambda r: -r[1] / r[2])
    print(f'{"check":52s} {"rel err":>10s} {"tol":>8s}')
    for what, err, tol, _ in rows[:20]:
        print(f'{what:52s} {err:10.3e} {tol:8.1e} {"ok" if err <= tol else "FAIL"}')
    # the largest error of each kind: what a tolerance has to cover (measured, not guessed)
    for kind in sorted({r[3] for r in rows}):
        worst = max((r for r in rows if r[3] == kind), key=lambda r: r[1])
        print(f'largest {kind + ":":14s} {worst[1]:.3e} ({worst[0]})')
    if skipped:
        print(f'params_final: not compared (their gradient is zero in exact arithmetic): {", ".join(skipped)}')
    print(f'{len(rows)} checks, {len(failed)} failed')
    if failed:
        print('FAIL: ' + ', '.join(failed))
        sys.exit(1)
    print('PASS')


if __name__ == '__main__':
    main()

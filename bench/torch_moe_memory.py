# torch_moe_memory.py ANCHORS CONFIG STEPS [LAYERS] — ../shared/anchors/torch_moe_baseline.py's run of
# CONFIG (at LAYERS layers where given: CONFIG-L<LAYERS>, the same model cut short to fit an 80 GB GPU)
# (its own JSON line: tok/s, MFU, max_memory_allocated), then a second line with what that measure
# leaves out, for a like-for-like memory comparison with train_rank's: PyTorch's caching allocator's
# peak reservation (max_memory_reserved) and the device memory in use at the end as the driver sees
# it (cudaMemGetInfo: total - free, the CUDA context included), which is train_rank's "memory in use".
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
import torch_moe_baseline as b

name, steps = sys.argv[2], int(sys.argv[3])
config = dict(b.CONFIGS[name])
if len(sys.argv) > 4:
    config['L'] = int(sys.argv[4])
    name = '%s-L%d' % (name, config['L'])
torch.backends.cuda.matmul.allow_tf32 = True
b.run(name, config, steps)
free, total = torch.cuda.mem_get_info()
print(json.dumps(dict(system='pytorch', name=name, max_reserved_GiB=round(torch.cuda.max_memory_reserved() / 2**30, 2),
                      device_in_use_GiB=round((total - free) / 2**30, 2))), flush=True)

# device_env.sh — sourced by the scripts that run on the GPU machine (device_run.sh, env_sweep.sh,
# tp_study.sh, overlap_bench.sh, node_run.sh): the libraries devrun/ and the toolkit bring, cuDNN
# 9.19 from PyTorch's copy first on the path (the system's is 9.14 there), NVLink multicast off
# (the device tool's rule), and $O, where the logs go home from.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/devrun/lib:${LD_LIBRARY_PATH:-}
torch_cudnn=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib 2>/dev/null | head -1)
[ -n "$torch_cudnn" ] && export LD_LIBRARY_PATH=$torch_cudnn:$LD_LIBRARY_PATH
export NCCL_NVLS_ENABLE=0
O=${OUT:-/tmp/out}; mkdir -p "$O"

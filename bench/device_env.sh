# device_env.sh — sourced by the scripts that run on the GPU machine (device_run.sh, env_sweep.sh,
# tp_study.sh, overlap_bench.sh, node_run.sh): the libraries devrun/ and the toolkit bring, cuDNN
# 9.19 from PyTorch's copy first on the path (the system's is 9.14 there), NVLink multicast off
# (the device tool's rule), and $O, where the logs go home from. DEVICE_BUNDLE: the bundle whose
# lib/ comes first (default devrun; family_gpu.sh's family, calibrate.sh's calib).
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$PWD/${DEVICE_BUNDLE:-devrun}/lib:${LD_LIBRARY_PATH:-}
torch_cudnn=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib 2>/dev/null | head -1)
[ -n "$torch_cudnn" ] && export LD_LIBRARY_PATH=$torch_cudnn:$LD_LIBRARY_PATH
export NCCL_NVLS_ENABLE=0
O=${OUT:-/tmp/out}; mkdir -p "$O"

# lanes_bin BIN LANES: the executable of devrun/bin that bench/bundle.sh compiled as BIN with
# --comm-lanes LANES (the lanes are compiled into the plan): BIN itself for copy, the default;
# BIN-<lanes> for the others (an empty LANES: none, NCCL's kernels).
lanes_bin() { case "${2:-none}" in copy) echo "$1" ;; *) echo "$1-${2:-none}" ;; esac; }

# numerics REF LOGDIR RUN...: each tiny model's devrun/bin/<model>-cuda-<variant> on two GPUs,
# compiled with --comm-lanes <lanes> (RUN = variant:lanes; "variant:" runs it as none: NCCL's
# kernels; lanes_bin) against <model>-cuda<REF> on one, 10 steps, compared by
# tests/compare_dumps.py: a line each, and " !variant:lanes;" appended to $numerics_failed for
# each that did not pass.
numerics_failed=""
numerics() {
  local ref=$1 logs=$2 m run v lanes rc verdict
  local data="--data-path devrun/data/numerics_text_document --train-iters 10 --eval-iters 0"
  shift 2
  for m in tiny-gpt2 tiny-llama; do
    timeout 60 devrun/bin/$m-cuda$ref $data --dump-dir /tmp/numerics-ref-$m > /dev/null 2>&1
    for run in "$@"; do
      v=${run%%:*} lanes=${run#*:}
      timeout 90 devrun/bin/$(lanes_bin $m-cuda-$v "$lanes") --nproc-per-node 2 $data --dump-dir /tmp/numerics-$v-$m \
        > "$logs/$m-$v-${lanes:-main}.log" 2>&1
      rc=$?
      verdict=$(python3 tests/compare_dumps.py --cpu /tmp/numerics-ref-$m --gpu /tmp/numerics-$v-$m 2>&1 | tail -1)
      echo "$m $v lanes=${lanes:-main} exit $rc: $verdict"
      [ $rc = 0 ] && [ "$verdict" = PASS ] || numerics_failed="$numerics_failed !$v:$lanes;"
      rm -rf /tmp/numerics-$v-$m
    done
    rm -rf /tmp/numerics-ref-$m
  done
}

# node_layouts.sh — the node-scale layouts (issue 6), sourced by bench/bundle.sh (NODE_GPUS=8|4)
# and bench/node_run.sh: lines NAME:RANKS:FLAGS, the reference first (llama-1B: one GPU; the
# llama3-8b-sized model: the smallest layout that fits an H200, TP=2+SP). Every layout trains the
# same global batch (micro-batch x the largest data-parallel size), so each matches the reference.
node_spec() {
  case $1 in
    llama-1B) echo bench/configs/llama-1B.json ;;
    llama3-8b) echo models/llama3-8b.json ;;
    *) echo "node_layouts.sh: unknown model $1 (llama-1B or llama3-8b)" >&2; return 1 ;;
  esac
}
node_layouts() { # MODEL GPUS
  if [ "$1" = llama-1B ]; then echo "ref:1:"; else echo "ref:2:--tp 2 --sequence-parallel"; fi
  if [ "$2" = 8 ]; then
    echo "tp8_sp:8:--tp 8 --sequence-parallel"
    echo "tp4_sp_dp2:8:--tp 4 --sequence-parallel --dp 2"
    echo "tp2_sp_dp4:8:--tp 2 --sequence-parallel --dp 4"
    echo "dp8_zero:8:--dp 8 --use-distributed-optimizer"
    # the micro-batch's halves interleaved (--tp-comm-interleave: micro_batch_size even)
    [ "$1" = llama-1B ] && echo "tp8_sp_interleave:8:--tp 8 --sequence-parallel --tp-comm-interleave"
  else
    echo "tp4_sp:4:--tp 4 --sequence-parallel"
    echo "tp2_sp_dp2:4:--tp 2 --sequence-parallel --dp 2"
    # the 8B model's DP=4 needs 140.9 GiB a GPU with every activation kept: recompute the norms'
    # and activations' outputs (mcc compile refuses it otherwise)
    echo "dp4_zero:4:--dp 4 --use-distributed-optimizer$([ "$1" = llama3-8b ] && echo " --recompute-granularity selective")"
    [ "$1" = llama-1B ] && echo "tp4_sp_interleave:4:--tp 4 --sequence-parallel --tp-comm-interleave"
  fi
  return 0
}
# 50 steps, warm-up 5, the same global batch in every layout
node_flags() { # MODEL GPUS
  local micro
  micro=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['training']['micro_batch_size'])" "$(node_spec "$1")")
  echo "--global-batch-size $((micro * $2)) --train-iters 50 --lr-warmup-iters 5"
}

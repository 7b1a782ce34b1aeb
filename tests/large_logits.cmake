# large_logits.cmake — the tensor-parallel layouts with logits in the hundreds (--init-method-std 8:
# row maxima 130-270), against the single rank (tests/parallel_e2e.sh). Vocabulary-parallel cross
# entropy shifts each row by the maximum of the ranks' row maxima: a sum of them is the same shift
# in exact arithmetic, so small logits pass it, but here exp underflows and the loss is Inf.
# Saturated softmaxes make the gradients ill-conditioned (even one rank split into other
# micro-batches moves them by 2e-3): 2 steps, tensors and grad norms at 1e-2, losses at 1e-5.
if(MPI_C_FOUND)
  foreach(model tiny-gpt2 tiny-llama)
    foreach(layout "tp2:--tp 2" "tp2_sp:--tp 2 --sequence-parallel")
      string(REPLACE ":" ";" layout "${layout}")
      list(GET layout 0 name)
      list(GET layout 1 flags)
      separate_arguments(flags)
      mcc_layout_test(${name}_large_logits_equals_single_rank_${model} ${model} 2 ITERS 2 TOL 1e-2
                      --init-method-std 8 -- ${flags})
    endforeach()
  endforeach()
endif()

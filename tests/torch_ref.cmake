# torch_ref.cmake — the PyTorch checker of train_rank dumps (tests/torch_ref.py) and its self-test;
# and weight decay against it: a large one (1.0, lr 3e-3: the matrices shrink by ~1.6% over 10
# steps) must leave the biases and norm weights alone, as the final weights, compared per tensor,
# show (at the spec's 0.01, decayed norm weights move the losses by less than the reference's
# 1e-4: numerics_vs_torch_* pass). The other numerics_vs_torch_* tests are compiler.cmake's.
add_test(NAME torch_ref_selftest COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/torch_ref_selftest.py)
set_tests_properties(torch_ref_selftest PROPERTIES LABELS numerics)
foreach(model tiny-gpt2 tiny-llama)
  mcc_e2e_test(numerics_vs_torch_weight_decay_${model} numerics_e2e.sh ${model} --weight-decay 1.0 --lr 3e-3)
endforeach()

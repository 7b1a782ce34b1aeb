# torch_ref.cmake — the PyTorch checker of train_rank dumps (tests/torch_ref.py) and its self-test.
add_test(NAME torch_ref_selftest COMMAND /usr/bin/python3 ${CMAKE_SOURCE_DIR}/tests/torch_ref_selftest.py)
set_tests_properties(torch_ref_selftest PROPERTIES LABELS numerics)

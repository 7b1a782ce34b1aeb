# convert.cmake — `mcc convert --to hf / --from hf` (frontend/convert.c): a Hugging Face model
# imported and exported back bit for bit, its logits by a hand-written HF forward equal to the mcc
# model's (tests/torch_ref.py) on the checkpoint, and bad model directories refused by name.
foreach(arch gpt2 llama)
  add_test(NAME convert_hf_roundtrip_${arch} COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_hf.sh $<TARGET_FILE:mcc> ${arch})
  set_tests_properties(convert_hf_roundtrip_${arch} PROPERTIES LABELS numerics)
endforeach()

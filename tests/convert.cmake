# convert.cmake — `mcc convert --to hf / --from hf` (frontend/convert.c): a Hugging Face model
# imported and exported back bit for bit, its logits by a hand-written HF forward equal to the mcc
# model's (tests/torch_ref.py) on the checkpoint (all but GPT-2's and LLaMA's also to train_rank's
# logits and loss on the import), and bad model directories refused by name: GPT-2, LLaMA, Mixtral,
# Qwen2 (q, k, v biases), Qwen3 (q/k norms, head_dim not hidden / heads), Mistral (--architecture),
# Qwen3-MoE (a dense layer by mlp_only_layers or decoder_sparse_step).
foreach(arch gpt2 llama mixtral qwen2 qwen3 mistral qwen3_moe)
  add_test(NAME convert_hf_roundtrip_${arch} COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_hf.sh $<TARGET_FILE:mcc> ${arch})
  set_tests_properties(convert_hf_roundtrip_${arch} PROPERTIES LABELS numerics)
endforeach()
# A trained checkpoint exported, its logits by the HF forward against train_rank's, imported back
# bit for bit and loaded (tests/convert_trained.sh): on one rank (the vocabulary padded 257 -> 384
# and cut back), and saved by tp 2 x dp 2 with the distributed optimizer (its parts assembled).
foreach(model tiny-gpt2 tiny-llama)
  add_test(NAME convert_hf_trained_${model} COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_trained.sh $<TARGET_FILE:mcc> ${model} 1 "")
  set_tests_properties(convert_hf_trained_${model} PROPERTIES LABELS numerics TIMEOUT 300)
endforeach()
# LLaMA 3.1's rope (scaled, base 500000) and eps 1e-6: the export (no --spec) says so in config.json
add_test(NAME convert_hf_trained_rope_scaling_tiny-llama
         COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_trained.sh $<TARGET_FILE:mcc> tiny-llama 1
                 "--rotary-base 500000 --norm-epsilon 1e-6 --use-rope-scaling --rope-scaling-factor 8")
set_tests_properties(convert_hf_trained_rope_scaling_tiny-llama PROPERTIES LABELS numerics TIMEOUT 300)
# each family's default export (no --architecture): Qwen2ForCausalLM (q, k, v biases alone),
# Qwen3ForCausalLM (q/k norms, kv_channels 32 of hidden 64 / 4 heads), Qwen3MoeForCausalLM (tiny-moe
# without its shared expert, with Qwen3's attention; layer 0 dense: mlp_only_layers)
set(MCC_QK "--qk-layernorm --kv-channels 32")
foreach(case "qwen2;tiny-llama;--add-qkv-bias" "qwen3;tiny-llama;${MCC_QK}"
             "qwen3_moe;tiny-moe;--moe-shared-expert-intermediate-size 0 ${MCC_QK}")
  list(GET case 0 name)
  list(GET case 1 model)
  list(GET case 2 flags)
  add_test(NAME convert_hf_trained_${name}_${model}
           COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_trained.sh $<TARGET_FILE:mcc> ${model} 1 "${flags}")
  set_tests_properties(convert_hf_trained_${name}_${model} PROPERTIES LABELS numerics TIMEOUT 300)
endforeach()
# DeepseekV3ForCausalLM: tiny-deepseek-v3 (q latent, YaRN at factor 4 with max_position_embeddings
# 4 x 16, as transformers up to 4.5x derive the factor; 4 groups of which 2 kept, top 4: a group
# scored by its top 2, transformers' fixed count), and without a q latent, plain rope, no groups,
# the sequence-wise aux loss (seq_aux): the HF forward (MLA with the interleaved rope rows, the
# sigmoid router with its expert bias) against train_rank's logits, the import bit for bit, its
# expert biases loaded by --finetune; and what does not map refused by field or key
foreach(case "deepseek_v3;--max-position-embeddings 64 --moe-router-topk 4"
             "deepseek_v3_plain;--q-lora-rank 0 --rotary-scaling-factor 1 --moe-router-num-groups 0 --moe-router-group-topk 0 --moe-router-load-balancing-type seq_aux_loss")
  list(GET case 0 name)
  list(GET case 1 flags)
  add_test(NAME convert_hf_trained_${name}_tiny-deepseek-v3
           COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_trained.sh $<TARGET_FILE:mcc> tiny-deepseek-v3 1 "${flags}")
  set_tests_properties(convert_hf_trained_${name}_tiny-deepseek-v3 PROPERTIES LABELS numerics TIMEOUT 300)
endforeach()
add_test(NAME convert_hf_deepseek_v3_refused COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_deepseek.sh $<TARGET_FILE:mcc>)
set_tests_properties(convert_hf_deepseek_v3_refused PROPERTIES LABELS numerics TIMEOUT 300)
# the checkpoint's model record (tests/checkpoint_model.sh): train_rank --load and --to hf refuse a
# plan or spec of another function by field; an earlier mcc's manifest still loads and converts
add_test(NAME checkpoint_model_record COMMAND ${CMAKE_SOURCE_DIR}/tests/checkpoint_model.sh ${MCC_E2E_MCC})
if(MPI_C_FOUND)
  add_test(NAME convert_hf_trained_tp2_dp2_zero_tiny-llama
           COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_trained.sh $<TARGET_FILE:mcc> tiny-llama 4
                   "--vocab-size 258 --make-vocab-size-divisible-by 1" --tp 2 --dp 2 --use-distributed-optimizer)
  set_tests_properties(convert_hf_trained_tp2_dp2_zero_tiny-llama PROPERTIES LABELS numerics TIMEOUT 300)
  # MixtralForCausalLM from a checkpoint saved at ep 2 x dp 2 (each rank's experts its own part):
  # tiny-moe made Mixtral-shaped (every layer MoE, no shared expert)
  add_test(NAME convert_hf_trained_ep2_tiny-moe
           COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_trained.sh $<TARGET_FILE:mcc> tiny-moe 2
                   "--moe-shared-expert-intermediate-size 0 --moe-layer-freq 1" --dp 2 --expert-model-parallel-size 2)
  set_tests_properties(convert_hf_trained_ep2_tiny-moe PROPERTIES LABELS numerics PROCESSORS 2 TIMEOUT 300)
  # Qwen3's q/k norms saved by tp 2 (each rank its heads, the norm weights whole), and Qwen3-MoE's
  # experts by ep 2 x dp 2
  add_test(NAME convert_hf_trained_tp2_qwen3_tiny-llama
           COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_trained.sh $<TARGET_FILE:mcc> tiny-llama 2
                   "--vocab-size 258 --make-vocab-size-divisible-by 1 ${MCC_QK}" --tp 2)
  add_test(NAME convert_hf_trained_ep2_qwen3_moe_tiny-moe
           COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_trained.sh $<TARGET_FILE:mcc> tiny-moe 2
                   "--moe-shared-expert-intermediate-size 0 ${MCC_QK}" --dp 2 --expert-model-parallel-size 2)
  set_tests_properties(convert_hf_trained_tp2_qwen3_tiny-llama convert_hf_trained_ep2_qwen3_moe_tiny-moe
                       PROPERTIES LABELS numerics PROCESSORS 2 TIMEOUT 300)
endif()
# a 96M-parameter model in and out with a quarter of its size in memory (tests/convert_stream.sh),
# measured on an unsanitized mcc-convert (the fast build's: ASan's shadow and quarantine are memory too)
if(MCC_FAST_BUILD)
  add_test(NAME convert_stream COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_stream.sh ${MCC_FAST_BUILD}/mcc-convert)
elseif(NOT MCC_SANITIZE)
  add_test(NAME convert_stream COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_stream.sh $<TARGET_FILE:mcc-convert>)
endif()
if(TEST convert_stream)
  set_tests_properties(convert_stream PROPERTIES LABELS numerics)
endif()
# mcc-convert: the converter without the compiler's libraries, byte for byte mcc convert's
add_test(NAME convert_standalone COMMAND ${CMAKE_SOURCE_DIR}/tests/convert_standalone.sh $<TARGET_FILE:mcc>
         $<TARGET_FILE:mcc-convert>)

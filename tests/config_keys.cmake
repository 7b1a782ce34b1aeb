# config_keys.cmake — ir/config.def against the keys the printer writes and the keys that are read.
add_test(NAME ir_config_keys COMMAND ${CMAKE_SOURCE_DIR}/tests/config_keys.sh $<TARGET_FILE:mcc>)

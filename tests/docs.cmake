# docs.cmake — README.md and docs/*.md against the code (tests/docs_check.py): the generated pages
# (docs/spec-fields.md, docs/megatron-flags.md) equal what mcc prints now, every mcc and train_rank
# command line in them takes its flags and every unmarked mcc line runs, every link and path names
# a file of the tree, every train_rank flag and mcc compile option is documented. A few seconds.
mcc_e2e_test(docs_check docs_check.py)
set_tests_properties(docs_check PROPERTIES TIMEOUT 120)

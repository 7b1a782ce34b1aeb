/* indexed_builder.h — writes a Megatron indexed dataset (MMIDIDX version 1): PREFIX.bin + PREFIX.idx,
 * as megatron/core/datasets/indexed_dataset.py's IndexedDatasetBuilder does. */
#ifndef MCC_INDEXED_BUILDER_H
#define MCC_INDEXED_BUILDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ib_builder ib_builder;

/* Creates the temporary PREFIX.bin.tmp.PID; tokens are uint16 when vocab_size < 65500, else int32
 * (Megatron's DType.optimal_dtype). Until ib_close, SIGINT and SIGTERM remove the temporaries
 * before they end the process. NULL with a message naming --output-prefix on failure. */
ib_builder *ib_open(const char *prefix, int32_t vocab_size, char *err, size_t errlen);

/* Appends one document of n tokens as one sequence; an empty document adds no sequence but
 * still gets a document-index entry (add_document with no lengths). */
bool ib_add_document(ib_builder *b, const int32_t *ids, size_t n, char *err, size_t errlen);

/* Writes PREFIX.idx.tmp.PID, syncs both to the disk and renames them to PREFIX.bin, then
 * PREFIX.idx, replacing a dataset there (a reader's mappings of it stay valid). */
bool ib_finish(ib_builder *b, char *err, size_t errlen);

/* Frees the builder; when failed, removes the temporaries: an existing PREFIX.bin/.idx stays as
 * it was, and no half dataset remains. */
void ib_close(ib_builder *b, bool failed);

int64_t ib_num_documents(const ib_builder *b);
int64_t ib_num_tokens(const ib_builder *b);
const char *ib_dtype_name(const ib_builder *b);
const char *ib_bin_path(const ib_builder *b);
const char *ib_idx_path(const ib_builder *b);

#endif

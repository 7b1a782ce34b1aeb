/* dataset.h — reads Megatron indexed datasets (PREFIX.idx + PREFIX.bin, "MMIDIDX") for training. */
#ifndef MCC_RT_DATASET_H
#define MCC_RT_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct rt_dataset rt_dataset;

/* mmaps PREFIX.idx and PREFIX.bin and validates magic, version, dtype code (integer dtypes only),
 * the .idx size (exactly the header's arrays, no trailing bytes), the document index (0,
 * non-decreasing, ending at the sequence count), every byte pointer (exactly the running sum of
 * the lengths times the dtype size) and the .bin size (exactly where the last sequence ends).
 * Returns NULL and one message naming the file, the first bad entry and the fix on any error. */
rt_dataset *rt_dataset_open(const char *prefix, char *err, size_t errlen);
void rt_dataset_close(rt_dataset *d);

/* Total tokens over all sequences (> 0 for an opened dataset). */
int64_t rt_dataset_num_tokens(const rt_dataset *d);

/* Number of sequences (Megatron's sequence_lengths.shape[0]: the unit GPT datasets split and
 * shuffle) and the token count of sequence s (0 <= s < num_sequences). */
int64_t rt_dataset_num_sequences(const rt_dataset *d);
int32_t rt_dataset_sequence_length(const rt_dataset *d, int64_t s);

/* Tokens [offset, offset+n) of sequence s (inside it) into out: int32[n]. */
void rt_dataset_read(const rt_dataset *d, int64_t s, int64_t offset, int64_t n, int32_t *out);

/* Whether every token id is in [0, vocab): false with a message naming PREFIX.bin, the first
 * sequence with a bad id, the id and the fix (a negative id: a damaged or foreign file; one of
 * vocab or more: the model's tokenizer or a larger --vocab-size). Scans every token:
 * O(num_tokens), call once at start-up. */
bool rt_dataset_check_tokens(const rt_dataset *d, int64_t vocab, char *err, size_t errlen);

#endif

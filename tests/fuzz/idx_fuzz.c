/* idx_fuzz.c — libFuzzer target: runtime/dataset.c's reader of Megatron indexed datasets, as
 * train_rank --data-path PREFIX opens them. The input: PREFIX.idx, a FUZZ_SEP line, PREFIX.bin.
 * A dataset that opens is read through: every sequence's tokens, and the token check. */
#include "runtime/dataset.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_part part[2];
    if (fuzz_split(data, size, part, 2) < 2)
        part[1] = (fuzz_part){data, 0};
    char idx[256], bin[256], prefix[256];
    fuzz_write("d.idx", part[0], idx, sizeof idx);
    fuzz_write("d.bin", part[1], bin, sizeof bin);
    snprintf(prefix, sizeof prefix, "%s/d", fuzz_dir());
    char err[1024];
    rt_dataset *d = rt_dataset_open(prefix, err, sizeof err);
    if (!d)
        return 0;
    int64_t total = 0;
    for (int64_t s = 0; s < rt_dataset_num_sequences(d); s++) {
        int32_t n = rt_dataset_sequence_length(d, s);
        int32_t *tokens = malloc(((size_t)n + 1) * sizeof *tokens);
        rt_dataset_read(d, s, 0, n, tokens);
        if (n > 1)
            rt_dataset_read(d, s, n / 2, n - n / 2, tokens);
        free(tokens);
        total += n;
    }
    if (total != rt_dataset_num_tokens(d)) {
        fprintf(stderr, "idx_fuzz: the sequences hold %lld tokens, the dataset says %lld\n", (long long)total,
                (long long)rt_dataset_num_tokens(d));
        abort();
    }
    rt_dataset_check_tokens(d, 50257, err, sizeof err);
    rt_dataset_close(d);
    return 0;
}

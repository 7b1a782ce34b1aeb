/* checkpoint_fuzz.c — libFuzzer target: checkpoint/checkpoint.c's reader, as train_rank --load and
 * `mcc convert --to hf` open a checkpoint directory. The input, its files joined by FUZZ_SEP lines:
 * iter_0000000/manifest.json, then rank_00000.json and rank_00000.safetensors, then rank 1's two,
 * and so on (latest_checkpointed_iteration.txt says 0). A checkpoint that opens has every tensor of
 * the manifest assembled whole (at most 64 MiB of them: a manifest may describe any shape). */
#include "checkpoint/checkpoint.h"
#include "tests/fuzz/fuzz.h"

#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_part part[FUZZ_MAX_PARTS];
    int n = fuzz_split(data, size, part, FUZZ_MAX_PARTS);
    char path[256], name[64], err[4096];
    fuzz_write(CK_LATEST_FILE, (fuzz_part){(const uint8_t *)"0\n", 2}, path, sizeof path);
    snprintf(path, sizeof path, "%s/iter_0000000", fuzz_dir());
    mkdir(path, 0755);
    fuzz_write("iter_0000000/manifest.json", part[0], path, sizeof path);
    int k = 0;
    for (; 1 + 2 * k < n; k++) {
        snprintf(name, sizeof name, "iter_0000000/rank_%05d.json", k);
        fuzz_write(name, part[1 + 2 * k], path, sizeof path);
        snprintf(name, sizeof name, "iter_0000000/rank_%05d.safetensors", k);
        fuzz_write(name, 2 + 2 * k < n ? part[2 + 2 * k] : (fuzz_part){data, 0}, path, sizeof path);
    }
    for (; k < FUZZ_MAX_PARTS / 2; k++) { /* the last input's files, gone */
        snprintf(path, sizeof path, "%s/iter_0000000/rank_%05d.json", fuzz_dir(), k);
        unlink(path);
        snprintf(path, sizeof path, "%s/iter_0000000/rank_%05d.safetensors", fuzz_dir(), k);
        unlink(path);
    }
    ck_reader r;
    if (!ck_open(&r, fuzz_dir(), -1, NULL, err, sizeof err))
        return 0;
    for (int i = 0; i < r.ntensors; i++) {
        if (ir_bytes(&r.tensors[i].whole) > (64u << 20))
            continue;
        free(ck_read_whole(&r, r.tensors[i].name, err, sizeof err));
    }
    ck_close(&r);
    return 0;
}

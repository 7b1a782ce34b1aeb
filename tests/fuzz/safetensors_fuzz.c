/* safetensors_fuzz.c — libFuzzer target: checkpoint/safetensors.c's reader, as `mcc convert --from hf`
 * opens a model's files and train_rank its rank files. The input: one .safetensors file. A file
 * that opens has every tensor read and looked up by name, and its metadata looked up. */
#include "checkpoint/safetensors.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[256], err[1024];
    fuzz_write("f.safetensors", (fuzz_part){data, size}, path, sizeof path);
    ck_st_file f;
    if (!ck_st_open(&f, path, NULL, err, sizeof err))
        return 0;
    for (int i = 0; i < f.n; i++) {
        void *buf = malloc(ir_bytes(&f.t[i].type) + 1);
        ck_st_read(&f, i, buf, err, sizeof err);
        free(buf);
        if (ck_st_find(&f, f.t[i].name) < 0) {
            fprintf(stderr, "safetensors_fuzz: tensor %s is not found by its name\n", f.t[i].name);
            abort();
        }
    }
    ck_st_meta(&f, "format");
    ck_st_close(&f);
    return 0;
}

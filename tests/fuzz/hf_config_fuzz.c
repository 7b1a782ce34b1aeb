/* hf_config_fuzz.c — libFuzzer target: `mcc convert --from hf IN CKPT`'s reader of IN/config.json
 * (frontend/convert.c), through mcc_convert_main as the command line calls it. The input: the
 * config.json. IN holds no safetensors: a config that converts to a spec mcc loads ends at the
 * missing weights, after the spec was written and loaded and the model built from it. */
#include "frontend/convert.h"
#include "tests/fuzz/fuzz.h"

#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char in[256], out[256], path[256];
    snprintf(in, sizeof in, "%s/hf", fuzz_dir());
    snprintf(out, sizeof out, "%s/ckpt", fuzz_dir());
    mkdir(in, 0755);
    fuzz_write("hf/config.json", (fuzz_part){data, size}, path, sizeof path);
    char *argv[] = {"--from", "hf", in, out, NULL};
    mcc_convert_main(4, argv);
    return 0;
}

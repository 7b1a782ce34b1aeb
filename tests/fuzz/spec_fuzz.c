/* spec_fuzz.c — libFuzzer target: frontend/spec.c's mcc_spec_load on a SPEC.json and flags, as
 * `mcc compile SPEC.json FLAGS...` gives them. The input: the JSON text, then (after a FUZZ_SEP
 * line) the flags, one a line. An empty JSON part with flags: no spec file (the flags alone).
 * A spec that loads has its derived quantities computed (parameter counts, MoE layers). */
#include "frontend/spec.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_part part[2];
    int nparts = fuzz_split(data, size, part, 2);
    char path[256];
    fuzz_write("spec.json", part[0], path, sizeof path);
    char *flags = nparts > 1 ? fuzz_text(part[1]) : NULL;
    int argc = 0;
    char *argv[256];
    for (char *line = flags, *next; line && argc < 256; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        argv[argc++] = line;
    }
    int rest[256], nrest = 0;
    mcc_spec s;
    char err[4096];
    bool no_file = nparts > 1 && part[0].size == 0;
    if (mcc_spec_load(no_file ? NULL : path, argc, argv, &s, rest, &nrest, err, sizeof err)) {
        volatile int64_t sink = mcc_spec_num_params(&s) + mcc_spec_num_active_params(&s);
        sink += mcc_spec_moe_layer(&s, 0) + mcc_spec_moe_layer(&s, s.num_layers - 1); /* not each: 2^31 may load */
        char modules[256];
        mcc_recompute_modules_text(s.recompute_modules, modules, sizeof modules);
        (void)sink;
    }
    free(flags);
    return 0;
}

/* ir_fuzz.c — libFuzzer target: ir/parse.c on IR text, as `mcc opt IN.ir` and train_rank's plan
 * loading read it: every stage of the text parsed (ir_text_stages, ir_parse_stage), then verified
 * and printed; a module that verifies must round-trip (its printed text parses and prints the same). */
#include "ir/ir.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text((fuzz_part){data, size});
    char err[1024];
    int n = ir_text_stages(text);
    for (int s = 0; s < n; s++) {
        ir_module *m = ir_parse_stage(text, s, err, sizeof err);
        if (!m)
            continue;
        if (ir_verify(m, err, sizeof err)) {
            char *printed = ir_print_module(m);
            ir_module *again = ir_parse_module(printed, err, sizeof err);
            if (!again) {
                fprintf(stderr, "ir_fuzz: the printed module does not parse: %s\n%s", err, printed);
                abort();
            }
            char *reprinted = ir_print_module(again);
            if (strcmp(printed, reprinted)) {
                fprintf(stderr, "ir_fuzz: the module prints differently after a round trip:\n%s\n---\n%s", printed,
                        reprinted);
                abort();
            }
            free(reprinted);
            free(printed);
            ir_module_free(again);
        }
        ir_module_free(m);
    }
    free(text);
    return 0;
}

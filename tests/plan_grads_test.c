/* plan_grads_test.c — reads a plan's text (`mcc ir` output) and checks it as mcc_run_passes does
 * after each pass: the IR verifier, then pass_check_gradients (micro_step writes every
 * parameter's gradient). Prints the first problem; exit 0 when the plan passes, 1 when not.
 * usage: plan_grads_test PLAN.ir (tests/plan_grads.sh feeds it plans with a gradient removed) */
#include "ir/ir.h"
#include "passes/passes.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s PLAN.ir\n", argv[0]);
        return 2;
    }
    FILE *fp = fopen(argv[1], "rb");
    if (!fp) {
        perror(argv[1]);
        return 2;
    }
    size_t len = 0, cap = 1 << 16;
    char *text = malloc(cap);
    for (size_t got; (got = fread(text + len, 1, cap - len - 1, fp)) > 0;)
        if ((len += got) == cap - 1)
            text = realloc(text, cap *= 2);
    fclose(fp);
    text[len] = '\0';
    char err[1024];
    ir_module *m = ir_parse_module(text, err, sizeof err);
    free(text);
    if (!m) {
        fprintf(stderr, "%s does not parse: %s\n", argv[1], err);
        return 2;
    }
    bool ok = ir_verify(m, err, sizeof err) && pass_check_gradients(m, err, sizeof err);
    printf("%s: %s\n", argv[1], ok ? "every parameter's gradient is written" : err);
    ir_module_free(m);
    return ok ? 0 : 1;
}

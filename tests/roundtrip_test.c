/* roundtrip_test.c — for every model spec given: builds the graph, and after the frontend and
 * after each pass checks that the verifier accepts it and that the text form round-trips:
 * print(parse(print(m))) == print(m). Prints how long each model took. A pass that leaves the
 * text as it was (most, on one rank: the layouts' passes) is verified again, but its text, the
 * previous stage's, is not parsed again: that text round-tripped already, and parsing is most of
 * the time (a model of 126 layers, under ASan). */
#include "frontend/model.h"
#include "frontend/spec.h"
#include "passes/passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* *checked: the last text that round-tripped (this model and precision), owned; NULL at first. */
static bool roundtrips(const ir_module *m, const char *spec, const char *stage, char **checked)
{
    char err[1024];
    if (!ir_verify(m, err, sizeof err)) {
        printf("%s after %s: verifier: %s\n", spec, stage, err);
        return false;
    }
    char *text = ir_print_module(m);
    if (*checked && strcmp(text, *checked) == 0) {
        free(text); /* the same text parses to the same module */
        return true;
    }
    ir_module *back = ir_parse_module(text, err, sizeof err);
    if (!back) {
        printf("%s after %s: the printed IR does not parse: %s\n", spec, stage, err);
        free(text);
        return false;
    }
    char *again = ir_print_module(back);
    bool same = strcmp(text, again) == 0;
    if (!same)
        printf("%s after %s: print(parse(print(m))) differs from print(m)\n", spec, stage);
    free(*checked);
    *checked = same ? text : NULL;
    if (!same)
        free(text);
    free(again);
    ir_module_free(back);
    return same;
}

int main(int argc, char **argv)
{
    bool ok = true;
    for (int a = 1; a < argc; a++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        mcc_spec spec;
        char err[1024];
        int rest[1], nrest;
        if (!mcc_spec_load(argv[a], 0, NULL, &spec, rest, &nrest, err, sizeof err)) {
            printf("%s: %s\n", argv[a], err);
            ok = false;
            continue;
        }
        /* fp32 is the CPU target's pipeline; bf16 the CUDA target's, where the precision pass works */
        for (int precision = 0; precision < 2; precision++) {
            const char *dtype = precision ? "bf16" : "f32";
            ir_module *m = mcc_build_model(&spec, true);
            ir_config_set(m, "param_dtype", dtype);
            char *checked = NULL;
            bool model_ok = roundtrips(m, argv[a], "frontend", &checked);
            mcc_pass_options opt = {.target = mcc_target_by_name(precision ? "cuda" : "cpu")};
            for (int p = 0; p < mcc_npasses && model_ok; p++) {
                if (mcc_passes[p].cut) { /* the pipeline pass: these specs have one stage, which it leaves */
                    ir_module **out;
                    int n;
                    if (!mcc_passes[p].cut(m, &opt, &out, &n, err, sizeof err) || out) {
                        printf("%s (%s): pass %s: %s\n", argv[a], dtype, mcc_passes[p].name, out ? "cut one stage" : err);
                        model_ok = false;
                    }
                    continue;
                }
                if (!mcc_passes[p].run(m, &opt, err, sizeof err)) {
                    printf("%s (%s): pass %s: %s\n", argv[a], dtype, mcc_passes[p].name, err);
                    model_ok = false;
                } else {
                    model_ok = roundtrips(m, argv[a], mcc_passes[p].name, &checked);
                }
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            printf("%-32s %-4s %s (%d instructions in micro_step, %.2f s)\n", argv[a], dtype, model_ok ? "ok" : "FAIL",
                   m->funcs[0]->ninstrs, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9);
            t0 = t1;
            free(checked);
            ir_module_free(m);
            ok &= model_ok;
        }
    }
    return ok ? 0 : 1;
}

/* host_optimizer_test.c — the host function's executor (runtime/host_optimizer.c) on the CPU
 * device: a copy up that changes the dtype (an offloaded parameter's f32 value into its bf16 working
 * copy) is converted by the host, rounding to nearest even as the GPU does, through the staging
 * buffer the plan counts (ir_host_staging_bytes), in one chunk or many, its copies at once or
 * queued; and AdamW split over the thread pool started at load (MCC_HOST_OPTIMIZER_THREADS=4)
 * updates every element as the CPU kernel does in one piece. */
#include "ir/ir.h"
#include "runtime/bf16.h"
#include "runtime/cpu_kernels.h"
#include "runtime/program.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 40000 }; /* 9 slices of 4096: every pool thread takes one */

static const char plan[] =
    "global @w : f32[40000] {kind=param, init=zeros, host}\n"
    "global @w.bf16 : bf16[40000] {kind=copy, init=zeros, of=@w}\n"
    "global @w.host_grad : f32[40000] {kind=host_grad, init=zeros, of=@w, host}\n"
    "global @w.adam_m : f32[40000] {kind=adam_m, init=zeros, of=@w, host}\n"
    "global @w.adam_v : f32[40000] {kind=adam_v, init=zeros, of=@w, host}\n"
    "func host_optimizer {kind=host_optimizer, arena=192} {\n"
    "  %0 = input @lr : f32[] @+0\n"
    "  %1 = input @step : f32[] @+64\n"
    "  %2 = input @clip_coef : f32[] @+128\n"
    "  %3 = global @w : f32[40000] @global\n"
    "  %4 = global @w.host_grad : f32[40000] @global\n"
    "  %5 = global @w.adam_m : f32[40000] @global\n"
    "  %6 = global @w.adam_v : f32[40000] @global\n"
    "  adamw %3, %4, %5, %6, %0, %1, %2 {beta1=0.9, beta2=0.95, eps=1e-08, weight_decay=0.01}\n"
    "  %7 = global @w.bf16 : bf16[40000] @global\n"
    "  copy %7, %3\n"
    "}\n";

static int fails;

static void expect(bool ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAIL", what);
    fails += !ok;
}

/* One host_optimizer run of the plan (overlap: config overlap_cpu_optimizer_d2h_h2d, the CPU
 * device's copies then done at once) with the staging halves of half_bytes (0: the plan's). */
static void run_case(bool overlap, size_t half_bytes)
{
    char text[sizeof plan + 64], err[512];
    snprintf(text, sizeof text, "%s%s", overlap ? "config {\n  overlap_cpu_optimizer_d2h_h2d = \"1\"\n}\n" : "", plan);
    rt_program *p = rt_program_load(text, &rt_cpu_device, NULL, 0, err, sizeof err);
    if (!p) {
        fprintf(stderr, "FAIL: the plan does not load: %s\n", err);
        exit(1);
    }
    printf("-- %s, %s\n", overlap ? "copies queued" : "copies at once",
           half_bytes ? "a chunk of 1000 elements a staging half" : "one chunk");
    expect(ir_host_staging_bytes(p->m, p->m->funcs[0]) == 2 * 2 * N && p->host_staging,
           "the converting copy up has a staging buffer of two halves, each the working copy's bytes");
    if (half_bytes) /* white box: smaller halves inside the buffer, so the copy goes up in chunks */
        p->host_staging_bytes = 2 * half_bytes;
    static float w[N], g[N], ref[N], m[N], v[N];
    for (int i = 0; i < N; i++) {
        w[i] = (float)sin(i * 0.37) * (1.0f + (float)i / N);
        g[i] = (float)cos(i * 0.11) * 0.01f;
    }
    memset(m, 0, sizeof m);
    memset(v, 0, sizeof v);
    w[2] = NAN;
    float lr = 1e-3f, step = 1, coef = 0.5f;
    rt_program_write_global(p, ir_global_find(p->m, "w"), w);
    rt_program_write_global(p, ir_global_find(p->m, "w.host_grad"), g);
    rt_program_set_input(p, 0, "lr", &lr, sizeof lr);
    rt_program_set_input(p, 0, "step", &step, sizeof step);
    rt_program_set_input(p, 0, "clip_coef", &coef, sizeof coef);

    /* the reference: the CPU kernel over the whole tensor at once */
    memcpy(ref, w, sizeof w);
    const ir_func *f = p->m->funcs[0];
    const ir_instr *adamw = NULL;
    for (int i = 0; i < f->ninstrs; i++)
        adamw = f->instrs[i].op == IR_OP_ADAMW ? &f->instrs[i] : adamw;
    ir_type t = ir_tensor(IR_F32, 1, (int64_t[]){N}), s = ir_scalar(IR_F32);
    void *args[7] = {ref, g, m, v, &lr, &step, &coef};
    const ir_type *types[7] = {&t, &t, &t, &t, &s, &s, &s};
    rt_kernel_call one = {adamw, 7, 0, args, types, NULL, NULL};
    rt_cpu_adamw_range(&one, 0, N);

    rt_program_run(p, 0);
    static float got[N];
    static uint16_t copy[N];
    rt_program_read_global(p, ir_global_find(p->m, "w"), got);
    rt_program_read_global(p, ir_global_find(p->m, "w.bf16"), copy);
    expect(!memcmp(got, ref, sizeof got), "AdamW over the pool's slices equals the CPU kernel's in one piece, bit for bit");
    bool rounded = true, truncation = true; /* the check can fail: rounding is not cutting the low bits off */
    for (int i = 0; i < N; i++) {
        uint32_t u;
        memcpy(&u, &got[i], sizeof u);
        rounded &= copy[i] == rt_f32_to_bf16(got[i]);
        truncation &= copy[i] == (uint16_t)(u >> 16);
    }
    expect(rounded && !truncation && isnan(rt_bf16_to_f32(copy[2])),
           "the bf16 working copy is the host's round-to-nearest-even of every updated element (NaN stays NaN)");
    rt_program_free(p); /* joins the pool's threads */
}

int main(void)
{
    setenv("MCC_HOST_OPTIMIZER_THREADS", "4", 1);
    run_case(false, 0);
    run_case(true, 0);
    run_case(false, 1000 * sizeof(uint16_t));
    run_case(true, 1000 * sizeof(uint16_t));
    return fails ? 1 : 0;
}

/* train_dumps.c — train_rank's --dump-dir (what the numerics tests compare: parameters,
 * gradients, logits, batches, per-step scalars; split tensors gathered whole) and its checks of
 * non-finite losses, gradient norms and FP8 amaxes. */
#include "train.h"

#include "common/os.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- --dump-dir ---------------------------------------------------------------------------- */

/* A dump file could not be written whole: the run stops, naming it, so a partial dump never
 * passes for a whole one. */
static void dump_failed(const char *path, int error)
{
    fprintf(stderr, "train_rank: error: --dump-dir: cannot write %s: %s\n", path, strerror(error));
    exit(1);
}

static void dump_open(const train_args *a, const char *name, rt_mcct *w)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", a->dump_dir, name);
    if (!rt_mcct_open(w, path))
        dump_failed(w->path, w->error);
}

/* A dump of tensors, NAME.mcct: under pipeline parallelism each stage's first rank writes its own
 * stage's, NAME.stageS.mcct (tests/compare_dumps.py reads them as one). */
static void dump_open_stage(const train_run *r, const char *name, rt_mcct *w)
{
    char file[256];
    int pp = r->par.mesh.degree[IR_AXIS_PP];
    if (pp > 1)
        snprintf(file, sizeof file, "%.*s.stage%d.mcct", (int)strlen(name) - 5, name, r->par.coord[IR_AXIS_PP]);
    else
        snprintf(file, sizeof file, "%s", name);
    dump_open(&r->a, file, w);
}

static void dump_add(rt_mcct *w, const char *name, const ir_type *t, const void *data)
{
    if (!rt_mcct_add(w, name, t, data))
        dump_failed(w->path, w->error);
}

static void dump_close(rt_mcct *w)
{
    if (!rt_mcct_close(w))
        dump_failed(w->path, w->error);
}

/* Global g as the single-rank program holds it, reassembled from every rank's part as its layout
 * record says. The reduced gradient is the gradient's GRAD_SHARD companion where ZeRO made one, a
 * parameter's value its MASTER_SHARD (ir_param_value). Collective: every rank calls. */
static void *whole_global(train_run *r, int g, ir_type *whole)
{
    const ir_global *gl = &r->m->globals[g];
    int shard = gl->kind == IR_GLOBAL_GRAD ? ir_global_companion(r->m, gl->owner, IR_GLOBAL_GRAD_SHARD) : -1;
    int held = gl->kind == IR_GLOBAL_PARAM ? ir_param_value(r->m, g) : shard >= 0 ? shard : g, degree[IR_NUM_AXES];
    ir_axis_degrees(r->m, degree);
    *whole = ir_global_whole(r->m, held, degree);
    void *local = malloc(ir_bytes(&r->m->globals[held].type)), *full = malloc(ir_bytes(whole));
    rt_program_read_global(r->p, held, local);
    rt_parallel_gather(r->p, &r->m->globals[held].layout, whole, local, full);
    free(local);
    return full;
}

void train_dump_globals(train_run *r, ir_global_kind kind, const char *file)
{
    rt_mcct w;
    if (r->stage_writer)
        dump_open_stage(r, file, &w);
    for (int g = 0; g < r->m->nglobals; g++) {
        const ir_global *gl = &r->m->globals[g];
        if (gl->kind != kind)
            continue;
        ir_type whole;
        void *host = whole_global(r, g, &whole);
        if (r->stage_writer)
            dump_add(&w, r->m->globals[ir_global_param(r->m, g)].name, &whole, host);
        free(host);
    }
    if (r->stage_writer)
        dump_close(&w);
}

static void dump_logits(train_run *r, int func)
{
    const ir_func *f = r->m->funcs[func];
    int i = train_io(r, func, IR_OP_OUTPUT, IR_ROLE_LOGITS);
    if (i < 0)
        return;
    const ir_type *t = ir_vtype(f, f->instrs[i].args[0]);
    ir_layout layout = ir_layout_of_type(t);
    int degree[IR_NUM_AXES];
    ir_axis_degrees(r->m, degree);
    ir_type whole = ir_layout_whole(&layout, *t, degree);
    void *host = malloc(ir_bytes(t)), *full = malloc(ir_bytes(&whole));
    rt_program_get_output(r->p, func, i, host, ir_bytes(t));
    rt_parallel_gather(r->p, &layout, &whole, host, full);
    if (r->stage_writer) {
        rt_mcct w;
        dump_open_stage(r, "logits_step1.mcct", &w);
        dump_add(&w, "logits", &whole, full);
        dump_close(&w);
    }
    free(host);
    free(full);
}

void train_dump_batch(train_run *r, int func, int it, int mb)
{
    if (it == 1 && mb == 0)
        dump_logits(r, func); /* collective: every rank */
    if (!r->writer)
        return;
    char name[64];
    snprintf(name, sizeof name, "tokens.%d.%d", it, mb);
    dump_add(&r->batches, name, &r->bt_type, r->tokens);
    snprintf(name, sizeof name, "targets.%d.%d", it, mb);
    dump_add(&r->batches, name, &r->bt_type, r->targets);
}

void train_dump_step(const train_run *r, int it, const train_step_result *s)
{
    if (r->steps && fprintf(r->steps, "%d %.9g %.9g %.9g\n", it, s->loss, s->lr, s->grad_norm) < 0)
        dump_failed(r->steps_path, errno);
}

void train_dumps_start(train_run *r)
{
    char err[4200];
    if (r->stage_writer && !os_mkdirs(r->a.dump_dir, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: --dump-dir: %s\n", err);
        exit(1);
    }
    if (r->writer) {
        dump_open(&r->a, "batches.mcct", &r->batches);
        snprintf(r->steps_path, sizeof r->steps_path, "%s/steps.txt", r->a.dump_dir);
        if (!(r->steps = fopen(r->steps_path, "w")))
            dump_failed(r->steps_path, errno);
    }
    train_dump_globals(r, IR_GLOBAL_PARAM, "params_init.mcct");
}

void train_dumps_finish(train_run *r)
{
    train_dump_globals(r, IR_GLOBAL_PARAM, "params_final.mcct");
    if (train_fp8_delayed(r->m))
        train_dump_globals(r, IR_GLOBAL_FP8_HISTORY, "fp8_histories_final.mcct");
    double lo, hi;
    if (train_expert_bias_range(r, &lo, &hi))
        train_dump_globals(r, IR_GLOBAL_EXPERT_BIAS, "expert_biases_final.mcct");
    if (r->writer) {
        dump_close(&r->batches);
        if (!rt_file_close_synced(r->steps))
            dump_failed(r->steps_path, errno);
    }
}

/* ---- non-finite values --------------------------------------------------------------------- */

bool train_non_finite(const train_run *r, int it, const char *what, double v)
{
    const char *bad = isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf";
    if (!r->a.skip_nan_steps) {
        fprintf(stderr, "train_rank: error: iteration %d: %s is %s, the step's first non-finite value; stopping "
                        "(lower --lr or check the data; --skip-nan-steps skips such steps instead)\n", it, what, bad);
        exit(1);
    }
    fprintf(stderr, "train_rank: warning: iteration %d: %s is %s; skipping the optimizer step\n", it, what, bad);
    return false;
}

/* FP8 delayed scaling: this rank's first FP8_HISTORY global (declaration order: the earliest
 * layer's) whose step amax so far, [0] of a row (an expert weight's history a row an expert), is NaN
 * or infinite, or -1; *v its value. */
static int fp8_bad_amax(const train_run *r, float *v)
{
    for (int g = 0; g < r->m->nglobals; g++) {
        const ir_global *gl = &r->m->globals[g];
        if (gl->kind != IR_GLOBAL_FP8_HISTORY)
            continue;
        float *h = malloc(ir_bytes(&gl->type));
        rt_program_read_global(r->p, g, h);
        int64_t n = gl->type.dims[gl->type.ndim - 1], bad = -1;
        for (int64_t row = 0; row < ir_numel(&gl->type) / n && bad < 0; row++)
            bad = isfinite(h[row * n]) ? -1 : row * n;
        *v = h[bad < 0 ? 0 : bad];
        free(h);
        if (bad >= 0)
            return g;
    }
    return -1;
}

/* What names a non-finite FP8 amax g (of value v) for train_non_finite, into what. */
static const char *fp8_amax_what(const train_run *r, int g, char *what, size_t len)
{
    snprintf(what, len, "the FP8 amax of @%s (this step's amax of the tensor it scales)", r->m->globals[g].name);
    return what;
}

bool train_loss_finite(const train_run *r, int it, int mb, float loss)
{
    if (isfinite(loss))
        return true;
    char what[512];
    float amax;
    int g = fp8_bad_amax(r, &amax);
    if (g >= 0)
        return train_non_finite(r, it, fp8_amax_what(r, g, what, sizeof what), amax);
    snprintf(what, sizeof what, "the loss of micro-batch %d", mb);
    return train_non_finite(r, it, what, loss);
}

bool train_fp8_amaxes_finite(train_run *r, int it)
{
    float amax = NAN;
    int g = fp8_bad_amax(r, &amax);
    if (rt_parallel_world(&r->par, r->p, g >= 0 ? 1.0f : 0.0f, RT_MAX) == 0.0f)
        return true;
    char what[512];
    return train_non_finite(r, it, g >= 0 ? fp8_amax_what(r, g, what, sizeof what) : "an FP8 amax of another rank",
                            amax);
}

bool train_fp8_delayed(const ir_module *m)
{
    return ir_cfg_choice(m, IR_CFG_FP8_FORMAT) != IR_FP8_FORMAT_NONE &&
           ir_cfg_choice(m, IR_CFG_FP8_RECIPE) == IR_FP8_DELAYED;
}

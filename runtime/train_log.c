/* train_log.c — what train_rank tells: the boxed configuration at start-up, Megatron's log line
 * per --log-interval and per validation, and each one's record to the metrics file and
 * TensorBoard (one emit_record feeds both). */
#include "train.h"

#include "common/knobs.h"
#include "common/os.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- records ------------------------------------------------------------------------------- */

/* The metrics file's keys as Megatron's TensorBoard tags (its training_log and
 * evaluate_and_print_results), in Megatron's units; our own tags where it has none. Keys not
 * here (consumed_samples, skipped) are not plotted. */
static const struct {
    const char *key, *tag;
    double scale;
} tb_tags[] = {
    {"loss", "lm loss", 1},
    {"lr", "learning-rate", 1},
    {"grad_norm", "grad-norm", 1},
    {"ms_per_iter", "iteration-time", 1e-3}, /* seconds */
    {"tflops_per_gpu", "throughput", 1},     /* TFLOP/s/GPU */
    {"memory_gib", "mem-allocated-bytes", 1073741824.0},
    {"tokens_per_s_per_gpu", "tokens-per-sec-per-gpu", 1},
    {"mfu", "mfu", 1},
    {"valid_loss", "lm loss validation", 1},
    {"valid_ppl", "lm loss validation ppl", 1},
    {"moe_load_balancing_loss", "load_balancing_loss", 1}, /* Megatron's MoE tags */
    {"moe_z_loss", "z_loss", 1},
    {"moe_load_imbalance", "load_imbalance", 1},
    {"moe_dropped_fraction", "dropped_fraction", 1},
};

static bool tb_record(rt_tb *tb, int it, const rt_scalar *s, int n, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof tb_tags / sizeof tb_tags[0]; k++)
            if (!strcmp(s[i].key, tb_tags[k].key) && isfinite(s[i].value) && /* absent: as Megatron, no point */
                !rt_tb_scalar(tb, tb_tags[k].tag, it, s[i].value * tb_tags[k].scale, err, errlen))
                return false;
    return true;
}

/* One record's scalars to every sink: the metrics file and TensorBoard. A write error stops the
 * run, naming the file: records missing from a run that exits 0 would pass for a whole run. */
static void emit_record(train_run *r, int it, const rt_scalar *s, int n)
{
    char err[1024];
    if ((r->metrics.path && !rt_metrics_record(&r->metrics, it, s, n, err, sizeof err)) ||
        (r->tb && !tb_record(r->tb, it, s, n, err, sizeof err))) {
        fprintf(stderr, "train_rank: error: %s; stopping\n", err);
        exit(1);
    }
}

void train_log_validation(train_run *r, int it, double loss, double seconds)
{
    double ppl = exp(loss < 700 ? loss : 700);
    /* Megatron's line, then our field */
    printf(" validation loss at iteration %d | lm loss value: %.6E | lm loss PPL: %.6E | elapsed time (s): %.1f |\n",
           it, loss, ppl, seconds);
    const rt_scalar rec[] = {{"valid_loss", loss}, {"valid_ppl", ppl}};
    emit_record(r, it, rec, 2);
}

/* ---- the step's line ----------------------------------------------------------------------- */

void train_log_add(train_log_window *w, const train_step_result *s, double seconds)
{
    w->seconds += seconds;
    w->iters++;
    w->skipped += s->skipped;
    w->loss += s->skipped ? 0 : s->loss;
    w->moe_aux += s->skipped ? 0 : s->moe_aux;
    w->moe_z += s->skipped ? 0 : s->moe_z;
    w->moe_imbalance += s->skipped ? 0 : s->moe_imbalance;
    w->moe_dropped += s->skipped ? 0 : s->moe_dropped;
}

void train_log_first_step(const train_run *r, double t_start)
{
    size_t used = r->p->dev->memory_in_use(r->p);
    printf("time to first step: %.2f s", os_now_s() - t_start);
    if (used)
        printf(" | %s memory in use: %.3f GiB", rt_device_names[r->p->dev->kind], used / 1073741824.0);
    printf("\n");
}

/* Bytes of device memory in use; on the CPU the process's resident set. */
static double memory_gib(const train_run *r)
{
    size_t used = r->p->dev->memory_in_use(r->p);
    long pages = 0, rss = 0;
    FILE *f = used ? NULL : fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) == 2)
            used = (size_t)rss * (size_t)sysconf(_SC_PAGESIZE);
        fclose(f);
    }
    return used / 1073741824.0;
}

static bool on_gpu(const train_run *r) { return r->p->dev->kind != RT_DEVICE_CPU; }

/* Megatron's training log line, field for field (names, order and formats of its training_log,
 * so scripts that scrape Megatron logs read ours; bf16 has no loss scaling: 1.0; every skipped
 * step is one with a NaN or Inf), then our fields; their scalars into rec[10]. */
static int megatron_fields(const train_run *r, int it, const train_step_result *last, const train_log_window *w,
                           rt_scalar *rec)
{
    int done = w->iters - w->skipped;
    long long global_batch = (long long)r->B * r->accum * r->par.mesh.degree[IR_AXIS_DP];
    double loss = done ? w->loss / done : NAN, ms = w->seconds * 1e3 / w->iters;
    /* each dp rank's tokens, shared by its tp ranks and pipeline stages */
    double tok_s = (double)r->B * r->T * r->accum / r->par.mesh.degree[IR_AXIS_TP] / r->par.mesh.degree[IR_AXIS_PP] /
                   (ms / 1e3), flops = tok_s * r->flops_per_token;
    double peak = ir_cfg_num(r->m, IR_CFG_PEAK_FLOPS); /* the target's, as mcc compile planned for it */
    double mfu = on_gpu(r) && peak > 0 ? flops / peak : NAN, mem = memory_gib(r);
    long long samples = it * global_batch;
    char mfu_text[32] = "-", when[32];
    if (isfinite(mfu))
        snprintf(mfu_text, sizeof mfu_text, "%.1f%%", 100 * mfu);
    time_t now = time(NULL);
    struct tm local;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&now, &local));
    printf(" [%s] iteration %8d/%8d | consumed samples: %12lld | elapsed time per iteration (ms): %.1f | "
           "throughput per GPU (TFLOP/s/GPU): %.1f | learning rate: %.6E | global batch size: %5lld | lm loss: %.6E | "
           "loss scale: 1.0 | grad norm: %.3f | number of skipped iterations: %3d | number of nan iterations: %3d | "
           "tokens/s/GPU: %.0f | MFU: %s | memory (GiB): %.2f |", when, it, r->iters, samples, ms, flops / 1e12,
           last->lr, global_batch, loss, last->grad_norm, w->skipped, w->skipped, tok_s, mfu_text, mem);
    const rt_scalar base[] = {
        {"consumed_samples", (double)samples}, {"loss", loss}, {"lr", last->lr},
        {"grad_norm", last->skipped ? NAN : last->grad_norm}, {"ms_per_iter", ms}, {"tokens_per_s_per_gpu", tok_s},
        {"tflops_per_gpu", flops / 1e12}, {"mfu", mfu}, {"memory_gib", mem}, {"skipped", w->skipped},
    };
    memcpy(rec, base, sizeof base);
    return (int)(sizeof base / sizeof base[0]);
}

/* An MoE model's fields: Megatron's names for the router losses (its tracker's, unscaled, means
 * over the layers), ours for the load and the aux-loss-free biases; their scalars into rec[6].
 * Collective under pipeline parallelism: every rank calls. */
static int moe_fields(train_run *r, const train_log_window *w, rt_scalar *rec)
{
    int done = w->iters - w->skipped, n = 0;
    double aux = done ? w->moe_aux / done : NAN, z = done ? w->moe_z / done : NAN;
    double imbalance = done ? w->moe_imbalance / done : NAN, dropped = done ? w->moe_dropped / done : NAN;
    if (r->moe.aux_layers)
        printf(" load_balancing_loss: %.6E |", aux);
    if (r->moe.z_layers)
        printf(" z_loss: %.6E |", z);
    if (r->moe.moe)
        printf(" expert load imbalance (max/mean): %.3f |", imbalance);
    if (r->moe.has_kept)
        printf(" dropped fraction: %.4f |", dropped);
    double bias_lo = NAN, bias_hi = NAN;
    bool biased = train_expert_bias_range(r, &bias_lo, &bias_hi);
    if (rt_parallel_comm(IR_AXIS_PP)) { /* each stage holds its own layers' biases (the same over dp) */
        biased = rt_parallel_mean_of(&r->par, r->p, biased ? 1.0f : 0.0f, RT_MAX) > 0;
        bias_lo = -rt_parallel_mean_of(&r->par, r->p, (float)-bias_lo, RT_MAX);
        bias_hi = rt_parallel_mean_of(&r->par, r->p, (float)bias_hi, RT_MAX);
    }
    if (biased)
        printf(" expert bias (min/max): %.4E/%.4E |", bias_lo, bias_hi);
    if (!r->moe.moe)
        return 0;
    rec[n++] = (rt_scalar){"moe_load_balancing_loss", aux};
    rec[n++] = (rt_scalar){"moe_z_loss", z};
    rec[n++] = (rt_scalar){"moe_load_imbalance", imbalance};
    if (r->moe.has_kept)
        rec[n++] = (rt_scalar){"moe_dropped_fraction", dropped};
    if (biased) {
        rec[n++] = (rt_scalar){"moe_expert_bias_min", bias_lo};
        rec[n++] = (rt_scalar){"moe_expert_bias_max", bias_hi};
    }
    return n;
}

/* --optimizer-cpu-offload: the host step an iteration, split into waiting for gradient chunks,
 * AdamW and the copies up (runtime/host_optimizer.c; the rest is its other instructions); their
 * scalars into rec[4]. */
static int host_fields(train_run *r, const train_log_window *w, rt_scalar *rec)
{
    double host[4];
    for (int k = 0; k < 4; k++) {
        host[k] = (r->p->host_times[k] - r->host_logged[k]) * 1e3 / w->iters;
        r->host_logged[k] = r->p->host_times[k];
    }
    if (ir_func_of_kind(r->m, IR_FUNC_HOST_OPTIMIZER) < 0)
        return 0;
    printf(" host step (ms): %.1f (copies down %.1f, adam %.1f, up %.1f) |", host[RT_HOST_TIME_ALL],
           host[RT_HOST_TIME_DOWN], host[RT_HOST_TIME_ADAM], host[RT_HOST_TIME_UP]);
    rec[0] = (rt_scalar){"host_step_ms", host[RT_HOST_TIME_ALL]};
    rec[1] = (rt_scalar){"host_copies_down_ms", host[RT_HOST_TIME_DOWN]};
    rec[2] = (rt_scalar){"host_adam_ms", host[RT_HOST_TIME_ADAM]};
    rec[3] = (rt_scalar){"host_up_ms", host[RT_HOST_TIME_UP]};
    return 4;
}

/* Multi-token prediction's losses, each depth's as Megatron's "mtp_k loss" (unscaled, the mean over the
 * steps applied); their scalars into rec[depths]. Starts the next window's sums. */
static int mtp_fields(train_run *r, const train_log_window *w, rt_scalar *rec)
{
    int done = w->iters - w->skipped;
    for (int k = 0; k < r->mtp.depths; k++) {
        double loss = done ? r->mtp.window[k] / done : NAN;
        printf(" mtp_%d loss: %.6E |", k + 1, loss);
        rec[k] = (rt_scalar){r->mtp.names[k], loss};
        r->mtp.window[k] = 0;
    }
    return r->mtp.depths;
}

void train_log_line(train_run *r, int it, const train_step_result *last, const train_log_window *w)
{
    /* Megatron's fields' 10, an MoE model's 6, the offloaded host step's 4, one a multi-token depth */
    rt_scalar *rec = malloc(sizeof *rec * (size_t)(20 + r->mtp.depths));
    int n = megatron_fields(r, it, last, w, rec);
    n += moe_fields(r, w, rec + n);
    n += mtp_fields(r, w, rec + n);
    n += host_fields(r, w, rec + n);
    printf("\n");
    emit_record(r, it, rec, n);
    free(rec);
}

bool train_expert_bias_range(const train_run *r, double *lo, double *hi)
{
    bool any = false;
    *lo = INFINITY, *hi = -INFINITY;
    for (int g = 0; g < r->m->nglobals; g++) {
        const ir_global *gl = &r->m->globals[g];
        if (gl->kind != IR_GLOBAL_EXPERT_BIAS)
            continue;
        int64_t E = gl->type.dims[1];
        float *h = malloc(ir_bytes(&gl->type));
        rt_program_read_global(r->p, g, h);
        for (int64_t e = 0; e < E; e++)
            *lo = fmin(*lo, h[E + e]), *hi = fmax(*hi, h[E + e]);
        free(h);
        any = true;
    }
    return any;
}

/* ---- start-up ------------------------------------------------------------------------------ */

void train_print_config(const train_run *r)
{
    printf("+-----------------------+-----------------------+\n");
    printf("| parameters            | %21lld |\n", r->cfg.num_params);
    if (r->cfg.num_active_params)
        printf("| active parameters     | %21lld |\n", r->cfg.num_active_params);
    printf("| layers x hidden       | %13lld x %5lld |\n", r->cfg.num_layers, r->cfg.hidden_size);
    const int *d = r->par.mesh.degree; /* the layout compiled in, and the world it takes */
    char layout[64];
    snprintf(layout, sizeof layout, "%d %d %d %d %d %d", d[IR_AXIS_TP], d[IR_AXIS_PP],
             (int)ir_cfg_int(r->m, IR_CFG_NUM_VIRTUAL_STAGES_PER_PIPELINE_RANK), d[IR_AXIS_DP], d[IR_AXIS_CP],
             d[IR_AXIS_EP]);
    printf("| tp pp vp dp cp ep     | %21s |\n", layout);
    printf("| world size            | %21d |\n", d[IR_AXIS_TP] * d[IR_AXIS_CP] * d[IR_AXIS_DP] * d[IR_AXIS_PP]);
    printf("| micro batch x seq     | %13d x %5d |\n", r->B, r->T);
    printf("| micro-batches / step  | %21d |\n", r->accum);
    printf("| train iters           | %21d |\n", r->iters);
    printf("| lr decay              | %21s |\n", ir_cfg_text(r->m, IR_CFG_LR_DECAY_STYLE));
    char warmup[32];
    snprintf(warmup, sizeof warmup, "warmup %s", rt_lr_unit(&r->lr));
    printf("| %-21s | %21g |\n", warmup, r->lr.warmup);
    printf("| eval every / batches  | %13d / %5d |\n", r->eval_interval, r->eval_iters);
    printf("| FLOP per token        | %21.4g |\n", r->flops_per_token);
    printf("| plan memory, bytes    | %21zu |\n", rt_program_plan_bytes(r->p)); /* mcc compile's total */
    if (r->p->host_bytes) /* mcc compile's host memory line */
        printf("| host memory, bytes    | %21zu |\n", r->p->host_bytes);
    for (int k = 0; k < KNOB_COUNT; k++) /* the MCC_ variables set (the rest are at their defaults) */
        if (knob_shown((knob_id)k))
            printf("| %s=%-*s |\n", knob_table[k].name, 44 - (int)strlen(knob_table[k].name), knob_text((knob_id)k));
    printf("+-----------------------+-----------------------+\n");
    rt_gpt_data_print(r->data, stdout);
}

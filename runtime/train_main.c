/* train_main.c — the train_rank main: loads the plan compiled into the executable, reads the
 * dataset, initialises parameters and runs the step schedule for --train-iters iterations,
 * logging one line per step. `--dump-dir` writes what the numerics tests compare. */
#include "dataset.h"
#include "lr_schedule.h"
#include "mcct.h"
#include "program.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* The plan object `mcc compile` wrote: the planned IR, the device it targets and that device's
 * kernel image (a cubin for CUDA; empty for the CPU). */
extern const char mcc_plan_text[];
extern const uint64_t mcc_plan_size;
extern const rt_device *const mcc_plan_device;
extern const char mcc_plan_image[];
extern const uint64_t mcc_plan_image_size;

typedef struct {
    const char *data_path, *dump_dir;
    int train_iters, log_interval;
} train_args;

static void usage(FILE *out)
{
    fprintf(out, "usage: train_rank --data-path PREFIX [--train-iters N] [--log-interval N] [--dump-dir DIR]\n"
                 "  --data-path PREFIX   Megatron indexed dataset PREFIX.bin/.idx (mcc data preprocess writes one)\n"
                 "  --train-iters N      steps to run (default: the spec's train_iters)\n"
                 "  --log-interval N     log every N steps (default 1)\n"
                 "  --dump-dir DIR       write initial parameters, step-1 gradients and logits, batches and\n"
                 "                       per-step loss/lr/grad norm for the numerics tests\n"
                 "  --print-plan         print the compiled plan (IR) and exit\n");
}

static int parse_int_flag(const char *flag, const char *v)
{
    char *end;
    long n = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || n < 1 || n > 1000000000) {
        fprintf(stderr, "train_rank: error: %s needs a positive integer, got '%s'\n", flag, v ? v : "(nothing)");
        exit(2);
    }
    return (int)n;
}

static train_args parse_args(int argc, char **argv)
{
    train_args a = {.log_interval = 1};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--data-path") && v)
            a.data_path = argv[++i];
        else if (!strcmp(argv[i], "--dump-dir") && v)
            a.dump_dir = argv[++i];
        else if (!strcmp(argv[i], "--train-iters"))
            a.train_iters = parse_int_flag(argv[i], v), i++;
        else if (!strcmp(argv[i], "--log-interval"))
            a.log_interval = parse_int_flag(argv[i], v), i++;
        else if (!strcmp(argv[i], "--print-plan")) {
            fwrite(mcc_plan_text, 1, mcc_plan_size, stdout);
            exit(0);
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "train_rank: error: unknown or incomplete flag '%s'\n", argv[i]);
            usage(stderr);
            exit(2);
        }
    }
    if (!a.data_path) {
        fprintf(stderr, "train_rank: error: --data-path is required (make a dataset with `mcc data preprocess`)\n");
        exit(2);
    }
    return a;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static FILE *dump_open(const train_args *a, const char *name, rt_mcct *w)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", a->dump_dir, name);
    if (w) {
        if (!rt_mcct_open(w, path))
            goto fail;
        return w->f;
    }
    FILE *f = fopen(path, "w");
    if (f)
        return f;
fail:
    fprintf(stderr, "train_rank: error: cannot write %s (does --dump-dir exist and is it writable?)\n", path);
    exit(1);
}

/* All globals of one kind, named by the parameter they belong to. */
static void dump_globals(const train_args *a, rt_program *p, ir_global_kind kind, const char *file)
{
    rt_mcct w;
    dump_open(a, file, &w);
    for (int g = 0; g < p->m->nglobals; g++) {
        const ir_global *gl = &p->m->globals[g];
        if (gl->kind != kind)
            continue;
        char name[256];
        snprintf(name, sizeof name, "%s", gl->name);
        char *suffix = kind == IR_GLOBAL_GRAD ? strrchr(name, '.') : NULL;
        if (suffix)
            *suffix = 0; /* "<param>.grad" -> "<param>" */
        void *host = malloc(ir_bytes(&gl->type));
        rt_program_read_global(p, g, host);
        rt_mcct_add(&w, name, &gl->type, host);
        free(host);
    }
    rt_mcct_close(&w);
}

static rt_lr_schedule lr_schedule_of(const ir_module *m, int train_iters)
{
    const char *style = ir_config_get(m, "lr_decay_style");
    rt_lr_schedule s = {RT_LR_COSINE, ir_config_real(m, "lr", 3e-4), ir_config_real(m, "min_lr", 0),
                        (int)ir_config_int(m, "lr_warmup_iters", 0), train_iters};
    if (style && !strcmp(style, "constant"))
        s.style = RT_LR_CONSTANT;
    else if (style && !strcmp(style, "linear"))
        s.style = RT_LR_LINEAR;
    return s;
}

int main(int argc, char **argv)
{
    train_args a = parse_args(argc, argv);
    double t_start = now_s();
    char err[1024];
    rt_program *p = rt_program_load(mcc_plan_text, mcc_plan_device, mcc_plan_image_size ? mcc_plan_image : NULL, err,
                                    sizeof err);
    if (!p) {
        fprintf(stderr, "train_rank: error: the compiled plan is invalid (%s); recompile with this mcc\n", err);
        return 1;
    }
    const ir_module *m = p->m;
    int B = (int)ir_config_int(m, "micro_batch_size", 1), T = (int)ir_config_int(m, "seq_length", 1);
    int V = (int)ir_config_int(m, "vocab_size", 1), accum = (int)ir_config_int(m, "accum_steps", 1);
    int iters = a.train_iters ? a.train_iters : (int)ir_config_int(m, "train_iters", 1);
    int micro = ir_func_index(m, "micro_step"), opt = ir_func_index(m, "optimizer");
    rt_lr_schedule lr = lr_schedule_of(m, iters);

    rt_dataset *ds = rt_dataset_open(a.data_path, err, sizeof err);
    if (!ds) {
        fprintf(stderr, "train_rank: error: --data-path %s: %s\n", a.data_path, err);
        return 1;
    }
    int max_token = rt_dataset_max_token(ds);
    if (max_token >= V) {
        fprintf(stderr, "train_rank: error: --data-path %s holds token id %d but the model's vocab_size is %d; "
                        "recompile with --vocab-size %d or more\n", a.data_path, max_token, V, max_token + 1);
        return 1;
    }
    rt_program_init_params(p, (uint64_t)ir_config_int(m, "seed", 1234));
    printf("+-----------------------+----------------+\n");
    printf("| parameters            | %14lld |\n", ir_config_int(m, "num_params", 0));
    printf("| layers x hidden       | %6lld x %5lld |\n", ir_config_int(m, "num_layers", 0), ir_config_int(m, "hidden_size", 0));
    printf("| micro batch x seq     | %6d x %5d |\n", B, T);
    printf("| micro-batches / step  | %14d |\n", accum);
    printf("| dataset tokens        | %14lld |\n", (long long)rt_dataset_num_tokens(ds));
    printf("| train iters           | %14d |\n", iters);
    printf("+-----------------------+----------------+\n");

    const int64_t bt[2] = {B, T};
    const ir_type bt_type = ir_tensor(IR_I32, 2, bt);
    size_t bt_bytes = ir_bytes(&bt_type);
    int32_t *tokens = malloc(bt_bytes), *targets = malloc(bt_bytes);
    int32_t *sample = malloc(sizeof(int32_t) * (size_t)(T + 1));
    rt_mcct batches;
    FILE *steps = NULL;
    if (a.dump_dir) {
        mkdir(a.dump_dir, 0755);
        dump_globals(&a, p, IR_GLOBAL_PARAM, "params_init.mcct");
        dump_open(&a, "batches.mcct", &batches);
        steps = dump_open(&a, "steps.txt", NULL);
    }

    for (int it = 1; it <= iters; it++) {
        double t0 = now_s(), loss = 0;
        for (int mb = 0; mb < accum; mb++) {
            for (int b = 0; b < B; b++) {
                rt_dataset_sample(ds, ((int64_t)(it - 1) * accum + mb) * B + b, T, sample);
                memcpy(tokens + (size_t)b * T, sample, sizeof(int32_t) * (size_t)T);
                memcpy(targets + (size_t)b * T, sample + 1, sizeof(int32_t) * (size_t)T);
            }
            rt_program_set_input(p, micro, "tokens", tokens, bt_bytes);
            rt_program_set_input(p, micro, "targets", targets, bt_bytes);
            rt_program_run(p, micro);
            float micro_loss;
            rt_program_get_output(p, micro, "loss", &micro_loss, sizeof micro_loss);
            loss += micro_loss / accum;
            if (a.dump_dir) {
                char name[64];
                snprintf(name, sizeof name, "tokens.%d.%d", it, mb);
                rt_mcct_add(&batches, name, &bt_type, tokens);
                snprintf(name, sizeof name, "targets.%d.%d", it, mb);
                rt_mcct_add(&batches, name, &bt_type, targets);
                if (it == 1 && mb == 0 && rt_program_find(p, micro, IR_OP_OUTPUT, "logits") >= 0) {
                    rt_mcct w;
                    dump_open(&a, "logits_step1.mcct", &w);
                    const ir_func *f = m->funcs[micro];
                    int i = rt_program_find(p, micro, IR_OP_OUTPUT, "logits");
                    const ir_type *t = ir_vtype(f, f->instrs[i].args[0]);
                    void *host = malloc(ir_bytes(t));
                    rt_program_get_output(p, micro, "logits", host, ir_bytes(t));
                    rt_mcct_add(&w, "logits", t, host);
                    free(host);
                    rt_mcct_close(&w);
                }
            }
        }
        if (a.dump_dir && it == 1)
            dump_globals(&a, p, IR_GLOBAL_GRAD, "grads_step1.mcct");
        float lr_now = (float)rt_lr_at(&lr, it), step_now = (float)it, norm;
        rt_program_set_input(p, opt, "lr", &lr_now, sizeof lr_now);
        rt_program_set_input(p, opt, "step", &step_now, sizeof step_now);
        rt_program_run(p, opt);
        rt_program_get_output(p, opt, "grad_norm", &norm, sizeof norm);
        double ms = (now_s() - t0) * 1e3;
        if (!isfinite(loss) || !isfinite(norm)) {
            fprintf(stderr, "train_rank: error: iteration %d: %s is %g; stopping (lower --lr or check the data)\n", it,
                    isfinite(loss) ? "grad norm" : "loss", isfinite(loss) ? norm : loss);
            return 1;
        }
        if (steps)
            fprintf(steps, "%d %.9g %.9g %.9g\n", it, loss, lr_now, norm);
        if (it == 1) {
            size_t used = p->dev->memory_in_use(p);
            printf("time to first step: %.2f s", now_s() - t_start);
            if (used)
                printf(" | %s memory in use: %.3f GiB", p->dev->name, used / 1073741824.0);
            printf("\n");
        }
        if (it % a.log_interval == 0 || it == iters)
            printf("iter %6d/%d | loss %8.4f | lr %.3e | grad norm %8.4f | %8.1f ms | %9.0f tok/s\n", it, iters,
                   loss, lr_now, norm, ms, (double)B * T * accum / (ms / 1e3));
        fflush(stdout);
    }
    if (a.dump_dir) {
        rt_mcct_close(&batches);
        fclose(steps);
    }
    free(sample);
    free(tokens);
    free(targets);
    rt_dataset_close(ds);
    rt_program_free(p);
    return 0;
}

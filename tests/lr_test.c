/* lr_test.c — every learning-rate style of runtime/lr_schedule.c against its closed form at
 * warmup, mid-run and the end (numbers worked out by hand from Megatron's get_lr), counted in
 * iterations and in samples, warmup from lr_warmup_init, the decoupled group's own lr, and the
 * configs rt_lr_from_config must refuse. lr = 1, min_lr = 0.1, 100 iterations, 10 of warmup. */
#include "runtime/lr_schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "key=value key=value" on top of the base config -> schedule over 100 training iterations. The
 * module is read back from its text, as train_rank reads a plan: a style that is none of the
 * choice's words is refused there (ir_cfg_valid), naming the key. */
static bool schedule_of(const char *settings, rt_lr_schedule *s, char *err, size_t errlen)
{
    ir_module *m = ir_module_new();
    ir_config_set(m, "lr", "1");
    ir_config_set(m, "min_lr", "0.1");
    ir_config_set(m, "lr_warmup_iters", "10");
    char buf[256];
    snprintf(buf, sizeof buf, "%s", settings);
    for (char *kv = strtok(buf, " "); kv; kv = strtok(NULL, " ")) {
        char *eq = strchr(kv, '=');
        *eq = 0;
        ir_config_set(m, kv, eq + 1);
    }
    char *text = ir_print_module(m);
    ir_module *plan = ir_parse_module(text, err, errlen);
    bool ok = plan && rt_lr_from_config(plan, 100, s, err, errlen);
    ir_module_free(plan);
    ir_module_free(m);
    free(text);
    return ok;
}

typedef struct {
    const char *settings;
    int it;
    double want;
} lr_case;

/* Sample-based: 800 samples, 8 an iteration, 80 of warmup: the iteration cases' schedule (the
 * _iters spans ignored). */
#define SAMPLES "train_samples=800 global_batch_size=8 lr_warmup_samples=80 "

static const lr_case cases[] = {
    /* warmup is linear from lr/10 at iteration 1, whatever the decay */
    {"lr_decay_style=cosine", 1, 0.1},
    {"lr_decay_style=linear", 5, 0.5},
    {"lr_decay_style=WSD lr_wsd_decay_iters=20", 10, 1.0},
    {"lr_decay_style=constant", 5, 0.5},
    {"lr_decay_style=constant", 55, 1.0},
    {"lr_decay_style=constant", 100, 1.0},
    {"lr_decay_style=constant", 150, 1.0},
    /* linear: halfway through the 90 decay iterations, half way to min_lr */
    {"lr_decay_style=linear", 55, 0.55},
    {"lr_decay_style=linear", 100, 0.1},
    {"lr_decay_style=linear", 120, 0.1},
    /* cosine: 0.1 + 0.9 * (1 + cos(pi r)) / 2 */
    {"lr_decay_style=cosine", 40, 0.775},   /* r = 1/3 */
    {"lr_decay_style=cosine", 55, 0.55},    /* r = 1/2 */
    {"lr_decay_style=cosine", 100, 0.1},
    /* inverse-square-root: lr * sqrt(warmup / it), floored at min_lr */
    {"lr_decay_style=inverse-square-root", 10, 1.0},
    {"lr_decay_style=inverse-square-root", 40, 0.5},
    {"lr_decay_style=inverse-square-root", 90, 1.0 / 3},
    {"lr_decay_style=inverse-square-root min_lr=0.4", 90, 0.4},
    {"lr_decay_style=inverse-square-root", 101, 0.1},
    /* WSD: stable to iteration 80, then the last 20 decay; r = 1/2 at 90 */
    {"lr_decay_style=WSD lr_wsd_decay_iters=20", 55, 1.0},
    {"lr_decay_style=WSD lr_wsd_decay_iters=20", 80, 1.0},
    {"lr_decay_style=WSD lr_wsd_decay_iters=20 lr_wsd_decay_style=exponential", 90, 0.1 + 0.9 * (M_SQRT2 - 1)},
    {"lr_decay_style=WSD lr_wsd_decay_iters=20 lr_wsd_decay_style=linear", 90, 0.55},
    {"lr_decay_style=WSD lr_wsd_decay_iters=20 lr_wsd_decay_style=cosine", 90, 0.55},
    {"lr_decay_style=WSD lr_wsd_decay_iters=20 lr_wsd_decay_style=minus_sqrt", 90, 0.1 + 0.9 * (1 - M_SQRT1_2)},
    {"lr_decay_style=WSD lr_wsd_decay_iters=20 lr_wsd_decay_style=exponential", 100, 0.1},
    {"lr_decay_style=WSD lr_wsd_decay_iters=20 lr_wsd_decay_style=minus_sqrt", 100, 0.1},
    /* lr_decay_iters beyond train_iters; warmup as a fraction of it (0.1 * 200 = 20 iterations) */
    {"lr_decay_style=linear lr_decay_iters=200", 100, 1 - 0.9 * 90 / 190.0},
    {"lr_decay_style=cosine lr_decay_iters=200 lr_warmup_iters=0 lr_warmup_fraction=0.1", 10, 0.5},
    {"lr_decay_style=cosine lr_decay_iters=200 lr_warmup_iters=0 lr_warmup_fraction=0.1", 110, 0.55},
    {"lr_decay_style=cosine lr_decay_iters=200 lr_warmup_iters=0 lr_warmup_fraction=0.1", 200, 0.1},
    /* in samples, each iteration 8 of them: the same schedule at the same iterations */
    {SAMPLES "lr_decay_style=linear", 5, 0.5},
    {SAMPLES "lr_decay_style=cosine", 40, 0.775},
    {SAMPLES "lr_decay_style=linear", 55, 0.55},
    {SAMPLES "lr_decay_style=linear", 101, 0.1},
    {SAMPLES "lr_decay_style=inverse-square-root", 40, 0.5},
    {SAMPLES "lr_decay_style=WSD lr_wsd_decay_samples=160 lr_wsd_decay_style=linear lr_wsd_decay_iters=5", 80, 1.0},
    {SAMPLES "lr_decay_style=WSD lr_wsd_decay_samples=160 lr_wsd_decay_style=linear lr_wsd_decay_iters=5", 90, 0.55},
    /* warmup of 20 samples: 8 and 16 of them at iterations 1 and 2, done at 3 */
    {SAMPLES "lr_decay_style=constant lr_warmup_samples=20", 1, 0.4},
    {SAMPLES "lr_decay_style=constant lr_warmup_samples=20", 2, 0.8},
    {SAMPLES "lr_decay_style=constant lr_warmup_samples=20", 3, 1.0},
    /* the decay over train_samples (400: 50 iterations), not the run's 100; or over lr_decay_samples */
    {SAMPLES "lr_decay_style=linear train_samples=400", 30, 0.55},
    {SAMPLES "lr_decay_style=linear lr_decay_samples=400", 30, 0.55},
    {SAMPLES "lr_decay_style=linear lr_decay_samples=400", 60, 0.1},
    {SAMPLES "lr_decay_style=linear lr_warmup_samples=0 lr_warmup_fraction=0.1", 5, 0.5},
    /* warmup from lr_warmup_init 0.2: 0.2 + 0.8 it / 10 */
    {"lr_decay_style=constant lr_warmup_init=0.2", 1, 0.28},
    {"lr_decay_style=cosine lr_warmup_init=0.2", 5, 0.6},
    {"lr_decay_style=cosine lr_warmup_init=0.2", 55, 0.55},
    {SAMPLES "lr_decay_style=constant lr_warmup_init=0.2 lr_warmup_samples=20", 1, 0.2 + 0.8 * 0.4},
    {"lr_decay_style=linear decoupled_lr=2 decoupled_min_lr=0.2", 55, 0.55}, /* not the decoupled group's */
};

/* The decoupled group (the embedding and output layer): its own peak and end on the same shape,
 * warmup from the same init; none given, the default group's. */
static const lr_case decoupled_cases[] = {
    {"lr_decay_style=linear decoupled_lr=2 decoupled_min_lr=0.2", 55, 1.1},
    {"lr_decay_style=linear decoupled_lr=2 decoupled_min_lr=0.2", 120, 0.2},
    {"lr_decay_style=cosine lr_warmup_init=0.2 decoupled_lr=2 decoupled_min_lr=0", 5, 1.1},
    {"lr_decay_style=cosine decoupled_lr=0 decoupled_min_lr=0", 40, 0},
    {"lr_decay_style=cosine", 40, 0.775},
};

/* Configs that must be refused, and a word the message must hold. */
static const char *const refused[][2] = {
    {"lr_decay_style=WSD", "lr_wsd_decay_iters"},
    {"lr_decay_style=WSD lr_wsd_decay_iters=101", "lr_wsd_decay_iters"},
    {"lr_decay_style=step", "lr_decay_style"},
    {"lr_decay_style=cosine lr_wsd_decay_style=quadratic", "lr_wsd_decay_style"},
    {"lr_decay_style=cosine lr_warmup_iters=150", "warmup"},
    {SAMPLES "lr_decay_style=cosine lr_warmup_samples=900", "800 samples, lr_decay_samples or train_samples"},
    {SAMPLES "lr_decay_style=WSD lr_wsd_decay_iters=20", "lr_wsd_decay_samples"},
};

/* Group g's lr in each of the n cases against its want; returns the failures. */
static int check_cases(const lr_case *cases, size_t n, rt_lr_group g)
{
    int failures = 0;
    char err[512];
    for (size_t i = 0; i < n; i++) {
        rt_lr_schedule s;
        if (!schedule_of(cases[i].settings, &s, err, sizeof err)) {
            printf("FAIL [%s]: refused: %s\n", cases[i].settings, err);
            failures++;
            continue;
        }
        double got = rt_lr_at(&s, g, cases[i].it);
        if (fabs(got - cases[i].want) > 1e-12) {
            printf("FAIL [%s] %s group, iteration %d: lr %.15g, want %.15g\n", cases[i].settings,
                   g == RT_LR_DECOUPLED ? "decoupled" : "default", cases[i].it, got, cases[i].want);
            failures++;
        }
    }
    return failures;
}

int main(void)
{
    int failures = check_cases(cases, sizeof cases / sizeof cases[0], RT_LR_DEFAULT) +
                   check_cases(decoupled_cases, sizeof decoupled_cases / sizeof decoupled_cases[0], RT_LR_DECOUPLED);
    char err[512];
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        rt_lr_schedule s;
        if (schedule_of(refused[i][0], &s, err, sizeof err) || !strstr(err, refused[i][1])) {
            printf("FAIL [%s]: want a refusal naming %s, got \"%s\"\n", refused[i][0], refused[i][1], err);
            failures++;
        }
        err[0] = 0;
    }
    printf("%s: %d lr cases, %d refusals\n", failures ? "FAILED" : "ok",
           (int)(sizeof cases / sizeof cases[0] + sizeof decoupled_cases / sizeof decoupled_cases[0]),
           (int)(sizeof refused / sizeof refused[0]));
    return failures != 0;
}

/* lr_test.c — every learning-rate style of runtime/lr_schedule.c against its closed form at
 * warmup, mid-run and the end (numbers worked out by hand from Megatron's get_lr), and the
 * configs rt_lr_from_config must refuse. lr = 1, min_lr = 0.1, 100 iterations, 10 of warmup. */
#include "runtime/lr_schedule.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* "key=value key=value" on top of the base config -> schedule over 100 training iterations. */
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
    bool ok = rt_lr_from_config(m, 100, s, err, errlen);
    ir_module_free(m);
    return ok;
}

typedef struct {
    const char *settings;
    int it;
    double want;
} lr_case;

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
};

/* Configs that must be refused, and a word the message must hold. */
static const char *const refused[][2] = {
    {"lr_decay_style=WSD", "lr_wsd_decay_iters"},
    {"lr_decay_style=WSD lr_wsd_decay_iters=101", "lr_wsd_decay_iters"},
    {"lr_decay_style=step", "lr_decay_style"},
    {"lr_decay_style=cosine lr_wsd_decay_style=quadratic", "lr_wsd_decay_style"},
    {"lr_decay_style=cosine lr_warmup_iters=150", "warmup"},
};

int main(void)
{
    int failures = 0;
    char err[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rt_lr_schedule s;
        if (!schedule_of(cases[i].settings, &s, err, sizeof err)) {
            printf("FAIL [%s]: refused: %s\n", cases[i].settings, err);
            failures++;
            continue;
        }
        double got = rt_lr_at(&s, cases[i].it);
        if (fabs(got - cases[i].want) > 1e-12) {
            printf("FAIL [%s] iteration %d: lr %.15g, want %.15g\n", cases[i].settings, cases[i].it, got,
                   cases[i].want);
            failures++;
        }
    }
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        rt_lr_schedule s;
        if (schedule_of(refused[i][0], &s, err, sizeof err) || !strstr(err, refused[i][1])) {
            printf("FAIL [%s]: want a refusal naming %s, got \"%s\"\n", refused[i][0], refused[i][1], err);
            failures++;
        }
        err[0] = 0;
    }
    printf("%s: %d lr cases, %d refusals\n", failures ? "FAILED" : "ok", (int)(sizeof cases / sizeof cases[0]),
           (int)(sizeof refused / sizeof refused[0]));
    return failures != 0;
}

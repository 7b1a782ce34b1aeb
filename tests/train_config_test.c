/* train_config_test.c — rt_train_config_read, the load check of the values train_rank takes from
 * its plan: absent values take their defaults, and a zero interval, a word, an empty value or a
 * degree below 1 are refused, naming the value (not a SIGFPE or a wrong run later). */
#include "runtime/train_config.h"

#include <stdio.h>
#include <string.h>

#include "tests/check.h"

/* The config of a real plan (as `train_rank --print-plan` shows it), key = value settings on top. */
static bool read_with(const char *key, const char *value, rt_train_config *c, char *err, size_t errlen)
{
    ir_module *m = ir_module_new();
    static const char *const base[][2] = {
        {"micro_batch_size", "4"}, {"seq_length", "32"}, {"vocab_size", "257"}, {"accum_steps", "2"},
        {"data_parallel_size", "1"}, {"tensor_model_parallel_size", "1"}, {"train_iters", "10"},
        {"lr_warmup_iters", "2"}, {"seed", "1234"}, {"num_params", "118592"}, {"num_layers", "2"},
        {"hidden_size", "64"}, {"lr_decay_iters", "0"}, {"lr_wsd_decay_iters", "0"}, {"eval_interval", "1000"},
        {"eval_iters", "100"}, {"log_interval", "1"}, {"num_position_params", "2048"},
    };
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++)
        ir_config_set(m, base[i][0], base[i][1]);
    if (key)
        ir_config_set(m, key, value);
    bool ok = rt_train_config_read(m, c, err, errlen);
    ir_module_free(m);
    return ok;
}

int main(void)
{
    rt_train_config c;
    char err[512];
    CHECK(read_with(NULL, NULL, &c, err, sizeof err), "a good plan refused: %s", err);
    CHECK(c.micro_batch_size == 4 && c.accum_steps == 2 && c.log_interval == 1 && c.eval_iters == 100 &&
              c.seed == 1234 && c.num_params == 118592 && c.tp == 1 && c.dp == 1,
          "values read wrong");

    ir_module *empty = ir_module_new(); /* an older plan without the values: the defaults */
    CHECK(rt_train_config_read(empty, &c, err, sizeof err), "an empty config refused: %s", err);
    CHECK(c.log_interval == 1 && c.eval_interval == 1000 && c.eval_iters == 100 && c.accum_steps == 1 && c.seed == 1234,
          "defaults wrong");
    ir_module_free(empty);

    /* key, value, what the message must say */
    static const char *const bad[][3] = {
        {"log_interval", "0", "log_interval 0 is out of range: give an integer in 1..2147483647"},
        {"eval_interval", "0", "eval_interval 0 is out of range"},
        {"accum_steps", "0", "accum_steps 0 is out of range"},
        {"micro_batch_size", "-4", "micro_batch_size -4 is out of range"},
        {"seq_length", "abc", "seq_length expects an integer in 1..2147483647, got 'abc'"},
        {"train_iters", "", "train_iters expects an integer in 1..2147483647, got ''"},
        {"eval_iters", "-1", "eval_iters -1 is out of range: give an integer in 0..2147483647"},
        {"data_parallel_size", "0", "data_parallel_size 0 is out of range"},
        {"tensor_model_parallel_size", "0", "tensor_model_parallel_size 0 is out of range"},
        {"lr_warmup_iters", "-2", "lr_warmup_iters -2 is out of range"},
        {"lr_warmup_samples", "-8", "lr_warmup_samples -8 is out of range"},
        {"global_batch_size", "0", "global_batch_size 0 is out of range"},
        {"seed", "99999999999999999999", "seed 99999999999999999999 is out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        bool ok = read_with(bad[i][0], bad[i][1], &c, err, sizeof err);
        CHECK(!ok && strstr(err, bad[i][2]) && strstr(err, "config value"), "%s = \"%s\": %s, message \"%s\", want \"%s\"",
              bad[i][0], bad[i][1], ok ? "accepted" : "refused", err, bad[i][2]);
    }
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}

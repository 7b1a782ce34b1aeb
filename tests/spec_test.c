/* spec_test.c — the spec frontend: every spec in models/ loads, parameter counts are right, flags
 * override fields, every case of bad_specs.txt fails with its expected message, and every check
 * of the validator refuses at least one of those cases.
 * usage: spec_test tests/bad_specs.txt models/ */
#include "frontend/spec.h"
#include "tests/check.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool load(const char *path, int argc, char **argv, mcc_spec *s, int *rest, int *nrest, char *err)
{
    return mcc_spec_load(path, argc, argv, s, rest, nrest, err, 512);
}

/* Every shipped spec loads; the parameter counts match the published models. */
static void test_models(const char *dir)
{
    static const struct { const char *file; int64_t params, active; } known[] = {
        {"gpt2-124m.json", 124475904, 124475904},   /* tied embeddings, 50257 padded to 50304; 1024 positions */
        {"llama3-8b.json", 8030261248, 8030261248}, /* 128256 = 1002 * 128: no padding */
        {"tiny-llama.json", 123200, 123200},        /* 2*384*64 + 2*(2*64 + 3*64*64 + 64*64 + 3*128*64) + 64 */
        /* a dense layer as tiny-llama's (36992), two MoE layers of 2*64 + 3*64*64 + 64*64, a router
         * 4*64, 4 experts of 3*48*64 (2 of them active) and a shared expert of 3*32*64 */
        {"tiny-moe.json", 197568, 160704},
    };
    DIR *d = opendir(dir);
    CHECK(d, "cannot open %s", dir);
    if (!d) return;
    int n = 0, nknown = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".json") != 0) continue;
        char path[1024], err[512] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        mcc_spec s;
        int rest[1], nrest = -1;
        bool ok = load(path, 0, NULL, &s, rest, &nrest, err);
        CHECK(ok && nrest == 0, "%s: %s", path, err);
        n++;
        for (size_t i = 0; ok && i < sizeof known / sizeof known[0]; i++)
            if (strcmp(known[i].file, e->d_name) == 0) {
                nknown++;
                CHECK(mcc_spec_num_params(&s) == known[i].params, "%s: %lld parameters, expected %lld",
                      path, (long long)mcc_spec_num_params(&s), (long long)known[i].params);
                CHECK(mcc_spec_num_active_params(&s) == known[i].active, "%s: %lld active parameters, expected %lld",
                      path, (long long)mcc_spec_num_active_params(&s), (long long)known[i].active);
            }
    }
    closedir(d);
    CHECK(n >= 8 && nknown == 4, "found %d specs, %d of the 4 with known sizes", n, nknown);
}

/* Flags override the JSON, derived defaults follow them, and unknown flags are left in order. */
static void test_flags(const char *dir)
{
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/gpt2-124m.json", dir);
    char *argv[] = {"-o", "out", "--hidden-size", "1024", "--num-attention-heads", "16", "--swiglu",
                    "--untie-embeddings-and-output-weights", "false", "--tp", "1", "--target", "cpu",
                    "--lr", "1e-3", "--attention-dropout", "0.1"};
    int argc = sizeof argv / sizeof argv[0], rest[sizeof argv / sizeof argv[0]], nrest = 0;
    mcc_spec s;
    bool ok = load(path, argc, argv, &s, rest, &nrest, err);
    CHECK(ok, "%s", err);
    if (!ok) return;
    CHECK(s.hidden_size == 1024 && s.num_attention_heads == 16 && s.num_query_groups == 16, "sizes");
    CHECK(s.activation == MCC_ACT_SWIGLU && !s.untie_embeddings_and_output_weights, "booleans");
    CHECK(s.ffn_hidden_size == 2688, "swiglu ffn default %d, expected 8*1024/3 rounded down to 64s", s.ffn_hidden_size);
    CHECK(s.lr == 1e-3 && s.num_layers == 12 && s.global_batch_size == 512, "other fields kept");
    CHECK(s.attention_dropout == 0.1 && s.hidden_dropout == 0, "dropout: the flag's 0.1, else the default 0 (got %g, %g)",
          s.attention_dropout, s.hidden_dropout);
    CHECK(nrest == 4 && rest[0] == 0 && rest[1] == 1 && rest[2] == 11 && rest[3] == 12, "rest: %d items", nrest);
}

/* The vocabulary is padded as Megatron's _vocab_size_with_padding does, to a multiple of
 * make_vocab_size_divisible_by * tp; vocab_size stays the tokenizer's. */
static void test_vocab_padding(const char *dir)
{
    static const struct { const char *file, *flags[4]; int vocab, padded; } cases[] = {
        {"gpt2-124m.json", {NULL}, 50257, 50304},
        {"gpt2-124m.json", {"--tp", "2", NULL}, 50257, 50432}, /* a multiple of 256 */
        {"tiny-gpt2.json", {NULL}, 257, 384},
        {"tiny-gpt2.json", {"--make-vocab-size-divisible-by", "1", NULL}, 257, 257},
        {"tiny-gpt2.json", {"--make-vocab-size-divisible-by", "1", "--tp", "2"}, 257, 258},
        {"llama3-8b.json", {"--tp", "8", NULL}, 128256, 128 * 1008},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[1024], err[512] = "";
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].file);
        int argc = 0, rest[4], nrest;
        while (argc < 4 && cases[i].flags[argc]) argc++;
        mcc_spec s;
        bool ok = load(path, argc, (char **)cases[i].flags, &s, rest, &nrest, err);
        CHECK(ok, "%s case %zu: %s", cases[i].file, i, err);
        CHECK(!ok || (s.vocab_size == cases[i].vocab && s.padded_vocab_size == cases[i].padded),
              "%s case %zu: vocab %d padded to %d, expected %d -> %d", cases[i].file, i, s.vocab_size,
              s.padded_vocab_size, cases[i].vocab, cases[i].padded);
    }
}

/* Megatron's spellings: no-op flags are consumed (not left for the caller), --disable-bias-linear
 * sets add_bias_linear, and --flag values are read by the table's rules. */
static void test_megatron_flags(const char *dir)
{
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/llama3-8b.json", dir);
    char *argv[] = {"--use-mcore-models", "--bf16", "--use-flash-attn", "--transformer-impl", "local",
                    "--disable-bias-linear", "--group-query-attention", "--no-masked-softmax-fusion",
                    "--no-bias-gelu-fusion", "--distributed-backend", "nccl", "--add-bias-linear", "true",
                    "--make-vocab-size-divisible-by", "64", "-o", "x"};
    int argc = sizeof argv / sizeof argv[0], rest[sizeof argv / sizeof argv[0]], nrest = 0;
    mcc_spec s;
    bool ok = load(path, argc, argv, &s, rest, &nrest, err);
    CHECK(ok, "%s", err);
    CHECK(!ok || (nrest == 2 && rest[0] == argc - 2), "only -o x left for the caller, got %d flags", nrest);
    CHECK(!ok || (s.add_bias_linear && s.make_vocab_size_divisible_by == 64), "a later --add-bias-linear true wins");
    char *disable[] = {"--disable-bias-linear"};
    snprintf(path, sizeof path, "%s/gpt2-124m.json", dir); /* biases on in the JSON */
    ok = load(path, 1, disable, &s, rest, &nrest, err);
    CHECK(ok && !s.add_bias_linear && nrest == 0, "--disable-bias-linear sets add_bias_linear false: %s", err);
}

/* One case of bad_specs.txt: JSON text (blank: no file), flags, expected message substring. */
typedef struct {
    char name[128], flags[512], expect[512];
    char json[8192];
    int line;
} bad_case;

static char *trim(char *s)
{
    while (*s == ' ') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' ')) s[--n] = 0;
    return s;
}

static void run_bad_case(const bad_case *c)
{
    char path[] = "/tmp/mcc_spec_test_XXXXXX.json", err[512] = "";
    int fd = mkstemps(path, 5);
    CHECK(fd >= 0, "mkstemps");
    if (fd < 0) return;
    size_t len = strlen(c->json);
    bool blank = strspn(c->json, " \n") == len;
    CHECK(write(fd, c->json, len) == (ssize_t)len, "write %s", path);
    close(fd);
    if (blank) unlink(path);   /* the case of a missing spec file */

    char flags[512], *argv[64];
    int argc = 0, rest[64], nrest;
    snprintf(flags, sizeof flags, "%s", c->flags);
    for (char *t = strtok(flags, " "); t && argc < 64; t = strtok(NULL, " ")) argv[argc++] = t;
    mcc_spec s;
    bool ok = load(path, argc, argv, &s, rest, &nrest, err);
    CHECK(!ok, "case '%s' (line %d) was accepted", c->name, c->line);
    CHECK(!ok && *c->expect && strstr(err, c->expect), "case '%s' (line %d): message \"%s\" lacks \"%s\"",
          c->name, c->line, err, c->expect);
    size_t elen = strlen(err); /* one problem a line: no empty line among them */
    CHECK(elen && !strstr(err, "\n\n") && err[elen - 1] != '\n', "case '%s': an empty line among its problems: %s", c->name, err);
    printf("%-50s %s\n", c->name, err);
    if (!blank) unlink(path);
}

/* Reads the table (format in its header) and runs each case; returns the number of cases. */
static int test_bad_specs(const char *table)
{
    FILE *f = fopen(table, "r");
    CHECK(f, "cannot open %s", table);
    if (!f) return 0;
    static bad_case c;
    int n = 0, lineno = 0;
    char line[1024];
    for (bool more = true; more;) {
        more = fgets(line, sizeof line, f) != NULL;
        lineno++;
        bool start = more && strncmp(line, "==", 2) == 0;
        if (c.line && (start || !more)) {
            run_bad_case(&c);
            n++;
        }
        if (start) {
            snprintf(c.name, sizeof c.name, "%s", trim(line + 2));
            c.flags[0] = c.expect[0] = c.json[0] = 0;
            c.line = lineno;
        } else if (!more || !c.line) {
            continue;   /* the header, before the first case */
        } else if (strncmp(line, "flags:", 6) == 0) {
            snprintf(c.flags, sizeof c.flags, "%s", trim(line + 6));
        } else if (strncmp(line, "expect:", 7) == 0) {
            snprintf(c.expect, sizeof c.expect, "%s", trim(line + 7));
        } else {
            size_t used = strlen(c.json);
            snprintf(c.json + used, sizeof c.json - used, "%s", line);
        }
    }
    fclose(f);
    return n;
}

/* Runs the table with every check's count at zero; then each check of the validator must have
 * refused a case: a check (a spec_fail or spec_check_pair in frontend/spec.c) with no case fails. */
static int test_every_check_has_a_case(const char *table)
{
    int nchecks;
    mcc_spec_check *const *checks = mcc_spec_checks(&nchecks);
    for (int i = 0; i < nchecks; i++)
        checks[i]->refusals = 0;
    int ncases = test_bad_specs(table);
    CHECK(nchecks >= 40, "only %d checks listed by mcc_spec_checks: the section mcc_spec_check_list lost some", nchecks);
    for (int i = 0; i < nchecks; i++)
        CHECK(checks[i]->refusals > 0, "the check at frontend/spec.c:%d (%s) refuses no case of %s: add a case it refuses",
              checks[i]->line, checks[i]->func, table);
    printf("spec_test: %d checks of the validator\n", nchecks);
    return ncases;
}

/* moe_layer_freq in Megatron's two forms: N (every N-th layer from layer 0) and a list, as its
 * recipes pass it ("([0]*3+[1]*58)": DeepSeek-V3's first three layers dense). */
static void test_moe_layer_freq(const char *dir)
{
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/tiny-moe.json", dir);
    char *every[] = {"--num-layers", "5", "--moe-layer-freq", "2"};
    char *list[] = {"--num-layers", "61", "--moe-layer-freq", "([0]*3+[1]*58)"};
    int rest[4], nrest;
    mcc_spec s;
    bool ok = load(path, 4, every, &s, rest, &nrest, err);
    CHECK(ok, "--moe-layer-freq 2: %s", err);
    CHECK(ok && mcc_spec_moe_layer(&s, 0) && !mcc_spec_moe_layer(&s, 1) && mcc_spec_moe_layer(&s, 4),
          "--moe-layer-freq 2: layers 0, 2 and 4 are MoE");
    ok = load(path, 4, list, &s, rest, &nrest, err);
    CHECK(ok, "--moe-layer-freq ([0]*3+[1]*58): %s", err);
    CHECK(ok && s.moe_layer_freq.n == 61 && !mcc_spec_moe_layer(&s, 2) && mcc_spec_moe_layer(&s, 3) &&
              mcc_spec_moe_layer(&s, 60), "--moe-layer-freq ([0]*3+[1]*58): layers 3..60 are MoE");
}

/* Megatron's LLaMA-3 8B recipe trains by samples: its flags on the spec file (train_iters and
 * lr_warmup_iters, which give way) make an iteration count of train_samples / global_batch_size;
 * decoupled_lr and decoupled_min_lr default to lr and min_lr. */
static void test_sample_based(const char *dir)
{
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/llama3-8b.json", dir);
    char *argv[] = {"--global-batch-size", "128", "--train-samples", "1953125000", "--lr-decay-samples", "1949218748",
                    "--lr-warmup-samples", "3906252", "--lr", "0.00015", "--min-lr", "0.00001", "--decoupled-lr", "5.0e-4",
                    "--decoupled-min-lr", "4.5e-5"};
    int argc = sizeof argv / sizeof argv[0], rest[sizeof argv / sizeof argv[0]], nrest;
    mcc_spec s;
    bool ok = load(path, argc, argv, &s, rest, &nrest, err);
    CHECK(ok, "the recipe's sample-based flags: %s", err);
    CHECK(!ok || (s.train_iters == 15258789 && s.lr_warmup_iters == 0 && s.train_samples == 1953125000 &&
                  s.lr_warmup_samples == 3906252 && s.decoupled_lr == 5e-4 && s.decoupled_min_lr == 4.5e-5),
          "train_iters %d (want 1953125000 / 128 = 15258789), lr_warmup_iters %d (want 0: given way)", s.train_iters,
          s.lr_warmup_iters);
    ok = load(path, 2, argv, &s, rest, &nrest, err);
    CHECK(ok && s.train_iters == 250000 && s.train_samples == 0 && s.decoupled_lr == s.lr &&
              s.decoupled_min_lr == s.min_lr, "without them: the file's iterations, one learning rate: %s", err);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s BAD_SPECS.txt MODELS_DIR\n", argv[0]);
        return 2;
    }
    test_models(argv[2]);
    test_flags(argv[2]);
    test_vocab_padding(argv[2]);
    test_megatron_flags(argv[2]);
    test_moe_layer_freq(argv[2]);
    test_sample_based(argv[2]);
    int n = test_every_check_has_a_case(argv[1]);
    CHECK(n >= 25, "only %d bad-spec cases in %s", n, argv[1]);
    printf("spec_test: %d bad-spec cases, %d failures\n", n, failures);
    return failures ? 1 : 0;
}

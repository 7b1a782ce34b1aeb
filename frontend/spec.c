/* spec.c — reads SPEC.json (jansson), applies --flag overrides and validates the result into an
 * mcc_spec. Every field is described once, in spec_fields; JSON keys, flags, defaults, type and
 * range checks all come from that table. */
#include "frontend/spec.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { SEC_MODEL, SEC_PARALLEL, SEC_TRAINING, SEC_COUNT } spec_section;
static const char *const spec_section_names[SEC_COUNT] = {"model", "parallel", "training"};

/* K_INT, K_BOOL and K_ENUM are stored as integers of the member's size; K_NUM as double. */
typedef enum { K_INT, K_NUM, K_BOOL, K_ENUM } spec_kind;
typedef enum { R_ANY, R_POS, R_NONNEG, R_UNIT, R_DROPOUT } spec_range; /* R_UNIT, R_DROPOUT: [0, 1) */
typedef enum { D_VALUE, D_REQUIRED, D_DERIVED } spec_default;    /* D_DERIVED: spec_derive */

typedef struct {
    spec_section sec;
    const char *key;            /* JSON key; the flag is "--" + key with '-' for '_' */
    const char *alias;          /* extra flag name, or NULL */
    spec_kind kind;
    size_t off, size;
    spec_range range;
    spec_default need;
    double def;                 /* for D_VALUE */
    const char *const *choices; /* K_ENUM: names in enum order, NULL-terminated */
} spec_field;

_Static_assert(sizeof(mcc_norm) == sizeof(int) && sizeof(mcc_pos) == sizeof(int) &&
               sizeof(mcc_act) == sizeof(int) && sizeof(mcc_lr_style) == sizeof(int) &&
               sizeof(mcc_wsd_style) == sizeof(int),
               "enum members are stored as int");
static const char *const spec_norms[] = {"LayerNorm", "RMSNorm", NULL};              /* ORDER mcc_norm */
static const char *const spec_positions[] = {"learned_absolute", "rope", NULL};       /* ORDER mcc_pos */
static const char *const recompute_names[] = {"none", "selective", "activations", NULL};             /* ORDER mcc_recompute */
static const char *const sp_split_names[] = {"sequence", "batch", NULL};                          /* ORDER mcc_sp_split */
static const char *const spec_lr_styles[] = {"constant", "linear", "cosine", "inverse-square-root", "WSD",
                                             NULL}; /* ORDER mcc_lr_style */
static const char *const spec_wsd_styles[] = {"exponential", "linear", "cosine", "minus_sqrt",
                                              NULL}; /* ORDER mcc_wsd_style */
_Static_assert(MCC_NORM_RMSNORM == 1 && MCC_POS_ROPE == 1 && MCC_ACT_SWIGLU == 1 && MCC_LR_WSD == 4 &&
               MCC_WSD_MINUS_SQRT == 3, "choice tables follow the enum order");

#define FIELD(sec, key, member, alias, kind, range, need, def, choices)                           \
    {sec, key, alias, kind, offsetof(mcc_spec, member), sizeof(((mcc_spec *)0)->member), range, \
     need, def, choices}
#define MODEL(m, kind, range, need, def, ch) FIELD(SEC_MODEL, #m, m, NULL, kind, range, need, def, ch)
#define TRAIN(m, kind, range, need, def) FIELD(SEC_TRAINING, #m, m, NULL, kind, range, need, def, NULL)
#define PAR(m, alias) FIELD(SEC_PARALLEL, #m, m, alias, K_INT, R_POS, D_VALUE, 1, NULL)

static const spec_field spec_fields[] = {
    MODEL(num_layers, K_INT, R_POS, D_REQUIRED, 0, NULL),
    MODEL(hidden_size, K_INT, R_POS, D_REQUIRED, 0, NULL),
    MODEL(num_attention_heads, K_INT, R_POS, D_REQUIRED, 0, NULL),
    MODEL(num_query_groups, K_INT, R_POS, D_DERIVED, 0, NULL),
    MODEL(ffn_hidden_size, K_INT, R_POS, D_DERIVED, 0, NULL),
    MODEL(seq_length, K_INT, R_POS, D_REQUIRED, 0, NULL),
    MODEL(max_position_embeddings, K_INT, R_POS, D_DERIVED, 0, NULL),
    MODEL(vocab_size, K_INT, R_POS, D_REQUIRED, 0, NULL),
    MODEL(normalization, K_ENUM, R_ANY, D_VALUE, MCC_NORM_LAYERNORM, spec_norms),
    MODEL(position_embedding_type, K_ENUM, R_ANY, D_VALUE, MCC_POS_LEARNED, spec_positions),
    FIELD(SEC_MODEL, "swiglu", activation, NULL, K_BOOL, R_ANY, D_VALUE, MCC_ACT_GELU, NULL),
    MODEL(untie_embeddings_and_output_weights, K_BOOL, R_ANY, D_VALUE, false, NULL),
    MODEL(add_bias_linear, K_BOOL, R_ANY, D_VALUE, true, NULL),
    MODEL(init_method_std, K_NUM, R_POS, D_VALUE, 0.02, NULL),
    MODEL(norm_epsilon, K_NUM, R_POS, D_VALUE, 1e-5, NULL),
    MODEL(rotary_base, K_NUM, R_POS, D_VALUE, 10000, NULL),
    MODEL(attention_dropout, K_NUM, R_DROPOUT, D_VALUE, 0, NULL), /* Megatron's default is 0.1 */
    MODEL(hidden_dropout, K_NUM, R_DROPOUT, D_VALUE, 0, NULL),
    PAR(tensor_model_parallel_size, "tp"),
    PAR(pipeline_model_parallel_size, "pp"),
    PAR(data_parallel_size, "dp"),
    FIELD(SEC_PARALLEL, "use_distributed_optimizer", use_distributed_optimizer, NULL, K_BOOL, R_ANY, D_VALUE, false,
          NULL),
    FIELD(SEC_PARALLEL, "sequence_parallel", sequence_parallel, NULL, K_BOOL, R_ANY, D_VALUE, false, NULL),
    /* batch: sequence parallelism's activations split by whole batch rows ([B/tp,T,...]), which in
     * mcc's [B,T,...] layout makes each all-gather and reduce-scatter one contiguous block (the
     * sequence split is one block per batch row); needs micro_batch_size % tp == 0 */
    FIELD(SEC_PARALLEL, "sequence_parallel_split", sequence_parallel_split, NULL, K_ENUM, R_ANY, D_VALUE,
          MCC_SP_SPLIT_SEQUENCE, sp_split_names),
    /* Megatron's name: the all-gathers and reduce-scatters of sequence parallelism fused with their
     * matmuls (fusion.c); a no-op without sequence_parallel */
    FIELD(SEC_PARALLEL, "tp_comm_overlap", tp_comm_overlap, NULL, K_BOOL, R_ANY, D_VALUE, false, NULL),
    /* the micro-batch's two halves as two chains whose sequence-parallel collectives run beside the
     * other's computation (comm_overlap.c); a no-op without sequence_parallel */
    FIELD(SEC_PARALLEL, "tp_comm_interleave", tp_comm_interleave, NULL, K_BOOL, R_ANY, D_VALUE, false, NULL),
    FIELD(SEC_PARALLEL, "ddp_bucket_size", ddp_bucket_size, NULL, K_INT, R_POS, D_VALUE, 40000000, NULL),
    FIELD(SEC_PARALLEL, "overlap_grad_reduce", overlap_grad_reduce, NULL, K_BOOL, R_ANY, D_VALUE, false, NULL),
    TRAIN(micro_batch_size, K_INT, R_POS, D_VALUE, 1),
    TRAIN(global_batch_size, K_INT, R_POS, D_DERIVED, 0),
    TRAIN(train_iters, K_INT, R_POS, D_VALUE, 10),
    TRAIN(lr, K_NUM, R_NONNEG, D_VALUE, 3e-4),
    TRAIN(min_lr, K_NUM, R_NONNEG, D_VALUE, 0),
    FIELD(SEC_TRAINING, "lr_decay_style", lr_decay_style, NULL, K_ENUM, R_ANY, D_VALUE, MCC_LR_COSINE,
          spec_lr_styles),
    TRAIN(lr_warmup_iters, K_INT, R_NONNEG, D_VALUE, 0),
    TRAIN(lr_warmup_fraction, K_NUM, R_UNIT, D_VALUE, 0),
    TRAIN(lr_decay_iters, K_INT, R_NONNEG, D_VALUE, 0),    /* 0: train_iters */
    FIELD(SEC_TRAINING, "lr_wsd_decay_style", lr_wsd_decay_style, NULL, K_ENUM, R_ANY, D_VALUE, MCC_WSD_EXPONENTIAL,
          spec_wsd_styles),
    TRAIN(lr_wsd_decay_iters, K_INT, R_NONNEG, D_VALUE, 0),
    TRAIN(weight_decay, K_NUM, R_NONNEG, D_VALUE, 0.01),
    TRAIN(clip_grad, K_NUM, R_NONNEG, D_VALUE, 1.0),    /* 0 disables clipping, as in Megatron */
    TRAIN(adam_beta1, K_NUM, R_UNIT, D_VALUE, 0.9),
    TRAIN(adam_beta2, K_NUM, R_UNIT, D_VALUE, 0.999),
    TRAIN(adam_eps, K_NUM, R_POS, D_VALUE, 1e-8),
    TRAIN(seed, K_INT, R_NONNEG, D_VALUE, 1234),
    TRAIN(eval_interval, K_INT, R_POS, D_VALUE, 1000),  /* Megatron's defaults */
    TRAIN(eval_iters, K_INT, R_NONNEG, D_VALUE, 100),   /* 0 disables evaluation */
    TRAIN(log_interval, K_INT, R_POS, D_VALUE, 1),
    /* activations: the backward recomputes GELU/SiLU/SwiGLU outputs from inputs it keeps anyway (an
     * elementwise pass each) instead of keeping them: gpt2-1.5B 65.4 -> 56.1 GiB for ~3% of its step */
    FIELD(SEC_TRAINING, "recompute_granularity", recompute_granularity, NULL, K_ENUM, R_ANY, D_VALUE,
          MCC_RECOMPUTE_NONE, recompute_names),
    TRAIN(recompute_num_layers, K_INT, R_NONNEG, D_VALUE, 0),
};
enum { SPEC_NFIELDS = sizeof spec_fields / sizeof spec_fields[0] };

/* Loader state: where each field's value came from, for messages that point at the input. */
typedef struct {
    mcc_spec s;
    bool set[SPEC_NFIELDS];         /* given in the JSON or by a flag */
    const char *flag[SPEC_NFIELDS]; /* the flag that set it last (argv text), else NULL */
    char where_buf[SPEC_NFIELDS][80];
    char *err;
    size_t errlen;
} spec_ctx;

static bool spec_fail(spec_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
    return false;
}

static int spec_index(const spec_field *f) { return (int)(f - spec_fields); }

/* "model.hidden_size", or the flag that set the value ("--hidden-size", "--tp"). */
static const char *spec_where(spec_ctx *c, const spec_field *f)
{
    int i = spec_index(f);
    if (c->flag[i]) return c->flag[i];
    snprintf(c->where_buf[i], sizeof c->where_buf[i], "%s.%s", spec_section_names[f->sec], f->key);
    return c->where_buf[i];
}

static const spec_field *spec_find(const char *key)
{
    for (int i = 0; i < SPEC_NFIELDS; i++)
        if (strcmp(spec_fields[i].key, key) == 0) return &spec_fields[i];
    return NULL;
}

static void *spec_member(mcc_spec *s, const spec_field *f) { return (char *)s + f->off; }

static void spec_store_int(spec_ctx *c, const spec_field *f, long long v)
{
    if (f->size == sizeof(bool)) *(bool *)spec_member(&c->s, f) = v != 0;
    else *(int *)spec_member(&c->s, f) = (int)v;
}

static double spec_value(spec_ctx *c, const spec_field *f)
{
    void *p = spec_member(&c->s, f);
    if (f->kind == K_NUM) return *(double *)p;
    return f->size == sizeof(bool) ? *(bool *)p : *(int *)p;
}

/* ---- storing one value (shared by JSON and flags) ------------------------------------------ */

static const char *spec_kind_text(spec_kind k)
{
    static const char *const text[] = {"an integer", "a number", "true or false", "a string"};
    return text[k];
}

/* v as the user wrote it is `text` (v is clamped when even long long overflowed). */
static bool spec_set_int(spec_ctx *c, const spec_field *f, const char *where, long long v, const char *text)
{
    if (v < INT_MIN || v > INT_MAX)
        return spec_fail(c, "%s = %.32s does not fit in a 32-bit int: use a value of at most %d", where,
                         text, INT_MAX);
    spec_store_int(c, f, v);
    return true;
}

static void spec_store_num(spec_ctx *c, const spec_field *f, double v) { *(double *)spec_member(&c->s, f) = v; }

static bool spec_set_choice(spec_ctx *c, const spec_field *f, const char *where, const char *v)
{
    char allowed[256] = "";
    for (int i = 0; f->choices[i]; i++) {
        if (strcmp(v, f->choices[i]) == 0) {
            spec_store_int(c, f, i);
            return true;
        }
        size_t n = strlen(allowed);
        snprintf(allowed + n, sizeof allowed - n, "%s\"%s\"", i ? ", " : "", f->choices[i]);
    }
    return spec_fail(c, "%s: unknown value \"%.64s\"; allowed: %s", where, v, allowed);
}

static bool spec_set_json(spec_ctx *c, const spec_field *f, const char *where, json_t *v)
{
    static const char *const type_names[] = {"an object", "an array", "a string", "an integer",
                                             "a real",    "true",     "false",    "null"};
    bool ok = (f->kind == K_INT && json_is_integer(v)) || (f->kind == K_NUM && json_is_number(v)) ||
              (f->kind == K_BOOL && json_is_boolean(v)) || (f->kind == K_ENUM && json_is_string(v));
    if (!ok)
        return spec_fail(c, "%s must be %s (got %s)", where, spec_kind_text(f->kind),
                         type_names[json_typeof(v)]);
    switch (f->kind) {
    case K_INT: {
        char text[32];
        snprintf(text, sizeof text, "%lld", (long long)json_integer_value(v));
        return spec_set_int(c, f, where, json_integer_value(v), text);
    }
    case K_NUM: spec_store_num(c, f, json_number_value(v)); return true;
    case K_BOOL: spec_store_int(c, f, json_is_true(v)); return true;
    case K_ENUM: return spec_set_choice(c, f, where, json_string_value(v));
    }
    return false;
}

/* A flag's value; booleans are handled by spec_read_flags. */
static bool spec_set_text(spec_ctx *c, const spec_field *f, const char *where, const char *v)
{
    char *end;
    errno = 0;
    if (f->kind == K_INT) {
        long long n = strtoll(v, &end, 10);
        if (end == v || *end) return spec_fail(c, "%s expects an integer, got \"%.64s\"", where, v);
        if (errno == ERANGE) n = n < 0 ? LLONG_MIN : LLONG_MAX;
        return spec_set_int(c, f, where, n, v);
    }
    if (f->kind == K_NUM) {
        double d = strtod(v, &end);
        if (end == v || *end || !isfinite(d))
            return spec_fail(c, "%s expects a finite number, got \"%.64s\"", where, v);
        spec_store_num(c, f, d);
        return true;
    }
    return spec_set_choice(c, f, where, v);
}

/* ---- unknown keys ------------------------------------------------------------------------- */

static int spec_edit_distance(const char *a, const char *b)
{
    enum { MAXLEN = 64 };
    size_t na = strlen(a), nb = strlen(b);
    if (na >= MAXLEN || nb >= MAXLEN) return INT_MAX;
    int prev[MAXLEN + 1], cur[MAXLEN + 1];
    for (size_t j = 0; j <= nb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, sizeof prev);
    }
    return prev[nb];
}

/* The closest of n names (name_at(0..n-1)) within edit distance 3, or NULL. */
static const char *spec_closest(const char *key, int n, const char *(*name_at)(int))
{
    const char *best = NULL;
    int best_d = 4;
    for (int i = 0; i < n; i++) {
        int d = spec_edit_distance(key, name_at(i));
        if (d < best_d) best_d = d, best = name_at(i);
    }
    return best;
}

static const char *spec_field_name(int i) { return spec_fields[i].key; }
static const char *spec_section_name(int i) { return spec_section_names[i]; }

static bool spec_unknown_key(spec_ctx *c, spec_section sec, const char *key)
{
    const char *sname = spec_section_names[sec];
    const spec_field *elsewhere = spec_find(key);
    if (elsewhere)
        return spec_fail(c, "unknown key %s.%s: %s belongs in the \"%s\" section", sname, key, key,
                         spec_section_names[elsewhere->sec]);
    const char *near = spec_closest(key, SPEC_NFIELDS, spec_field_name);
    if (near)
        return spec_fail(c, "unknown key %s.%.64s: did you mean \"%s\"?", sname, key, near);
    char known[1024] = "";
    for (int i = 0; i < SPEC_NFIELDS; i++) {
        size_t n = strlen(known);
        if (spec_fields[i].sec == sec)
            snprintf(known + n, sizeof known - n, "%s%s", n ? ", " : "", spec_fields[i].key);
    }
    return spec_fail(c, "unknown key %s.%.64s; the keys of \"%s\" are: %s", sname, key, sname, known);
}

/* ---- JSON --------------------------------------------------------------------------------- */

static bool spec_read_section(spec_ctx *c, spec_section sec, json_t *obj)
{
    const char *sname = spec_section_names[sec], *key;
    json_t *v;
    if (!json_is_object(obj))
        return spec_fail(c, "\"%s\" must be an object of settings, e.g. \"%s\": {...}", sname, sname);
    json_object_foreach(obj, key, v) {
        const spec_field *f = spec_find(key);
        if (!f || f->sec != sec) return spec_unknown_key(c, sec, key);
        c->set[spec_index(f)] = true;
        if (!spec_set_json(c, f, spec_where(c, f), v)) return false;
    }
    return true;
}

static bool spec_read_root(spec_ctx *c, const char *path, json_t *root)
{
    if (!json_is_object(root))
        return spec_fail(c, "%s: the spec must be a JSON object with \"model\", \"parallel\" and "
                            "\"training\" sections", path);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        int sec = 0;
        while (sec < SEC_COUNT && strcmp(key, spec_section_names[sec]) != 0) sec++;
        if (sec == SEC_COUNT) {
            const char *near = spec_closest(key, SEC_COUNT, spec_section_name);
            if (near) return spec_fail(c, "unknown top-level key \"%.64s\": did you mean \"%s\"?", key, near);
            return spec_fail(c, "unknown top-level key \"%.64s\": the sections are \"model\", \"parallel\" "
                                "and \"training\"", key);
        }
        if (!spec_read_section(c, sec, v)) return false;
    }
    return true;
}

static bool spec_read_json(spec_ctx *c, const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return spec_fail(c, "cannot open spec file %s: %s", path, strerror(errno));
    json_error_t e;
    json_t *root = json_loadf(fp, JSON_REJECT_DUPLICATES, &e);
    fclose(fp);
    if (!root) return spec_fail(c, "%s:%d:%d: invalid JSON: %s", path, e.line, e.column, e.text);
    bool ok = spec_read_root(c, path, root);
    json_decref(root);
    return ok;
}

/* ---- flags -------------------------------------------------------------------------------- */

/* "--hidden-size" for hidden_size. */
static void spec_flag_name(const spec_field *f, char *buf, size_t n)
{
    snprintf(buf, n, "--%s", f->key);
    for (char *p = buf + 2; *p; p++)
        if (*p == '_') *p = '-';
}

/* The field a "--flag" names ("--hidden-size", "--tp"), or NULL. */
static const spec_field *spec_flag_field(const char *arg)
{
    if (strncmp(arg, "--", 2) != 0) return NULL;
    char key[64];
    size_t n = strlen(arg + 2);
    if (n == 0 || n >= sizeof key) return NULL;
    for (size_t i = 0; i <= n; i++) key[i] = arg[2 + i] == '-' ? '_' : arg[2 + i];
    for (int i = 0; i < SPEC_NFIELDS; i++)
        if (spec_fields[i].alias && strcmp(spec_fields[i].alias, key) == 0) return &spec_fields[i];
    return spec_find(key);
}

static bool spec_read_flags(spec_ctx *c, int argc, char **argv, int *rest, int *nrest)
{
    *nrest = 0;
    for (int i = 0; i < argc; i++) {
        const spec_field *f = spec_flag_field(argv[i]);
        if (!f) {
            rest[(*nrest)++] = i;
            continue;
        }
        const char *flag = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        c->set[spec_index(f)] = true;
        c->flag[spec_index(f)] = flag;
        if (f->kind == K_BOOL) {    /* "--swiglu" alone means true */
            bool explicit = val && (strcmp(val, "true") == 0 || strcmp(val, "false") == 0);
            spec_store_int(c, f, !explicit || strcmp(val, "true") == 0);
            i += explicit;
            continue;
        }
        if (!val || strncmp(val, "--", 2) == 0)
            return spec_fail(c, "%s needs a value (%s), e.g. %s %s", flag, spec_kind_text(f->kind), flag,
                             f->kind == K_ENUM ? f->choices[0] : "1");
        if (!spec_set_text(c, f, flag, val)) return false;
        i++;
    }
    return true;
}

/* ---- defaults and validation -------------------------------------------------------------- */

static void spec_set_defaults(spec_ctx *c)
{
    for (int i = 0; i < SPEC_NFIELDS; i++) {
        const spec_field *f = &spec_fields[i];
        if (f->kind == K_NUM) spec_store_num(c, f, f->def);
        else spec_store_int(c, f, (long long)f->def);
    }
}

/* Sets a D_DERIVED field the user left out to v, the value of `rule`. */
static bool spec_derive_int(spec_ctx *c, const char *key, long long v, const char *rule)
{
    const spec_field *f = spec_find(key);
    if (c->set[spec_index(f)]) return true;
    if (v > INT_MAX)
        return spec_fail(c, "%s: its default %s = %lld does not fit in a 32-bit int; set it explicitly",
                         spec_where(c, f), rule, v);
    spec_store_int(c, f, v);
    return true;
}

/* Defaults that depend on other fields (Megatron's rules). For swiglu the FFN width is Megatron's
 * int(8h/3) rounded down to a multiple of 64 (here at least 64), which keeps the 3-matrix MLP
 * about as large as the 2-matrix 4h one. */
static bool spec_derive(spec_ctx *c)
{
    mcc_spec *s = &c->s;
    bool swiglu = s->activation == MCC_ACT_SWIGLU;
    long long h = s->hidden_size, ffn = swiglu ? 8 * h / 192 * 64 : 4 * h;
    return spec_derive_int(c, "num_query_groups", s->num_attention_heads, "num_attention_heads") &&
           spec_derive_int(c, "max_position_embeddings", s->seq_length, "seq_length") &&
           spec_derive_int(c, "global_batch_size", (long long)s->micro_batch_size * s->data_parallel_size,
                           "micro_batch_size * data_parallel_size") &&
           spec_derive_int(c, "ffn_hidden_size", swiglu && ffn < 64 ? 64 : ffn,
                           swiglu ? "8 * hidden_size / 3 rounded down to a multiple of 64" : "4 * hidden_size");
}

static bool spec_check_field(spec_ctx *c, const spec_field *f)
{
    int i = spec_index(f);
    const char *w = spec_where(c, f);
    if (f->need == D_REQUIRED && !c->set[i]) {
        char flag[64];
        spec_flag_name(f, flag, sizeof flag);
        return spec_fail(c, "%s is required: add \"%s\": N to the \"%s\" section or pass %s N", w, f->key,
                         spec_section_names[f->sec], flag);
    }
    double v = spec_value(c, f);
    if ((f->range == R_POS && !(v > 0)) || (f->range == R_NONNEG && !(v >= 0)))
        return spec_fail(c, "%s must be %s (got %.10g)", w, f->range == R_POS ? "> 0" : ">= 0", v);
    if (f->range == R_UNIT && !(v >= 0 && v < 1))
        return spec_fail(c, "%s must be in [0, 1) (got %.10g)", w, v);
    if (f->range == R_DROPOUT && !(v >= 0 && v < 1))
        return spec_fail(c, "%s must be a dropout probability in [0, 1) (got %.10g): 0 turns that dropout off, "
                            "Megatron's default is 0.1", w, v);
    if (f->sec == SEC_PARALLEL && v != 1 && !strcmp(f->key, "pipeline_model_parallel_size"))
        return spec_fail(c, "%s = %.10g: pipeline parallelism is not implemented yet in this build (tensor and "
                            "data parallelism are); set it to 1", w, v);
    return true;
}

/* A check across two fields: fails with "A (a) <what> B (b)[: hint]" unless ok. */
static bool spec_check_pair(spec_ctx *c, bool ok, const char *a, const char *what, const char *b,
                            const char *hint)
{
    if (ok) return true;
    const spec_field *fa = spec_find(a), *fb = spec_find(b);
    char wb[80];
    snprintf(wb, sizeof wb, "%s", spec_where(c, fb));
    return spec_fail(c, "%s (%.10g) %s %s (%.10g)%s%s", spec_where(c, fa), spec_value(c, fa), what, wb,
                     spec_value(c, fb), hint ? ": " : "", hint ? hint : "");
}

/* Megatron's scheduler asserts: warmup within the decay span, one way of giving warmup, and a WSD
 * decay phase that fits. lr_decay_iters = 0 stands for train_iters. */
static bool spec_check_lr(spec_ctx *c)
{
    mcc_spec *s = &c->s;
    const char *decay_key = s->lr_decay_iters ? "lr_decay_iters" : "train_iters";
    int decay = s->lr_decay_iters ? s->lr_decay_iters : s->train_iters;
    if (c->set[spec_index(spec_find("lr_warmup_iters"))] && c->set[spec_index(spec_find("lr_warmup_fraction"))])
        return spec_fail(c, "%s and %s are both given: set warmup either in iterations or as a fraction of "
                            "the decay iterations, not both", spec_where(c, spec_find("lr_warmup_iters")),
                         spec_where(c, spec_find("lr_warmup_fraction")));
    if (!spec_check_pair(c, s->lr_warmup_iters <= decay, "lr_warmup_iters", "must not exceed", decay_key, NULL))
        return false;
    if (s->lr_decay_style != MCC_LR_WSD)
        return true;
    if (s->lr_wsd_decay_iters == 0)
        return spec_fail(c, "%s is WSD but lr_wsd_decay_iters is not set: give the iterations of the final "
                            "decay, e.g. --lr-wsd-decay-iters %d", spec_where(c, spec_find("lr_decay_style")),
                         decay / 10 ? decay / 10 : 1);
    return spec_check_pair(c, s->lr_wsd_decay_iters <= decay, "lr_wsd_decay_iters", "must not exceed", decay_key,
                           NULL);
}

/* Megatron's tensor-parallel split: heads, kv groups, ffn features and the vocabulary divide by tp. */
static bool spec_check_tp(spec_ctx *c)
{
    const mcc_spec *s = &c->s;
    int tp = s->tensor_model_parallel_size;
    const char *keys[] = {"num_attention_heads", "num_query_groups", "ffn_hidden_size", "vocab_size", "seq_length"};
    int values[] = {s->num_attention_heads, s->num_query_groups, s->ffn_hidden_size, s->vocab_size, s->seq_length};
    bool split_sequence = s->sequence_parallel && s->sequence_parallel_split == MCC_SP_SPLIT_SEQUENCE;
    for (int i = 0; i < 4 + split_sequence; i++) /* the sequence splits only with sequence_parallel */
        if (values[i] % tp)
            return spec_fail(c, "%s (%d) must be divisible by %s (%d): each tensor-parallel rank takes an equal "
                                "share%s", spec_where(c, spec_find(keys[i])), values[i],
                             spec_where(c, spec_find("tensor_model_parallel_size")), tp,
                             i == 3 ? "; pad vocab_size up to a multiple of it" : "");
    if (s->tp_comm_interleave && s->sequence_parallel && tp > 1) {
        int rows = s->sequence_parallel_split == MCC_SP_SPLIT_BATCH ? 2 * tp : 2;
        if (s->micro_batch_size % rows)
            return spec_fail(c, "%s splits the micro-batch into two halves%s: %s (%d) must be divisible by %d",
                             spec_where(c, spec_find("tp_comm_interleave")),
                             rows > 2 ? ", each split by batch rows over the tensor-parallel ranks" : "",
                             spec_where(c, spec_find("micro_batch_size")), s->micro_batch_size, rows);
        if (s->tp_comm_overlap)
            return spec_fail(c, "%s and %s are two ways of overlapping the same collectives: choose one",
                             spec_where(c, spec_find("tp_comm_interleave")), spec_where(c, spec_find("tp_comm_overlap")));
    }
    if (!s->sequence_parallel || s->sequence_parallel_split != MCC_SP_SPLIT_BATCH || tp == 1)
        return true;
    if (s->micro_batch_size % tp)
        return spec_fail(c, "%s batch splits whole batch rows over tensor-parallel ranks: %s (%d) must be divisible "
                            "by %s (%d); raise micro_batch_size or use sequence_parallel_split sequence",
                         spec_where(c, spec_find("sequence_parallel_split")), spec_where(c, spec_find("micro_batch_size")),
                         s->micro_batch_size, spec_where(c, spec_find("tensor_model_parallel_size")), tp);
    return true;
}

static bool spec_validate(spec_ctx *c)
{
    for (int i = 0; i < SPEC_NFIELDS; i++)
        if (!spec_check_field(c, &spec_fields[i])) return false;
    mcc_spec *s = &c->s;
    long long batch_unit = (long long)s->micro_batch_size * s->data_parallel_size;
    if (!spec_check_pair(c, s->hidden_size % s->num_attention_heads == 0, "hidden_size",
                         "must be divisible by", "num_attention_heads", "the head dimension is their quotient") ||
        !spec_check_pair(c, s->num_attention_heads % s->num_query_groups == 0, "num_attention_heads",
                         "must be divisible by", "num_query_groups", NULL) ||
        !spec_check_pair(c, s->position_embedding_type == MCC_POS_ROPE || s->seq_length <= s->max_position_embeddings,
                         "seq_length", "exceeds", "max_position_embeddings",
                         "raise max_position_embeddings or lower seq_length (learned_absolute positions)") ||
        !spec_check_pair(c, s->min_lr <= s->lr, "min_lr", "must not exceed", "lr", NULL) ||
        !spec_check_pair(c, s->recompute_num_layers <= s->num_layers, "recompute_num_layers", "must not exceed",
                         "num_layers", "0 recomputes in every layer") ||
        !spec_check_lr(c))
        return false;
    if (s->recompute_num_layers && s->recompute_granularity == MCC_RECOMPUTE_NONE)
        return spec_fail(c, "%s is set but %s is none: choose what to recompute (activations or selective) or drop "
                            "recompute_num_layers", spec_where(c, spec_find("recompute_num_layers")),
                         spec_where(c, spec_find("recompute_granularity")));
    if (s->global_batch_size % batch_unit)
        return spec_fail(c, "%s (%d) must be a multiple of micro_batch_size * data_parallel_size = %lld: change "
                            "global_batch_size or micro_batch_size", spec_where(c, spec_find("global_batch_size")),
                         s->global_batch_size, batch_unit);
    if (s->position_embedding_type == MCC_POS_ROPE && mcc_spec_head_dim(s) % 2)
        return spec_fail(c, "the head dimension %s / %s = %d must be even for rope: change hidden_size or "
                            "num_attention_heads", spec_where(c, spec_find("hidden_size")),
                         spec_where(c, spec_find("num_attention_heads")), mcc_spec_head_dim(s));
    if (!spec_check_tp(c))
        return false;
    if (mcc_spec_num_params(s) < 0)
        return spec_fail(c, "the model has more than 2^53 parameters: reduce num_layers, hidden_size, "
                            "ffn_hidden_size or vocab_size");
    return true;
}

bool mcc_spec_load(const char *path, int argc, char **argv, mcc_spec *out, int *rest, int *nrest,
                   char *err, size_t errlen)
{
    spec_ctx *c = calloc(1, sizeof *c);
    if (!c) return snprintf(err, errlen, "out of memory reading %s", path), false;
    c->err = err;
    c->errlen = errlen;
    spec_set_defaults(c);
    bool ok = spec_read_json(c, path) && spec_read_flags(c, argc, argv, rest, nrest) && spec_derive(c) &&
              spec_validate(c);
    if (ok) *out = c->s;
    free(c);
    return ok;
}

const char *mcc_spec_choice(const char *key, int value)
{
    const spec_field *f = spec_find(key);
    return f && f->kind == K_ENUM ? f->choices[value] : NULL;
}

/* Counted in double: every term is exact below 2^53, and larger models are reported as -1
 * instead of overflowing. */
int64_t mcc_spec_num_params(const mcc_spec *s)
{
    double d = s->hidden_size, hd = mcc_spec_head_dim(s), ff = s->ffn_hidden_size;
    double q = s->num_attention_heads * hd, kv = s->num_query_groups * hd;
    double norm = s->normalization == MCC_NORM_LAYERNORM ? 2 * d : d;
    double bias = s->add_bias_linear ? q + 2 * kv + d + ff * (s->activation == MCC_ACT_SWIGLU ? 2 : 1) + d : 0;
    double attn = q * d + 2 * kv * d + d * q;                       /* q, k, v, out */
    double mlp = ff * d * (s->activation == MCC_ACT_SWIGLU ? 3 : 2);  /* up (+gate), down */
    double layer = 2 * norm + attn + mlp + bias;
    double embed = (double)s->vocab_size * d * (s->untie_embeddings_and_output_weights ? 2 : 1);
    double pos = s->position_embedding_type == MCC_POS_LEARNED ? (double)s->max_position_embeddings * d : 0;
    double total = embed + pos + s->num_layers * layer + norm;
    return total < 9007199254740992.0 ? (int64_t)total : -1;
}

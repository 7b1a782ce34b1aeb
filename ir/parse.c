/* parse.c — reads the text form that print.c writes back into a module. It checks syntax, names
 * and counts; types are recorded as written and left to the verifier, so a module that does not
 * type-check still loads (and can be printed, diffed and verified). Errors name the line. */
#include "ir_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- lexer ------------------------------------------------------------------------------ */

typedef enum {
    TK_EOF,
    TK_NL,
    TK_IDENT,   /* f32, matmul, micro_step, x2 */
    TK_NUM,     /* 64, -1.5, 1e-05 */
    TK_STR,     /* "quoted" */
    TK_VAL,     /* %12 */
    TK_SYM,     /* @embedding.word, @view */
    TK_OFFSET,  /* @+4096 */
    TK_PUNCT,   /* one character: = , : { } [ ] - */
    TK_BAD,     /* an unterminated string */
} tk_kind;

typedef struct {
    tk_kind kind;
    const char *s;  /* the token's text in the source, sigil included */
    int len;
    int line;
} token;

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

/* Reads one token at *pos. Blanks and comments (`;` to the end of the line) are skipped;
 * newlines are tokens, because the format is one item per line. */
static token lex(const char **pos, int *line)
{
    const char *p = *pos;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r')
            p++;
        if (*p != ';')
            break;
        while (*p && *p != '\n')
            p++;
    }
    token t = {.kind = TK_PUNCT, .s = p, .line = *line};
    const char *q = p + 1;
    if (!*p) {
        t.kind = TK_EOF;
        q = p;
    } else if (*p == '\n') {
        t.kind = TK_NL;
        (*line)++;
    } else if (ir_name_start(*p)) {
        t.kind = TK_IDENT;
        while (ir_name_char(*q))
            q++;
    } else if (*p == '"') {
        while (*q && *q != '"' && *q != '\n')
            q += *q == '\\' && q[1] && q[1] != '\n' ? 2 : 1;
        t.kind = *q == '"' ? TK_STR : TK_BAD;
        q += *q == '"';
    } else if (*p == '%' && is_digit(*q)) {
        t.kind = TK_VAL;
        while (is_digit(*q))
            q++;
    } else if (*p == '@' && ir_name_start(*q)) {
        t.kind = TK_SYM;
        while (ir_name_char(*q))
            q++;
    } else if (*p == '@' && (*q == '+' || *q == '-' || is_digit(*q))) {
        t.kind = TK_OFFSET;
        q++;
        while (is_digit(*q))
            q++;
    } else if (is_digit(*p) || *p == '-' || *p == '+' || *p == '.') {
        char *end;
        strtod(p, &end);
        if (end > p) {
            t.kind = TK_NUM;
            q = end;
        }
    }
    t.len = (int)(q - p);
    *pos = q;
    return t;
}

static bool tok_is(token t, const char *s) { return (size_t)t.len == strlen(s) && memcmp(t.s, s, (size_t)t.len) == 0; }

/* The token's text from `skip` characters in, as a new string. */
static char *tok_text(token t, int skip) { return strndup(t.s + skip, (size_t)(t.len - skip)); }

/* The token's text into buf (false when it does not fit). */
static bool tok_cstr(token t, int skip, char *buf, size_t size)
{
    if ((size_t)(t.len - skip) >= size)
        return false;
    memcpy(buf, t.s + skip, (size_t)(t.len - skip));
    buf[t.len - skip] = '\0';
    return true;
}

/* A whole-token decimal integer, from `skip` characters in. */
static bool tok_int(token t, int skip, int64_t *out)
{
    char buf[32], *end;
    if (!tok_cstr(t, skip, buf, sizeof buf) || !buf[0])
        return false;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    *out = v;
    return *end == '\0' && errno == 0;
}

/* A whole-token number; inf and nan are words to the lexer. */
static bool tok_double(token t, double *out)
{
    char buf[64], *end;
    if ((t.kind != TK_NUM && t.kind != TK_IDENT) || !tok_cstr(t, 0, buf, sizeof buf))
        return false;
    *out = strtod(buf, &end);
    return *end == '\0';
}

/* --- parser state and errors ------------------------------------------------------------ */

/* One slot of the map from value ids as written to dense ids (key -1: empty). */
typedef struct {
    int64_t key;
    int val;
} id_slot;

typedef struct {
    const char *text;   /* the whole source, for an error's column */
    const char *pos;    /* the source after `tok` */
    int line;           /* the line `pos` is on */
    token tok;          /* the current token */
    char *err;
    size_t errlen;
    ir_module *m;
    id_slot *ids;       /* the current function's value ids: the text may number values any way
                           that defines before use; the module numbers them densely */
    int nids, cap_ids;
    int *args;          /* operands of the instruction being read */
    int cap_args;
    bool progs_read[IR_NUM_PROGS]; /* the schedule programs read so far */
} parser;

static void advance(parser *p) { p->tok = lex(&p->pos, &p->line); }

static token peek2(const parser *p)
{
    const char *pos = p->pos;
    int line = p->line;
    return lex(&pos, &line);
}

/* "line L: MESSAGE", and where `at` points into the source, that line with a caret under `at`
 * and its column, so the error points at the input (`at` NULL: the line alone). */
static bool fail_v(parser *p, int line, const char *at, const char *fmt, va_list ap)
{
    if (!p->err || !p->errlen)
        return false;
    size_t n = (size_t)snprintf(p->err, p->errlen, "line %d: ", line);
    if (n < p->errlen)
        n += (size_t)vsnprintf(p->err + n, p->errlen - n, fmt, ap);
    if (!at || n >= p->errlen)
        return false;
    const char *start = at, *end = at;
    while (start > p->text && start[-1] != '\n')
        start--;
    while (*end && *end != '\n' && *end != '\r')
        end++;
    int col = (int)(at - start), shown = end - start > 160 ? 160 : (int)(end - start);
    if (col <= shown)
        snprintf(p->err + n, p->errlen - n, "\n  %.*s\n  %*s^ column %d", shown, start, col, "", col + 1);
    return false;
}

static bool fail_line(parser *p, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail_line(parser *p, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_v(p, line, NULL, fmt, ap);
    va_end(ap);
    return false;
}

/* An error at token t: its line, and a caret under it. */
static bool fail_at(parser *p, token t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail_at(parser *p, token t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_v(p, t.line, t.s, fmt, ap);
    va_end(ap);
    return false;
}

static const char *describe(token t, char *buf, size_t size)
{
    if (t.kind == TK_EOF)
        return "end of input";
    if (t.kind == TK_NL)
        return "end of line";
    snprintf(buf, size, "`%.*s`%s", t.len > 40 ? 40 : t.len, t.s, t.len > 40 ? "..." : "");
    return buf;
}

/* "line L: expected WHAT, got TOKEN" about the current token; `prefix` says what was being read. */
static bool expected_in(parser *p, const char *prefix, const char *what)
{
    char buf[64];
    return fail_at(p, p->tok, "%sexpected %s, got %s", prefix, what, describe(p->tok, buf, sizeof buf));
}

static bool expected(parser *p, const char *what) { return expected_in(p, "", what); }
static bool bad_type(parser *p, const char *what) { return expected_in(p, "bad type: ", what); }

static bool is_punct(const parser *p, char c) { return p->tok.kind == TK_PUNCT && p->tok.s[0] == c; }
static bool is_word(const parser *p, const char *w) { return p->tok.kind == TK_IDENT && tok_is(p->tok, w); }

static bool accept(parser *p, char c)
{
    if (!is_punct(p, c))
        return false;
    advance(p);
    return true;
}

static bool expect_punct(parser *p, char c)
{
    char what[4] = {'`', c, '`', '\0'};
    return accept(p, c) || expected(p, what);
}

/* Ends an item: a newline, or the end of the input. */
static bool expect_eol(parser *p)
{
    if (p->tok.kind == TK_EOF)
        return true;
    if (p->tok.kind != TK_NL)
        return expected(p, "end of line");
    advance(p);
    return true;
}

static void skip_blank_lines(parser *p)
{
    while (p->tok.kind == TK_NL)
        advance(p);
}

/* Index of the token among names, or -1. */
static int name_index(token t, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (tok_is(t, names[i]))
            return i;
    return -1;
}

/* Which of names token t is; otherwise "unknown WHAT `x` (one of: a, b, c)". */
static bool parse_choice(parser *p, token t, const char *what, const char *const *names, int n, int *out)
{
    *out = name_index(t, names, n);
    if (*out >= 0)
        return true;
    char list[256] = "";
    for (int i = 0, len = 0; i < n && len < (int)sizeof list; i++)
        len += snprintf(list + len, sizeof list - (size_t)len, "%s%s", i ? ", " : "", names[i]);
    char buf[64];
    return fail_at(p, t, "unknown %s %s (one of: %s)", what, describe(t, buf, sizeof buf), list);
}

static void *grow(void *arr, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return arr;
    int cap2 = *cap ? *cap : 16;
    while (cap2 < need)
        cap2 *= 2;
    arr = realloc(arr, (size_t)cap2 * elem);
    if (!arr) {
        fprintf(stderr, "mcc: out of host memory reading the IR\n");
        abort();
    }
    *cap = cap2;
    return arr;
}

/* --- value ids ---------------------------------------------------------------------------- */

static size_t id_hash(int64_t key, int cap) { return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> 32) & (size_t)(cap - 1); }

static void ids_clear(parser *p)
{
    for (int i = 0; i < p->cap_ids; i++)
        p->ids[i].key = -1;
    p->nids = 0;
}

/* The slot of key: where it is, or the empty slot where it would go. */
static id_slot *ids_slot(const parser *p, int64_t key)
{
    size_t i = id_hash(key, p->cap_ids);
    while (p->ids[i].key != -1 && p->ids[i].key != key)
        i = (i + 1) & (size_t)(p->cap_ids - 1);
    return &p->ids[i];
}

static int ids_find(const parser *p, int64_t key)
{
    if (!p->cap_ids)
        return -1;
    id_slot *s = ids_slot(p, key);
    return s->key == key ? s->val : -1;
}

static void ids_put(parser *p, int64_t key, int val)
{
    if (2 * (p->nids + 1) > p->cap_ids) {
        id_slot *old = p->ids;
        int old_cap = p->cap_ids;
        p->cap_ids = old_cap ? 2 * old_cap : 64;
        p->ids = malloc(sizeof(id_slot) * (size_t)p->cap_ids);
        ids_clear(p);
        for (int i = 0; i < old_cap; i++)
            if (old[i].key != -1)
                ids_put(p, old[i].key, old[i].val);
        free(old);
    }
    *ids_slot(p, key) = (id_slot){key, val};
    p->nids++;
}

/* A value reference %N as a written id. */
static bool parse_value_id(parser *p, int64_t *id)
{
    if (p->tok.kind != TK_VAL)
        return expected(p, "a value such as %3");
    if (!tok_int(p->tok, 1, id))
        return fail_at(p, p->tok, "value id %.*s is too large", p->tok.len, p->tok.s);
    advance(p);
    return true;
}

/* --- attribute blocks: {key=value, flag, ...} ------------------------------------------- */

typedef bool (*attr_fn)(parser *p, void *ctx, token key, const token *val);

static bool parse_attr_block(parser *p, attr_fn fn, void *ctx)
{
    if (!expect_punct(p, '{'))
        return false;
    if (accept(p, '}'))
        return true;
    do {
        if (p->tok.kind != TK_IDENT)
            return expected(p, "an attribute name");
        token key = p->tok, val;
        advance(p);
        bool has_val = accept(p, '=');
        if (has_val && is_punct(p, '[')) { /* a list value: the attribute's function reads it */
            val = p->tok;
            if (!fn(p, ctx, key, &val))
                return false;
            continue;
        }
        if (has_val) {
            if (p->tok.kind != TK_NUM && p->tok.kind != TK_IDENT && p->tok.kind != TK_SYM)
                return expected(p, "an attribute value");
            val = p->tok;
            advance(p);
        }
        if (!fn(p, ctx, key, has_val ? &val : NULL))
            return false;
    } while (accept(p, ','));
    return expect_punct(p, '}');
}

static bool need_number(parser *p, token key, const token *val, double *out)
{
    char buf[64];
    if (!val || !tok_double(*val, out))
        return fail_at(p, key, "attribute %s needs a number, e.g. %.*s=1", describe(key, buf, sizeof buf), key.len, key.s);
    return true;
}

/* --- types ---------------------------------------------------------------------------------- */

/* The mesh axes' names, "dp, pp, ..., dp_cp", for the errors that list them. */
static const char *axis_list(void)
{
    static char list[64];
    if (!list[0])
        for (int a = IR_AXIS_NONE + 1, n = 0; a < IR_NUM_AXES; a++)
            n += snprintf(list + n, sizeof list - (size_t)n, "%s%s", n ? ", " : "", ir_axis_name((ir_axis)a));
    return list;
}

static bool parse_axis(parser *p, int *axis)
{
    char name[8], wanted[96];
    snprintf(wanted, sizeof wanted, "a mesh axis (-, %s)", axis_list());
    if ((p->tok.kind != TK_IDENT && !is_punct(p, '-')) || !tok_cstr(p->tok, 0, name, sizeof name) ||
        (*axis = ir_axis_by_name(name)) < 0)
        return bad_type(p, wanted);
    advance(p);
    return true;
}

/* One dimension's split in a shard list: `-` (whole), or its axes outer to inner joined by dots,
 * `cp.tp` (one identifier to the lexer, as a dotted name is). */
static bool parse_dim_axes(parser *p, ir_type *t, int dim)
{
    if (is_punct(p, '-'))
        return advance(p), true;
    char text[32], wanted[128];
    snprintf(wanted, sizeof wanted, "a mesh axis (-, %s), or axes joined by dots (cp.tp)", axis_list());
    if (p->tok.kind != TK_IDENT || !tok_cstr(p->tok, 0, text, sizeof text))
        return bad_type(p, wanted);
    for (char *name = text, *dot; name; name = dot ? dot + 1 : NULL) {
        if ((dot = strchr(name, '.')))
            *dot = '\0';
        int axis = ir_axis_by_name(name);
        if (axis <= IR_AXIS_NONE)
            return bad_type(p, wanted);
        if (ir_shard_dim(t, (ir_axis)axis) >= 0)
            return fail_at(p, p->tok, "bad type: shard names axis %s twice (an axis splits at most one dimension, once)", name);
        if (!ir_shard_push(t, dim, (ir_axis)axis))
            return fail_at(p, p->tok, "bad type: dimension %d is split over more than %d axes", dim, IR_MAX_SHARD_AXES);
    }
    advance(p);
    return true;
}

/* ` {shard=[dp,-,cp.tp]}`: one entry per dimension. */
static bool parse_shard(parser *p, ir_type *t)
{
    advance(p); /* { */
    advance(p); /* shard */
    if (!expect_punct(p, '=') || !expect_punct(p, '['))
        return false;
    int n = 0;
    do {
        if (n == t->ndim)
            return fail_at(p, p->tok, "bad type: shard lists more axes than the %d dimensions", t->ndim);
        if (!parse_dim_axes(p, t, n++))
            return false;
    } while (accept(p, ','));
    if (n != t->ndim)
        return fail_at(p, p->tok, "bad type: shard lists %d axes for %d dimensions", n, t->ndim);
    return expect_punct(p, ']') && expect_punct(p, '}');
}

/* ` {partial=tp}`: one per axis the value is a pending sum over. */
static bool parse_partial(parser *p, ir_type *t)
{
    advance(p); /* { */
    advance(p); /* partial */
    int axis = IR_AXIS_NONE;
    if (!expect_punct(p, '=') || !parse_axis(p, &axis))
        return false;
    if (axis == IR_AXIS_NONE)
        return fail_at(p, p->tok, "bad type: partial needs a mesh axis, not -");
    t->partial |= (uint8_t)(1u << axis);
    return expect_punct(p, '}');
}

/* dtype[d0,d1,...] with the suffixes ir_type_str prints. */
static bool parse_type(parser *p, ir_type *t)
{
    *t = (ir_type){0};
    char name[16];
    int dt;
    if (p->tok.kind != TK_IDENT || !tok_cstr(p->tok, 0, name, sizeof name) || (dt = ir_dtype_by_name(name)) < 0)
        return bad_type(p, "a dtype (f32, bf16, f16, fp8e4m3, fp8e5m2, i32, i64)");
    t->dtype = (ir_dtype)dt;
    advance(p);
    if (!is_punct(p, '['))
        return bad_type(p, "`[` and the dimensions");
    advance(p);
    if (!accept(p, ']')) {
        do {
            int64_t d;
            if (t->ndim == IR_MAX_DIMS)
                return fail_at(p, p->tok, "bad type: more than %d dimensions", IR_MAX_DIMS);
            if (p->tok.kind != TK_NUM || !tok_int(p->tok, 0, &d) || d < 1)
                return bad_type(p, "a positive dimension");
            t->dims[t->ndim++] = d;
            advance(p);
        } while (accept(p, ','));
        if (!accept(p, ']'))
            return bad_type(p, "`,` or `]`");
    }
    for (;;) {
        token next = peek2(p);
        if (is_punct(p, '{') && tok_is(next, "shard")) {
            if (!parse_shard(p, t))
                return false;
        } else if (is_punct(p, '{') && tok_is(next, "partial")) {
            if (!parse_partial(p, t))
                return false;
        } else {
            return true;
        }
    }
}

/* --- config ------------------------------------------------------------------------------- */

/* The contents of a quoted string token, escapes undone. */
static char *unquote(token t)
{
    char *s = malloc((size_t)t.len), *o = s;
    for (const char *c = t.s + 1; c < t.s + t.len - 1; c++) {
        char ch = *c;
        if (ch == '\\') {
            ch = *++c; /* the lexer keeps an escape's pair inside the quotes */
            ch = ch == 'n' ? '\n' : ch;
        }
        *o++ = ch;
    }
    *o = '\0';
    return s;
}

static bool parse_config(parser *p)
{
    advance(p);
    if (!expect_punct(p, '{') || !expect_eol(p))
        return false;
    for (;;) {
        skip_blank_lines(p);
        if (accept(p, '}'))
            return expect_eol(p);
        if (p->tok.kind != TK_IDENT)
            return expected(p, "a config key or `}`");
        token key = p->tok;
        advance(p);
        if (!expect_punct(p, '='))
            return false;
        if (p->tok.kind != TK_STR)
            return expected(p, "a quoted string");
        char *k = tok_text(key, 0), *v = unquote(p->tok), why[512];
        bool twice = ir_config_get(p->m, k) != NULL;
        int known = ir_cfg_find(k);
        bool valid = known < 0 || ir_cfg_valid((ir_cfg)known, v, why, sizeof why); /* a choice's word */
        if (!twice && valid)
            ir_config_set(p->m, k, v);
        free(k);
        free(v);
        if (twice)
            return fail_at(p, key, "config key `%.*s` is set twice", key.len, key.s);
        if (!valid)
            return fail_at(p, p->tok, "%s", why);
        advance(p);
        if (!expect_eol(p))
            return false;
    }
}

/* --- globals ------------------------------------------------------------------------------ */

typedef struct {
    int kind, init, placement;
    double std;
    bool has_std, no_decay, host;
    int owner, layer, slots, span;
    ir_layout layout;
} global_attrs;

/* One split of a layout record: `tp:dim0` or `dp:flat`. */
static bool parse_split(parser *p, ir_layout *l)
{
    token at = p->tok;
    int axis, dim = 0;
    char name[8], how[16], wanted[128];
    snprintf(wanted, sizeof wanted, "a layout split such as tp:dim0 or dp:flat (axes %s)", axis_list());
    if (p->tok.kind != TK_IDENT || !tok_cstr(p->tok, 0, name, sizeof name) || (axis = ir_axis_by_name(name)) <= 0)
        return expected(p, wanted);
    advance(p);
    if (!expect_punct(p, ':'))
        return false;
    int64_t d = -1;
    bool flat = is_word(p, "flat"), balanced = false;
    if (!flat && p->tok.kind == TK_IDENT && tok_cstr(p->tok, 0, how, sizeof how))
        balanced = !strncmp(how, "balanced", 8);
    int digits = balanced ? 8 : 3;
    if (!flat && (p->tok.kind != TK_IDENT || !tok_cstr(p->tok, 0, how, sizeof how) ||
                  (!balanced && strncmp(how, "dim", 3)) || !tok_int(p->tok, digits, &d) || d < 0 || d >= IR_MAX_DIMS))
        return expected(p, "dim0..dim3 (split along that dimension), balanced0..balanced3 (context parallelism's "
                           "2 n chunks) or flat (ZeRO's consecutive blocks)");
    dim = (int)d;
    advance(p);
    if (ir_layout_split(l, (ir_axis)axis) || l->nsplits == IR_NUM_AXES)
        return fail_at(p, at, "the layout splits over %s twice: give each axis once", name);
    ir_layout_add(l, (ir_axis)axis, flat ? IR_SPLIT_FLAT : balanced ? IR_SPLIT_BALANCED : IR_SPLIT_DIM, dim);
    return true;
}

/* layout=[tp:dim0, dp:flat] */
static bool parse_layout(parser *p, ir_layout *l)
{
    if (!expect_punct(p, '['))
        return false;
    if (accept(p, ']'))
        return true;
    do {
        if (!parse_split(p, l))
            return false;
    } while (accept(p, ','));
    return expect_punct(p, ']');
}

/* A layout record as ir_layout_str prints it, outside a module (a checkpoint's rank file). */
bool ir_parse_layout(const char *text, ir_layout *l, char *err, size_t errlen)
{
    parser p = {.text = text, .pos = text, .line = 1, .err = err, .errlen = errlen};
    *l = (ir_layout){0};
    advance(&p);
    if (p.tok.kind != TK_EOF)
        do {
            if (!parse_split(&p, l))
                return false;
        } while (accept(&p, ','));
    return p.tok.kind == TK_EOF || expected(&p, "`,` and another split, or the end of the layout");
}

static bool global_attr(parser *p, void *ctx, token key, const token *val)
{
    global_attrs *ga = ctx;
    if (tok_is(key, "no_decay") && !val) {
        ga->no_decay = true;
        return true;
    }
    if (tok_is(key, "host") && !val) {
        ga->host = true;
        return true;
    }
    if (tok_is(key, "layout") && val && val->kind == TK_PUNCT)
        return parse_layout(p, &ga->layout);
    if (val && val->kind == TK_PUNCT) /* a list where a single value belongs */
        return expected(p, "a single value, not a list");
    if (tok_is(key, "kind") && val)
        return parse_choice(p, *val, "global kind", ir_global_kind_names, IR_NUM_GLOBAL_KINDS, &ga->kind);
    if (tok_is(key, "init") && val)
        return parse_choice(p, *val, "init", ir_init_names, IR_NUM_INITS, &ga->init);
    if (tok_is(key, "placement") && val)
        return parse_choice(p, *val, "placement", ir_placement_names, IR_NUM_PLACEMENTS, &ga->placement);
    if (tok_is(key, "of") && val && val->kind == TK_SYM) {
        char name[256];
        ga->owner = tok_cstr(*val, 1, name, sizeof name) ? ir_global_find(p->m, name) : -1;
        if (ga->owner < 0)
            return fail_at(p, *val, "of= names no global declared before it (a companion follows its parameter)");
        return true;
    }
    if (tok_is(key, "layer") && val) {
        int64_t layer;
        if (val->kind != TK_NUM || !tok_int(*val, 0, &layer) || layer < 0 || layer > INT_MAX)
            return fail_at(p, *val, "layer= needs a layer number >= 0 (leave it out for a global of no layer)");
        ga->layer = (int)layer;
        return true;
    }
    if (tok_is(key, "slots") && val) {
        int64_t slots;
        if (val->kind != TK_NUM || !tok_int(*val, 0, &slots) || slots < 1 || slots > 1 << 20)
            return fail_at(p, *val, "slots= needs a count of buffers >= 1 (a stash: one per micro-batch in flight)");
        ga->slots = (int)slots;
        return true;
    }
    if (tok_is(key, "span") && val)
        return parse_choice(p, *val, "stash span", ir_stash_span_names, IR_NUM_STASH_SPANS, &ga->span);
    if (tok_is(key, "std")) {
        ga->has_std = true;
        return need_number(p, key, val, &ga->std);
    }
    char buf[64];
    return fail_at(p, key, "unknown global attribute %s (attributes: kind=, init=, std=, of=, placement=, layer=, "
                   "slots=, span=, layout=, no_decay, host)", describe(key, buf, sizeof buf));
}

/* global @name : type {kind=K, init=I[, std=S][, of=@P][, placement=X][, layer=L][, slots=N][, span=S][, layout=[...]]
 * [, no_decay]} */
static bool parse_global(parser *p)
{
    advance(p);
    if (p->tok.kind != TK_SYM)
        return expected(p, "the global's @name");
    token name = p->tok;
    advance(p);
    ir_type t;
    if (!expect_punct(p, ':') || !parse_type(p, &t))
        return false;
    global_attrs ga = {.kind = -1, .init = -1, .owner = -1, .layer = -1, .slots = 0};
    if (!parse_attr_block(p, global_attr, &ga))
        return false;
    if (ga.kind < 0 || ga.init < 0)
        return fail_at(p, name, "global %.*s needs kind= and init=", name.len, name.s);
    if (ga.has_std != (ga.init == IR_INIT_NORMAL))
        return fail_at(p, name, "global %.*s: std= goes with init=normal, and only with it", name.len, name.s);
    if ((ga.slots > 0) != (ga.kind == IR_GLOBAL_STASH))
        return fail_at(p, name, "global %.*s: slots= goes with kind=stash, and only with it", name.len, name.s);
    if (ga.span != IR_STASH_FB && ga.kind != IR_GLOBAL_STASH)
        return fail_at(p, name, "global %.*s: span= goes with kind=stash, and only with it", name.len, name.s);
    char *n = tok_text(name, 1);
    int g = ir_global_add(p->m, n, t, (ir_global_kind)ga.kind, (ir_init)ga.init, ga.std, ga.no_decay);
    ir_global *gl = &p->m->globals[g];
    gl->owner = ga.owner;
    gl->layer = ga.layer;
    gl->placement = (ir_placement)ga.placement;
    gl->layout = ga.layout;
    gl->slots = ga.slots > 0 ? ga.slots : 1;
    gl->host = ga.host;
    gl->span = (ir_stash_span)ga.span;
    free(n);
    return expect_eol(p);
}

/* --- instructions --------------------------------------------------------------------------- */

/* One `STEP*AXIS` of a rank term, its step already read: adds it to t. */
static bool parse_rank_step(parser *p, token key, double step, ir_rank_term *t)
{
    char name[8], buf[64];
    int axis;
    if (!expect_punct(p, '*'))
        return false;
    token axis_name = p->tok; /* `tp-2*cp` lexes `tp-2` as one name (names may hold '-'): the axis ends at the '-' */
    const char *dash = axis_name.kind == TK_IDENT ? memchr(axis_name.s, '-', (size_t)axis_name.len) : NULL;
    if (dash)
        axis_name.len = (int)(dash - axis_name.s);
    if (axis_name.kind != TK_IDENT || !tok_cstr(axis_name, 0, name, sizeof name) || (axis = ir_axis_by_name(name)) <= 0)
        return fail_at(p, key, "attribute %s: a rank term is NUMBER*AXIS with a mesh axis (%s), e.g. %.*s=64*tp",
                       describe(key, buf, sizeof buf), axis_list(), key.len, key.s);
    p->pos = axis_name.s + axis_name.len; /* the next term's sign on, read again */
    advance(p);
    t->step[axis] += step;
    return true;
}

/* The rank term after an attribute's number, if any: `64*tp` (the number read was a step),
 * `3+64*tp` (it was the base; signed steps follow), `8*tp+2*cp` (a term per axis). */
static bool parse_rank_term(parser *p, token key, double *attr, ir_rank_term *t)
{
    if (is_punct(p, '*')) {
        double step = *attr;
        *attr = 0;
        if (!parse_rank_step(p, key, step, t))
            return false;
    }
    while (p->tok.kind == TK_NUM && (p->tok.s[0] == '+' || p->tok.s[0] == '-')) {
        double step;
        if (!tok_double(p->tok, &step))
            return expected(p, "a number");
        advance(p);
        if (!parse_rank_step(p, key, step, t))
            return false;
    }
    return true;
}

/* A mesh axis attribute's value by name, {axis=tp} (the printer's; a number is read as any) */
static bool axis_value(parser *p, token key, const token *val, double *out)
{
    char name[8], buf[64], got[64];
    int axis;
    if (!tok_cstr(*val, 0, name, sizeof name) || (axis = ir_axis_by_name(name)) <= 0)
        return fail_at(p, key, "attribute %s: a mesh axis (%s) or its number, got %s", describe(key, buf, sizeof buf),
                       axis_list(), describe(*val, got, sizeof got));
    *out = axis;
    return true;
}

/* One instruction as read, before it joins its function. */
typedef struct {
    ir_op op;
    int nres;
    int64_t res_ids[IR_MAX_RES];    /* as written */
    int nargs;                      /* operands in parser.args, already dense */
    double attr[IR_MAX_ATTRS];
    ir_rank_term per_rank[IR_MAX_ATTRS];
    token sym;                      /* kind TK_EOF when absent */
    int ntypes;
    ir_type types[IR_MAX_RES];
    ir_mem_kind mem[IR_MAX_RES];
    int64_t offset[IR_MAX_RES];
    int line;
    ir_role role;                   /* input, output: {role=...} as written, else from the name */
    bool has_role;
} instr_text;

/* An input's or output's {role=R, stage=S, index=K}. */
static bool role_attr(parser *p, instr_text *it, token key, const token *val)
{
    char name[48], buf[64];
    double v;
    if (tok_is(key, "role")) {
        int k = val && tok_cstr(*val, 0, name, sizeof name) ? ir_role_by_name(name) : -1;
        if (k < 0)
            return fail_at(p, key, "role needs a role's name (tokens, loss, pp_act, ...), got %s",
                           val ? describe(*val, buf, sizeof buf) : "none");
        it->role.kind = (ir_role_kind)k, it->has_role = true;
        return true;
    }
    if (!need_number(p, key, val, &v))
        return false;
    if (!(v >= 0 && v <= INT_MAX && v == (int)v))
        return fail_at(p, key, "%s needs a whole number from 0, got %s", describe(key, buf, sizeof buf),
                       describe(*val, name, sizeof name));
    *(tok_is(key, "stage") ? &it->role.stage : &it->role.index) = (int)v;
    return true;
}

/* A role's stage and index only where it carries them (the printer writes no other). */
static bool check_role(parser *p, const instr_text *it)
{
    const ir_role_info *r = &ir_roles[it->role.kind];
    if ((it->role.stage && !r->staged) || (it->role.index && !r->indexed))
        return fail_line(p, it->line, "role %s takes no %s", r->name, it->role.stage && !r->staged ? "stage" : "index");
    return true;
}

/* The role of f's input or output (op) @sym, which a schedule's send or recv names; none when it
 * has none (ir_verify says so). */
static ir_role sym_role(const ir_func *f, ir_op op, const char *sym)
{
    for (int i = 0; i < f->ninstrs; i++)
        if (f->instrs[i].op == op && !strcmp(f->instrs[i].sym, sym))
            return f->instrs[i].role;
    return ir_role_of(IR_ROLE_NONE);
}

/* The role of an input or output written without one (texts older than roles): from the
 * well-known names the model builder and the passes gave them. The one place a name means a role. */
static ir_role role_of_name(const char *name)
{
    int k = ir_role_by_name(name), stage, index, len = 0;
    char what[6];
    if (k > IR_ROLE_NONE && !ir_roles[k].indexed && !ir_roles[k].staged)
        return ir_role_of((ir_role_kind)k);
    if (!strcmp(name, "first_sample") || !strcmp(name, "first_sample.half1"))
        return ir_role_at(IR_ROLE_FIRST_SAMPLE, name[12] != 0);
    if (sscanf(name, "stage%d.%5[a-z].%d%n", &stage, what, &index, &len) == 3 && !name[len] &&
        (!strcmp(what, "act") || !strcmp(what, "grad")))
        return (ir_role){strcmp(what, "act") ? IR_ROLE_PP_GRAD : IR_ROLE_PP_ACT, stage, index};
    const char *dot = strrchr(name, '.');
    if (!dot || sscanf(dot + 1, "%d%n", &index, &len) != 1 || dot[1 + len])
        return ir_role_of(IR_ROLE_NONE);
    if (dot - name == 4 && !strncmp(name, "tied", 4)) /* pipeline.c's tied.K */
        return ir_role_at(IR_ROLE_TIED_GRAD, index);
    for (k = IR_ROLE_MOE_TOKENS_PER_EXPERT; k <= IR_ROLE_MOE_Z_LOSS; k++) /* the model builder's moe_...L */
        if (strlen(ir_roles[k].name) == (size_t)(dot - name) && !strncmp(name, ir_roles[k].name, (size_t)(dot - name)))
            return ir_role_at((ir_role_kind)k, index);
    return ir_role_of(IR_ROLE_NONE);
}

static bool instr_attr(parser *p, void *ctx, token key, const token *val)
{
    instr_text *it = ctx;
    const ir_op_info *info = &ir_ops[it->op];
    if ((it->op == IR_OP_INPUT || it->op == IR_OP_OUTPUT) &&
        (tok_is(key, "role") || tok_is(key, "stage") || tok_is(key, "index")))
        return role_attr(p, it, key, val);
    for (int k = 0; k < info->nattrs; k++) {
        if (!tok_is(key, info->attr_names[k]))
            continue;
        if (k == info->axis_attr && val && val->kind == TK_IDENT)
            return axis_value(p, key, val, &it->attr[k]);
        return need_number(p, key, val, &it->attr[k]) && parse_rank_term(p, key, &it->attr[k], &it->per_rank[k]);
    }
    char list[128] = "none", buf[64];
    for (int k = 0, len = 0; k < info->nattrs && len < (int)sizeof list; k++)
        len += snprintf(list + len, sizeof list - (size_t)len, "%s%s", k ? ", " : "", info->attr_names[k]);
    return fail_at(p, key, "%s has no attribute %s (its attributes: %s)", info->name, describe(key, buf, sizeof buf), list);
}

/* `%a, %b =` before the op; none for ops without results. */
static bool parse_results(parser *p, instr_text *it)
{
    if (p->tok.kind != TK_VAL)
        return true;
    do {
        if (it->nres == IR_MAX_RES)
            return fail_at(p, p->tok, "an instruction defines at most %d results", IR_MAX_RES);
        if (!parse_value_id(p, &it->res_ids[it->nres++]))
            return false;
    } while (accept(p, ','));
    return expect_punct(p, '=');
}

static bool parse_op(parser *p, instr_text *it)
{
    char name[32], buf[64];
    int op = -1;
    if (p->tok.kind != TK_IDENT)
        return expected(p, "an op name");
    if (tok_cstr(p->tok, 0, name, sizeof name))
        op = ir_op_by_name(name);
    if (op < 0)
        return fail_at(p, p->tok, "unknown op %s", describe(p->tok, buf, sizeof buf));
    it->op = (ir_op)op;
    bool amax_results = ir_ops[op].amax_attr >= 0 && it->nres > ir_ops[op].nres; /* checked by its amax= */
    if (it->nres != ir_ops[op].nres && !amax_results)
        return fail_at(p, p->tok, "wrong result count for %s: expected %d, got %d", name, ir_ops[op].nres, it->nres);
    advance(p);
    return true;
}

/* Results past the op's own: as many as its amax= says (ir_amax_results). */
static bool check_amax_results(parser *p, const instr_text *it)
{
    int want = ir_instr_nres(it->op, it->attr);
    if (want > IR_MAX_RES)
        return fail_line(p, it->line, "%s {amax=%g}: amax= counts the op's first results, those shaped as its first",
                         ir_ops[it->op].name, it->attr[ir_ops[it->op].amax_attr]);
    if (it->nres != want)
        return fail_line(p, it->line, "wrong result count for %s {amax=%g}: expected %d, got %d", ir_ops[it->op].name,
                         it->attr[ir_ops[it->op].amax_attr], want, it->nres);
    return true;
}

static bool parse_sym(parser *p, instr_text *it)
{
    const char *name = ir_ops[it->op].name;
    if (p->tok.kind == TK_SYM && !ir_op_takes_sym(it->op))
        return fail_at(p, p->tok, "%s takes no @name (only input, global and output do)", name);
    if (p->tok.kind != TK_SYM && ir_op_takes_sym(it->op)) {
        char what[64];
        snprintf(what, sizeof what, "@name after %s", name);
        return expected(p, what);
    }
    if (p->tok.kind == TK_SYM) {
        it->sym = p->tok;
        advance(p);
    }
    return true;
}

/* `%x, %y` operands, each defined earlier in the function. */
static bool parse_operands(parser *p, instr_text *it)
{
    if (p->tok.kind == TK_VAL) {
        do {
            token at = p->tok;
            int64_t id = -1;
            if (!parse_value_id(p, &id))
                return false;
            int v = ids_find(p, id);
            if (v < 0)
                return fail_at(p, at, "unknown value %.*s (operands must be defined earlier in the function)", at.len, at.s);
            p->args = grow(p->args, &p->cap_args, it->nargs + 1, sizeof(int));
            p->args[it->nargs++] = v;
        } while (accept(p, ','));
    }
    const ir_op_info *info = &ir_ops[it->op];
    if (!ir_op_nargs_ok(it->op, it->nargs))
        return fail_line(p, it->line, "wrong operand count for %s: expected %s%d%s, got %d", info->name,
                         info->nargs < 0 ? "at least " : "", info->nargs < 0 ? 1 : info->nargs,
                         ir_op_has(it->op, IR_OPF_ROW_BOUND) ? " (and maybe a row bound)" : "", it->nargs);
    return true;
}

/* Where a result lives: @+offset, @view, @global, or nowhere yet. */
static bool parse_mem(parser *p, ir_mem_kind *mem, int64_t *offset)
{
    *mem = IR_MEM_NONE;
    *offset = -1;
    if (p->tok.kind == TK_OFFSET) {
        if (!tok_int(p->tok, 1, offset))
            return expected(p, "an arena offset such as @+4096");
        *mem = IR_MEM_ARENA;
    } else if (p->tok.kind == TK_SYM && (tok_is(p->tok, "@view") || tok_is(p->tok, "@global"))) {
        *mem = tok_is(p->tok, "@view") ? IR_MEM_VIEW : IR_MEM_GLOBAL;
    } else if (p->tok.kind == TK_SYM) {
        return expected(p, "@+offset, @view or @global");
    } else {
        return true;
    }
    advance(p);
    return true;
}

/* `: type [mem], ...`, one per result. */
static bool parse_result_types(parser *p, instr_text *it)
{
    const ir_op_info *info = &ir_ops[it->op];
    if (!it->nres)
        return true;
    if (!expect_punct(p, ':'))
        return false;
    do {
        if (it->ntypes == IR_MAX_RES)
            return fail_at(p, p->tok, "wrong type count for %s: expected %d, got more", info->name, it->nres);
        int r = it->ntypes++;
        if (!parse_type(p, &it->types[r]) || !parse_mem(p, &it->mem[r], &it->offset[r]))
            return false;
    } while (accept(p, ','));
    if (it->ntypes != it->nres)
        return fail_line(p, it->line, "wrong type count for %s: expected %d, got %d", info->name, it->nres, it->ntypes);
    return true;
}

/* Adds the instruction with the same layout ir_emit makes, keeping the types as written. */
static void func_append(parser *p, ir_func *f, const instr_text *it)
{
    ir_instr in = {.op = it->op, .nargs = it->nargs, .nres = it->nres};
    in.args = malloc(sizeof(int) * (size_t)(it->nargs ? it->nargs : 1));
    if (it->nargs)
        memcpy(in.args, p->args, sizeof(int) * (size_t)it->nargs);
    memcpy(in.attr, it->attr, sizeof in.attr);
    memcpy(in.per_rank, it->per_rank, sizeof in.per_rank);
    in.sym = it->sym.kind == TK_SYM ? tok_text(it->sym, 1) : NULL;
    in.global = -1; /* a global's: resolve_globals */
    if (it->op == IR_OP_INPUT || it->op == IR_OP_OUTPUT)
        in.role = it->has_role ? it->role : role_of_name(in.sym);
    f->instrs = grow(f->instrs, &f->cap_instrs, f->ninstrs + 1, sizeof(ir_instr));
    f->vals = grow(f->vals, &f->cap_vals, f->nvals + it->nres, sizeof(ir_value));
    for (int r = 0; r < it->nres; r++) {
        f->vals[f->nvals] = (ir_value){.type = it->types[r], .def = f->ninstrs, .mem = it->mem[r], .offset = it->offset[r]};
        in.res[r] = f->nvals++;
    }
    f->instrs[f->ninstrs++] = in;
}

static bool parse_instr(parser *p, ir_func *f)
{
    instr_text it = {.line = p->tok.line, .sym = {.kind = TK_EOF}};
    if (!parse_results(p, &it) || !parse_op(p, &it) || !parse_sym(p, &it) || !parse_operands(p, &it))
        return false;
    if (is_punct(p, '{') && !parse_attr_block(p, instr_attr, &it))
        return false;
    if (!check_role(p, &it) || !check_amax_results(p, &it))
        return false;
    if (!parse_result_types(p, &it) || !expect_eol(p))
        return false;
    for (int r = 0; r < it.nres; r++) {
        if (ids_find(p, it.res_ids[r]) >= 0)
            return fail_line(p, it.line, "value %%%lld is defined twice", (long long)it.res_ids[r]);
        ids_put(p, it.res_ids[r], f->nvals + r);
    }
    func_append(p, f, &it);
    return true;
}

/* --- functions and the schedule --------------------------------------------------------- */

typedef struct {
    int kind;                       /* -1 until kind= */
    int64_t arena;
} func_attrs;

static bool func_attr(parser *p, void *ctx, token key, const token *val)
{
    func_attrs *fa = ctx;
    char buf[64];
    if (tok_is(key, "kind") && val) {
        const char *names[IR_NUM_FUNC_KINDS];
        for (int k = 0; k < IR_NUM_FUNC_KINDS; k++)
            names[k] = ir_func_kinds[k].name;
        return parse_choice(p, *val, "function kind", names, IR_NUM_FUNC_KINDS, &fa->kind);
    }
    if (!tok_is(key, "arena"))
        return fail_at(p, key, "unknown function attribute %s (attributes: kind=, arena=)", describe(key, buf, sizeof buf));
    if (!val || !tok_int(*val, 0, &fa->arena) || fa->arena < 0)
        return fail_at(p, key, "arena= needs a byte count >= 0");
    return true;
}

/* func NAME {kind=K[, arena=N]} {  instructions  }. The kind is required: it is the function's
 * role, which nothing may guess from its name; text without one predates kinds. */
static bool parse_func(parser *p)
{
    advance(p);
    if (p->tok.kind != TK_IDENT)
        return expected(p, "a function name");
    token name = p->tok;
    advance(p);
    func_attrs fa = {.kind = -1};
    if (is_punct(p, '{') && peek2(p).kind == TK_IDENT && !parse_attr_block(p, func_attr, &fa))
        return false;
    if (fa.kind < 0)
        return fail_at(p, name, "func %.*s needs kind= (its role: step, eval, reduce, grad_norm, optimizer, zero_grads, "
                       "setup, forward or backward), e.g. `func %.*s {kind=step}`; text from before function kinds: "
                       "print it again with this mcc", name.len, name.s, name.len, name.s);
    char *n = tok_text(name, 0);
    ir_func *f = ir_func_new(p->m, n, (ir_func_kind)fa.kind);
    free(n);
    f->arena_bytes = fa.arena;
    if (!expect_punct(p, '{') || !expect_eol(p))
        return false;
    ids_clear(p);
    for (;;) {
        skip_blank_lines(p);
        if (accept(p, '}'))
            return expect_eol(p);
        if (p->tok.kind == TK_EOF)
            return expected(p, "`}` closing the function");
        if (!parse_instr(p, f))
            return false;
    }
}

/* A step's `WORD=` when the current token is WORD (*given), leaving its value the current token. */
static bool step_key(parser *p, const char *word, bool *given)
{
    *given = is_word(p, word);
    if (*given)
        advance(p);
    return !*given || expect_punct(p, '=');
}

/* One step: call F [mb=I] [slot=K] [slot_fw=K] [slot_bw=K] | send F @x mb=I to=next|prev | recv F @x mb=I from=next|prev. The
 * verifier checks what the step means (kinds, micro-batch range, order). */
static bool parse_step(parser *p, ir_prog prog)
{
    int op;
    if (p->tok.kind != TK_IDENT)
        return expected(p, "a schedule step (call, send, recv) or `}`");
    if (!parse_choice(p, p->tok, "schedule step", ir_step_op_names, IR_NUM_STEP_OPS, &op))
        return false;
    advance(p);
    if (p->tok.kind != TK_IDENT)
        return expected(p, "a function name");
    char *fname = tok_text(p->tok, 0);
    ir_sched_step s = {.op = (ir_step_op)op, .func = ir_func_index(p->m, fname), .mb = -1,
                       .slot = {-1, -1, -1}};
    free(fname);
    if (s.func < 0)
        return fail_at(p, p->tok, "schedule %s names unknown function `%.*s` (functions come before the schedule)",
                       ir_prog_names[prog], p->tok.len, p->tok.s);
    advance(p);
    char sym[256] = "";
    if (s.op != IR_STEP_CALL) {
        if (p->tok.kind != TK_SYM || !tok_cstr(p->tok, 1, sym, sizeof sym))
            return expected(p, "the @name of the tensor sent or received");
        s.sym = sym;
        s.role = sym_role(p->m->funcs[s.func], s.op == IR_STEP_SEND ? IR_OP_OUTPUT : IR_OP_INPUT, sym);
        advance(p);
    }
    int64_t mb;
    bool given;
    if (!step_key(p, "mb", &given))
        return false;
    if (given) {
        if (p->tok.kind != TK_NUM || !tok_int(p->tok, 0, &mb) || mb < 0 || mb > INT_MAX)
            return expected(p, "a micro-batch index >= 0 after mb=");
        s.mb = (int)mb;
        advance(p);
    }
    for (int k = 0; k < IR_NUM_STASH_SPANS; k++) {
        if (!step_key(p, ir_stash_slot_keys[k], &given))
            return false;
        if (given) {
            int64_t slot;
            char what[64];
            snprintf(what, sizeof what, "a stash slot index >= 0 after %s=", ir_stash_slot_keys[k]);
            if (p->tok.kind != TK_NUM || !tok_int(p->tok, 0, &slot) || slot < 0 || slot > INT_MAX)
                return expected(p, what);
            s.slot[k] = (int)slot;
            advance(p);
        }
    }
    if (s.op != IR_STEP_CALL) {
        const char *dir = s.op == IR_STEP_SEND ? "to" : "from";
        char what[64];
        snprintf(what, sizeof what, "%s=next or %s=prev", dir, dir);
        if (!step_key(p, dir, &given))
            return false;
        if (!given)
            return expected(p, what);
        s.peer = is_word(p, "next") ? 1 : is_word(p, "prev") ? -1 : 0;
        if (!s.peer)
            return expected(p, what);
        advance(p);
    }
    ir_sched_add(p->m, prog, s);
    return expect_eol(p);
}

/* schedule PROG {  steps  }, PROG train or eval, each at most once. */
static bool parse_schedule(parser *p)
{
    advance(p);
    int prog;
    if (p->tok.kind != TK_IDENT)
        return expected(p, "a schedule program (train, eval) after `schedule`; an older mcc's `schedule { NAME xN }` "
                           "has none: print the module again with this mcc");
    if (!parse_choice(p, p->tok, "schedule program", ir_prog_names, IR_NUM_PROGS, &prog))
        return false;
    if (p->progs_read[prog])
        return fail_at(p, p->tok, "schedule %s is given twice", ir_prog_names[prog]);
    p->progs_read[prog] = true;
    advance(p);
    if (!expect_punct(p, '{') || !expect_eol(p))
        return false;
    for (;;) {
        skip_blank_lines(p);
        if (accept(p, '}'))
            return expect_eol(p);
        if (!parse_step(p, (ir_prog)prog))
            return false;
    }
}

static bool parse_sections(parser *p)
{
    for (;;) {
        skip_blank_lines(p);
        bool ok;
        if (p->tok.kind == TK_EOF)
            return true;
        else if (is_word(p, "config"))
            ok = parse_config(p);
        else if (is_word(p, "global"))
            ok = parse_global(p);
        else if (is_word(p, "func"))
            ok = parse_func(p);
        else if (is_word(p, "schedule"))
            ok = parse_schedule(p);
        else
            return expected(p, "`config`, `global`, `func` or `schedule`");
        if (!ok)
            return false;
    }
}

/* Each `global @name` instruction's index, found by its name once the module's globals are read
 * (-1 for a name no global has: the verifier's error). */
static void resolve_globals(ir_module *m)
{
    for (int i = 0; i < m->nfuncs; i++)
        for (int k = 0; k < m->funcs[i]->ninstrs; k++) {
            ir_instr *in = &m->funcs[i]->instrs[k];
            if (in->op == IR_OP_GLOBAL && in->sym)
                in->global = ir_global_find(m, in->sym);
        }
}

ir_module *ir_parse_module(const char *text, char *err, size_t errlen)
{
    parser p = {.text = text, .pos = text, .line = 1, .err = err, .errlen = errlen, .m = ir_module_new()};
    advance(&p);
    bool ok = parse_sections(&p);
    resolve_globals(p.m);
    free(p.ids);
    free(p.args);
    if (!ok) {
        ir_module_free(p.m);
        return NULL;
    }
    if (err && errlen)
        err[0] = '\0';
    return p.m;
}

/* Where the line `; stage S of N` begins in text (NULL: none), N in *n. */
static const char *stage_line(const char *text, int stage, int *n)
{
    for (const char *at = text; (at = strstr(at, "; stage ")); at++) {
        int s, total, len = 0;
        if ((at == text || at[-1] == '\n') && sscanf(at, "; stage %d of %d%n", &s, &total, &len) == 2 &&
            (at[len] == '\n' || !at[len]) && (stage < 0 || s == stage)) {
            *n = total;
            return at;
        }
    }
    return NULL;
}

int ir_text_stages(const char *text)
{
    int n = 1;
    return stage_line(text, -1, &n) ? n : 1;
}

ir_module *ir_parse_stage(const char *text, int stage, char *err, size_t errlen)
{
    int n = 1, next_n;
    if (!stage_line(text, -1, &n))
        n = 1;
    if (stage < 0 || stage >= n) {
        snprintf(err, errlen, "the program has %d pipeline stage%s, not a stage %d", n, n == 1 ? "" : "s", stage);
        return NULL;
    }
    if (n == 1)
        return ir_parse_module(text, err, errlen);
    const char *at = stage_line(text, stage, &n);
    if (!at) {
        snprintf(err, errlen, "the program's text has no `; stage %d of %d` line", stage, n);
        return NULL;
    }
    const char *end = stage_line(at + 1, stage + 1, &next_n);
    char *part = strndup(at, end ? (size_t)(end - at) : strlen(at));
    ir_module *m = ir_parse_module(part, err, errlen);
    free(part);
    return m;
}

/* tokenizer_hf.c — a Hugging Face tokenizer.json (Megatron's HuggingFaceTokenizer) whose model
 * is a byte-level BPE, as GPT-2's and LLaMA 3's are. What it does not implement (other models,
 * normalizers, other pre-tokenizers or post-processors) is refused, naming the JSON field. */
#include "frontend/tokenizer_bpe_impl.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* When tokenizer_config.json names no eos_token: the first of these that is a token. */
static const char *const TOK_HF_EOD_NAMES[] = {"<|end_of_text|>", "<|endoftext|>", "</s>"};

typedef struct {
    const char *path; /* the tokenizer.json, for messages */
    char *err;
    size_t errlen;
} tok_hf;

static bool tok_hf_fail(const tok_hf *h, const char *field, const char *what) {
    snprintf(h->err, h->errlen, "--tokenizer-model %s: %s %s", h->path, field, what);
    return false;
}

static bool tok_hf_is(json_t *v, const char *s) { return json_is_string(v) && strcmp(json_string_value(v), s) == 0; }
static bool tok_hf_unset(json_t *v) { return !v || json_is_null(v) || json_is_false(v) || tok_hf_is(v, ""); }

/* model.vocab: token (byte alphabet) -> id; every id below t->nvocab once, with added_tokens. */
static bool tok_hf_vocab(const tok_hf *h, tok_bpe *t, json_t *vocab) {
    const char *key;
    json_t *val;
    char *bytes = NULL;
    size_t cap = 0;
    bool ok = true;
    json_object_foreach(vocab, key, val) {
        size_t n = strlen(key);
        if (n > cap) bytes = realloc(bytes, cap = n + 64);
        if (!bytes) abort();
        uint32_t bad;
        char what[512];
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        bool fresh = id >= 0 && id < t->nvocab && t->tok_len[id] == UINT32_MAX;
        if (!fresh || !tok_byte_level_bytes(key, bytes, &n, &bad) || !tok_bpe_set_token(t, (int32_t)id, bytes, n)) {
            if (!fresh)
                snprintf(what, sizeof what, "[\"%.200s\"] has an id that is not an integer or is used twice", key);
            else
                snprintf(what, sizeof what, "[\"%.200s\"] has a character (U+%04X) outside the byte-level alphabet; "
                         "mcc reads byte-level BPE vocabularies (a ByteLevel pre-tokenizer)", key, bad);
            ok = tok_hf_fail(h, "model.vocab", what);
            break;
        }
        tok_bpe_add_word(t, (int32_t)id); /* the byte alphabet is one-to-one */
    }
    free(bytes);
    return ok;
}

/* added_tokens: matched in the text as they are (no lstrip, rstrip or single_word). */
static bool tok_hf_added(const tok_hf *h, tok_bpe *t, json_t *added) {
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i), *content = json_object_get(a, "content"), *id = json_object_get(a, "id");
        char field[64];
        snprintf(field, sizeof field, "added_tokens[%zu]", i);
        if (!json_is_string(content) || !json_is_integer(id) || !json_string_length(content))
            return tok_hf_fail(h, field, "needs a non-empty \"content\" and an integer \"id\"");
        for (const char *const *flag = (const char *const[]){"lstrip", "rstrip", "single_word", NULL}; *flag; flag++)
            if (!tok_hf_unset(json_object_get(a, *flag))) {
                snprintf(field + strlen(field), sizeof field - strlen(field), ".%s", *flag);
                return tok_hf_fail(h, field, "is true; mcc matches added tokens exactly as written only");
            }
        int32_t tid = (int32_t)json_integer_value(id);
        const char *s = json_string_value(content);
        size_t n = json_string_length(content);
        bool in_vocab = tid >= 0 && tid < t->nvocab && t->tok_len[tid] != UINT32_MAX;
        if (in_vocab ? t->tok_len[tid] != n || memcmp(t->tok_bytes + t->tok_start[tid], s, n) != 0
                     : !tok_bpe_set_token(t, tid, s, n))
            return tok_hf_fail(h, field, "has an id out of range or that model.vocab gives another token");
        tok_bpe_add_added(t, tid);
    }
    return true;
}

/* The id of model.vocab's token `s` (byte alphabet), or -1. */
static int32_t tok_hf_id(json_t *vocab, const char *s) {
    json_t *v = json_object_get(vocab, s);
    return json_is_integer(v) ? (int32_t)json_integer_value(v) : -1;
}

/* model.merges: "left right" strings or [left, right] pairs, by rank. */
static bool tok_hf_merges(const tok_hf *h, tok_bpe *t, json_t *vocab, json_t *merges) {
    tok_bpe_merges_init(t, json_array_size(merges));
    char buf[1024];
    for (size_t i = 0; i < json_array_size(merges); i++) {
        json_t *m = json_array_get(merges, i);
        const char *l = NULL, *r = NULL;
        if (json_is_string(m) && json_string_length(m) < sizeof buf) {
            strcpy(buf, json_string_value(m));
            char *space = strchr(buf, ' ');
            if (space && !strchr(space + 1, ' ')) *space = '\0', l = buf, r = space + 1;
        } else if (json_array_size(m) == 2) {
            l = json_string_value(json_array_get(m, 0));
            r = json_string_value(json_array_get(m, 1));
        }
        char field[64], what[3 * sizeof buf + 128];
        snprintf(field, sizeof field, "model.merges[%zu]", i);
        if (!l || !r || strlen(l) + strlen(r) >= sizeof buf)
            return tok_hf_fail(h, field, "must be \"left right\" or [\"left\", \"right\"]");
        char joined[sizeof buf]; /* fits: the lengths were checked above */
        size_t nl = strlen(l);
        memcpy(joined, l, nl);
        strcpy(joined + nl, r);
        int32_t li = tok_hf_id(vocab, l), ri = tok_hf_id(vocab, r), merged = tok_hf_id(vocab, joined);
        if (li < 0 || ri < 0 || merged < 0) {
            snprintf(what, sizeof what, "merges \"%s\" and \"%s\", but model.vocab lacks \"%s\"", l, r,
                     li < 0 ? l : ri < 0 ? r : joined);
            return tok_hf_fail(h, field, what);
        }
        tok_bpe_add_merge(t, li, ri, (int32_t)i, merged);
    }
    return true;
}

/* A ByteLevel step: no prefix space; its regex (GPT-2's) when use_regex, as by default. */
static bool tok_hf_byte_level(const tok_hf *h, json_t *step, const char *field, bool *use_regex) {
    char at[96];
    snprintf(at, sizeof at, "%s.add_prefix_space", field);
    if (!tok_hf_unset(json_object_get(step, "add_prefix_space")))
        return tok_hf_fail(h, at, "is true; mcc does not add a prefix space (set it false)");
    *use_regex = !json_is_false(json_object_get(step, "use_regex"));
    return true;
}

/* pre_tokenizer: ByteLevel, or Sequence [Split(regex, Isolated), ByteLevel(use_regex false)]. */
static bool tok_hf_pre_tokenizer(const tok_hf *h, tok_bpe *t, json_t *pre) {
    static const char WHY[] = "must be ByteLevel, or a Sequence of Split (a Regex, behavior Isolated) then ByteLevel "
                              "(use_regex false), as GPT-2's and LLaMA 3's tokenizer.json are";
    json_t *steps = json_object_get(pre, "pretokenizers"), *split = json_array_get(steps, 0);
    bool use_regex;
    if (tok_hf_is(json_object_get(pre, "type"), "ByteLevel")) {
        if (!tok_hf_byte_level(h, pre, "pre_tokenizer", &use_regex)) return false;
        return tok_bpe_compile(t, use_regex ? TOK_GPT2_PATTERN : "(?s).+", "pre_tokenizer ByteLevel", h->err, h->errlen);
    }
    if (!tok_hf_is(json_object_get(pre, "type"), "Sequence") || json_array_size(steps) != 2 ||
        !tok_hf_is(json_object_get(split, "type"), "Split") ||
        !tok_hf_is(json_object_get(json_array_get(steps, 1), "type"), "ByteLevel"))
        return tok_hf_fail(h, "pre_tokenizer", WHY);
    if (!tok_hf_byte_level(h, json_array_get(steps, 1), "pre_tokenizer.pretokenizers[1]", &use_regex)) return false;
    json_t *regex = json_object_get(json_object_get(split, "pattern"), "Regex");
    if (use_regex || !json_is_string(regex) || !tok_hf_is(json_object_get(split, "behavior"), "Isolated") ||
        !tok_hf_unset(json_object_get(split, "invert")))
        return tok_hf_fail(h, "pre_tokenizer.pretokenizers[0]", WHY);
    t->keep_gaps = true; /* Isolated: the text between matches is a piece too */
    char what[1024];
    snprintf(what, sizeof what, "--tokenizer-model %s: pre_tokenizer.pretokenizers[0].pattern.Regex", h->path);
    return tok_bpe_compile(t, json_string_value(regex), what, h->err, h->errlen);
}

/* post_processor: ByteLevel (ids unchanged), TemplateProcessing (its "single" template's
 * special tokens around each document), or a Sequence of those. */
static bool tok_hf_post(const tok_hf *h, tok_bpe *t, json_t *post, const char *field) {
    json_t *type = json_object_get(post, "type");
    if (!post || json_is_null(post) || tok_hf_is(type, "ByteLevel")) return true;
    char at[96];
    if (tok_hf_is(type, "Sequence")) {
        json_t *steps = json_object_get(post, "processors");
        for (size_t i = 0; i < json_array_size(steps); i++) {
            snprintf(at, sizeof at, "%s.processors[%zu]", field, i);
            if (!tok_hf_post(h, t, json_array_get(steps, i), at)) return false;
        }
        return true;
    }
    if (!tok_hf_is(type, "TemplateProcessing"))
        return tok_hf_fail(h, field, "must be ByteLevel, TemplateProcessing or a Sequence of them");
    json_t *single = json_object_get(post, "single"), *specials = json_object_get(post, "special_tokens");
    bool seen_a = false;
    for (size_t i = 0; i < json_array_size(single); i++) {
        json_t *item = json_array_get(single, i), *sp = json_object_get(item, "SpecialToken");
        snprintf(at, sizeof at, "%s.single[%zu]", field, i);
        if (tok_hf_is(json_object_get(json_object_get(item, "Sequence"), "id"), "A") && !seen_a) {
            seen_a = true;
            continue;
        }
        json_t *ids = json_object_get(json_object_get(specials, json_string_value(json_object_get(sp, "id"))), "ids");
        for (size_t k = 0; k < json_array_size(ids); k++) {
            int *n = seen_a ? &t->nsuffix : &t->nprefix;
            int32_t id = (int32_t)json_integer_value(json_array_get(ids, k));
            if (!json_is_integer(json_array_get(ids, k)) || id < 0 || id >= t->nvocab || *n == TOK_MAX_TEMPLATE)
                return tok_hf_fail(h, at, "names a special token whose ids are not in the vocabulary");
            (seen_a ? t->suffix : t->prefix)[(*n)++] = id;
        }
        if (!json_array_size(ids)) return tok_hf_fail(h, at, "must be the sequence $A or a SpecialToken of special_tokens");
    }
    return true;
}

/* The end of document: tokenizer_config.json's eos_token (as transformers' eos_token_id), else
 * the first of TOK_HF_EOD_NAMES among the added tokens and the vocabulary. */
static void tok_hf_eod(tok_bpe *t, json_t *vocab, json_t *added, const char *dir) {
    char cfg_path[4096];
    bool whole = (size_t)snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir) < sizeof cfg_path;
    json_t *cfg = whole ? json_load_file(cfg_path, 0, NULL) : NULL /* a cut path would name another file */, *eos = json_object_get(cfg, "eos_token");
    const char *name = json_is_string(eos) ? json_string_value(eos) : json_string_value(json_object_get(eos, "content"));
    for (size_t k = 0; t->eod < 0 && k < (name ? 1 : sizeof TOK_HF_EOD_NAMES / sizeof *TOK_HF_EOD_NAMES); k++) {
        const char *want = name ? name : TOK_HF_EOD_NAMES[k];
        for (size_t i = 0; t->eod < 0 && i < json_array_size(added); i++)
            if (tok_hf_is(json_object_get(json_array_get(added, i), "content"), want))
                tok_bpe_set_eod(t, (int32_t)json_integer_value(json_object_get(json_array_get(added, i), "id")), want);
        if (t->eod < 0 && tok_hf_id(vocab, want) >= 0) tok_bpe_set_eod(t, tok_hf_id(vocab, want), want);
    }
    json_decref(cfg);
}

/* Refuses what this loader does not implement, naming the field. */
static bool tok_hf_supported(const tok_hf *h, json_t *root, json_t *model) {
    static const char *const UNSET[][2] = {
        {"normalizer", "is set; mcc implements no normalizer (GPT-2's and LLaMA 3's are null)"},
        {"truncation", "is set; preprocessing keeps whole documents (set it null)"},
        {"padding", "is set; preprocessing does not pad (set it null)"},
    };
    static const char *const MODEL_UNSET[][2] = {
        {"dropout", "is set; BPE dropout is for training a tokenizer, not for preprocessing"},
        {"continuing_subword_prefix", "is set; byte-level BPE has no subword prefix"},
        {"end_of_word_suffix", "is set; byte-level BPE has no end-of-word suffix"},
        {"byte_fallback", "is true; byte-level BPE needs no byte fallback"},
    };
    if (!json_is_object(root) || !json_is_object(model)) return tok_hf_fail(h, "model", "is missing; is this a tokenizer.json?");
    for (size_t i = 0; i < sizeof UNSET / sizeof *UNSET; i++)
        if (!tok_hf_unset(json_object_get(root, UNSET[i][0]))) return tok_hf_fail(h, UNSET[i][0], UNSET[i][1]);
    json_t *type = json_object_get(model, "type");
    if (!tok_hf_is(type, "BPE")) {
        char what[160];
        snprintf(what, sizeof what, "is %s; mcc reads BPE tokenizer.json files only (not WordPiece, Unigram or WordLevel)",
                 json_is_string(type) ? json_string_value(type) : "missing");
        return tok_hf_fail(h, "model.type", what);
    }
    for (size_t i = 0; i < sizeof MODEL_UNSET / sizeof *MODEL_UNSET; i++) {
        json_t *v = json_object_get(model, MODEL_UNSET[i][0]);
        if (!tok_hf_unset(v) && !(json_is_number(v) && json_number_value(v) == 0)) {
            char field[64];
            snprintf(field, sizeof field, "model.%s", MODEL_UNSET[i][0]);
            return tok_hf_fail(h, field, MODEL_UNSET[i][1]);
        }
    }
    if (!json_is_object(json_object_get(model, "vocab")) || !json_is_array(json_object_get(model, "merges")))
        return tok_hf_fail(h, "model", "needs \"vocab\" (an object) and \"merges\" (a list)");
    return true;
}

/* Every id below the largest in model.vocab and added_tokens, plus one. */
static int32_t tok_hf_size(json_t *vocab, json_t *added) {
    json_int_t top = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) if (json_integer_value(val) > top) top = json_integer_value(val);
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_int_t id = json_integer_value(json_object_get(json_array_get(added, i), "id"));
        if (id > top) top = id;
    }
    return top < INT32_MAX / 2 ? (int32_t)top + 1 : -1;
}

tok_bpe *tok_hf_load(const char *path, char *err, size_t errlen) {
    struct stat st;
    char file[4096], dir[4096];
    bool is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    snprintf(file, sizeof file, is_dir ? "%s/tokenizer.json" : "%s", path);
    snprintf(dir, sizeof dir, "%s", is_dir ? path : file);
    char *slash = strrchr(dir, '/');
    if (!is_dir && slash) *slash = '\0';
    else if (!is_dir) snprintf(dir, sizeof dir, ".");
    tok_hf h = {file, err, errlen};
    json_error_t je;
    json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &je), *model = json_object_get(root, "model");
    if (!root) {
        snprintf(err, errlen, "--tokenizer-model %s: %s (line %d); expected a Hugging Face tokenizer.json or the "
                 "directory holding one", file, je.text, je.line);
        return NULL;
    }
    json_t *vocab = json_object_get(model, "vocab"), *added = json_object_get(root, "added_tokens");
    tok_bpe *t = NULL;
    bool ok = tok_hf_supported(&h, root, model);
    int32_t n = ok ? tok_hf_size(vocab, added) : 0;
    if (ok && n <= 0) ok = tok_hf_fail(&h, "model.vocab", "is empty or has ids that are not small non-negative integers");
    if (ok) {
        t = tok_bpe_new(n);
        tok_bpe_words_init(t, json_object_size(vocab));
        ok = tok_hf_vocab(&h, t, vocab) && tok_hf_added(&h, t, added);
    }
    int32_t missing = ok ? tok_bpe_first_unset(t) : -1;
    char what[160];
    if (missing >= 0) {
        snprintf(what, sizeof what, "and added_tokens lack id %d; the ids must be 0..%d, each once", missing, n - 1);
        ok = tok_hf_fail(&h, "model.vocab", what);
    }
    int b = ok ? tok_bpe_find_bytes(t) : -1;
    if (b >= 0) {
        snprintf(what, sizeof what, "has no token for the byte 0x%02x; a byte-level BPE has one for each of the 256", b);
        ok = tok_hf_fail(&h, "model.vocab", what);
    }
    ok = ok && tok_hf_merges(&h, t, vocab, json_object_get(model, "merges")) &&
         tok_hf_pre_tokenizer(&h, t, json_object_get(root, "pre_tokenizer")) &&
         tok_hf_post(&h, t, json_object_get(root, "post_processor"), "post_processor");
    if (ok) {
        t->whole_words = json_is_true(json_object_get(model, "ignore_merges"));
        tok_hf_eod(t, vocab, added, dir);
    }
    json_decref(root);
    if (!ok) {
        tok_bpe_free(t);
        return NULL;
    }
    return t;
}

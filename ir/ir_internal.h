/* ir_internal.h — what the printer, parser and verifier share; not part of the IR's interface. */
#ifndef MCC_IR_INTERNAL_H
#define MCC_IR_INTERNAL_H

#include "ir.h"

#include <ctype.h>

/* Spellings of the global attributes in the text form (print.c), ORDER ir_global_kind / ir_init. */
extern const char *const ir_global_kind_names[IR_NUM_GLOBAL_KINDS];
extern const char *const ir_init_names[IR_NUM_INITS];
/* The schedule steps' spellings (print.c), ORDER ir_step_op. */
extern const char *const ir_step_op_names[IR_NUM_STEP_OPS];
extern const char *const ir_placement_names[IR_NUM_PLACEMENTS];
extern const char *const ir_stash_span_names[IR_NUM_STASH_SPANS];
extern const char *const ir_stash_slot_keys[IR_NUM_STASH_SPANS];

/* input, global and output name their tensor with @sym; no other op does. */
static inline bool ir_op_takes_sym(ir_op op) { return ir_op_has(op, IR_OPF_SYM); }

/* Names (globals, functions, @syms, config keys) are printed bare, so only names the parser reads
 * back as one word are allowed: a letter or '_', then letters, digits, '_', '.', '-'. */
static inline bool ir_name_start(int c) { return isalpha((unsigned char)c) || c == '_'; }
static inline bool ir_name_char(int c) { return isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-'; }
static inline bool ir_name_ok(const char *s)
{
    if (!s || !ir_name_start(*s))
        return false;
    while (ir_name_char(*s))
        s++;
    return *s == '\0';
}

/* A growing string the printer appends to. */
typedef struct {
    char *s;
    size_t len, cap;
} ir_buf;

void ir_buf_printf(ir_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* One instruction as printed, without indentation or newline: `%3 = gelu %2 : f32[4,64] @+256`. */
void ir_print_instr_to(ir_buf *b, const ir_func *f, const ir_instr *in);

#endif

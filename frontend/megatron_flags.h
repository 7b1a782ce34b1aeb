/* megatron_flags.h — the flags of Megatron-LM's pretrain_gpt.py (and torchrun's, which its
 * example scripts pass beside them) that are not spec fields, and what each means to mcc: done
 * anyway, another spelling of a field, not used (with what to do instead), or refused (with
 * Megatron's meaning and the way round). One table (megatron_flags.c) serves `mcc compile`'s
 * reading of a pasted script, its --help, "did you mean" and tests/megatron_scripts.sh. */
#ifndef MCC_MEGATRON_FLAGS_H
#define MCC_MEGATRON_FLAGS_H

#include <stdbool.h>
#include <stdio.h>

typedef enum {
    MF_SAME,    /* accepted: mcc already does what it asks */
    MF_SETS,    /* another spelling of a field's value: `sets` is "key=value" */
    MF_IMPLIED, /* accepted: what it turns on follows from a field */
    MF_UNUSED,  /* accepted, changes nothing mcc computes (logging, profiling, another program's setting):
                   the note says what mcc does instead */
    MF_REFUSED, /* asks for what mcc does not build: an error with Megatron's meaning and the way round */
} mcc_megatron_kind;

typedef struct {
    const char *flag;
    int nvalues;             /* 0: a switch; 1: one value; -1: one or more (argparse's nargs='+') */
    const char *values;      /* the values accepted, '|'-separated (numbers compare as numbers); NULL: any */
    mcc_megatron_kind kind;
    const char *sets;        /* MF_SETS: "key=value" */
    const char *holds;       /* NULL, or "key=value" the finished spec must hold for the flag to mean
                                nothing more (else it is refused with `why`) */
    const char *why;         /* the note on stderr, or the refusal's reason */
} mcc_megatron_flag;

enum { MCC_MEGATRON_MAX = 256 }; /* rows the table may hold (megatron_flags.c asserts it) */

/* The row of flag ("--moe-grouped-gemm"; torchrun's "--nproc_per_node" also as "--nproc-per-node"),
 * or NULL. */
const mcc_megatron_flag *mcc_megatron_find(const char *flag);

/* The row of flag whose values list `value` (a flag whose meaning depends on its value has a row a
 * value, one after another), else mcc_megatron_find's. */
const mcc_megatron_flag *mcc_megatron_find_value(const char *flag, const char *value);

/* The values flag's rows list, '|'-separated, into buf ("" where any value goes). */
void mcc_megatron_values(const char *flag, char *buf, size_t n);

/* Row i of the table (0 <= i < mcc_megatron_count()). */
const mcc_megatron_flag *mcc_megatron_at(int i);
int mcc_megatron_count(void);

/* What a flag of kind k is called, in its stderr line and in --help ("accepted, not used"). */
const char *mcc_megatron_kind_text(mcc_megatron_kind k);

/* The table as `mcc compile --help` lists it, or as a Markdown table (`mcc help megatron-flags
 * --markdown`: docs/megatron-flags.md). */
void mcc_megatron_print_help(FILE *out, bool markdown);

#endif

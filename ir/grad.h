/* grad.h — the context the op table's gradient rules (grad.c) build the backward graph in. */
#ifndef MCC_GRAD_H
#define MCC_GRAD_H

#include "ir.h"

typedef struct ir_grad_ctx {
    ir_module *m;
    ir_func *f;                     /* the function being extended with its backward */
    int *grad;                      /* per forward value: its gradient's value id, or -1 */
    int nfwd;                       /* values that existed before the backward began */
    double loss_scale;              /* d(objective)/d(loss), the lm loss's seed: what a loss added to
                                       the objective by moe_aux_attach is seeded with too */
} ir_grad_ctx;

/* The gradient flowing into forward value v (-1: v does not reach the loss). */
int ir_grad_of(const ir_grad_ctx *g, int v);
/* Adds dv to the gradient of forward value v (an add op when v already has one). */
void ir_grad_contribute(ir_grad_ctx *g, int v, int dv);

#endif

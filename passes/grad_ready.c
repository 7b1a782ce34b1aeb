/* grad_ready.c — the host's update beside the backward (--optimizer-cpu-offload with --clip-grad 0;
 * docs/design/runtime.md). The host function (optimizer.c's host_optimizer) streams each offloaded
 * gradient down, updates its master and copies it up into the device's working copy. Without
 * clipping nothing in that update waits for another parameter's gradient (coef is 1), so each
 * parameter's can start once the step's last micro-batch no longer touches what it reads or writes
 * on the device: its gradient (final) and the working copy it copies up into (no longer read).
 * This pass
 *   - puts a `grad_ready {slot=k}` after the last instruction of the step function that touches
 *     either (through any view), slot k being the k-th parameter so finished (the backward's order,
 *     the last layer's first);
 *   - lists the host function's AdamWs, each with its copy up, in slot order, so the host takes
 *     them as the backward finishes them;
 *   - makes the host's clip_coef input the constant 1 (a fill): train_rank then starts the host
 *     function on its own thread once the last micro-batch is queued, and each parameter's first
 *     copy down waits for its mark alone (runtime/host_optimizer.c, device.h copy_async's ready).
 * The marks go into every micro-batch's call of the step: a wait sees a mark's latest record, and
 * the host starts after the last micro-batch is queued, so it waits for that one's.
 * It runs after the passes that move or add instructions (fusion, loss_chunks, comm_overlap) so
 * that the last use it finds is the last one run. Clipped runs (coef needs the norm over every
 * gradient, so no update may start before the backward ends) keep the serial host step; so do
 * plans whose gradients are final only after the step function (a reduce function: data parallel
 * without --overlap-grad-reduce, ZeRO; a pipeline's backward functions) or reduced inside it
 * (--overlap-grad-reduce's buckets, on the comm stream), said in a note. */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>

/* An offloaded parameter's update in the host function: its AdamW (instruction adamw), the copy up
 * after it (instruction up), the device globals they touch (grad, target), and where the step is done
 * with them (last: the index of its last instruction touching either, -1 none). */
typedef struct {
    int adamw, up, grad, target, last;
} host_update;

/* The backward's order; a tie (one instruction finishing two) in the host function's. */
static int by_last(const void *a, const void *b)
{
    const host_update *x = a, *y = b;
    return x->last != y->last ? (x->last > y->last) - (x->last < y->last) : (x->adamw > y->adamw) - (x->adamw < y->adamw);
}

/* The next instruction of f after i that does work (a global's reference does none), or ninstrs. */
static int next_work(const ir_func *f, int i)
{
    while (++i < f->ninstrs && f->instrs[i].op == IR_OP_GLOBAL) {
    }
    return i;
}

/* The host function's updates, into u (room for every instruction); their count, or -1 where one
 * of its instructions is not such a pair (nothing else is streamed beside the backward). */
static int host_updates(const ir_module *m, const ir_func *h, host_update *u)
{
    int n = 0;
    for (int i = 0; i < h->ninstrs; i++) {
        const ir_instr *in = &h->instrs[i];
        if (in->op == IR_OP_INPUT || in->op == IR_OP_GLOBAL)
            continue;
        int grad = in->op == IR_OP_ADAMW ? ir_global_of(h, in->args[1]) : -1, j = next_work(h, i);
        if (grad < 0 || m->globals[grad].host || j == h->ninstrs || h->instrs[j].op != IR_OP_COPY ||
            h->instrs[j].args[1] != in->args[0])
            return -1;
        int target = ir_global_of(h, h->instrs[j].args[0]);
        if (target < 0 || m->globals[target].host)
            return -1;
        u[n++] = (host_update){i, j, grad, target, -1};
        i = j;
    }
    return n;
}

/* Per value of f: the global it refers to, itself or through views, or -1. */
static int *global_roots(const ir_func *f)
{
    int *root = malloc(sizeof(int) * ((size_t)f->nvals + 1));
    for (int v = 0; v < f->nvals; v++)
        root[v] = -1;
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (in->op == IR_OP_GLOBAL)
            root[in->res[0]] = in->global;
        else if (ir_op_has(in->op, IR_OPF_VIEW))
            root[in->res[0]] = root[in->args[0]];
    }
    return root;
}

/* Each update's last: the last instruction of step f (not a view) with an operand rooted in its
 * gradient or its target. False where a collective touches one (reduced in the step). */
static bool last_uses(const ir_func *f, host_update *u, int n)
{
    int *root = global_roots(f);
    bool ok = true;
    for (int i = 0; i < f->ninstrs && ok; i++) {
        const ir_instr *in = &f->instrs[i];
        if (in->op == IR_OP_GLOBAL || ir_op_has(in->op, IR_OPF_VIEW))
            continue;
        for (int a = 0; a < in->nargs; a++)
            for (int k = 0; k < n; k++)
                if (root[in->args[a]] >= 0 && (root[in->args[a]] == u[k].grad || root[in->args[a]] == u[k].target)) {
                    u[k].last = i;
                    ok &= !ir_op_has(in->op, IR_OPF_COLLECTIVE);
                }
    }
    free(root);
    return ok;
}

/* Step function fi again, with update k's grad_ready {slot=k} after its last (u in slot order). */
static void mark_step(ir_module *m, int fi, const host_update *u, int n)
{
    const ir_func *src = m->funcs[fi];
    ir_func *dst = ir_func_new(m, src->name, src->kind);
    int *map = malloc(sizeof(int) * ((size_t)src->nvals + 1)), k = 0;
    for (int i = -1; i < src->ninstrs; i++) { /* i = -1: the marks of what the step never touches */
        if (i >= 0)
            ir_copy_instr(m, dst, src, &src->instrs[i], map);
        for (; k < n && u[k].last == i; k++) {
            int grad = ir_global_ref(m, dst, u[k].grad);
            double slot = k;
            ir_emit(m, dst, IR_OP_GRAD_READY, &grad, 1, &slot, NULL, NULL);
        }
    }
    ir_func_replace(m, fi, dst);
    free(map);
}

/* Host function hi again: its inputs and references first, clip_coef a fill of 1, then each update
 * (AdamW and copy up) in slot order. */
static void order_host(ir_module *m, int hi, const host_update *u, int n)
{
    const ir_func *src = m->funcs[hi];
    ir_func *dst = ir_func_new(m, src->name, src->kind);
    int *map = malloc(sizeof(int) * ((size_t)src->nvals + 1));
    for (int i = 0; i < src->ninstrs; i++) {
        const ir_instr *in = &src->instrs[i];
        if (in->op == IR_OP_INPUT && in->role.kind == IR_ROLE_CLIP_COEF)
            map[in->res[0]] = ir_fill(m, dst, 1.0, ir_scalar(IR_F32));
        else if (in->op == IR_OP_INPUT || in->op == IR_OP_GLOBAL)
            ir_copy_instr(m, dst, src, in, map);
    }
    for (int k = 0; k < n; k++) {
        ir_copy_instr(m, dst, src, &src->instrs[u[k].adamw], map);
        ir_copy_instr(m, dst, src, &src->instrs[u[k].up], map);
    }
    ir_func_replace(m, hi, dst);
    free(map);
}

static bool layout_note_said; /* once a process: every stage's module would say it */

bool pass_grad_ready(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    (void)opts, (void)err, (void)errlen;
    int hi = ir_func_of_kind(m, IR_FUNC_HOST_OPTIMIZER), si = ir_func_of_kind(m, IR_FUNC_STEP);
    if (hi < 0 || ir_cfg_num(m, IR_CFG_CLIP_GRAD) != 0 || ir_grad_ready_slots(m) > 0)
        return true; /* no offload; clipped (serial); marked already */
    const ir_func *h = m->funcs[hi];
    host_update *u = malloc(sizeof(host_update) * ((size_t)h->ninstrs + 1));
    int n = host_updates(m, h, u);
    bool overlap = n > 0 && si >= 0 && ir_func_of_kind(m, IR_FUNC_REDUCE) < 0 && last_uses(m->funcs[si], u, n);
    if (overlap) {
        qsort(u, (size_t)n, sizeof *u, by_last);
        mark_step(m, si, u, n);
        order_host(m, hi, u, n);
    } else if (!layout_note_said) {
        layout_note_said = true;
        fprintf(stderr, "mcc: note: --optimizer-cpu-offload --clip-grad 0 runs the host's update beside the backward "
                        "only where the gradients are final in the step itself (one rank a replica: no pipeline, no "
                        "data-parallel reduction after or inside it); this plan runs it after the backward\n");
    }
    free(u);
    return true;
}

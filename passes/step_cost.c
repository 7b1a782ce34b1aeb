/* step_cost.c — a plan's step time on its target (step_cost.h): each instruction by its class's
 * calibrated row, else by the target's roofline; a function's instructions times its calls in the
 * train schedule. */
#include "step_cost.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* An output tile a GEMM kernel computes per streaming multiprocessor at a time (cuBLASLt's bf16
 * kernels' common 128 x 128): the last wave of a GEMM whose tiles do not fill every SM leaves
 * some idle, which small GEMMs (gpt2-124M's) feel. */
enum { GEMM_TILE = 128 };

/* The class name of op: its own, but an FP8 GEMM whose epilogue adds into its output is costed as
 * fp8_matmul, and swiglu_grad_product as swiglu_grad (the same kernels; the bytes they read or
 * write more are in their work), until the calibration measures them apart. */
static const char *class_name(ir_op op)
{
    if (op == IR_OP_SWIGLU_GRAD_PRODUCT)
        return ir_ops[IR_OP_SWIGLU_GRAD].name;
    return op == IR_OP_FP8_MATMUL_ACCUMULATE || op == IR_OP_FP8_MATMUL_ADD ? ir_ops[IR_OP_FP8_MATMUL].name : ir_ops[op].name;
}

/* The bytes of operand type x that an instruction touches: a row buffer ([room, *]) of a grouped
 * GEMM or a run sort only its `rows` (room 0: all of every operand). */
static double row_share(const ir_type *x, double rows, double room)
{
    double bytes = (double)ir_bytes(x);
    return room > 0 && x->ndim == 2 && (double)x->dims[0] == room ? bytes * rows / room : bytes;
}

void mcc_instr_work_of(const ir_func *f, const ir_instr *in, const mcc_target *t, mcc_instr_work *w)
{
    *w = (mcc_instr_work){.wave_eff = 1};
    const char *name = class_name(in->op);
    int ta = ir_attr_index(in->op, "ta"), tb = ir_attr_index(in->op, "tb");
    bool attention = in->op == IR_OP_ATTENTION || in->op == IR_OP_ATTENTION_GRAD || in->op == IR_OP_ATTENTION_DROPOUT ||
                     in->op == IR_OP_ATTENTION_DROPOUT_GRAD;
    if (ta >= 0 || tb >= 0) { /* a multiplying op: its transposes pick the kernel (forward, dgrad, wgrad) */
        snprintf(w->cls, sizeof w->cls, "%s.%s%s", name, ta >= 0 ? (in->attr[ta] != 0 ? "t" : "n") : "",
                 tb >= 0 ? (in->attr[tb] != 0 ? "t" : "n") : "");
    } else if (attention) { /* the head width and grouped keys pick the kernel: q [B,T,H,D] by k [B,Tk,Hk,D];
                               values of another width v [B,Tk,Hk,Dv] (multi-latent attention's, cuDNN's
                               kernel) are ".v<Dv>" after, like the d128 kernel until measured */
        int k = in->op == IR_OP_ATTENTION || in->op == IR_OP_ATTENTION_DROPOUT ? 1 : 2;
        const ir_type *q = ir_vtype(f, in->args[k - 1]), *kt = ir_vtype(f, in->args[k]), *v = ir_vtype(f, in->args[k + 1]);
        const char *gqa = kt->dims[2] < q->dims[2] ? ".gqa" : "";
        if (v->dims[3] == q->dims[3]) {
            snprintf(w->cls, sizeof w->cls, "%s.d%lld%s", name, (long long)q->dims[3], gqa);
        } else {
            snprintf(w->cls, sizeof w->cls, "%s.d%lld.v%lld%s", name, (long long)q->dims[3], (long long)v->dims[3], gqa);
            snprintf(w->like, sizeof w->like, "%s.d128%s", name, gqa);
        }
    } else {
        snprintf(w->cls, sizeof w->cls, "%s", name);
    }
    w->costed = !(ir_op_has(in->op, IR_OPF_SYM) || ir_op_has(in->op, IR_OPF_VIEW) ||
                  ir_op_has(in->op, IR_OPF_COLLECTIVE) || in->op == IR_OP_RESHAPE ||
                  in->op == IR_OP_GRAD_READY); /* an event recorded: its operand names the gradient, unread */
    if (!w->costed)
        return;
    /* a grouped GEMM's or a run sort's row buffers [R, *] count the rows it touches, not R: behind
     * expert parallelism's dispatch R is the dropless worst case (at DeepSeek-V3's ep 64, 32 times
     * the balanced rows), room each expert's GEMM and the sorts' kernel never read or write;
     * counted whole, the fitted per-byte rate made the bytes ~97% of a GEMM's time there. Where
     * every row is routed (one rank, bench/calibrate.sh's MoE configs) rows == R: the fit's own
     * work is unchanged. */
    double room = 0, rows = ir_grouped_rows(f, in, &room);
    for (int a = 0; a < in->nargs + in->nres; a++)
        w->bytes += row_share(a < in->nargs ? ir_vtype(f, in->args[a]) : ir_vtype(f, in->res[a - in->nargs]), rows, room);
    w->flops = 2 * ir_work_macs(f, in);
    bool fp8 = class_name(in->op) == ir_ops[IR_OP_FP8_MATMUL].name || in->op == IR_OP_FP8_GROUPED_MATMUL ||
               in->op == IR_OP_FP8_GROUPED_WGRAD || in->op == IR_OP_FP8_GROUPED_WGRAD_ACCUMULATE; /* the experts'
                                                     FP8 GEMMs, classes of their own until measured */
    w->peak_flops = fp8 ? t->peak_fp8_flops : t->peak_bf16_flops;
    if (w->flops > 0 && in->nres && t->sms > 0) {
        const ir_type *y = ir_vtype(f, in->res[0]);
        double n = (double)y->dims[y->ndim - 1], m = (double)ir_numel(y) / (n > 0 ? n : 1);
        if (ir_bytes(y)) m *= row_share(y, rows, room) / (double)ir_bytes(y); /* a grouped GEMM's output: its rows */
        double tiles = ceil(m / GEMM_TILE) * ceil(n / GEMM_TILE), waves = ceil(tiles / t->sms);
        w->wave_eff = tiles > 0 ? tiles / (waves * t->sms) : 1;
    }
}

double mcc_instr_seconds(const mcc_target *t, const mcc_instr_work *w, bool *calibrated)
{
    *calibrated = false;
    if (!w->costed)
        return 0;
    int row = -1;
    for (int i = 0; i < t->ncost_rows && row < 0; i++)
        row = !strcmp(t->cost_rows[i].cls, w->cls) ? i : -1;
    for (int i = 0; i < t->ncost_rows && row < 0 && w->like[0]; i++)
        row = !strcmp(t->cost_rows[i].cls, w->like) ? i : -1;
    if (row >= 0) {
        const mcc_cost_row *r = &t->cost_rows[row];
        *calibrated = true;
        double s = 1e-6 * (r->t0_us + r->us_per_gflop * w->flops / w->wave_eff / 1e9 + r->us_per_gb * w->bytes / 1e9);
        /* never faster than the datasheet's peak: a row fitted on small shapes (t0 > 0, its FLOPs and
         * bytes terms splitting collinear time) extrapolates past it on GEMMs larger than it saw */
        double floor = w->peak_flops > 0 ? w->flops / w->peak_flops : 0;
        return s > floor ? s : floor;
    }
    /* the roofline: the GEMM rate or the memory's, whichever bounds it, and a kernel's launch */
    double compute = w->flops / t->gemm_bf16_flops, memory = t->hbm_bytes_per_s > 0 ? w->bytes / t->hbm_bytes_per_s : 0;
    return (compute > memory ? compute : memory) + 3e-6;
}

/* Calls of each function in the train schedule. */
static void calls_of(const ir_module *m, int *calls)
{
    for (int f = 0; f < m->nfuncs; f++)
        calls[f] = 0;
    const ir_program *train = &m->progs[IR_PROG_TRAIN];
    for (int s = 0; s < train->nsteps; s++)
        if (train->steps[s].op == IR_STEP_CALL)
            calls[train->steps[s].func]++;
}

mcc_step_cost mcc_step_cost_of(const ir_module *m, const mcc_target *t)
{
    mcc_step_cost c = {.calibrated = t->ncost_rows > 0};
    int calls[m->nfuncs + 1];
    calls_of(m, calls);
    /* beside: the device's seconds the host's update runs under where the plan marks gradients ready
     * (passes/grad_ready.c): one step call's after its first mark (the last micro-batch's backward
     * from there) and the optimizer function's, before train_rank joins the host */
    double calibrated = 0, all = 0, kernels = 0, host = 0, micro = 0, micro_kernels = 0, beside = 0;
    bool marked = ir_grad_ready_slots(m) > 0;
    for (int f = 0; f < m->nfuncs; f++) {
        bool per_micro_batch = ir_func_per_micro_batch(m->funcs[f]->kind), after_mark = false;
        ir_func_kind kind = m->funcs[f]->kind;
        for (int i = 0; calls[f] && i < m->funcs[f]->ninstrs; i++) {
            if (m->funcs[f]->kind == IR_FUNC_HOST_OPTIMIZER) { /* the host's: its bytes at the host's rate */
                mcc_instr_work w;
                mcc_instr_work_of(m->funcs[f], &m->funcs[f]->instrs[i], t, &w);
                host += t->host_bytes_per_s > 0 ? calls[f] * w.bytes / t->host_bytes_per_s : 0;
                continue;
            }
            mcc_instr_work w;
            bool from_row;
            mcc_instr_work_of(m->funcs[f], &m->funcs[f]->instrs[i], t, &w);
            double s = calls[f] * mcc_instr_seconds(t, &w, &from_row);
            all += s;
            calibrated += from_row ? s : 0;
            kernels += w.costed ? calls[f] : 0;
            micro += per_micro_batch ? s / calls[f] : 0;
            micro_kernels += per_micro_batch && w.costed;
            after_mark |= m->funcs[f]->instrs[i].op == IR_OP_GRAD_READY;
            beside += marked && ((kind == IR_FUNC_STEP && after_mark) || kind == IR_FUNC_OPTIMIZER) ? s / calls[f] : 0;
        }
    }
    beside *= t->ncost_rows ? t->step_scale : 1;
    double exposed = host > beside ? host - beside : 0; /* what the host adds after the device's step */
    c.seconds = (t->ncost_rows ? t->step_scale * all + t->kernel_s * kernels + t->step_overhead_s : all) + exposed;
    c.micro_batch_seconds = t->ncost_rows ? t->step_scale * micro + t->kernel_s * micro_kernels : micro;
    c.calibrated_share = all > 0 ? calibrated / all : 0;
    return c;
}

void mcc_step_cost_table(const ir_module *m, const mcc_target *t, FILE *out)
{
    int calls[m->nfuncs + 1];
    calls_of(m, calls);
    fprintf(out, "func\tindex\top\tclass\tcalls\tflops\tbytes\twave_eff\tpredicted_us\n");
    for (int f = 0; f < m->nfuncs; f++)
        for (int i = 0; calls[f] && i < m->funcs[f]->ninstrs; i++) {
            mcc_instr_work w;
            bool from_row;
            const ir_instr *in = &m->funcs[f]->instrs[i];
            mcc_instr_work_of(m->funcs[f], in, t, &w);
            if (w.costed)
                fprintf(out, "%s\t%d\t%s\t%s\t%d\t%.0f\t%.0f\t%.4f\t%.3f\n", m->funcs[f]->name, i, ir_ops[in->op].name,
                        w.cls, calls[f], w.flops, w.bytes, w.wave_eff, 1e6 * mcc_instr_seconds(t, &w, &from_row));
        }
}

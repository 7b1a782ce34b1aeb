/* cpu_device.c — the CPU device: host memory, and one kernel call per instruction
 * (runtime/cpu_kernels.c, matmuls through the BLAS). */
#include "comm.h"
#include "device.h"
#include "program.h"
#include "common/knobs.h"
#include "runtime/bf16.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* image: the plan object's table of generated elementwise kernels (rt_elementwise_fn per op, NULL
 * where none), or NULL: then every op runs its C kernel. MCC_CPU_KERNELS=c also forces the C
 * kernels (to compare the two). */
static void cpu_open(rt_program *p, const void *image)
{
    enum { KERNELS_LLVM, KERNELS_C }; /* ORDER MCC_CPU_KERNELS's choices */
    p->dev_state = knob_choice(KNOB_CPU_KERNELS) == KERNELS_C ? NULL : (void *)image;
}

static void cpu_close(rt_program *p) {}

static void *cpu_alloc(rt_program *p, size_t bytes)
{
    void *ptr = calloc(1, bytes ? bytes : 1);
    if (!ptr) {
        fprintf(stderr, "train_rank: out of host memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    return ptr;
}

static void cpu_free(rt_program *p, void *ptr) { free(ptr); }
static void cpu_copy(rt_program *p, void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_copy_within(void *stream, void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static void cpu_copy2d(void *stream, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height)
{
    for (size_t i = 0; i < height; i++)
        memcpy((char *)dst + i * dpitch, (const char *)src + i * spitch, width);
}

/* Uniform in (0, 1] from the top 53 bits. */
static double unit(uint64_t bits) { return ((bits >> 11) + 1) * (1.0 / 9007199254740992.0); }

static float normal_at(uint64_t key, int64_t i)
{
    uint64_t a = rt_splitmix64(key ^ rt_splitmix64((uint64_t)i * 2));
    uint64_t b = rt_splitmix64(key ^ rt_splitmix64((uint64_t)i * 2 + 1));
    return (float)(sqrt(-2.0 * log(unit(a))) * cos(2.0 * M_PI * unit(b)));
}

static void cpu_init(rt_program *p, float *w, uint16_t *hi, int16_t *rem, int64_t n, uint64_t key, float std,
                     bool normal, float value, const rt_shard_layout *at)
{
    for (int64_t i = 0; i < n; i++) {
        float x = normal ? std * normal_at(key, rt_shard_global_index(at, i)) : value;
        if (w)
            w[i] = x;
        else
            rt_master_split(x, &hi[i], &rem[i]);
    }
}

/* Runs a generated kernel on the call's buffers when the op has one and its operands are fp32. */
static bool run_generated(const rt_elementwise_fn *table, const rt_kernel_call *c)
{
    ir_op op = c->in->op;
    rt_elementwise_fn fn = table[op];
    if (!fn)
        return false;
    for (int a = 0; a < c->nargs; a++)
        if (c->arg_types[a]->dtype != IR_F32)
            return false;
    float attr = (float)c->in->attr[IR_ATTR_SCALAR];
    switch (rt_elementwise_kind_of(op)) {
    case RT_EW_UNARY: fn(c->res[0], c->args[0], NULL, ir_numel(c->res_types[0]), attr); return true;
    case RT_EW_BINARY: fn(c->res[0], c->args[0], c->args[1], ir_numel(c->res_types[0]), attr); return true;
    case RT_EW_INTO: fn(c->args[0], c->args[0], c->args[1], ir_numel(c->arg_types[0]), attr); return true;
    case RT_EW_FILL: fn(c->res[0], NULL, NULL, ir_numel(c->res_types[0]), attr); return true;
    default: return false;
    }
}

static void run_kernel(const rt_elementwise_fn *generated, const rt_kernel_call *c)
{
    if (!generated || !run_generated(generated, c))
        rt_cpu_kernels[c->in->op](c);
}

enum { MAX_BOUNDED_OPERANDS = 3 }; /* operands (less the bound) and results of a row-bounded op at most */

/* An instruction with a row bound (ir_row_bound) runs as the same call on the leading rows its
 * counts sum to, its row operands and results (operand 0's rank, R rows: a grouped GEMM's weights
 * and counts are not) cut to them (rows are contiguous); the rows of its results past them are NaN
 * (every byte 0xff, a NaN in each float dtype), as the run sorts leave the room, so that a reader of
 * them turns the layout tests' loss and gradients NaN. */
static void run_row_bounded(const rt_elementwise_fn *generated, const rt_kernel_call *c)
{
    int nargs = c->nargs - 1; /* the bound last */
    const int32_t *counts = c->args[nargs];
    int64_t R = c->arg_types[0]->dims[0], rows = 0;
    for (int64_t s = 0; s < c->arg_types[nargs]->dims[0]; s++)
        rows += counts[s];
    if (nargs > MAX_BOUNDED_OPERANDS || c->nres > MAX_BOUNDED_OPERANDS) {
        fprintf(stderr, "train_rank: internal error: %s has %d operands and %d results, more than a row-bounded "
                        "op's %d\n", ir_ops[c->in->op].name, nargs, c->nres, MAX_BOUNDED_OPERANDS);
        exit(1);
    }
    if (rows < 0 || rows > R) {
        fprintf(stderr, "train_rank: %s's row bound sums to %lld rows of its %lld: the dispatch's counts are corrupt\n",
                ir_ops[c->in->op].name, (long long)rows, (long long)R);
        exit(1);
    }
    ir_type types[2 * MAX_BOUNDED_OPERANDS];
    const ir_type *arg_types[MAX_BOUNDED_OPERANDS], *res_types[MAX_BOUNDED_OPERANDS];
    for (int k = 0; k < nargs + c->nres; k++) {
        types[k] = *(k < nargs ? c->arg_types[k] : c->res_types[k - nargs]);
        if (types[k].ndim == c->arg_types[0]->ndim && types[k].dims[0] == R)
            types[k].dims[0] = rows;
        *(k < nargs ? &arg_types[k] : &res_types[k - nargs]) = &types[k];
    }
    rt_kernel_call lead = {c->in, nargs, c->nres, c->args, arg_types, c->res, res_types};
    run_kernel(generated, &lead);
    for (int r = 0; r < c->nres; r++) {
        size_t row = ir_bytes(c->res_types[r]) / (size_t)(R ? R : 1);
        memset((char *)c->res[r] + (size_t)rows * row, 0xff, (size_t)(R - rows) * row);
    }
}

/* The instruction's amax results (ir_amax_results: the fusion pass's), fp8_amax's kernel on each of
 * its first results as its op's kernel stored them: the bits the unfused fp8_amax reads. */
static void run_amaxes(const rt_kernel_call *c)
{
    int nres = ir_ops[c->in->op].nres;
    for (int k = 0; k < ir_amax_results(c->in->op, c->in->attr); k++) {
        rt_kernel_call amax = {c->in, 1, 1, &c->res[k], &c->res_types[k], &c->res[nres + k], &c->res_types[nres + k]};
        rt_cpu_kernels[IR_OP_FP8_AMAX](&amax);
    }
}

void rt_cpu_run_call(const rt_elementwise_fn *generated, const rt_kernel_call *c)
{
    if (ir_row_bound(c->in) >= 0)
        run_row_bounded(generated, c);
    else
        run_kernel(generated, c);
    run_amaxes(c);
}

static void cpu_run(rt_program *p, int func)
{
    rt_func_exec *x = &p->funcs[func];
    const rt_elementwise_fn *generated = p->dev_state;
    if (x->f->kind == IR_FUNC_HOST_OPTIMIZER) { /* its memory is the host's: rt_program_run runs it there */
        fprintf(stderr, "train_rank: internal error: the CPU device was handed %s, a host function\n", x->f->name);
        exit(1);
    }
    for (int i = 0; i < x->f->ninstrs; i++)
        rt_cpu_run_call(generated, &x->calls[i]);
}

/* The host optimizer's overlapped copies (device.h copy_async): done at once, so that CPU ranks run
 * the overlapped path of runtime/host_optimizer.c too; the token only says it is done. */
static void *cpu_copy_async(rt_program *p, void *dst, const void *src, size_t bytes, bool to_host, int ready)
{
    memcpy(dst, src, bytes);
    return p;
}

static void cpu_copy_wait(rt_program *p, void *done) {}

static size_t cpu_memory_in_use(rt_program *p) { return 0; }
static void *cpu_queue(rt_program *p) { return NULL; }

static rt_comm *cpu_world_comm(rt_program *p, const rt_rank_env *e, char *err, size_t errlen)
{
    return rt_comm_world_mpi(e, err, errlen);
}

const rt_device rt_cpu_device = {RT_DEVICE_CPU, cpu_open,         cpu_alloc, cpu_free,  cpu_copy,      cpu_copy,
                                 cpu_init, cpu_run,          cpu_memory_in_use, cpu_close, cpu_queue, cpu_world_comm,
                                 NULL /* alloc_window: alloc serves */, NULL /* quiesce: nothing to release */,
                                 NULL, NULL /* trace_push/pop: no timeline to mark */,
                                 NULL, NULL /* alloc_host/free_host: malloc serves */,
                                 cpu_copy_async, cpu_copy_wait, cpu_copy_within, cpu_copy2d};

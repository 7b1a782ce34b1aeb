/* memory_plan.c — places every activation of every function in one arena per function, by
 * liveness: a value occupies its bytes from its defining instruction to its last use (through
 * reshape views, which share their operand's bytes); freed ranges are reused first-fit. Where
 * the op table allows it (ops.def's inplace column), a result takes over the bytes of an
 * operand of the same size whose last use is that instruction: the logits' gradient takes the
 * logits' place, an activation's gradient that of the incoming gradient. First-fit in program
 * order can leave holes that no later value fits (a chunked head's logits beside the MLPs' outputs):
 * for the function whose arena is the largest (the device's one arena is sized by it), the blocks
 * first-fit made (each a value and those that took its bytes in place, from its placing to its
 * freeing) are placed again largest first, each at the lowest offset clear of the blocks that
 * overlap it in time (TFLite's and XLA's greedy by size), and that placement is kept when its arena
 * is smaller by 1% or more, then the next largest likewise: a plan first-fit packs to within 1% of
 * that stays as it was.
 * Inputs and outputs stay live for the whole call. Globals (parameters, gradients, optimizer
 * state) live outside the arenas. With the copy lane (config comm_copy_lane), the exchange
 * buffers its collectives need after the arena and after the globals' slab are sized here too,
 * into the config, which train_rank allocates from: what mcc compile reports is what it gets. */
#include "passes.h"

#include <stdlib.h>
#include <string.h>

#define ARENA_ALIGN 64

typedef struct {
    int64_t offset, size;
    int value;
} block;

/* Live blocks sorted by offset; allocation takes the first gap that fits. */
typedef struct {
    block *b;
    int n, cap;
    int64_t high_water;
} arena;

static int64_t arena_alloc(arena *a, int64_t size, int value)
{
    int64_t at = 0;
    int pos = 0;
    for (; pos < a->n; pos++) {
        if (a->b[pos].offset - at >= size)
            break;
        at = a->b[pos].offset + a->b[pos].size;
    }
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 64;
        a->b = realloc(a->b, sizeof(block) * (size_t)a->cap);
    }
    memmove(&a->b[pos + 1], &a->b[pos], sizeof(block) * (size_t)(a->n - pos));
    a->b[pos] = (block){at, size, value};
    a->n++;
    if (at + size > a->high_water)
        a->high_water = at + size;
    return at;
}

static block *arena_find(arena *a, int value)
{
    for (int i = 0; i < a->n; i++)
        if (a->b[i].value == value)
            return &a->b[i];
    return NULL;
}

static void arena_free(arena *a, int value)
{
    block *b = arena_find(a, value);
    if (b) {
        memmove(b, b + 1, sizeof(block) * (size_t)(a->n - (b - a->b) - 1));
        a->n--;
    }
}

/* The value whose bytes v uses: itself, or for a view the root of its operand. */
static int storage_root(const int *root, int v)
{
    return root[v] < 0 ? v : root[v];
}

static int64_t arena_size(const ir_value *v)
{
    int64_t size = ((int64_t)ir_bytes(&v->type) + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    return size ? size : ARENA_ALIGN;
}

/* The operand whose bytes result 0 of `in` takes over, or -1: one the op table allows
 * (ops.def's inplace bits), living in the arena, of the result's size, whose last use (through
 * any view) is this instruction. */
static int inplace_donor(const ir_func *f, const ir_instr *in, int i, const int *root, const int *last, arena *a)
{
    if (!in->nres || ir_op_has(in->op, IR_OPF_VIEW) || in->op == IR_OP_GLOBAL)
        return -1;
    for (int k = 0; k < in->nargs && k < 32; k++) {
        if (!(ir_ops[in->op].inplace & (1u << k)))
            continue;
        int d = storage_root(root, in->args[k]);
        if (last[d] == i && f->vals[d].mem == IR_MEM_ARENA && arena_find(a, d) &&
            arena_size(&f->vals[d]) == arena_size(&f->vals[in->res[0]]))
            return d;
    }
    return -1;
}

/* Lifetimes: root[v], the value whose bytes v uses (-1: its own); last[v], the last instruction
 * that reads v's bytes (through any view); inputs and outputs live to the end of the call. */
static void lifetimes(const ir_func *f, int *root, int *last)
{
    for (int v = 0; v < f->nvals; v++) {
        root[v] = -1;
        /* Inputs stay whole for the entire call: the host writes them before and may read them after. */
        last[v] = f->instrs[f->vals[v].def].op == IR_OP_INPUT ? f->ninstrs : f->vals[v].def;
    }
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (ir_op_has(in->op, IR_OPF_VIEW))
            root[in->res[0]] = storage_root(root, in->args[0]);
        for (int a = 0; a < in->nargs; a++) {
            int r = storage_root(root, in->args[a]), end = in->op == IR_OP_OUTPUT ? f->ninstrs : ir_reads_until(f, i);
            if (end > last[r])
                last[r] = end;
        }
    }
}

/* The blocks first-fit makes, as a placement by size needs them: each one's instructions
 * [start, end] (start -1: an input, placed before the call; end ninstrs: live to its end) and
 * bytes, and per value its block (-1: none). */
typedef struct {
    int *block_of;
    int (*span)[2];
    int64_t *size;
    int n, cap;
} block_log;

static void log_alloc(block_log *l, int value, int start, int64_t size)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->span = realloc(l->span, sizeof *l->span * (size_t)l->cap);
        l->size = realloc(l->size, sizeof *l->size * (size_t)l->cap);
    }
    l->span[l->n][0] = start;
    l->span[l->n][1] = INT32_MAX; /* until freed */
    l->size[l->n] = size;
    l->block_of[value] = l->n++;
}

typedef struct {
    int64_t size;
    int start, block;
} sized_block;

static int by_size(const void *pa, const void *pb)
{
    const sized_block *a = pa, *b = pb;
    if (a->size != b->size)
        return a->size > b->size ? -1 : 1;
    return a->start != b->start ? (a->start < b->start ? -1 : 1) : a->block - b->block;
}

/* Places l's blocks largest first (ties: the earlier first), each at the lowest offset where it
 * overlaps no block placed before it that is live at the same time; offsets into at, the arena's
 * bytes returned. */
static int64_t place_by_size(const block_log *l, int64_t *at)
{
    sized_block *order = malloc(sizeof *order * (size_t)(l->n ? l->n : 1));
    int *clash = malloc(sizeof(int) * (size_t)(l->n ? l->n : 1));
    for (int k = 0; k < l->n; k++)
        order[k] = (sized_block){l->size[k], l->span[k][0], k};
    qsort(order, (size_t)l->n, sizeof *order, by_size);
    int64_t high = 0;
    for (int k = 0; k < l->n; k++) {
        int b = order[k].block, nclash = 0;
        for (int j = 0; j < k; j++) { /* the placed blocks live beside b, by offset (insertion) */
            int c = order[j].block;
            if (l->span[c][0] > l->span[b][1] || l->span[b][0] > l->span[c][1])
                continue;
            int pos = nclash++;
            for (; pos > 0 && at[clash[pos - 1]] > at[c]; pos--)
                clash[pos] = clash[pos - 1];
            clash[pos] = c;
        }
        int64_t off = 0;
        for (int j = 0; j < nclash && at[clash[j]] < off + l->size[b]; j++)
            off = at[clash[j]] + l->size[clash[j]] > off ? at[clash[j]] + l->size[clash[j]] : off;
        at[b] = off;
        high = off + l->size[b] > high ? off + l->size[b] : high;
    }
    free(order);
    free(clash);
    return high;
}

/* f's arena values at the offsets of a placement by size when its arena is smaller than
 * first-fit's `high_water` by 1% or more (less is not worth a plan that reads differently);
 * returns the arena's bytes. */
static int64_t repack(ir_func *f, const block_log *l, int64_t high_water)
{
    int64_t *at = malloc(sizeof(int64_t) * (size_t)(l->n ? l->n : 1)), high = place_by_size(l, at);
    bool smaller = high <= high_water - high_water / 100;
    for (int v = 0; smaller && v < f->nvals; v++)
        if (f->vals[v].mem == IR_MEM_ARENA && l->block_of[v] >= 0)
            f->vals[v].offset = at[l->block_of[v]];
    free(at);
    return smaller ? high : high_water;
}

/* Places f's activations (first-fit; by_size: then by size, where that is smaller). */
static void plan_func(ir_func *f, bool by_size)
{
    int n = f->nvals;
    int *root = malloc(sizeof(int) * (size_t)(n ? n : 1));
    int *last = malloc(sizeof(int) * (size_t)(n ? n : 1));
    lifetimes(f, root, last);
    /* Ends grouped by instruction, so freeing is linear overall. */
    int *end_head = malloc(sizeof(int) * (size_t)(f->ninstrs + 1)), *end_next = malloc(sizeof(int) * (size_t)(n ? n : 1));
    for (int i = 0; i <= f->ninstrs; i++)
        end_head[i] = -1;
    arena a = {0};
    block_log log = {.block_of = malloc(sizeof(int) * (size_t)(n ? n : 1))};
    for (int v = 0; v < n; v++)
        log.block_of[v] = -1;
    /* Inputs first, wherever they stand: the host writes them all before the call, so none may
     * share bytes with a value the function makes before reading it. */
    for (int i = 0; i < f->ninstrs; i++)
        if (f->instrs[i].op == IR_OP_INPUT) {
            ir_value *v = &f->vals[f->instrs[i].res[0]];
            v->mem = IR_MEM_ARENA;
            v->offset = arena_alloc(&a, arena_size(v), f->instrs[i].res[0]);
            log_alloc(&log, f->instrs[i].res[0], -1, arena_size(v));
        }
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (in->op == IR_OP_INPUT)
            continue; /* placed above, live to the end */
        int donor = inplace_donor(f, in, i, root, last, &a);
        for (int r = 0; r < in->nres; r++) {
            ir_value *v = &f->vals[in->res[r]];
            if (in->op == IR_OP_GLOBAL) {
                v->mem = IR_MEM_GLOBAL;
                continue;
            }
            if (ir_op_has(in->op, IR_OPF_VIEW)) {
                v->mem = IR_MEM_VIEW;
                continue;
            }
            v->mem = IR_MEM_ARENA;
            if (r == 0 && donor >= 0) {
                block *b = arena_find(&a, donor);
                b->value = in->res[0]; /* the donor's bytes, and its block, pass to the result */
                v->offset = b->offset;
                log.block_of[in->res[0]] = log.block_of[donor];
            } else {
                v->offset = arena_alloc(&a, arena_size(v), in->res[r]);
                log_alloc(&log, in->res[r], i, arena_size(v));
            }
            int e = last[in->res[r]];
            end_next[in->res[r]] = end_head[e];
            end_head[e] = in->res[r];
        }
        /* Operands dying here are freed after the results are placed (the donor's block is the
         * result's now): apart from the donor, kernels never run in place. */
        for (int v = end_head[i]; v >= 0; v = end_next[v])
            if (v != donor) {
                arena_free(&a, v);
                log.span[log.block_of[v]][1] = i;
            }
    }
    int64_t bytes = by_size ? repack(f, &log, a.high_water) : a.high_water;
    f->arena_bytes = bytes ? bytes : ARENA_ALIGN;
    free(log.block_of);
    free(log.span);
    free(log.size);
    free(a.b);
    free(root);
    free(last);
    free(end_head);
    free(end_next);
}

/* The device's arena is its largest function's (the host optimizer's is host memory): that
 * function placed again by size, then the next largest, while that lowers it (each once). */
static void place_largest_by_size(ir_module *m)
{
    bool *tried = calloc((size_t)m->nfuncs + 1, sizeof(bool));
    for (;;) {
        int top = -1;
        for (int i = 0; i < m->nfuncs; i++)
            if (m->funcs[i]->kind != IR_FUNC_HOST_OPTIMIZER &&
                (top < 0 || m->funcs[i]->arena_bytes > m->funcs[top]->arena_bytes))
                top = i;
        if (top < 0 || tried[top])
            break;
        int64_t before = m->funcs[top]->arena_bytes;
        tried[top] = true;
        plan_func(m->funcs[top], true);
        if (m->funcs[top]->arena_bytes == before)
            break;
    }
    free(tried);
}

/* The bytes of the largest reduce_scatter_seq operand with one block per rank (split by batch
 * rows, or one row): the exchange buffer its reduce-scatters need on the copy lane, after the
 * arena (the others go out as one exchange per o-row: NCCL's kernel). */
static size_t seq_exchange_bytes(const ir_module *m)
{
    size_t most = 0;
    for (int f = 0; f < m->nfuncs; f++)
        for (int i = 0; i < m->funcs[f]->ninstrs; i++) {
            const ir_instr *in = &m->funcs[f]->instrs[i];
            if (in->op != IR_OP_REDUCE_SCATTER_SEQ)
                continue;
            const ir_type *x = &m->funcs[f]->vals[in->args[0]].type;
            bool one_block = ir_seq_orows(in, x) == 1;
            most = one_block && ir_bytes(x) > most ? ir_bytes(x) : most;
        }
    return ir_global_span(most);
}

/* The bytes (ir_global_span each) of the largest gradient bucket reduced beside the backward
 * (all_reduce_inplace on the comm stream) over an axis whose copy lane holds the global slab, not
 * the arena (an axis without copy-lane collectives): the exchange buffer after the slab. 0: no
 * such bucket. */
static size_t bucket_exchange_bytes(const ir_module *m)
{
    bool activations[IR_NUM_AXES];
    for (int a = 0; a < IR_NUM_AXES; a++)
        activations[a] = ir_has_collective(m, (ir_axis)a, IR_OPF_COPY_LANE);
    size_t most = 0;
    for (int f = 0; f < m->nfuncs; f++)
        for (int i = 0; i < m->funcs[f]->ninstrs; i++) {
            const ir_instr *in = &m->funcs[f]->instrs[i];
            if (in->op != IR_OP_ALL_REDUCE_INPLACE || !ir_on_comm_stream(in) ||
                activations[(int)in->attr[IR_ATTR_AXIS]])
                continue;
            size_t bytes = 0;
            for (int a = 0; a < in->nargs; a++)
                bytes += ir_global_span(ir_bytes(&m->funcs[f]->vals[in->args[a]].type));
            most = bytes > most ? bytes : most;
        }
    return most;
}

bool pass_memory_plan(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    bool copy_lane = ir_cfg_bool(m, IR_CFG_COMM_COPY_LANE);
    if (copy_lane && !opts->target->copy_engine_collectives) {
        snprintf(err, errlen, "config comm_copy_lane = 1, but the %s target's copy engines do not serve collectives "
                              "(compile with --comm-lanes side or none, or for a target whose do)",
                 opts->target->name);
        return false;
    }
    for (int i = 0; i < m->nfuncs; i++)
        plan_func(m->funcs[i], false);
    place_largest_by_size(m);
    ir_cfg_set_int(m, IR_CFG_ARENA_EXCHANGE_BYTES, copy_lane ? (long long)seq_exchange_bytes(m) : 0);
    ir_cfg_set_int(m, IR_CFG_SLAB_EXCHANGE_BYTES, copy_lane ? (long long)bucket_exchange_bytes(m) : 0);
    return true;
}

/* The arena bytes of step function f's forward values (made before the backward, which starts
 * after `output @loss`, else after its last output before the first gradient store) that the
 * backward reads. (The head's weight gradient comes before the loss under cross_entropy_chunks.) */
static int64_t saved_bytes(const ir_func *f)
{
    int n = f->nvals ? f->nvals : 1, loss = ir_find_role(f, IR_OP_OUTPUT, ir_role_of(IR_ROLE_LOSS));
    int bwd = loss >= 0 ? loss + 1 : f->ninstrs;
    for (int i = 0; loss < 0 && i < f->ninstrs && !ir_op_has(f->instrs[i].op, IR_OPF_STORES_GLOBAL); i++)
        if (f->instrs[i].op == IR_OP_OUTPUT)
            bwd = i + 1;
    int *root = malloc(sizeof(int) * (size_t)n), *last = malloc(sizeof(int) * (size_t)n);
    lifetimes(f, root, last);
    int64_t bytes = 0;
    for (int v = 0; v < f->nvals; v++)
        if (f->vals[v].mem == IR_MEM_ARENA && root[v] < 0 && f->vals[v].def < bwd && last[v] >= bwd &&
            f->instrs[f->vals[v].def].op != IR_OP_INPUT)
            bytes += (int64_t)ir_bytes(&f->vals[v].type);
    free(root);
    free(last);
    return bytes;
}

/* The step's all_to_all_v receive buffers, by how their rows were sized (ops.def: capacity). */
static void a2a_buffers(const ir_func *f, mcc_memory_breakdown *b)
{
    for (int k = 0; k < f->ninstrs; k++) {
        const ir_instr *in = &f->instrs[k];
        if (in->op != IR_OP_ALL_TO_ALL_V)
            continue;
        int64_t bytes = (int64_t)ir_bytes(ir_vtype(f, in->res[0]));
        b->a2a_count++;
        b->a2a_bytes += bytes;
        double capacity = in->attr[IR_ATTR_ALL_TO_ALL_V_CAPACITY];
        if (capacity > 0) {
            b->a2a_capacity_bytes += bytes;
            b->a2a_capacity = capacity > b->a2a_capacity ? capacity : b->a2a_capacity;
        }
    }
}

/* The bytes f's all_to_all_v send from a rank with balanced routing: each as many rows as it
 * receives, at most its x's rows and its room's (a dispatch the routed or kept rows, a combine them
 * back), x's row bytes each; *count the exchanges. */
static double a2a_sent_bytes(const ir_func *f, int *count)
{
    double bytes = 0;
    for (int k = 0; k < f->ninstrs; k++) {
        const ir_instr *in = &f->instrs[k];
        if (in->op != IR_OP_ALL_TO_ALL_V)
            continue;
        const ir_type *x = ir_vtype(f, in->args[0]), *r = ir_vtype(f, in->res[0]);
        int64_t rows = x->dims[0] < r->dims[0] ? x->dims[0] : r->dims[0];
        bytes += (double)rows * (double)ir_bytes(x) / (double)x->dims[0];
        ++*count;
    }
    return bytes;
}

/* sent[axis] += the bytes a rank sends over each mesh axis in function f's collectives, `times`
 * a step, by ring algorithms (n the axis's ranks, S the operand's bytes): an all-reduce 2 (n-1)/n S,
 * a gather (n-1) S of its slice, a reduce-scatter (n-1) S of its block, ring_shift S, cp_all_to_all
 * (n-1)/n S, all_to_all_v (n-1)/n of what it sends (a2a_sent_bytes: routing balanced). */
static void comm_sent_bytes(const ir_module *m, const ir_func *f, double times, double *sent)
{
    ir_mesh mesh = ir_module_mesh(m);
    for (int k = 0; k < f->ninstrs; k++) {
        const ir_instr *in = &f->instrs[k];
        if (!(ir_ops[in->op].flags & IR_OPF_COLLECTIVE))
            continue;
        int axis = (int)in->attr[IR_ATTR_AXIS];
        double n = mesh.degree[axis], x = (double)ir_bytes(ir_vtype(f, in->args[0])), bytes = 0;
        int count = 0;
        switch (in->op) {
        case IR_OP_ALL_REDUCE: bytes = 2 * (n - 1) / n * x; break;
        case IR_OP_ALL_REDUCE_INPLACE:
            for (int a = 0; a < in->nargs; a++)
                bytes += 2 * (n - 1) / n * (double)ir_bytes(ir_vtype(f, in->args[a]));
            break;
        case IR_OP_ALL_GATHER_SEQ:
        case IR_OP_ALL_GATHER:
        case IR_OP_ALL_GATHER_MATMUL: bytes = (n - 1) * x; break;
        case IR_OP_REDUCE_SCATTER_SEQ:
        case IR_OP_REDUCE_SCATTER: bytes = (n - 1) * (double)ir_bytes(ir_vtype(f, in->res[0])); break;
        case IR_OP_MATMUL_REDUCE_SCATTER:
        case IR_OP_MATMUL_ADD_REDUCE_SCATTER: /* the rank's block is the last result */
            bytes = (n - 1) * (double)ir_bytes(ir_vtype(f, in->res[ir_ops[in->op].nres - 1]));
            break;
        case IR_OP_RING_SHIFT: bytes = x; break;
        case IR_OP_CP_ALL_TO_ALL: bytes = (n - 1) / n * x; break;
        case IR_OP_ALL_TO_ALL_V: {
            ir_func one = *f;
            one.instrs = (ir_instr *)in, one.ninstrs = 1;
            bytes = (n - 1) / n * a2a_sent_bytes(&one, &count);
            break;
        }
        default: bytes = x; break;
        }
        sent[axis] += times * bytes;
    }
}

/* The bytes of the tensor a schedule's send step sends: its function's output of the step's role. */
static double step_send_bytes(const ir_module *m, const ir_sched_step *s)
{
    const ir_func *f = m->funcs[s->func];
    int k = ir_find_role(f, IR_OP_OUTPUT, s->role);
    return k < 0 ? 0 : (double)ir_bytes(ir_vtype(f, f->instrs[k].args[0]));
}

/* The layers whose parameters m holds as ranges into buf: "layers 0, 3-4, multi-token depth 0" (the
 * depths are the layers from num_layers on: frontend/model.c's multi-token prediction). */
static void held_layers(const ir_module *m, char *buf, size_t n)
{
    int most = -1, decoder = (int)ir_cfg_int(m, IR_CFG_NUM_LAYERS);
    for (int i = 0; i < m->nglobals; i++)
        if (m->globals[i].kind == IR_GLOBAL_PARAM && m->globals[i].layer > most) most = m->globals[i].layer;
    bool *held = calloc((size_t)most + 2, sizeof(bool));
    size_t used = 0;
    buf[0] = 0;
    if (!held) return;
    for (int i = 0; i < m->nglobals; i++)
        if (m->globals[i].kind == IR_GLOBAL_PARAM && m->globals[i].layer >= 0) held[m->globals[i].layer] = true;
    for (int depth = 0; depth < 2; depth++) {
        int from = depth ? decoder : 0, to = depth ? most : (decoder - 1 < most ? decoder - 1 : most);
        for (int l = from, said = 0; l <= to; l++) {
            if (!held[l]) continue;
            int end = l;
            while (end < to && held[end + 1]) end++;
            used += (size_t)snprintf(buf + used, used < n ? n - used : 0, "%s%s%d", used ? ", " : "",
                                     said ? "" : depth ? "multi-token depth " : "layers ", l - from);
            if (end > l) used += (size_t)snprintf(buf + used, used < n ? n - used : 0, "-%d", end - from);
            said = 1, l = end;
        }
    }
    free(held);
}

mcc_memory_breakdown mcc_memory_of(const ir_module *m)
{
    mcc_memory_breakdown b = {.stage = (int)ir_cfg_int(m, IR_CFG_PIPELINE_STAGE),
                              .stages = (int)ir_cfg_int(m, IR_CFG_PIPELINE_MODEL_PARALLEL_SIZE)};
    for (int i = 0; i < m->nglobals; i++) {
        int64_t bytes = (int64_t)ir_global_slab_bytes(m, i); /* as the slab holds it */
        if (m->globals[i].host) { /* the host slab's (runtime/program.c) */
            b.host += bytes;
            continue;
        }
        switch (m->globals[i].kind) {
        case IR_GLOBAL_PARAM:
        case IR_GLOBAL_COPY:
        case IR_GLOBAL_REMAINDER:
        case IR_GLOBAL_MASTER_SHARD: b.params += bytes; break;
        case IR_GLOBAL_GRAD:
        case IR_GLOBAL_GRAD_SHARD: b.grads += bytes; break;
        case IR_GLOBAL_STASH:
            b.stash += bytes;
            b.in_flight = m->globals[i].slots > b.in_flight ? m->globals[i].slots : b.in_flight;
            break;
        default: b.optimizer_state += bytes; break;
        }
    }
    for (int i = 0; i < m->nfuncs; i++) {
        const ir_func *f = m->funcs[i];
        if (f->kind == IR_FUNC_HOST_OPTIMIZER) /* its arena and staging: host memory */
            b.host += f->arena_bytes + ir_host_staging_bytes(m, f);
        else if (f->arena_bytes > b.activations)
            b.activations = f->arena_bytes;
        if (ir_func_per_micro_batch(f->kind)) {
            for (int k = 0; k < f->ninstrs; k++)
                b.step_flops += 2 * ir_work_macs(f, &f->instrs[k]) * (double)ir_cfg_int(m, IR_CFG_ACCUM_STEPS);
            b.a2a_sent_bytes += a2a_sent_bytes(f, &b.a2a_exchanges);
            comm_sent_bytes(m, f, (double)ir_cfg_int(m, IR_CFG_ACCUM_STEPS), b.sent_bytes);
            double one[IR_NUM_AXES] = {0};
            comm_sent_bytes(m, f, 1, one);
            for (int a = 0; a < IR_NUM_AXES; a++) b.sent_micro_batch_bytes += one[a];
        } else if (f->kind == IR_FUNC_TIED_SEND || f->kind == IR_FUNC_TIED_SUM || f->kind == IR_FUNC_REDUCE ||
                   f->kind == IR_FUNC_GRAD_NORM || f->kind == IR_FUNC_OPTIMIZER || f->kind == IR_FUNC_PARAM_SYNC)
            comm_sent_bytes(m, f, 1, b.sent_bytes); /* once a step */
        if (f->kind == IR_FUNC_STEP)
            b.saved = saved_bytes(f);
        if (f->kind == IR_FUNC_STEP)
            a2a_buffers(f, &b);
    }
    /* the pipeline's sends: each micro-batch's boundary activations or gradients, and the tied
     * gradients once a step (the train program lists every one) */
    const ir_program *train = &m->progs[IR_PROG_TRAIN];
    for (int s = 0; s < train->nsteps; s++)
        if (train->steps[s].op == IR_STEP_SEND)
            b.sent_bytes[IR_AXIS_PP] += step_send_bytes(m, &train->steps[s]);
    b.recompute_flops = ir_cfg_num(m, IR_CFG_RECOMPUTE_FLOPS);
    held_layers(m, b.layers, sizeof b.layers);
    b.ep = (int)ir_cfg_int(m, IR_CFG_EXPERT_MODEL_PARALLEL_SIZE);
    b.comm_buffers = ir_cfg_int(m, IR_CFG_ARENA_EXCHANGE_BYTES) + ir_cfg_int(m, IR_CFG_SLAB_EXCHANGE_BYTES);
    return b;
}

int64_t mcc_memory_total(const mcc_memory_breakdown *b)
{
    return b->params + b->grads + b->optimizer_state + b->activations + b->stash + b->comm_buffers;
}

void mcc_memory_print(const mcc_memory_breakdown *b, FILE *out)
{
    const double gib = 1024.0 * 1024.0 * 1024.0;
    int64_t total = mcc_memory_total(b);
    if (b->stages > 1)
        fprintf(out, "memory per rank of pipeline stage %d of %d%s%s%s:\n", b->stage, b->stages, *b->layers ? " (" : "",
                b->layers, *b->layers ? ")" : "");
    else
        fprintf(out, "memory per rank (rank 0):\n");
    fprintf(out, "  parameters        %10.3f GiB\n", b->params / gib);
    fprintf(out, "  gradients         %10.3f GiB\n", b->grads / gib);
    fprintf(out, "  optimizer state   %10.3f GiB\n", b->optimizer_state / gib);
    fprintf(out, "  peak activations  %10.3f GiB\n", b->activations / gib);
    if (b->stages <= 1)
        fprintf(out, "  saved for the backward %5.3f GiB  (%lld bytes a micro-batch, of the peak activations: what "
                     "recompute shrinks)\n", b->saved / gib, (long long)b->saved);
    if (b->stages > 1)
        fprintf(out, "  stashed for the backward %5.3f GiB  (%d micro-batch%s in flight at the schedule's peak)\n",
                b->stash / gib, b->in_flight, b->in_flight == 1 ? "" : "es");
    if (b->a2a_count && !b->a2a_capacity_bytes)
        fprintf(out, "  all-to-all buffers %9.3f GiB  (%d expert dispatch/combine receive buffers, of the peak "
                     "activations: sized by the exact worst case, every row the ep ranks could send)\n",
                b->a2a_bytes / gib, b->a2a_count);
    else if (b->a2a_count)
        fprintf(out, "  all-to-all buffers %9.3f GiB  (%d expert dispatch/combine receive buffers, of the peak "
                     "activations: %.3f GiB sized by the capacity factor, an expert's capacity %g rows of each ep "
                     "rank, the rest by the exact worst case)\n",
                b->a2a_bytes / gib, b->a2a_count, b->a2a_capacity_bytes / gib, b->a2a_capacity);
    if (b->comm_buffers)
        fprintf(out, "  exchange buffers  %10.3f GiB  (collectives on the copy engines: --comm-lanes copy)\n",
                b->comm_buffers / gib);
    fprintf(out, "  total             %10.3f GiB  (%lld bytes: train_rank's plan memory)\n", total / gib,
            (long long)total);
    if (b->host)
        fprintf(out, "  host memory       %10.3f GiB  (%lld bytes, page-locked: the offloaded fp32 parameters, Adam state, "
                "the staging its gradients stream down and conversions go up through, --optimizer-cpu-offload)\n", b->host / gib, (long long)b->host);
}

/* The arena values live across instruction i (made at or before it, read after it). */
static bool live_at(const ir_func *f, const int *last, int v, int i)
{
    return f->vals[v].mem == IR_MEM_ARENA && f->vals[v].def <= i && (last[v] > i || f->vals[v].def == i);
}

/* bytes as GiB, MiB or KiB, whichever reads best */
static const char *human_bytes(double bytes, char *buf, size_t len)
{
    const char *unit[] = {"KiB", "MiB", "GiB"};
    int u = bytes >= 1 << 30 ? 2 : bytes >= 1 << 20 ? 1 : 0;
    snprintf(buf, len, "%.3f %s", bytes / (double)(1ull << (10 * (u + 1))), unit[u]);
    return buf;
}

void mcc_memory_report(const ir_module *m, FILE *out)
{
    const ir_func *f = NULL;
    for (int k = 0; k < m->nfuncs; k++)
        if (!f || m->funcs[k]->arena_bytes > f->arena_bytes)
            f = m->funcs[k];
    if (!f || !f->ninstrs)
        return;
    int n = f->nvals ? f->nvals : 1, peak = 0;
    int *root = malloc(sizeof(int) * (size_t)n), *last = malloc(sizeof(int) * (size_t)n);
    lifetimes(f, root, last);
    /* live_at as intervals [def, max(def, last - 1)]: their bytes start and stop in one sweep */
    int64_t *delta = calloc((size_t)f->ninstrs + 1, sizeof(int64_t)), best = -1, live = 0;
    for (int v = 0; v < f->nvals; v++)
        if (f->vals[v].mem == IR_MEM_ARENA) {
            int def = f->vals[v].def, stop = last[v] > def ? last[v] : def + 1;
            delta[def] += (int64_t)ir_bytes(&f->vals[v].type);
            delta[stop < f->ninstrs ? stop : f->ninstrs] -= (int64_t)ir_bytes(&f->vals[v].type);
        }
    for (int i = 0; i < f->ninstrs; i++) {
        live += delta[i];
        if (live > best)
            best = live, peak = i;
    }
    free(delta);
    double by_op[IR_NUM_OPS] = {0};
    int count[IR_NUM_OPS] = {0};
    for (int v = 0; v < f->nvals; v++)
        if (live_at(f, last, v, peak)) {
            ir_op op = f->instrs[f->vals[v].def].op;
            by_op[op] += (double)ir_bytes(&f->vals[v].type);
            count[op]++;
        }
    char live_text[32], arena[32], bytes[32];
    fprintf(out, "peak activations: %s live in %s at instruction %d (%s), of its %s arena; by the op that made them:\n",
            human_bytes((double)best, live_text, sizeof live_text), f->name, peak, ir_ops[f->instrs[peak].op].name,
            human_bytes((double)f->arena_bytes, arena, sizeof arena));
    for (int shown = 0; shown < 10; shown++) {
        int top = -1;
        for (int op = 0; op < IR_NUM_OPS; op++)
            if (by_op[op] > 0 && (top < 0 || by_op[op] > by_op[top]))
                top = op;
        if (top < 0)
            break;
        fprintf(out, "  %-24s %12s  (%d values)\n", ir_ops[top].name, human_bytes(by_op[top], bytes, sizeof bytes),
                count[top]);
        by_op[top] = 0;
    }
    free(root);
    free(last);
}

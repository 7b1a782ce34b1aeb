/* program.c — loading a plan onto a device: globals and arenas allocated by the memory plan,
 * every instruction's operands bound, parameters initialised; running a function is the
 * device's (one kernel per instruction on the CPU, a replayed CUDA graph on the GPU). */
#include "program.h"
#include "common/cli.h"
#include "runtime/bf16.h"
#include "runtime/trace.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const rt_device_names[RT_NUM_DEVICES] = {"cpu", "cuda"}; /* ORDER RT_DEVICE */

static void *xcalloc(size_t n, size_t size, const char *what)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "train_rank: out of host memory allocating %s (%zu bytes)\n", what, n * size);
        exit(1);
    }
    return p;
}

/* Binds every value to its buffer and every instruction to its operand/result buffers; a stash
 * global to its buffer slot[its span]. */
static void bind_func(rt_program *p, rt_func_exec *x, ir_func *f, char *arena, const int *slot)
{
    x->f = f;
    x->arena = arena;
    x->vptr = xcalloc((size_t)f->nvals, sizeof(void *), "value table");
    x->calls = xcalloc((size_t)f->ninstrs, sizeof(rt_kernel_call), "kernel table");
    size_t slots = 0;
    for (int i = 0; i < f->ninstrs; i++)
        slots += (size_t)(f->instrs[i].nargs + f->instrs[i].nres);
    x->ptr_pool = xcalloc(slots, sizeof(void *), "kernel operands");
    x->type_pool = xcalloc(slots, sizeof(ir_type *), "kernel operand types");
    size_t at = 0;
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        for (int r = 0; r < in->nres; r++) {
            int v = in->res[r];
            switch (f->vals[v].mem) {
            case IR_MEM_GLOBAL: {
                int g = in->global;
                const ir_global *gl = &p->m->globals[g];
                size_t at = gl->kind == IR_GLOBAL_STASH ? (size_t)slot[gl->span] * ir_global_span(ir_bytes(&gl->type)) : 0;
                x->vptr[v] = (char *)p->globals[g] + at;
                break;
            }
            case IR_MEM_VIEW: x->vptr[v] = (char *)x->vptr[in->args[0]] + ir_view_offset(f, in); break;
            default: x->vptr[v] = x->arena + f->vals[v].offset; break;
            }
        }
        rt_kernel_call *c = &x->calls[i];
        *c = (rt_kernel_call){.in = in, .nargs = in->nargs, .nres = in->nres};
        void **ptrs = &x->ptr_pool[at];
        const ir_type **types = &x->type_pool[at];
        for (int a = 0; a < in->nargs; a++) {
            ptrs[a] = x->vptr[in->args[a]];
            types[a] = &f->vals[in->args[a]].type;
        }
        for (int r = 0; r < in->nres; r++) {
            ptrs[in->nargs + r] = x->vptr[in->res[r]];
            types[in->nargs + r] = &f->vals[in->res[r]].type;
        }
        c->args = ptrs;
        c->arg_types = types;
        c->res = ptrs + in->nargs;
        c->res_types = types + in->nargs;
        at += (size_t)(in->nargs + in->nres);
    }
}

/* An exchange buffer's bytes, as the memory plan wrote them into the config; false with the key
 * and the fix in err for a negative or malformed value (a hand-edited plan). */
static bool config_bytes(const ir_module *m, ir_cfg key, size_t *bytes, char *err, size_t errlen)
{
    long long v;
    char why[256];
    if (!cli_parse_int(ir_cfgs[key].key, ir_cfg_value(m, key), 0, LLONG_MAX, &v, why, sizeof why)) {
        snprintf(err, errlen, "config value %s (the memory plan writes it: recompile the plan)", why);
        return false;
    }
    *bytes = (size_t)v;
    return true;
}

void rt_program_lanes(const ir_module *m, bool *side, bool *copy)
{
    *side = ir_cfg_bool(m, IR_CFG_COMM_SIDE_LANE);
    *copy = ir_cfg_bool(m, IR_CFG_COMM_COPY_LANE);
}

size_t rt_program_plan_bytes(const rt_program *p)
{
    return p->global_slab_bytes + p->bucket_exchange_bytes + p->arena_bytes + p->exchange_bytes;
}

/* The module of world_rank's pipeline stage (its coordinate along pp) of the plan's text. */
static ir_module *parse_own_stage(const char *plan_text, long long world_rank, char *err, size_t errlen)
{
    ir_module *m = ir_parse_stage(plan_text, 0, err, errlen);
    if (!m || ir_text_stages(plan_text) == 1)
        return m;
    int coord[IR_NUM_AXES];
    ir_mesh mesh = ir_module_mesh(m);
    ir_mesh_coords(&mesh, world_rank, coord);
    if (coord[IR_AXIS_PP] == 0)
        return m;
    ir_module_free(m);
    return ir_parse_stage(plan_text, coord[IR_AXIS_PP], err, errlen);
}

/* Per span, the buffers a call of f may name (its stash globals' of that span; 1 for a span it
 * touches none of) into slots; their product, the bindings f may run with. */
static int func_slots(const ir_module *m, const ir_func *f, int *slots)
{
    for (int k = 0; k < IR_NUM_STASH_SPANS; k++)
        slots[k] = 1;
    for (int i = 0; i < f->ninstrs; i++) {
        int g = f->instrs[i].global;
        const ir_global *gl = g >= 0 ? &m->globals[g] : NULL;
        if (gl && gl->kind == IR_GLOBAL_STASH && gl->slots > slots[gl->span])
            slots[gl->span] = gl->slots;
    }
    int n = 1;
    for (int k = 0; k < IR_NUM_STASH_SPANS; k++)
        n *= slots[k];
    return n;
}

/* Whether function func runs on the host (p->host: host_optimizer.c), in host memory. */
static bool host_func(const rt_program *p, int func) { return p->m->funcs[func]->kind == IR_FUNC_HOST_OPTIMIZER; }

rt_program *rt_program_load(const char *plan_text, const rt_device *dev, const void *image, long long world_rank,
                            char *err, size_t errlen)
{
    ir_module *m = parse_own_stage(plan_text, world_rank, err, errlen);
    if (!m)
        return NULL;
    size_t bucket_exchange, exchange; /* the memory plan's, as mcc compile reported them */
    if (!ir_plan_version_ok(m, err, errlen) || !ir_verify(m, err, errlen) ||
        !config_bytes(m, IR_CFG_SLAB_EXCHANGE_BYTES, &bucket_exchange, err, errlen) ||
        !config_bytes(m, IR_CFG_ARENA_EXCHANGE_BYTES, &exchange, err, errlen)) {
        ir_module_free(m);
        return NULL;
    }
    rt_program *p = xcalloc(1, sizeof(*p), "program");
    p->m = m;
    ir_mesh mesh = ir_module_mesh(m);
    ir_mesh_coords(&mesh, world_rank, p->coord);
    ir_resolve_ranks(m, p->coord);
    p->dev = dev;
    p->nslots = xcalloc((size_t)m->nfuncs, sizeof(int), "stash slots"); /* the device sizes its graphs by them */
    p->span_slots = xcalloc((size_t)m->nfuncs * IR_NUM_STASH_SPANS, sizeof(int), "stash slots");
    for (int i = 0; i < m->nfuncs; i++)
        p->nslots[i] = func_slots(m, m->funcs[i], &p->span_slots[i * IR_NUM_STASH_SPANS]);
    dev->open(p, image);
    /* One allocation holds every global, in declaration order, each at a 256-byte boundary: the
     * gradients of a bucket (data_parallel.c) are then one contiguous span that one collective
     * reduces, padding included (zeroed by alloc, and never written). The host globals
     * (--optimizer-cpu-offload) are a second such slab, in the host's page-locked memory. */
    p->globals = xcalloc((size_t)m->nglobals, sizeof(void *), "globals");
    size_t slab = 0, host_slab = 0;
    for (int i = 0; i < m->nglobals; i++)
        *(m->globals[i].host ? &host_slab : &slab) += ir_global_slab_bytes(m, i);
    /* With the copy lane (the plan's comm_copy_lane: mcc compile --comm-lanes), gradient buckets
     * reduced beside the backward go out on the copy engines when the slab is window memory
     * (rt_parallel_init registers it), with their exchange buffer after it; so do tensor
     * parallelism's collectives, in the arena. */
    bool side_lane, copy_lane;
    rt_program_lanes(m, &side_lane, &copy_lane);
    copy_lane &= dev->alloc_window != NULL;
    p->bucket_exchange_bytes = bucket_exchange;
    p->global_slab =
        (copy_lane && p->bucket_exchange_bytes ? dev->alloc_window : dev->alloc)(p, slab + p->bucket_exchange_bytes);
    p->global_slab_bytes = slab;
    int64_t host_arena = 0, staging = 0; /* the host function's arena (its inputs), then its staging */
    for (int i = 0; i < m->nfuncs; i++)
        if (host_func(p, i) && m->funcs[i]->arena_bytes + ir_host_staging_bytes(m, m->funcs[i]) > host_arena + staging) {
            host_arena = m->funcs[i]->arena_bytes;
            staging = ir_host_staging_bytes(m, m->funcs[i]);
            p->host_stage = ir_host_staging_of(m, m->funcs[i]);
        }
    p->host_bytes = host_slab + (size_t)host_arena + (size_t)staging;
    if (p->host_bytes) {
        p->host_slab = dev->alloc_host ? dev->alloc_host(p->host_bytes) : xcalloc(1, p->host_bytes, "host globals");
        p->host_arena = (char *)p->host_slab + host_slab;
        p->host_staging = p->host_arena + host_arena;
        p->host_staging_bytes = (size_t)staging;
    }
    size_t slab_offset = 0, host_offset = 0;
    for (int i = 0; i < m->nglobals; i++) {
        bool host = m->globals[i].host;
        p->globals[i] = (char *)(host ? p->host_slab : p->global_slab) + (host ? host_offset : slab_offset);
        *(host ? &host_offset : &slab_offset) += ir_global_slab_bytes(m, i);
    }
    /* Functions run one at a time and hand nothing over through their arenas (inputs are set
     * before a call, outputs read after it), so they share one arena: the largest. */
    int64_t arena_bytes = 0;
    for (int i = 0; i < m->nfuncs; i++)
        if (!host_func(p, i))
            arena_bytes = m->funcs[i]->arena_bytes > arena_bytes ? m->funcs[i]->arena_bytes : arena_bytes;
    /* Under tensor parallelism the arena holds the sequence-parallel collectives' buffers: in
     * window memory, the copy engines can move them, and the reduce-scatters' exchanges need a
     * buffer there too, after the arena. */
    bool window = copy_lane && ir_cfg_int(m, IR_CFG_TENSOR_MODEL_PARALLEL_SIZE) > 1;
    p->exchange_bytes = exchange;
    p->arena = (window ? dev->alloc_window : dev->alloc)(p, (size_t)arena_bytes + p->exchange_bytes);
    p->arena_bytes = (size_t)arena_bytes;
    p->funcs = xcalloc((size_t)m->nfuncs, sizeof(rt_func_exec), "functions");
    p->slot_execs = xcalloc((size_t)m->nfuncs, sizeof(rt_func_exec *), "stash slots");
    p->bound_slot = xcalloc((size_t)m->nfuncs, sizeof(int), "stash slots");
    for (int i = 0; i < m->nfuncs; i++) {
        int slots = p->nslots[i];
        p->slot_execs[i] = xcalloc((size_t)slots, sizeof(rt_func_exec), "stash slots");
        char *arena = host_func(p, i) ? p->host_arena : p->arena;
        bind_func(p, &p->slot_execs[i][0], m->funcs[i], arena, (int[IR_NUM_STASH_SPANS]){0});
        p->funcs[i] = p->slot_execs[i][0];
    }
    return p;
}

void rt_program_free(rt_program *p)
{
    if (!p)
        return;
    if (p->host)
        p->host->close(p);
    for (int i = 0; i < p->m->nfuncs; i++) {
        for (int k = 0; k < p->nslots[i]; k++) {
            rt_func_exec *x = &p->slot_execs[i][k];
            free(x->vptr);
            free(x->calls);
            free(x->ptr_pool);
            free(x->type_pool);
        }
        free(p->slot_execs[i]);
    }
    free(p->slot_execs);
    free(p->bound_slot);
    free(p->nslots);
    free(p->span_slots);
    p->dev->free(p, p->global_slab);
    p->dev->free(p, p->arena);
    if (p->host_slab)
        (p->dev->free_host ? p->dev->free_host : free)(p->host_slab);
    p->dev->close(p);
    free(p->funcs);
    free(p->globals);
    ir_module_free(p->m);
    free(p);
}

/* --- parameter initialisation: counter-based, so independent of layout and order --- */

uint64_t rt_splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Where parameter g's (or its ZeRO block's) local elements sit in its whole tensor, from its layout
 * record and this rank's coordinates: a level per split (ir_layout_index's steps), at most
 * RT_SHARD_LEVELS dimension or flat splits, all that parameters have. */
static rt_shard_layout shard_layout(const rt_program *p, int g)
{
    const ir_module *m = p->m;
    const ir_global *gl = &m->globals[g];
    const ir_layout *l = &gl->layout;
    rt_shard_layout at;
    for (int k = 0; k < RT_SHARD_LEVELS; k++)
        at.level[k].inner = at.level[k].mid = at.level[k].full_mid = 1, at.level[k].offset = 0;
    bool balanced = false;
    for (int k = 0; k < l->nsplits; k++)
        balanced |= l->splits[k].kind == IR_SPLIT_BALANCED;
    if (l->nsplits > RT_SHARD_LEVELS || balanced) {
        char text[128];
        fprintf(stderr, "train_rank: internal error: parameter @%s has layout [%s], but initialisation takes at most %d "
                        "dimension or flat splits (runtime/device.h rt_shard_layout)\n", gl->name,
                ir_layout_str(l, text, sizeof text), RT_SHARD_LEVELS);
        exit(1);
    }
    int degree[IR_NUM_AXES];
    ir_axis_degrees(m, degree);
    ir_type whole = ir_global_whole(m, g, degree);
    for (int k = l->nsplits - 1, at_k = 0; k >= 0; k--, at_k++) { /* from the rank's part out, as ir_layout_index */
        int d = l->splits[k].dim;
        ir_type part = ir_layout_block(l, &whole, degree, k + 1), block = ir_layout_block(l, &whole, degree, k);
        bool flat = l->splits[k].kind == IR_SPLIT_FLAT;
        int64_t inner = 1;
        for (int e = d + 1; !flat && e < part.ndim; e++)
            inner *= part.dims[e];
        at.level[at_k].inner = inner;
        at.level[at_k].mid = flat ? ir_numel(&part) : part.dims[d];
        at.level[at_k].full_mid = flat ? ir_numel(&block) : block.dims[d];
        at.level[at_k].offset = ir_layout_offset(l, &whole, degree, p->coord, k);
    }
    return at;
}

void rt_program_init_params(rt_program *p, uint64_t seed)
{
    for (int g = 0; g < p->m->nglobals; g++) {
        const ir_global *gl = &p->m->globals[g];
        if (gl->kind != IR_GLOBAL_PARAM || gl->init == IR_INIT_ZEROS)
            continue;
        uint64_t key = rt_splitmix64(seed) ^ name_hash(gl->name);
        bool normal = gl->init == IR_INIT_NORMAL;
        int held = ir_param_value(p->m, g); /* g, or ZeRO's block of it */
        rt_shard_layout at = shard_layout(p, held);
        int rem = ir_param_remainder(p->m, g); /* held as (copy, remainder): init writes the pair */
        float *w = rem >= 0 ? NULL : p->globals[held];
        uint16_t *hi = rem >= 0 ? p->globals[ir_global_companion(p->m, g, IR_GLOBAL_COPY)] : NULL;
        p->dev->init(p, w, hi, rem >= 0 ? p->globals[rem] : NULL, ir_numel(&p->m->globals[held].type), key,
                     normal ? (float)gl->std : 0.0f, normal, 1.0f, &at);
    }
    int setup = ir_func_of_kind(p->m, IR_FUNC_SETUP);
    if (setup >= 0)
        rt_program_run(p, setup);
}

void rt_program_bind_slot(rt_program *p, int func, const int *slot)
{
    const int *n = &p->span_slots[func * IR_NUM_STASH_SPANS];
    int binding = 0, given = 0, at[IR_NUM_STASH_SPANS];
    for (int k = IR_NUM_STASH_SPANS - 1; k >= 0; k--) { /* mixed radix, the first span fastest */
        at[k] = slot && slot[k] >= 0 ? slot[k] : 0;
        given |= slot && slot[k] >= 0;
        if (at[k] >= n[k]) {
            fprintf(stderr, "train_rank: internal error: %s has no stash slot %d of span %d\n", p->m->funcs[func]->name,
                    at[k], k);
            exit(1);
        }
        binding = binding * n[k] + at[k];
    }
    if (!given || binding == p->bound_slot[func])
        return;
    rt_func_exec *x = &p->slot_execs[func][binding];
    if (!x->f) /* a binding is made the first time a call names it */
        bind_func(p, x, p->m->funcs[func], p->arena, at);
    p->funcs[func] = *x;
    p->bound_slot[func] = binding;
}

void rt_program_run(rt_program *p, int func)
{
    rt_trace_push(p, p->m->funcs[func]->name);
    if (host_func(p, func) && !p->host) {
        fprintf(stderr, "train_rank: internal error: %s runs on the host, but nothing runs host functions (rt_host_attach "
                        "after rt_program_load)\n", p->m->funcs[func]->name);
        exit(1);
    }
    if (host_func(p, func))
        p->host->run(p, func);
    else
        p->dev->run(p, func);
    rt_trace_pop(p);
}

int rt_program_find(const rt_program *p, int func, ir_op op, ir_role role)
{
    return ir_find_role(p->funcs[func].f, op, role);
}

void *rt_program_tensor(rt_program *p, int func, int instr, const ir_type **type)
{
    const ir_func *f = p->funcs[func].f;
    ir_op op = instr >= 0 && instr < f->ninstrs ? f->instrs[instr].op : IR_OP_INPUT;
    if (instr < 0 || instr >= f->ninstrs || (op != IR_OP_INPUT && op != IR_OP_OUTPUT)) {
        fprintf(stderr, "train_rank: internal error: %s has no such input or output (instruction %d)\n", f->name,
                instr);
        exit(1);
    }
    int v = ir_io_value(&f->instrs[instr]);
    *type = ir_vtype(f, v);
    return p->funcs[func].vptr[v];
}

/* The buffer of input or output instr (op), checked against the host's idea of its size. */
static void *io_buffer(rt_program *p, int func, ir_op op, int instr, size_t bytes)
{
    const ir_func *f = p->funcs[func].f;
    const ir_type *t;
    void *buf = rt_program_tensor(p, func, instr, &t);
    if (f->instrs[instr].op != op || ir_bytes(t) != bytes) {
        fprintf(stderr, "train_rank: internal error: %s @%s of %s is not the %s of %zu bytes the runtime expected\n",
                ir_ops[f->instrs[instr].op].name, f->instrs[instr].sym, f->name, ir_ops[op].name, bytes);
        exit(1);
    }
    return buf;
}

/* dst := src, bytes, where dst or src (on_host) is the host's memory already or the device's. */
static void to_device(rt_program *p, bool on_host, void *dst, const void *src, size_t bytes)
{
    on_host ? (void)memcpy(dst, src, bytes) : p->dev->upload(p, dst, src, bytes);
}

static void to_host(rt_program *p, bool on_host, void *dst, const void *src, size_t bytes)
{
    on_host ? (void)memcpy(dst, src, bytes) : p->dev->download(p, dst, src, bytes);
}

void rt_program_set_input(rt_program *p, int func, int instr, const void *host, size_t bytes)
{
    to_device(p, host_func(p, func), io_buffer(p, func, IR_OP_INPUT, instr, bytes), host, bytes);
}

void rt_program_get_output(rt_program *p, int func, int instr, void *host, size_t bytes)
{
    to_host(p, host_func(p, func), host, io_buffer(p, func, IR_OP_OUTPUT, instr, bytes), bytes);
}

/* A parameter held as its bf16 copy and i16 remainder (ir_param_remainder): its two halves' host
 * buffers, of n elements each. */
static void master_pair(rt_program *p, int g, int64_t n, int *copy, uint16_t **hi, int16_t **lo)
{
    *copy = ir_global_companion(p->m, g, IR_GLOBAL_COPY);
    *hi = xcalloc((size_t)n, sizeof **hi, "a parameter's high half");
    *lo = xcalloc((size_t)n, sizeof **lo, "a parameter's remainder");
}

void rt_program_read_global(rt_program *p, int g, void *host)
{
    int rem = ir_param_remainder(p->m, g), copy;
    if (rem < 0) {
        to_host(p, p->m->globals[g].host, host, p->globals[g], ir_bytes(&p->m->globals[g].type));
        return;
    }
    int64_t n = ir_numel(&p->m->globals[g].type);
    uint16_t *hi;
    int16_t *lo;
    master_pair(p, g, n, &copy, &hi, &lo);
    to_host(p, false, hi, p->globals[copy], (size_t)n * sizeof *hi);
    to_host(p, false, lo, p->globals[rem], (size_t)n * sizeof *lo);
    for (int64_t i = 0; i < n; i++)
        ((float *)host)[i] = rt_master_join(hi[i], lo[i]);
    free(hi);
    free(lo);
}

void rt_program_write_global(rt_program *p, int g, const void *host)
{
    int rem = ir_param_remainder(p->m, g), copy;
    if (rem < 0) {
        to_device(p, p->m->globals[g].host, p->globals[g], host, ir_bytes(&p->m->globals[g].type));
        return;
    }
    int64_t n = ir_numel(&p->m->globals[g].type);
    uint16_t *hi;
    int16_t *lo;
    master_pair(p, g, n, &copy, &hi, &lo);
    for (int64_t i = 0; i < n; i++)
        rt_master_split(((const float *)host)[i], &hi[i], &lo[i]);
    to_device(p, false, p->globals[copy], hi, (size_t)n * sizeof *hi);
    to_device(p, false, p->globals[rem], lo, (size_t)n * sizeof *lo);
    free(hi);
    free(lo);
}

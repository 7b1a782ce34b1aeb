/* parallel.c — the rank's layout and communicators (see parallel.h). */
#include "parallel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static rt_comm *axis_comms[IR_NUM_AXES]; /* what rt_parallel_comm hands the kernels */

rt_comm *rt_parallel_comm(ir_axis axis) { return axis < IR_NUM_AXES ? axis_comms[axis] : NULL; }

/* Whether axis shares an earlier axis's communicator (make_groups). */
static bool shared_comm(ir_axis axis)
{
    for (ir_axis a = 1; a < axis; a++)
        if (axis_comms[a] == axis_comms[axis])
            return true;
    return false;
}

int rt_parallel_bucket_run(const rt_kernel_call *c, int first, bool padded, size_t *span)
{
    ir_dtype dt = c->arg_types[first]->dtype;
    int next = first + 1;
    while (next < c->nargs && c->arg_types[next]->dtype == dt &&
           (char *)c->args[next - 1] + ir_global_span(ir_bytes(c->arg_types[next - 1])) == c->args[next])
        next++;
    size_t last = ir_bytes(c->arg_types[next - 1]);
    *span = (size_t)((char *)c->args[next - 1] - (char *)c->args[first]) + (padded ? ir_global_span(last) : last);
    return next;
}

void rt_parallel_all_reduce_bucket(const rt_kernel_call *c, rt_lane lane, void *stream)
{
    rt_comm *comm = rt_parallel_comm((ir_axis)c->in->attr[IR_ATTR_AXIS]);
    if (!comm)
        return;
    comm = rt_comm_lane(comm, lane);
    rt_comm_group_begin(comm); /* the runs go out as one launch (NCCL) */
    for (int first = 0, next; first < c->nargs; first = next) {
        size_t span;
        next = rt_parallel_bucket_run(c, first, false, &span);
        ir_dtype dt = c->arg_types[first]->dtype;
        rt_all_reduce(comm, c->args[first], span / ir_dtype_size(dt), dt, RT_SUM, stream);
    }
    rt_comm_group_end(comm, stream);
}

rt_comm *rt_parallel_comm_for(const ir_instr *in, int64_t ranks)
{
    ir_axis axis = (ir_axis)in->attr[IR_ATTR_AXIS];
    rt_comm *comm = rt_parallel_comm(axis);
    int have = comm ? rt_comm_size(comm) : 1;
    if (have != ranks) {
        fprintf(stderr, "train_rank: internal error: %s over %s spans %lld ranks but this rank's %s group has %d "
                        "(rt_parallel_init must run before the plan's first function)\n",
                ir_ops[in->op].name, ir_axis_name(axis), (long long)ranks, ir_axis_name(axis), have);
        exit(1);
    }
    return comm;
}

void rt_parallel_a2av_splits(const ir_instr *in, const ir_type *st, const void *splits, int64_t R, int64_t *out)
{
    int64_t total = 0, n = ir_numel(st);
    for (int64_t i = 0; i < n; i++) {
        out[i] = st->dtype == IR_I64 ? ((const int64_t *)splits)[i] : ((const int32_t *)splits)[i];
        if (out[i] < 0 || out[i] > R - total) {
            fprintf(stderr, "train_rank: error: %s over %s: split %lld is %lld, and the splits must be >= 0 and sum "
                            "to at most the %lld rows sent (the routing's counts are wrong)\n",
                    ir_ops[in->op].name, ir_axis_name((ir_axis)in->attr[IR_ATTR_AXIS]), (long long)i, (long long)out[i],
                    (long long)R);
            exit(1);
        }
        total += out[i];
    }
}

void rt_parallel_a2av_store(const ir_type *st, const int64_t *came, void *out)
{
    for (int64_t i = 0; i < ir_numel(st); i++)
        if (st->dtype == IR_I64)
            ((int64_t *)out)[i] = came[i];
        else
            ((int32_t *)out)[i] = (int32_t)came[i];
}

size_t rt_parallel_a2av_self(const ir_instr *in, const int64_t *splits, int64_t nsplits, int64_t rows, int64_t *came)
{
    int64_t total = 0;
    for (int64_t i = 0; i < nsplits; i++)
        total += came[i] = splits[i];
    if (total > rows) {
        fprintf(stderr, "train_rank: error: %s over %s: %lld rows come to this rank but its receive buffer holds %lld\n",
                ir_ops[in->op].name, ir_axis_name((ir_axis)in->attr[IR_ATTR_AXIS]), (long long)total, (long long)rows);
        exit(1);
    }
    return (size_t)total;
}

static void gather_bytes(rt_comm *comm, int n, rt_program *p, const void *local, size_t bytes, void *all);

static struct {
    char *base;
    size_t bytes;
} exchanges[IR_NUM_AXES]; /* per axis: its copy lane's exchange buffer (add_lanes) */

void *rt_parallel_exchange(ir_axis axis, size_t bytes)
{
    return axis < IR_NUM_AXES && exchanges[axis].base && bytes <= exchanges[axis].bytes ? exchanges[axis].base : NULL;
}

/* What the plan's collectives on `axis` need: a side lane for those overlapping computation (ring
 * attention's ring_shift too), a copy lane for sequence parallelism's all-gathers and
 * reduce-scatters' exchanges, and for gradient buckets reduced beside the backward. */
static void lanes_needed(const ir_module *m, ir_axis axis, bool *side, bool *copy)
{
    *side = *copy = false;
    for (int f = 0; f < m->nfuncs; f++)
        for (int i = 0; i < m->funcs[f]->ninstrs; i++) {
            const ir_instr *in = &m->funcs[f]->instrs[i];
            bool copyable = ir_op_has(in->op, IR_OPF_COPY_LANE);
            if (!(copyable || ir_on_comm_stream(in)) || (ir_axis)in->attr[IR_ATTR_AXIS] != axis)
                continue;
            *side |= ir_on_comm_stream(in);
            *copy |= copyable || (in->op == IR_OP_ALL_REDUCE_INPLACE && ir_on_comm_stream(in));
        }
}

/* A fingerprint of where the plan puts the copy lane's collectives' buffers in its window (the
 * arena's offsets, or the globals' spans in the slab): the window needs them at the same offsets
 * on every member. */
static uint64_t window_layout(const ir_module *m, bool activations, size_t window_bytes)
{
    uint64_t h = 1469598103934665603ull ^ window_bytes;
    for (int g = 0; !activations && g < m->nglobals; g++)
        h = (h ^ (uint64_t)ir_global_span(ir_bytes(&m->globals[g].type))) * 1099511628211ull;
    for (int f = 0; activations && f < m->nfuncs; f++)
        for (int i = 0; i < m->funcs[f]->ninstrs; i++) {
            const ir_instr *in = &m->funcs[f]->instrs[i];
            if (!ir_op_has(in->op, IR_OPF_COPY_LANE))
                continue;
            h = (h ^ (uint64_t)f) * 1099511628211ull;
            h = (h ^ (uint64_t)i) * 1099511628211ull;
            h = (h ^ (uint64_t)m->funcs[f]->vals[in->args[0]].offset) * 1099511628211ull;
            for (int r = 0; r < in->nres; r++)
                h = (h ^ (uint64_t)m->funcs[f]->vals[in->res[r]].offset) * 1099511628211ull;
        }
    return h;
}

/* Whether every member of c runs on this node (launchers place local_world consecutive ranks on
 * each node): the copy engines reach the other GPUs of a node only, over NVLink. */
static bool on_one_node(const rt_comm *c, const rt_rank_env *env)
{
    int node = env->rank / env->local_world;
    for (int r = 0; r < rt_comm_size(c); r++)
        if (rt_comm_world_rank(c, r) / env->local_world != node)
            return false;
    return true;
}

/* Lanes (comm.h) for the groups whose collectives would use them, as the plan's lanes say
 * (rt_program_lanes). The copy lane's window is the arena for a group of sequence-parallel
 * collectives (the all-gathers' buffers and the reduce-scatters' exchange), else the global slab
 * for a group reducing gradient buckets beside the backward (rt_program_load allocated it as
 * window memory, with their exchange after it), when every member's plan places those buffers
 * alike, for a group within one node. */
static void add_lanes(rt_parallel *par, rt_program *p)
{
    bool want_side, want_copy;
    rt_program_lanes(p->m, &want_side, &want_copy);
    for (ir_axis axis = 0; axis < IR_NUM_AXES; axis++) {
        rt_comm *comm = axis_comms[axis];
        bool side, copy;
        lanes_needed(p->m, axis, &side, &copy);
        if (!comm || rt_comm_size(comm) == 1 || shared_comm(axis))
            continue;
        if (side && want_side)
            rt_comm_add_lane(comm, RT_LANE_SIDE);
        bool activations = ir_has_collective(p->m, axis, IR_OPF_COPY_LANE);
        char *base = activations ? p->arena : p->global_slab;
        size_t used = activations ? p->arena_bytes : p->global_slab_bytes,
               exchange = activations ? p->exchange_bytes : p->bucket_exchange_bytes;
        if (!copy || !want_copy || !p->dev->alloc_window || (!activations && !exchange) || !on_one_node(comm, &par->env))
            continue;
        uint64_t mine = window_layout(p->m, activations, used + exchange),
                 *all = malloc(sizeof(uint64_t) * (size_t)rt_comm_size(comm));
        gather_bytes(comm, rt_comm_size(comm), p, &mine, sizeof mine, all);
        bool same = true;
        for (int r = 0; r < rt_comm_size(comm); r++)
            same &= all[r] == mine;
        free(all);
        if (!same) {
            if (rt_comm_rank(comm) == 0)
                fprintf(stderr, "train_rank: note: the %s ranks' plans place the copy lane's buffers differently; they "
                                "keep NCCL's kernels\n", rt_comm_name(comm));
            continue;
        }
        rt_comm_add_lane(comm, RT_LANE_COPY);
        /* every member uses the window, or none: else their collectives would go out on different lanes */
        char ok = rt_comm_window(comm, base, used + exchange), *oks = malloc((size_t)rt_comm_size(comm));
        gather_bytes(comm, rt_comm_size(comm), p, &ok, 1, oks);
        if (memchr(oks, 0, (size_t)rt_comm_size(comm))) {
            rt_comm_window(comm, NULL, 0);
        } else {
            if (exchange)
                exchanges[axis].base = base + used, exchanges[axis].bytes = exchange;
            if (par->env.rank == 0)
                printf("train_rank: %s %s on the copy engines (the %.2f GiB %s is an NCCL window)\n", rt_comm_name(comm),
                       activations ? "all-gathers and reduce-scatters' exchanges run"
                                   : "gradient buckets beside the backward are reduced",
                       (used + exchange) / 1073741824.0, activations ? "arena" : "global slab");
        }
        free(oks);
    }
}

/* The axis before `axis` whose group holds the same ranks as axis's (they share it), or
 * IR_AXIS_NONE. */
static ir_axis same_group(const ir_mesh *mesh, ir_axis axis, int world_rank)
{
    int n = mesh->degree[axis], mine[n], other[n];
    ir_mesh_group(mesh, 1u << axis, world_rank, mine, n);
    for (ir_axis a = 1; a < axis; a++)
        if (mesh->degree[a] == n && ir_mesh_group(mesh, 1u << a, world_rank, other, n) == n &&
            !memcmp(mine, other, sizeof mine))
            return a;
    return IR_AXIS_NONE;
}

/* A group for each axis of degree above 1, in ir_axis order on every rank (each split is
 * collective over the world). */
static void make_groups(rt_parallel *par)
{
    for (ir_axis a = 1; a < IR_NUM_AXES; a++) {
        if (par->mesh.degree[a] == 1)
            continue;
        ir_axis same = same_group(&par->mesh, a, par->env.rank);
        axis_comms[a] = same != IR_AXIS_NONE ? axis_comms[same] : rt_comm_mesh_group(par->world, &par->mesh, 1u << a);
    }
}

void rt_parallel_init(rt_parallel *par, rt_program *p)
{
    char err[1024];
    *par = (rt_parallel){.env = rt_rank_env_or_exit(), .mesh = ir_module_mesh(p->m)};
    memcpy(par->coord, p->coord, sizeof par->coord); /* as the plan was resolved (ir_mesh_coords) */
    if (!ir_mesh_check(&par->mesh, par->env.world_size, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: %s (launched by %s: mpirun -np N, torchrun or train_rank "
                        "--nproc-per-node N)\n", err, par->env.launcher);
        exit(2);
    }
    if (par->env.world_size == 1)
        return;
    par->world = p->dev->world_comm(p, &par->env, err, sizeof err);
    if (!par->world) {
        fprintf(stderr, "train_rank: error: cannot connect the %d ranks: %s\n", par->env.world_size, err);
        exit(2);
    }
    make_groups(par);
    if (axis_comms[IR_AXIS_PP])
        rt_comm_add_p2p(axis_comms[IR_AXIS_PP]); /* the stages' sends and receives (comm.h) */
    par->scratch = p->dev->alloc(p, sizeof(float));
    add_lanes(par, p);
}

void rt_parallel_finish(rt_parallel *par, rt_program *p)
{
    if (!par->world)
        return;
    if (p->dev->quiesce)
        p->dev->quiesce(p);
    for (ir_axis a = IR_NUM_AXES - 1; a > IR_AXIS_NONE; a--) { /* the sharers before what they share */
        if (!shared_comm(a))
            rt_comm_free(axis_comms[a]);
        axis_comms[a] = NULL;
        exchanges[a].base = NULL;
    }
    rt_comm_free(par->world);
    par->world = NULL;
}

/* Host bytes through device buffers (NCCL works on device memory; on the CPU these are host). */
static void gather_bytes(rt_comm *comm, int n, rt_program *p, const void *local, size_t bytes, void *all)
{
    void *dev_local = p->dev->alloc(p, bytes), *dev_all = p->dev->alloc(p, bytes * (size_t)n);
    p->dev->upload(p, dev_local, local, bytes);
    rt_all_gather(comm, dev_local, dev_all, bytes, IR_FP8E4M3 /* a 1-byte type: bytes */, p->dev->queue(p));
    p->dev->download(p, all, dev_all, bytes * (size_t)n);
    p->dev->free(p, dev_local);
    p->dev->free(p, dev_all);
}

/* The block split k of layout l cut, from its parts (one per rank of the split's axis, in rank
 * order, `parts`): rank order for a flat split, interleaved along the dimension otherwise (the
 * block is [outer, dims[dim], inner] and part r holds middle rows [r*n, (r+1)*n)). */
static void join_parts(const ir_split *sp, const ir_type *part, int n, const char *parts, char *block)
{
    size_t bytes = ir_bytes(part);
    if (sp->kind == IR_SPLIT_FLAT) {
        memcpy(block, parts, bytes * (size_t)n);
        return;
    }
    size_t outer = 1, inner = ir_dtype_size(part->dtype);
    for (int i = 0; i < sp->dim; i++)
        outer *= (size_t)part->dims[i];
    for (int i = sp->dim + 1; i < part->ndim; i++)
        inner *= (size_t)part->dims[i];
    size_t slab = (size_t)part->dims[sp->dim] * inner; /* one part's middle rows, in bytes */
    if (sp->kind == IR_SPLIT_BALANCED) { /* rank r's two chunks are chunks r and 2n-1-r of the 2n */
        int64_t local = part->dims[sp->dim];
        size_t half = slab / 2;
        for (size_t o = 0; o < outer; o++)
            for (int r = 0; r < n; r++)
                for (int c = 0; c < 2; c++) {
                    size_t at = (size_t)ir_cp_position(c * local / 2, local, n, r);
                    memcpy(block + o * (size_t)n * slab + at * inner, parts + (size_t)r * bytes + o * slab + c * half,
                           half);
                }
        return;
    }
    for (size_t o = 0; o < outer; o++)
        for (int r = 0; r < n; r++)
            memcpy(block + (o * (size_t)n + (size_t)r) * slab, parts + (size_t)r * bytes + o * slab, slab);
}

void rt_parallel_gather(rt_program *p, const ir_layout *l, const ir_type *whole, const void *local, void *full)
{
    int degree[IR_NUM_AXES];
    ir_axis_degrees(p->m, degree);
    ir_type own = ir_layout_block(l, whole, degree, l->nsplits);
    char *part = memcpy(malloc(ir_bytes(&own)), local, ir_bytes(&own));
    for (int k = l->nsplits - 1; k >= 0; k--) { /* from this rank's part out to the whole */
        const ir_split *sp = &l->splits[k];
        int n = degree[sp->axis];
        ir_type child = ir_layout_block(l, whole, degree, k + 1);
        size_t bytes = ir_bytes(&child);
        char *parts = malloc(bytes * (size_t)n), *block = malloc(bytes * (size_t)n);
        if (n > 1)
            gather_bytes(axis_comms[sp->axis], n, p, part, bytes, parts);
        else
            memcpy(parts, part, bytes);
        join_parts(sp, &child, n, parts, block);
        free(parts);
        free(part);
        part = block;
    }
    memcpy(full, part, ir_bytes(whole));
    free(part);
}

int64_t rt_parallel_position(const rt_parallel *par, int it, int accum, int mb, int B, int b)
{
    int64_t dp = par->mesh.degree[IR_AXIS_DP], global_batch = (int64_t)B * dp * accum;
    return (it - 1) * global_batch + ((int64_t)mb * dp + par->coord[IR_AXIS_DP]) * B + b;
}

float rt_parallel_mean_of(rt_parallel *par, rt_program *p, float v, rt_reduce_op stages)
{
    int dp = par->mesh.degree[IR_AXIS_DP], cp = par->mesh.degree[IR_AXIS_CP];
    if (dp == 1 && cp == 1 && !axis_comms[IR_AXIS_PP])
        return v;
    p->dev->upload(p, par->scratch, &v, sizeof v);
    if (axis_comms[IR_AXIS_PP]) /* first over the stages: a maximum does not commute with the dp sum */
        rt_all_reduce(axis_comms[IR_AXIS_PP], par->scratch, 1, IR_F32, stages, p->dev->queue(p));
    if (dp > 1)
        rt_all_reduce(axis_comms[IR_AXIS_DP], par->scratch, 1, IR_F32, RT_SUM, p->dev->queue(p));
    if (cp > 1) /* each cp rank's loss is the mean over its chunks: equal shares of every sequence */
        rt_all_reduce(axis_comms[IR_AXIS_CP], par->scratch, 1, IR_F32, RT_SUM, p->dev->queue(p));
    p->dev->download(p, &v, par->scratch, sizeof v);
    return v / (float)(dp * cp);
}

float rt_parallel_mean(rt_parallel *par, rt_program *p, float v) { return rt_parallel_mean_of(par, p, v, RT_SUM); }

float rt_parallel_world(rt_parallel *par, rt_program *p, float v, rt_reduce_op op)
{
    if (!par->world)
        return v;
    p->dev->upload(p, par->scratch, &v, sizeof v);
    rt_all_reduce(par->world, par->scratch, 1, IR_F32, op, p->dev->queue(p));
    p->dev->download(p, &v, par->scratch, sizeof v);
    return v;
}

/* The seq-split side [B,2c,H,D] is x (heads=1) or r (heads=0); the head-split side [B,2cn,H/n,D]
 * the other. Per rank q, the exchange's block [B,2c,H/n,D]: the seq side's head block q, or the
 * head side's tokens of q's chunks q and 2n-1-q. */
void rt_parallel_cp_all_to_all(const rt_kernel_call *c, rt_comm *comm, void *scratch, const rt_device *dev, void *stream)
{
    bool heads = c->in->attr[IR_ATTR_CP_ALL_TO_ALL_HEADS] != 0;
    const ir_type *st = heads ? c->arg_types[0] : c->res_types[0];
    char *seq = heads ? c->args[0] : c->res[0], *hd = heads ? c->res[0] : c->args[0];
    size_t n = (size_t)rt_comm_size(comm), B = (size_t)st->dims[0], c2 = (size_t)st->dims[1], half = c2 / 2;
    size_t E = ir_dtype_size(st->dtype) * (size_t)st->dims[3], H = (size_t)st->dims[2], row = H / n * E; /* a token's head block */
    size_t block = B * c2 * row, T = c2 * n;
    char *out = scratch, *in = out + block * n;
    for (size_t q = 0; q < n; q++) { /* block q of the send buffer */
        if (heads)
            dev->copy2d(stream, out + q * block, row, seq + q * row, H * E, row, B * c2);
        else
            for (size_t k = 0; k < 2; k++) /* q's chunk q (k 0) and 2n-1-q (k 1): half tokens each */
                dev->copy2d(stream, out + q * block + k * half * row, c2 * row, hd + (k ? 2 * n - 1 - q : q) * half * row,
                            T * row,
                       half * row, B);
    }
    rt_all_to_all(comm, out, in, block, IR_FP8E4M3 /* a 1-byte type: bytes */, stream);
    for (size_t p = 0; p < n; p++) { /* block p of what came */
        if (!heads)
            dev->copy2d(stream, seq + p * row, H * E, in + p * block, row, row, B * c2);
        else
            for (size_t k = 0; k < 2; k++)
                dev->copy2d(stream, hd + (k ? 2 * n - 1 - p : p) * half * row, T * row, in + p * block + k * half * row,
                            c2 * row,
                       half * row, B);
    }
}

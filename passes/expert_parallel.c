/* expert_parallel.c — expert parallelism (config expert_model_parallel_size = ep > 1): each MoE
 * layer's E experts are split over the ep ranks, E/ep a rank, its expert weights [E, ...] along
 * dimension 0 (layout [ep:dim0]), in every function that reads them. In the step and eval
 * functions, between the sort by expert and the grouped GEMMs the routed rows go to their
 * expert's rank and come back before the combine, Megatron's all-to-all token dispatcher:
 *
 *     (perm, counts[E]) = moe_sort(ids)           xp[N k, H] = moe_permute(x, perm)
 *     (xr[C, H], came[ep, E/ep]) = all_to_all_v(xp, reshape(counts, [ep, E/ep]))   dispatch
 *     (xs, counts_local[E/ep]) = moe_sort_runs(xr, came)     each local expert's rows together
 *       ... the experts' grouped GEMMs over xs by counts_local ...                 -> ys[C, H]
 *     (yb[N k, H], _) = all_to_all_v(moe_unsort_runs(ys, came), came)               combine
 *     y = moe_unpermute(yb, perm, w)
 *
 * C is the exact worst case, every token of every ep rank routed here: ep N min(k, E/ep) rows
 * (a token's k experts are distinct); with a capacity factor (moe_sort given moe_capacity's kept
 * weights, so only kept rows are counted and sent) at most the capacity, ep (E/ep) capacity rows
 * when fewer; the memory report says which. It runs before autodiff, whose
 * rules give the backward the transposed all-to-alls. The expert weights' gradients are then
 * whole on their rank for the tokens of all ep ranks; data_parallel sums them over the expert
 * data-parallel group (edp = dp cp / ep: Megatron carves ep from dp x cp; under context
 * parallelism the rank's rows are its tokens' and the shard rule over cp scales the all-to-alls'
 * room by 1/cp) and the dense ones over cp and dp (with the distributed optimizer,
 * reduce-scattered into edp blocks, and with --overlap-grad-reduce in buckets of their own), and
 * the gradient norm sums the experts' squares over ep. */
#include "passes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Marks in split[] the parameters whose weights the grouped GEMMs of f read ([E, ...]); false when
 * one is no global or its experts do not divide by ep. */
static bool find_expert_weights(const ir_module *m, const ir_func *f, int ep, bool *split, char *err, size_t errlen)
{
    for (int i = 0; i < f->ninstrs; i++) {
        const ir_instr *in = &f->instrs[i];
        if (in->op != IR_OP_MOE_GROUPED_MATMUL)
            continue;
        int g = ir_global_of(f, in->args[1]);
        if (g < 0)
            return snprintf(err, errlen, "%s: grouped matmul %%%d's weights are no global: expert parallelism splits "
                            "the expert weights themselves", f->name, in->res[0]), false;
        const ir_global *gl = &m->globals[g];
        if (gl->type.dims[0] % ep)
            return snprintf(err, errlen, "@%s has %lld experts, which --expert-model-parallel-size %d does not divide: "
                            "choose an ep that divides num_experts", gl->name, (long long)gl->type.dims[0], ep), false;
        split[ir_global_param(m, g)] = true;
    }
    return true;
}

/* Every global of a marked parameter (it and its working copies) holds E/ep experts: this rank's. */
static void split_expert_globals(ir_module *m, const bool *split, int ep)
{
    for (int g = 0; g < m->nglobals; g++) {
        ir_global *gl = &m->globals[g];
        if (!split[ir_global_param(m, g)])
            continue;
        gl->type.dims[0] /= ep;
        ir_shard_push(&gl->type, 0, IR_AXIS_EP);
        ir_layout_add(&gl->layout, IR_AXIS_EP, IR_SPLIT_DIM, 0);
    }
}

/* One MoE layer's dispatch as f's rewrite meets it: the sort's permutation, and came. */
typedef struct {
    int perm;  /* src's value */
    int came;  /* dst's value */
} ep_layer;

/* capacity 0: rows is the exact worst case; else the expert capacity that sized rows */
static int all_to_all_v(ir_module *m, ir_func *f, int x, int splits, int64_t rows, int64_t capacity)
{
    int args[2] = {x, splits};
    double attrs[IR_NATTRS_ALL_TO_ALL_V] = {[IR_ATTR_AXIS] = IR_AXIS_EP, [IR_ATTR_ALL_TO_ALL_V_ROWS] = (double)rows,
                                            [IR_ATTR_ALL_TO_ALL_V_CAPACITY] = (double)capacity};
    return ir_emit(m, f, IR_OP_ALL_TO_ALL_V, args, 2, attrs, NULL, NULL);
}

/* The most pairs an expert keeps of a rank's micro-batch: the capacity of the moe_capacity whose kept
 * weights the sort counts (0: dropless, every routed pair sent). */
static int64_t sort_capacity(const ir_func *f, const ir_instr *sort)
{
    if (sort->nargs < 2)
        return 0;
    const ir_instr *def = &f->instrs[f->vals[sort->args[1]].def];
    return def->op == IR_OP_MOE_CAPACITY ? (int64_t)def->attr[IR_ATTR_MOE_CAPACITY_CAPACITY] : 0;
}

/* After moe_permute `in` (copied to dst): the dispatch, and xp and the sort's counts mapped to
 * the expert-ordered rows and their local counts. */
static void dispatch(ir_module *m, ir_func *dst, const ir_func *src, const ir_instr *in, int ep, int *map,
                     ep_layer *layer)
{
    const ir_instr *sort = &src->instrs[src->vals[in->args[1]].def];
    int counts = sort->res[1];
    int64_t E = src->vals[counts].type.dims[0], N = src->vals[in->args[0]].type.dims[0];
    int64_t k = src->vals[in->res[0]].type.dims[0] / N, local = E / ep, most = k < local ? k : local;
    int64_t dims[2] = {ep, local}, worst = ep * N * most, capacity = sort_capacity(src, sort);
    bool by_capacity = capacity > 0 && ep * local * capacity < worst;
    int splits = ir_reshape(m, dst, map[counts], 2, dims);
    int xr = all_to_all_v(m, dst, map[in->res[0]], splits, by_capacity ? ep * local * capacity : worst,
                          by_capacity ? capacity : 0);
    int args[2] = {xr, xr + 1};
    int xs = ir_emit(m, dst, IR_OP_MOE_SORT_RUNS, args, 2, NULL, NULL, NULL);
    map[in->res[0]] = xs;
    map[counts] = xs + 1;
    *layer = (ep_layer){in->args[1], xr + 1};
}

/* Before moe_unpermute `in`: the combine, the experts' rows back to the ranks they came from. */
static void combine(ir_module *m, ir_func *dst, const ir_func *src, const ir_instr *in, const ep_layer *layer,
                    int *map)
{
    int args[2] = {map[in->args[0]], layer->came};
    int yr = ir_emit(m, dst, IR_OP_MOE_UNSORT_RUNS, args, 2, NULL, NULL, NULL);
    int yb = all_to_all_v(m, dst, yr, layer->came, src->vals[in->args[0]].type.dims[0], 0);
    int keep = map[in->args[0]];
    map[in->args[0]] = yb;
    ir_copy_instr(m, dst, src, in, map);
    map[in->args[0]] = keep;
}

static bool ep_func(ir_module *m, int fi, int ep, char *err, size_t errlen)
{
    const ir_func *src = m->funcs[fi];
    ir_func *dst = ir_func_new(m, src->name, src->kind);
    int *map = malloc(sizeof(int) * ((size_t)src->nvals + 1)), nlayers = 0;
    ep_layer *layers = malloc(sizeof(ep_layer) * ((size_t)src->ninstrs + 1));
    bool ok = true;
    for (int i = 0; i < src->ninstrs && ok; i++) {
        const ir_instr *in = &src->instrs[i];
        int l = -1;
        for (int k = 0; in->op == IR_OP_MOE_UNPERMUTE && k < nlayers; k++)
            if (layers[k].perm == in->args[1])
                l = k;
        if (in->op == IR_OP_MOE_UNPERMUTE && l >= 0) {
            combine(m, dst, src, in, &layers[l], map);
            continue;
        }
        int r = ir_copy_instr(m, dst, src, in, map);
        if (in->op == IR_OP_GLOBAL) /* the rank's part of a split expert weight, not the source's split */
            dst->vals[r].type = m->globals[in->global].type;
        if (in->op == IR_OP_MOE_PERMUTE) {
            if (src->instrs[src->vals[in->args[1]].def].op != IR_OP_MOE_SORT) {
                snprintf(err, errlen, "%s: moe_permute %%%d's permutation is not moe_sort's: expert parallelism "
                         "dispatches the rows the sort ordered", src->name, in->res[0]);
                ok = false;
            } else {
                dispatch(m, dst, src, in, ep, map, &layers[nlayers++]);
            }
        }
    }
    if (ok)
        ir_func_replace(m, fi, dst);
    free(map);
    free(layers);
    return ok;
}

bool pass_expert_parallel(ir_module *m, const mcc_pass_options *opts, char *err, size_t errlen)
{
    int ep = (int)ir_cfg_int(m, IR_CFG_EXPERT_MODEL_PARALLEL_SIZE);
    if (ep <= 1)
        return true;
    bool *split = calloc((size_t)m->nglobals + 1, sizeof(bool)), ok = true;
    ir_func_kind kinds[2] = {IR_FUNC_STEP, IR_FUNC_EVAL};
    for (int k = 0; k < 2 && ok; k++)
        if (ir_func_of_kind(m, kinds[k]) >= 0)
            ok = find_expert_weights(m, m->funcs[ir_func_of_kind(m, kinds[k])], ep, split, err, errlen);
    bool any = false;
    for (int g = 0; g < m->nglobals; g++)
        any |= split[g];
    if (ok && !any) {
        snprintf(err, errlen, "--expert-model-parallel-size %d: the model has no experts (set num_experts)", ep);
        ok = false;
    }
    if (ok)
        split_expert_globals(m, split, ep);
    /* every function: the step's and eval's dispatches, and in all (setup's working copies, made
     * by the precision pass before this one) the split weights' references retyped */
    for (int f = 0; f < m->nfuncs && ok; f++)
        ok = ep_func(m, f, ep, err, errlen);
    free(split);
    return ok;
}

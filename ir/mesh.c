/* mesh.c — the parallel mesh: each axis's degree, Megatron's rank order and the groups along any
 * set of axes (ir.h). The one implementation of the layout: the compiler resolves rank terms
 * with it, the runtime builds its communicators from it. */
#include "ir.h"

#include <stdio.h>
#include <string.h>

ir_mesh ir_mesh_of(int tp, int cp, int dp, int pp, int ep)
{
    ir_mesh m = {{[IR_AXIS_NONE] = 1, [IR_AXIS_TP] = tp, [IR_AXIS_CP] = cp, [IR_AXIS_DP] = dp, [IR_AXIS_PP] = pp,
                  [IR_AXIS_EP] = ep}};
    m.degree[IR_AXIS_EDP] = ep > 0 && (cp * dp) % ep == 0 ? cp * dp / ep : 0;
    m.degree[IR_AXIS_DP_CP] = dp * cp;
    return m;
}

bool ir_axis_derived(ir_axis a) { return a == IR_AXIS_EDP || a == IR_AXIS_DP_CP; }

ir_mesh ir_module_mesh(const ir_module *m)
{
    return ir_mesh_of((int)ir_cfg_int(m, IR_CFG_TENSOR_MODEL_PARALLEL_SIZE), (int)ir_cfg_int(m, IR_CFG_CONTEXT_PARALLEL_SIZE),
                      (int)ir_cfg_int(m, IR_CFG_DATA_PARALLEL_SIZE), (int)ir_cfg_int(m, IR_CFG_PIPELINE_MODEL_PARALLEL_SIZE),
                      (int)ir_cfg_int(m, IR_CFG_EXPERT_MODEL_PARALLEL_SIZE));
}

bool ir_mesh_check(const ir_mesh *mesh, int world_size, char *err, size_t errlen)
{
    const struct { const char *flag; ir_axis axis; } deg[] = {
        {"--tensor-model-parallel-size", IR_AXIS_TP}, {"--context-parallel-size", IR_AXIS_CP},
        {"--data-parallel-size", IR_AXIS_DP}, {"--pipeline-model-parallel-size", IR_AXIS_PP},
        {"--expert-model-parallel-size", IR_AXIS_EP}};
    const int *d = mesh->degree;
    for (size_t i = 0; i < sizeof deg / sizeof deg[0]; i++)
        if (d[deg[i].axis] < 1) {
            snprintf(err, errlen, "%s is %d: it must be at least 1", deg[i].flag, d[deg[i].axis]);
            return false;
        }
    long prod = (long)d[IR_AXIS_TP] * d[IR_AXIS_CP] * d[IR_AXIS_DP] * d[IR_AXIS_PP];
    long replica = (long)d[IR_AXIS_TP] * d[IR_AXIS_CP] * d[IR_AXIS_PP];
    if (prod != world_size && world_size % replica == 0) {
        snprintf(err, errlen, "the job has %d ranks but the program was compiled for tp %d x cp %d x dp %d x pp %d = %ld: "
                 "launch %ld ranks, or recompile with `mcc compile ... --world-size %d` (dp %ld)",
                 world_size, d[IR_AXIS_TP], d[IR_AXIS_CP], d[IR_AXIS_DP], d[IR_AXIS_PP], prod, prod, world_size,
                 world_size / replica);
        return false;
    }
    if (prod != world_size) {
        snprintf(err, errlen, "the job has %d ranks but the program was compiled for tp %d x cp %d x dp %d x pp %d = %ld: "
                 "launch %ld ranks (or a multiple of tp x cp x pp = %ld, recompiled with `mcc compile ... --world-size N`)",
                 world_size, d[IR_AXIS_TP], d[IR_AXIS_CP], d[IR_AXIS_DP], d[IR_AXIS_PP], prod, prod, replica);
        return false;
    }
    if (d[IR_AXIS_EDP] < 1) {
        snprintf(err, errlen, "--expert-model-parallel-size %d must divide cp x dp = %d", d[IR_AXIS_EP],
                 d[IR_AXIS_CP] * d[IR_AXIS_DP]);
        return false;
    }
    return true;
}

/* A world rank is a mixed-radix number whose digits (fastest first) are the coordinates along
 * one view's axes: the dense layers' tp, cp, dp, pp, or the expert layers' tp, ep, edp, pp. dp_cp
 * is the dense view's cp and dp digits read as one (ir_axis_digits). */
enum { VIEW_DIGITS = 4 };
static const ir_axis dense_view[VIEW_DIGITS] = {IR_AXIS_TP, IR_AXIS_CP, IR_AXIS_DP, IR_AXIS_PP};
static const ir_axis expert_view[VIEW_DIGITS] = {IR_AXIS_TP, IR_AXIS_EP, IR_AXIS_EDP, IR_AXIS_PP};

static unsigned view_axes(const ir_axis *v)
{
    unsigned axes = 0;
    for (int k = 0; k < VIEW_DIGITS; k++)
        axes |= 1u << v[k];
    return axes;
}

unsigned ir_mesh_view(bool expert) { return view_axes(expert ? expert_view : dense_view); }

/* The view holding every axis of `axes`, or NULL when they mix the two. */
static const ir_axis *view_of(unsigned axes)
{
    if ((axes & ~view_axes(dense_view)) == 0)
        return dense_view;
    return (axes & ~view_axes(expert_view)) == 0 ? expert_view : NULL;
}

/* The strides of v's digits, and each digit of world rank r. */
static void digits(const ir_mesh *mesh, const ir_axis *v, long long r, long long stride[VIEW_DIGITS], int digit[VIEW_DIGITS])
{
    long long s = 1;
    for (int k = 0; k < VIEW_DIGITS; k++) {
        int radix = mesh->degree[v[k]] > 0 ? mesh->degree[v[k]] : 1;
        stride[k] = s;
        digit[k] = (int)(r / s % radix);
        s *= radix;
    }
}

void ir_mesh_coords(const ir_mesh *mesh, long long world_rank, int coord[IR_NUM_AXES])
{
    memset(coord, 0, sizeof(int) * IR_NUM_AXES);
    const ir_axis *views[2] = {dense_view, expert_view};
    for (int w = 0; w < 2; w++) {
        long long stride[VIEW_DIGITS];
        int digit[VIEW_DIGITS];
        digits(mesh, views[w], world_rank, stride, digit);
        for (int k = 0; k < VIEW_DIGITS; k++)
            coord[views[w][k]] = digit[k];
    }
    coord[IR_AXIS_DP_CP] = coord[IR_AXIS_CP] + mesh->degree[IR_AXIS_CP] * coord[IR_AXIS_DP];
}

unsigned ir_axis_digits(ir_axis a)
{
    return a == IR_AXIS_DP_CP ? 1u << IR_AXIS_CP | 1u << IR_AXIS_DP : 1u << a;
}

int ir_mesh_group(const ir_mesh *mesh, unsigned axes, long long world_rank, int *ranks, int max_ranks)
{
    unsigned given = axes;
    axes = 0;
    for (int a = IR_AXIS_NONE + 1; a < IR_NUM_AXES; a++)
        if (given & (1u << a))
            axes |= ir_axis_digits((ir_axis)a);
    const ir_axis *v = view_of(axes);
    if (!v)
        return 0;
    long long stride[VIEW_DIGITS], base = world_rank;
    int digit[VIEW_DIGITS], n = 1;
    digits(mesh, v, world_rank, stride, digit);
    for (int k = 0; k < VIEW_DIGITS; k++)
        if (axes & (1u << v[k])) {
            base -= digit[k] * stride[k];
            n *= mesh->degree[v[k]];
        }
    /* member i: i's mixed-radix digits on the group's axes, fastest first (so ranks ascend) */
    for (int i = 0; i < n && i < max_ranks; i++) {
        long long r = base;
        for (int k = 0, rest = i; k < VIEW_DIGITS; k++)
            if (axes & (1u << v[k])) {
                r += rest % mesh->degree[v[k]] * stride[k];
                rest /= mesh->degree[v[k]];
            }
        ranks[i] = (int)r;
    }
    return n;
}

void ir_mesh_group_name(unsigned axes, char *buf, size_t len)
{
    int n = 0;
    buf[0] = '\0';
    for (int a = 1; a < IR_NUM_AXES; a++)
        if (axes & (1u << a))
            n += snprintf(buf + n, n < (int)len ? len - n : 0, "%s%s", n ? "_" : "", ir_axis_name((ir_axis)a));
}

/* parallel.c — the rank's layout and communicators (see parallel.h). */
#include "parallel.h"

#include <stdio.h>
#include <stdlib.h>

static rt_comm *axis_comms[IR_NUM_AXES]; /* what rt_parallel_comm hands the kernels */

rt_comm *rt_parallel_comm(ir_axis axis) { return axis < IR_NUM_AXES ? axis_comms[axis] : NULL; }

void rt_parallel_init(rt_parallel *par, rt_program *p)
{
    char err[1024];
    *par = (rt_parallel){.dp = (int)ir_config_int(p->m, "data_parallel_size", 1)};
    if (!rt_rank_env_detect(&par->env, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: %s\n", err);
        exit(2);
    }
    rt_mesh mesh = {.tp = 1, .cp = 1, .dp = par->dp, .pp = 1, .ep = 1};
    if (par->env.world_size != par->dp) {
        fprintf(stderr, "train_rank: error: launched with %d rank(s) (%s) but compiled for %d "
                        "(data_parallel_size %d); launch %d ranks (mpirun -np %d, torchrun --nproc-per-node %d, "
                        "train_rank --nproc-per-node %d) or recompile with --data-parallel-size %d\n",
                par->env.world_size, par->env.launcher, par->dp, par->dp, par->dp, par->dp, par->dp, par->dp,
                par->env.world_size);
        exit(2);
    }
    par->dp_rank = rt_mesh_coords(&mesh, par->env.rank).dp;
    if (par->dp == 1)
        return;
    par->world = p->dev->world_comm(p, &par->env, err, sizeof err);
    if (!par->world) {
        fprintf(stderr, "train_rank: error: cannot connect the %d ranks: %s\n", par->dp, err);
        exit(2);
    }
    axis_comms[IR_AXIS_DP] = rt_comm_mesh_group(par->world, &mesh, RT_AXIS_DP);
    par->scratch = p->dev->alloc(p, sizeof(float));
}

void rt_parallel_finish(rt_parallel *par)
{
    if (!par->world)
        return;
    rt_comm_free(axis_comms[IR_AXIS_DP]);
    axis_comms[IR_AXIS_DP] = NULL;
    rt_comm_free(par->world);
    par->world = NULL;
}

int64_t rt_parallel_sample(const rt_parallel *par, int it, int accum, int mb, int B, int b)
{
    int64_t global_batch = (int64_t)B * par->dp * accum;
    return (it - 1) * global_batch + ((int64_t)mb * par->dp + par->dp_rank) * B + b;
}

float rt_parallel_mean(rt_parallel *par, rt_program *p, float v)
{
    if (par->dp == 1)
        return v;
    p->dev->upload(p, par->scratch, &v, sizeof v);
    rt_all_reduce(axis_comms[IR_AXIS_DP], par->scratch, 1, IR_F32, RT_SUM, p->dev->queue(p));
    p->dev->download(p, &v, par->scratch, sizeof v);
    return v / par->dp;
}

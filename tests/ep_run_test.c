/* ep_run_test.c — expert parallelism against one rank, on CPU ranks (under mpirun -np N, N even):
 * the MoE layer of tests/ep_layer.ir through expert_parallel, autodiff and the memory plan twice,
 * at ep 2 x dp N (each rank one micro-batch of its own tokens) and on one rank (the N micro-batches
 * accumulated, as dp = 1 runs them). Each rank's loss must be the single rank's on its micro-batch,
 * the dense gradients summed over the ranks and the expert gradients summed over edp (what
 * data_parallel reduces) the single rank's, this rank's experts' rows of them (1e-5); and the memory
 * report counts the all-to-all's receive buffers at the exact worst case.
 * usage: ep_run_test MODULE.ir */
#include "ir/ir.h"
#include "passes/passes.h"
#include "runtime/parallel.h"
#include "runtime/program.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/os.h"
#include "tests/check.h"

enum { TOKENS = 6, VOCAB = 16, EP = 2 };

/* Micro-batch mb's tokens and targets. */
static void batch_of(int mb, int32_t *tokens, int32_t *targets)
{
    for (int i = 0; i < TOKENS; i++)
        tokens[i] = (mb * 7 + i * 5 + (mb == 1 ? 3 * i * i : 0)) % VOCAB, targets[i] = (mb * 3 + i * 11) % VOCAB;
}

/* The memory report's all-to-all line: the four receive buffers of the step (the dispatch's and
 * the combine's, forward and backward) at the exact worst case, f32[ep 6 min(2, 4/ep), 8] and
 * the routed rows f32[12, 8]. */
static void check_memory(const ir_module *m, int ep)
{
    mcc_memory_breakdown b = mcc_memory_of(m);
    int64_t worst = (int64_t)ep * TOKENS * (2 < 4 / ep ? 2 : 4 / ep) * 8 * 4, routed = 12 * 8 * 4;
    CHECK(b.a2a_count == 4 && b.a2a_bytes == 2 * worst + 2 * routed && b.a2a_capacity_bytes == 0,
          "all-to-all buffers: %d of %lld bytes (%lld by capacity), want 4 of %lld", b.a2a_count, (long long)b.a2a_bytes,
          (long long)b.a2a_capacity_bytes, (long long)(2 * worst + 2 * routed));
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    mcc_memory_print(&b, out);
    fclose(out);
    CHECK(strstr(text, "all-to-all buffers") && strstr(text, "sized by the exact worst case"),
          "the memory report does not say how the all-to-all buffers were sized:\n%s", text);
    free(text);
}

/* The module's text after the passes, compiled for dp x ep (accum micro-batches a step). */
static char *plan_of(const char *text, int dp, int ep, int accum)
{
    char err[1024];
    ir_module *m = ir_parse_module(text, err, sizeof err);
    mcc_pass_options opts = {.target = mcc_target_by_name("cpu")};
    if (m) {
        ir_cfg_set_int(m, IR_CFG_DATA_PARALLEL_SIZE, dp);
        ir_cfg_set_int(m, IR_CFG_EXPERT_MODEL_PARALLEL_SIZE, ep);
        ir_cfg_set_int(m, IR_CFG_ACCUM_STEPS, accum);
    }
    if (!m || !pass_expert_parallel(m, &opts, err, sizeof err) || !pass_autodiff(m, &opts, err, sizeof err) ||
        !pass_memory_plan(m, &opts, err, sizeof err) || !ir_verify(m, err, sizeof err)) {
        fprintf(stderr, "FAIL: dp %d ep %d: %s\n", dp, ep, err);
        exit(1);
    }
    if (ep > 1)
        check_memory(m, ep);
    char *plan = ir_print_module(m);
    ir_module_free(m);
    return plan;
}

static rt_program *load(const char *plan, long long world_rank)
{
    char err[1024];
    rt_program *p = rt_program_load(plan, &rt_cpu_device, NULL, world_rank, err, sizeof err);
    if (!p) {
        fprintf(stderr, "FAIL: the plan does not load: %s\n", err);
        exit(1);
    }
    rt_program_init_params(p, 1234);
    return p;
}

static int io(const rt_program *p, ir_op op, ir_role_kind role) { return rt_program_find(p, 0, op, ir_role_of(role)); }

static float run(rt_program *p, int mb)
{
    int32_t tokens[TOKENS], targets[TOKENS];
    float loss;
    batch_of(mb, tokens, targets);
    rt_program_set_input(p, 0, io(p, IR_OP_INPUT, IR_ROLE_TOKENS), tokens, sizeof tokens);
    rt_program_set_input(p, 0, io(p, IR_OP_INPUT, IR_ROLE_TARGETS), targets, sizeof targets);
    rt_program_run(p, 0);
    rt_program_get_output(p, 0, io(p, IR_OP_OUTPUT, IR_ROLE_LOSS), &loss, sizeof loss);
    return loss;
}

/* Gradient global `name` of p into a new host buffer; its element count in *n. */
static float *grad_of(rt_program *p, const char *name, int64_t *n)
{
    int g = ir_global_find(p->m, name);
    *n = ir_numel(&p->m->globals[g].type);
    float *h = malloc(sizeof(float) * (size_t)*n);
    rt_program_read_global(p, g, h);
    return h;
}

/* got[n] against want[n] (from element `first` of want): relative error of the whole <= 1e-5. */
static void compare(int w, const char *name, const float *got, const float *want, int64_t n)
{
    double err2 = 0, ref2 = 0;
    for (int64_t i = 0; i < n; i++)
        err2 += (double)(got[i] - want[i]) * (got[i] - want[i]), ref2 += (double)want[i] * want[i];
    double rel = sqrt(err2 / (ref2 > 0 ? ref2 : 1));
    CHECK(rel <= 1e-5 && ref2 > 0, "rank %d: %s relative error %.2e against the single rank (norm %g)", w, name, rel,
          sqrt(ref2));
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return fprintf(stderr, "usage: ep_run_test MODULE.ir\n"), 2;
    ir_ops_init();
    char err[1024];
    size_t len;
    char *text = os_read_file(argv[1], &len, err, sizeof err);
    if (!text)
        return fprintf(stderr, "FAIL: %s\n", err), 1;
    rt_rank_env env = rt_rank_env_or_exit();
    int w = env.rank, n = env.world_size;
    char *par_plan = plan_of(text, n, EP, 1), *ref_plan = plan_of(text, 1, 1, n);
    rt_program *par = load(par_plan, w), *ref = load(ref_plan, 0);
    rt_parallel pl;
    rt_parallel_init(&pl, par);
    int e = par->coord[IR_AXIS_EP];

    float loss = run(par, w), want = 0;
    for (int mb = 0; mb < n; mb++) {
        float l = run(ref, mb);
        want = mb == w ? l : want;
    }
    CHECK(fabsf(loss - want) <= 1e-5f * fabsf(want), "rank %d: loss %.7g, the single rank's on its micro-batch %.7g",
          w, loss, want);
    const char *dense[] = {"table.grad", "router.grad"}, *experts[] = {"experts.up.grad", "experts.down.grad"};
    for (int k = 0; k < 2; k++) {
        int64_t np, nr;
        float *got = grad_of(par, dense[k], &np), *ref_grad = grad_of(ref, dense[k], &nr);
        rt_all_reduce(pl.world, got, (size_t)np, IR_F32, RT_SUM, NULL); /* data_parallel's sum over dp */
        compare(w, dense[k], got, ref_grad, nr);
        free(got);
        free(ref_grad);
        got = grad_of(par, experts[k], &np), ref_grad = grad_of(ref, experts[k], &nr);
        CHECK(np * EP == nr, "rank %d: %s holds %lld of %lld elements, want 1/%d", w, experts[k], (long long)np,
              (long long)nr, EP);
        rt_comm *edp = rt_parallel_comm(IR_AXIS_EDP);
        if (edp)
            rt_all_reduce(edp, got, (size_t)np, IR_F32, RT_SUM, NULL); /* data_parallel's sum over edp */
        compare(w, experts[k], got, ref_grad + e * np, np); /* this rank's experts: rows [e E/ep, (e+1) E/ep) */
        free(got);
        free(ref_grad);
    }
    if (failures) {
        fprintf(stderr, "rank %d: %d check(s) failed\n", w, failures);
        exit(1); /* before MPI_Finalize: mpirun then reports this rank's failure */
    }
    rt_parallel_finish(&pl, par);
    rt_program_free(par);
    rt_program_free(ref);
    free(par_plan);
    free(ref_plan);
    free(text);
    printf("rank %d: expert parallel step equals the single rank (loss %.6f)\n", w, loss);
    return 0;
}

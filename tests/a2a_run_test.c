/* a2a_run_test.c — the all_to_all_v op in a plan on CPU ranks (under mpirun -np 4): the hand-written
 * module of tests/passes/all_to_all_v.ir through autodiff and the memory plan, loaded by each rank
 * (tp 2 x dp 2, ep 2: ep groups {0,2} and {1,3}), run once with rank-dependent x and splits
 * (uneven, some runs empty). Checks the rows received (their order, the zero rows past them),
 * came, and x's gradient: each sent row's gradient is the receiver's cross-entropy gradient of
 * that row, which only the transposed all-to-all (splits swapped) brings back; unsent rows get 0.
 * usage: a2a_run_test MODULE.ir */
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

enum { ROWS = 6, COLS = 4, ROOM = 12, EP = 2, RUNS = 2 };

static float x_value(int w, int i, int c) { return (float)((w * 24 + i * 4 + c) % 17) * 0.25f - 2.0f; }
static int target_of(int w, int i) { return (w + i) % COLS; }

/* splits[q][s] of world rank w: uneven, some 0, at most ROWS in all */
static void splits_of(int w, int32_t s[EP][RUNS])
{
    int left = ROWS;
    for (int q = 0; q < EP; q++)
        for (int r = 0; r < RUNS; r++) {
            int v = (w * 5 + q * 3 + r * 7) % 4;
            s[q][r] = v < left ? v : left;
            left -= s[q][r];
        }
}

/* Where the rows received by ep rank `me` of the group `members` came from: sender world rank and
 * row, in the packed order (sender 0's runs first). Returns how many. */
static int received_from(const int *members, int me, int *from_w, int *from_row)
{
    int n = 0;
    for (int q = 0; q < EP; q++) {
        int32_t s[EP][RUNS];
        splits_of(members[q], s);
        int first = 0; /* the sender's rows before its run (me, 0) */
        for (int k = 0; k < me * RUNS; k++)
            first += s[k / RUNS][k % RUNS];
        for (int r = 0; r < RUNS; r++)
            for (int i = 0; i < s[me][r]; i++)
                from_w[n] = members[q], from_row[n++] = first++;
    }
    return n;
}

/* The cross-entropy gradient (seed 1/dp: autodiff's) of received row k on a rank whose rows
 * came from (from_w, from_row), n of them, ROOM in all (the rest zero rows). */
static float dr_value(int w, const int *from_w, const int *from_row, int n, int k, int c)
{
    float row[COLS], mx = -INFINITY, sum = 0;
    for (int j = 0; j < COLS; j++)
        row[j] = k < n ? x_value(from_w[k], from_row[k], j) : 0.0f, mx = fmaxf(mx, row[j]);
    for (int j = 0; j < COLS; j++)
        sum += expf(row[j] - mx);
    return (expf(row[c] - mx) / sum - (c == target_of(w, k) ? 1.0f : 0.0f)) / ROOM * 0.5f;
}

/* The test's own inputs and outputs (splits, received, came) have no role: the test finds them by
 * their @name, as no runtime code does. */
static int io_named(const rt_program *p, ir_op op, const char *name)
{
    const ir_func *f = p->m->funcs[0];
    for (int i = 0; i < f->ninstrs; i++)
        if (f->instrs[i].op == op && !strcmp(f->instrs[i].sym, name))
            return i;
    fprintf(stderr, "a2a_run_test: the plan has no %s @%s\n", ir_ops[op].name, name);
    exit(1);
}

static rt_program *load(const char *path, long long w)
{
    char err[1024];
    size_t len;
    char *text = os_read_file(path, &len, err, sizeof err);
    ir_module *m = text ? ir_parse_module(text, err, sizeof err) : NULL;
    mcc_pass_options opts = {.target = mcc_target_by_name("cpu")};
    if (!m || !pass_autodiff(m, &opts, err, sizeof err) || !pass_memory_plan(m, &opts, err, sizeof err)) {
        fprintf(stderr, "FAIL: %s: %s\n", path, err);
        exit(1);
    }
    char *plan = ir_print_module(m);
    rt_program *p = rt_program_load(plan, &rt_cpu_device, NULL, w, err, sizeof err);
    if (!p) {
        fprintf(stderr, "FAIL: the plan does not load: %s\n", err);
        exit(1);
    }
    free(plan);
    free(text);
    ir_module_free(m);
    return p;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return fprintf(stderr, "usage: a2a_run_test MODULE.ir\n"), 2;
    ir_ops_init();
    rt_rank_env env = rt_rank_env_or_exit();
    int w = env.rank;
    rt_program *p = load(argv[1], w);
    rt_parallel par;
    rt_parallel_init(&par, p);
    int members[4];
    CHECK(ir_mesh_group(&par.mesh, 1u << IR_AXIS_EP, w, members, 4) == EP, "ep group of %d", EP);
    int me = members[0] == w ? 0 : 1;

    float x[ROWS][COLS], got[ROOM][COLS], grad[ROWS][COLS];
    int32_t splits[EP][RUNS], came[EP][RUNS], targets[ROOM];
    for (int i = 0; i < ROWS; i++)
        for (int c = 0; c < COLS; c++)
            x[i][c] = x_value(w, i, c);
    for (int k = 0; k < ROOM; k++)
        targets[k] = target_of(w, k);
    splits_of(w, splits);
    rt_program_write_global(p, ir_global_find(p->m, "x"), x);
    rt_program_set_input(p, 0, io_named(p, IR_OP_INPUT, "splits"), splits, sizeof splits);
    rt_program_set_input(p, 0, io_named(p, IR_OP_INPUT, "targets"), targets, sizeof targets);
    rt_program_run(p, 0);
    rt_program_get_output(p, 0, io_named(p, IR_OP_OUTPUT, "received"), got, sizeof got);
    rt_program_get_output(p, 0, io_named(p, IR_OP_OUTPUT, "came"), came, sizeof came);
    rt_program_read_global(p, ir_global_find(p->m, "x.grad"), grad);

    int from_w[ROOM], from_row[ROOM], n = received_from(members, me, from_w, from_row);
    for (int q = 0; q < EP; q++) {
        int32_t s[EP][RUNS];
        splits_of(members[q], s);
        for (int r = 0; r < RUNS; r++)
            CHECK(came[q][r] == s[me][r], "rank %d: came[%d][%d] = %d, want %d", w, q, r, came[q][r], s[me][r]);
    }
    for (int k = 0; k < ROOM; k++)
        for (int c = 0; c < COLS; c++) {
            float want = k < n ? x_value(from_w[k], from_row[k], c) : 0.0f;
            CHECK(got[k][c] == want, "rank %d: received row %d [%d] = %g, want %g (%s)", w, k, c, got[k][c], want,
                  k < n ? "a sent row" : "past the rows received: zero");
        }
    /* x's row i went to some ep rank q's buffer at position k: its gradient is that rank's dr[k] */
    float want[ROWS][COLS] = {{0}};
    for (int q = 0; q < EP; q++) {
        int fw[ROOM], fr[ROOM], nq = received_from(members, q, fw, fr);
        for (int k = 0; k < nq; k++)
            if (fw[k] == w)
                for (int c = 0; c < COLS; c++)
                    want[fr[k]][c] = dr_value(members[q], fw, fr, nq, k, c);
    }
    for (int i = 0; i < ROWS; i++)
        for (int c = 0; c < COLS; c++)
            CHECK(fabsf(grad[i][c] - want[i][c]) <= 1e-6f, "rank %d: x.grad[%d][%d] = %g, want %g", w, i, c, grad[i][c],
                  want[i][c]);
    if (failures) {
        fprintf(stderr, "rank %d: %d check(s) failed\n", w, failures);
        exit(1); /* before MPI_Finalize: mpirun then reports this rank's failure */
    }
    rt_parallel_finish(&par, p);
    rt_program_free(p);
    printf("rank %d: all_to_all_v plan ok (%d rows received)\n", w, n);
    return 0;
}

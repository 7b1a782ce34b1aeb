/* train_main.c — the train_rank main: loads the plan compiled into the executable, opens the
 * Megatron GPT datasets (train and valid splits), initialises parameters and runs the plan's
 * schedule programs, `train` for each of --train-iters iterations (train_step.c) and `eval` for
 * validation every --eval-interval, a log line (train_log.c) every --log-interval, a clean stop
 * after the iteration in flight on SIGTERM/SIGINT, checkpoints (--save, --load: checkpoint_io.c).
 * `--dump-dir` writes what the numerics tests compare (train_dumps.c). Under a parallel layout
 * each rank runs the plan of its tensor-parallel rank on its share of every batch; rank 0 logs
 * and writes the dumps, with split tensors gathered whole. The flags: train_flags.c. */
#include "train.h"

#include "common/cli.h"
#include "common/knobs.h"
#include "common/os.h"
#include "host_optimizer.h"
#include "launch.h"
#include "trace.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* A flag given on the command line, else the plan's value of the spec field. */
static int flag_or_plan(int flag, int plan) { return flag >= 0 ? flag : plan; }

/* ---- start-up ------------------------------------------------------------------------------ */

/* The validations of iterations start+1 .. iters: every --eval-interval and the last. */
static int evals_ahead(const train_run *r)
{
    if (r->start >= r->iters)
        return 0;
    return r->iters / r->eval_interval - r->start / r->eval_interval + (r->iters % r->eval_interval != 0);
}

/* The train and valid splits the run consumes, built after the load as Megatron builds its
 * datasets: the valid positions continue from the checkpoint's validations (train_evaluate), and
 * those need not be the ones iterations 1 .. start would have made (each run also validates at its
 * own last iteration, so a finished run extended with a longer --train-iters has one more), so the
 * valid split holds the checkpoint's validations and this run's. Validation needs a valid split
 * with documents: when --split leaves it none, the run trains without validation and says why. */
static rt_gpt_data *open_data(train_run *r)
{
    rt_gpt_data_config *c = &r->a.data;
    int64_t batch = (int64_t)r->B * r->accum * r->par.mesh.degree[IR_AXIS_DP];
    int ahead = evals_ahead(r), evals = ahead ? r->evals_done + ahead : 0;
    c->seq_length = r->T;
    c->seed = r->cfg.seed;
    c->mock_vocab = r->cfg.vocab_size;
    c->log = r->writer ? stderr : NULL; /* the indices' memory and a long build's progress, once */
    c->num_samples[RT_SPLIT_TRAIN] = (int64_t)r->iters * batch;
    c->num_samples[RT_SPLIT_VALID] = (int64_t)evals * r->eval_iters * batch;
    char err[1024], why[1024];
    rt_gpt_data *d = rt_gpt_data_open(c, err, sizeof err);
    if (!d && r->eval_iters) {
        snprintf(why, sizeof why, "%s", err);
        c->num_samples[RT_SPLIT_VALID] = 0;
        if ((d = rt_gpt_data_open(c, err, sizeof err))) {
            fprintf(stderr, "train_rank: warning: no validation (%s); --eval-iters 0 silences this\n", why);
            r->eval_iters = 0;
        }
    }
    if (!d) {
        fprintf(stderr, "train_rank: error: %s\n", err);
        exit(1);
    }
    if (!rt_gpt_data_check_tokens(d, r->cfg.vocab_size, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: --data-path %s\n", err);
        exit(1);
    }
    return d;
}

static int func_of_kind(const ir_module *m, ir_func_kind k)
{
    int i = ir_func_of_kind(m, k);
    if (i < 0) {
        fprintf(stderr, "train_rank: error: the compiled plan has no function of kind %s; recompile with this mcc\n",
                ir_func_kinds[k].name);
        exit(1);
    }
    return i;
}

/* The plan's schedule programs as this train_rank runs them: both there. */
static void check_schedule(const ir_module *m)
{
    for (int p = 0; p < IR_NUM_PROGS; p++)
        if (!m->progs[p].nsteps) {
            fprintf(stderr, "train_rank: error: the compiled plan has no `schedule %s` program; recompile with this "
                            "mcc\n", ir_prog_names[p]);
            exit(1);
        }
}

/* The plan as this rank runs it, and its config values, range-checked. */
static void load_plan(train_run *r)
{
    char err[1024];
    r->p = rt_program_load(mcc_plan_text, mcc_plan_device, mcc_plan_image_size ? mcc_plan_image : NULL,
                           rt_rank_env_or_exit().rank, err, sizeof err);
    if (!r->p || !rt_train_config_read(r->p->m, &r->cfg, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: the compiled plan is invalid (%s); recompile with this mcc\n", err);
        exit(1);
    }
    rt_host_attach(r->p);
}

/* An MoE model's router statistics (moe_stats.h): under pipeline parallelism the model's,
 * whichever stages hold its MoE layers. Collective: every rank calls. */
static void open_moe_stats(train_run *r)
{
    rt_moe_stats_open(&r->moe, r->p);
    if (!rt_parallel_comm(IR_AXIS_PP))
        return;
    bool *any[] = {&r->moe.moe, &r->moe.has_kept};
    for (size_t k = 0; k < sizeof any / sizeof any[0]; k++)
        *any[k] = rt_parallel_mean_of(&r->par, r->p, *any[k] ? 1.0f : 0.0f, RT_MAX) > 0;
    int *layers[] = {&r->moe.aux_layers, &r->moe.z_layers};
    for (size_t k = 0; k < sizeof layers / sizeof layers[0]; k++)
        *layers[k] = (int)lrintf(rt_parallel_mean(&r->par, r->p, (float)*layers[k]));
}

/* Multi-token prediction's loss outputs, one a depth, in the training function that has them: the
 * step function, or under pipeline parallelism the last stage's forward (the depths' count agreed
 * over the stages: the others add 0 to the step's sums). Collective: every rank calls. */
static void open_mtp_losses(train_run *r)
{
    train_mtp_losses *t = &r->mtp;
    t->func = -1;
    for (int f = 0; f < r->m->nfuncs && t->func < 0; f++) {
        ir_func_kind kind = r->m->funcs[f]->kind;
        if ((kind == IR_FUNC_STEP || kind == IR_FUNC_FORWARD) &&
            rt_program_find(r->p, f, IR_OP_OUTPUT, ir_role_at(IR_ROLE_MTP_LOSS, 0)) >= 0)
            t->func = f;
    }
    while (t->func >= 0 && rt_program_find(r->p, t->func, IR_OP_OUTPUT, ir_role_at(IR_ROLE_MTP_LOSS, t->depths)) >= 0)
        t->depths++;
    if (rt_parallel_comm(IR_AXIS_PP))
        t->depths = (int)lrintf(rt_parallel_mean_of(&r->par, r->p, (float)t->depths, RT_MAX));
    t->out = calloc((size_t)t->depths + 1, sizeof *t->out);
    t->step = calloc((size_t)t->depths + 1, sizeof *t->step);
    t->window = calloc((size_t)t->depths + 1, sizeof *t->window);
    t->names = calloc((size_t)t->depths + 1, sizeof *t->names);
    for (int k = 0; k < t->depths; k++) {
        t->out[k] = t->func >= 0 ? rt_program_find(r->p, t->func, IR_OP_OUTPUT, ir_role_at(IR_ROLE_MTP_LOSS, k)) : -1;
        snprintf(t->names[k], sizeof t->names[k], "mtp_%d_loss", k + 1);
    }
}

/* The metrics file and TensorBoard's event file, written by rank 0. */
static void open_records(train_run *r)
{
    char err[1024];
    if (r->writer && r->a.metrics_file && !rt_metrics_open(&r->metrics, r->a.metrics_file, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: %s\n", err);
        exit(1);
    }
    if (r->writer && r->a.tensorboard_dir && !(r->tb = rt_tb_open(r->a.tensorboard_dir, err, sizeof err))) {
        fprintf(stderr, "train_rank: error: --tensorboard-dir: %s\n", err);
        exit(1);
    }
}

static void setup_run(train_run *r, int argc, char **argv)
{
    train_args given = train_parse_args(argc, argv, false); /* its errors and actions before the device starts */
    rt_gpt_data_config_free(&given.data);
    load_plan(r);
    int nargs;
    r->args = train_with_baked_flags(r->p->m, argc, argv, &nargs, &r->args_text);
    r->a = train_parse_args(nargs, r->args, true);
    r->a.ckpt.plan_text = mcc_plan_text;
    const ir_module *m = r->m = r->p->m;
    rt_parallel_init(&r->par, r->p);
    r->writer = rt_parallel_is_root(&r->par);
    r->stage_writer = !r->par.coord[IR_AXIS_TP] && !r->par.coord[IR_AXIS_CP] && !r->par.coord[IR_AXIS_DP];
    if (!r->writer && !freopen("/dev/null", "w", stdout)) /* rank 0 logs for all */
        exit(1);
    r->B = r->cfg.micro_batch_size;
    r->T = r->cfg.seq_length;
    r->accum = r->cfg.accum_steps;
    r->iters = flag_or_plan(r->a.train_iters, r->cfg.train_iters);
    r->eval_interval = flag_or_plan(r->a.eval_interval, r->cfg.eval_interval);
    r->eval_iters = flag_or_plan(r->a.eval_iters, r->cfg.eval_iters);
    r->a.log_interval = flag_or_plan(r->a.log_interval, r->cfg.log_interval);
    check_schedule(m);
    r->norm = func_of_kind(m, IR_FUNC_GRAD_NORM);
    r->zero = func_of_kind(m, IR_FUNC_ZERO_GRADS);
    char err[1024];
    if (!rt_lr_from_config(m, r->iters, &r->lr, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: %s\n", err);
        exit(1);
    }
    double L = (double)r->cfg.num_layers, d = (double)r->cfg.hidden_size;
    /* an MoE model's tokens each multiply by their top-k experts only: MFU counts those */
    double N = (double)((r->cfg.num_active_params ? r->cfg.num_active_params : r->cfg.num_params) -
                        r->cfg.num_position_params);
    /* attention's QK^T and PV a token, forward and backward: 6 T (q and k's width + v's) over the heads,
       12 T d where both are d; multi-latent attention's heads are their own widths */
    const rt_train_config *c = &r->cfg;
    double widths = c->v_head_dim ? (double)c->num_attention_heads * (c->qk_head_dim + c->qk_pos_emb_head_dim +
                                                                      c->v_head_dim)
                                  : 2 * d;
    r->flops_per_token = 6 * N + 6 * L * widths * r->T;
    open_moe_stats(r);
    open_mtp_losses(r);
    const int64_t bt[2] = {r->B, r->T};
    r->bt_type = ir_tensor(IR_I32, 2, bt);
    r->tokens = malloc(ir_bytes(&r->bt_type));
    r->targets = malloc(ir_bytes(&r->bt_type));
    r->sample = malloc(sizeof(int32_t) * (size_t)(r->T + 1));
    open_records(r);
}

static void finish_run(train_run *r)
{
    if (r->a.dump_dir)
        train_dumps_finish(r);
    char err[1024];
    if (r->metrics.path && !rt_metrics_close(&r->metrics, err, sizeof err)) {
        fprintf(stderr, "train_rank: error: %s\n", err);
        exit(1);
    }
    if (r->tb)
        rt_tb_close(r->tb);
    free(r->sample);
    for (int split = RT_SPLIT_TRAIN; split <= RT_SPLIT_VALID; split++)
        rt_sampler_free(&r->sampler[split]);
    free(r->tokens);
    rt_moe_stats_free(&r->moe);
    free(r->mtp.out), free(r->mtp.step), free(r->mtp.window), free(r->mtp.names);
    free(r->targets);
    rt_gpt_data_close(r->data);
    rt_gpt_data_config_free(&r->a.data);
    free(r->args);
    free(r->args_text);
    rt_parallel_finish(&r->par, r->p);
    rt_program_free(r->p);
}

/* ---- stopping on SIGTERM/SIGINT ----------------------------------------------------------- */

static volatile sig_atomic_t train_signal; /* the stop signal caught, or 0 */

static void train_on_signal(int sig) { train_signal = sig; }

/* From here on SIGTERM (a scheduler's preemption, a launcher's forwarded signal) and SIGINT
 * (Ctrl-C) stop the run after the iteration in flight, its records written, instead of killing
 * it mid-step. SA_RESTART: the step's I/O and collectives go on undisturbed. A signal ignored
 * when we started (SIGINT of a background job) stays ignored. */
static void catch_stop_signals(void)
{
    struct sigaction sa = {.sa_handler = train_on_signal, .sa_flags = SA_RESTART}, old;
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGTERM, SIGINT};
    for (int i = 0; i < 2; i++)
        if (sigaction(sigs[i], &sa, &old) == 0 && old.sa_handler == SIG_IGN)
            sigaction(sigs[i], &old, NULL);
}

/* The stop signal any rank caught, or 0. A forwarded signal reaches the ranks at different
 * points of a step, and every rank must stop after the same iteration (one that went on would
 * wait for the others in its next collective): so the ranks take the maximum over the world at
 * each step's end. Collective: every rank calls. */
static int stop_signal(train_run *r)
{
    return (int)rt_parallel_world(&r->par, r->p, (float)train_signal, RT_MAX);
}

/* ---- the loop ------------------------------------------------------------------------------ */

/* Saves the checkpoint of iteration it, with the run's counters. */
static void save_checkpoint(train_run *r, int it)
{
    rt_ckpt_counters c = {it, (int64_t)it * r->B * r->accum * r->cfg.dp, r->steps_applied, r->evals_done};
    rt_ckpt_save(&r->a.ckpt, r->p, &r->par, &c, &r->ckpt);
}

/* Whether --exit-duration-in-mins has passed on rank 0's clock, agreed by every rank (one
 * collective a step while the flag is given, as Megatron's). */
static bool duration_passed(train_run *r)
{
    double mins = r->a.ckpt.exit_duration_mins;
    if (!mins)
        return false;
    bool passed = r->writer && (os_now_s() - r->t_start) / 60.0 > mins;
    return rt_parallel_world(&r->par, r->p, passed ? 1.0f : 0.0f, RT_MAX) > 0;
}

/* --load (between initialisation and the first step): the loop then starts after the loaded
 * iteration. */
static void load_checkpoint(train_run *r)
{
    rt_ckpt_counters c = {0};
    if (!r->a.ckpt.load || !rt_ckpt_load(&r->a.ckpt, r->p, &r->par, &c))
        return;
    r->start = (int)c.iteration;
    r->steps_applied = (int)c.steps_applied;
    r->evals_done = (int)c.evals_done;
    if (r->start >= r->iters && r->writer)
        fprintf(stderr, "train_rank: note: the checkpoint loaded is at iteration %d, --train-iters is %d: nothing to "
                        "train\n", r->start, r->iters);
}

/* The train and valid splits' samplers (--dataloader-type, --no-data-sharding), built where
 * Megatron builds its loaders: after the load, from the samples the loaded run consumed. */
static void open_samplers(train_run *r)
{
    rt_sampler_kind kind = (rt_sampler_kind)r->a.dataloader_type;
    int dp = r->par.mesh.degree[IR_AXIS_DP];
    int64_t batch = (int64_t)r->B * r->accum * dp;
    const int64_t consumed[] = {[RT_SPLIT_TRAIN] = r->start * batch,
                                [RT_SPLIT_VALID] = (int64_t)r->evals_done * r->eval_iters * batch};
    for (int split = RT_SPLIT_TRAIN; split <= RT_SPLIT_VALID; split++) {
        int64_t total = rt_gpt_data_num_samples(r->data, split);
        char err[256];
        if (total && !rt_sampler_init(&r->sampler[split], kind, !r->a.no_data_sharding, total, consumed[split], r->B,
                                      dp, err, sizeof err)) {
            fprintf(stderr, "train_rank: error: %s\n", err);
            exit(1);
        }
    }
}

/* After iteration it: the commit of an asynchronous save whose writers are done; a checkpoint
 * every --save-interval, at --exit-interval or --exit-duration-in-mins, at the last iteration
 * and (--exit-signal-handler) on a stop signal, with --save. Returns whether the run stops here
 * for --exit-interval or --exit-duration-in-mins. */
static bool checkpoint_after(train_run *r, int it, int stop)
{
    const rt_ckpt_args *a = &r->a.ckpt;
    rt_ckpt_poll(r->p, &r->par, r->ckpt);
    bool exit_now = a->exit_interval && it % a->exit_interval == 0;
    if (duration_passed(r) && it < r->iters) {
        exit_now = true;
        if (r->writer)
            printf(" exiting program after %g minutes (--exit-duration-in-mins) at iteration %d\n", a->exit_duration_mins,
                   it);
    }
    if (a->save && ((a->save_interval && it % a->save_interval == 0) || it == r->iters || exit_now ||
                    (stop && a->exit_signal_handler)))
        save_checkpoint(r, it);
    return exit_now;
}

/* Iterations after the loaded one (start) to iters, or up to the one in flight when a stop signal
 * came or --exit-interval (*last: the last one run). Returns that signal, or 0. */
static int train_loop(train_run *r, double t_start, int *last)
{
    catch_stop_signals();
    train_log_window w = {0};
    *last = r->start;
    for (int it = r->start + 1; it <= r->iters; it++) {
        double t0 = os_now_s();
        char range[32];
        snprintf(range, sizeof range, "iteration %d", it);
        rt_trace_push(r->p, range);
        train_step_result s = train_step(r, it);
        rt_trace_pop(r->p);
        train_log_add(&w, &s, os_now_s() - t0);
        if (it == r->start + 1)
            train_log_first_step(r, t_start);
        int stop = stop_signal(r);
        if (it % r->a.log_interval == 0 || it == r->iters || stop) {
            train_log_line(r, it, &s, &w);
            w = (train_log_window){0};
        }
        /* a stop signal skips the validation due here (the stop is prompt) but passes over its
         * samples, so that a resume's validations read what the uninterrupted run's read */
        if (r->eval_iters && (it % r->eval_interval == 0 || it == r->iters)) {
            if (stop)
                r->evals_done++;
            else
                train_evaluate(r, it);
        }
        fflush(stdout);
        *last = it;
        if (checkpoint_after(r, it, stop) && !stop)
            return 0;
        if (stop)
            return stop;
    }
    return 0;
}

int main(int argc, char **argv)
{
    char err[1024];
    if (!knob_init(KNOB_TRAIN_RANK, err, sizeof err)) /* before the launcher: one message, not one a rank */
        return fprintf(stderr, "train_rank: error: %s\n", err), 2;
    int nargs;
    char **args = cli_split_equals(argc, argv, &nargs); /* --flag=value as --flag value */
    int nproc = rt_launch_nproc(nargs, args), code = 0;
    if (nproc) { /* this process starts N ranks of itself instead of training */
        code = rt_launch_local(nproc, nargs, args);
        cli_argv_free(args);
        return code;
    }
    /* A file size limit (ulimit -f) then fails the write, which names the file, instead of
     * killing the run without a word. */
    signal(SIGXFSZ, SIG_IGN);
    double t_start = os_now_s();
    train_run r = {0};
    setup_run(&r, nargs, args);
    rt_program_init_params(r.p, (uint64_t)r.cfg.seed);
    load_checkpoint(&r);
    r.data = open_data(&r);
    train_print_config(&r);
    open_samplers(&r);
    if (r.a.dump_dir)
        train_dumps_start(&r);
    r.t_start = t_start;
    int last = 0, sig = train_loop(&r, t_start, &last);
    rt_ckpt_finish(r.p, &r.par, &r.ckpt); /* the save in flight, written and committed */
    finish_run(&r);
    if (sig && r.writer) {
        fprintf(stderr, "train_rank: stopped by %s after iteration %d of %d", sig == SIGINT ? "SIGINT" : "SIGTERM", last,
                r.iters);
        if (r.a.metrics_file)
            fprintf(stderr, "; the metrics file %s has every record up to it", r.a.metrics_file);
        fprintf(stderr, "\n");
    }
    cli_argv_free(args);
    return sig ? 128 + sig : 0;
}

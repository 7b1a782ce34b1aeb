/* checkpoint_io.c — train_rank's checkpoints (checkpoint_io.h). A checkpoint holds the fp32
 * masters (ZeRO's master shards where the distributed optimizer keeps them), Adam's m and v (or
 * their shards), FP8 delayed scaling's amax histories (not loaded with --finetune or
 * --no-load-optim: the scales then start afresh) and the run's counters. Not the gradients (zero at a step boundary), not the
 * working copies (setup refreshes them from the masters), and no RNG state: dropout masks are
 * drawn from the seed and each sample's index, so the data position is the RNG state. */
#include "runtime/checkpoint_io.h"

#include "checkpoint/checkpoint.h"
#include "common/os.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole tensor's name under which global g is saved (save) or loaded (!save), and its role;
 * false for a global a checkpoint does not hold. A parameter is saved from and loaded into its
 * master shard where ZeRO keeps one (the parameter has no storage then; setup gathers the working
 * copy from the shards after a load). */
static bool ckpt_name(const ir_module *m, int g, bool save, char *name, size_t len, ck_role *role)
{
    const ir_global *gl = &m->globals[g];
    const char *param = m->globals[ir_global_param(m, g)].name;
    bool zero = ir_global_companion(m, ir_global_param(m, g), IR_GLOBAL_MASTER_SHARD) >= 0;
    switch (gl->kind) {
    case IR_GLOBAL_PARAM:
        if (zero)
            return false;
        *role = CK_ROLE_PARAM;
        break;
    case IR_GLOBAL_MASTER_SHARD:
        *role = CK_ROLE_PARAM;
        break;
    case IR_GLOBAL_ADAM_M:
    case IR_GLOBAL_ADAM_V:
        *role = gl->kind == IR_GLOBAL_ADAM_M ? CK_ROLE_ADAM_M : CK_ROLE_ADAM_V;
        snprintf(name, len, "%s.%s", param, ck_role_names[*role]);
        return true;
    case IR_GLOBAL_FP8_HISTORY: /* FP8 delayed scaling's state: loaded as optimizer state is */
        *role = CK_ROLE_FP8_HISTORY;
        break;
    case IR_GLOBAL_EXPERT_BIAS: /* MoE aux-loss-free balancing's state: likewise */
        *role = CK_ROLE_EXPERT_BIAS;
        break;
    default:
        return false;
    }
    snprintf(name, len, "%s", param);
    return true;
}

/* Whether this rank writes its part of g: one rank of those holding the same part, the first
 * along every axis of its view of the mesh the layout does not split (a replica): an expert
 * weight's (split over ep) tp, ep and edp, a dense tensor's tp, cp and dp (a ZeRO block over
 * dp_cp splits both: ir_axis_digits). A pipeline stage's tensors are its own (pp does not
 * replicate them), a shared parameter the first stage's. */
static bool writes_part(const rt_program *p, const int degree[IR_NUM_AXES], int g)
{
    const ir_layout *l = &p->m->globals[g].layout;
    bool expert = ir_layout_split(l, IR_AXIS_EP) != NULL;
    unsigned split = 0, replicas = ir_mesh_view(expert) & ~(1u << IR_AXIS_PP);
    for (int k = 0; k < l->nsplits; k++)
        split |= ir_axis_digits((ir_axis)l->splits[k].axis);
    for (int a = 1; a < IR_NUM_AXES; a++)
        if ((replicas & ~split & (1u << a)) && degree[a] > 1 && p->coord[a] != 0)
            return false;
    return !ir_param_held_elsewhere(p->m, g);
}

/* Every rank's ok, agreed: false on all when any failed (a rank that went on alone would wait
 * in its next collective). */
static bool all_ok(rt_parallel *par, rt_program *p, bool ok)
{
    return rt_parallel_world(par, p, ok ? 0.0f : 1.0f, RT_MAX) == 0.0f;
}

static void ckpt_exit(rt_parallel *par, rt_program *p, bool ok, const char *err)
{
    if (!ok)
        fprintf(stderr, "train_rank: error: %s\n", err);
    if (!all_ok(par, p, ok))
        exit(1);
}

/* Rank 0: the manifest's tensors (every global saved, whole) and the commit. */
static bool commit(const rt_ckpt_args *a, rt_program *p, const rt_parallel *par, const rt_ckpt_counters *c,
                   char *err, size_t errlen)
{
    const ir_module *m = p->m;
    ck_state s = {.iteration = c->iteration, .consumed_samples = c->consumed_samples,
                  .steps_applied = c->steps_applied, .evals_done = c->evals_done,
                  .seed = (uint64_t)ir_cfg_int(m, IR_CFG_SEED), .ranks = par->env.world_size};
    ir_axis_degrees(m, s.degree);
    char *model[2 * IR_CFG_COUNT]; /* the model's function: the plan's IR_CFG_MODEL keys */
    s.nmodel = ck_model_of(m, model);
    s.model = model;
    /* every pipeline stage's tensors, each once (a shared parameter is in two stages' modules) */
    int nstages = a->plan_text ? ir_text_stages(a->plan_text) : 1, most = 0;
    ir_module **stage = calloc((size_t)nstages, sizeof *stage);
    for (int k = 0; k < nstages; k++) {
        stage[k] = nstages == 1 ? (ir_module *)m : ir_parse_stage(a->plan_text, k, err, errlen);
        if (!stage[k]) {
            for (int j = 0; j < k; j++)
                ir_module_free(stage[j]);
            free(stage);
            return false;
        }
        most += stage[k]->nglobals;
    }
    ck_tensor *t = calloc((size_t)most + 1, sizeof *t);
    char (*names)[256] = calloc((size_t)most + 1, sizeof *names);
    int n = 0;
    for (int k = 0; k < nstages; k++)
        for (int g = 0; g < stage[k]->nglobals; g++) {
            if (!ckpt_name(stage[k], g, true, names[n], sizeof names[n], &t[n].role))
                continue;
            bool seen = false;
            for (int j = 0; j < n && !seen; j++)
                seen = !strcmp(names[j], names[n]);
            if (seen)
                continue;
            t[n].name = names[n];
            t[n].param = stage[k]->globals[ir_global_param(stage[k], g)].name;
            t[n].whole = ir_global_whole(stage[k], g, s.degree);
            n++;
        }
    bool ok = ck_commit(a->save, &s, n, t, a->save_retain, err, errlen);
    for (int k = 0; nstages > 1 && k < nstages; k++)
        ir_module_free(stage[k]);
    free(stage);
    free(t);
    free(names);
    return ok;
}

/* ---- saving: the copy to host memory, the write (inline or on the writer thread), the commit ---- */

/* One save: the host copy of this rank's parts, the write's result and, with --async-save, the
 * thread writing them. The host buffer is kept from save to save (the same size each time; page-
 * locked on a device that has such memory, so the copy runs at the link's speed). */
struct rt_ckpt_writer {
    rt_ckpt_args a;
    rt_ckpt_counters c;             /* of the save in flight */
    int rank, degree[IR_NUM_AXES], coord[IR_NUM_AXES];
    int n;
    ck_part *parts;
    int *global;                    /* parts[i] is of global[i] */
    char (*names)[256];
    unsigned char *host;            /* every part's bytes, one after another */
    size_t host_bytes;
    void (*free_host)(void *);      /* the device's, or NULL: free */
    bool pending;                   /* a save written, not yet committed */
    bool threaded;                  /* its write runs on thread */
    pthread_t thread;
    atomic_bool written;            /* the thread is done: ok, bytes, write_s, err are set */
    bool ok;
    uint64_t bytes;
    double blocking_s, write_s;
    char err[8192];
};

/* The write of one rank's files: all a writer thread does (no collective, no MPI call: MPI is
 * not initialised for threads, and NCCL's collectives are ordered by the main thread). */
static void *write_rank(void *arg)
{
    rt_ckpt_writer *w = arg;
    double t0 = os_now_s();
    w->ok = ck_write_rank(w->a.save, w->c.iteration, w->rank, w->degree, w->coord, w->n, w->parts, &w->bytes,
                          w->err, sizeof w->err);
    w->write_s = os_now_s() - t0;
    atomic_store(&w->written, true);
    return NULL;
}

/* This rank's parts of every saved global, copied from the device into w's host buffer: the time
 * the step loop waits for a save with --async-save. */
static void copy_to_host(rt_ckpt_writer *w, rt_program *p)
{
    const ir_module *m = p->m;
    if (!w->parts) {
        w->parts = calloc((size_t)m->nglobals + 1, sizeof *w->parts);
        w->global = calloc((size_t)m->nglobals + 1, sizeof *w->global);
        w->names = calloc((size_t)m->nglobals + 1, sizeof *w->names);
        for (int g = 0; g < m->nglobals; g++) {
            ck_role role;
            if (ckpt_name(m, g, true, w->names[w->n], sizeof w->names[w->n], &role) && writes_part(p, w->degree, g)) {
                w->parts[w->n] = (ck_part){w->names[w->n], m->globals[g].type, NULL, m->globals[g].layout, NULL, NULL};
                w->global[w->n++] = g;
                w->host_bytes += ir_bytes(&m->globals[g].type);
            }
        }
        bool pinned = p->dev->alloc_host != NULL;
        w->host = pinned ? p->dev->alloc_host(w->host_bytes + 1) : malloc(w->host_bytes + 1);
        w->free_host = pinned ? p->dev->free_host : NULL;
        for (size_t i = 0, off = 0; i < (size_t)w->n; off += ir_bytes(&w->parts[i++].part))
            w->parts[i].data = w->host + off;
    }
    for (int i = 0; i < w->n; i++)
        rt_program_read_global(p, w->global[i], (void *)w->parts[i].data);
}

static rt_ckpt_writer *writer_new(const rt_ckpt_args *a, rt_program *p, const rt_parallel *par)
{
    rt_ckpt_writer *w = calloc(1, sizeof *w);
    w->a = *a;
    w->rank = par->env.rank;
    ir_axis_degrees(p->m, w->degree);
    memcpy(w->coord, p->coord, sizeof w->coord);
    atomic_init(&w->written, false);
    return w;
}

/* The pending save's end: its write waited for, every rank's agreed, then rank 0's manifest and
 * the atomic commit, and the log line. t0 >= 0: a synchronous save begun then, whose blocking
 * time is all of it. Collective. */
static void commit_pending(rt_ckpt_writer *w, rt_program *p, rt_parallel *par, double t0)
{
    if (w->threaded)
        pthread_join(w->thread, NULL);
    w->pending = false;
    ckpt_exit(par, p, w->ok, w->err); /* every rank's file is whole before the manifest names them */
    char err[8192] = "";
    ckpt_exit(par, p, !rt_parallel_is_root(par) || commit(&w->a, p, par, &w->c, err, sizeof err), err);
    double total = rt_parallel_world(par, p, (float)w->bytes, RT_SUM);
    double s = rt_parallel_world(par, p, (float)w->write_s, RT_MAX); /* the slowest rank's write */
    if (t0 >= 0)
        w->blocking_s = os_now_s() - t0;
    char dir[4200];
    ck_iter_dir(w->a.save, w->c.iteration, false, dir, sizeof dir);
    printf(" saved checkpoint at iteration %lld to %s | blocking time (s): %.3f%s | %.0f bytes written in %.3f s at "
           "%.1f MB/s\n", (long long)w->c.iteration, dir, w->blocking_s,
           w->threaded ? " (the copy to host memory; written in the background)" : "", total, s,
           s > 0 ? total / s / 1e6 : 0.0);
    fflush(stdout);
}

/* --async-save's value: its flag, else on for a GPU plan (the copy to host memory is fast, the
 * write slow) and off for CPU ranks (their state is already in host memory). */
static bool async_save(const rt_ckpt_args *a, const rt_program *p)
{
    return a->async_save >= 0 ? a->async_save : p->dev->kind != RT_DEVICE_CPU;
}

void rt_ckpt_save(const rt_ckpt_args *a, rt_program *p, rt_parallel *par, const rt_ckpt_counters *c,
                  rt_ckpt_writer **wp)
{
    if (!*wp)
        *wp = writer_new(a, p, par);
    rt_ckpt_writer *w = *wp;
    if (w->pending) /* bounded: two saves never overlap */
        commit_pending(w, p, par, -1);
    double t0 = os_now_s();
    char err[8192] = "";
    ckpt_exit(par, p, !rt_parallel_is_root(par) || ck_begin(a->save, c->iteration, err, sizeof err),
              err); /* the .tmp exists */
    copy_to_host(w, p);
    w->c = *c;
    w->pending = true;
    w->threaded = async_save(a, p);
    atomic_store(&w->written, false);
    if (w->threaded && pthread_create(&w->thread, NULL, write_rank, w) == 0) {
        w->blocking_s = os_now_s() - t0;
        return; /* committed by rt_ckpt_poll or rt_ckpt_finish */
    }
    w->threaded = false; /* synchronous, or no thread could be made: the same write, here */
    write_rank(w);
    commit_pending(w, p, par, t0);
}

void rt_ckpt_poll(rt_program *p, rt_parallel *par, rt_ckpt_writer *w)
{
    if (!w || !w->pending) /* the same on every rank: saves and commits happen at agreed steps */
        return;
    bool behind = rt_parallel_world(par, p, atomic_load(&w->written) ? 0.0f : 1.0f, RT_MAX) > 0;
    if (!behind)
        commit_pending(w, p, par, -1);
}

void rt_ckpt_finish(rt_program *p, rt_parallel *par, rt_ckpt_writer **wp)
{
    rt_ckpt_writer *w = *wp;
    if (!w)
        return;
    if (w->pending)
        commit_pending(w, p, par, -1);
    if (w->free_host)
        w->free_host(w->host);
    else
        free(w->host);
    free(w->parts);
    free(w->global);
    free(w->names);
    free(w);
    *wp = NULL;
}

/* The checkpoint's model must compute this plan's function: every key of it the manifest records
 * (ir/config.def's IR_CFG_MODEL rows) the plan's value, not only the shapes (a padding, an epsilon,
 * a rope base). An earlier mcc's manifest records shapes alone: a note, and the shapes' check. */
static bool check_model(const rt_program *p, const rt_parallel *par, ck_reader *rd, char *err, size_t errlen)
{
    char why[1024];
    if (!ck_model_recorded(&rd->state) && rt_parallel_is_root(par))
        fprintf(stderr, "train_rank: note: --load %s: the manifest (an earlier mcc's) records the model's shapes "
                "alone: its norms' epsilon, rope and the like are taken to be this plan's\n", rd->dir);
    if (ck_model_same(&rd->state, p->m, IR_CFG_COUNT, "this plan", why, sizeof why))
        return true;
    return snprintf(err, errlen, "%s/manifest.json: the checkpoint is of another model: %s; compile the plan with "
                    "the spec (and flags) the checkpoint was trained with", rd->dir, why), false;
}

/* Whether a load fills the global of role and checkpoint name: a parameter always; optimizer state
 * and FP8 histories unless --finetune or --no-load-optim; an MoE layer's expert bias (the router's
 * part of the model, as Megatron's state_dict holds router.expert_bias) also under --finetune where
 * the checkpoint has it (an import of DeepSeek-V3's e_score_correction_bias: mcc convert --from hf). */
static bool loads(const rt_ckpt_args *a, ck_reader *rd, ck_role role, const char *name)
{
    if (role == CK_ROLE_PARAM || !(a->no_load_optim || a->finetune))
        return true;
    return role == CK_ROLE_EXPERT_BIAS && a->finetune && ck_find(rd, name) != NULL;
}

/* Every global a load fills must be in the checkpoint with its whole shape. */
static bool check_shapes(const rt_ckpt_args *a, const rt_program *p, ck_reader *rd, char *err, size_t errlen)
{
    const ir_module *m = p->m;
    int degree[IR_NUM_AXES];
    ir_axis_degrees(m, degree);
    for (int g = 0; g < m->nglobals; g++) {
        char name[256], cs[96], ms[96];
        ck_role role;
        if (!ckpt_name(m, g, false, name, sizeof name, &role) || !loads(a, rd, role, name))
            continue;
        const ck_tensor *t = ck_find(rd, name);
        ir_type whole = ir_global_whole(m, g, degree);
        ir_type_str(&whole, ms, sizeof ms);
        if (!t)
            return snprintf(err, errlen, "%s/manifest.json: no tensor %s (this model's is %s): the checkpoint is of "
                            "another model", rd->dir, name, ms), false;
        ir_type_str(&t->whole, cs, sizeof cs);
        if (!ir_type_eq(&t->whole, &whole))
            return snprintf(err, errlen, "%s/manifest.json: tensor %s is %s in the checkpoint, but %s in this model: "
                            "the checkpoint is of another model or shape", rd->dir, name, cs, ms), false;
    }
    return true;
}

/* This rank's part of every global the load fills, from the whole tensors. */
static bool load_globals(const rt_ckpt_args *a, rt_program *p, ck_reader *rd, char *err, size_t errlen)
{
    const ir_module *m = p->m;
    int degree[IR_NUM_AXES];
    ir_axis_degrees(m, degree);
    bool ok = true;
    for (int g = 0; ok && g < m->nglobals; g++) {
        char name[256];
        ck_role role;
        if (!ckpt_name(m, g, false, name, sizeof name, &role) || !loads(a, rd, role, name))
            continue;
        const ir_global *gl = &m->globals[g];
        void *host = malloc(ir_bytes(&gl->type));
        ok = ck_read_part(rd, name, &gl->type, &gl->layout, degree, p->coord, host, err, errlen);
        if (ok)
            rt_program_write_global(p, g, host);
        free(host);
    }
    return ok;
}

bool rt_ckpt_load(const rt_ckpt_args *a, rt_program *p, rt_parallel *par, rt_ckpt_counters *c)
{
    double t0 = os_now_s();
    char err[8192] = "";
    ck_reader rd;
    bool absent, ok = ck_open(&rd, a->load, -1, &absent, err, sizeof err);
    /* each error is printed before the ranks agree: the launcher ends every rank as soon as one exits */
    if (!ok && !absent)
        fprintf(stderr, "train_rank: error: --load: %s\n  (nothing was loaded; load an intact checkpoint: "
                "latest_checkpointed_iteration.txt names the iteration --load reads)\n", err);
    if (!all_ok(par, p, ok || absent) || (!ok && !absent))
        exit(1);
    if (!all_ok(par, p, ok)) {
        if (rt_parallel_is_root(par))
            fprintf(stderr, "train_rank: warning: --load %s: no checkpoint found (no %s): starting from scratch, as "
                    "Megatron does\n", a->load, CK_LATEST_FILE);
        if (ok)
            ck_close(&rd);
        return false;
    }
    ok = check_model(p, par, &rd, err, sizeof err) && check_shapes(a, p, &rd, err, sizeof err) &&
         load_globals(a, p, &rd, err, sizeof err);
    if (!ok)
        fprintf(stderr, "train_rank: error: --load: %s\n", err);
    if (!all_ok(par, p, ok)) /* nothing trains on a partial load */
        exit(1);
    int setup = ir_func_of_kind(p->m, IR_FUNC_SETUP);
    if (setup >= 0) /* the working copies and ZeRO's master shards, from the loaded masters */
        rt_program_run(p, setup);
    if (!a->finetune)
        *c = (rt_ckpt_counters){rd.state.iteration, rd.state.consumed_samples, rd.state.steps_applied,
                                rd.state.evals_done};
    printf(" loaded checkpoint %s (saved by %d rank%s)%s at iteration %lld in %.3f s\n", rd.dir, rd.state.ranks,
           rd.state.ranks == 1 ? "" : "s",
           a->finetune ? " weights only (--finetune), starting" : a->no_load_optim ? " without optimizer state" : "",
           (long long)c->iteration, os_now_s() - t0);
    ck_close(&rd);
    return true;
}

/* checkpoint_io.c — train_rank's checkpoints (checkpoint_io.h). A checkpoint holds the fp32
 * masters (ZeRO's master shards where the distributed optimizer keeps them), Adam's m and v (or
 * their shards) and the run's counters. Not the gradients (zero at a step boundary), not the
 * working copies (setup refreshes them from the masters), and no RNG state: dropout masks are
 * drawn from the seed and each sample's index, so the data position is the RNG state. */
#include "runtime/checkpoint_io.h"

#include "checkpoint/checkpoint.h"
#include "common/os.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The whole tensor's name under which global g is saved (save) or loaded (!save), and its role;
 * false for a global a checkpoint does not hold. A parameter is saved from its master shard when
 * ZeRO keeps one, and loaded into the parameter (setup then fills the shard from it). */
static bool ckpt_name(const ir_module *m, int g, bool save, char *name, size_t len, ck_role *role)
{
    const ir_global *gl = &m->globals[g];
    const char *param = m->globals[ir_global_param(m, g)].name;
    bool zero = ir_global_companion(m, ir_global_param(m, g), IR_GLOBAL_MASTER_SHARD) >= 0;
    switch (gl->kind) {
    case IR_GLOBAL_PARAM:
        if (save && zero)
            return false;
        *role = CK_ROLE_PARAM;
        break;
    case IR_GLOBAL_MASTER_SHARD:
        if (!save)
            return false;
        *role = CK_ROLE_PARAM;
        break;
    case IR_GLOBAL_ADAM_M:
    case IR_GLOBAL_ADAM_V:
        *role = gl->kind == IR_GLOBAL_ADAM_M ? CK_ROLE_ADAM_M : CK_ROLE_ADAM_V;
        snprintf(name, len, "%s.%s", param, ck_role_names[*role]);
        return true;
    default:
        return false;
    }
    snprintf(name, len, "%s", param);
    return true;
}

/* Whether this rank writes its part of g: one rank of those holding the same part, the first
 * along every axis the layout does not split (a replica). */
static bool writes_part(const rt_program *p, const int degree[IR_NUM_AXES], int g)
{
    const ir_layout *l = &p->m->globals[g].layout;
    for (int a = 1; a < IR_NUM_AXES; a++)
        if (a != IR_AXIS_EDP && degree[a] > 1 && !ir_layout_split(l, (ir_axis)a) && p->coord[a] != 0)
            return false;
    return true;
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

/* The manifest's description of the model: the config values that fix the tensors' shapes. */
static const ir_cfg model_keys[] = {IR_CFG_NUM_LAYERS, IR_CFG_HIDDEN_SIZE, IR_CFG_VOCAB_SIZE, IR_CFG_SEQ_LENGTH,
                                    IR_CFG_NUM_PARAMS};
#define NMODEL ((int)(sizeof model_keys / sizeof model_keys[0]))

/* Rank 0: the manifest's tensors (every global saved, whole) and the commit. */
static bool commit(const rt_ckpt_args *a, rt_program *p, const rt_parallel *par, const rt_ckpt_counters *c,
                   char *err, size_t errlen)
{
    const ir_module *m = p->m;
    ck_state s = {.iteration = c->iteration, .consumed_samples = c->consumed_samples,
                  .steps_applied = c->steps_applied, .evals_done = c->evals_done,
                  .seed = (uint64_t)ir_cfg_int(m, IR_CFG_SEED), .ranks = par->env.world_size, .nmodel = NMODEL};
    ir_axis_degrees(m, s.degree);
    char *model[2 * NMODEL], values[NMODEL][24];
    for (int i = 0; i < NMODEL; i++) {
        snprintf(values[i], sizeof values[i], "%lld", ir_cfg_int(m, model_keys[i]));
        model[2 * i] = (char *)ir_cfgs[model_keys[i]].key;
        model[2 * i + 1] = values[i];
    }
    s.model = model;
    ck_tensor *t = calloc((size_t)m->nglobals + 1, sizeof *t);
    char (*names)[256] = calloc((size_t)m->nglobals + 1, sizeof *names);
    int n = 0;
    for (int g = 0; g < m->nglobals; g++)
        if (ckpt_name(m, g, true, names[n], sizeof names[n], &t[n].role)) {
            t[n].name = names[n];
            t[n].param = m->globals[ir_global_param(m, g)].name;
            t[n].whole = ir_global_whole(m, g, s.degree);
            n++;
        }
    bool ok = ck_commit(a->save, &s, n, t, a->save_retain, err, errlen);
    free(t);
    free(names);
    return ok;
}

void rt_ckpt_save(const rt_ckpt_args *a, rt_program *p, rt_parallel *par, const rt_ckpt_counters *c)
{
    double t0 = os_now_s();
    const ir_module *m = p->m;
    bool root = rt_parallel_is_root(par);
    char err[8192] = "";
    ckpt_exit(par, p, !root || ck_begin(a->save, c->iteration, err, sizeof err), err); /* the .tmp exists */
    int degree[IR_NUM_AXES], n = 0;
    ir_axis_degrees(m, degree);
    ck_part *parts = calloc((size_t)m->nglobals + 1, sizeof *parts);
    char (*names)[256] = calloc((size_t)m->nglobals + 1, sizeof *names);
    for (int g = 0; g < m->nglobals; g++) {
        ck_role role;
        if (!ckpt_name(m, g, true, names[n], sizeof names[n], &role) || !writes_part(p, degree, g))
            continue;
        void *host = malloc(ir_bytes(&m->globals[g].type));
        rt_program_read_global(p, g, host);
        parts[n] = (ck_part){names[n], m->globals[g].type, host, m->globals[g].layout};
        n++;
    }
    uint64_t bytes = 0;
    bool ok = ck_write_rank(a->save, c->iteration, par->env.rank, degree, p->coord, n, parts, &bytes, err, sizeof err);
    for (int i = 0; i < n; i++)
        free((void *)parts[i].data);
    free(parts);
    free(names);
    ckpt_exit(par, p, ok, err); /* every rank's file is whole before the manifest names them */
    ckpt_exit(par, p, !root || commit(a, p, par, c, err, sizeof err), err);
    double total = rt_parallel_world(par, p, (float)bytes, RT_SUM), s = os_now_s() - t0;
    char dir[4200];
    ck_iter_dir(a->save, c->iteration, false, dir, sizeof dir);
    printf(" saved checkpoint at iteration %lld to %s | blocking time (s): %.3f | %.0f bytes at %.1f MB/s\n",
           (long long)c->iteration, dir, s, total, s > 0 ? total / s / 1e6 : 0.0);
    fflush(stdout);
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
        if (!ckpt_name(m, g, false, name, sizeof name, &role) || (role != CK_ROLE_PARAM && (a->no_load_optim || a->finetune)))
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
        if (!ckpt_name(m, g, false, name, sizeof name, &role) || (role != CK_ROLE_PARAM && (a->no_load_optim || a->finetune)))
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
    if (!all_ok(par, p, ok || absent) || (!ok && !absent)) {
        if (!ok && !absent)
            fprintf(stderr, "train_rank: error: --load: %s\n  (nothing was loaded; load an intact checkpoint: "
                    "latest_checkpointed_iteration.txt names the iteration --load reads)\n", err);
        exit(1);
    }
    if (!all_ok(par, p, ok)) {
        if (rt_parallel_is_root(par))
            fprintf(stderr, "train_rank: warning: --load %s: no checkpoint found (no %s): starting from scratch, as "
                    "Megatron does\n", a->load, CK_LATEST_FILE);
        if (ok)
            ck_close(&rd);
        return false;
    }
    ok = check_shapes(a, p, &rd, err, sizeof err) && load_globals(a, p, &rd, err, sizeof err);
    if (!all_ok(par, p, ok)) { /* nothing trains on a partial load */
        if (!ok)
            fprintf(stderr, "train_rank: error: --load: %s\n", err);
        exit(1);
    }
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

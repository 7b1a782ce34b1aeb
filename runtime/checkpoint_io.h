/* checkpoint_io.h — train_rank's --save and --load: which globals a checkpoint holds, under
 * which names, and the collective save and load around checkpoint/checkpoint.h's format. */
#ifndef MCC_RT_CHECKPOINT_IO_H
#define MCC_RT_CHECKPOINT_IO_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/parallel.h"
#include "runtime/program.h"

/* Megatron's checkpoint flags. */
typedef struct {
    const char *save, *load;        /* --save DIR, --load DIR */
    int save_interval;              /* --save-interval N (0: only at the end and on a stop) */
    int save_retain;                /* --save-retain N: keep the newest N (0: all) */
    int exit_interval;              /* --exit-interval N: save (with --save) and stop at a multiple of N */
    bool no_load_optim, no_load_rng, finetune, exit_signal_handler;
} rt_ckpt_args;

/* The run's position: what a resume continues from. */
typedef struct {
    int64_t iteration, consumed_samples, steps_applied, evals_done;
} rt_ckpt_counters;

/* Writes iteration c->iteration's checkpoint under a->save: every rank its own parts (no gather),
 * then rank 0 the manifest and the atomic commit; logs the blocking time and bytes/s. Exits
 * naming the file on any rank's failure. Collective: every rank calls. */
void rt_ckpt_save(const rt_ckpt_args *a, rt_program *p, rt_parallel *par, const rt_ckpt_counters *c);
/* Loads a->load's latest checkpoint into the globals (under any layout: each rank takes its part
 * of every whole tensor) and *c; with --finetune the weights alone at iteration 0, with
 * --no-load-optim no Adam state. Then reruns setup, which refreshes the working copies and ZeRO's
 * master shards from the loaded masters. A directory with no checkpoint: a warning, and false
 * (Megatron starts from scratch). Any bad checkpoint: a message naming the file, exit 1.
 * Collective. */
bool rt_ckpt_load(const rt_ckpt_args *a, rt_program *p, rt_parallel *par, rt_ckpt_counters *c);

#endif

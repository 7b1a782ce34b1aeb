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
    double exit_duration_mins;      /* --exit-duration-in-mins N: save (with --save) and stop after N
                                     * minutes of rank 0's clock (0: never) */
    int async_save;                 /* --async-save 1, --no-async-save 0; -1: on for a GPU plan */
    bool no_load_optim, no_load_rng, finetune, exit_signal_handler;
    const char *plan_text;          /* the whole program: under pipeline parallelism every stage's
                                     * module, whose tensors the manifest names (rank 0 holds one) */
} rt_ckpt_args;

/* The run's position: what a resume continues from. */
typedef struct {
    int64_t iteration, consumed_samples, steps_applied, evals_done;
} rt_ckpt_counters;

/* The saves of a run: the host copy of this rank's parts (kept from save to save) and the save
 * in flight. NULL before the first save. */
typedef struct rt_ckpt_writer rt_ckpt_writer;

/* Writes iteration c->iteration's checkpoint under a->save: every rank its own parts (no gather),
 * then rank 0 the manifest and the atomic commit; logs the blocking time and bytes/s. Exits
 * naming the file on any rank's failure. With --async-save the step loop waits only for the copy
 * of the device state to host memory: a thread of each rank writes its files, and the commit
 * comes later, on the main thread (rt_ckpt_poll, the next save, rt_ckpt_finish), so a crash
 * before it leaves the previous checkpoint the latest. A save first ends the one before it (two
 * never overlap). *w: the run's writer, made at the first save. Collective: every rank calls. */
void rt_ckpt_save(const rt_ckpt_args *a, rt_program *p, rt_parallel *par, const rt_ckpt_counters *c,
                  rt_ckpt_writer **w);
/* At a step's end: commits the save in flight when every rank's writer thread is done (the ranks
 * agree on it: one collective, only while a save is in flight). Collective. */
void rt_ckpt_poll(rt_program *p, rt_parallel *par, rt_ckpt_writer *w);
/* At the run's end: waits for the save in flight, commits it and frees *w. Collective. */
void rt_ckpt_finish(rt_program *p, rt_parallel *par, rt_ckpt_writer **w);
/* Loads a->load's latest checkpoint into the globals (under any layout: each rank takes its part
 * of every whole tensor) and *c; with --finetune the weights alone at iteration 0, with
 * --no-load-optim no Adam state. Then reruns setup, which refreshes the working copies and ZeRO's
 * master shards from the loaded masters. A directory with no checkpoint: a warning, and false
 * (Megatron starts from scratch). Any bad checkpoint: a message naming the file, exit 1.
 * Collective. */
bool rt_ckpt_load(const rt_ckpt_args *a, rt_program *p, rt_parallel *par, rt_ckpt_counters *c);

#endif

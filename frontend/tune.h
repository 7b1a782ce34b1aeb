/* tune.h — `mcc tune`: the layouts of a model on N GPUs that fit, fastest first (tune.c). */
#ifndef MCC_TUNE_H
#define MCC_TUNE_H

/* argv: [SPEC.json] [--<field> VALUE ...] --world-size N [--gpus-per-node G] [--target T] [--top K]
 * [--gpu-memory GIB] [--fix KEY=VALUE ...]. Exit status 0 with a table on stdout, 1 when no layout fits, 2 on bad input. */
int mcc_tune_main(int argc, char **argv);

#endif

/* schedule_cmd.h — `mcc schedule SPEC.json [flags] [--svg OUT.svg]`: a spec's pipeline schedule
 * timed by the cost model, as text per rank and as SVG (schedule_cmd.c). */
#ifndef MCC_SCHEDULE_CMD_H
#define MCC_SCHEDULE_CMD_H

int mcc_schedule_main(int argc, char **argv);

#endif

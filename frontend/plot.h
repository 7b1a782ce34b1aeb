/* plot.h — `mcc plot`: a train_rank metrics file (JSONL) drawn as an SVG of its curves. */
#ifndef MCC_PLOT_H
#define MCC_PLOT_H

/* argv: the arguments after "plot" (METRICS.jsonl -o OUT.svg). Returns the exit status. */
int mcc_plot_main(int argc, char **argv);

#endif

/* convert_main.c — mcc-convert: `mcc convert` as an executable of its own, linked without the
 * compiler (no LLVM, no NVRTC), for machines that have only what is carried to them.
 * `mcc-convert ARGS` is `mcc convert ARGS`: the same entry point. */
#include "frontend/convert.h"

int main(int argc, char **argv) { return mcc_convert_main(argc - 1, argv + 1); }

/* convert.h — `mcc convert`: an mcc checkpoint to and from a Hugging Face model directory. */
#ifndef MCC_CONVERT_H
#define MCC_CONVERT_H

/* mcc convert --to hf CKPT_DIR OUT_DIR --spec SPEC.json [spec flags] [--iteration N] [--max-shard-size BYTES]
 * mcc convert --from hf IN_DIR CKPT_DIR [--spec-out SPEC.json]
 * argv: the arguments after `convert`. Exit status 0, 2 on bad input (the error printed). */
int mcc_convert_main(int argc, char **argv);

#endif

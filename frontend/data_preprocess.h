/* data_preprocess.h — `mcc data preprocess`: text (jsonl or plain) to a Megatron indexed dataset. */
#ifndef MCC_DATA_PREPROCESS_H
#define MCC_DATA_PREPROCESS_H

/* Byte-level tokenizer: token id = byte value 0..255, end-of-document 256 (vocab 257). */
enum { MCC_DATA_EOD_TOKEN = 256, MCC_DATA_VOCAB_SIZE = 257 };

/* argv[0] = "preprocess"; flags: --input FILE --output-prefix P [--append-eod] [--json-keys KEY].
 * Writes P.bin and P.idx (MMIDIDX, uint16 tokens). Returns 0 on success; on error prints one
 * message naming the flag or input line and the fix to stderr, removes partial output, returns 1. */
int mcc_data_preprocess_main(int argc, char **argv);

#endif

/* data_preprocess.h — `mcc data preprocess`: text (jsonl or plain) to a Megatron indexed dataset. */
#ifndef MCC_DATA_PREPROCESS_H
#define MCC_DATA_PREPROCESS_H

/* The ByteLevel tokenizer: token id = byte value 0..255, end-of-document 256 (vocab 257). */
enum { MCC_DATA_EOD_TOKEN = 256, MCC_DATA_VOCAB_SIZE = 257 };

/* argv[0] = "preprocess"; the flags of Megatron's tools/preprocess_data.py: --input FILE
 * --output-prefix P [--json-keys KEY] [--tokenizer-type GPT2BPETokenizer|ByteLevel]
 * [--vocab-file F --merge-file F] [--append-eod] [--workers N].
 * Writes P_KEY_document.bin/.idx, byte-identical to Megatron's. Returns 0 on success; on error
 * prints one message naming the flag or input line and the fix to stderr, removes partial
 * output, returns 1. */
int mcc_data_preprocess_main(int argc, char **argv);

#endif

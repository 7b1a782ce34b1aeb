/* gpt_dataset.h — Megatron-LM's GPT training data over indexed datasets: --split into train/valid/test,
 * multi-epoch shuffled samples of seq_length+1 tokens, and weighted blends (--data-path W1 A W2 B). */
#ifndef MCC_RT_GPT_DATASET_H
#define MCC_RT_GPT_DATASET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { RT_SPLIT_TRAIN, RT_SPLIT_VALID, RT_SPLIT_TEST, RT_SPLITS };

typedef struct {
    int n;                /* datasets in --data-path */
    const char **prefixes;/* [n] PREFIX of PREFIX.bin/.idx */
    double *weights;      /* [n] relative weights (normalised here), or NULL: one prefix, no blend */
    const char *split;    /* --split, e.g. "969,30,1" (Megatron's default) */
    int seq_length;       /* >= 2; every sample holds seq_length+1 tokens */
    int64_t seed;         /* --seed, 0 .. 2^32-1 (numpy.random.RandomState's range) */
    int64_t num_samples[RT_SPLITS]; /* samples each split must serve; 0: that split is not built */
    FILE *log;            /* NULL, or where building says what it holds and how far it is */
    bool mock;            /* --mock-data: no datasets, synthetic tokens (rt_gpt_data_sample) */
    int64_t mock_vocab;   /* with mock: the tokens are in [0, mock_vocab) */
} rt_gpt_data_config;

typedef struct rt_gpt_data rt_gpt_data;

/* Parses the values of train_rank's "--data-path" (Megatron's forms "PREFIX" and
 * "W1 PREFIX1 W2 PREFIX2 ..."): argv[0..argc) are the arguments after the flag; it takes those up to
 * the next "--flag" and sets *consumed to their count. Fills cfg->n, prefixes (pointing into argv)
 * and weights, replacing earlier ones (cfg must start zeroed); false with a message in err. */
bool rt_gpt_data_parse_paths(int argc, char **argv, int *consumed, rt_gpt_data_config *cfg, char *err,
                             size_t errlen);
/* Frees what rt_gpt_data_parse_paths allocated in cfg. */
void rt_gpt_data_config_free(rt_gpt_data_config *cfg);

/* Opens the datasets and builds every index Megatron builds (document, sample, shuffle and blending
 * indices) for each split with num_samples > 0. Deterministic in (seed, data, split, seq_length,
 * num_samples) only. Before building, one line on cfg->log says how much memory the indices take,
 * and a build larger than the machine's physical memory is refused; a long build reports its
 * progress there. NULL with a message naming the flag on error: a split with samples wanted but
 * a zero --split share too. */
rt_gpt_data *rt_gpt_data_open(const rt_gpt_data_config *cfg, char *err, size_t errlen);
void rt_gpt_data_close(rt_gpt_data *d);

/* Samples split (RT_SPLIT_*) can serve: >= cfg num_samples when built, 0 when not built. */
int64_t rt_gpt_data_num_samples(const rt_gpt_data *d, int split);

/* Global sample `index` (0 <= index < rt_gpt_data_num_samples) of split: the same seq_length+1 tokens
 * as Megatron-LM's dataset[index]["text"]. out: int32[seq_length+1]. With mock, a hash of (seed,
 * split, index, position) modulo mock_vocab: every sample different, none read from anywhere (not
 * Megatron's MockGPTDataset's tokens). */
void rt_gpt_data_sample(const rt_gpt_data *d, int split, int64_t index, int32_t *out);

/* Whether every dataset's token ids are in [0, vocab) (rt_dataset_check_tokens): O(all tokens),
 * call once. */
bool rt_gpt_data_check_tokens(const rt_gpt_data *d, int64_t vocab, char *err, size_t errlen);

/* One line per dataset and built split: sequences, tokens per epoch, epochs, samples. */
void rt_gpt_data_print(const rt_gpt_data *d, FILE *out);

#endif

/* gpt_dataset.c — Megatron-LM's GPT data semantics (megatron/core/datasets: gpt_dataset.py,
 * blended_dataset.py, blended_megatron_dataset_builder.py, helpers.cpp) in C: the --split of each
 * dataset's sequences; per split a document index over as many epochs as the samples need, shuffled
 * by numpy.random.RandomState(seed) (reproduced bit for bit below); the sample index (seq_length+1
 * tokens, the last shared with the next sample); the shuffle index; the greedy blending index.
 * Same inputs, same tokens for every global sample index as Megatron-LM. */
#include "runtime/gpt_dataset.h"
#include "common/os.h"

#include "common/cli.h"
#include "runtime/dataset.h"
#include "runtime/mt19937.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const RT_SPLIT_NAMES[RT_SPLITS] = {"train", "valid", "test"};
/* The train_rank flag that sets how many samples each split needs. */
static const char *const RT_SPLIT_FLAGS[RT_SPLITS] = {"--train-iters", "--eval-iters", "--eval-iters"};

/* Megatron's mid_level_dataset_surplus: each blended dataset builds 0.5% more samples than its share. */
static const double RT_GPT_SURPLUS = 0.005;
/* Megatron's separate_final_epoch threshold: a final epoch used below 80% is shuffled on its own. */
static const double RT_GPT_FINAL_EPOCH = 0.80;
enum { RT_GPT_MAX_DATASETS = 32767 }; /* Megatron's int16 dataset index */

/* ---- progress of a long index build ----------------------------------------------------------- */

/* Billions of samples take minutes to index: a line every RT_GPT_PROGRESS_S seconds says how far
 * it is. The loops report every RT_GPT_TICK elements, so the clock costs nothing. */
static const double RT_GPT_PROGRESS_S = 5.0;
enum { RT_GPT_TICK = 1 << 20 };
typedef struct {
    FILE *log;          /* NULL: silent */
    double total, done; /* bytes of the indices to build, and built */
    double t_start, t_last;
} rt_gpt_progress;

static void rt_gpt_tick(rt_gpt_progress *p, double bytes) {
    p->done += bytes;
    double now = p->log ? os_now_s() : 0;
    if (!p->log || now - p->t_last < RT_GPT_PROGRESS_S) return;
    p->t_last = now;
    fprintf(p->log, "data: sample indices %.0f%% built (%.0f s)\n", 100 * p->done / p->total, now - p->t_start);
    fflush(p->log);
}

/* ---- numpy.random.RandomState: MT19937 (mt19937.h), legacy random_interval, shuffle ------ */

/* numpy's legacy random_interval: uniform in [0, max] by rejecting draws masked to max's bit
 * width; 64-bit draws (high word first) only when max needs them. */
static uint64_t rt_np_interval(rt_mt *mt, uint64_t max) {
    uint64_t mask = max, v;
    for (int s = 1; s < 64; s *= 2) mask |= mask >> s;
    if (max <= UINT32_MAX) {
        while ((v = rt_mt_next32(mt) & mask) > max) {}
    } else {
        while ((v = ((uint64_t)rt_mt_next32(mt) << 32 | rt_mt_next32(mt)) & mask) > max) {}
    }
    return v;
}

/* RandomState.shuffle of a 1-D array of n elements of `size` (<= 8) bytes: numpy's _shuffle_raw,
 * Fisher-Yates from the end; the draws do not depend on the element type. They do not depend on
 * the data either, so they are drawn RT_NP_AHEAD swaps early and their targets prefetched: with
 * 10^8 elements nearly every swap misses the caches, and waiting for each in turn triples the time. */
enum { RT_NP_AHEAD = 64 };
static void rt_np_shuffle(rt_mt *mt, void *data, int64_t n, size_t size, rt_gpt_progress *progress) {
    unsigned char *a = data, tmp[8];
    int64_t ahead[RT_NP_AHEAD], next = n - 1; /* ahead[i % RT_NP_AHEAD]: the draw for i */
    for (int64_t i = n - 1; i > 0; i--) {
        for (; next > 0 && next > i - RT_NP_AHEAD; next--) {
            ahead[next % RT_NP_AHEAD] = (int64_t)rt_np_interval(mt, (uint64_t)next);
            __builtin_prefetch(a + ahead[next % RT_NP_AHEAD] * size, 1);
        }
        int64_t j = ahead[i % RT_NP_AHEAD];
        if (i % RT_GPT_TICK == 0) rt_gpt_tick(progress, (double)RT_GPT_TICK * (double)size);
        memcpy(tmp, a + j * size, size);
        memcpy(a + j * size, a + i * size, size);
        memcpy(a + i * size, tmp, size);
    }
}

/* numpy.sum of float64: pairwise summation, 8 accumulators per block of at most 128, so that
 * normalised weights match Megatron's to the last bit. */
static double rt_np_sum(const double *a, int64_t n) {
    if (n < 8) {
        double s = 0.0;
        for (int64_t i = 0; i < n; i++) s += a[i];
        return s;
    }
    if (n <= 128) {
        double r[8];
        memcpy(r, a, sizeof r);
        int64_t i = 8;
        for (; i < n - n % 8; i += 8)
            for (int j = 0; j < 8; j++) r[j] += a[i + j];
        double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) s += a[i];
        return s;
    }
    int64_t half = n / 2;
    half -= half % 8;
    return rt_np_sum(a, half) + rt_np_sum(a + half, n - half);
}

/* Megatron's normalize(): w / numpy.sum(w). out may be w. */
static void rt_np_normalize(const double *w, int n, double *out) {
    double sum = rt_np_sum(w, n);
    for (int i = 0; i < n; i++) out[i] = w[i] / sum;
}

/* ---- --split --------------------------------------------------------------------------------- */

/* Megatron's parse_and_normalize_split (up to three shares, zero-padded to three, normalised) and
 * convert_split_vector_to_split_matrix (cumulative book-ends [lo, hi) as fractions of the
 * sequences; has[s] false for a zero share). The shares are numbers >= 0 separated by ',' or '/',
 * with spaces around them and the whole in quotes, as scripts pass it ('99,1,0' kept quoted by a
 * bash array, "969, 30, 1"); Megatron picks the digits out of any text, so "-1,2,3" would train on
 * 1,2,3: here it is an error. */
static bool rt_gpt_parse_split(const char *text, double lo[RT_SPLITS], double hi[RT_SPLITS], bool has[RT_SPLITS],
                               char *err, size_t errlen) {
    static const char hint[] = "the shares are train,valid,test, e.g. --split 969,30,1";
    double v[RT_SPLITS] = {0};
    int n = 0;
    char why[256], share[32], body[256];
    size_t len = strlen(text);
    bool quoted = len >= 2 && (text[0] == '\'' || text[0] == '"') && text[len - 1] == text[0];
    snprintf(body, sizeof body, "%.*s", (int)(quoted ? len - 2 : len), text + quoted);
    for (const char *p = body;; p++) { /* p++: past the separator; a share must follow it */
        size_t run = strcspn(p, ",/");
        char num[64];
        size_t skip = strspn(p, " "), keep = run > skip ? run - skip : 0;
        while (keep > 0 && p[skip + keep - 1] == ' ')
            keep--;
        snprintf(num, sizeof num, "%.*s", (int)keep, p + skip);
        if (n == RT_SPLITS) {
            snprintf(err, errlen, "--split %s: more than three shares; %s", text, hint);
            return false;
        }
        snprintf(share, sizeof share, "the %s share", RT_SPLIT_NAMES[n]);
        if (run >= sizeof num || !cli_parse_num(share, num, 0, false, INFINITY, &v[n++], why, sizeof why)) {
            snprintf(err, errlen, "--split '%s': %s; %s", text, run >= sizeof num ? "a share is too long" : why, hint);
            return false;
        }
        p += run;
        if (!*p) break;
    }
    rt_np_normalize(v, RT_SPLITS, v);
    if (!(v[0] + v[1] + v[2] > 0)) { /* all zero: NaN */
        snprintf(err, errlen, "--split %s: the shares sum to 0; %s", text, hint);
        return false;
    }
    double edge = 0.0;
    for (int s = 0; s < RT_SPLITS; s++) {
        lo[s] = edge;
        hi[s] = edge += v[s];
        has[s] = hi[s] > lo[s];
    }
    return true;
}

/* ---- one GPTDataset: one split of one indexed dataset --------------------------------------- */

typedef struct {
    int64_t first_seq, num_seqs; /* the split's sequences [first_seq, first_seq+num_seqs) */
    int64_t tokens_per_epoch, num_epochs;
    bool separate_final_epoch;
    int64_t sans_final;   /* samples before the final epoch (_get_num_epochs's rule) */
    int64_t num_samples;  /* len(): samples the sample index holds (0: not built) */
    int32_t *doc_index;   /* [num_epochs*num_seqs] sequence ids in shuffled order */
    int64_t *sample_doc;  /* [num_samples+1] doc_index position where sample i starts... */
    int32_t *sample_off;  /* [num_samples+1] ...and the token offset in that sequence */
    int64_t *shuffle;     /* [num_samples] sample order */
} rt_gpt_split;

typedef struct { /* what builds one rt_gpt_split */
    const rt_dataset *ds;
    const char *prefix, *split_text;
    int split, seq_length;
    uint32_t seed;
    double lo, hi;       /* --split book-ends */
    int64_t num_samples; /* requested */
    rt_gpt_progress *progress;
} rt_gpt_split_job;

static bool rt_gpt_oom(const char *what, int64_t count, const rt_gpt_split_job *job, char *err, size_t errlen) {
    snprintf(err, errlen, "--data-path %s: out of memory for the %s split's %s (%" PRId64 " entries); "
             "request fewer samples or train on more data per epoch", job->prefix, RT_SPLIT_NAMES[job->split], what,
             count);
    return false;
}

/* The split's sequences (Megatron rounds each book-end half to even), its tokens, and the epochs
 * the requested samples need (_get_num_epochs), with the final-epoch rule of
 * _build_document_sample_shuffle_indices (g->sans_final: the samples before the final epoch). */
static bool rt_gpt_plan_epochs(rt_gpt_split *g, const rt_gpt_split_job *job, char *err, size_t errlen) {
    int64_t n = rt_dataset_num_sequences(job->ds), S = job->seq_length;
    g->first_seq = (int64_t)nearbyint(job->lo * (double)n);
    g->num_seqs = (int64_t)nearbyint(job->hi * (double)n) - g->first_seq;
    g->tokens_per_epoch = 0;
    for (int64_t s = g->first_seq; s < g->first_seq + g->num_seqs; s++)
        g->tokens_per_epoch += rt_dataset_sequence_length(job->ds, s);
    int64_t T = g->tokens_per_epoch;
    if (T < 2) {
        snprintf(err, errlen, "--split %s gives the %s split %" PRId64 " of the %" PRId64 " sequences of --data-path "
                 "%s, holding %" PRId64 " tokens, too few to cut samples from; use more data or a --split with 0 for %s",
                 job->split_text, RT_SPLIT_NAMES[job->split], g->num_seqs, n, job->prefix, T,
                 RT_SPLIT_NAMES[job->split]);
        return false;
    }
    if (job->num_samples > (INT64_MAX / 2 - T) / S) {
        snprintf(err, errlen, "%" PRId64 " %s samples of %" PRId64 " tokens overflow the sample index; "
                 "request fewer (--train-iters, --eval-iters)", job->num_samples, RT_SPLIT_NAMES[job->split], S);
        return false;
    }
    int64_t wanted = job->num_samples * S + 1; /* +1: the last sample's extra token */
    g->num_epochs = wanted <= T ? 1 : (wanted + T - 1) / T;
    g->sans_final = 0;
    g->separate_final_epoch = false;
    if (g->num_epochs > 1) {
        g->sans_final = ((g->num_epochs - 1) * T - 1) / S;
        int64_t per_epoch = (T - 1) / S;
        g->separate_final_epoch = job->num_samples - g->sans_final < (int64_t)(RT_GPT_FINAL_EPOCH * (double)per_epoch);
    }
    return true;
}

/* The samples the sample index will hold: every whole sample of the epochs' tokens. */
static int64_t rt_gpt_samples_built(const rt_gpt_split *g, int seq_length) {
    return (g->num_epochs * g->tokens_per_epoch - 1) / seq_length;
}

/* Bytes of the split's document, sample and shuffle indices (as rt_gpt_build_split allocates). */
static double rt_gpt_split_bytes(const rt_gpt_split *g, int seq_length) {
    double ns = (double)rt_gpt_samples_built(g, seq_length);
    return (double)g->num_epochs * (double)g->num_seqs * sizeof *g->doc_index +
           (ns + 1) * (sizeof *g->sample_doc + sizeof *g->sample_off) + ns * sizeof *g->shuffle;
}

/* _build_document_index: the split's sequences once per epoch, shuffled together, or the final
 * epoch shuffled apart. */
static bool rt_gpt_build_doc_index(rt_gpt_split *g, rt_mt *mt, const rt_gpt_split_job *job, char *err,
                                   size_t errlen) {
    int64_t D = g->num_seqs, len = g->num_epochs * D;
    if (!(g->doc_index = malloc((size_t)len * sizeof *g->doc_index)))
        return rt_gpt_oom("document index", len, job, err, errlen);
    for (int64_t i = 0; i < len; i++) g->doc_index[i] = (int32_t)(g->first_seq + i % D);
    int64_t head = g->separate_final_epoch ? len - D : len;
    rt_np_shuffle(mt, g->doc_index, head, sizeof *g->doc_index, job->progress);
    rt_np_shuffle(mt, g->doc_index + head, len - head, sizeof *g->doc_index, job->progress);
    return true;
}

/* helpers.cpp build_sample_idx (drop_last_partial_sequence, add_extra_token_to_sequence): sample i
 * spans the seq_length+1 tokens from (sample_doc[i], sample_off[i]) to (sample_doc[i+1],
 * sample_off[i+1]) inclusive, so consecutive samples share one token. */
static bool rt_gpt_build_sample_index(rt_gpt_split *g, const rt_gpt_split_job *job, char *err, size_t errlen) {
    int64_t S = job->seq_length, ns = rt_gpt_samples_built(g, job->seq_length);
    g->sample_doc = malloc((size_t)(ns + 1) * sizeof *g->sample_doc);
    g->sample_off = malloc((size_t)(ns + 1) * sizeof *g->sample_off);
    if (!g->sample_doc || !g->sample_off) return rt_gpt_oom("sample index", ns + 1, job, err, errlen);
    int64_t pos = 0, off = 0;
    g->sample_doc[0] = g->sample_off[0] = 0;
    for (int64_t i = 1; i <= ns; i++) {
        if (i % RT_GPT_TICK == 0)
            rt_gpt_tick(job->progress, (double)RT_GPT_TICK * (sizeof *g->sample_doc + sizeof *g->sample_off));
        int64_t remaining = S + 1;
        while (remaining) {
            assert(pos < g->num_epochs * g->num_seqs); /* ns leaves the last sample inside the epochs */
            int64_t left = rt_dataset_sequence_length(job->ds, g->doc_index[pos]) - off;
            remaining -= left;
            if (remaining <= 0) {
                off += remaining + left - 1; /* end on the extra token, where the next sample starts */
                remaining = 0;
            } else {
                pos++;
                off = 0;
            }
        }
        g->sample_doc[i] = pos;
        g->sample_off[i] = (int32_t)off;
    }
    g->num_samples = ns;
    return true;
}

/* _build_shuffle_index: the samples before the final epoch and those of it shuffled apart when
 * the final epoch is separate, else all together. */
static bool rt_gpt_build_shuffle(rt_gpt_split *g, rt_mt *mt, const rt_gpt_split_job *job, char *err,
                                 size_t errlen) {
    int64_t ns = g->num_samples, head = g->separate_final_epoch ? g->sans_final : ns;
    if (!(g->shuffle = malloc((size_t)ns * sizeof *g->shuffle))) return rt_gpt_oom("shuffle index", ns, job, err, errlen);
    for (int64_t i = 0; i < ns; i++) g->shuffle[i] = i;
    rt_np_shuffle(mt, g->shuffle, head, sizeof *g->shuffle, job->progress);
    rt_np_shuffle(mt, g->shuffle + head, ns - head, sizeof *g->shuffle, job->progress);
    return true;
}

/* GPTDataset._build_document_sample_shuffle_indices (after rt_gpt_plan_epochs): one
 * RandomState(seed) per dataset and split. */
static bool rt_gpt_build_split(rt_gpt_split *g, const rt_gpt_split_job *job, char *err, size_t errlen) {
    rt_mt mt;
    rt_mt_seed(&mt, job->seed);
    return rt_gpt_build_doc_index(g, &mt, job, err, errlen) && rt_gpt_build_sample_index(g, job, err, errlen) &&
           rt_gpt_build_shuffle(g, &mt, job, err, errlen);
}

/* GPTDataset._query_document_sample_shuffle_indices: sample i after the shuffle. out: int32[S+1]. */
static void rt_gpt_split_sample(const rt_gpt_split *g, const rt_dataset *ds, int64_t i, int32_t *out) {
    int64_t j = g->shuffle[i], last = g->sample_doc[j + 1], off = g->sample_off[j];
    for (int64_t p = g->sample_doc[j]; p <= last; p++, off = 0) {
        int32_t s = g->doc_index[p];
        int64_t stop = p < last ? rt_dataset_sequence_length(ds, s) : g->sample_off[j + 1] + 1;
        rt_dataset_read(ds, s, off, stop - off, out);
        out += stop - off;
    }
}

static void rt_gpt_split_free(rt_gpt_split *g) {
    free(g->doc_index);
    free(g->sample_doc);
    free(g->sample_off);
    free(g->shuffle);
}

/* ---- the blend and the whole data set -------------------------------------------------------- */

struct rt_gpt_data {
    int n, seq_length;
    char **prefixes;                      /* [n] copies, for rt_gpt_data_print */
    rt_dataset **ds;                      /* [n] */
    rt_gpt_split (*split)[RT_SPLITS];     /* [n][RT_SPLITS] */
    bool blended;                         /* weights given: samples go through the blend */
    int64_t blend_size[RT_SPLITS];
    int16_t *blend_dataset[RT_SPLITS];    /* [blend_size] the dataset serving global sample i... */
    int64_t *blend_sample[RT_SPLITS];     /* [blend_size] ...and the sample it takes there */
    bool mock;                            /* --mock-data: n = 0, samples hashed (rt_gpt_mock_sample) */
    int64_t mock_vocab, mock_samples[RT_SPLITS];
    uint64_t seed;
};

/* splitmix64's finalizer: a well-mixed 64 bits of x. */
static uint64_t rt_gpt_mix(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static void rt_gpt_mock_sample(const rt_gpt_data *d, int split, int64_t index, int32_t *out) {
    uint64_t base = rt_gpt_mix(rt_gpt_mix(d->seed * RT_SPLITS + (uint64_t)split) + (uint64_t)index);
    for (int t = 0; t <= d->seq_length; t++)
        out[t] = (int32_t)(rt_gpt_mix(base + (uint64_t)t) % (uint64_t)d->mock_vocab);
}

/* helpers.cpp build_blending_indices: each sample goes to the dataset whose count lags its weight
 * the most (first on ties). Fails if a dataset would run past the samples built for it. */
static bool rt_gpt_build_blend(rt_gpt_data *d, int split, const double *w, char *err, size_t errlen) {
    int64_t size = d->blend_size[split], *count = calloc((size_t)d->n, sizeof *count);
    d->blend_dataset[split] = malloc((size_t)size * sizeof *d->blend_dataset[split]);
    d->blend_sample[split] = malloc((size_t)size * sizeof *d->blend_sample[split]);
    if (!count || !d->blend_dataset[split] || !d->blend_sample[split]) {
        free(count);
        snprintf(err, errlen, "--data-path: out of memory for the %s blend of %" PRId64 " samples", RT_SPLIT_NAMES[split],
                 size);
        return false;
    }
    for (int64_t i = 0; i < size; i++) {
        double x = i > 1 ? (double)i : 1.0;
        int best = 0;
        double best_lag = w[0] * x - (double)count[0];
        for (int k = 1; k < d->n; k++) {
            double lag = w[k] * x - (double)count[k];
            if (lag > best_lag) best = k, best_lag = lag;
        }
        d->blend_dataset[split][i] = (int16_t)best;
        d->blend_sample[split][i] = count[best]++;
    }
    bool ok = true;
    for (int k = 0; k < d->n && ok; k++) {
        ok = count[k] <= d->split[k][split].num_samples;
        if (!ok)
            snprintf(err, errlen, "--data-path: the %s blend takes %" PRId64 " samples from %s but only %" PRId64
                     " were built for it; give it a larger weight or more data", RT_SPLIT_NAMES[split], count[k],
                     d->prefixes[k], d->split[k][split].num_samples);
    }
    free(count);
    return ok;
}

static bool rt_gpt_check_config(const rt_gpt_data_config *cfg, char *err, size_t errlen) {
    const char *bad = NULL;
    if (cfg->n < 1 || cfg->n > RT_GPT_MAX_DATASETS)
        bad = "--data-path: give 1 to 32767 datasets (PREFIX, or WEIGHT PREFIX pairs)";
    else if (cfg->seq_length < 2)
        bad = "--seq-length must be at least 2 to cut samples (Megatron's build_sample_idx)";
    else if (cfg->seed < 0 || cfg->seed > UINT32_MAX)
        bad = "--seed must be in 0..4294967295 (numpy RandomState's range, as Megatron's data shuffle)";
    else if (!cfg->split)
        bad = "--split is required, e.g. --split 969,30,1";
    for (int s = 0; s < RT_SPLITS && !bad; s++)
        if (cfg->num_samples[s] < 0) bad = "the number of samples of a split must be >= 0 (check --train-iters)";
    double sum = 0;
    for (int k = 0; k < cfg->n && cfg->weights && !bad; k++) {
        if (!(cfg->weights[k] >= 0 && isfinite(cfg->weights[k])))
            bad = "--data-path: weights must be finite and >= 0, e.g. --data-path 0.3 A 0.7 B";
        sum += cfg->weights[k];
    }
    if (cfg->weights && !bad && !(sum > 0))
        bad = "--data-path: the weights sum to 0; give at least one dataset a positive weight";
    if (bad) snprintf(err, errlen, "%s", bad);
    return !bad;
}

static bool rt_gpt_open_datasets(rt_gpt_data *d, const rt_gpt_data_config *cfg, char *err, size_t errlen) {
    char why[1024];
    for (int k = 0; k < d->n; k++) {
        if (!(d->prefixes[k] = strdup(cfg->prefixes[k]))) {
            snprintf(err, errlen, "--data-path: out of memory");
            return false;
        }
        if (!(d->ds[k] = rt_dataset_open(cfg->prefixes[k], why, sizeof why))) {
            snprintf(err, errlen, "--data-path %s: %s", cfg->prefixes[k], why);
            return false;
        }
        if (rt_dataset_num_sequences(d->ds[k]) > INT32_MAX) {
            snprintf(err, errlen, "--data-path %s: more than 2^31-1 sequences, Megatron's int32 document index limit; "
                     "split the corpus into several datasets and blend them", cfg->prefixes[k]);
            return false;
        }
    }
    return true;
}

/* What builds dataset k's split s. With weights, each dataset builds ceil(ceil(N*w)*1.005)
 * samples (Megatron's surplus) and serves ceil(N*w) of the blend (*target). */
static rt_gpt_split_job rt_gpt_job(const rt_gpt_data *d, const rt_gpt_data_config *cfg, int s, int k,
                                   const double *lo, const double *hi, const double *w, rt_gpt_progress *progress,
                                   int64_t *target) {
    rt_gpt_split_job job = {d->ds[k], d->prefixes[k], cfg->split, s, cfg->seq_length, (uint32_t)cfg->seed,
                            lo[s], hi[s], cfg->num_samples[s], progress};
    *target = 0;
    if (d->blended) {
        *target = (int64_t)ceil((double)cfg->num_samples[s] * w[k]);
        job.num_samples = (int64_t)ceil((double)*target * (1 + RT_GPT_SURPLUS));
    }
    return job;
}

/* A split the run needs samples from, given no share by --split: the train split is required;
 * train_rank turns validation off when the valid split is the one refused. */
static bool rt_gpt_no_share(const rt_gpt_data_config *cfg, int s, char *err, size_t errlen) {
    if (s == RT_SPLIT_TRAIN)
        snprintf(err, errlen, "--split %s gives the train split no share of the data, and training needs it; give "
                 "it one, e.g. --split 969,30,1", cfg->split);
    else
        snprintf(err, errlen, "--split %s gives the %s split no share of the data, but %" PRId64 " %s samples are "
                 "wanted; give it one (e.g. --split 969,30,1) or pass %s 0", cfg->split, RT_SPLIT_NAMES[s],
                 cfg->num_samples[s], RT_SPLIT_NAMES[s], RT_SPLIT_FLAGS[s]);
    return false;
}

/* "12.3 GiB", "45.6 MiB", "7.0 KiB". */
static const char *rt_gpt_size_text(double bytes, char *buf, size_t n) {
    int unit = bytes >= 0x1p30 ? 30 : bytes >= 0x1p20 ? 20 : 10;
    snprintf(buf, n, "%.1f %ciB", ldexp(bytes, -unit), unit == 30 ? 'G' : unit == 20 ? 'M' : 'K');
    return buf;
}

/* Says what the build will hold (one line on cfg->log) and refuses a build larger than the
 * machine's physical memory, naming the flag of the split that needs the most. */
static bool rt_gpt_check_memory(const rt_gpt_data_config *cfg, const double bytes[RT_SPLITS], double total,
                                char *err, size_t errlen) {
    char what[256] = "", size[32], phys_text[32];
    size_t at = 0;
    int big = RT_SPLIT_TRAIN;
    for (int s = 0; s < RT_SPLITS; s++) {
        if (!bytes[s]) continue;
        at += (size_t)snprintf(what + at, sizeof what - at, "%s%" PRId64 " %s", at ? ", " : "", cfg->num_samples[s],
                               RT_SPLIT_NAMES[s]);
        if (bytes[s] > bytes[big]) big = s;
    }
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double phys = pages > 0 && page > 0 ? (double)pages * (double)page : INFINITY;
    if (total > phys) {
        snprintf(err, errlen, "%s: the sample indices for %s samples need %s, more than this machine's %s of "
                 "memory; lower %s (or the global batch size)", RT_SPLIT_FLAGS[big], what,
                 rt_gpt_size_text(total, size, sizeof size), rt_gpt_size_text(phys, phys_text, sizeof phys_text),
                 RT_SPLIT_FLAGS[big]);
        return false;
    }
    if (cfg->log) {
        fprintf(cfg->log, "data: building the sample indices for %s samples (%s of memory)\n", what,
                rt_gpt_size_text(total, size, sizeof size));
        fflush(cfg->log);
    }
    return true;
}

/* BlendedMegatronDatasetBuilder: every split with samples wanted, first planned (epochs and the
 * indices' size, checked against the memory before any is allocated), then built. */
static bool rt_gpt_build_all(rt_gpt_data *d, const rt_gpt_data_config *cfg, char *err, size_t errlen) {
    double lo[RT_SPLITS], hi[RT_SPLITS], *w = malloc(2 * (size_t)d->n * sizeof *w);
    if (!w) {
        snprintf(err, errlen, "--data-path: out of memory");
        return false;
    }
    double *w2 = w + d->n, bytes[RT_SPLITS] = {0};
    bool has[RT_SPLITS], ok = rt_gpt_parse_split(cfg->split, lo, hi, has, err, errlen);
    if (ok && d->blended) rt_np_normalize(cfg->weights, d->n, w); /* the builder's normalize() */
    rt_gpt_progress progress = {.log = cfg->log, .t_start = os_now_s()};
    progress.t_last = progress.t_start;
    int64_t target;
    for (int s = 0; s < RT_SPLITS && ok; s++) {
        if (cfg->num_samples[s] == 0) continue;
        ok = has[s] || rt_gpt_no_share(cfg, s, err, errlen);
        for (int k = 0; k < d->n && ok; k++) {
            rt_gpt_split_job job = rt_gpt_job(d, cfg, s, k, lo, hi, w, &progress, &target);
            ok = rt_gpt_plan_epochs(&d->split[k][s], &job, err, errlen);
            d->blend_size[s] += target;
            bytes[s] += ok ? rt_gpt_split_bytes(&d->split[k][s], cfg->seq_length) : 0;
        }
        progress.total += bytes[s];
        bytes[s] += (double)d->blend_size[s] * (sizeof *d->blend_dataset[s] + sizeof *d->blend_sample[s]);
    }
    ok = ok && rt_gpt_check_memory(cfg, bytes, bytes[0] + bytes[1] + bytes[2], err, errlen);
    for (int s = 0; s < RT_SPLITS && ok; s++) {
        if (cfg->num_samples[s] == 0) continue;
        for (int k = 0; k < d->n && ok; k++) {
            rt_gpt_split_job job = rt_gpt_job(d, cfg, s, k, lo, hi, w, &progress, &target);
            ok = rt_gpt_build_split(&d->split[k][s], &job, err, errlen);
        }
        if (ok && d->blended) {
            rt_np_normalize(w, d->n, w2); /* BlendedDataset normalises again, changing last bits */
            ok = rt_gpt_build_blend(d, s, w2, err, errlen);
        }
    }
    free(w);
    return ok;
}

/* --mock-data: as many samples as each split is asked for, none built. */
static rt_gpt_data *rt_gpt_mock_open(const rt_gpt_data_config *cfg, char *err, size_t errlen) {
    rt_gpt_data *d = cfg->mock_vocab > 0 ? calloc(1, sizeof *d) : NULL;
    if (!d) return snprintf(err, errlen, "--mock-data: %s", cfg->mock_vocab > 0 ? "out of memory" : "no vocabulary"), NULL;
    d->mock = true;
    d->seq_length = cfg->seq_length;
    d->seed = (uint64_t)cfg->seed;
    d->mock_vocab = cfg->mock_vocab;
    memcpy(d->mock_samples, cfg->num_samples, sizeof d->mock_samples);
    return d;
}

rt_gpt_data *rt_gpt_data_open(const rt_gpt_data_config *cfg, char *err, size_t errlen) {
    if (cfg->mock) return rt_gpt_mock_open(cfg, err, errlen);
    if (!rt_gpt_check_config(cfg, err, errlen)) return NULL;
    rt_gpt_data *d = calloc(1, sizeof *d);
    if (d) {
        d->n = cfg->n;
        d->seq_length = cfg->seq_length;
        d->blended = cfg->weights != NULL;
        d->prefixes = calloc((size_t)d->n, sizeof *d->prefixes);
        d->ds = calloc((size_t)d->n, sizeof *d->ds);
        d->split = calloc((size_t)d->n, sizeof *d->split);
    }
    if (!d || !d->prefixes || !d->ds || !d->split) {
        snprintf(err, errlen, "--data-path: out of memory");
    } else if (rt_gpt_open_datasets(d, cfg, err, errlen) && rt_gpt_build_all(d, cfg, err, errlen)) {
        return d;
    }
    rt_gpt_data_close(d);
    return NULL;
}

void rt_gpt_data_close(rt_gpt_data *d) {
    if (!d) return;
    for (int k = 0; k < d->n; k++) {
        if (d->split)
            for (int s = 0; s < RT_SPLITS; s++) rt_gpt_split_free(&d->split[k][s]);
        if (d->ds) rt_dataset_close(d->ds[k]);
        if (d->prefixes) free(d->prefixes[k]);
    }
    for (int s = 0; s < RT_SPLITS; s++) {
        free(d->blend_dataset[s]);
        free(d->blend_sample[s]);
    }
    free(d->split);
    free(d->ds);
    free(d->prefixes);
    free(d);
}

int64_t rt_gpt_data_num_samples(const rt_gpt_data *d, int split) {
    assert(split >= 0 && split < RT_SPLITS);
    if (d->mock) return d->mock_samples[split];
    return d->blended ? d->blend_size[split] : d->split[0][split].num_samples;
}

void rt_gpt_data_sample(const rt_gpt_data *d, int split, int64_t index, int32_t *out) {
    assert(index >= 0 && index < rt_gpt_data_num_samples(d, split));
    if (d->mock) {
        rt_gpt_mock_sample(d, split, index, out);
        return;
    }
    int k = 0;
    if (d->blended) {
        k = d->blend_dataset[split][index];
        index = d->blend_sample[split][index];
    }
    rt_gpt_split_sample(&d->split[k][split], d->ds[k], index, out);
}

bool rt_gpt_data_check_tokens(const rt_gpt_data *d, int64_t vocab, char *err, size_t errlen) {
    for (int k = 0; k < d->n; k++)
        if (!rt_dataset_check_tokens(d->ds[k], vocab, err, errlen)) return false;
    return true;
}

void rt_gpt_data_print(const rt_gpt_data *d, FILE *out) {
    for (int s = 0; d->mock && s < RT_SPLITS; s++)
        if (d->mock_samples[s])
            fprintf(out, "data %-5s mock: %" PRId64 " samples of synthetic tokens in [0, %" PRId64 ")\n",
                    RT_SPLIT_NAMES[s], d->mock_samples[s], d->mock_vocab);
    for (int s = 0; s < RT_SPLITS; s++) {
        for (int k = 0; k < d->n; k++) {
            const rt_gpt_split *g = &d->split[k][s];
            if (!g->num_samples) continue;
            fprintf(out, "data %-5s %s: sequences [%" PRId64 ", %" PRId64 "), tokens/epoch %" PRId64 ", epochs %" PRId64
                    "%s, samples %" PRId64 "\n", RT_SPLIT_NAMES[s], d->prefixes[k], g->first_seq,
                    g->first_seq + g->num_seqs, g->tokens_per_epoch, g->num_epochs,
                    g->separate_final_epoch ? " (last shuffled apart)" : "", g->num_samples);
        }
        if (d->blended && d->blend_size[s])
            fprintf(out, "data %-5s blend of %d datasets: samples %" PRId64 "\n", RT_SPLIT_NAMES[s], d->n,
                    d->blend_size[s]);
    }
}

/* ---- --data-path ----------------------------------------------------------------------------- */

/* A weight as Python's float() reads it in Megatron's get_blend_from_list: the whole string. */
static bool rt_gpt_parse_weight(const char *text, double *w) {
    char *end;
    *w = strtod(text, &end);
    return end != text && !*end;
}

bool rt_gpt_data_parse_paths(int argc, char **argv, int *consumed, rt_gpt_data_config *cfg, char *err,
                             size_t errlen) {
    int n = 0;
    while (n < argc && strncmp(argv[n], "--", 2) != 0) n++;
    *consumed = n;
    rt_gpt_data_config_free(cfg);
    bool weighted = n % 2 == 0;
    int count = weighted ? n / 2 : n;
    if (n == 0 || (!weighted && n > 1) || count > RT_GPT_MAX_DATASETS) {
        snprintf(err, errlen, "--data-path takes PREFIX or up to %d WEIGHT PREFIX pairs (e.g. --data-path 0.3 A 0.7 B), "
                 "got %d values", RT_GPT_MAX_DATASETS, n);
        return false;
    }
    cfg->prefixes = calloc((size_t)count, sizeof *cfg->prefixes);
    cfg->weights = weighted ? calloc((size_t)count, sizeof *cfg->weights) : NULL;
    if (!cfg->prefixes || (weighted && !cfg->weights)) {
        rt_gpt_data_config_free(cfg);
        snprintf(err, errlen, "--data-path: out of memory");
        return false;
    }
    for (int k = 0; k < count; k++) {
        cfg->prefixes[k] = argv[weighted ? 2 * k + 1 : k];
        if (!weighted) continue;
        double *w = &cfg->weights[k];
        if (!rt_gpt_parse_weight(argv[2 * k], w) || !(*w >= 0) || !isfinite(*w)) {
            snprintf(err, errlen, "--data-path: '%s' is not a weight >= 0; several datasets take WEIGHT PREFIX pairs, "
                     "e.g. --data-path 0.3 A 0.7 B", argv[2 * k]);
            rt_gpt_data_config_free(cfg);
            return false;
        }
    }
    cfg->n = count;
    return true;
}

void rt_gpt_data_config_free(rt_gpt_data_config *cfg) {
    free(cfg->prefixes);
    free(cfg->weights);
    cfg->prefixes = NULL;
    cfg->weights = NULL;
    cfg->n = 0;
}

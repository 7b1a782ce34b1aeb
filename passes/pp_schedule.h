/* pp_schedule.h — pipeline parallelism's plan before any IR: which layers each (virtual) stage
 * runs, the order of forward (F), backward (B) and weight-gradient (W) passes each pipeline rank
 * runs (1F1B, interleaved 1F1B, ZB-H1), and an event simulation of those orders under a cost per
 * pass. Pure C over numbers: the pipeline and schedule passes call it, `mcc schedule` draws it.
 *
 * Virtual stage g = chunk * p + rank (Megatron's interleaved placement): the model's layers run
 * through virtual stages 0 .. p*v-1 in order, rank r holding chunks 0..v-1, i.e. stages r, p+r, ...
 * Dependencies of the passes on micro-batch mb:
 *   F(mb, g) after F(mb, g-1);  B(mb, g) after F(mb, g) and B(mb, g+1);  W(mb, g) after B(mb, g). */
#ifndef MCC_PP_SCHEDULE_H
#define MCC_PP_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { PP_MAX_V = 64 }; /* virtual stages per rank */

/* --pipeline-schedule's schedules: config pipeline_schedule's choices after auto (ir_pp_sched), each
 * the index of its row of pp_scheds */
typedef enum { PP_SCHED_1F1B, PP_SCHED_INTERLEAVED, PP_SCHED_ZB_H1, PP_NUM_SCHEDS } pp_sched_kind;
extern const char *const *const pp_sched_names; /* "1f1b", "interleaved", "zb-h1": ir_pp_sched_words after auto */

typedef enum {
    PP_ACT_F, /* forward of one virtual stage on one micro-batch */
    PP_ACT_B, /* input gradient; where the schedule keeps the backward whole (1F1B, interleaved) B includes W */
    PP_ACT_W, /* weight gradient, where the schedule splits the backward (pp_sched_desc splits_w: ZB-H1) */
} pp_act_kind;

/* A stash's span: the pass that saves a micro-batch's values into it to the last that reads them.
 * Each span has its own slots, so what only B reads is free after B while what W reads lives on.
 * Under 1F1B and interleaved everything is FB (B includes W). ORDER: ir_stash_span (ir/ir.h). */
typedef enum {
    PP_SPAN_FB, /* F's values that B reads and W does not */
    PP_SPAN_FW, /* F's values that W reads (and B may), split backward only */
    PP_SPAN_BW, /* B's values that W reads, split backward only */
    PP_NUM_SPANS
} pp_span;

/* The passes that take (first) and free (last) a span's slot; a pass between them reads it. */
extern const uint8_t pp_span_take[PP_NUM_SPANS], pp_span_free[PP_NUM_SPANS];

/* chunk: the virtual stage's index on this rank, 0..v-1; slot[span]: which stash slot of (rank,
 * chunk, span) holds mb's values of that span, the lowest free when its taking pass runs; -1 where
 * the pass touches no such span. */
typedef struct {
    uint8_t kind; /* pp_act_kind */
    int mb;
    int chunk;
    int slot[PP_NUM_SPANS];
} pp_action;

typedef struct {
    pp_action *a;
    int n;
    int nslots[PP_NUM_SPANS][PP_MAX_V]; /* slots each span of each chunk needs: the most in use at once */
} pp_rank_program;

/* A schedule's properties, one row per pp_sched_kind (ORDER pp_sched_kind): whatever the check, the
 * simulation, the pipeline and schedule passes and `mcc schedule` ask of a schedule, they read here,
 * so a new schedule (ZB-V, DualPipe) is its config word, one row and one builder. Its name is
 * pp_sched_names[kind], the config's word, spelled once (ir/ir.c). */
typedef struct {
    /* rank r's passes in its order (pp_push), v its virtual stages (1 where the row says so) */
    void (*build)(pp_rank_program *rp, int p, int m, int v, int r);
    /* the backward is two passes, B (input gradient) then W (weight gradient), W the last of a
     * micro-batch's chunk, freeing its stash (the FW and BW spans); else B is the whole backward and
     * the last pass (pp_sched_last_pass) */
    bool splits_w;
    bool virtual_stages;                         /* runs v >= 2 chunks a rank (interleaved's); else v is 1 */
    bool mb_multiple_of_p;                       /* the micro-batches a multiple of p (Megatron-LM's interleaved rule) */
    const char *ideal_text;                      /* the ideal bubble's formula as `mcc schedule` prints it */
    double (*ideal_bubble)(int p, int m, int v); /* its value, idle over compute at equal pass times */
} pp_sched_desc;
extern const pp_sched_desc pp_scheds[PP_NUM_SCHEDS];

/* The pass that ends a micro-batch's work on a chunk and frees what it stashed: W where the
 * backward is split, else B. The passes of a micro-batch's chunk are F .. this, in enum order. */
static inline pp_act_kind pp_sched_last_pass(pp_sched_kind kind)
{
    return pp_scheds[kind].splits_w ? PP_ACT_W : PP_ACT_B;
}

/* The first schedule in pp_scheds' order that runs v virtual stages a rank and splits the backward
 * (splits_w) or not; PP_NUM_SCHEDS when none does. What auto weighs: frontend/main.c, schedule.c. */
pp_sched_kind pp_sched_find(int v, bool splits_w);

typedef struct {
    int p, m, v; /* pipeline ranks, micro-batches, virtual stages per rank */
    pp_sched_kind kind;
    pp_rank_program *rank; /* [p] */
} pp_schedule;

/* The programs of every rank. Refuses, with the numbers, what cannot be built: p, m, v < 1; what
 * the row's rules refuse: v < 2 with virtual stages, else v != 1; m % p != 0 where it must divide. */
bool pp_schedule_build(pp_sched_kind kind, int p, int m, int v, pp_schedule *out, char *err, size_t errlen);
/* pp_schedule_build's refusals alone, without building. */
bool pp_schedule_check(pp_sched_kind kind, int p, int m, int v, char *err, size_t errlen);
void pp_schedule_free(pp_schedule *s);

static inline int pp_virtual_stage(const pp_schedule *s, int rank, int chunk) { return chunk * s->p + rank; }

/* What the stage split is made from: Megatron's flags, one spelling of it at a time. */
typedef struct {
    int num_layers;  /* the decoder's layers */
    int mtp_layers;  /* multi-token prediction depths: after the decoder's, on the last virtual stage */
    int p, v;        /* pipeline ranks, virtual stages per rank (pp_virtual_stages finds v) */
    int first, last; /* --decoder-first/last-pipeline-num-layers: the layers of the first/last rank; -1: not given */
    bool account_embedding, account_loss; /* --account-for-embedding/loss-in-pipeline-split */
    const char *layout; /* --pipeline-model-parallel-layout (NULL or "": not given) */
} pp_split_flags;

/* Virtual stages per rank (f->v is not read) from Megatron's three spellings: a layout's stages
 * over p; stages_per_rank; the layers per pipeline stage (num_layers, +1 for each account flag)
 * over layers_per_virtual_stage; 1 when none. Refuses two at once, a v that does not divide. */
bool pp_virtual_stages(const pp_split_flags *f, int layers_per_virtual_stage, int stages_per_rank, int *v, char *err,
                       size_t errlen);

/* The stage split, the one list every consumer reads (the pipeline pass, mcc schedule, tune's
 * estimate): layers_per_virtual_stage[g] decoder layers for the p*v virtual stages (g = chunk * p
 * + rank, in layer order). From the layout, Megatron's PipelineParallelLayerLayout; else from
 * first/last, the layers of the first/last rank (all its chunks, split evenly among them), the
 * rest even over the middle ranks; else even (get_num_layers_to_build), the account flags counting
 * the embedding (loss) as one layer of virtual stage 0 (p*v-1). A split that does not divide, or
 * leaves a stage no layer (the last may hold only the depths), is refused with the numbers and
 * the flag: it never trains fewer layers. */
bool pp_split_layers(const pp_split_flags *f, int *layers_per_virtual_stage, char *err, size_t errlen);

/* The stages of Megatron's --pipeline-model-parallel-layout text, its grammar checked: letters
 * E (embedding), t (decoder layer), m (multi-token depth), L (loss); '|' between stages; x*N and
 * (...)*N repeat (groups do not nest); ',' is cosmetic. -1 with the fault in err. */
int pp_layout_stages(const char *layout, char *err, size_t errlen);

/* The default split balanced by cost (no virtual stages): the (first, last) layers of the first
 * and last pipeline ranks, the middle ranks even, that lower the most a rank costs below the even
 * split's, each layer costing `layer` and the first and last ranks `first_extra` and `last_extra`
 * more (the embedding, the head and loss). False (*first = *last = -1) when the even split is as
 * good: Megatron's default stays where nothing is gained. */
bool pp_balanced_split(int num_layers, int p, double layer, double first_extra, double last_extra, int *first,
                       int *last);

/* A pass's cost in seconds, per virtual stage; under 1F1B and interleaved a B costs b + w. */
typedef struct {
    double f, b, w;
} pp_stage_cost;

typedef struct {
    int *first;          /* [p + 1]: rank r's actions are start/end[first[r] .. first[r+1]-1] */
    double *start, *end; /* per rank per action, in program order */
    double makespan;
    double bubble;       /* 1 - busy / (p * makespan) */
    double idle_ratio;   /* idle / busy over all ranks: (p-1)/m for 1F1B, what pp_ideal_bubble predicts */
    int *peak_slots;     /* per rank: the most stash slots in use at once, all chunks */
} pp_timeline;

/* Runs the programs: each rank's actions in its order, each as soon as the rank is free and its
 * dependencies are done (+ p2p_s when a dependency ran on another rank). Fails naming the stuck
 * actions if the dependencies form a cycle (deadlock), or if a pass is missing or repeated: so
 * it is also the check that a schedule is valid. cost: [p*v]. */
bool pp_schedule_simulate(const pp_schedule *s, const pp_stage_cost *cost, double p2p_s, pp_timeline *t, char *err,
                          size_t errlen);
void pp_timeline_free(pp_timeline *t);

/* The most micro-batches rank r has in flight at once, all chunks: in program order, which is the
 * rank's time order, F takes one, B releases it (W under ZB). */
int pp_rank_peak(const pp_schedule *s, int r);

/* The ideal bubble as idle over compute, the row's ideal_bubble: (p-1)/m for 1F1B; (p-1)/(v m)
 * interleaved; ZB-H1 (p-1)(T_F+T_B-T_W) / (m (T_F+T_B+T_W)) (Qi et al.) at T_F = T_B = T_W, i.e.
 * (p-1)/(3m). */
double pp_ideal_bubble(const pp_schedule *s);

#endif

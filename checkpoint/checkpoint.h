/* checkpoint.h — mcc's checkpoint directory: what train_rank saves and loads and `mcc convert`
 * reads and writes. One iteration's checkpoint:
 *
 *     DIR/latest_checkpointed_iteration.txt     "500\n" (Megatron's), replaced last
 *     DIR/iter_0000500/manifest.json            rank 0's: iteration, counters, mesh, model,
 *                                               every WHOLE tensor's role, dtype and shape
 *     DIR/iter_0000500/rank_00000.safetensors   this rank's part of each tensor it holds
 *     DIR/iter_0000500/rank_00000.json          that file's size and checksum, and per tensor its
 *                                               layout record (ir_layout_str); the mesh degrees
 *                                               and the rank's coordinates
 *
 * Tensors are named by their whole tensor's logical name: a parameter's (for its fp32 master or
 * ZeRO's master shard), "<param>.adam_m" / ".adam_v" for Adam's moments, sharded or not. So a
 * checkpoint's content does not depend on the layout: the rank files hold the parts, and any
 * reader assembles a whole tensor from them through their layout records (ir_layout_index).
 * A directory is written as iter_NNNNNNN.tmp and renamed when whole: one without a manifest, or a
 * .tmp, is never loaded. */
#ifndef MCC_CK_CHECKPOINT_H
#define MCC_CK_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoint/safetensors.h"
#include "ir/ir.h"

#define CK_FORMAT "mcc-checkpoint"
#define CK_VERSION 1
#define CK_LATEST_FILE "latest_checkpointed_iteration.txt"

typedef enum { CK_ROLE_PARAM, CK_ROLE_ADAM_M, CK_ROLE_ADAM_V, CK_ROLE_FP8_HISTORY, CK_ROLE_EXPERT_BIAS, CK_NUM_ROLES } ck_role;
extern const char *const ck_role_names[CK_NUM_ROLES]; /* "param", "adam_m", "adam_v", "fp8_history", "expert_bias" */

/* One whole tensor of the manifest. */
typedef struct {
    char *name;                     /* "layers.0.mlp.up.weight", "layers.0.mlp.up.weight.adam_m" */
    ck_role role;
    char *param;                    /* its owner parameter's name (a param: its own) */
    ir_type whole;                  /* dtype and the whole tensor's shape */
} ck_tensor;

/* What manifest.json holds besides the tensors. */
typedef struct {
    int64_t iteration, consumed_samples;
    int64_t steps_applied;          /* optimizer steps taken: Adam's step and the lr schedule's */
    int64_t evals_done;
    uint64_t seed;
    int degree[IR_NUM_AXES];        /* the mesh it was saved under */
    int ranks;
    int nmodel;
    char **model;                   /* key, value (the plan's config text), ...: the model's function, every
                                     * IR_CFG_MODEL key of ir/config.def the plan sets (an earlier mcc's:
                                     * num_layers, hidden_size, vocab_size, seq_length, num_params) */
} ck_state;

/* The model's function of m (the IR_CFG_MODEL keys its config sets) as ck_state.model's pairs,
 * pointing into m's config, into kv (2 * IR_CFG_COUNT entries); returns the pairs' count. */
int ck_model_of(const ir_module *m, char **kv);
/* Whether the manifest records the model's function (an earlier mcc's records its shapes alone). */
bool ck_model_recorded(const ck_state *s);
/* Whether every IR_CFG_MODEL key both s's model and m's config hold has one value (numbers as
 * numbers), but `ignore` (IR_CFG_COUNT: none). Otherwise false with "<key> is <value> in the
 * checkpoint but <value> in <theirs> (<its meaning>)" in err. */
bool ck_model_same(const ck_state *s, const ir_module *m, ir_cfg ignore, const char *theirs, char *err, size_t errlen);

/* One part a rank holds: the whole tensor's name, the part's type and bytes, and the layout
 * record that places it in the whole (no splits: the part is the whole). */
typedef struct {
    const char *name;
    ir_type part;
    const void *data;               /* NULL: fill(ctx, i, ...) makes part i's bytes as they are written */
    ir_layout layout;
    ck_st_fill fill;
    void *ctx;
} ck_part;

/* --- writing: every rank writes its own files, then rank 0 the manifest and the commit --- */

/* "DIR/iter_0000500" (tmp: with ".tmp") into buf. */
void ck_iter_dir(const char *dir, int64_t iteration, bool tmp, char *buf, size_t len);
/* Creates DIR/iter_N.tmp (and DIR), emptying one a crashed save left. Rank 0 only, before the
 * ranks write. */
bool ck_begin(const char *dir, int64_t iteration, char *err, size_t errlen);
/* Writes rank's safetensors file (fsynced) and its json into the tmp directory of iteration;
 * *bytes: the bytes written. */
bool ck_write_rank(const char *dir, int64_t iteration, int rank, const int degree[IR_NUM_AXES],
                   const int coord[IR_NUM_AXES], int n, const ck_part *parts, uint64_t *bytes, char *err,
                   size_t errlen);
/* Rank 0, after every rank wrote (a barrier): manifest.json into the tmp directory, fsync it, rename
 * it to iter_N, fsync DIR, then replace DIR/latest_checkpointed_iteration.txt (a temporary file,
 * fsync, rename, fsync DIR). keep > 0: then removes all but the newest keep iter_ directories. */
bool ck_commit(const char *dir, const ck_state *s, int ntensors, const ck_tensor *t, int keep, char *err,
               size_t errlen);

/* --- reading --- */

typedef struct {
    ck_st_file st;
    int degree[IR_NUM_AXES], coord[IR_NUM_AXES];
    ir_layout *layout;              /* per entry of st */
    uint64_t *sum;                  /* per entry of st: its bytes' checksum (the record's; NULL: a record of
                                     * an earlier mcc, without them, whose whole file ck_open checked) */
} ck_rank_file;

typedef struct {
    char dir[4096];                 /* DIR/iter_NNNNNNN */
    ck_state state;
    int ntensors;
    ck_tensor *tensors;
    ck_rank_file *rank;             /* state.ranks of them */
} ck_reader;

/* Opens the checkpoint of iteration (-1: the one latest_checkpointed_iteration.txt names) under
 * dir, validating the manifest, every rank file's size, its header (and the header's checksum) and
 * its layout records against the manifest's shapes; a part's bytes are checked against their own
 * checksum when read. *absent (may be NULL) is set true, with the error, when
 * dir holds no checkpoint at all (no latest file): Megatron then starts from scratch. */
bool ck_open(ck_reader *r, const char *dir, int64_t iteration, bool *absent, char *err, size_t errlen);
/* The manifest's tensor named name, or NULL. */
const ck_tensor *ck_find(const ck_reader *r, const char *name);
/* The whole tensor name, assembled from every rank file's parts (malloc'd, ir_bytes(&whole)).
 * NULL with the error (a missing part names the tensor, a checksum mismatch the file). */
void *ck_read_whole(ck_reader *r, const char *name, char *err, size_t errlen);
/* The part of tensor name that layout l gives the rank at coord of a mesh of degree: part has its
 * shape; into out. Element by element from the saved parts that hold it: only the saved parts
 * that overlap it are read (each whole, and verified), so a rank loading under the layout it saved
 * with reads its own part alone. */
bool ck_read_part(ck_reader *r, const char *name, const ir_type *part, const ir_layout *l,
                  const int degree[IR_NUM_AXES], const int coord[IR_NUM_AXES], void *out, char *err, size_t errlen);
void ck_close(ck_reader *r);

#endif

/* dropout.h — what the CPU kernels and the CUDA launchers share about the dropout ops of
 * ir/ops.def (dropout, attention_dropout, attention_dropout_grad): their mask parameters and
 * where their elements sit in the whole tensor, from the op's attributes. The mask itself is
 * kernels_templates/philox.cuh's, one definition for the CPU and the GPU. */
#ifndef MCC_RT_DROPOUT_H
#define MCC_RT_DROPOUT_H

#include "ir/ir.h"
#include "kernels_templates/philox.cuh"

/* The attributes (ops.def, IR_ATTR_DROPOUT_*: attention_dropout's p, seed, site sit at dropout's):
 * every dropout op starts with p, seed, site; dropout goes on with dim, offset, extent (dimension
 * dim of x holds [offset, offset + dims[dim]) of a dimension of extent; dim 0 splits the batch
 * rows), then cp, cp_rank: with cp > 1 the sequence, dimension 1, is context-parallel rank
 * cp_rank's two balanced chunks of the whole (ir_cp_runs), extent (dim 1) counting the rank's
 * tokens; the attention ops with head_offset (this rank's first query head), heads (the whole
 * head count, which the kernels do not need: heads are a sample's outermost dimension; the shard
 * pass's) and attention's cp, cp_rank, ring, shift (the positions of the queries and keys in the
 * whole sequence, which the mask draws by). */

/* The mask parameters of dropout op `in`, whose first_sample operand lives at first_sample. */
mcc_dropout rt_dropout_of(const ir_instr *in, const void *first_sample);
/* Operand x of dropout op `in` as blocks of rows (mcc_dropout_rows): R rows starting `first`
 * elements into x. One block, unless context parallelism cuts the sequence into runs of positions
 * apart in the whole (ir_cp_runs): one block each. */
typedef struct {
    mcc_dropout_rows rows;
    long long R, first;
} rt_dropout_block;
int rt_dropout_blocks(const ir_instr *in, const ir_type *x, rt_dropout_block block[2]);

#endif

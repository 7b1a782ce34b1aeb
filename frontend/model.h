/* model.h — the model builders: spec -> logical forward graph of one micro-batch. */
#ifndef MCC_MODEL_H
#define MCC_MODEL_H

#include "frontend/spec.h"
#include "ir/ir.h"

/* Builds `micro_step` and `eval_step` (the same forward, but without dropout in eval_step;
 * autodiff differentiates only micro_step) over shared parameter globals.
 * keep_logits adds `output @logits` (train_rank --dump-dir writes it; it keeps the logits alive
 * through the whole backward, so it costs memory). */
ir_module *mcc_build_model(const mcc_spec *s, bool keep_logits);

#endif

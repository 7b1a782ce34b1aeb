/* model.h — the model builders: spec -> logical forward graph of one micro-batch. */
#ifndef MCC_MODEL_H
#define MCC_MODEL_H

#include "frontend/spec.h"
#include "ir/ir.h"

ir_module *mcc_build_model(const mcc_spec *s);

#endif

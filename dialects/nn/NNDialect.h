// The nn dialect: declarations.
#ifndef GPIPE_DIALECTS_NN_NNDIALECT_H
#define GPIPE_DIALECTS_NN_NNDIALECT_H

#include "mlir/IR/Dialect.h"

#include "dialects/nn/NNDialect.h.inc"

#endif

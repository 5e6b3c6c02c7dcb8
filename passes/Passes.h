// Declarations and registration of every gpipe pass.
#ifndef GPIPE_PASSES_PASSES_H
#define GPIPE_PASSES_PASSES_H

#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/Pass.h"

namespace gpipe {
#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"
} // namespace gpipe

#endif

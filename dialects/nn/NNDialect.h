// The nn dialect, and typed access to the discardable attributes the
// importer and the passes put on the training step.
#ifndef GPIPE_DIALECTS_NN_NNDIALECT_H
#define GPIPE_DIALECTS_NN_NNDIALECT_H

#include "mlir/IR/Dialect.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include "dialects/nn/NNDialect.h.inc"

namespace gpipe::nn {

// The discardable attributes declared in NNDialect.td (`discardableAttrs`)
// and checked by NNDialect's verifier hooks.

/// `nn.input` on argument `arg`: the ONNX name of the graph input it is, or
/// null.
mlir::StringAttr getInputName(mlir::FunctionOpInterface func, unsigned arg);
void setInputName(mlir::FunctionOpInterface func, unsigned arg,
                  mlir::StringAttr name);

/// `nn.output` on result `result`: the ONNX name of the graph output it is.
void setOutputName(mlir::FunctionOpInterface func, unsigned result,
                   mlir::StringAttr name);

/// `nn.loss`: whether result `result` is the training loss.
bool isLoss(mlir::FunctionOpInterface func, unsigned result);
void setLoss(mlir::FunctionOpInterface func, unsigned result);

/// `nn.backward`: whether `op` belongs to the backward phase.
bool isBackward(mlir::Operation *op);
void setBackward(mlir::Operation *op);
void removeBackward(mlir::Operation *op);

} // namespace gpipe::nn

#endif

// --explain: the stage plan, printed for people.
#ifndef GPIPE_COMPILER_DRIVER_EXPLAIN_H
#define GPIPE_COMPILER_DRIVER_EXPLAIN_H

#include "compiler/CppEmitter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>

namespace gpipe::driver {

/// Prints stage `index`: its parameters, its forward ops (`forwards`: each
/// model chunk's forward function) with their ONNX node, result type and
/// cost, the tensors crossing its boundaries, its schedule and its memory
/// plan.
void explainStage(int64_t index, llvm::ArrayRef<mlir::func::FuncOp> forwards,
                  const EmittedStage &stage, const std::string &remat,
                  int64_t microbatches, bool cuda, int64_t numStages,
                  int64_t replicas);

} // namespace gpipe::driver

#endif

// Small helpers shared by the gpipe passes.
#ifndef GPIPE_PASSES_UTILS_H
#define GPIPE_PASSES_UTILS_H

#include "dialects/nn/NNOps.h"
#include "dialects/pipe/PipeOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace gpipe {

/// Erases ops (anywhere in `func`) whose results nobody reads and that have
/// no side effects (an unread nn.param included), innermost and last first.
inline void eraseDeadOps(mlir::func::FuncOp func) {
  llvm::SmallVector<mlir::Operation *> ops;
  func.walk([&](mlir::Operation *op) { ops.push_back(op); });
  for (mlir::Operation *op : llvm::reverse(ops))
    if (op->use_empty() && op->getNumResults() > 0 &&
        (mlir::isPure(op) || mlir::isa<nn::ParamOp>(op)))
      op->erase();
}

/// The micro-batches per step of the module holding `op`
/// (`pipe.microbatches`), 1 when unset.
inline int64_t microbatchesOf(mlir::Operation *op) {
  auto module = op->getParentOfType<mlir::ModuleOp>();
  return module ? pipeline::getNumMicrobatches(module) : 1;
}

/// The function of `stage` and `phase` made by gpipe-outline-stages, or
/// null.
inline mlir::func::FuncOp findStageFunc(mlir::ModuleOp module, int64_t stage,
                                        pipeline::Phase phase) {
  for (auto f : module.getOps<mlir::func::FuncOp>())
    if (pipeline::getStage(f) == stage && pipeline::getPhase(f) == phase)
      return f;
  return nullptr;
}

} // namespace gpipe

#endif

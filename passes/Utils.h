// Small helpers shared by the gpipe passes.
#ifndef GPIPE_PASSES_UTILS_H
#define GPIPE_PASSES_UTILS_H

#include "dialects/nn/NNOps.h"
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
  auto mb = module
                ? module->getAttrOfType<mlir::IntegerAttr>("pipe.microbatches")
                : mlir::IntegerAttr();
  return mb ? mb.getInt() : 1;
}

/// The function of `stage` and `phase` ("forward", "backward", "update")
/// made by gpipe-outline-stages, or null.
inline mlir::func::FuncOp findStageFunc(mlir::ModuleOp module, int64_t stage,
                                        llvm::StringRef phase) {
  for (auto f : module.getOps<mlir::func::FuncOp>()) {
    auto s = f->getAttrOfType<mlir::IntegerAttr>("pipe.stage");
    auto p = f->getAttrOfType<mlir::StringAttr>("pipe.phase");
    if (s && p && s.getInt() == stage && p.getValue() == phase)
      return f;
  }
  return nullptr;
}

/// The number of stages of an outlined module (its `pipe.stages`, else 1).
inline int64_t numStages(mlir::ModuleOp module) {
  if (auto k = module->getAttrOfType<mlir::IntegerAttr>("pipe.stages"))
    return k.getInt();
  return 1;
}

} // namespace gpipe

#endif

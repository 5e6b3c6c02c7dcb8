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

/// The value whose storage `v` is a view of (through nn.reshape), or `v`.
inline mlir::Value viewRoot(mlir::Value v) {
  while (auto r = v.getDefiningOp<nn::ReshapeOp>())
    v = r.getInput();
  return v;
}

/// The nn.param that `v` is (through views), or null.
inline nn::ParamOp paramOf(mlir::Value v) {
  return viewRoot(v).getDefiningOp<nn::ParamOp>();
}

/// The bytes of a static tensor value (f32: 4 per element, i64: 8).
inline int64_t bytesOf(mlir::Value v) {
  auto t = mlir::cast<mlir::RankedTensorType>(v.getType());
  return t.getNumElements() * (t.getElementType().isF32() ? 4 : 8);
}

/// `x` rounded up to a multiple of `align`.
inline int64_t alignUp(int64_t x, int64_t align) {
  return (x + align - 1) / align * align;
}

/// gpipe-check-schedule's checks of every stage's pipe.schedule in
/// `module`: transfers pair up, and no order of the stages' actions can
/// deadlock (passes/Schedule.cpp). Emits located errors.
mlir::LogicalResult checkSchedules(mlir::ModuleOp module);

} // namespace gpipe

#endif

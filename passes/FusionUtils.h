// Helpers shared by the passes that fuse an imported op chain into one op
// (gpipe-fuse-layer-norm, gpipe-fuse-attention).
#ifndef GPIPE_PASSES_FUSIONUTILS_H
#define GPIPE_PASSES_FUSIONUTILS_H

#include "dialects/nn/NNOps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"

namespace gpipe {

inline llvm::ArrayRef<int64_t> shapeOf(mlir::Value v) {
  return mlir::cast<mlir::RankedTensorType>(v.getType()).getShape();
}

/// `c` as a splat f32 constant that, read by `op` beside `other`, leaves
/// `other`'s type unchanged (a scalar as far as the op's result goes).
inline std::optional<float> scalarOperand(mlir::Operation *op, mlir::Value c,
                                          mlir::Value other) {
  if (op->getResult(0).getType() != other.getType())
    return std::nullopt;
  return nn::splatValue(c);
}

/// Whether the matched `ops` are in one block with the discardable
/// attributes (pipe.stage, ...) of `anchor`; if so, sorts them into program
/// order (the last then defines the pattern's result).
inline bool orderPattern(llvm::SmallVectorImpl<mlir::Operation *> &ops,
                         mlir::Operation *anchor) {
  mlir::Block *block = anchor->getBlock();
  mlir::DictionaryAttr attrs = anchor->getDiscardableAttrDictionary();
  if (llvm::any_of(ops, [&](mlir::Operation *op) {
        return op->getBlock() != block ||
               op->getDiscardableAttrDictionary() != attrs;
      }))
    return false;
  llvm::sort(ops, [](mlir::Operation *a, mlir::Operation *b) {
    return a->isBeforeInBlock(b);
  });
  return true;
}

/// Erases a replaced pattern's ops (in program order; nothing outside reads
/// them any more), last first, then the nn.constants they read that nothing
/// else reads.
inline void erasePattern(llvm::ArrayRef<mlir::Operation *> ops) {
  llvm::SetVector<mlir::Operation *> constants;
  for (mlir::Operation *op : llvm::reverse(ops)) {
    for (mlir::Value v : op->getOperands())
      if (auto c = v.getDefiningOp<nn::ConstantOp>())
        constants.insert(c);
    op->erase();
  }
  for (mlir::Operation *c : constants)
    if (c->use_empty())
      c->erase();
}

} // namespace gpipe

#endif // GPIPE_PASSES_FUSIONUTILS_H

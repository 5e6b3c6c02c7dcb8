// Helpers shared by the nn dialect's op family files (not a public header).
#ifndef GPIPE_DIALECTS_NN_OPS_COMMON_H
#define GPIPE_DIALECTS_NN_OPS_COMMON_H

#include "dialects/nn/NNOps.h"

#include "mlir/IR/BuiltinAttributes.h"

namespace gpipe::nn {

inline mlir::RankedTensorType tensorType(mlir::Value v) {
  return mlir::cast<mlir::RankedTensorType>(v.getType());
}

inline int64_t numElements(mlir::Value v) {
  return tensorType(v).getNumElements();
}

/// True if `small` broadcasts (numpy rules) to exactly `big`.
inline bool broadcastsTo(llvm::ArrayRef<int64_t> small,
                         llvm::ArrayRef<int64_t> big) {
  if (small.size() > big.size())
    return false;
  size_t lead = big.size() - small.size();
  for (size_t i = 0; i < small.size(); ++i)
    if (small[i] != 1 && small[i] != big[lead + i])
      return false;
  return true;
}

/// Whether `v` is a constant of zeros (what gpipe-autodiff passes for a
/// result that does not reach the loss).
inline bool isZeros(mlir::Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  auto dense =
      c ? mlir::dyn_cast<mlir::DenseElementsAttr>(c.getValue()) : nullptr;
  return dense && dense.isSplat() && dense.getSplatValue<float>() == 0.0f;
}

/// A rank-0 f32 `nn.constant`.
inline mlir::Value scalarConstant(mlir::OpBuilder &b, mlir::Location loc,
                                  float value) {
  auto type = mlir::RankedTensorType::get({}, b.getF32Type());
  return ConstantOp::create(b, loc, mlir::DenseElementsAttr::get(type, value));
}

} // namespace gpipe::nn

#endif

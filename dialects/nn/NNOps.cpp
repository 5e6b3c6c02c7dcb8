// The nn dialect's ops: shared helpers and the generated op classes. Each op
// family's verifiers, cost, gradient and micro-batch rules are in ops/.
#include "dialects/nn/NNOps.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace gpipe::nn;

#include "dialects/nn/NNInterfaces.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static int64_t byteSize(Type t) {
  auto tt = dyn_cast<RankedTensorType>(t);
  if (!tt || !tt.hasStaticShape())
    return 0;
  return tt.getNumElements() * ((tt.getElementTypeBitWidth() + 7) / 8);
}

int64_t gpipe::nn::defaultBytesAccessed(Operation *op) {
  int64_t bytes = 0;
  for (Type t : op->getOperandTypes())
    bytes += byteSize(t);
  for (Type t : op->getResultTypes())
    bytes += byteSize(t);
  return bytes;
}

FailureOr<SmallVector<int64_t>>
gpipe::nn::broadcastShapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return failure();
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Value gpipe::nn::reduceToType(OpBuilder &b, Location loc, Value grad,
                              RankedTensorType type) {
  if (grad.getType() == type)
    return grad;
  return ReduceToOp::create(b, loc, type, grad);
}

std::optional<float> gpipe::nn::splatValue(Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  if (!c)
    return std::nullopt;
  auto attr = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!attr || !attr.isSplat() || !attr.getElementType().isF32())
    return std::nullopt;
  return attr.getSplatValue<float>();
}

InFlightDiagnostic gpipe::nn::emitBatchSplitError(Operation *op,
                                                  const llvm::Twine &why) {
  return op->emitError("cannot split the batch into micro-batches: ") << why;
}

#define GET_OP_CLASSES
#include "dialects/nn/NNOps.cpp.inc"

// The nn dialect's GEMM: verifier, cost, gradient, micro-batch rule.
#include "dialects/nn/ops/Common.h"

using namespace mlir;
using namespace gpipe::nn;

LogicalResult GemmOp::verify() {
  auto a = tensorType(getA()), b = tensorType(getB());
  auto out = tensorType(getOutput());
  if (a.getRank() != 2 || b.getRank() != 2 || out.getRank() != 2)
    return emitOpError("A, B and the result must be rank 2, got ranks ")
           << a.getRank() << ", " << b.getRank() << ", " << out.getRank();
  int64_t m = getTransA() ? a.getDimSize(1) : a.getDimSize(0);
  int64_t ka = getTransA() ? a.getDimSize(0) : a.getDimSize(1);
  int64_t kb = getTransB() ? b.getDimSize(1) : b.getDimSize(0);
  int64_t n = getTransB() ? b.getDimSize(0) : b.getDimSize(1);
  if (ka != kb)
    return emitOpError("inner dimensions differ: op(A) is ")
           << m << "x" << ka << ", op(B) is " << kb << "x" << n;
  if (out.getDimSize(0) != m || out.getDimSize(1) != n)
    return emitOpError("result must be ") << m << "x" << n << ", got " << out;
  if (getC() && !broadcastsTo(tensorType(getC()).getShape(), out.getShape()))
    return emitOpError("C of type ")
           << getC().getType() << " does not broadcast to " << out;
  return success();
}

int64_t GemmOp::getFlops() {
  auto out = tensorType(getOutput());
  auto a = tensorType(getA());
  int64_t k = getTransA() ? a.getDimSize(0) : a.getDimSize(1);
  return 2 * out.getNumElements() * k + (getC() ? out.getNumElements() : 0);
}

LogicalResult GemmOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  Location loc = getLoc();
  bool ta = getTransA(), tb = getTransB();
  FloatAttr alpha = getAlphaAttr();
  auto gemm = [&](Type type, Value x, Value y, bool tx, bool ty) -> Value {
    return GemmOp::create(b, loc, type, x, y, /*c=*/Value(), b.getBoolAttr(tx),
                          b.getBoolAttr(ty), alpha, b.getF32FloatAttr(1.0f));
  };
  // Y = alpha op(A) op(B): dop(A) = alpha dY op(B)^T, dop(B) = alpha op(A)^T
  // dY.
  Value da = ta ? gemm(getA().getType(), getB(), dy, tb, true)
                : gemm(getA().getType(), dy, getB(), false, !tb);
  Value db = tb ? gemm(getB().getType(), dy, getA(), true, ta)
                : gemm(getB().getType(), getA(), dy, !ta, false);
  operandGrads.push_back(da);
  operandGrads.push_back(db);
  if (getC()) {
    Value dc = dy;
    if (getBeta().convertToFloat() != 1.0f)
      dc = MulOp::create(b, loc, dy.getType(), dy,
                         scalarConstant(b, loc, getBeta().convertToFloat()));
    operandGrads.push_back(reduceToType(b, loc, dc, tensorType(getC())));
  }
  return success();
}

// A carries the batch on its rows (columns when transposed) and gives the
// result's rows; B on its columns gives the result's columns. Contracting
// over the batch would mix micro-batches.
LogicalResult
GemmOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                   SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  std::optional<int64_t> a = operandAxes[0], b = operandAxes[1], out;
  if (a && b)
    return emitBatchSplitError(*this, "both GEMM operands carry the batch");
  if (a) {
    if (*a != (getTransA() ? 1 : 0))
      return emitBatchSplitError(*this,
                                 "the GEMM contracts over the batch axis");
    out = 0;
  } else if (b) {
    if (*b != (getTransB() ? 0 : 1))
      return emitBatchSplitError(*this,
                                 "the GEMM contracts over the batch axis");
    out = 1;
  }
  if (Value c = getC()) {
    auto ct = tensorType(c);
    int64_t lead = 2 - ct.getRank();
    if (std::optional<int64_t> ca = operandAxes[2]) {
      if (!out)
        return emitBatchSplitError(*this, "the GEMM's C operand carries the "
                                          "batch but neither A nor B does");
      if (*ca + lead != *out)
        return emitBatchSplitError(
            *this, "the GEMM's C operand carries the batch on another axis");
    } else if (out && *out - lead >= 0 && ct.getDimSize(*out - lead) != 1) {
      return emitBatchSplitError(
          *this, "the GEMM's C operand has the batch size on the batch axis "
                 "but does not depend on the graph inputs");
    }
  }
  resultAxes.push_back(out);
  return success();
}

//===----------------------------------------------------------------------===//
// nn.batch_matmul
//===----------------------------------------------------------------------===//

namespace {
/// op(X) of a batched operand: its rows and columns after the transpose flag.
struct MatrixDims {
  int64_t rows, cols;
};
MatrixDims opDims(RankedTensorType t, bool trans) {
  int64_t r = t.getDimSize(t.getRank() - 2), c = t.getDimSize(t.getRank() - 1);
  return trans ? MatrixDims{c, r} : MatrixDims{r, c};
}
} // namespace

LogicalResult BatchMatMulOp::verify() {
  auto a = tensorType(getA()), b = tensorType(getB());
  auto out = tensorType(getOutput());
  if (a.getRank() < 2 || b.getRank() < 2)
    return emitOpError("A and B must have rank >= 2, got ranks ")
           << a.getRank() << " and " << b.getRank();
  int64_t rank = std::max(a.getRank(), b.getRank());
  if (rank < 3)
    return emitOpError("A or B must have rank >= 3 (a rank-2 product is "
                       "nn.gemm)");
  if (out.getRank() != rank)
    return emitOpError("result must have rank ")
           << rank << ", got " << out.getRank();
  MatrixDims opA = opDims(a, getTransA()), opB = opDims(b, getTransB());
  if (opA.cols != opB.rows)
    return emitOpError("inner dimensions differ: op(A) is ")
           << opA.rows << "x" << opA.cols << ", op(B) is " << opB.rows << "x"
           << opB.cols;
  FailureOr<SmallVector<int64_t>> batch =
      broadcastShapes(a.getShape().drop_back(2), b.getShape().drop_back(2));
  if (failed(batch))
    return emitOpError("batch dimensions of ")
           << a << " and " << b << " do not broadcast";
  SmallVector<int64_t> expected(*batch);
  expected.append({opA.rows, opB.cols});
  if (out.getShape() != ArrayRef<int64_t>(expected))
    return emitOpError("result must be ")
           << RankedTensorType::get(expected, out.getElementType()) << ", got "
           << out;
  return success();
}

int64_t BatchMatMulOp::getFlops() {
  int64_t k = opDims(tensorType(getA()), getTransA()).cols;
  return 2 * numElements(getOutput()) * k;
}

// Y = op(A) op(B) per batch index: dop(A) = dY op(B)^T, dop(B) = op(A)^T dY,
// the transposes as flags; each summed (nn.reduce_to) over the batch dims
// its operand was broadcast along.
LogicalResult
BatchMatMulOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  Location loc = getLoc();
  bool ta = getTransA(), tb = getTransB();
  auto product = [&](Value operand, Value x, Value y, bool tx,
                     bool ty) -> Value {
    // The full-batch gradient of `operand` (its matrix dims as stored).
    auto t = tensorType(operand);
    SmallVector<int64_t> shape(getBatchShape());
    shape.append(t.getShape().take_back(2).begin(), t.getShape().end());
    Value full = BatchMatMulOp::create(
        b, loc, RankedTensorType::get(shape, t.getElementType()), x, y,
        b.getBoolAttr(tx), b.getBoolAttr(ty));
    return reduceToType(b, loc, full, t);
  };
  operandGrads.push_back(ta ? product(getA(), getB(), dy, tb, true)
                            : product(getA(), dy, getB(), false, !tb));
  operandGrads.push_back(tb ? product(getB(), dy, getA(), true, ta)
                            : product(getB(), getA(), dy, !ta, false));
  return success();
}

// The batch passes through a batch dim (to the result's, aligned from the
// right) or through A's rows / B's columns (to the result's rows / columns).
// It may not be contracted, and an operand without it must broadcast along
// it: otherwise each micro-batch would need all of that operand.
LogicalResult
BatchMatMulOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                          SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  int64_t rank = tensorType(getOutput()).getRank();
  std::optional<int64_t> out;
  for (int i = 0; i < 2; ++i) {
    std::optional<int64_t> axis = operandAxes[i];
    if (!axis)
      continue;
    int64_t r = tensorType(getOperand(i)).getRank();
    bool trans = i == 0 ? getTransA() : getTransB();
    // The stored position of this operand's contracted dim.
    int64_t contracted = (i == 0) != trans ? r - 1 : r - 2;
    if (*axis == contracted)
      return emitBatchSplitError(*this,
                                 "the batched product contracts over the "
                                 "batch axis");
    int64_t at =
        *axis < r - 2 ? *axis + rank - r : (i == 0 ? rank - 2 : rank - 1);
    if (out && *out != at)
      return emitBatchSplitError(
          *this, "the batched product's operands carry the batch on "
                 "different axes of the result");
    out = at;
  }
  if (*out < rank - 2)
    for (int i = 0; i < 2; ++i) {
      auto t = tensorType(getOperand(i));
      int64_t at = *out - (rank - t.getRank());
      if (!operandAxes[i] && at >= 0 && t.getDimSize(at) != 1)
        return emitBatchSplitError(
            *this, "an operand of the batched product that does not depend "
                   "on the graph inputs has the batch size on the batch axis");
    }
  resultAxes.push_back(out);
  return success();
}

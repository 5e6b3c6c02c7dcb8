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

// The attention family: nn.attention and nn.attention_grad (verifiers, cost,
// gradient, micro-batch rule).
#include "dialects/nn/ops/Common.h"

using namespace mlir;
using namespace gpipe::nn;

/// The shapes of an attention: q [*, Tq, d], k [*, Tk, d], v [*, Tk, dv],
/// the same leading axes `*`; out [*, Tq, dv], lse [*, Tq], mask [Tq, Tk].
static LogicalResult verifyAttention(Operation *op, Value q, Value k, Value v,
                                     Value mask, Value out, Value lse) {
  RankedTensorType tq = tensorType(q), tk = tensorType(k), tv = tensorType(v);
  int64_t rank = tq.getRank();
  if (rank < 3)
    return op->emitOpError("q must have rank >= 3 ([*, Tq, d]), got ") << tq;
  if (tk.getRank() != rank || tv.getRank() != rank)
    return op->emitOpError("q, k and v must have the same rank, got ")
           << tq << ", " << tk << " and " << tv;
  ArrayRef<int64_t> lead = tq.getShape().drop_back(2);
  if (tk.getShape().drop_back(2) != lead || tv.getShape().drop_back(2) != lead)
    return op->emitOpError("q, k and v must have the same leading shape, got ")
           << tq << ", " << tk << " and " << tv;
  int64_t tQ = tq.getDimSize(rank - 2), d = tq.getDimSize(rank - 1);
  int64_t tK = tk.getDimSize(rank - 2), dv = tv.getDimSize(rank - 1);
  if (tk.getDimSize(rank - 1) != d)
    return op->emitOpError("k must have q's last dimension ")
           << d << ", got " << tk;
  if (tv.getDimSize(rank - 2) != tK)
    return op->emitOpError("v must have k's sequence length ")
           << tK << ", got " << tv;
  Type f32 = tq.getElementType();
  if (mask) {
    auto expected = RankedTensorType::get({tQ, tK}, f32);
    if (mask.getType() != expected)
      return op->emitOpError("mask must be ")
             << expected << " ([Tq, Tk], no batch axis), got "
             << mask.getType();
  }
  SmallVector<int64_t> shape(lead);
  shape.append({tQ, dv});
  auto outType = RankedTensorType::get(shape, f32);
  if (out.getType() != outType)
    return op->emitOpError("output must be ")
           << outType << ", got " << out.getType();
  shape.pop_back();
  auto lseType = RankedTensorType::get(shape, f32);
  if (lse.getType() != lseType)
    return op->emitOpError("lse must be ")
           << lseType << " (one log-sum-exp per query row), got "
           << lse.getType();
  return success();
}

LogicalResult AttentionOp::verify() {
  return verifyAttention(*this, getQ(), getK(), getV(), getMask(), getOutput(),
                         getLse());
}
LogicalResult AttentionGradOp::verify() {
  return verifyAttention(*this, getQ(), getK(), getV(), getMask(), getOutput(),
                         getLse());
}

namespace {
/// rows = prod(*) * Tq * Tk score entries and the two inner dimensions.
struct AttentionDims {
  int64_t scores, d, dv;
};
AttentionDims attentionDims(Value q, Value k, Value v) {
  auto tq = tensorType(q);
  int64_t tK = tensorType(k).getShape().drop_back().back();
  return {numElements(q) / tq.getShape().back() * tK, tq.getShape().back(),
          tensorType(v).getShape().back()};
}
} // namespace

// Q K^T and P V, and the scale, mask, max, exp, sum and divide per score.
int64_t AttentionOp::getFlops() {
  AttentionDims a = attentionDims(getQ(), getK(), getV());
  return a.scores * (2 * a.d + 2 * a.dv + 8);
}
// Q K^T again, dV, dP, dQ, dK, and the exp and dS per score.
int64_t AttentionGradOp::getFlops() {
  AttentionDims a = attentionDims(getQ(), getK(), getV());
  return a.scores * (6 * a.d + 4 * a.dv + 8);
}

// Flash-attention's backward: it recomputes the probabilities from the
// saved log-sum-exp; the mask is a constant (no gradient).
LogicalResult
AttentionOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                            SmallVectorImpl<Value> &operandGrads) {
  if (!isZeros(resultGrads[1]))
    return emitError("cannot differentiate through an attention's "
                     "log-sum-exp: only its output may reach the loss");
  auto grad = AttentionGradOp::create(
      b, getLoc(), getQ().getType(), getK().getType(), getV().getType(), getQ(),
      getK(), getV(), getMask(), getOutput(), getLse(), resultGrads[0],
      getScaleAttr());
  operandGrads.append({grad.getDq(), grad.getDk(), grad.getDv()});
  if (getMask())
    operandGrads.push_back(Value());
  return success();
}

// Each (batch, head) block is independent: q, k and v carry the batch on
// the same leading axis, which passes to the output and the log-sum-exp;
// the mask is shared by every sample.
LogicalResult
AttentionOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                        SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  std::optional<int64_t> axis = operandAxes[0];
  int64_t lead = tensorType(getQ()).getRank() - 2;
  if (!axis || operandAxes[1] != axis || operandAxes[2] != axis)
    return emitBatchSplitError(*this, "an attention whose q, k and v do not "
                                      "all carry the batch on the same axis");
  if (*axis >= lead)
    return emitBatchSplitError(
        *this, "an attention along the batch axis (the batch must be a "
               "leading axis of q, k and v)");
  if (getMask() && operandAxes[3])
    return emitBatchSplitError(*this,
                               "an attention whose mask carries the batch");
  resultAxes.append(2, axis);
  return success();
}

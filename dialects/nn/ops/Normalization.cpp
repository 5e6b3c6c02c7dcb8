// The normalization family: softmax (verifier, cost, gradient, micro-batch
// rule).
#include "dialects/nn/ops/Common.h"

using namespace mlir;
using namespace gpipe::nn;

static LogicalResult verifyAxis(Operation *op, Value v, int64_t axis) {
  int64_t rank = tensorType(v).getRank();
  if (axis < 0 || axis >= rank)
    return op->emitOpError("axis ")
           << axis << " is out of range for rank " << rank;
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return verifyAxis(*this, getInput(), getAxis());
}
LogicalResult SoftmaxGradOp::verify() {
  return verifyAxis(*this, getValue(), getAxis());
}

// max, subtract, exp, sum, divide.
int64_t SoftmaxOp::getFlops() { return 8 * numElements(getOutput()); }
int64_t SoftmaxGradOp::getFlops() { return 4 * numElements(getOutput()); }

LogicalResult SoftmaxOp::buildGradients(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(SoftmaxGradOp::create(b, getLoc(), getOutput(),
                                               resultGrads[0], getAxis()));
  return success();
}

// Every row of the softmax axis is independent: the batch passes through,
// unless it is the softmax axis itself.
LogicalResult
SoftmaxOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                      SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  if (*operandAxes[0] == static_cast<int64_t>(getAxis()))
    return emitBatchSplitError(*this, "a softmax along the batch axis");
  resultAxes.push_back(operandAxes[0]);
  return success();
}

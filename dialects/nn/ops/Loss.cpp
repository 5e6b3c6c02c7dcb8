// The nn dialect's loss ops: verifiers, cost, gradient, micro-batch rule.
#include "dialects/nn/ops/Common.h"

using namespace mlir;
using namespace gpipe::nn;

static LogicalResult verifyXent(Operation *op, RankedTensorType logits,
                                RankedTensorType labels,
                                std::optional<uint64_t> microbatches) {
  if (microbatches && *microbatches < 1)
    return op->emitOpError("microbatches must be >= 1");
  if (logits.getRank() != 2)
    return op->emitOpError("logits must be [N, C], got ") << logits;
  if (labels.getRank() != 1 || labels.getDimSize(0) != logits.getDimSize(0))
    return op->emitOpError("labels must be [")
           << logits.getDimSize(0) << "], got " << labels;
  return success();
}

LogicalResult SoftmaxCrossEntropyOp::verify() {
  return verifyXent(*this, tensorType(getLogits()), tensorType(getLabels()),
                    getMicrobatches());
}

int64_t SoftmaxCrossEntropyOp::getFlops() {
  return 6 * numElements(getLogits());
}

LogicalResult
SoftmaxCrossEntropyOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(SoftmaxCrossEntropyGradOp::create(
      b, getLoc(), getLogits().getType(), getLogits(), getLabels(),
      resultGrads[0], getIgnoreIndexAttr(), getMicrobatchesAttr()));
  operandGrads.push_back(Value());
  return success();
}

LogicalResult SoftmaxCrossEntropyGradOp::verify() {
  return verifyXent(*this, tensorType(getLogits()), tensorType(getLabels()),
                    getMicrobatches());
}

int64_t SoftmaxCrossEntropyGradOp::getFlops() {
  return 5 * numElements(getLogits());
}

// The loss is a scalar that sums over the batch (kBatchSum): each
// micro-batch's loss is its share of the mini-batch mean, so the op records
// M.
LogicalResult SoftmaxCrossEntropyOp::splitBatch(
    ArrayRef<std::optional<int64_t>> operandAxes, int64_t microbatches,
    SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  if (operandAxes[0] != 0 || operandAxes[1] != 0)
    return emitBatchSplitError(*this, "the loss's logits and labels must both "
                                      "carry the batch on their first axis");
  if (microbatches > 1)
    setMicrobatchesAttr(
        IntegerAttr::get(IntegerType::get(getContext(), 64), microbatches));
  resultAxes.push_back(kBatchSum);
  return success();
}

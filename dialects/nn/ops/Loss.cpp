// The nn dialect's loss ops: verifiers, cost, gradient, micro-batch rule.
#include "dialects/nn/ops/Common.h"

using namespace mlir;
using namespace gpipe::nn;

/// A loss op or its gradient: scores [N, C], labels [N], M >= 1.
template <typename OpTy> static LogicalResult verifyLoss(OpTy op) {
  std::optional<uint64_t> microbatches = op.getMicrobatches();
  auto logits = tensorType(op.getLogits()), labels = tensorType(op.getLabels());
  if (microbatches && *microbatches < 1)
    return op.emitOpError("microbatches must be >= 1");
  if (logits.getRank() != 2)
    return op.emitOpError("logits must be [N, C], got ") << logits;
  if (labels.getRank() != 1 || labels.getDimSize(0) != logits.getDimSize(0))
    return op.emitOpError("labels must be [")
           << logits.getDimSize(0) << "], got " << labels;
  return success();
}

LogicalResult SoftmaxCrossEntropyOp::verify() { return verifyLoss(*this); }
LogicalResult SoftmaxCrossEntropyGradOp::verify() { return verifyLoss(*this); }
LogicalResult NllLossOp::verify() { return verifyLoss(*this); }
LogicalResult NllLossGradOp::verify() { return verifyLoss(*this); }

int64_t SoftmaxCrossEntropyOp::getFlops() {
  return 6 * numElements(getLogits());
}
int64_t SoftmaxCrossEntropyGradOp::getFlops() {
  return 5 * numElements(getLogits());
}
// One element read per sample.
int64_t NllLossOp::getFlops() { return tensorType(getLabels()).getDimSize(0); }
// Zeros, and one element written per sample.
int64_t NllLossGradOp::getFlops() { return numElements(getLogits()); }

/// A loss's gradient op (`GradOp`) with the loss's attributes; the labels
/// get none.
template <typename GradOp, typename LossOp>
static LogicalResult lossGradients(LossOp op, OpBuilder &b, Value dloss,
                                   SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      GradOp::create(b, op.getLoc(), op.getLogits().getType(), op.getLogits(),
                     op.getLabels(), dloss, op.getIgnoreIndexAttr(),
                     op.getSumAttr(), op.getMicrobatchesAttr()));
  operandGrads.push_back(Value());
  return success();
}

LogicalResult
SoftmaxCrossEntropyOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  return lossGradients<SoftmaxCrossEntropyGradOp>(*this, b, resultGrads[0],
                                                  operandGrads);
}

// The gradient is -dloss / count at each sample's label, zero elsewhere: it
// reads only the labels, so the log-probabilities need not stay alive.
LogicalResult NllLossOp::buildGradients(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  return lossGradients<NllLossGradOp>(*this, b, resultGrads[0], operandGrads);
}

// The loss is a scalar that sums over the batch (kBatchSum): each
// micro-batch's loss is its share of the mini-batch's loss, so the op records
// M (a mean divides by the mini-batch's count).
template <typename LossOp>
static LogicalResult
splitLossBatch(LossOp op, ArrayRef<std::optional<int64_t>> operandAxes,
               int64_t microbatches,
               SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  if (operandAxes[0] != 0 || operandAxes[1] != 0)
    return emitBatchSplitError(op, "the loss's logits and labels must both "
                                   "carry the batch on their first axis");
  if (microbatches > 1)
    op.setMicrobatchesAttr(
        IntegerAttr::get(IntegerType::get(op.getContext(), 64), microbatches));
  resultAxes.push_back(kBatchSum);
  return success();
}

LogicalResult SoftmaxCrossEntropyOp::splitBatch(
    ArrayRef<std::optional<int64_t>> operandAxes, int64_t microbatches,
    SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  return splitLossBatch(*this, operandAxes, microbatches, resultAxes);
}

LogicalResult
NllLossOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes,
                      int64_t microbatches,
                      SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  return splitLossBatch(*this, operandAxes, microbatches, resultAxes);
}

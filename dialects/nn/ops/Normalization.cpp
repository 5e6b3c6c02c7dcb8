// The normalization family: softmax, log-softmax, layer normalization, batch
// normalization and dropout (verifiers, cost, gradients, micro-batch rules).
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
LogicalResult LogSoftmaxOp::verify() {
  return verifyAxis(*this, getInput(), getAxis());
}
LogicalResult LogSoftmaxGradOp::verify() {
  return verifyAxis(*this, getValue(), getAxis());
}

// max, subtract, exp, sum, divide.
int64_t SoftmaxOp::getFlops() { return 8 * numElements(getOutput()); }
int64_t SoftmaxGradOp::getFlops() { return 4 * numElements(getOutput()); }
// max, subtract, exp, sum, log, subtract.
int64_t LogSoftmaxOp::getFlops() { return 8 * numElements(getOutput()); }
// sum, exp, multiply, subtract.
int64_t LogSoftmaxGradOp::getFlops() { return 6 * numElements(getOutput()); }

LogicalResult SoftmaxOp::buildGradients(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(SoftmaxGradOp::create(b, getLoc(), getOutput(),
                                               resultGrads[0], getAxis()));
  return success();
}

// From the output: dx = dy - exp(y) * sum(dy) needs neither the input nor
// the softmax itself.
LogicalResult
LogSoftmaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                             SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(LogSoftmaxGradOp::create(b, getLoc(), getOutput(),
                                                  resultGrads[0], getAxis()));
  return success();
}

// Every row of the (log-)softmax axis is independent: the batch passes
// through, unless it is the softmax axis itself.
static LogicalResult
splitSoftmaxBatch(Operation *op, int64_t axis, StringRef what,
                  ArrayRef<std::optional<int64_t>> operandAxes,
                  SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  if (*operandAxes[0] == axis)
    return emitBatchSplitError(op, "a " + what + " along the batch axis");
  resultAxes.push_back(operandAxes[0]);
  return success();
}

LogicalResult
SoftmaxOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                      SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  return splitSoftmaxBatch(*this, getAxis(), "softmax", operandAxes,
                           resultAxes);
}

LogicalResult
LogSoftmaxOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                         SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  return splitSoftmaxBatch(*this, getAxis(), "log-softmax", operandAxes,
                           resultAxes);
}

//===----------------------------------------------------------------------===//
// Layer normalization
//===----------------------------------------------------------------------===//

/// The shapes of a layer normalization over [axis, rank) of `input`: the
/// row statistics have the leading shape [0, axis), `params` (scale, bias,
/// their gradients) the normalized shape [axis, rank).
static LogicalResult verifyLayerNorm(Operation *op, Value input, int64_t axis,
                                     Value stats, ArrayRef<Value> params) {
  RankedTensorType t = tensorType(input);
  if (axis < 0 || axis >= t.getRank())
    return op->emitOpError("axis ")
           << axis << " is out of range for rank " << t.getRank();
  ArrayRef<int64_t> lead = t.getShape().take_front(axis),
                    normalized = t.getShape().drop_front(axis);
  if (tensorType(stats).getShape() != lead)
    return op->emitOpError("mean and inv_std_dev must have the leading shape ")
           << RankedTensorType::get(lead, t.getElementType()) << ", got "
           << stats.getType();
  for (Value p : params)
    if (p && tensorType(p).getShape() != normalized)
      return op->emitOpError("scale and bias must have the normalized shape ")
             << RankedTensorType::get(normalized, t.getElementType())
             << ", got " << p.getType();
  return success();
}

LogicalResult LayerNormOp::verify() {
  return verifyLayerNorm(*this, getInput(), getAxis(), getMean(),
                         {getScale(), getBias()});
}
LogicalResult LayerNormGradOp::verify() {
  return verifyLayerNorm(*this, getInput(), getAxis(), getMean(), getScale());
}
LogicalResult LayerNormScaleGradOp::verify() {
  return verifyLayerNorm(*this, getInput(), getAxis(), getMean(), getOutput());
}

// Mean, variance (subtract, square, add), normalize, scale and shift.
int64_t LayerNormOp::getFlops() { return 8 * numElements(getOutput()); }
// g = dy * scale, xhat, the two row sums, the combination.
int64_t LayerNormGradOp::getFlops() { return 10 * numElements(getOutput()); }
// xhat, the product, the sum over the rows.
int64_t LayerNormScaleGradOp::getFlops() { return 4 * numElements(getInput()); }

// torch's formulas from the input and the saved statistics (nothing is
// recomputed, and the output need not stay alive): dx from
// nn.layer_norm_grad, dscale = sum_rows(dy * xhat), dbias = sum_rows(dy).
LogicalResult
LayerNormOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                            SmallVectorImpl<Value> &operandGrads) {
  if (!isZeros(resultGrads[1]) || !isZeros(resultGrads[2]))
    return emitError("cannot differentiate through a layer normalization's "
                     "Mean or InvStdDev output: only its output Y may reach "
                     "the loss");
  Value dy = resultGrads[0];
  IntegerAttr axis = getAxisAttr();
  operandGrads.push_back(
      LayerNormGradOp::create(b, getLoc(), getInput().getType(), getInput(),
                              getMean(), getInvStdDev(), getScale(), dy, axis));
  operandGrads.push_back(LayerNormScaleGradOp::create(
      b, getLoc(), getScale().getType(), getInput(), getMean(), getInvStdDev(),
      dy, axis));
  if (Value bias = getBias())
    operandGrads.push_back(reduceToType(b, getLoc(), dy, tensorType(bias)));
  return success();
}

// Rows are independent: the batch passes through on a leading axis (into the
// statistics, whose shape is the leading one), never a normalized one, and
// the scale and bias are shared by every sample.
LogicalResult
LayerNormOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                        SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  if (!operandAxes[0] || llvm::any_of(operandAxes.drop_front(),
                                      [](auto a) { return a.has_value(); }))
    return emitBatchSplitError(
        *this, "a layer normalization whose scale or bias carries the batch");
  if (*operandAxes[0] >= static_cast<int64_t>(getAxis()))
    return emitBatchSplitError(
        *this, "a layer normalization over the batch axis (the batch must be "
               "before the normalized axes)");
  resultAxes.append(3, operandAxes[0]);
  return success();
}

//===----------------------------------------------------------------------===//
// Batch normalization
//===----------------------------------------------------------------------===//

static LogicalResult verifyBatchNorm(Operation *op, Value input,
                                     Value perChannel, float epsilon) {
  RankedTensorType t = tensorType(input);
  if (t.getRank() < 2)
    return op->emitOpError("input must have rank >= 2 ([N, C, ...]), got ")
           << input.getType();
  if (tensorType(perChannel).getShape() != ArrayRef<int64_t>{t.getDimSize(1)})
    return op->emitOpError("the per-channel operands must have shape [")
           << t.getDimSize(1) << "] (the input's axis 1), got "
           << perChannel.getType();
  if (!(epsilon >= 0.0f))
    return op->emitOpError("epsilon must be >= 0, got ") << epsilon;
  return success();
}

LogicalResult BatchNormOp::verify() {
  return verifyBatchNorm(*this, getInput(), getScale(),
                         getEpsilon().convertToFloat());
}
LogicalResult BatchNormGradOp::verify() {
  return verifyBatchNorm(*this, getInput(), getScale(),
                         getEpsilon().convertToFloat());
}

LogicalResult UpdateRunningStatsOp::verify() {
  for (Value v : {getRunningMean(), getRunningVar()}) {
    auto param = v.getDefiningOp<ParamOp>();
    if (!param)
      return emitOpError("the running statistics must be 'nn.param' results");
    auto decl = SymbolTable::lookupNearestSymbolFrom<ParameterOp>(
        *this, param.getNameAttr());
    if (decl && !decl.getState())
      return emitOpError("parameter @")
             << param.getName()
             << " is trainable; running statistics must be declared 'state'";
  }
  if (tensorType(getMean()).getRank() != 1)
    return emitOpError("the statistics must have rank 1 ([C]), got ")
           << getMean().getType();
  float momentum = getMomentum().convertToFloat();
  if (!(momentum >= 0.0f && momentum <= 1.0f))
    return emitOpError("momentum must be in [0, 1], got ") << momentum;
  if (getCount() < 2)
    return emitOpError("count must be >= 2 (the unbiased variance of one "
                       "value per channel is undefined), got ")
           << getCount();
  if (getMicrobatches() < 1)
    return emitOpError("microbatches must be >= 1, got ") << getMicrobatches();
  return success();
}

// Two passes of sums, then normalize, scale and shift.
int64_t BatchNormOp::getFlops() { return 7 * numElements(getOutput()); }
// xhat, the two sums, the combination.
int64_t BatchNormGradOp::getFlops() { return 9 * numElements(getInput()); }
int64_t UpdateRunningStatsOp::getFlops() { return 6 * numElements(getMean()); }

LogicalResult
BatchNormOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                            SmallVectorImpl<Value> &operandGrads) {
  if (!isZeros(resultGrads[1]) || !isZeros(resultGrads[2]))
    return emitError("cannot differentiate through a batch normalization's "
                     "batch statistics: only its output Y may reach the loss");
  auto grad = BatchNormGradOp::create(
      b, getLoc(), getInput().getType(), getScale().getType(),
      getScale().getType(), getInput(), getMean(), getVar(), getScale(),
      resultGrads[0], getEpsilonAttr());
  operandGrads.append(grad->getResults().begin(), grad->getResults().end());
  return success();
}

// The statistics reduce over the batch: each micro-batch normalizes with its
// own (GPipe's semantics, by construction), so they do not carry the batch.
LogicalResult
BatchNormOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                        SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  if (operandAxes[1] || operandAxes[2])
    return emitBatchSplitError(
        *this, "a batch normalization whose scale or bias carries the batch");
  if (*operandAxes[0] != 0)
    return emitBatchSplitError(*this, "a batch normalization of a tensor "
                                      "whose batch axis is not the first");
  resultAxes.push_back(0);
  resultAxes.append(2, std::nullopt);
  return success();
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

static LogicalResult verifyRatio(Operation *op, float ratio) {
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return op->emitOpError("ratio must be in [0, 1), got ") << ratio;
  return success();
}

LogicalResult DropoutOp::verify() {
  return verifyRatio(*this, getRatio().convertToFloat());
}
LogicalResult DropoutGradOp::verify() {
  return verifyRatio(*this, getRatio().convertToFloat());
}

int64_t DropoutOp::getFlops() { return 4 * numElements(getOutput()); }
int64_t DropoutGradOp::getFlops() { return 4 * numElements(getOutput()); }

// The mask is redrawn from its key, not stored.
LogicalResult DropoutOp::buildGradients(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(DropoutGradOp::create(b, getLoc(), resultGrads[0],
                                               getRatioAttr(), getKeyAttr()));
  return success();
}

// Each micro-batch draws the elements of its samples: the batch must be the
// outermost axis, so that a micro-batch is a contiguous run of the
// mini-batch's tensor (its element indices are known).
LogicalResult
DropoutOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                      SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  if (*operandAxes[0] != 0)
    return emitBatchSplitError(
        *this, "a dropout of a tensor whose batch axis is not the first");
  resultAxes.push_back(0);
  return success();
}

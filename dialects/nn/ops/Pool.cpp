// The pooling family: max/average pooling over 1-D and 2-D windows and
// constant padding (verifiers, cost, gradients, micro-batch rules).
#include "dialects/nn/ops/Common.h"

#include "dialects/nn/PoolShape.h"

using namespace mlir;
using namespace gpipe::nn;

/// Checks a window's attributes against the input and output types of a pool
/// (or, for a gradient, of its forward): rank 3 or 4, [N, C] kept, one
/// kernel size, stride and dilation per spatial axis, pads before and after,
/// and the output's spatial size the window's.
static LogicalResult
verifyWindow(Operation *op, RankedTensorType in, RankedTensorType out,
             ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
             ArrayRef<int64_t> pads, ArrayRef<int64_t> dilations, bool ceil) {
  int64_t rank = in.getRank();
  if (rank != 3 && rank != 4)
    return op->emitOpError("input must be [N, C, W] or [N, C, H, W] (rank 3 "
                           "or 4), got rank ")
           << rank;
  if (out.getRank() != rank || out.getDimSize(0) != in.getDimSize(0) ||
      out.getDimSize(1) != in.getDimSize(1))
    return op->emitOpError("output ")
           << out << " must keep the input's rank and [N, C] " << in;
  size_t s = rank - 2;
  if (kernel.size() != s || strides.size() != s || dilations.size() != s ||
      pads.size() != 2 * s)
    return op->emitOpError("expected ")
           << s << " kernel sizes, strides and dilations and " << 2 * s
           << " pads for " << s << " spatial axes";
  for (size_t d = 0; d < s; ++d) {
    if (kernel[d] < 1 || strides[d] < 1 || dilations[d] < 1)
      return op->emitOpError("kernel sizes, strides and dilations must be "
                             ">= 1 (spatial axis ")
             << d << ")";
    int64_t extent = dilations[d] * (kernel[d] - 1) + 1;
    for (int64_t p : {pads[d], pads[s + d]})
      if (p < 0 || p >= extent)
        return op->emitOpError("pad ")
               << p << " of spatial axis " << d
               << " must be >= 0 and smaller than the window's extent "
               << extent;
    int64_t want = poolOutputSize(in.getDimSize(2 + d), kernel[d], strides[d],
                                  pads[d], pads[s + d], dilations[d], ceil);
    if (want < 1)
      return op->emitOpError("the window (extent ")
             << extent << ") does not fit spatial axis " << d << " of size "
             << in.getDimSize(2 + d) << " and its pads";
    if (out.getDimSize(2 + d) != want)
      return op->emitOpError("output size ")
             << out.getDimSize(2 + d) << " of spatial axis " << d
             << " should be " << want;
  }
  return success();
}

LogicalResult MaxPoolOp::verify() {
  if (tensorType(getIndices()).getShape() != tensorType(getOutput()).getShape())
    return emitOpError("indices must have the output's shape");
  return verifyWindow(*this, tensorType(getInput()), tensorType(getOutput()),
                      getKernelShape(), getStrides(), getPads(), getDilations(),
                      getCeilMode());
}

LogicalResult MaxPoolGradOp::verify() {
  auto idx = tensorType(getIndices()), dy = tensorType(getGrad());
  auto dx = tensorType(getOutput());
  if (idx.getShape() != dy.getShape())
    return emitOpError("indices ")
           << idx << " and grad " << dy << " must have one shape";
  if ((dx.getRank() != 3 && dx.getRank() != 4) ||
      dx.getRank() != dy.getRank() || dx.getDimSize(0) != dy.getDimSize(0) ||
      dx.getDimSize(1) != dy.getDimSize(1))
    return emitOpError("result ")
           << dx << " must be a pool input of the grad's rank and [N, C] "
           << dy;
  return success();
}

static LogicalResult verifyAvgDilations(Operation *op,
                                        ArrayRef<int64_t> dilations) {
  if (llvm::any_of(dilations, [](int64_t d) { return d != 1; }))
    return op->emitOpError("average pooling needs dilations of 1");
  return success();
}

LogicalResult AvgPoolOp::verify() {
  if (failed(verifyAvgDilations(*this, getDilations())))
    return failure();
  return verifyWindow(*this, tensorType(getInput()), tensorType(getOutput()),
                      getKernelShape(), getStrides(), getPads(), getDilations(),
                      getCeilMode());
}

LogicalResult AvgPoolGradOp::verify() {
  if (failed(verifyAvgDilations(*this, getDilations())))
    return failure();
  return verifyWindow(*this, tensorType(getOutput()), tensorType(getGrad()),
                      getKernelShape(), getStrides(), getPads(), getDilations(),
                      getCeilMode());
}

LogicalResult PadOp::verify() {
  auto in = tensorType(getInput()), out = tensorType(getOutput());
  int64_t rank = in.getRank();
  ArrayRef<int64_t> pads = getPads();
  if (out.getRank() != rank || static_cast<int64_t>(pads.size()) != 2 * rank)
    return emitOpError("expected ")
           << 2 * rank << " pads and a result of rank " << rank;
  for (int64_t d = 0; d < rank; ++d) {
    if (pads[d] < 0 || pads[rank + d] < 0)
      return emitOpError("pads must be >= 0 (axis ") << d << ")";
    int64_t want = in.getDimSize(d) + pads[d] + pads[rank + d];
    if (out.getDimSize(d) != want)
      return emitOpError("result size ")
             << out.getDimSize(d) << " of axis " << d << " should be " << want;
  }
  return success();
}

static int64_t windowSize(ArrayRef<int64_t> kernel) {
  int64_t n = 1;
  for (int64_t k : kernel)
    n *= k;
  return n;
}

// One compare (or add) per window element.
int64_t MaxPoolOp::getFlops() {
  return numElements(getOutput()) * windowSize(getKernelShape());
}
int64_t MaxPoolGradOp::getFlops() { return numElements(getGrad()); }
int64_t AvgPoolOp::getFlops() {
  return numElements(getOutput()) * windowSize(getKernelShape());
}
int64_t AvgPoolGradOp::getFlops() {
  return numElements(getGrad()) * windowSize(getKernelShape());
}
int64_t PadOp::getFlops() { return 0; }

LogicalResult MaxPoolOp::buildGradients(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(MaxPoolGradOp::create(
      b, getLoc(), getInput().getType(), getIndices(), resultGrads[0]));
  return success();
}

LogicalResult AvgPoolOp::buildGradients(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(AvgPoolGradOp::create(
      b, getLoc(), getInput().getType(), resultGrads[0], getKernelShape(),
      getStrides(), getPads(), getDilations(), getCeilMode(),
      getCountIncludePad()));
  return success();
}

// The padding's gradient is the unpadded range of dy: one slice per padded
// axis.
LogicalResult PadOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  Value g = resultGrads[0];
  auto in = tensorType(getInput());
  int64_t rank = in.getRank();
  ArrayRef<int64_t> pads = getPads();
  for (int64_t d = 0; d < rank; ++d) {
    if (pads[d] == 0 && pads[rank + d] == 0)
      continue;
    SmallVector<int64_t> shape(tensorType(g).getShape());
    shape[d] = in.getDimSize(d);
    g = SliceOp::create(b, getLoc(),
                        RankedTensorType::get(shape, in.getElementType()), g,
                        b.getI64IntegerAttr(d), b.getI64IntegerAttr(pads[d]));
  }
  operandGrads.push_back(g);
  return success();
}

// Every [n, c] plane is pooled on its own: the batch must be the leading
// axis N, and stays there (in the indices too).
static LogicalResult splitPool(Operation *op,
                               ArrayRef<std::optional<int64_t>> operandAxes,
                               SmallVectorImpl<std::optional<int64_t>> &axes) {
  if (*operandAxes[0] != 0)
    return emitBatchSplitError(op, "a pooling whose batch is not the leading "
                                   "axis N");
  axes.assign(op->getNumResults(), std::optional<int64_t>(0));
  return success();
}

LogicalResult
MaxPoolOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                      SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  return splitPool(*this, operandAxes, resultAxes);
}

LogicalResult
AvgPoolOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                      SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  return splitPool(*this, operandAxes, resultAxes);
}

LogicalResult
PadOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                  SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  int64_t axis = *operandAxes[0];
  int64_t rank = tensorType(getInput()).getRank();
  if (getPads()[axis] != 0 || getPads()[rank + axis] != 0)
    return emitBatchSplitError(*this, "a padding of the batch axis");
  resultAxes.push_back(axis);
  return success();
}

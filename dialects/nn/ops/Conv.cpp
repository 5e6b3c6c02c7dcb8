// The convolution family: nn.conv and its input and weight gradients
// (verifiers, cost, gradient rule, micro-batch rule).
#include "dialects/nn/ops/Common.h"

using namespace mlir;
using namespace gpipe::nn;

/// Checks the shapes and attributes shared by the family: x [N, C, in...],
/// w [F, C/group, k...], y [N, F, out...] with out from the conv formula,
/// the optional bias [F].
static LogicalResult verifyConv(Operation *op, RankedTensorType x,
                                RankedTensorType w, RankedTensorType y,
                                Value bias, ArrayRef<int64_t> strides,
                                ArrayRef<int64_t> pads,
                                ArrayRef<int64_t> dilations, int64_t group,
                                StringRef yName = "output") {
  int64_t rank = x.getRank();
  if (rank != 3 && rank != 4)
    return op->emitOpError("input must be rank 3 or 4 ([N, C, spatial...] "
                           "with 1 or 2 spatial dims), got ")
           << x;
  if (w.getRank() != rank || y.getRank() != rank)
    return op->emitOpError("input, weight and output must have the same "
                           "rank, got ")
           << x << ", " << w << " and " << y;
  int64_t s = rank - 2;
  if (static_cast<int64_t>(strides.size()) != s ||
      static_cast<int64_t>(dilations.size()) != s ||
      static_cast<int64_t>(pads.size()) != 2 * s)
    return op->emitOpError("expects ")
           << s << " strides, " << s << " dilations and " << 2 * s
           << " pads for " << s << " spatial dims, got " << strides.size()
           << ", " << dilations.size() << " and " << pads.size();
  for (int64_t i = 0; i < s; ++i) {
    if (strides[i] < 1 || dilations[i] < 1)
      return op->emitOpError("strides and dilations must be >= 1");
    if (pads[i] < 0 || pads[s + i] < 0)
      return op->emitOpError("pads must be >= 0");
  }
  int64_t n = x.getDimSize(0), c = x.getDimSize(1), f = w.getDimSize(0);
  if (group < 1 || c % group != 0 || f % group != 0)
    return op->emitOpError("group ")
           << group << " must be >= 1 and divide the " << c
           << " input channels and the " << f << " filters";
  if (w.getDimSize(1) != c / group)
    return op->emitOpError("weight must have C/group = ")
           << c / group << " channels on axis 1, got " << w;
  SmallVector<int64_t> expected = {n, f};
  for (int64_t i = 0; i < s; ++i) {
    int64_t span = dilations[i] * (w.getDimSize(2 + i) - 1) + 1;
    int64_t padded = x.getDimSize(2 + i) + pads[i] + pads[s + i];
    if (padded < span)
      return op->emitOpError("kernel extent ")
             << span << " exceeds the padded input (" << padded
             << ") on spatial dim " << i;
    expected.push_back((padded - span) / strides[i] + 1);
  }
  if (y.getShape() != ArrayRef<int64_t>(expected))
    return op->emitOpError()
           << yName << " must be "
           << RankedTensorType::get(expected, y.getElementType()) << ", got "
           << y;
  if (bias && tensorType(bias).getShape() != ArrayRef<int64_t>{f})
    return op->emitOpError("bias must be [")
           << f << "], got " << bias.getType();
  return success();
}

LogicalResult ConvOp::verify() {
  return verifyConv(*this, tensorType(getInput()), tensorType(getWeight()),
                    tensorType(getOutput()), getBias(), getStrides(), getPads(),
                    getDilations(), getGroup());
}

LogicalResult ConvInputGradOp::verify() {
  return verifyConv(*this, tensorType(getOutput()), tensorType(getWeight()),
                    tensorType(getGrad()), Value(), getStrides(), getPads(),
                    getDilations(), getGroup(), "output gradient");
}

LogicalResult ConvWeightGradOp::verify() {
  return verifyConv(*this, tensorType(getInput()), tensorType(getOutput()),
                    tensorType(getGrad()), Value(), getStrides(), getPads(),
                    getDilations(), getGroup(), "output gradient");
}

/// Multiply-adds of the convolution: every output element sums C/group
/// channels times the kernel's extent. Each gradient does the same work.
static int64_t convFlops(Value y, Value w) {
  auto wt = tensorType(w);
  return 2 * numElements(y) * (wt.getNumElements() / wt.getDimSize(0));
}

int64_t ConvOp::getFlops() {
  return convFlops(getOutput(), getWeight()) +
         (getBias() ? numElements(getOutput()) : 0);
}
int64_t ConvInputGradOp::getFlops() {
  return convFlops(getGrad(), getWeight());
}
int64_t ConvWeightGradOp::getFlops() {
  return convFlops(getGrad(), getOutput());
}

// dx: the transposed convolution of dy; dw: x correlated with dy; dbias: dy
// summed over N and the output positions.
LogicalResult ConvOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  Location loc = getLoc();
  operandGrads.push_back(ConvInputGradOp::create(
      b, loc, getInput().getType(), dy, getWeight(), getStridesAttr(),
      getPadsAttr(), getDilationsAttr(), getGroupAttr()));
  operandGrads.push_back(ConvWeightGradOp::create(
      b, loc, getWeight().getType(), getInput(), dy, getStridesAttr(),
      getPadsAttr(), getDilationsAttr(), getGroupAttr()));
  if (Value bias = getBias()) {
    auto yt = tensorType(getOutput());
    SmallVector<int64_t> kept(yt.getRank(), 1);
    kept[1] = yt.getDimSize(1);
    Value summed = reduceToType(
        b, loc, dy, RankedTensorType::get(kept, yt.getElementType()));
    operandGrads.push_back(ReshapeOp::create(b, loc, bias.getType(), summed));
  }
  return success();
}

// Samples are independent: the batch splits along N of the input and the
// output. The weight and bias are shared by every sample.
LogicalResult
ConvOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                   SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  if (operandAxes[1] || (getBias() && operandAxes[2]))
    return emitBatchSplitError(*this, "a convolution's weight or bias "
                                      "depends on the graph inputs");
  if (*operandAxes[0] != 0)
    return emitBatchSplitError(*this, "a convolution's input carries the "
                                      "batch on an axis other than N (0)");
  resultAxes.push_back(0);
  return success();
}

// The nn dialect's elementwise ops and activation gradients: verifiers, cost,
// gradients, micro-batch rule.
#include "dialects/nn/ops/Common.h"

using namespace mlir;
using namespace gpipe::nn;

static LogicalResult verifyBroadcastBinary(Operation *op) {
  auto lhs = cast<RankedTensorType>(op->getOperand(0).getType());
  auto rhs = cast<RankedTensorType>(op->getOperand(1).getType());
  auto out = cast<RankedTensorType>(op->getResult(0).getType());
  FailureOr<SmallVector<int64_t>> shape =
      broadcastShapes(lhs.getShape(), rhs.getShape());
  if (failed(shape))
    return op->emitOpError("operand shapes ")
           << lhs << " and " << rhs << " do not broadcast";
  if (ArrayRef<int64_t>(*shape) != out.getShape())
    return op->emitOpError("result type ")
           << out << " must have the broadcast shape of " << lhs << " and "
           << rhs;
  return success();
}

LogicalResult AddOp::verify() { return verifyBroadcastBinary(*this); }
LogicalResult SubOp::verify() { return verifyBroadcastBinary(*this); }
LogicalResult MulOp::verify() { return verifyBroadcastBinary(*this); }
LogicalResult DivOp::verify() { return verifyBroadcastBinary(*this); }
LogicalResult PowOp::verify() { return verifyBroadcastBinary(*this); }
LogicalResult MaxOp::verify() { return verifyBroadcastBinary(*this); }
LogicalResult MinOp::verify() { return verifyBroadcastBinary(*this); }

int64_t AddOp::getFlops() { return numElements(getOutput()); }
int64_t SubOp::getFlops() { return numElements(getOutput()); }
int64_t MulOp::getFlops() { return numElements(getOutput()); }
int64_t DivOp::getFlops() { return numElements(getOutput()); }
int64_t PowOp::getFlops() { return 8 * numElements(getOutput()); }
int64_t MaxOp::getFlops() { return numElements(getOutput()); }
int64_t MinOp::getFlops() { return numElements(getOutput()); }
int64_t MaxGradOp::getFlops() { return 2 * numElements(getOutput()); }
int64_t MinGradOp::getFlops() { return 2 * numElements(getOutput()); }

LogicalResult AddOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  operandGrads.push_back(reduceToType(b, getLoc(), dy, tensorType(getLhs())));
  operandGrads.push_back(reduceToType(b, getLoc(), dy, tensorType(getRhs())));
  return success();
}

LogicalResult SubOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  Value neg = NegOp::create(b, getLoc(), dy);
  operandGrads.push_back(reduceToType(b, getLoc(), dy, tensorType(getLhs())));
  operandGrads.push_back(reduceToType(b, getLoc(), neg, tensorType(getRhs())));
  return success();
}

LogicalResult MulOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  Location loc = getLoc();
  Value dl = MulOp::create(b, loc, dy.getType(), dy, getRhs());
  Value dr = MulOp::create(b, loc, dy.getType(), dy, getLhs());
  operandGrads.push_back(reduceToType(b, loc, dl, tensorType(getLhs())));
  operandGrads.push_back(reduceToType(b, loc, dr, tensorType(getRhs())));
  return success();
}

LogicalResult DivOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  // y = l / r: dl = dy / r, dr = -dy * y / r.
  Value dy = resultGrads[0];
  Location loc = getLoc();
  Type t = dy.getType();
  Value dl = DivOp::create(b, loc, t, dy, getRhs());
  Value dyy = MulOp::create(b, loc, t, dy, getOutput());
  Value dr = NegOp::create(b, loc, DivOp::create(b, loc, t, dyy, getRhs()));
  operandGrads.push_back(reduceToType(b, loc, dl, tensorType(getLhs())));
  operandGrads.push_back(reduceToType(b, loc, dr, tensorType(getRhs())));
  return success();
}

// torch's formulas: d/dx x^y = y * x^(y - 1), d/dy x^y = x^y * log(x). With a
// constant exponent c (x ** 2, x ** 3) it is folded: c * x^(c - 1).
LogicalResult PowOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  Location loc = getLoc();
  Type t = dy.getType();
  auto lhsType = tensorType(getLhs());
  Value dl;
  if (std::optional<float> c = splatValue(getRhs())) {
    if (*c == 0.0f) {
      dl = ConstantOp::create(b, loc, DenseElementsAttr::get(lhsType, 0.0f));
    } else {
      Value p = *c == 2.0f ? getLhs()
                           : PowOp::create(b, loc, lhsType, getLhs(),
                                           scalarConstant(b, loc, *c - 1.0f));
      Value scaled =
          MulOp::create(b, loc, lhsType, scalarConstant(b, loc, *c), p);
      dl = MulOp::create(b, loc, t, dy, scaled);
    }
  } else {
    Value cm1 = SubOp::create(b, loc, getRhs().getType(), getRhs(),
                              scalarConstant(b, loc, 1.0f));
    Value p = PowOp::create(b, loc, t, getLhs(), cm1);
    dl = MulOp::create(b, loc, t, dy, MulOp::create(b, loc, t, getRhs(), p));
  }
  Value logx = LogOp::create(b, loc, getLhs());
  Value dr =
      MulOp::create(b, loc, t, dy, MulOp::create(b, loc, t, getOutput(), logx));
  operandGrads.push_back(reduceToType(b, loc, dl, lhsType));
  operandGrads.push_back(reduceToType(b, loc, dr, tensorType(getRhs())));
  return success();
}

/// The gradients of a max or min (`GradOp`: nn.max_grad or nn.min_grad),
/// torch's: each operand's from the op with the operands in its order,
/// summed over the dimensions it was broadcast along.
template <typename GradOp>
static LogicalResult minMaxGradients(Operation *op, OpBuilder &b, Value dy,
                                     SmallVectorImpl<Value> &operandGrads) {
  Value lhs = op->getOperand(0), rhs = op->getOperand(1);
  Location loc = op->getLoc();
  Type t = dy.getType();
  Value dl = GradOp::create(b, loc, t, lhs, rhs, dy);
  Value dr = GradOp::create(b, loc, t, rhs, lhs, dy);
  operandGrads.push_back(reduceToType(b, loc, dl, tensorType(lhs)));
  operandGrads.push_back(reduceToType(b, loc, dr, tensorType(rhs)));
  return success();
}

LogicalResult MaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return minMaxGradients<MaxGradOp>(*this, b, resultGrads[0], operandGrads);
}

LogicalResult MinOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  return minMaxGradients<MinGradOp>(*this, b, resultGrads[0], operandGrads);
}

//===----------------------------------------------------------------------===//
// Elementwise unary ops and their gradients
//===----------------------------------------------------------------------===//

int64_t NegOp::getFlops() { return numElements(getOutput()); }
int64_t ReluOp::getFlops() { return numElements(getOutput()); }
int64_t TanhOp::getFlops() { return 8 * numElements(getOutput()); }
int64_t SigmoidOp::getFlops() { return 4 * numElements(getOutput()); }
int64_t ErfOp::getFlops() { return 8 * numElements(getOutput()); }
int64_t ExpOp::getFlops() { return 4 * numElements(getOutput()); }
int64_t LogOp::getFlops() { return 8 * numElements(getOutput()); }
int64_t SqrtOp::getFlops() { return 4 * numElements(getOutput()); }
int64_t ReciprocalOp::getFlops() { return numElements(getOutput()); }
int64_t AbsOp::getFlops() { return numElements(getOutput()); }
int64_t ReluGradOp::getFlops() { return numElements(getOutput()); }
int64_t TanhGradOp::getFlops() { return 3 * numElements(getOutput()); }
int64_t SigmoidGradOp::getFlops() { return 3 * numElements(getOutput()); }
int64_t ErfGradOp::getFlops() { return 6 * numElements(getOutput()); }
int64_t SqrtGradOp::getFlops() { return 2 * numElements(getOutput()); }
int64_t ReciprocalGradOp::getFlops() { return 3 * numElements(getOutput()); }
int64_t AbsGradOp::getFlops() { return numElements(getOutput()); }
int64_t ClipOp::getFlops() { return 2 * numElements(getOutput()); }
int64_t ClipGradOp::getFlops() { return 2 * numElements(getOutput()); }

/// Clip's bounds: at least one, neither NaN.
static LogicalResult verifyClipBounds(Operation *op, std::optional<APFloat> min,
                                      std::optional<APFloat> max) {
  if (!min && !max)
    return op->emitOpError("needs a min or a max bound");
  for (auto [name, bound] : {std::pair{"min", min}, std::pair{"max", max}})
    if (bound && bound->isNaN())
      return op->emitOpError() << name << " must not be NaN";
  return success();
}

LogicalResult ClipOp::verify() {
  return verifyClipBounds(*this, getMin(), getMax());
}
LogicalResult ClipGradOp::verify() {
  return verifyClipBounds(*this, getMin(), getMax());
}

LogicalResult NegOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(NegOp::create(b, getLoc(), resultGrads[0]));
  return success();
}

// relu(x) > 0 exactly when x > 0 (NaN: neither), so the gradient reads the
// output, which the next op keeps anyway: the input need not stay alive, and
// a GEMM feeding the relu can apply it in its epilogue.
LogicalResult ReluOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      ReluGradOp::create(b, getLoc(), getOutput(), resultGrads[0]));
  return success();
}

LogicalResult TanhOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      TanhGradOp::create(b, getLoc(), getOutput(), resultGrads[0]));
  return success();
}

LogicalResult SigmoidOp::buildGradients(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      SigmoidGradOp::create(b, getLoc(), getOutput(), resultGrads[0]));
  return success();
}

LogicalResult ErfOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      ErfGradOp::create(b, getLoc(), getInput(), resultGrads[0]));
  return success();
}

// d/dx exp(x) = exp(x): the gradient reads the output, so the input need not
// stay alive.
LogicalResult ExpOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  operandGrads.push_back(
      MulOp::create(b, getLoc(), dy.getType(), dy, getOutput()));
  return success();
}

// d/dx log(x) = 1 / x: dy / x (torch's formula), from the input.
LogicalResult LogOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  operandGrads.push_back(
      DivOp::create(b, getLoc(), dy.getType(), dy, getInput()));
  return success();
}

// d/dx sqrt(x) = 1 / (2 sqrt(x)): dy / (2 y), from the output.
LogicalResult SqrtOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      SqrtGradOp::create(b, getLoc(), getOutput(), resultGrads[0]));
  return success();
}

// d/dx (1 / x) = -1 / x^2: -dy * (y * y), from the output.
LogicalResult
ReciprocalOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                             SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      ReciprocalGradOp::create(b, getLoc(), getOutput(), resultGrads[0]));
  return success();
}

// From the input: dy where min <= x <= max.
LogicalResult ClipOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                     SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(ClipGradOp::create(
      b, getLoc(), getInput(), resultGrads[0], getMinAttr(), getMaxAttr()));
  return success();
}

// d/dx |x| = sign(x) (0 at 0, as torch): from the input.
LogicalResult AbsOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                    SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      AbsGradOp::create(b, getLoc(), getInput(), resultGrads[0]));
  return success();
}

//===----------------------------------------------------------------------===//
// Masks
//===----------------------------------------------------------------------===//

LogicalResult EqualOp::verify() {
  if (tensorType(getLhs()).getElementType() !=
      tensorType(getRhs()).getElementType())
    return emitOpError("operands must have one element type, got ")
           << getLhs().getType() << " and " << getRhs().getType();
  return verifyBroadcastBinary(*this);
}

LogicalResult IntToFloatOp::verify() {
  if (tensorType(getInput()).getShape() != tensorType(getOutput()).getShape())
    return emitOpError("result ")
           << getOutput().getType() << " must have the shape of the input "
           << getInput().getType();
  return success();
}

/// The result of an op with three broadcasting operands (nn.where,
/// nn.max_grad, nn.min_grad) has their broadcast shape.
static LogicalResult verifyBroadcastTernary(Operation *op) {
  auto out = tensorType(op->getResult(0));
  Value a = op->getOperand(0), b = op->getOperand(1), c = op->getOperand(2);
  FailureOr<SmallVector<int64_t>> shape =
      broadcastShapes(tensorType(a).getShape(), tensorType(b).getShape());
  if (succeeded(shape))
    shape = broadcastShapes(*shape, tensorType(c).getShape());
  if (failed(shape))
    return op->emitOpError("operand shapes ")
           << a.getType() << ", " << b.getType() << " and " << c.getType()
           << " do not broadcast";
  if (ArrayRef<int64_t>(*shape) != out.getShape())
    return op->emitOpError("result type ")
           << out << " must have the broadcast shape of the operands";
  return success();
}

LogicalResult WhereOp::verify() { return verifyBroadcastTernary(*this); }
LogicalResult MaxGradOp::verify() { return verifyBroadcastTernary(*this); }
LogicalResult MinGradOp::verify() { return verifyBroadcastTernary(*this); }

int64_t EqualOp::getFlops() { return numElements(getOutput()); }
int64_t NotOp::getFlops() { return numElements(getOutput()); }
int64_t IntToFloatOp::getFlops() { return numElements(getOutput()); }
int64_t WhereOp::getFlops() { return numElements(getOutput()); }

/// Comparisons, masks and integer conversions pass no gradient (as torch's
/// bool and integer tensors).
static LogicalResult noGradients(Operation *op,
                                 SmallVectorImpl<Value> &operandGrads) {
  operandGrads.append(op->getNumOperands(), Value());
  return success();
}

LogicalResult EqualOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                                      SmallVectorImpl<Value> &operandGrads) {
  return noGradients(*this, operandGrads);
}
LogicalResult NotOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                                    SmallVectorImpl<Value> &operandGrads) {
  return noGradients(*this, operandGrads);
}
LogicalResult
IntToFloatOp::buildGradients(OpBuilder &, ArrayRef<Value>,
                             SmallVectorImpl<Value> &operandGrads) {
  return noGradients(*this, operandGrads);
}

// The selected operand gets dy where it was selected, zero elsewhere.
LogicalResult WhereOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  Location loc = getLoc();
  Type t = dy.getType();
  Value zero = scalarConstant(b, loc, 0.0f);
  Value dl = WhereOp::create(b, loc, t, getCondition(), dy, zero);
  Value dr = WhereOp::create(b, loc, t, getCondition(), zero, dy);
  operandGrads.push_back(Value());
  operandGrads.push_back(reduceToType(b, loc, dl, tensorType(getLhs())));
  operandGrads.push_back(reduceToType(b, loc, dr, tensorType(getRhs())));
  return success();
}

//===----------------------------------------------------------------------===//
// Micro-batch rule
//===----------------------------------------------------------------------===//

LogicalResult gpipe::nn::splitElementwiseBatch(
    Operation *op, ArrayRef<std::optional<int64_t>> operandAxes,
    SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  int64_t rank = tensorType(op->getResult(0)).getRank();
  std::optional<int64_t> axis;
  for (auto [v, a] : llvm::zip_equal(op->getOperands(), operandAxes)) {
    if (!a)
      continue;
    int64_t at = *a + rank - tensorType(v).getRank();
    if (axis && *axis != at)
      return emitBatchSplitError(
          op, "its operands carry the batch on different axes");
    axis = at;
  }
  // An operand without the batch must broadcast along it.
  for (auto [v, a] : llvm::zip_equal(op->getOperands(), operandAxes)) {
    auto t = tensorType(v);
    int64_t at = *axis - (rank - t.getRank());
    if (!a && at >= 0 && t.getDimSize(at) != 1)
      return emitBatchSplitError(
          op, "an operand that does not depend on the graph inputs has the "
              "batch size on the batch axis");
  }
  resultAxes.push_back(axis);
  return success();
}

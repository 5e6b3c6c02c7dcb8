// The nn dialect's ops: verifiers, cost estimates and gradient rules.
#include "dialects/nn/NNOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace gpipe::nn;

#include "dialects/nn/NNInterfaces.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static int64_t numElements(Value v) {
  return cast<RankedTensorType>(v.getType()).getNumElements();
}

static int64_t byteSize(Type t) {
  auto tt = dyn_cast<RankedTensorType>(t);
  if (!tt || !tt.hasStaticShape())
    return 0;
  return tt.getNumElements() * ((tt.getElementTypeBitWidth() + 7) / 8);
}

int64_t gpipe::nn::defaultBytesAccessed(Operation *op) {
  int64_t bytes = 0;
  for (Type t : op->getOperandTypes())
    bytes += byteSize(t);
  for (Type t : op->getResultTypes())
    bytes += byteSize(t);
  return bytes;
}

FailureOr<SmallVector<int64_t>>
gpipe::nn::broadcastShapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return failure();
    out[i] = da == 1 ? db : da;
  }
  return out;
}

/// True if `small` broadcasts (numpy rules) to exactly `big`.
static bool broadcastsTo(ArrayRef<int64_t> small, ArrayRef<int64_t> big) {
  if (small.size() > big.size())
    return false;
  size_t lead = big.size() - small.size();
  for (size_t i = 0; i < small.size(); ++i)
    if (small[i] != 1 && small[i] != big[lead + i])
      return false;
  return true;
}

Value gpipe::nn::reduceToType(OpBuilder &b, Location loc, Value grad,
                              RankedTensorType type) {
  if (grad.getType() == type)
    return grad;
  return ReduceToOp::create(b, loc, type, grad);
}

static Value scalarConstant(OpBuilder &b, Location loc, float value) {
  auto type = RankedTensorType::get({}, b.getF32Type());
  return ConstantOp::create(b, loc, DenseElementsAttr::get(type, value));
}

static RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

//===----------------------------------------------------------------------===//
// ParamOp, ConstantOp, ParamGradOp
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  if (getName().empty())
    return emitOpError("parameter name must not be empty");
  return success();
}

int64_t ParamOp::getFlops() { return 0; }
int64_t ParamOp::getBytesAccessed() { return 0; }

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }
int64_t ConstantOp::getFlops() { return 0; }
int64_t ConstantOp::getBytesAccessed() { return 0; }

LogicalResult ParamGradOp::verify() {
  // Equal types are checked by AllTypesMatch.
  if (!getParam().getDefiningOp<ParamOp>())
    return emitOpError("operand #0 must be the result of an 'nn.param'");
  return success();
}

//===----------------------------------------------------------------------===//
// GemmOp
//===----------------------------------------------------------------------===//

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

//===----------------------------------------------------------------------===//
// Elementwise binary ops
//===----------------------------------------------------------------------===//

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

int64_t AddOp::getFlops() { return numElements(getOutput()); }
int64_t SubOp::getFlops() { return numElements(getOutput()); }
int64_t MulOp::getFlops() { return numElements(getOutput()); }
int64_t DivOp::getFlops() { return numElements(getOutput()); }

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

//===----------------------------------------------------------------------===//
// Elementwise unary ops and their gradients
//===----------------------------------------------------------------------===//

int64_t NegOp::getFlops() { return numElements(getOutput()); }
int64_t ReluOp::getFlops() { return numElements(getOutput()); }
int64_t TanhOp::getFlops() { return 8 * numElements(getOutput()); }
int64_t SigmoidOp::getFlops() { return 4 * numElements(getOutput()); }
int64_t ErfOp::getFlops() { return 8 * numElements(getOutput()); }
int64_t ReluGradOp::getFlops() { return numElements(getOutput()); }
int64_t TanhGradOp::getFlops() { return 3 * numElements(getOutput()); }
int64_t SigmoidGradOp::getFlops() { return 3 * numElements(getOutput()); }
int64_t ErfGradOp::getFlops() { return 6 * numElements(getOutput()); }

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

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto in = tensorType(getInput()), out = tensorType(getOutput());
  if (in.getElementType() != out.getElementType())
    return emitOpError("element type changes from ")
           << in.getElementType() << " to " << out.getElementType();
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("element count changes from ")
           << in.getNumElements() << " (" << in << ") to "
           << out.getNumElements() << " (" << out << ")";
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getOutput().getType())
    return getInput();
  return {};
}

int64_t ReshapeOp::getFlops() { return 0; }
int64_t ReshapeOp::getBytesAccessed() { return 0; }

LogicalResult ReshapeOp::buildGradients(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  if (!tensorType(getInput()).getElementType().isF32()) {
    operandGrads.push_back(Value());
    return success();
  }
  operandGrads.push_back(
      ReshapeOp::create(b, getLoc(), getInput().getType(), resultGrads[0]));
  return success();
}

LogicalResult TransposeOp::verify() {
  auto in = tensorType(getInput()), out = tensorType(getOutput());
  ArrayRef<int64_t> perm = getPermutation();
  if (static_cast<int64_t>(perm.size()) != in.getRank())
    return emitOpError("permutation has ")
           << perm.size() << " entries for a rank-" << in.getRank() << " input";
  llvm::SmallVector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= in.getRank() || seen[p])
      return emitOpError("permutation is not a permutation of [0, ")
             << in.getRank() << ")";
    seen[p] = true;
  }
  if (in.getElementType() != out.getElementType() ||
      out.getRank() != in.getRank())
    return emitOpError("result ") << out << " does not match the input " << in;
  for (size_t i = 0; i < perm.size(); ++i)
    if (out.getDimSize(i) != in.getDimSize(perm[i]))
      return emitOpError("result dimension ")
             << i << " is " << out.getDimSize(i) << ", expected "
             << in.getDimSize(perm[i]) << " (input dimension " << perm[i]
             << ")";
  return success();
}

int64_t TransposeOp::getFlops() { return 0; }

LogicalResult
TransposeOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                            SmallVectorImpl<Value> &operandGrads) {
  if (!tensorType(getInput()).getElementType().isF32()) {
    operandGrads.push_back(Value());
    return success();
  }
  ArrayRef<int64_t> perm = getPermutation();
  llvm::SmallVector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[perm[i]] = i;
  operandGrads.push_back(TransposeOp::create(b, getLoc(), getInput().getType(),
                                             resultGrads[0], inverse));
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one input");
  auto out = tensorType(getOutput());
  int64_t rank = out.getRank();
  int64_t axis = getAxis();
  if (axis < 0 || axis >= rank)
    return emitOpError("axis ") << axis << " is out of range for rank " << rank;
  int64_t total = 0;
  for (auto [i, v] : llvm::enumerate(getInputs())) {
    auto t = tensorType(v);
    if (t.getRank() != rank || t.getElementType() != out.getElementType())
      return emitOpError("input #")
             << i << " of type " << t << " does not match the result " << out;
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && t.getDimSize(d) != out.getDimSize(d))
        return emitOpError("input #")
               << i << " differs from the result in dimension " << d;
    total += t.getDimSize(axis);
  }
  if (total != out.getDimSize(axis))
    return emitOpError("inputs add up to ")
           << total << " along axis " << axis << ", the result has "
           << out.getDimSize(axis);
  return success();
}

int64_t ConcatOp::getFlops() { return 0; }

LogicalResult ConcatOp::buildGradients(OpBuilder &b,
                                       ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  int64_t start = 0;
  for (Value in : getInputs()) {
    auto t = tensorType(in);
    if (!t.getElementType().isF32())
      operandGrads.push_back(Value());
    else
      operandGrads.push_back(
          SliceOp::create(b, getLoc(), t, resultGrads[0], getAxis(), start));
    start += t.getDimSize(getAxis());
  }
  return success();
}

LogicalResult SliceOp::verify() {
  auto in = tensorType(getInput()), out = tensorType(getOutput());
  int64_t axis = getAxis();
  if (in.getRank() != out.getRank() ||
      in.getElementType() != out.getElementType())
    return emitOpError("result ") << out << " must have the rank and element "
                                  << "type of the input " << in;
  if (axis < 0 || axis >= in.getRank())
    return emitOpError("axis ")
           << axis << " is out of range for rank " << in.getRank();
  for (int64_t d = 0; d < in.getRank(); ++d)
    if (d != axis && in.getDimSize(d) != out.getDimSize(d))
      return emitOpError("result differs from the input in dimension ") << d;
  int64_t start = getStart(), size = out.getDimSize(axis);
  int64_t dim = in.getDimSize(axis);
  // Not `start + size > dim`: that overflows (and passes) for a huge start.
  if (start < 0 || start > dim - size) {
    InFlightDiagnostic diag = emitOpError("range [") << start << ", ";
    if (start < 0)
      diag << start + size;
    else
      diag << uint64_t(start) + uint64_t(size);
    return diag << ") is outside dimension " << axis << " of size " << dim;
  }
  return success();
}

int64_t SliceOp::getFlops() { return 0; }

LogicalResult ReduceToOp::verify() {
  auto in = tensorType(getInput()), out = tensorType(getOutput());
  if (!broadcastsTo(out.getShape(), in.getShape()))
    return emitOpError("result ")
           << out << " does not broadcast to the input " << in;
  return success();
}

int64_t ReduceToOp::getFlops() { return numElements(getInput()); }

//===----------------------------------------------------------------------===//
// Loss
//===----------------------------------------------------------------------===//

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

#define GET_OP_CLASSES
#include "dialects/nn/NNOps.cpp.inc"

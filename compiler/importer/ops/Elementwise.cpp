// Elementwise ONNX ops: Add Sub Mul Div Pow Max Min (broadcasting, float32;
// int64 shape arithmetic folds at import), Relu Tanh Sigmoid Erf Exp Log Sqrt
// Reciprocal Abs Neg, Clip with constant bounds, and Gelu (opset 20) as its
// erf or tanh form.
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

/// `OpTy` (a binary op) of `l` and `r` with numpy broadcasting, or an error
/// naming the node.
template <typename OpTy>
static FailureOr<Value>
createBinary(ImportContext &cx, const onnx::NodeProto &node, Value l, Value r) {
  FailureOr<llvm::SmallVector<int64_t>> shape =
      nn::broadcastShapes(shapeOf(l), shapeOf(r));
  if (failed(shape))
    return cx.nodeError(node) << "shapes " << shapeStr(shapeOf(l)) << " and "
                              << shapeStr(shapeOf(r)) << " do not broadcast";
  return Value(
      OpTy::create(cx.getBuilder(), cx.nodeLoc(node), cx.f32(*shape), l, r));
}

/// Add, Sub, Mul, Div on float32 tensors with numpy broadcasting.
template <typename OpTy>
static LogicalResult importBinary(ImportContext &cx,
                                  const onnx::NodeProto &node) {
  FailureOr<Value> l = cx.floatValueOf(node, 0), r = cx.floatValueOf(node, 1);
  if (failed(l) || failed(r))
    return failure();
  FailureOr<Value> y = createBinary<OpTy>(cx, node, *l, *r);
  if (failed(y))
    return failure();
  cx.define(node, 0, *y);
  return success();
}

/// Max, Min: one or more float32 inputs with numpy broadcasting, folded left
/// to right into binary ops (one input is the identity).
template <typename OpTy>
static LogicalResult importVariadic(ImportContext &cx,
                                    const onnx::NodeProto &node) {
  FailureOr<Value> y = cx.floatValueOf(node, 0);
  for (int k = 1; k < node.input_size() && succeeded(y); ++k) {
    FailureOr<Value> x = cx.floatValueOf(node, k);
    if (failed(x))
      return failure();
    y = createBinary<OpTy>(cx, node, *y, *x);
  }
  if (failed(y))
    return failure();
  cx.define(node, 0, *y);
  return success();
}

/// Clip with constant bounds: the optional `min` and `max` inputs (opset
/// 11+; older models arrive converted) must be constant float32 scalars
/// (torch's clamp exports them as Constant + Cast, folded at import).
/// Without either, the identity.
static LogicalResult importClip(ImportContext &cx,
                                const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0);
  if (failed(x))
    return failure();
  FloatAttr bounds[2];
  for (int k : {1, 2}) {
    if (k >= node.input_size() || node.input(k).empty())
      continue;
    const char *what = k == 1 ? "min" : "max";
    if (cx.isParameter(node.input(k)))
      return cx.nodeError(node)
             << "the " << what << " bound ('" << node.input(k)
             << "') is a float initializer, which is trained: give the bound "
                "as a Constant (torch: export with do_constant_folding=False)";
    const ConstTensor *c = cx.constantOf(node, k);
    if (!c || !c->isFloat || c->numElements() != 1)
      return cx.nodeError(node)
             << "the " << what << " bound ('" << node.input(k)
             << "') must be a constant float32 scalar (bounds computed from "
                "data are not supported)";
    if (std::isnan(c->f[0]))
      return cx.nodeError(node) << "the " << what << " bound is NaN";
    bounds[k - 1] = cx.getBuilder().getF32FloatAttr(c->f[0]);
  }
  if (!bounds[0] && !bounds[1]) {
    cx.define(node, 0, *x);
    return success();
  }
  cx.define(node, 0,
            nn::ClipOp::create(cx.getBuilder(), cx.nodeLoc(node), *x, bounds[0],
                               bounds[1]));
  return success();
}

/// Pow: a float32 base; the exponent float32, or an integer constant (as
/// torch exports `x ** 2`), converted to float32.
static LogicalResult importPow(ImportContext &cx, const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0);
  if (failed(x))
    return failure();
  Value y;
  const ConstTensor *c =
      node.input_size() > 1 ? cx.constOf(node.input(1)) : nullptr;
  if (c && !c->isFloat) {
    std::vector<float> values(c->i.begin(), c->i.end());
    auto type = cx.f32(c->shape);
    y = nn::ConstantOp::create(
        cx.getBuilder(), cx.nodeLoc(node),
        DenseElementsAttr::get(type, llvm::ArrayRef<float>(values)));
  } else {
    FailureOr<Value> e = cx.floatValueOf(node, 1);
    if (failed(e))
      return failure();
    y = *e;
  }
  FailureOr<Value> p = createBinary<nn::PowOp>(cx, node, *x, y);
  if (failed(p))
    return failure();
  cx.define(node, 0, *p);
  return success();
}

/// Int64 shape arithmetic: equal shapes, or one side a single value.
template <std::optional<int64_t> (*Apply)(int64_t, int64_t)>
static std::optional<ConstTensor> foldBinary(const onnx::NodeProto &,
                                             const FoldOperands &in) {
  if (!in.allInts(2))
    return std::nullopt;
  const ConstTensor &a = *in.values[0], &b = *in.values[1];
  bool aOne = a.numElements() == 1, bOne = b.numElements() == 1;
  if (a.shape != b.shape && !aOne && !bOne)
    return std::nullopt;
  ConstTensor out;
  out.shape = aOne && !bOne ? b.shape : a.shape;
  int64_t n = std::max(a.numElements(), b.numElements());
  for (int64_t k = 0; k < n; ++k) {
    std::optional<int64_t> v = Apply(a.i[aOne ? 0 : k], b.i[bOne ? 0 : k]);
    if (!v)
      return std::nullopt;
    out.i.push_back(*v);
  }
  return out;
}

static std::optional<int64_t> addInts(int64_t x, int64_t y) { return x + y; }
static std::optional<int64_t> subInts(int64_t x, int64_t y) { return x - y; }
static std::optional<int64_t> mulInts(int64_t x, int64_t y) { return x * y; }
static std::optional<int64_t> divInts(int64_t x, int64_t y) {
  if (y == 0)
    return std::nullopt;
  return x / y;
}

/// Relu, Tanh, Sigmoid, Erf, Exp, Log, Sqrt, Reciprocal, Abs on float32
/// tensors.
template <typename OpTy>
static LogicalResult importUnary(ImportContext &cx,
                                 const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0);
  if (failed(x))
    return failure();
  cx.define(node, 0, OpTy::create(cx.getBuilder(), cx.nodeLoc(node), *x));
  return success();
}

/// Gelu (opset 20), as the forms torch's older exporter writes and the
/// fusion passes already know: approximate "none" is
/// 0.5 x (1 + erf(x / sqrt(2))), "tanh" is
/// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
static LogicalResult importGelu(ImportContext &cx,
                                const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0);
  if (failed(x))
    return failure();
  std::string approximate = "none";
  if (const onnx::AttributeProto *a = findAttr(node, "approximate"))
    approximate = a->s();
  if (approximate != "none" && approximate != "tanh")
    return cx.nodeError(node) << "approximate must be 'none' or 'tanh', got '"
                              << approximate << "'";
  OpBuilder &b = cx.getBuilder();
  Location loc = cx.nodeLoc(node);
  auto type = cast<RankedTensorType>(x->getType());
  auto scalar = [&](float v) { return cx.f32Scalar(v, loc); };
  Value inner;
  if (approximate == "none") {
    Value scaled = nn::MulOp::create(b, loc, type, *x,
                                     scalar(static_cast<float>(M_SQRT1_2)));
    inner = nn::ErfOp::create(b, loc, scaled);
  } else {
    Value x2 = nn::MulOp::create(b, loc, type, *x, *x);
    Value x3 = nn::MulOp::create(b, loc, type, x2, *x);
    Value cubic = nn::MulOp::create(b, loc, type, x3, scalar(0.044715f));
    Value sum = nn::AddOp::create(b, loc, type, *x, cubic);
    Value scaled = nn::MulOp::create(
        b, loc, type, sum,
        scalar(static_cast<float>(std::sqrt(2.0 / M_PI))));
    inner = nn::TanhOp::create(b, loc, scaled);
  }
  Value onePlus = nn::AddOp::create(b, loc, type, inner, scalar(1.0f));
  Value half = nn::MulOp::create(b, loc, type, *x, scalar(0.5f));
  cx.define(node, 0, nn::MulOp::create(b, loc, type, half, onePlus));
  return success();
}

void gpipe::importer::registerElementwiseOps(OpTable &table) {
  table.add("Add", importBinary<nn::AddOp>, foldBinary<addInts>);
  table.add("Sub", importBinary<nn::SubOp>, foldBinary<subInts>);
  table.add("Mul", importBinary<nn::MulOp>, foldBinary<mulInts>);
  table.add("Div", importBinary<nn::DivOp>, foldBinary<divInts>);
  table.add("Relu", importUnary<nn::ReluOp>);
  table.add("Tanh", importUnary<nn::TanhOp>);
  table.add("Sigmoid", importUnary<nn::SigmoidOp>);
  table.add("Erf", importUnary<nn::ErfOp>);
  table.add("Exp", importUnary<nn::ExpOp>);
  table.add("Log", importUnary<nn::LogOp>);
  table.add("Sqrt", importUnary<nn::SqrtOp>);
  table.add("Reciprocal", importUnary<nn::ReciprocalOp>);
  table.add("Abs", importUnary<nn::AbsOp>);
  table.add("Neg", importUnary<nn::NegOp>);
  table.add("Pow", importPow);
  table.add("Max", importVariadic<nn::MaxOp>);
  table.add("Min", importVariadic<nn::MinOp>);
  table.add("Clip", importClip);
  table.add("Gelu", importGelu);
}

// Elementwise ONNX ops: Add Sub Mul Div Pow (broadcasting, float32; int64
// shape arithmetic folds at import) and Relu Tanh Sigmoid Erf Exp Log Sqrt
// Reciprocal Abs Neg.
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"

#include <algorithm>

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

/// Add, Sub, Mul, Div on float32 tensors with numpy broadcasting.
template <typename OpTy>
static LogicalResult importBinary(ImportContext &cx,
                                  const onnx::NodeProto &node) {
  FailureOr<Value> l = cx.floatValueOf(node, 0), r = cx.floatValueOf(node, 1);
  if (failed(l) || failed(r))
    return failure();
  FailureOr<llvm::SmallVector<int64_t>> shape =
      nn::broadcastShapes(shapeOf(*l), shapeOf(*r));
  if (failed(shape))
    return cx.nodeError(node) << "shapes " << shapeStr(shapeOf(*l)) << " and "
                              << shapeStr(shapeOf(*r)) << " do not broadcast";
  cx.define(
      node, 0,
      OpTy::create(cx.getBuilder(), cx.nodeLoc(node), cx.f32(*shape), *l, *r));
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
  FailureOr<llvm::SmallVector<int64_t>> shape =
      nn::broadcastShapes(shapeOf(*x), shapeOf(y));
  if (failed(shape))
    return cx.nodeError(node) << "shapes " << shapeStr(shapeOf(*x)) << " and "
                              << shapeStr(shapeOf(y)) << " do not broadcast";
  cx.define(node, 0,
            nn::PowOp::create(cx.getBuilder(), cx.nodeLoc(node), cx.f32(*shape),
                              *x, y));
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
}

// Comparison, logic, selection and casts: Equal, Not, Where, Cast. Booleans
// are f32 masks (1.0 / 0.0) in the nn dialect. On compile-time constants
// (shape arithmetic, masks built from buffers such as a causal mask) they are
// evaluated at import, so `mask[:T, :T] == 0` becomes one constant mask.
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

namespace {

/// Element `k` of a constant as a double (ints, bools and floats alike).
double elementAt(const ConstTensor &c, int64_t k) {
  return c.isFloat ? static_cast<double>(c.f[k]) : static_cast<double>(c.i[k]);
}

/// The flat index into a tensor of shape `in` that broadcasts (numpy rules)
/// to element `flat` of shape `out`.
int64_t broadcastIndex(llvm::ArrayRef<int64_t> out, llvm::ArrayRef<int64_t> in,
                       int64_t flat) {
  int64_t index = 0, stride = 1;
  for (int64_t d = out.size() - 1, e = in.size() - 1; d >= 0; --d, --e) {
    int64_t coord = flat % out[d];
    flat /= out[d];
    if (e < 0)
      continue;
    if (in[e] != 1)
      index += coord * stride;
    stride *= in[e];
  }
  return index;
}

/// Evaluates `fn` elementwise over broadcast constants into an integer
/// (boolean) or float constant.
template <typename Fn>
FailureOr<ConstTensor>
foldElementwise(ImportContext &cx, const onnx::NodeProto &node,
                llvm::ArrayRef<const ConstTensor *> in, bool isFloat, Fn fn) {
  llvm::SmallVector<int64_t> shape;
  for (const ConstTensor *c : in) {
    FailureOr<llvm::SmallVector<int64_t>> s =
        nn::broadcastShapes(shape, c->shape);
    if (failed(s))
      return cx.nodeError(node) << "shapes do not broadcast", failure();
    shape = *s;
  }
  ConstTensor out;
  out.shape.assign(shape.begin(), shape.end());
  out.isFloat = isFloat;
  llvm::SmallVector<double> args(in.size());
  for (int64_t k = 0, n = out.numElements(); k < n; ++k) {
    for (auto [j, c] : llvm::enumerate(in))
      args[j] = elementAt(*c, broadcastIndex(shape, c->shape, k));
    double v = fn(args);
    if (isFloat)
      out.f.push_back(static_cast<float>(v));
    else
      out.i.push_back(static_cast<int64_t>(v));
  }
  return out;
}

/// A constant condition as an f32 mask value.
Value maskConstant(ImportContext &cx, const onnx::NodeProto &node,
                   const ConstTensor &c) {
  std::vector<float> values;
  for (int64_t k = 0, n = c.numElements(); k < n; ++k)
    values.push_back(elementAt(c, k) != 0.0 ? 1.0f : 0.0f);
  return nn::ConstantOp::create(
      cx.getBuilder(), cx.nodeLoc(node),
      DenseElementsAttr::get(cx.f32(c.shape), llvm::ArrayRef<float>(values)));
}

LogicalResult importEqual(ImportContext &cx, const onnx::NodeProto &node) {
  const ConstTensor *a = cx.constantOf(node, 0), *b = cx.constantOf(node, 1);
  if (a && b) {
    FailureOr<ConstTensor> c =
        foldElementwise(cx, node, {a, b}, false, [](llvm::ArrayRef<double> x) {
          return x[0] == x[1] ? 1.0 : 0.0;
        });
    if (failed(c))
      return failure();
    cx.defineConst(node.output(0), std::move(*c));
    return success();
  }
  FailureOr<Value> l = cx.valueOf(node, 0), r = cx.valueOf(node, 1);
  if (failed(l) || failed(r))
    return failure();
  auto lt = cast<RankedTensorType>(l->getType()),
       rt = cast<RankedTensorType>(r->getType());
  if (lt.getElementType() != rt.getElementType())
    return cx.nodeError(node)
           << "operands must have one element type, got " << lt.getElementType()
           << " and " << rt.getElementType();
  FailureOr<llvm::SmallVector<int64_t>> shape =
      nn::broadcastShapes(lt.getShape(), rt.getShape());
  if (failed(shape))
    return cx.nodeError(node) << "shapes " << shapeStr(lt.getShape()) << " and "
                              << shapeStr(rt.getShape()) << " do not broadcast";
  cx.define(node, 0,
            nn::EqualOp::create(cx.getBuilder(), cx.nodeLoc(node),
                                cx.f32(*shape), *l, *r));
  return success();
}

LogicalResult importNot(ImportContext &cx, const onnx::NodeProto &node) {
  if (const ConstTensor *a = cx.constantOf(node, 0)) {
    FailureOr<ConstTensor> c =
        foldElementwise(cx, node, {a}, false, [](llvm::ArrayRef<double> x) {
          return x[0] == 0.0 ? 1.0 : 0.0;
        });
    if (failed(c))
      return failure();
    cx.defineConst(node.output(0), std::move(*c));
    return success();
  }
  FailureOr<Value> x = cx.floatValueOf(node, 0);
  if (failed(x))
    return failure();
  cx.define(node, 0, nn::NotOp::create(cx.getBuilder(), cx.nodeLoc(node), *x));
  return success();
}

/// Cast to FLOAT, BOOL, INT64 or INT32. Computed values: to FLOAT (an int64
/// converts, a mask or float stays) and to BOOL (x != 0); constants: any of
/// the four.
/// Cast of int64 shape data to an integer type (torch's Pad exports its pads
/// through one): the values pass unchanged.
static std::optional<ConstTensor> foldCast(const onnx::NodeProto &node,
                                           const FoldOperands &in) {
  int64_t to = intAttr(node, "to", 0);
  if (!in.allInts(1) ||
      (to != onnx::TensorProto::INT64 && to != onnx::TensorProto::INT32))
    return std::nullopt;
  return *in.values[0];
}

LogicalResult importCast(ImportContext &cx, const onnx::NodeProto &node) {
  int64_t to = intAttr(node, "to", 0);
  bool toFloat = to == onnx::TensorProto::FLOAT,
       toBool = to == onnx::TensorProto::BOOL,
       toInt = to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32;
  if (!toFloat && !toBool && !toInt)
    return cx.nodeError(node) << "Cast to " << dtypeName(to)
                              << " is not supported (FLOAT, BOOL, INT64 and "
                                 "INT32 are)";
  if (const ConstTensor *a = cx.constantOf(node, 0)) {
    FailureOr<ConstTensor> c =
        foldElementwise(cx, node, {a}, toFloat, [&](llvm::ArrayRef<double> x) {
          return toBool ? (x[0] != 0.0 ? 1.0 : 0.0) : x[0];
        });
    if (failed(c))
      return failure();
    cx.defineConst(node.output(0), std::move(*c));
    return success();
  }
  FailureOr<Value> x = cx.valueOf(node, 0);
  if (failed(x))
    return failure();
  OpBuilder &b = cx.getBuilder();
  Location loc = cx.nodeLoc(node);
  bool isInt = !cast<RankedTensorType>(x->getType()).getElementType().isF32();
  if (toInt)
    return isInt ? (cx.define(node, 0, *x), success())
                 : (cx.nodeError(node)
                    << "Cast of a computed float32 value to an integer type "
                       "is not supported");
  Value v = *x;
  if (isInt)
    v = nn::IntToFloatOp::create(b, loc, cx.f32(shapeOf(v)), v);
  if (toBool) // x != 0 as a mask
    v = nn::NotOp::create(b, loc, nn::NotOp::create(b, loc, v));
  cx.define(node, 0, v);
  return success();
}

/// Where(condition, a, b): a constant condition becomes a mask constant.
LogicalResult importWhere(ImportContext &cx, const onnx::NodeProto &node) {
  // All constants (shape arithmetic, say): evaluated here.
  const ConstTensor *c0 = cx.constantOf(node, 0), *c1 = cx.constantOf(node, 1),
                    *c2 = cx.constantOf(node, 2);
  if (c0 && c1 && c2 && c1->isFloat == c2->isFloat) {
    FailureOr<ConstTensor> c = foldElementwise(
        cx, node, {c0, c1, c2}, c1->isFloat,
        [](llvm::ArrayRef<double> x) { return x[0] != 0.0 ? x[1] : x[2]; });
    if (failed(c))
      return failure();
    cx.defineConst(node.output(0), std::move(*c));
    return success();
  }
  Value cond;
  if (const ConstTensor *c = cx.constantOf(node, 0)) {
    cond = maskConstant(cx, node, *c);
  } else {
    FailureOr<Value> v = cx.floatValueOf(node, 0);
    if (failed(v))
      return failure();
    cond = *v;
  }
  FailureOr<Value> l = cx.floatValueOf(node, 1), r = cx.floatValueOf(node, 2);
  if (failed(l) || failed(r))
    return failure();
  FailureOr<llvm::SmallVector<int64_t>> shape =
      nn::broadcastShapes(shapeOf(cond), shapeOf(*l));
  if (succeeded(shape))
    shape = nn::broadcastShapes(*shape, shapeOf(*r));
  if (failed(shape))
    return cx.nodeError(node) << "shapes " << shapeStr(shapeOf(cond)) << ", "
                              << shapeStr(shapeOf(*l)) << " and "
                              << shapeStr(shapeOf(*r)) << " do not broadcast";
  cx.define(node, 0,
            nn::WhereOp::create(cx.getBuilder(), cx.nodeLoc(node),
                                cx.f32(*shape), cond, *l, *r));
  return success();
}

} // namespace

void gpipe::importer::registerLogicalOps(OpTable &table) {
  table.add("Equal", importEqual);
  table.add("Not", importNot);
  table.add("Cast", importCast, foldCast);
  table.add("Where", importWhere);
}

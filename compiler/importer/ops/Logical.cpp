// Comparison, logic, selection and casts: Equal, Not, Where, Cast. Booleans
// are f32 masks (1.0 / 0.0) in the nn dialect. On compile-time constants
// (shape arithmetic, masks built from buffers such as a causal mask) they are
// evaluated at import, so `mask[:T, :T] == 0` becomes one constant mask.
#include "compiler/importer/OpTable.h"

#include <cmath>

#include "dialects/nn/NNOps.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

namespace {

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

/// Cast of input 0 to the ONNX element type `to`.
static LogicalResult castTo(ImportContext &cx, const onnx::NodeProto &node,
                            int64_t to) {
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

LogicalResult importCast(ImportContext &cx, const onnx::NodeProto &node) {
  return castTo(cx, node, intAttr(node, "to", 0));
}

/// The element type of input #`index`: FLOAT or INT64 (what the importer's
/// values and constants hold), or nullopt when the input is not defined.
static std::optional<int64_t> elementTypeOf(ImportContext &cx,
                                            const onnx::NodeProto &node,
                                            int index) {
  if (index >= node.input_size() || node.input(index).empty())
    return std::nullopt;
  if (const ConstTensor *c = cx.constOf(node.input(index)))
    return c->isFloat ? onnx::TensorProto::FLOAT : onnx::TensorProto::INT64;
  FailureOr<Value> v = cx.valueOf(node, index);
  if (failed(v))
    return std::nullopt;
  return cast<RankedTensorType>(v->getType()).getElementType().isF32()
             ? onnx::TensorProto::FLOAT
             : onnx::TensorProto::INT64;
}

/// CastLike(x, like) (opset 15; torch >= 2.9's exporter writes one before
/// most scalar constants): Cast to the element type of `like`.
static LogicalResult importCastLike(ImportContext &cx,
                                    const onnx::NodeProto &node) {
  std::optional<int64_t> to = elementTypeOf(cx, node, 1);
  if (!to)
    return failure();
  return castTo(cx, node, *to);
}

/// Integer shape data cast like an integer passes unchanged; a float
/// constant with integral values (torch's `arange` bounds) becomes int64.
static std::optional<ConstTensor> foldCastLike(const onnx::NodeProto &,
                                               const FoldOperands &in) {
  if (in.values.size() < 2 || !in.values[1])
    return std::nullopt;
  if (in.values[0])
    return *in.values[0];
  const ConstTensor *f = in.floatValues[0];
  if (!f)
    return std::nullopt;
  ConstTensor out;
  out.shape = f->shape;
  for (float v : f->f) {
    if (v != std::trunc(v) || std::abs(v) > 9.0e15f)
      return std::nullopt;
    out.i.push_back(static_cast<int64_t>(v));
  }
  return out;
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
  table.add("CastLike", importCastLike, foldCastLike);
  table.add("Where", importWhere);
}

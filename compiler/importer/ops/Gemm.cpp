// Matrix product ONNX ops: Gemm (rank 2, transA/transB, alpha/beta, a C that
// broadcasts to [M, N]) and MatMul ([..., K] x [K, N]), both as nn.gemm.
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

static LogicalResult importGemm(ImportContext &cx,
                                const onnx::NodeProto &node) {
  FailureOr<Value> a = cx.floatValueOf(node, 0), b = cx.floatValueOf(node, 1);
  if (failed(a) || failed(b))
    return failure();
  auto as = shapeOf(*a), bs = shapeOf(*b);
  bool ta = intAttr(node, "transA", 0), tb = intAttr(node, "transB", 0);
  if (as.size() != 2 || bs.size() != 2)
    return cx.nodeError(node) << "Gemm operands must be rank 2, got "
                              << shapeStr(as) << " and " << shapeStr(bs);
  int64_t m = ta ? as[1] : as[0], k = ta ? as[0] : as[1];
  int64_t kb = tb ? bs[1] : bs[0], n = tb ? bs[0] : bs[1];
  if (k != kb)
    return cx.nodeError(node) << "inner dimensions differ: op(A) is " << m
                              << "x" << k << ", op(B) is " << kb << "x" << n;
  FailureOr<Value> cv = cx.optionalFloatValueOf(node, 2);
  if (failed(cv))
    return failure();
  Value c = *cv;
  if (c) {
    if (failed(nn::broadcastShapes(shapeOf(c), {m, n})) ||
        shapeOf(c).size() > 2)
      return cx.nodeError(node)
             << "C of shape " << shapeStr(shapeOf(c))
             << " does not broadcast to [" << m << ", " << n << "]";
  }
  OpBuilder &builder = cx.getBuilder();
  Value y = nn::GemmOp::create(
      builder, cx.nodeLoc(node), cx.f32({m, n}), *a, *b, c,
      builder.getBoolAttr(ta), builder.getBoolAttr(tb),
      builder.getF32FloatAttr(floatAttr(node, "alpha", 1.0f)),
      builder.getF32FloatAttr(floatAttr(node, "beta", 1.0f)));
  cx.define(node, 0, y);
  return success();
}

/// Only a rank-2 right operand: the leading dims of the left one are
/// flattened into one GEMM.
static LogicalResult importMatMul(ImportContext &cx,
                                  const onnx::NodeProto &node) {
  FailureOr<Value> a = cx.floatValueOf(node, 0), b = cx.floatValueOf(node, 1);
  if (failed(a) || failed(b))
    return failure();
  auto as = shapeOf(*a), bs = shapeOf(*b);
  if (as.size() < 2 || bs.size() != 2)
    return cx.nodeError(node)
           << "MatMul of shapes " << shapeStr(as) << " x " << shapeStr(bs)
           << " is not supported: the left operand must "
              "have rank >= 2 and the right rank 2";
  if (as.back() != bs[0])
    return cx.nodeError(node)
           << "MatMul inner dimensions differ: " << shapeStr(as) << " x "
           << shapeStr(bs);
  OpBuilder &builder = cx.getBuilder();
  Location loc = cx.nodeLoc(node);
  // [..., K] x [K, N]: flatten the leading dims into one GEMM.
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < as.size(); ++d)
    rows *= as[d];
  Value a2 =
      as.size() == 2 ? *a : createReshape(builder, loc, *a, {rows, as.back()});
  // x @ W^T (torch's Linear without bias): a GEMM with transB instead of
  // a transpose, which is dropped if nothing else reads it.
  Value bOperand = *b;
  bool transB = false;
  if (auto t = bOperand.getDefiningOp<nn::TransposeOp>()) {
    if (t.getPermutation() == llvm::ArrayRef<int64_t>{1, 0}) {
      bOperand = t.getInput();
      transB = true;
    }
  }
  Value y = nn::GemmOp::create(
      builder, loc, cx.f32({rows, bs[1]}), a2, bOperand, Value(),
      builder.getBoolAttr(false), builder.getBoolAttr(transB),
      builder.getF32FloatAttr(1.0f), builder.getF32FloatAttr(1.0f));
  if (as.size() != 2) {
    llvm::SmallVector<int64_t> out(as.begin(), as.end());
    out.back() = bs[1];
    y = createReshape(builder, loc, y, out);
  }
  cx.define(node, 0, y);
  return success();
}

void gpipe::importer::registerGemmOps(OpTable &table) {
  table.add("Gemm", importGemm);
  table.add("MatMul", importMatMul);
}

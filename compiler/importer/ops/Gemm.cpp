// Matrix product ONNX ops: Gemm (rank 2, transA/transB, alpha/beta, a C that
// broadcasts to [M, N]) and MatMul (numpy matmul, any ranks >= 1): nn.gemm
// where the product is one GEMM, nn.batch_matmul where it has batch dims.
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

/// If `v` is an nn.transpose that only swaps the last two dims, its input
/// (the product then reads it with the transpose flag, and the transpose is
/// dropped if nothing else reads it).
static Value swappedLastTwo(Value v) {
  auto t = v.getDefiningOp<nn::TransposeOp>();
  if (!t)
    return Value();
  ArrayRef<int64_t> perm = t.getPermutation();
  int64_t r = perm.size();
  if (r < 2 || perm[r - 2] != r - 1 || perm[r - 1] != r - 2)
    return Value();
  for (int64_t d = 0; d + 2 < r; ++d)
    if (perm[d] != d)
      return Value();
  return t.getInput();
}

/// numpy matmul (ONNX MatMul) of any ranks >= 1: a 1-D operand is promoted
/// to a matrix (A: [1, K], B: [K, 1]) and the added dim removed from the
/// result. [..., M, K] x [K, N] (B without batch) is one GEMM over the
/// flattened rows of A; other products with batch dims are nn.batch_matmul,
/// the batch dims broadcast.
static LogicalResult importMatMul(ImportContext &cx,
                                  const onnx::NodeProto &node) {
  FailureOr<Value> a = cx.floatValueOf(node, 0), b = cx.floatValueOf(node, 1);
  if (failed(a) || failed(b))
    return failure();
  auto as0 = shapeOf(*a), bs0 = shapeOf(*b);
  if (as0.empty() || bs0.empty())
    return cx.nodeError(node) << "MatMul operands must have rank >= 1, got "
                              << shapeStr(as0) << " x " << shapeStr(bs0);
  OpBuilder &builder = cx.getBuilder();
  Location loc = cx.nodeLoc(node);
  // Promote 1-D operands.
  SmallVector<int64_t> as(as0), bs(bs0);
  if (as0.size() == 1)
    as.insert(as.begin(), 1);
  if (bs0.size() == 1)
    bs.push_back(1);
  int64_t ra = as.size(), rb = bs.size();
  int64_t m = as[ra - 2], k = as[ra - 1], n = bs[rb - 1];
  if (k != bs[rb - 2])
    return cx.nodeError(node)
           << "MatMul inner dimensions differ: " << shapeStr(as0) << " x "
           << shapeStr(bs0);
  ArrayRef<int64_t> aBatch = ArrayRef<int64_t>(as).drop_back(2),
                    bBatch = ArrayRef<int64_t>(bs).drop_back(2);
  FailureOr<SmallVector<int64_t>> batch = nn::broadcastShapes(aBatch, bBatch);
  if (failed(batch))
    return cx.nodeError(node)
           << "MatMul batch dimensions do not broadcast: " << shapeStr(as0)
           << " x " << shapeStr(bs0);
  // The result's shape before the promoted dims are removed.
  SmallVector<int64_t> full(*batch);
  full.append({m, n});
  SmallVector<int64_t> result;
  for (int64_t d = 0, r = full.size(); d < r; ++d)
    if (!(as0.size() == 1 && d == r - 2) && !(bs0.size() == 1 && d == r - 1))
      result.push_back(full[d]);

  Value y;
  int64_t bBatchSize = 1;
  for (int64_t d : bBatch)
    bBatchSize *= d;
  if (bBatchSize == 1) {
    // B is one matrix: flatten the leading dims of A into one GEMM's rows.
    int64_t rows = 1;
    for (int64_t d = 0; d + 1 < ra; ++d)
      rows *= as[d];
    Value a2 =
        as0.size() == 2 ? *a : createReshape(builder, loc, *a, {rows, k});
    // x @ W^T (torch's Linear without bias): transB instead of a transpose.
    Value bOperand =
        bs0.size() == 2 ? *b : createReshape(builder, loc, *b, {k, n});
    bool transB = false;
    if (Value bt = bs0.size() == 2 ? swappedLastTwo(bOperand) : Value()) {
      bOperand = bt;
      transB = true;
    }
    y = nn::GemmOp::create(
        builder, loc, cx.f32({rows, n}), a2, bOperand, Value(),
        builder.getBoolAttr(false), builder.getBoolAttr(transB),
        builder.getF32FloatAttr(1.0f), builder.getF32FloatAttr(1.0f));
  } else {
    // A batched product: transposes of the last two dims become flags.
    Value a2 = as0.size() == 1 ? createReshape(builder, loc, *a, as) : *a;
    Value b2 = *b;
    bool transA = false, transB = false;
    if (Value at = swappedLastTwo(a2)) {
      a2 = at;
      transA = true;
    }
    if (Value bt = swappedLastTwo(b2)) {
      b2 = bt;
      transB = true;
    }
    y = nn::BatchMatMulOp::create(builder, loc, cx.f32(full), a2, b2,
                                  builder.getBoolAttr(transA),
                                  builder.getBoolAttr(transB));
  }
  if (shapeOf(y) != ArrayRef<int64_t>(result))
    y = createReshape(builder, loc, y, result);
  cx.define(node, 0, y);
  return success();
}

void gpipe::importer::registerGemmOps(OpTable &table) {
  table.add("Gemm", importGemm);
  table.add("MatMul", importMatMul);
}

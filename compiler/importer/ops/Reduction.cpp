// Reduction ONNX ops: ReduceSum, ReduceMean and ReduceMax over any axes
// (keepdims either way), as nn.reduce_to (a mean divides by the count of
// summed elements) and nn.reduce_max.
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

/// The reduced axes of a reduction, normalised to [0, rank) and marked: the
/// optional constant int64 `axes` input where the node has one (ReduceSum
/// since opset 13, every reduction since opset 18), else the `axes`
/// attribute; none given reduces every axis unless `noop_with_empty_axes` is
/// set (then nothing is reduced).
static FailureOr<llvm::SmallVector<bool>>
reducedAxes(ImportContext &cx, const onnx::NodeProto &node, int64_t rank) {
  std::vector<int64_t> axes;
  if (node.input_size() > 1 && !node.input(1).empty()) {
    FailureOr<std::vector<int64_t>> a = cx.intsOperand(node, 1, "axes");
    if (failed(a))
      return failure();
    axes = *a;
  } else if (const onnx::AttributeProto *a = findAttr(node, "axes")) {
    axes.assign(a->ints().begin(), a->ints().end());
  }
  if (axes.empty())
    return llvm::SmallVector<bool>(rank,
                                   !intAttr(node, "noop_with_empty_axes", 0));
  return cx.markAxes(node, axes, rank);
}

enum class Reduction { Sum, Mean, Max };

/// ReduceSum / ReduceMean / ReduceMax: nn.reduce_to (a sum) or nn.reduce_max
/// to the kept-dims shape, divided by the count for a mean (torch's order:
/// the sum, then one division), reshaped when `keepdims = 0`.
template <Reduction Kind>
static LogicalResult importReduce(ImportContext &cx,
                                  const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0);
  if (failed(x))
    return failure();
  llvm::ArrayRef<int64_t> in = shapeOf(*x);
  FailureOr<llvm::SmallVector<bool>> marked = reducedAxes(cx, node, in.size());
  if (failed(marked))
    return failure();
  OpBuilder &b = cx.getBuilder();
  Location loc = cx.nodeLoc(node);
  llvm::SmallVector<int64_t> kept, dropped;
  int64_t count = 1;
  for (auto [d, size] : llvm::enumerate(in)) {
    kept.push_back((*marked)[d] ? 1 : size);
    if ((*marked)[d])
      count *= size;
    else
      dropped.push_back(size);
  }
  Value v = *x;
  // Reducing only size-1 dimensions (or none) is the identity.
  if (llvm::ArrayRef<int64_t>(kept) != in) {
    if (Kind == Reduction::Max)
      v = nn::ReduceMaxOp::create(b, loc, cx.f32(kept), v);
    else
      v = nn::ReduceToOp::create(b, loc, cx.f32(kept), v);
  }
  if (Kind == Reduction::Mean && count != 1) {
    Value n = cx.f32Scalar(static_cast<float>(count), loc);
    v = nn::DivOp::create(b, loc, cx.f32(kept), v, n);
  }
  if (!intAttr(node, "keepdims", 1) && dropped != kept)
    v = createReshape(b, loc, v, dropped);
  cx.define(node, 0, v);
  return success();
}

void gpipe::importer::registerReductionOps(OpTable &table) {
  table.add("ReduceSum", importReduce<Reduction::Sum>);
  table.add("ReduceMean", importReduce<Reduction::Mean>);
  table.add("ReduceMax", importReduce<Reduction::Max>);
}

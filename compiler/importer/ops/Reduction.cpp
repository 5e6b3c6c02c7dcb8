// Reduction ONNX ops: ReduceSum and ReduceMean over any axes (keepdims either
// way), as nn.reduce_to (a mean divides by the count of summed elements).
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

/// The reduced axes of a ReduceSum (an optional constant int64 input since
/// opset 13) or another reduction (the `axes` attribute until opset 18),
/// normalised to [0, rank) and marked; none given reduces every axis unless
/// `noop_with_empty_axes` is set (then nothing is reduced).
static FailureOr<llvm::SmallVector<bool>>
reducedAxes(ImportContext &cx, const onnx::NodeProto &node, int64_t rank,
            bool axesInput) {
  std::vector<int64_t> axes;
  if (axesInput) {
    if (node.input_size() > 1 && !node.input(1).empty()) {
      FailureOr<std::vector<int64_t>> a = cx.intsOperand(node, 1, "axes");
      if (failed(a))
        return failure();
      axes = *a;
    }
  } else if (const onnx::AttributeProto *a = findAttr(node, "axes")) {
    axes.assign(a->ints().begin(), a->ints().end());
  }
  if (axes.empty())
    return llvm::SmallVector<bool>(rank,
                                   !intAttr(node, "noop_with_empty_axes", 0));
  return cx.markAxes(node, axes, rank);
}

/// ReduceSum / ReduceMean: nn.reduce_to the kept-dims shape, divided by the
/// count for a mean (torch's order: the sum, then one division), reshaped
/// when `keepdims = 0`.
template <bool Mean>
static LogicalResult importReduce(ImportContext &cx,
                                  const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0);
  if (failed(x))
    return failure();
  llvm::ArrayRef<int64_t> in = shapeOf(*x);
  FailureOr<llvm::SmallVector<bool>> marked =
      reducedAxes(cx, node, in.size(), /*axesInput=*/!Mean);
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
  if (llvm::ArrayRef<int64_t>(kept) != in)
    v = nn::ReduceToOp::create(b, loc, cx.f32(kept), v);
  if (Mean && count != 1) {
    auto scalar = cx.f32({});
    Value n = nn::ConstantOp::create(
        b, loc, DenseElementsAttr::get(scalar, static_cast<float>(count)));
    v = nn::DivOp::create(b, loc, cx.f32(kept), v, n);
  }
  if (!intAttr(node, "keepdims", 1) && dropped != kept)
    v = createReshape(b, loc, v, dropped);
  cx.define(node, 0, v);
  return success();
}

void gpipe::importer::registerReductionOps(OpTable &table) {
  table.add("ReduceSum", importReduce<false>);
  table.add("ReduceMean", importReduce<true>);
}

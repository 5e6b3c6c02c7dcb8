// Loss ONNX ops: SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss
// (scores [N, C] or [N, C, d1, ...], int64 labels [N] or [N, d1, ...],
// reduction 'mean' or 'sum', optional ignore_index; no class weights, no
// log_prob output).
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

/// Scores [N, C, d1, ..., dk] and labels [N, d1, ..., dk] as [N * d1 * ... *
/// dk, C] and [N * d1 * ... * dk]: the class axis moved last (nn.transpose),
/// then both flattened (nn.reshape), so that every position is a sample (the
/// mean over all of them is ONNX's and torch's). [N, C] and [N] pass
/// unchanged. Fails with an error naming the node on other shapes.
static LogicalResult flattenLossOperands(ImportContext &cx,
                                         const onnx::NodeProto &node,
                                         Value &scores, Value &labels) {
  llvm::ArrayRef<int64_t> st = shapeOf(scores), lt = shapeOf(labels);
  if (st.size() < 2)
    return cx.nodeError(node)
           << "scores must be [N, C] or [N, C, d1, ...], got " << shapeStr(st);
  auto labelType = cast<RankedTensorType>(labels.getType());
  if (!labelType.getElementType().isInteger(64))
    return cx.nodeError(node)
           << "labels must be int64, got " << labelType.getElementType();
  llvm::SmallVector<int64_t> want{st[0]};
  want.append(st.begin() + 2, st.end());
  if (lt != llvm::ArrayRef<int64_t>(want))
    return cx.nodeError(node) << "labels must be " << shapeStr(want)
                              << " (the scores' shape without the class "
                                 "axis 1), got "
                              << shapeStr(lt);
  if (st.size() == 2)
    return success();
  OpBuilder &b = cx.getBuilder();
  Location loc = cx.nodeLoc(node);
  llvm::SmallVector<int64_t> perm{0}, moved{st[0]};
  for (size_t d = 2; d < st.size(); ++d) {
    perm.push_back(d);
    moved.push_back(st[d]);
  }
  perm.push_back(1);
  moved.push_back(st[1]);
  int64_t rows = labelType.getNumElements();
  scores = createReshape(
      b, loc, nn::TransposeOp::create(b, loc, cx.f32(moved), scores, perm),
      {rows, st[1]});
  labels = createReshape(b, loc, labels, {rows});
  return success();
}

/// SoftmaxCrossEntropyLoss (`LossOp` nn.softmax_cross_entropy, on scores)
/// and NegativeLogLikelihoodLoss (nn.nll_loss, on log-probabilities): the
/// mean or sum over the samples whose label is not ignore_index.
template <typename LossOp>
static LogicalResult importLoss(ImportContext &cx,
                                const onnx::NodeProto &node) {
  FailureOr<Value> scores = cx.floatValueOf(node, 0),
                   labels = cx.valueOf(node, 1);
  if (failed(scores) || failed(labels))
    return failure();
  if (node.input_size() > 2 && !node.input(2).empty())
    return cx.nodeError(node) << "class weights are not supported";
  const auto *red = findAttr(node, "reduction");
  std::string reduction = red ? red->s() : "mean";
  if (reduction != "mean" && reduction != "sum")
    return cx.nodeError(node) << "reduction '" << reduction
                              << "' is not supported (only 'mean' and 'sum')";
  if (node.output_size() > 1 && !node.output(1).empty())
    return cx.nodeError(node) << "the log_prob output is not supported";
  if (failed(flattenLossOperands(cx, node, *scores, *labels)))
    return failure();
  OpBuilder &builder = cx.getBuilder();
  IntegerAttr ignore;
  if (const auto *a = findAttr(node, "ignore_index"))
    ignore = builder.getI64IntegerAttr(a->i());
  cx.define(
      node, 0,
      LossOp::create(builder, cx.nodeLoc(node), *scores, *labels, ignore,
                     reduction == "sum" ? builder.getUnitAttr() : UnitAttr(),
                     IntegerAttr()));
  return success();
}

void gpipe::importer::registerLossOps(OpTable &table) {
  table.add("SoftmaxCrossEntropyLoss", importLoss<nn::SoftmaxCrossEntropyOp>);
  table.add("NegativeLogLikelihoodLoss", importLoss<nn::NllLossOp>);
}

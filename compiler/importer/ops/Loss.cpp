// Loss ONNX ops: SoftmaxCrossEntropyLoss (scores [N, C], int64 labels [N],
// reduction 'mean', optional ignore_index; no class weights, no log_prob).
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

static LogicalResult
importSoftmaxCrossEntropyLoss(ImportContext &cx, const onnx::NodeProto &node) {
  FailureOr<Value> scores = cx.floatValueOf(node, 0),
                   labels = cx.valueOf(node, 1);
  if (failed(scores) || failed(labels))
    return failure();
  if (node.input_size() > 2 && !node.input(2).empty())
    return cx.nodeError(node) << "class weights are not supported";
  const auto *red = findAttr(node, "reduction");
  std::string reduction = red ? red->s() : "mean";
  if (reduction != "mean")
    return cx.nodeError(node)
           << "reduction '" << reduction << "' is not supported (only 'mean')";
  if (node.output_size() > 1 && !node.output(1).empty())
    return cx.nodeError(node) << "the log_prob output is not supported";
  auto st = shapeOf(*scores), lt = shapeOf(*labels);
  if (st.size() != 2)
    return cx.nodeError(node) << "scores must be [N, C], got " << shapeStr(st);
  auto labelType = cast<RankedTensorType>((*labels).getType());
  if (!labelType.getElementType().isInteger(64))
    return cx.nodeError(node)
           << "labels must be int64, got " << labelType.getElementType();
  if (lt.size() != 1 || lt[0] != st[0])
    return cx.nodeError(node)
           << "labels must be [" << st[0] << "], got " << shapeStr(lt);
  OpBuilder &builder = cx.getBuilder();
  IntegerAttr ignore;
  if (const auto *a = findAttr(node, "ignore_index"))
    ignore = builder.getI64IntegerAttr(a->i());
  cx.define(node, 0,
            nn::SoftmaxCrossEntropyOp::create(builder, cx.nodeLoc(node),
                                              *scores, *labels, ignore,
                                              IntegerAttr()));
  return success();
}

void gpipe::importer::registerLossOps(OpTable &table) {
  table.add("SoftmaxCrossEntropyLoss", importSoftmaxCrossEntropyLoss);
}

// Normalization ONNX ops: Softmax (opset 13 semantics: one axis; models of
// older opsets arrive converted by the version converter).
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

/// Softmax along `axis` (default -1, the last) of a float32 tensor.
static LogicalResult importSoftmax(ImportContext &cx,
                                   const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0);
  if (failed(x))
    return failure();
  int64_t rank = cast<RankedTensorType>(x->getType()).getRank();
  int64_t axis = intAttr(node, "axis", -1);
  if (axis < 0)
    axis += rank;
  if (rank == 0 || axis < 0 || axis >= rank)
    return cx.nodeError(node) << "axis " << intAttr(node, "axis", -1)
                              << " is out of range for rank " << rank;
  cx.define(node, 0,
            nn::SoftmaxOp::create(cx.getBuilder(), cx.nodeLoc(node), *x,
                                  cx.getBuilder().getI64IntegerAttr(axis)));
  return success();
}

void gpipe::importer::registerNormalizationOps(OpTable &table) {
  table.add("Softmax", importSoftmax);
}

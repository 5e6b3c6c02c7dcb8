// The nn dialect's value ops: parameters, constants, parameter gradients.
#include "dialects/nn/ops/Common.h"

using namespace mlir;
using namespace gpipe::nn;

LogicalResult ParamOp::verify() {
  if (getName().empty())
    return emitOpError("parameter name must not be empty");
  return success();
}

int64_t ParamOp::getFlops() { return 0; }
int64_t ParamOp::getBytesAccessed() { return 0; }

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }
int64_t ConstantOp::getFlops() { return 0; }
int64_t ConstantOp::getBytesAccessed() { return 0; }

LogicalResult ParamGradOp::verify() {
  // Equal types are checked by AllTypesMatch.
  if (!getParam().getDefiningOp<ParamOp>())
    return emitOpError("operand #0 must be the result of an 'nn.param'");
  return success();
}

// The nn dialect's value ops: parameters, constants, parameter gradients.
#include "dialects/nn/ops/Common.h"

using namespace mlir;
using namespace gpipe::nn;

LogicalResult gpipe::nn::verifyParameterUse(Operation *op, StringRef name,
                                            Type type,
                                            SymbolTableCollection &symbols) {
  auto decl = symbols.lookupNearestSymbolFrom<ParameterOp>(
      op, StringAttr::get(op->getContext(), name));
  if (!decl)
    return op->emitOpError("parameter @")
           << name << " is not declared (no nn.parameter @" << name
           << " in the module)";
  if (decl.getType() != type)
    return op->emitOpError("has type ") << type << " but parameter @" << name
                                        << " is declared " << decl.getType();
  return success();
}

LogicalResult ParameterOp::verify() {
  if (getState() && getFrozen())
    return emitOpError("@") << getSymName()
                            << " cannot be both state (updated by the "
                               "forward) and frozen (never updated)";
  return success();
}

LogicalResult ParamOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyParameterUse(*this, getName(), getOutput().getType(), symbols);
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

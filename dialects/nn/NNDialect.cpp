// The nn dialect: registration, and the verifiers and accessors of its
// discardable attributes.
#include "dialects/nn/NNOps.h"

using namespace mlir;
using namespace gpipe::nn;

#include "dialects/nn/NNDialect.cpp.inc"

void NNDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/nn/NNOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Discardable attributes: verification
//===----------------------------------------------------------------------===//

LogicalResult NNDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  StringAttr name = attr.getName();
  if (name == getBackwardAttrHelper().getName()) {
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitOpError()
             << "attribute '" << name.getValue()
             << "' must be a unit attribute, got " << attr.getValue();
    return success();
  }
  if (name == getInputAttrHelper().getName())
    return op->emitOpError() << "attribute '" << name.getValue()
                             << "' belongs on a function argument";
  if (name == getOutputAttrHelper().getName() ||
      name == getLossAttrHelper().getName())
    return op->emitOpError() << "attribute '" << name.getValue()
                             << "' belongs on a function result";
  return op->emitOpError() << "has '" << name.getValue()
                           << "', which is not an attribute of the nn dialect";
}

namespace {
/// An attribute on argument or result `index` of `op`, for the messages.
struct FunctionValueAttr {
  Operation *op;
  StringRef kind; // "argument" or "result"
  unsigned index;
  NamedAttribute attr;

  InFlightDiagnostic error() const {
    return op->emitOpError() << kind << " #" << index;
  }
  LogicalResult misplaced() const {
    return error() << " has '" << attr.getName().getValue()
                   << "', which is not an attribute of " << kind << "s";
  }
  /// Fails unless `ok`, saying the value must be `what`.
  LogicalResult expect(bool ok, StringRef what) const {
    if (ok)
      return success();
    return error() << ": attribute '" << attr.getName().getValue()
                   << "' must be " << what << ", got " << attr.getValue();
  }
};
} // namespace

LogicalResult NNDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                  unsigned argIndex,
                                                  NamedAttribute attr) {
  FunctionValueAttr arg{op, "argument", argIndex, attr};
  if (attr.getName() == getInputAttrHelper().getName())
    return arg.expect(isa<StringAttr>(attr.getValue()),
                      "a string (the ONNX input name)");
  return arg.misplaced();
}

LogicalResult NNDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                     unsigned resultIndex,
                                                     NamedAttribute attr) {
  FunctionValueAttr result{op, "result", resultIndex, attr};
  if (attr.getName() == getOutputAttrHelper().getName())
    return result.expect(isa<StringAttr>(attr.getValue()),
                         "a string (the ONNX output name)");
  if (attr.getName() == getLossAttrHelper().getName())
    return result.expect(isa<UnitAttr>(attr.getValue()), "a unit attribute");
  return result.misplaced();
}

//===----------------------------------------------------------------------===//
// Discardable attributes: accessors
//===----------------------------------------------------------------------===//

StringAttr gpipe::nn::getInputName(FunctionOpInterface func, unsigned arg) {
  return func.getArgAttrOfType<StringAttr>(
      arg, NNDialect::InputAttrHelper::getNameStr());
}
void gpipe::nn::setInputName(FunctionOpInterface func, unsigned arg,
                             StringAttr name) {
  func.setArgAttr(arg, NNDialect::InputAttrHelper::getNameStr(), name);
}

void gpipe::nn::setOutputName(FunctionOpInterface func, unsigned result,
                              StringAttr name) {
  func.setResultAttr(result, NNDialect::OutputAttrHelper::getNameStr(), name);
}

bool gpipe::nn::isLoss(FunctionOpInterface func, unsigned result) {
  return func.getResultAttr(result, NNDialect::LossAttrHelper::getNameStr()) !=
         nullptr;
}
void gpipe::nn::setLoss(FunctionOpInterface func, unsigned result) {
  func.setResultAttr(result, NNDialect::LossAttrHelper::getNameStr(),
                     UnitAttr::get(func.getContext()));
}

bool gpipe::nn::isBackward(Operation *op) {
  return NNDialect::BackwardAttrHelper(op->getContext()).isAttrPresent(op);
}
void gpipe::nn::setBackward(Operation *op) {
  NNDialect::BackwardAttrHelper(op->getContext())
      .setAttr(op, UnitAttr::get(op->getContext()));
}
void gpipe::nn::removeBackward(Operation *op) {
  op->removeAttr(NNDialect::BackwardAttrHelper::getNameStr());
}

// The pipe dialect: registration and verifiers.
#include "dialects/pipe/PipeOps.h"

#include "dialects/nn/NNOps.h"

using namespace mlir;
using namespace gpipe::pipeline;

#include "dialects/pipe/PipeDialect.cpp.inc"

void PipeDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/pipe/PipeOps.cpp.inc"
      >();
}

/// Checks what every in-place update needs: the updated value is a parameter
/// (equal types are checked by AllTypesMatch), and nothing reads it after the
/// update.
static LogicalResult verifyUpdate(Operation *op, Value param, Value grad) {
  if (!param.getDefiningOp<gpipe::nn::ParamOp>())
    return op->emitOpError("operand #0 must be the result of an 'nn.param'");
  for (Operation *user : param.getUsers()) {
    if (user == op || user->getBlock() != op->getBlock())
      continue;
    if (op->isBeforeInBlock(user))
      return op->emitOpError("parameter is used after its update by ")
             << user->getName();
  }
  return success();
}

static LogicalResult checkRange(Operation *op, StringRef name, double v,
                                double lo, double hi, bool hiOpen) {
  if (v < lo || v > hi || (hiOpen && v == hi) || std::isnan(v))
    return op->emitOpError() << name << " = " << v << " is out of range [" << lo
                             << ", " << hi << (hiOpen ? ")" : "]");
  return success();
}

LogicalResult SGDUpdateOp::verify() {
  const double inf = std::numeric_limits<double>::infinity();
  if (failed(verifyUpdate(*this, getParam(), getGrad())) ||
      failed(
          checkRange(*this, "lr", getLr().convertToDouble(), 0, inf, true)) ||
      failed(checkRange(*this, "momentum", getMomentum().convertToDouble(), 0,
                        inf, true)) ||
      failed(checkRange(*this, "weight_decay",
                        getWeightDecay().convertToDouble(), 0, inf, true)))
    return failure();
  if (getNesterov() && getMomentum().convertToDouble() <= 0)
    return emitOpError("nesterov requires a momentum > 0");
  return success();
}

LogicalResult AdamUpdateOp::verify() {
  const double inf = std::numeric_limits<double>::infinity();
  if (failed(verifyUpdate(*this, getParam(), getGrad())) ||
      failed(
          checkRange(*this, "lr", getLr().convertToDouble(), 0, inf, true)) ||
      failed(checkRange(*this, "beta1", getBeta1().convertToDouble(), 0, 1,
                        true)) ||
      failed(checkRange(*this, "beta2", getBeta2().convertToDouble(), 0, 1,
                        true)) ||
      failed(
          checkRange(*this, "eps", getEps().convertToDouble(), 0, inf, true)) ||
      failed(checkRange(*this, "weight_decay",
                        getWeightDecay().convertToDouble(), 0, inf, true)))
    return failure();
  return success();
}

#define GET_OP_CLASSES
#include "dialects/pipe/PipeOps.cpp.inc"

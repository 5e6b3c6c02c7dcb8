// The pipe dialect's ops: verifiers.
#include "dialects/pipe/PipeOps.h"

#include "dialects/nn/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace gpipe::pipeline;

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

//===----------------------------------------------------------------------===//
// Communication, accumulation, loss.
//===----------------------------------------------------------------------===//

/// Send and receive name a peer stage other than their own.
static LogicalResult verifyPeer(Operation *op, int64_t peer, int64_t tag) {
  if (peer < 0)
    return op->emitOpError("peer stage must be >= 0, got ") << peer;
  if (tag < 0)
    return op->emitOpError("tag must be >= 0, got ") << tag;
  if (auto func = op->getParentOfType<func::FuncOp>())
    if (getStage(func) == peer)
      return op->emitOpError("peer is the op's own stage ") << peer;
  return success();
}

LogicalResult SendOp::verify() {
  return verifyPeer(*this, getPeer(), getTag());
}
LogicalResult RecvOp::verify() {
  return verifyPeer(*this, getPeer(), getTag());
}

LogicalResult AccumulateGradOp::verify() {
  if ((getOverwrite() || getDeferred()) && !getInPlace())
    return emitOpError("'") << (getOverwrite() ? "overwrite" : "deferred")
                            << "' needs 'in_place'";
  if (getOverwrite() && getDeferred())
    return emitOpError("'overwrite' and 'deferred' exclude each other");
  if (!getInPlace())
    return success();
  auto gemm = getGrad().getDefiningOp<nn::GemmOp>();
  if (!gemm || gemm.getC() || !getGrad().hasOneUse())
    return emitOpError("'in_place' needs a gradient computed by an nn.gemm "
                       "without C whose only reader is this op");
  if (getDeferred() && (!gemm.getTransA() || gemm.getTransB() ||
                        gemm.getAlpha().convertToFloat() != 1.f))
    return emitOpError("'deferred' needs a weight-gradient GEMM A^T B "
                       "(transA, no transB, alpha 1)");
  return success();
}

LogicalResult
AccumulateGradOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return nn::verifyParameterUse(*this, getParam(), getGrad().getType(),
                                symbols);
}

LogicalResult
AccumulatedGradOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return nn::verifyParameterUse(*this, getParam(), getGrad().getType(),
                                symbols);
}

LogicalResult ReportLossOp::verify() {
  if (cast<RankedTensorType>(getLoss().getType()).getRank() != 0)
    return emitOpError("the loss must be a scalar tensor<f32>");
  return success();
}

//===----------------------------------------------------------------------===//
// RematOp
//===----------------------------------------------------------------------===//

LogicalResult RematOp::verify() {
  Block &body = getBody().front();
  if (body.getArgumentTypes() != getInputs().getTypes())
    return emitOpError("region arguments must have the types of the inputs");
  auto yield = cast<YieldOp>(body.getTerminator());
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yielded types must be the result types");
  for (Operation &op : body.without_terminator())
    if (!isa<gpipe::nn::NNDialect>(op.getDialect()) ||
        !(isPure(&op) || isa<gpipe::nn::ParamOp>(op)))
      return op.emitOpError("cannot be rematerialized: only pure nn ops and "
                            "nn.param may appear in a pipe.remat region");
  return success();
}

//===----------------------------------------------------------------------===//
// ScheduleOp
//===----------------------------------------------------------------------===//

int64_t ScheduleOp::getNumMicrobatches() {
  if (auto module = (*this)->getParentOfType<ModuleOp>())
    return gpipe::pipeline::getNumMicrobatches(module);
  return 1;
}

int64_t ScheduleOp::getNumStashSlots() {
  if (std::optional<uint64_t> slots = getStashSlots())
    return static_cast<int64_t>(*slots);
  return getNumMicrobatches();
}

int64_t ScheduleOp::maxInFlight(ArrayRef<ActionAttr> actions) {
  int64_t live = 0, most = 0;
  for (ActionAttr a : actions) {
    if (a.getPhase() == Phase::Forward)
      most = std::max(most, ++live);
    else if (a.getPhase() == Phase::Backward)
      --live;
  }
  return most;
}

LogicalResult ScheduleOp::verify() {
  if (static_cast<int64_t>(getStage()) < 0)
    return emitOpError("stage must be >= 0, got ")
           << static_cast<int64_t>(getStage());
  SmallVector<ActionAttr> actions(getActionList());
  for (auto [i, a] : llvm::enumerate(actions)) {
    // Parsed actions are verified already, ActionAttr::get's are not.
    if (failed(ActionAttr::verify(
            [&, i = i] { return emitOpError("action #") << i << ": "; },
            a.getPhase(), a.getMicrobatch(), a.getChunk())))
      return failure();
    if (a.getChunk() != 0)
      return emitOpError("action #")
             << i << " runs model chunk " << a.getChunk()
             << " but a stage has one (interleaved schedules are not "
                "supported)";
  }
  int64_t m = getNumMicrobatches();
  if (m < 1 || m > (int64_t(1) << 20))
    return emitOpError("the module's pipe.microbatches must be in [1, 2^20], "
                       "got ")
           << m;
  SmallVector<int> forwardAt(m, -1), backwardAt(m, -1), weightAt(m, -1);
  int updates = 0, weights = 0;
  for (auto [i, a] : llvm::enumerate(actions)) {
    if (a.getPhase() == Phase::Update) {
      if (i + 1 != actions.size())
        return emitOpError("the update (action #") << i << ") must be last";
      ++updates;
      continue;
    }
    int64_t mb = *a.getMicrobatch();
    if (mb >= m)
      return emitOpError("action #")
             << i << " names micro-batch " << mb << " but there are " << m
             << " (module attribute pipe.microbatches)";
    auto &at = a.getPhase() == Phase::Forward    ? forwardAt
               : a.getPhase() == Phase::Backward ? backwardAt
                                                 : weightAt;
    if (at[mb] >= 0)
      return emitOpError("action #") << i << " repeats " << a.getShortName();
    at[mb] = i;
    if (a.getPhase() == Phase::Backward && forwardAt[mb] < 0)
      return emitOpError("action #")
             << i << ": B" << mb << " comes before F" << mb;
    if (a.getPhase() == Phase::Weight) {
      ++weights;
      // W needs the operands its micro-batch's backward (I) keeps.
      if (backwardAt[mb] < 0)
        return emitOpError("action #")
               << i << ": W" << mb << " comes before B" << mb
               << " (the weight gradient needs the backward's operands)";
    }
  }
  for (int64_t k = 0; k < m; ++k)
    if (forwardAt[k] < 0 || backwardAt[k] < 0)
      return emitOpError("micro-batch ")
             << k << " lacks its "
             << (forwardAt[k] < 0 ? "forward" : "backward");
  // Either the backwards keep their weight gradients (no W), or every
  // micro-batch has its W.
  for (int64_t k = 0; weights > 0 && k < m; ++k)
    if (weightAt[k] < 0)
      return emitOpError("micro-batch ")
             << k << " lacks its weight-gradient action W" << k
             << ": a schedule with W actions needs one per micro-batch";
  if (updates != 1)
    return emitOpError("needs exactly one update action 'U'");
  if (std::optional<uint64_t> attr = getStashSlots()) {
    int64_t slots = static_cast<int64_t>(*attr);
    if (slots < 1 || slots > m)
      return emitOpError("stash_slots must be in [1, ")
             << m << "] (the micro-batches), got " << slots;
    // Micro-batch i stashes in slot i mod slots: that slot's previous
    // micro-batch must have run its backward.
    SmallVector<int64_t> holder(slots, -1);
    for (auto [i, a] : llvm::enumerate(actions)) {
      if (a.getPhase() == Phase::Update)
        continue;
      int64_t mb = *a.getMicrobatch();
      int64_t &h = holder[mb % slots];
      if (a.getPhase() == Phase::Forward) {
        if (h >= 0)
          return emitOpError("action #")
                 << i << " F" << mb << " needs stash slot " << mb % slots
                 << " of " << slots << ", still held by micro-batch " << h
                 << " (whose backward has not run)";
        h = mb;
      } else if (a.getPhase() == Phase::Backward) {
        h = -1;
      }
    }
  }
  return success();
}

LogicalResult ScheduleOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  for (auto [what, ref] :
       {std::pair<StringRef, FlatSymbolRefAttr>{"forward", getForwardAttr()},
        {"backward", getBackwardAttr()},
        {"update", getUpdateAttr()}}) {
    auto func = symbolTable.lookupNearestSymbolFrom<func::FuncOp>(*this, ref);
    if (!func)
      return emitOpError() << what << " function " << ref << " does not exist";
    if (gpipe::pipeline::getStage(func) != static_cast<int64_t>(getStage()))
      return emitOpError() << what << " function " << ref
                           << " does not belong to stage " << getStage();
  }
  return success();
}

#define GET_OP_CLASSES
#include "dialects/pipe/PipeOps.cpp.inc"

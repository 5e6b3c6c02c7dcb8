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

/// `@f` (one chunk) or `[@f0, @f1, ...]`.
static ParseResult parseChunkSymbols(OpAsmParser &parser, ArrayAttr &symbols) {
  SmallVector<Attribute> list;
  auto one = [&]() -> ParseResult {
    FlatSymbolRefAttr ref;
    if (parser.parseAttribute(ref))
      return failure();
    list.push_back(ref);
    return success();
  };
  if (succeeded(parser.parseOptionalLSquare())) {
    if (parser.parseCommaSeparatedList(one) || parser.parseRSquare())
      return failure();
  } else if (one()) {
    return failure();
  }
  symbols = parser.getBuilder().getArrayAttr(list);
  return success();
}

static void printChunkSymbols(OpAsmPrinter &printer, Operation *,
                              ArrayAttr symbols) {
  if (symbols.size() == 1) {
    printer.printAttribute(symbols[0]);
    return;
  }
  printer << '[';
  llvm::interleaveComma(symbols, printer,
                        [&](Attribute a) { printer.printAttribute(a); });
  printer << ']';
}

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

FlatSymbolRefAttr ScheduleOp::getFunction(Phase phase, int64_t chunk) {
  ArrayAttr list = phase == Phase::Forward    ? getForward()
                   : phase == Phase::Backward ? getBackward()
                   : phase == Phase::Update   ? getUpdate()
                                              : ArrayAttr();
  if (!list || chunk < 0 || chunk >= static_cast<int64_t>(list.size()))
    return {};
  return dyn_cast<FlatSymbolRefAttr>(list[chunk]);
}

SmallVector<FlatSymbolRefAttr> ScheduleOp::getActionFunctions(ActionAttr a) {
  SmallVector<FlatSymbolRefAttr> refs;
  if (a.getPhase() == Phase::Update)
    for (int64_t c = getNumChunks() - 1; c >= 0; --c)
      refs.push_back(getFunction(Phase::Update, c));
  else if (a.getPhase() == Phase::Forward || a.getPhase() == Phase::Backward)
    refs.push_back(getFunction(a.getPhase(), a.getChunk()));
  return refs;
}

func::FuncOp ScheduleOp::lookupFunction(Phase phase, int64_t chunk) {
  FlatSymbolRefAttr ref = getFunction(phase, chunk);
  return ref ? SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(*this, ref)
             : func::FuncOp();
}

FailureOr<SmallVector<std::array<func::FuncOp, 3>>>
ScheduleOp::lookupChunkFunctions(StringRef hint) {
  SmallVector<std::array<func::FuncOp, 3>> chunks(getNumChunks());
  const Phase phases[] = {Phase::Forward, Phase::Backward, Phase::Update};
  for (auto [c, fns] : llvm::enumerate(chunks))
    for (int k = 0; k < 3; ++k)
      if (!(fns[k] = lookupFunction(phases[k], c)))
        return emitError("stage ")
               << getStage() << " lacks its " << stringifyPhase(phases[k])
               << " function " << getFunction(phases[k], c) << hint;
  return chunks;
}

SmallVector<int64_t> gpipe::pipeline::stagesOfPieces(ModuleOp module) {
  SmallVector<int64_t> stageOf(getNumStages(module), -1);
  for (auto sched : module.getOps<ScheduleOp>())
    for (int64_t c = 0; c < sched.getNumChunks(); ++c)
      if (func::FuncOp f = sched.lookupFunction(Phase::Forward, c))
        if (std::optional<int64_t> v = getStage(f);
            v && *v >= 0 && *v < static_cast<int64_t>(stageOf.size()))
          stageOf[*v] = static_cast<int64_t>(sched.getStage());
  return stageOf;
}

int64_t ScheduleOp::maxInFlight(ArrayRef<ActionAttr> actions) {
  llvm::DenseMap<int64_t, int64_t> live;
  int64_t most = 0;
  for (ActionAttr a : actions) {
    if (a.getPhase() == Phase::Forward)
      most = std::max(most, ++live[a.getChunk()]);
    else if (a.getPhase() == Phase::Backward)
      --live[a.getChunk()];
  }
  return most;
}

/// "F3" for chunk 0, "F3c1" for chunk 1 (diagnostics).
static std::string actionName(MLIRContext *ctx, Phase phase, int64_t mb,
                              int64_t chunk) {
  return ActionAttr::get(ctx, phase, mb, chunk).getShortName();
}

LogicalResult ScheduleOp::verify() {
  if (static_cast<int64_t>(getStage()) < 0)
    return emitOpError("stage must be >= 0, got ")
           << static_cast<int64_t>(getStage());
  const int64_t chunks = getNumChunks();
  if (chunks < 1 || static_cast<int64_t>(getBackward().size()) != chunks ||
      static_cast<int64_t>(getUpdate().size()) != chunks)
    return emitOpError("needs one forward, one backward and one update "
                       "function per model chunk, got ")
           << getForward().size() << ", " << getBackward().size() << " and "
           << getUpdate().size();
  SmallVector<ActionAttr> actions(getActionList());
  for (auto [i, a] : llvm::enumerate(actions)) {
    // Parsed actions are verified already, ActionAttr::get's are not.
    if (failed(ActionAttr::verify(
            [&, i = i] { return emitOpError("action #") << i << ": "; },
            a.getPhase(), a.getMicrobatch(), a.getChunk())))
      return failure();
    if (a.getChunk() >= chunks)
      return emitOpError("action #")
             << i << " runs model chunk " << a.getChunk()
             << " but the stage holds " << chunks
             << " (one forward, backward and update function per chunk)";
    if (a.getPhase() == Phase::Update && a.getChunk() != 0)
      return emitOpError("action #")
             << i << ": the update runs every chunk's update; it names no "
             << "chunk";
  }
  int64_t m = getNumMicrobatches();
  if (m < 1 || m > (int64_t(1) << 20))
    return emitOpError("the module's pipe.microbatches must be in [1, 2^20], "
                       "got ")
           << m;
  // Per chunk and micro-batch: where its F, B and W are.
  const int64_t n = chunks * m;
  SmallVector<int> forwardAt(n, -1), backwardAt(n, -1), weightAt(n, -1);
  int updates = 0, weights = 0;
  for (auto [i, a] : llvm::enumerate(actions)) {
    if (a.getPhase() == Phase::Update) {
      if (i + 1 != actions.size())
        return emitOpError("the update (action #") << i << ") must be last";
      ++updates;
      continue;
    }
    if (a.getPhase() == Phase::Flush)
      continue;
    int64_t mb = *a.getMicrobatch(), c = a.getChunk();
    if (mb >= m)
      return emitOpError("action #")
             << i << " names micro-batch " << mb << " but there are " << m
             << " (module attribute pipe.microbatches)";
    auto &at = a.getPhase() == Phase::Forward    ? forwardAt
               : a.getPhase() == Phase::Backward ? backwardAt
                                                 : weightAt;
    const int64_t key = c * m + mb;
    if (at[key] >= 0)
      return emitOpError("action #") << i << " repeats " << a.getShortName();
    at[key] = i;
    if (a.getPhase() == Phase::Backward && forwardAt[key] < 0)
      return emitOpError("action #")
             << i << ": " << a.getShortName() << " comes before "
             << actionName(getContext(), Phase::Forward, mb, c);
    if (a.getPhase() == Phase::Weight) {
      ++weights;
      // W needs the operands its micro-batch's backward (I) keeps.
      if (backwardAt[key] < 0)
        return emitOpError("action #")
               << i << ": " << a.getShortName() << " comes before "
               << actionName(getContext(), Phase::Backward, mb, c)
               << " (the weight gradient needs the backward's operands)";
    }
  }
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t k = 0; k < m; ++k)
      if (forwardAt[c * m + k] < 0 || backwardAt[c * m + k] < 0)
        return emitOpError("micro-batch ")
               << k << (chunks > 1 ? " of chunk " + std::to_string(c) : "")
               << " lacks its "
               << (forwardAt[c * m + k] < 0 ? "forward" : "backward");
  // Either the backwards keep their weight gradients (no W), or every
  // micro-batch has its W.
  for (int64_t k = 0; weights > 0 && k < n; ++k)
    if (weightAt[k] < 0)
      return emitOpError("micro-batch ")
             << k % m << (chunks > 1 ? " of chunk " + std::to_string(k / m) : "")
             << " lacks its weight-gradient action "
             << actionName(getContext(), Phase::Weight, k % m, k / m)
             << ": a schedule with W actions needs one per micro-batch";
  if (updates != 1)
    return emitOpError("needs exactly one update action 'U'");
  if (std::optional<uint64_t> attr = getStashSlots()) {
    int64_t slots = static_cast<int64_t>(*attr);
    if (slots < 1 || slots > m)
      return emitOpError("stash_slots must be in [1, ")
             << m << "] (the micro-batches), got " << slots;
    // Micro-batch i of a chunk stashes in its slot i mod slots: that slot's
    // previous micro-batch must have run its backward.
    SmallVector<int64_t> holder(chunks * slots, -1);
    for (auto [i, a] : llvm::enumerate(actions)) {
      if (a.getPhase() == Phase::Update || a.getPhase() == Phase::Flush)
        continue;
      int64_t mb = *a.getMicrobatch();
      int64_t &h = holder[a.getChunk() * slots + mb % slots];
      if (a.getPhase() == Phase::Forward) {
        if (h >= 0)
          return emitOpError("action #")
                 << i << " " << a.getShortName() << " needs stash slot "
                 << mb % slots << " of " << slots
                 << (chunks > 1 ? " of chunk " + std::to_string(a.getChunk())
                                : std::string())
                 << ", still held by micro-batch " << h
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
  const int64_t chunks = getNumChunks();
  for (int64_t c = 0; c < chunks; ++c) {
    std::optional<int64_t> virtualStage;
    for (Phase phase : {Phase::Forward, Phase::Backward, Phase::Update}) {
      FlatSymbolRefAttr ref = getFunction(phase, c);
      StringRef what = stringifyPhase(phase);
      auto func =
          symbolTable.lookupNearestSymbolFrom<func::FuncOp>(*this, ref);
      if (!func)
        return emitOpError() << what << " function " << ref
                             << " does not exist";
      std::optional<int64_t> s = gpipe::pipeline::getStage(func);
      if (chunks == 1 && s != static_cast<int64_t>(getStage()))
        return emitOpError() << what << " function " << ref
                             << " does not belong to stage " << getStage();
      if (!s || (virtualStage && *virtualStage != *s))
        return emitOpError()
               << what << " function " << ref << " of chunk " << c
               << " does not belong to the virtual stage of the chunk's "
               << (virtualStage ? "forward" : "other functions") << " ("
               << (virtualStage ? std::to_string(*virtualStage)
                                : std::string("none"))
               << ")";
      virtualStage = s;
      if (std::optional<Phase> has = gpipe::pipeline::getPhase(func);
          has && *has != phase)
        return emitOpError() << what << " function " << ref << " is not a "
                             << what << " function (pipe.phase)";
    }
  }
  return success();
}

#define GET_OP_CLASSES
#include "dialects/pipe/PipeOps.cpp.inc"

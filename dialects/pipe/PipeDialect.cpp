// The pipe dialect: registration, schedule actions, and the verifier and
// accessors of its discardable attributes.
#include "dialects/pipe/PipeOps.h"

#include "dialects/nn/NNOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::pipeline;

#include "dialects/pipe/PipeDialect.cpp.inc"
#include "dialects/pipe/PipeEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/pipe/PipeAttrs.cpp.inc"

void PipeDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/pipe/PipeOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/pipe/PipeAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// ActionAttr
//===----------------------------------------------------------------------===//

Attribute ActionAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  FailureOr<Phase> phase;
  std::optional<int64_t> microbatch, chunk;
  if (parser.parseLess() || failed(phase = FieldParser<Phase>::parse(parser)))
    return {};
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc keyLoc = parser.getCurrentLocation();
    StringRef key;
    int64_t value;
    if (parser.parseKeyword(&key) || parser.parseEqual() ||
        parser.parseInteger(value))
      return {};
    std::optional<int64_t> *field = key == "mb"      ? &microbatch
                                    : key == "chunk" ? &chunk
                                                     : nullptr;
    if (!field || *field) {
      parser.emitError(keyLoc, "expected 'mb = <micro-batch>' or "
                               "'chunk = <chunk>', each at most once");
      return {};
    }
    *field = value;
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<ActionAttr>(loc, parser.getContext(), *phase,
                                       microbatch, chunk.value_or(0));
}

void ActionAttr::print(AsmPrinter &printer) const {
  printer << '<' << stringifyPhase(getPhase());
  if (std::optional<int64_t> microbatch = getMicrobatch())
    printer << ", mb = " << *microbatch;
  if (getChunk() != 0)
    printer << ", chunk = " << getChunk();
  printer << '>';
}

LogicalResult ActionAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 Phase phase, std::optional<int64_t> microbatch,
                                 int64_t chunk) {
  const bool perStep = phase == Phase::Update || phase == Phase::Flush;
  if (perStep && microbatch)
    return emitError() << "the " << stringifyPhase(phase)
                       << " action has no micro-batch";
  if (phase == Phase::Flush && chunk != 0)
    return emitError() << "the flush action has no chunk (it waits for all "
                          "of the stage's sends)";
  if (!perStep && !microbatch)
    return emitError() << "a " << stringifyPhase(phase)
                       << " action needs a micro-batch (mb = <m>)";
  if (microbatch && *microbatch < 0)
    return emitError() << "micro-batch must be >= 0, got " << *microbatch;
  if (chunk < 0)
    return emitError() << "chunk must be >= 0, got " << chunk;
  return success();
}

std::string ActionAttr::getShortName() const {
  std::string chunk =
      getChunk() != 0 ? "c" + std::to_string(getChunk()) : std::string();
  switch (getPhase()) {
  case Phase::Forward:
    return "F" + std::to_string(*getMicrobatch()) + chunk;
  case Phase::Backward:
    return "B" + std::to_string(*getMicrobatch()) + chunk;
  case Phase::Weight:
    return "W" + std::to_string(*getMicrobatch()) + chunk;
  case Phase::Flush:
    return "S";
  case Phase::Update:
    break;
  }
  return "U";
}

//===----------------------------------------------------------------------===//
// BufferAttr, MemoryPlanAttr
//===----------------------------------------------------------------------===//

LogicalResult BufferAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 BufferSpace, int64_t offset, int64_t bytes) {
  if (offset < 0 || bytes < 0)
    return emitError() << "a buffer's offset and bytes must be >= 0, got "
                       << offset << " and " << bytes;
  return success();
}

LogicalResult MemoryPlanAttr::verify(
    function_ref<InFlightDiagnostic()> emitError, StringRef target,
    StringRef precision, int64_t align, int64_t arena, int64_t parameters,
    int64_t optimizer, int64_t gradients, int64_t constants, int64_t shadows,
    int64_t clearedBegin, int64_t clearedEnd, int64_t stashBase,
    int64_t stashSlot, int64_t stashSlots, int64_t transientBase,
    int64_t transient, int64_t scratch) {
  if (target != "cpu" && target != "cuda")
    return emitError() << "memory plan: target must be \"cpu\" or \"cuda\", "
                          "got \""
                       << target << "\"";
  if (precision != "fp32" && precision != "bf16")
    return emitError() << "memory plan: precision must be \"fp32\" or "
                          "\"bf16\", got \""
                       << precision << "\"";
  if (align < 1 || (align & (align - 1)))
    return emitError() << "memory plan: align must be a power of two, got "
                       << align;
  for (int64_t v : {arena, parameters, optimizer, gradients, constants, shadows,
                    clearedBegin, stashSlot, transient, scratch})
    if (v < 0)
      return emitError() << "memory plan: sizes and offsets must be >= 0";
  if (stashSlots < 1)
    return emitError() << "memory plan: stash_slots must be >= 1, got "
                       << stashSlots;
  for (int64_t v : {stashBase, stashSlot, transientBase})
    if (v % align)
      return emitError() << "memory plan: stash_base, stash_slot and "
                            "transient_base must be multiples of align ("
                         << align << ")";
  if (!(clearedBegin <= clearedEnd && clearedEnd <= stashBase))
    return emitError() << "memory plan: the cleared accumulators ["
                       << clearedBegin << ", " << clearedEnd
                       << ") must lie before the stash (" << stashBase << ")";
  if (stashBase + stashSlot * stashSlots > transientBase)
    return emitError() << "memory plan: " << stashSlots << " stash slots of "
                       << stashSlot << " bytes from " << stashBase
                       << " overlap the temporaries at " << transientBase;
  if (transientBase + transient > arena)
    return emitError() << "memory plan: the temporaries [" << transientBase
                       << ", " << transientBase + transient
                       << ") end past the arena (" << arena << " bytes)";
  if (parameters + optimizer + gradients + constants + shadows > stashBase)
    return emitError() << "memory plan: the long-lived buffers ("
                       << parameters + optimizer + gradients + constants +
                              shadows
                       << " bytes) do not fit before the stash (" << stashBase
                       << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// Discardable attributes: verification
//===----------------------------------------------------------------------===//

LogicalResult PipeDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  StringAttr name = attr.getName();
  Attribute value = attr.getValue();
  auto expected = [&](StringRef what) {
    return op->emitOpError() << "attribute '" << name.getValue() << "' must be "
                             << what << ", got " << value;
  };
  auto checkI64 = [&](int64_t min) -> LogicalResult {
    auto i = dyn_cast<IntegerAttr>(value);
    if (i && i.getType().isSignlessInteger(64) && i.getInt() >= min)
      return success();
    return expected(min == 0 ? "an i64 >= 0" : "an i64 >= 1");
  };
  auto string = dyn_cast<StringAttr>(value);
  if (name == getStageAttrHelper().getName())
    return checkI64(0);
  if (name == getFusedAttrHelper().getName()) {
    if (isa<FunctionOpInterface>(op) || op->getNumResults() != 1)
      return op->emitOpError()
             << "attribute '" << name.getValue()
             << "' belongs on an op with one result (a fusion group member)";
    return checkI64(0);
  }
  if (name == getStagesAttrHelper().getName() ||
      name == getMicrobatchesAttrHelper().getName() ||
      name == getBatchSizeAttrHelper().getName())
    return checkI64(1);
  if (name == getPhaseAttrHelper().getName()) {
    if (!isa<FunctionOpInterface>(op))
      return op->emitOpError()
             << "attribute '" << name.getValue() << "' belongs on a function";
    if (!string || !symbolizePhase(string.getValue()) ||
        *symbolizePhase(string.getValue()) == Phase::Weight ||
        *symbolizePhase(string.getValue()) == Phase::Flush)
      return expected("\"forward\", \"backward\" or \"update\"");
    return success();
  }
  if (name == getSendsAttrHelper().getName()) {
    if (!string || !symbolizeSends(string.getValue()))
      return expected("\"blocking\" or \"buffered\"");
    return success();
  }
  if (name == getRematAttrHelper().getName()) {
    if (!string || string.getValue() != "stage")
      return expected("\"stage\"");
    return success();
  }
  if (name == getScheduleAttrHelper().getName()) {
    if (!string || string.getValue().empty())
      return expected("the name of a schedule");
    return success();
  }
  // Memory planning.
  auto onOp = [&](bool ok, StringRef where) -> LogicalResult {
    if (ok)
      return success();
    return op->emitOpError()
           << "attribute '" << name.getValue() << "' belongs on " << where;
  };
  auto arenaBuffer = [&](Attribute a) {
    auto b = dyn_cast_or_null<BufferAttr>(a);
    return b && b.getSpace() == BufferSpace::Arena;
  };
  auto arenaBuffers = [&](size_t count) {
    auto array = dyn_cast<ArrayAttr>(value);
    return array && (count == 0 || array.size() == count) &&
           llvm::all_of(array, arenaBuffer);
  };
  if (name == getBf16ShadowAttrHelper().getName()) {
    if (failed(onOp(isa<nn::ParamOp>(op), "an nn.param")))
      return failure();
    return isa<UnitAttr>(value) ? success() : expected("a unit attribute");
  }
  if (name == getBufferAttrHelper().getName()) {
    if (failed(onOp(!isa<FunctionOpInterface>(op) && op->getNumResults() >= 1,
                    "an op with results, or a function argument")))
      return failure();
    // An op with several results holds one buffer per result.
    if (op->getNumResults() > 1) {
      auto array = dyn_cast<ArrayAttr>(value);
      return array && array.size() == op->getNumResults() &&
                     llvm::all_of(array, llvm::IsaPred<BufferAttr>)
                 ? success()
                 : expected("an array of one #pipe.buffer per result (" +
                            std::to_string(op->getNumResults()) + ")");
    }
    return isa<BufferAttr>(value) ? success() : expected("a #pipe.buffer");
  }
  if (name == getShadowAttrHelper().getName()) {
    if (failed(onOp(isa<nn::ParamOp>(op), "an nn.param")))
      return failure();
    return arenaBuffer(value) ? success() : expected("an arena #pipe.buffer");
  }
  if (name == getAccumulatorAttrHelper().getName()) {
    if (failed(onOp(isa<AccumulateGradOp>(op), "a pipe.accumulate_grad")))
      return failure();
    return arenaBuffer(value) ? success() : expected("an arena #pipe.buffer");
  }
  if (name == getHandoffAttrHelper().getName()) {
    if (failed(onOp(isa<SendOp, RecvOp>(op), "a pipe.send or pipe.recv")))
      return failure();
    return arenaBuffer(value) ? success() : expected("an arena #pipe.buffer");
  }
  if (name == getStateAttrHelper().getName()) {
    if (failed(onOp(isa<SGDUpdateOp, AdamUpdateOp, nn::UpdateRunningStatsOp,
                        ScheduleOp>(op),
                    "a pipe.sgd_update, pipe.adam_update, "
                    "nn.update_running_stats or (a replica's share of the "
                    "optimizer state) pipe.schedule")))
      return failure();
    return arenaBuffers(0) ? success()
                           : expected("an array of arena #pipe.buffer");
  }
  if (name == getDeferredOperandsAttrHelper().getName()) {
    if (failed(onOp(isa<AccumulateGradOp>(op), "a pipe.accumulate_grad")))
      return failure();
    return arenaBuffers(2) ? success()
                           : expected("two arena #pipe.buffer (G, then X)");
  }
  if (name == getMemoryAttrHelper().getName()) {
    if (failed(onOp(isa<ScheduleOp>(op), "a pipe.schedule")))
      return failure();
    return isa<MemoryPlanAttr>(value) ? success()
                                      : expected("a #pipe.memory_plan");
  }
  return op->emitOpError() << "has '" << name.getValue()
                           << "', which is not an attribute of the pipe "
                              "dialect";
}

/// The pipe dialect's attributes all belong on operations.
static LogicalResult notAnOperationAttribute(Operation *op, StringRef where,
                                             unsigned index,
                                             NamedAttribute attr) {
  return op->emitOpError() << where << " #" << index << " has '"
                           << attr.getName().getValue()
                           << "': pipe attributes belong on operations";
}

LogicalResult PipeDialect::verifyRegionArgAttribute(Operation *op, unsigned,
                                                    unsigned argIndex,
                                                    NamedAttribute attr) {
  // A function argument's buffer (gpipe-plan-memory).
  if (attr.getName() == getBufferAttrHelper().getName() &&
      isa<FunctionOpInterface>(op)) {
    if (isa<BufferAttr>(attr.getValue()))
      return success();
    return op->emitOpError()
           << "argument #" << argIndex << ": attribute 'pipe.buffer' must be "
           << "a #pipe.buffer, got " << attr.getValue();
  }
  return notAnOperationAttribute(op, "argument", argIndex, attr);
}

LogicalResult PipeDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                       unsigned resultIndex,
                                                       NamedAttribute attr) {
  return notAnOperationAttribute(op, "result", resultIndex, attr);
}

//===----------------------------------------------------------------------===//
// Discardable attributes: accessors, over the helpers ODS generates
//===----------------------------------------------------------------------===//

template <typename Helper> static std::optional<int64_t> getInt(Operation *op) {
  if (IntegerAttr attr = Helper(op->getContext()).getAttr(op))
    return attr.getInt();
  return std::nullopt;
}

template <typename Helper> static void setInt(Operation *op, int64_t value) {
  Helper(op->getContext())
      .setAttr(op, Builder(op->getContext()).getI64IntegerAttr(value));
}

template <typename Helper>
static void setString(Operation *op, StringRef value) {
  Helper(op->getContext())
      .setAttr(op, StringAttr::get(op->getContext(), value));
}

template <typename Helper> static StringAttr getString(Operation *op) {
  return Helper(op->getContext()).getAttr(op);
}

std::optional<int64_t> gpipe::pipeline::getStage(Operation *op) {
  return getInt<PipeDialect::StageAttrHelper>(op);
}
void gpipe::pipeline::setStage(Operation *op, int64_t stage) {
  setInt<PipeDialect::StageAttrHelper>(op, stage);
}
void gpipe::pipeline::removeStage(Operation *op) {
  op->removeAttr(PipeDialect::StageAttrHelper::getNameStr());
}

std::optional<Phase> gpipe::pipeline::getPhase(Operation *op) {
  if (StringAttr phase = getString<PipeDialect::PhaseAttrHelper>(op))
    return symbolizePhase(phase.getValue());
  return std::nullopt;
}
void gpipe::pipeline::setPhase(Operation *op, Phase phase) {
  setString<PipeDialect::PhaseAttrHelper>(op, stringifyPhase(phase));
}

int64_t gpipe::pipeline::getNumStages(Operation *op) {
  return getInt<PipeDialect::StagesAttrHelper>(op).value_or(1);
}
void gpipe::pipeline::setNumStages(Operation *op, int64_t stages) {
  setInt<PipeDialect::StagesAttrHelper>(op, stages);
}

int64_t gpipe::pipeline::getNumMicrobatches(Operation *op) {
  return getInt<PipeDialect::MicrobatchesAttrHelper>(op).value_or(1);
}
void gpipe::pipeline::setNumMicrobatches(Operation *op, int64_t microbatches) {
  setInt<PipeDialect::MicrobatchesAttrHelper>(op, microbatches);
}

std::optional<int64_t> gpipe::pipeline::getBatchSize(Operation *op) {
  return getInt<PipeDialect::BatchSizeAttrHelper>(op);
}
void gpipe::pipeline::setBatchSize(Operation *op, int64_t batchSize) {
  setInt<PipeDialect::BatchSizeAttrHelper>(op, batchSize);
}

void gpipe::pipeline::setRemat(Operation *op, StringRef mode) {
  setString<PipeDialect::RematAttrHelper>(op, mode);
}

void gpipe::pipeline::setScheduleName(Operation *op, StringRef name) {
  setString<PipeDialect::ScheduleAttrHelper>(op, name);
}

Sends gpipe::pipeline::getSends(Operation *op) {
  if (StringAttr sends = getString<PipeDialect::SendsAttrHelper>(op))
    return symbolizeSends(sends.getValue()).value_or(Sends::Blocking);
  return Sends::Blocking;
}
void gpipe::pipeline::setSends(Operation *op, Sends sends) {
  setString<PipeDialect::SendsAttrHelper>(op, stringifySends(sends));
}

std::optional<int64_t> gpipe::pipeline::getFusionGroup(Operation *op) {
  return getInt<PipeDialect::FusedAttrHelper>(op);
}
void gpipe::pipeline::setFusionGroup(Operation *op, int64_t group) {
  setInt<PipeDialect::FusedAttrHelper>(op, group);
}

FusionUnits gpipe::pipeline::getFusionUnits(Block &block) {
  FusionUnits f;
  llvm::DenseMap<int64_t, int64_t> unitOfGroup;
  for (Operation &op : block) {
    if (std::optional<int64_t> group = getFusionGroup(&op)) {
      auto [it, fresh] = unitOfGroup.try_emplace(*group, f.units.size());
      if (!fresh) {
        f.units[it->second].push_back(&op);
        f.unitOf[&op] = it->second;
        continue;
      }
    }
    f.units.push_back({&op});
    f.unitOf[&op] = f.units.size() - 1;
  }
  for (auto &unit : f.units) {
    if (unit.size() < 2)
      continue;
    for (Operation *op : unit)
      for (Value r : op->getResults())
        if (!r.use_empty() && llvm::all_of(r.getUsers(), [&](Operation *user) {
              return f.unitOf.lookup(user) == f.unitOf.lookup(op);
            }))
          f.internal.insert(r);
  }
  return f;
}

bool gpipe::pipeline::hasBf16Shadow(Operation *op) {
  return PipeDialect::Bf16ShadowAttrHelper(op->getContext()).isAttrPresent(op);
}
void gpipe::pipeline::setBf16Shadow(Operation *op) {
  PipeDialect::Bf16ShadowAttrHelper(op->getContext())
      .setAttr(op, UnitAttr::get(op->getContext()));
}

BufferAttr gpipe::pipeline::getBuffer(Value value) {
  StringRef name = PipeDialect::BufferAttrHelper::getNameStr();
  if (Operation *def = value.getDefiningOp()) {
    if (def->getNumResults() == 1)
      return def->getAttrOfType<BufferAttr>(name);
    // One buffer per result (unset entries are units while planning).
    auto array = def->getAttrOfType<ArrayAttr>(name);
    unsigned k = cast<OpResult>(value).getResultNumber();
    return array && k < array.size() ? dyn_cast<BufferAttr>(array[k])
                                     : BufferAttr();
  }
  auto arg = cast<BlockArgument>(value);
  auto func = dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp());
  if (!func || arg.getOwner() != &func.getFunctionBody().front())
    return {};
  return func.getArgAttrOfType<BufferAttr>(arg.getArgNumber(), name);
}
void gpipe::pipeline::setBuffer(Value value, BufferAttr buffer) {
  StringRef name = PipeDialect::BufferAttrHelper::getNameStr();
  if (Operation *def = value.getDefiningOp()) {
    if (def->getNumResults() == 1)
      return def->setAttr(name, buffer);
    SmallVector<Attribute> entries(def->getNumResults(),
                                   UnitAttr::get(def->getContext()));
    if (auto array = def->getAttrOfType<ArrayAttr>(name);
        array && array.size() == entries.size())
      llvm::copy(array, entries.begin());
    entries[cast<OpResult>(value).getResultNumber()] = buffer;
    return def->setAttr(name, ArrayAttr::get(def->getContext(), entries));
  }
  auto arg = cast<BlockArgument>(value);
  cast<FunctionOpInterface>(arg.getOwner()->getParentOp())
      .setArgAttr(arg.getArgNumber(), name, buffer);
}

template <typename Helper> static BufferAttr getBufferAttr(Operation *op) {
  return dyn_cast_or_null<BufferAttr>(Helper(op->getContext()).getAttr(op));
}
template <typename Helper>
static SmallVector<BufferAttr> getBufferArray(Operation *op) {
  SmallVector<BufferAttr> buffers;
  if (ArrayAttr array = Helper(op->getContext()).getAttr(op))
    for (Attribute a : array)
      if (auto b = dyn_cast<BufferAttr>(a))
        buffers.push_back(b);
  return buffers;
}
template <typename Helper>
static void setBufferArray(Operation *op, ArrayRef<BufferAttr> buffers) {
  SmallVector<Attribute> attrs(buffers.begin(), buffers.end());
  Helper(op->getContext()).setAttr(op, ArrayAttr::get(op->getContext(), attrs));
}

BufferAttr gpipe::pipeline::getShadow(Operation *op) {
  return getBufferAttr<PipeDialect::ShadowAttrHelper>(op);
}
void gpipe::pipeline::setShadow(Operation *op, BufferAttr buffer) {
  PipeDialect::ShadowAttrHelper(op->getContext()).setAttr(op, buffer);
}

BufferAttr gpipe::pipeline::getAccumulator(Operation *op) {
  return getBufferAttr<PipeDialect::AccumulatorAttrHelper>(op);
}
void gpipe::pipeline::setAccumulator(Operation *op, BufferAttr buffer) {
  PipeDialect::AccumulatorAttrHelper(op->getContext()).setAttr(op, buffer);
}

BufferAttr gpipe::pipeline::getHandoff(Operation *op) {
  return getBufferAttr<PipeDialect::HandoffAttrHelper>(op);
}
void gpipe::pipeline::setHandoff(Operation *op, BufferAttr buffer) {
  PipeDialect::HandoffAttrHelper(op->getContext()).setAttr(op, buffer);
}

SmallVector<BufferAttr> gpipe::pipeline::getState(Operation *op) {
  return getBufferArray<PipeDialect::StateAttrHelper>(op);
}
void gpipe::pipeline::setState(Operation *op, ArrayRef<BufferAttr> buffers) {
  setBufferArray<PipeDialect::StateAttrHelper>(op, buffers);
}

SmallVector<BufferAttr> gpipe::pipeline::getDeferredOperands(Operation *op) {
  return getBufferArray<PipeDialect::DeferredOperandsAttrHelper>(op);
}
void gpipe::pipeline::setDeferredOperands(Operation *op,
                                          ArrayRef<BufferAttr> buffers) {
  setBufferArray<PipeDialect::DeferredOperandsAttrHelper>(op, buffers);
}

MemoryPlanAttr gpipe::pipeline::getMemoryPlan(Operation *op) {
  return dyn_cast_or_null<MemoryPlanAttr>(
      PipeDialect::MemoryAttrHelper(op->getContext()).getAttr(op));
}
void gpipe::pipeline::setMemoryPlan(Operation *op, MemoryPlanAttr plan) {
  PipeDialect::MemoryAttrHelper(op->getContext()).setAttr(op, plan);
}

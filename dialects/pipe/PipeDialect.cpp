// The pipe dialect: registration, schedule actions, and the verifier and
// accessors of its discardable attributes.
#include "dialects/pipe/PipeOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
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
  if (phase == Phase::Update && microbatch)
    return emitError() << "the update action has no micro-batch";
  if (phase != Phase::Update && !microbatch)
    return emitError() << "a " << stringifyPhase(phase)
                       << " action needs a micro-batch (mb = <m>)";
  if (microbatch && *microbatch < 0)
    return emitError() << "micro-batch must be >= 0, got " << *microbatch;
  if (chunk < 0)
    return emitError() << "chunk must be >= 0, got " << chunk;
  return success();
}

std::string ActionAttr::getShortName() const {
  switch (getPhase()) {
  case Phase::Forward:
    return "F" + std::to_string(*getMicrobatch());
  case Phase::Backward:
    return "B" + std::to_string(*getMicrobatch());
  case Phase::Update:
    break;
  }
  return "U";
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
    if (!string || !symbolizePhase(string.getValue()))
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

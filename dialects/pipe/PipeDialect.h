// The pipe dialect, its attributes, and typed access to the discardable
// attributes the passes put on ops, functions and the module.
#ifndef GPIPE_DIALECTS_PIPE_PIPEDIALECT_H
#define GPIPE_DIALECTS_PIPE_PIPEDIALECT_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/Block.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <vector>

#include "dialects/pipe/PipeDialect.h.inc"
#include "dialects/pipe/PipeEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/pipe/PipeAttrs.h.inc"

namespace gpipe {
namespace pipeline {

// The discardable attributes declared in PipeDialect.td (`discardableAttrs`)
// and checked by PipeDialect::verifyOperationAttribute. Getters return
// nullopt (or the documented default) when the attribute is absent.

/// `pipe.stage`: the stage an op of the training step, or an outlined
/// function, runs on.
std::optional<int64_t> getStage(mlir::Operation *op);
void setStage(mlir::Operation *op, int64_t stage);
void removeStage(mlir::Operation *op);

/// `pipe.phase`: which of its stage's functions an outlined function is.
std::optional<Phase> getPhase(mlir::Operation *op);
void setPhase(mlir::Operation *op, Phase phase);

/// `pipe.stages` (K) and `pipe.microbatches` (M) of the training step, then
/// of the module; 1 when absent.
int64_t getNumStages(mlir::Operation *op);
void setNumStages(mlir::Operation *op, int64_t stages);
int64_t getNumMicrobatches(mlir::Operation *op);
void setNumMicrobatches(mlir::Operation *op, int64_t microbatches);

/// `pipe.batch_size`: the mini-batch size B of the training step, then of
/// the module.
std::optional<int64_t> getBatchSize(mlir::Operation *op);
void setBatchSize(mlir::Operation *op, int64_t batchSize);

/// `pipe.remat`: the module's rematerialization mode ("stage").
void setRemat(mlir::Operation *op, llvm::StringRef mode);

/// `pipe.schedule`: the name of the module's registered schedule.
void setScheduleName(mlir::Operation *op, llvm::StringRef name);

/// `pipe.sends`: what the module's schedule needs of the runtime's sends;
/// Blocking when absent.
Sends getSends(mlir::Operation *op);
void setSends(mlir::Operation *op, Sends sends);

/// `pipe.fused`: the fusion group (numbered per function) of an op that code
/// generation emits together with the others of its group
/// (gpipe-fuse-elementwise).
std::optional<int64_t> getFusionGroup(mlir::Operation *op);
void setFusionGroup(mlir::Operation *op, int64_t group);

/// The units code generation emits a function's block in: each fusion group
/// (pipe.fused) is one unit, in the place of its first op; every other op is
/// a unit of its own.
struct FusionUnits {
  std::vector<llvm::SmallVector<mlir::Operation *>> units;
  llvm::DenseMap<mlir::Operation *, int64_t> unitOf;
  /// Results of a unit of several ops that only that unit reads: they stay
  /// in registers and get no buffer.
  llvm::DenseSet<mlir::Value> internal;
};
FusionUnits getFusionUnits(mlir::Block &block);

/// `pipe.bf16_shadow`: the parameter of this nn.param keeps a bf16 copy for
/// the GEMMs that read it (gpipe-bf16-shadows).
bool hasBf16Shadow(mlir::Operation *op);
void setBf16Shadow(mlir::Operation *op);

/// `pipe.buffer` (gpipe-plan-memory): where a value lives, on the op that
/// defines it or on the function argument; null when the value has none (a
/// view, a fusion group's internal value, a CPU constant).
BufferAttr getBuffer(mlir::Value value);
void setBuffer(mlir::Value value, BufferAttr buffer);

/// `pipe.shadow` on an nn.param: where its bf16 copy lives; null if none.
BufferAttr getShadow(mlir::Operation *op);
void setShadow(mlir::Operation *op, BufferAttr buffer);

/// `pipe.accumulator` on a pipe.accumulate_grad: its parameter's
/// accumulator.
BufferAttr getAccumulator(mlir::Operation *op);
void setAccumulator(mlir::Operation *op, BufferAttr buffer);

/// `pipe.handoff` on a pipe.send or pipe.recv between two model chunks of
/// one stage: the arena buffer the value goes through (a slot of the
/// value's bytes per micro-batch), or null for a transfer between stages.
BufferAttr getHandoff(mlir::Operation *op);
void setHandoff(mlir::Operation *op, BufferAttr buffer);

/// `pipe.state` on an optimizer update: its state buffers, in the order the
/// update reads them (SGD: the momentum; Adam: the two moments).
llvm::SmallVector<BufferAttr> getState(mlir::Operation *op);
void setState(mlir::Operation *op, llvm::ArrayRef<BufferAttr> buffers);

/// `pipe.deferred_operands` on a deferred pipe.accumulate_grad: the GEMM's
/// operands G and X for all micro-batches; empty when absent.
llvm::SmallVector<BufferAttr> getDeferredOperands(mlir::Operation *op);
void setDeferredOperands(mlir::Operation *op,
                         llvm::ArrayRef<BufferAttr> buffers);

/// `pipe.memory` on a pipe.schedule: its stage's arena layout; null when
/// absent.
MemoryPlanAttr getMemoryPlan(mlir::Operation *op);
void setMemoryPlan(mlir::Operation *op, MemoryPlanAttr plan);

} // namespace pipeline
} // namespace gpipe

#endif

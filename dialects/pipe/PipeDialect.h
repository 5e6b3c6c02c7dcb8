// The pipe dialect, its attributes, and typed access to the discardable
// attributes the passes put on ops, functions and the module.
#ifndef GPIPE_DIALECTS_PIPE_PIPEDIALECT_H
#define GPIPE_DIALECTS_PIPE_PIPEDIALECT_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Operation.h"

#include <optional>

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

} // namespace pipeline
} // namespace gpipe

#endif

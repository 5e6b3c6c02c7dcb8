// The pipe dialect: its definition and its discardable attributes.
#ifndef GPIPE_PIPE_DIALECT
#define GPIPE_PIPE_DIALECT

include "mlir/IR/OpBase.td"

def Pipe_Dialect : Dialect {
  let name = "pipe";
  // Not `pipe`: that would collide with POSIX pipe().
  let cppNamespace = "::gpipe::pipeline";
  let summary = "Pipeline structure of a training step.";
  let description = [{
    Ops that say how a training step is executed rather than what it computes:
    the in-place optimizer update of a parameter, point-to-point transfers
    between pipeline stages, gradient accumulation over micro-batches, the
    loss report, rematerialization regions, and each stage's schedule.

    After `gpipe-outline-stages`, stage S is three functions carrying
    `pipe.stage = S` and `pipe.phase = "forward" | "backward" | "update"`: the
    forward function runs once per micro-batch and returns the values its
    backward needs (the stash, kept for every in-flight micro-batch); the
    backward function takes them as arguments; the update function runs once
    per mini-batch.
  }];
  let useDefaultAttributePrinterParser = 1;

  // The attributes the passes put on ops, functions and the module
  // (docs/passes.md, "Attributes the passes use"). Read and written through
  // the accessors of PipeDialect.h; verified by verifyOperationAttribute.
  let discardableAttrs = (ins
    // The stage an op of the training step, or an outlined function, runs on.
    "::mlir::IntegerAttr":$stage,
    // Which of its stage's functions an outlined function is (a Phase).
    "::mlir::StringAttr":$phase,
    // K, M and the mini-batch size, on the training step, then the module.
    "::mlir::IntegerAttr":$stages,
    "::mlir::IntegerAttr":$microbatches,
    "::mlir::IntegerAttr":$batch_size,
    // The module's rematerialization mode (gpipe-remat).
    "::mlir::StringAttr":$remat,
    // The module's registered schedule and what its sends need (a Sends).
    "::mlir::StringAttr":$schedule,
    "::mlir::StringAttr":$sends,
    // Lowering: the fusion group of an op (gpipe-fuse-elementwise).
    "::mlir::IntegerAttr":$fused,
    // Lowering: a parameter a bf16 GEMM reads keeps a bf16 copy (on its
    // nn.param ops; gpipe-bf16-shadows).
    "::mlir::UnitAttr":$bf16_shadow,
    // Memory planning (gpipe-plan-memory). Declared as Attribute: the
    // accessors cast to BufferAttr and MemoryPlanAttr (declared after the
    // dialect).
    // Where an op's result, or a function argument, lives (a BufferAttr).
    "::mlir::Attribute":$buffer,
    // Where a parameter's bf16 copy lives, on its nn.param (a BufferAttr).
    "::mlir::Attribute":$shadow,
    // The accumulator of a pipe.accumulate_grad's parameter (a BufferAttr).
    "::mlir::Attribute":$accumulator,
    // An optimizer update's state buffers (BufferAttrs); on a pipe.schedule,
    // the state slots of the replica's share (--shard-optimizer).
    "::mlir::ArrayAttr":$state,
    // A deferred weight-gradient GEMM's operands for all micro-batches, on
    // its pipe.accumulate_grad (two BufferAttrs: G, then X).
    "::mlir::ArrayAttr":$deferred_operands,
    // A transfer between two model chunks of one stage (interleaved
    // schedules), on its pipe.send and pipe.recv: the arena buffer it goes
    // through, one slot per micro-batch (a BufferAttr).
    "::mlir::Attribute":$handoff,
    // A stage's arena layout, on its pipe.schedule (a MemoryPlanAttr).
    "::mlir::Attribute":$memory
  );
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
}

#endif // GPIPE_PIPE_DIALECT

// Lowers one pipeline stage (its forward, backward and update functions and
// its schedule, as built by the gpipe passes) to C++ calling the runtime.
#ifndef GPIPE_COMPILER_CPPEMITTER_H
#define GPIPE_COMPILER_CPPEMITTER_H

#include "mlir/IR/BuiltinOps.h"

#include <array>
#include <string>
#include <vector>

namespace gpipe {

/// Where one parameter lives and which file holds its initial value.
struct EmittedParam {
  std::string name;
  std::string file; // inside the weights directory
  std::vector<int64_t> shape;
};

/// A graph input the stage reads (one micro-batch at a time).
struct EmittedInput {
  std::string name;
  bool isFloat = true;
  std::vector<int64_t> shape; // micro-batch shape
};

/// One tensor crossing the stage's boundary.
struct EmittedTransfer {
  bool isSend = false;
  std::string phase; // "forward" or "backward"
  int64_t peer = 0, tag = 0, bytes = 0;
  std::string type;     // "tensor<8x64xf32>"
  bool perStep = false; // once per step (pipe.send/recv `per_step`)
};

/// The static memory plan of a stage, all in bytes.
struct MemoryPlan {
  int64_t arenaBytes = 0;     // everything the stage allocates, once
  int64_t parameterBytes = 0; // parameters (each 64-byte aligned, as all)
  int64_t optimizerBytes = 0; // optimizer state (momentum, Adam moments)
  int64_t gradientBytes = 0;  // gradient accumulators
  int64_t stashBytesPerMicrobatch = 0; // kept from forward to backward
  int64_t stashBytes = 0;              // that, for every in-flight micro-batch
  int64_t stashSlots = 0;     // in-flight micro-batches: the schedule's most
  int64_t inputBytes = 0;     // one micro-batch of the graph inputs read
  int64_t transientBytes = 0; // peak of the temporaries of any one action
  int64_t constantBytes = 0;  // constants compiled into the executable
  // CUDA: bf16 copies of the parameters that GEMMs read, and the constants
  // (uploaded once), inside the arena.
  int64_t shadowBytes = 0;
  int64_t arenaConstantBytes = 0;
  // Interleaved schedules: the arena buffers of the transfers between two
  // chunks of the stage (a slot per micro-batch).
  int64_t handoffBytes = 0;
  // CUDA, outside the arena: the kernels' scratch (bf16 GEMM operands) and
  // the double-buffered staging of the tensors this stage sends.
  int64_t scratchBytes = 0;
  int64_t sendStagingBytes = 0;
};

/// What the stage programs run on, and how they compute.
struct EmitOptions {
  bool cuda = false;      // CUDA C++ on the CUDA runtime, else C++ on the CPU
  bool bf16 = false;      // GEMMs on bf16 operands (CUDA; fp32 elsewhere)
  bool allowTf32 = false; // fp32 GEMMs may round their inputs to TF32 (CUDA)
  bool profile = false;   // time every unit of generated code (--profile)
  // --data-parallel: replicas of the pipeline; > 1: the update averages the
  // gradient accumulators across them (gp_reduce_gradients) first.
  int64_t dataParallel = 1;
  // --shard-optimizer: each replica updates its 1/D share of the gradient
  // accumulators' elements (pipe.shard_state), then gathers the parameters.
  bool shardOptimizer = false;
  // --costs: the measured cost table the stage's step time is predicted
  // from (EmittedStage::predictedSeconds), or null.
  const struct CostTable *costs = nullptr;
};

struct EmittedStage {
  std::string source; // a complete C++17 (CPU) or CUDA C++ translation unit
  std::vector<EmittedParam> params;
  std::vector<EmittedInput> inputs;
  std::vector<EmittedTransfer> transfers;
  std::vector<std::string> schedule; // "F0", ..., "U"
  bool bufferedSends = false;        // the schedule needs buffered sends
  // It computes a GEMM, attention or a convolution: its process holds the
  // math libraries' memory (code, JIT kernels, scratch).
  bool callsMathLibrary = false;
  // With EmitOptions::costs: the math libraries' memory predicted from the
  // table by the stage's ops (CostTable::libraryBySignature), or -1.
  int64_t predictedLibraryBytes = -1;
  bool hasLoss = false;
  MemoryPlan memory;
  int64_t forwardFlops = 0, backwardFlops = 0, updateFlops = 0; // per action
  // Of backwardFlops: the weight-gradient GEMMs gpipe-split-weight-grad
  // deferred (run by the update, or by W actions).
  int64_t weightFlops = 0;
  int64_t flops = 0; // one training step (all micro-batches)
  // Per model chunk (one entry per chunk; forwardFlops etc. are their sums):
  // one forward, backward and W action's FLOPs.
  std::vector<int64_t> chunkForwardFlops, chunkBackwardFlops, chunkWeightFlops;
  std::vector<int64_t> virtualStages; // each chunk's piece of the model
  // With EmitOptions::costs: the predicted seconds per step of the stage's
  // forwards, backwards, W actions (or deferred GEMMs) and update, and the
  // share of them from the analytic model (ops the table lacks).
  std::vector<double> predictedSeconds;
  double predictedAnalyticShare = 0;
  // The same per model chunk (their sums are predictedSeconds).
  std::vector<std::array<double, 4>> predictedChunkSeconds;
  // Set by the driver (driver::predictedPeakBytes): the process's predicted
  // peak resident memory on the CPU target; 0 when not predicted.
  int64_t predictedPeakBytes = 0;
  // CUDA with a cost table measured on CUDA: the stage's predicted GPU
  // memory (the arena and the runtime's own, the table's runtime_bytes).
  int64_t predictedDeviceBytes = 0;
  // --data-parallel: the gradient bytes each update averages across the
  // replicas (gp_reduce_gradients); 0 with one replica.
  int64_t allReduceBytes = 0;
};

/// Emits the program of `stage` of the outlined, scheduled and lowered
/// (gpipe-lower: no pipe.remat left) `module`; `buildId` identifies the
/// compile (also written to pipeline.json). Reports unsupported ops as
/// located errors and returns failure. Weight file names are made unique
/// across the calls sharing `takenWeightFiles`.
mlir::FailureOr<EmittedStage> emitStageCpp(
    mlir::ModuleOp module, int64_t stage, const std::string &programName,
    std::vector<std::string> &takenWeightFiles, const std::string &buildId = "",
    const EmitOptions &options = EmitOptions());

/// Maps a parameter name to a portable file name ("fc1.weight" ->
/// "fc1.weight.npy", "a/b:c" -> "a_b_c.npy"), unique within `taken`.
std::string weightFileName(const std::string &name,
                           std::vector<std::string> &taken);

} // namespace gpipe

#endif

// --auto: the pipeline configuration (micro-batches, schedule, chunks per
// stage, remat) with the shortest predicted step whose every stage fits the
// memory budget, from plans of every candidate.
#ifndef GPIPE_COMPILER_DRIVER_AUTO_H
#define GPIPE_COMPILER_DRIVER_AUTO_H

#include "compiler/CppEmitter.h"
#include "compiler/driver/Driver.h"
#include "gpipe/manifest.h"
#include "passes/CostTable.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <string>
#include <vector>

namespace gpipe::driver {

/// Without a cost table's runtime_bytes: the resident memory a stage has
/// besides its arena (code, libraries, MPI, data pages, GEMM buffers), as
/// measured on the CPU target (20-40 MiB on the bench models).
constexpr int64_t kDefaultRuntimeBytes = 40ll << 20;

/// The runtime's own memory per stage that plans are checked with: the
/// cost table's largest runtime_bytes, else kDefaultRuntimeBytes.
inline int64_t runtimeBytesOf(const CostTable &costs) {
  // A CUDA table's runtime_bytes are GPU memory, not a process's.
  return costs.runtimeBytes > 0 && !costs.cuda ? costs.runtimeBytes
                                               : kDefaultRuntimeBytes;
}

/// What `st` brings to its process's runtime memory (CostTable::StageTraits):
/// the largest piece of a weight file it maps while loading, and whether it
/// calls the math libraries.
inline CostTable::StageTraits stageTraits(const EmittedStage &st) {
  CostTable::StageTraits traits;
  traits.callsMathLibrary = st.callsMathLibrary;
  traits.libraryBytes = st.predictedLibraryBytes;
  for (const EmittedParam &p : st.params) {
    int64_t bytes = 4; // weight files are float32
    for (int64_t d : p.shape)
      bytes *= d;
    traits.loadBytes = std::max(
        traits.loadBytes, std::min(bytes, manifest::kWeightLoadPieceBytes));
  }
  return traits;
}

/// The runtime's own memory predicted for stage `stage` of `stages` (`st`):
/// the cost table's for a stage in that place (CostTable::runtimeBytesFor,
/// with the stage's traits), else kDefaultRuntimeBytes.
inline int64_t runtimeBytesOf(const CostTable &costs, int64_t stage,
                              int64_t stages, const EmittedStage &st) {
  const CostTable::StageTraits traits = stageTraits(st);
  int64_t bytes =
      costs.cuda ? 0 : costs.runtimeBytesFor(stage, stages, &traits);
  return bytes > 0 ? bytes : kDefaultRuntimeBytes;
}

/// What the compiler predicts a stage's process to hold at its peak: the
/// planned arena, the runtime's own memory (`runtimeBytes`) and, on the CPU
/// target with buffered sends (1F1B and later), MPI's send buffer of two
/// steps of the stage's sends (transport.cpp). CUDA: the host side is not
/// predicted (0).
inline int64_t predictedPeakBytes(const EmittedStage &st, int64_t runtimeBytes,
                                  int64_t microbatches, int64_t stages,
                                  bool cuda) {
  if (cuda)
    return 0;
  int64_t sendBuffer = 0;
  if (st.bufferedSends && stages > 1)
    for (const EmittedTransfer &t : st.transfers)
      if (t.isSend)
        sendBuffer += 2 * t.bytes * microbatches;
  return st.memory.arenaBytes + runtimeBytes + sendBuffer;
}

struct AutoCandidate {
  int64_t microbatches = 1;
  std::string schedule;
  int64_t virtualStages = 1;
  std::string remat;
  std::vector<int64_t> rematStages; // with remat stage: only these (empty: all)
  /// With remat segments: per stage, the stash bytes per micro-batch it
  /// may keep (-1: all).
  std::vector<int64_t> rematStashBytes;
  /// The partition's memory budget the plan was made with (0: none): the
  /// compile of the chosen candidate uses the same, so it gets its partition.
  int64_t partitionBytes = 0;
  /// Empty when the plan exists and fits; else why not.
  std::string rejected;
  double stepSeconds = 0;               // predicted, by simulation
  std::vector<double> stageSeconds;     // predicted compute per step
  std::vector<int64_t> stagePeakBytes;  // arena + runtime bytes
  std::vector<int64_t> stageArenaBytes; // the planned arena
  std::vector<int64_t> stageStashSlots; // micro-batches stashed at once
  std::vector<int64_t> stageStashBytes; // the stash of one micro-batch
};

/// Plans every candidate (M among the divisors of `batchSize` up to 32; each
/// registered schedule that accepts K and M, with 2 chunks per stage where
/// it needs several; remat none and stage) on a copy of `imported`, predicts
/// its step by simulating the schedule with each stage's predicted action
/// times (`costs`, or the analytic model), and returns the candidates, the
/// best feasible one first. `o` gives K, the budget (memoryPerStage, 0:
/// none) and the optimizer. Fails (with an error printed) when no candidate
/// fits.
mlir::FailureOr<std::vector<AutoCandidate>>
chooseConfiguration(mlir::ModuleOp imported, const CompileOptions &o,
                    int64_t batchSize, const CostTable &costs);

/// --remat auto under --memory-per-stage, one model chunk per stage: plans
/// `o` with gpipe-remat mode=segments and fills o.rematStashBytes, per stage
/// the stash bytes per micro-batch it may keep (-1: all), so that every
/// stage's planned arena fits the budget (as a compile under the budget
/// checks it; --auto's plans add the runtime's memory):
/// from keeping everything, a stage over the budget gets its stash cut by
/// the excess over its stash slots, re-planned until it fits (at most 8
/// rounds). Fails (with an error naming the stage) when a stage does not
/// fit even recomputing its whole forward.
mlir::LogicalResult planSegmentRemat(mlir::ModuleOp imported, CompileOptions &o,
                                     const CostTable &costs);

/// Prints the candidates' table (the chosen first, then the runners-up and
/// the rejected) for --explain.
void explainChoice(const std::vector<AutoCandidate> &candidates,
                   const CompileOptions &o, const CostTable &costs);

} // namespace gpipe::driver

#endif

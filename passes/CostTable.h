// A measured cost table: what a --profile build's units took on this machine
// (gpipe-run --profile FILE), read back per ONNX node, for gpipe-partition
// (--costs) and the driver's per-stage time predictions.
#ifndef GPIPE_PASSES_COSTTABLE_H
#define GPIPE_PASSES_COSTTABLE_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpipe {

/// Seconds per optimizer step that one node's ops took, by the function they
/// ran in: its forward, its backward (input and weight gradients computed
/// there), its deferred weight-gradient GEMMs (W actions, or the update when
/// the schedule has none) and the optimizer update (keyed by parameter).
struct NodeCost {
  double forward = 0, backward = 0, weight = 0, update = 0;
  double total() const { return forward + backward + weight + update; }
  NodeCost &operator+=(const NodeCost &o) {
    forward += o.forward;
    backward += o.backward;
    weight += o.weight;
    update += o.update;
    return *this;
  }
};

/// One profiled program's measurements (every stage of it): the ops at one
/// micro-batch size.
struct CostProfile {
  int64_t microbatches = 0, batchSize = 0;
  int64_t rows() const {
    return microbatches > 0 ? batchSize / microbatches : 0;
  }
  /// By node (or parameter) name: seconds per step.
  llvm::StringMap<NodeCost> nodes;
  /// A node's forward signature ("nn.gemm(tensor<...>, ...) -> ...") and
  /// its analytic seconds per call: the forward op of the largest estimate.
  llvm::StringMap<std::string> signatureOf;
  llvm::StringMap<double> forwardEstimate;
  /// Per op, keyed by opKey(node, function, signature): the seconds per
  /// step of the ops with that key, and how many there were (a node's
  /// backward may hold two alike GEMMs).
  llvm::StringMap<std::pair<double, int64_t>> ops;
  /// Per op kind of a node, keyed by opKey(node, function, op name): the
  /// seconds per step and the analytic estimate per step of those ops.
  llvm::StringMap<std::pair<double, double>> opsByName;
};

/// A cost table: one or more profiles (of one model at several micro-batch
/// sizes, or of several models), read back per node and per op.
struct CostTable {
  /// One per micro-batch size (batch_size / microbatches) of the headers,
  /// in the order the table first has them.
  std::vector<CostProfile> profiles;
  /// Per forward signature: the summed cost of the nodes with it and how
  /// many there are (for models that share ops but not names).
  llvm::StringMap<std::pair<NodeCost, int64_t>> bySignature;
  /// Measured over analytic seconds, over every timed op with an estimate:
  /// what an op the table lacks is predicted with.
  double scale = 1.0;
  /// The profiled programs' largest resident memory besides their arena
  /// (0: not in the table).
  int64_t runtimeBytes = 0;
  /// Whether the profiled programs ran on CUDA (every header's target
  /// "cuda"): their runtime_bytes are then GPU memory.
  bool cuda = false;
  /// The same by where the stage sat in its profiled pipeline: alone (one
  /// stage), first, last, or between (0: no such stage in the table). The
  /// first stage reads the graph inputs, the last the labels and computes
  /// the loss; stages of a pipeline carry MPI, a lone stage does not.
  int64_t runtimeAlone = 0, runtimeFirst = 0, runtimeLast = 0,
          runtimeMiddle = 0;
  /// A profiled stage's runtime memory by part (CPU headers with
  /// start_bytes, load_bytes, library_bytes, steady_bytes; per place, each
  /// the largest of the place's headers): the process before its arena, the
  /// largest piece of a weight file mapped while loading, what the math
  /// libraries made resident, and all besides the arena and `start` after
  /// the steps (including `library`).
  struct RuntimeSplit {
    int64_t start = -1, load = 0, library = 0, steady = -1;
    bool known() const { return start >= 0 && steady >= 0; }
  };
  RuntimeSplit splitAlone, splitFirst, splitLast, splitMiddle;
  /// Per op signature, from the units that called the math libraries (their
  /// library_bytes): what those libraries held in that profiled process
  /// once a unit with the op had run, the largest over the table. The
  /// libraries' memory (oneDNN's primitives, the convolutions' scratch,
  /// which grows to the largest operand) is then predicted for a stage as
  /// the largest over its ops.
  llvm::StringMap<int64_t> libraryBySignature;
  /// What the stage being predicted brings to its runtime memory: the
  /// largest piece of a weight file it maps while loading (its largest
  /// parameter's bytes, at most manifest::kWeightLoadPieceBytes), and
  /// whether it calls the math libraries (a GEMM, attention, a
  /// convolution).
  struct StageTraits {
    int64_t loadBytes = 0;
    bool callsMathLibrary = true;
    /// The math libraries' memory by the stage's ops (libraryBySignature),
    /// or -1: the place's library_bytes.
    int64_t libraryBytes = -1;
  };
  /// The runtime memory predicted for stage `stage` of `stages`: the
  /// table's stages in the same place (a middle stage without any: the
  /// smaller of first and last; a pipeline stage from 1-stage profiles
  /// only: theirs), else runtimeBytes (0: none in the table). With `traits`
  /// and that place's split known: start + max(the stage's load piece,
  /// steady less library, plus the stage's own library memory when it calls
  /// the math libraries: traits->libraryBytes, else the place's) — the
  /// load's piece is dropped before the steps begin.
  int64_t runtimeBytesFor(int64_t stage, int64_t stages,
                          const StageTraits *traits = nullptr) const;
  /// Measured transfers between two stages (a multi-stage profile's "link"
  /// lines): bytes, seconds one way.
  std::vector<std::pair<int64_t, double>> links;
  /// The seconds one message of `bytes` takes from one stage to another:
  /// latency plus bytes over bandwidth, fitted (least squares) to `links`
  /// (with one size measured, its time scaled by the bytes); 0 without
  /// links (transfers free, as the analytic model takes them).
  double transferSeconds(int64_t bytes) const;
  /// The fit's latency (seconds) and bandwidth (bytes per second), or
  /// nullopt without links.
  std::optional<std::pair<double, double>> linkModel() const;

  static std::string opKey(llvm::StringRef node, llvm::StringRef function,
                           llvm::StringRef signature) {
    return (node + "\x1f" + function + "\x1f" + signature).str();
  }
  /// The seconds per step of one op like `op` (its node, its signature) in
  /// `function` ("forward", "backward", "weight", "update") of a program
  /// with micro-batches of `rows` samples (the profile of that size first:
  /// an op whose shapes do not depend on it runs once per micro-batch), or
  /// nullopt.
  std::optional<double> lookupOp(mlir::Operation *op, llvm::StringRef function,
                                 int64_t rows) const;
  /// The same for an op of `node` with `signature` as the table wrote it.
  std::optional<double> lookupOp(llvm::StringRef node, llvm::StringRef function,
                                 llvm::StringRef signature, int64_t rows) const;
  /// The seconds per step of `op` in `function`, run `callsPerStep` times,
  /// from the profile whose ops of the same node and op name are nearest in
  /// size (analytic estimate), scaled by the estimates: ops at another M.
  std::optional<double> lookupScaled(mlir::Operation *op,
                                     llvm::StringRef function,
                                     double callsPerStep) const;
  /// The measured cost per step of the node that `op` (a forward op of the
  /// training step, run `microbatches` times a step) comes from: by its name
  /// when a profile's signature for that name is `op`'s, else the mean of
  /// the table's nodes with `op`'s signature, else by its name in the
  /// profile nearest in size, scaled by the analytic estimates.
  std::optional<NodeCost> lookup(mlir::Operation *op,
                                 int64_t microbatches) const;
  /// What the table has under `name` (a parameter's update) in its first
  /// profile that has it.
  std::optional<NodeCost> lookupName(llvm::StringRef name) const;
};

/// Reads a cost table (JSON lines: per stage a header, then one line per
/// timed unit). On failure returns nullopt with `err` naming the file and
/// line.
std::optional<CostTable> loadCostTable(llvm::StringRef path, std::string &err);

/// "nn.gemm(tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<32x64xf32>".
std::string opSignature(mlir::Operation *op);
/// A signature without its results ("nn.gemm(tensor<32x64xf32>, ...)"):
/// CostTable::libraryBySignature also keys the math libraries' memory by
/// it, since what oneDNN holds for an op follows its operands (a 1 x 1 and a
/// 3 x 3 convolution's weight gradients of the same input and output
/// gradient share it).
llvm::StringRef libraryOperandsKey(llvm::StringRef signature);
/// What a cost table calls the backward's copies of a deferred weight-gradient
/// GEMM's operands (gpipe-split-weight-grad): "operands of " + the signature.
std::string deferredCopySignature(mlir::Operation *gemm);

} // namespace gpipe

#endif

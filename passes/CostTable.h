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

struct CostTable {
  std::string path;
  std::string target; // "cpu"
  int64_t threads = 0, microbatches = 0, batchSize = 0;
  /// By node (or parameter) name.
  llvm::StringMap<NodeCost> nodes;
  /// A node's forward signature ("nn.gemm(tensor<...>, ...) -> ..."), for
  /// reuse across models: the mean cost of the nodes of that signature.
  llvm::StringMap<std::string> signatureOf;
  llvm::StringMap<std::pair<NodeCost, int64_t>> bySignature;
  /// Per op of the profiled program, keyed by opKey(node, function,
  /// signature): the seconds per step of the ops with that key, and how many
  /// there were (a node's backward may hold two alike GEMMs).
  llvm::StringMap<std::pair<double, int64_t>> ops;
  static std::string opKey(llvm::StringRef node, llvm::StringRef function,
                           llvm::StringRef signature) {
    return (node + "\x1f" + function + "\x1f" + signature).str();
  }
  /// The seconds per step of one op like `op` (its node, its signature) in
  /// `function` ("forward", "backward", "weight", "update"), or nullopt.
  std::optional<double> lookupOp(mlir::Operation *op,
                                 llvm::StringRef function) const;
  /// The same for an op of `node` with `signature` as the table wrote it.
  std::optional<double> lookupOp(llvm::StringRef node,
                                 llvm::StringRef function,
                                 llvm::StringRef signature) const;
  /// Measured over analytic seconds, over every timed op with an estimate:
  /// what an op the table lacks is predicted with.
  double scale = 1.0;
  /// Seconds per step of units whose ops name no node.
  double unattributed = 0;
  /// The profiled programs' largest resident memory besides their arena
  /// (0: not in the table).
  int64_t runtimeBytes = 0;
  /// Per op kind of a node, keyed by opKey(node, function, op name): the
  /// seconds per step and the analytic estimate per step of those ops, for
  /// ops at other shapes (another M): the seconds scaled by the estimates.
  llvm::StringMap<std::pair<double, double>> opsByName;
  /// The seconds per step of `op` in `function` from the table's ops of the
  /// same node and op name at other shapes, run `callsPerStep` times.
  std::optional<double> lookupScaled(mlir::Operation *op,
                                     llvm::StringRef function,
                                     double callsPerStep) const;

  /// The analytic seconds of each node's forward op that names its
  /// signature (per call).
  llvm::StringMap<double> forwardEstimate;

  /// The measured cost per step of the node that `op` (a forward op of the
  /// training step, run `microbatches` times a step) comes from: by its name
  /// when the table's signature for that name is `op`'s, else the mean of
  /// the table's nodes with `op`'s signature, else by its name at other
  /// shapes, scaled by the analytic estimates.
  std::optional<NodeCost> lookup(mlir::Operation *op,
                                 int64_t microbatches) const;
  /// Seconds per step of the samples of one micro-batch in the table
  /// (batchSize / microbatches rows).
  int64_t microbatchRows() const {
    return microbatches > 0 ? batchSize / microbatches : 0;
  }
};

/// Reads a cost table (JSON lines: per stage a header, then one line per
/// timed unit). On failure returns nullopt with `err` naming the file and
/// line.
std::optional<CostTable> loadCostTable(llvm::StringRef path, std::string &err);

/// "nn.gemm(tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<32x64xf32>".
std::string opSignature(mlir::Operation *op);
/// What a cost table calls the backward's copies of a deferred weight-gradient
/// GEMM's operands (gpipe-split-weight-grad): "operands of " + the signature.
std::string deferredCopySignature(mlir::Operation *gemm);

} // namespace gpipe

#endif

// The table of supported ONNX ops: each op type's import handler (and shape
// folder), registered by its family's file under ops/.
#ifndef GPIPE_COMPILER_IMPORTER_OPTABLE_H
#define GPIPE_COMPILER_IMPORTER_OPTABLE_H

#include "compiler/importer/ImportContext.h"

#include "llvm/ADT/StringMap.h"

#include <optional>

namespace gpipe::importer {

/// Imports one node of the op: defines its outputs in `cx` (MLIR values or
/// compile-time constants), or reports a located error and fails.
using ImportFn = mlir::LogicalResult (*)(ImportContext &cx,
                                         const onnx::NodeProto &node);

/// What the shape folder knows of a node's inputs before import.
struct FoldOperands {
  /// Per input, its value if it is a constant integer tensor, else null.
  std::vector<const ConstTensor *> values;
  /// Per input, its value if it is a constant float32 tensor (a Constant),
  /// else null: only casts to integers read these.
  std::vector<const ConstTensor *> floatValues;
  /// Static shapes from ONNX shape inference, by value name.
  const std::map<std::string, std::vector<int64_t>> &staticShapes;

  /// Whether the first `n` inputs are all known integer constants.
  bool allInts(size_t n) const {
    if (values.size() < n)
      return false;
    for (size_t k = 0; k < n; ++k)
      if (!values[k] || values[k]->isFloat)
        return false;
    return true;
  }
};

/// Evaluates a node of int64 shape arithmetic (x.size(0), view targets) at
/// import time; nullopt when it does not fold (it is then imported as usual).
using FoldFn = std::optional<ConstTensor> (*)(const onnx::NodeProto &node,
                                              const FoldOperands &in);

struct OpHandler {
  ImportFn import;
  /// Optional: ops that also take part in shape arithmetic.
  FoldFn fold = nullptr;
};

/// ONNX op types of the default domain and their handlers.
class OpTable {
public:
  /// Registers `opType`; each op type is registered once.
  void add(llvm::StringRef opType, ImportFn import, FoldFn fold = nullptr);
  /// The handler of `opType`, or null if the op is not supported.
  const OpHandler *lookup(llvm::StringRef opType) const;
  /// The supported op types, sorted.
  std::vector<std::string> opTypes() const;

private:
  llvm::StringMap<OpHandler> handlers;
};

/// One registration function per op family (ops/<Family>.cpp); adding a
/// family is its file, a declaration here and a call in OpTable.cpp.
void registerAttentionOps(OpTable &table);
void registerConvOps(OpTable &table);
void registerElementwiseOps(OpTable &table);
void registerGemmOps(OpTable &table);
void registerLogicalOps(OpTable &table);
void registerLossOps(OpTable &table);
void registerNormalizationOps(OpTable &table);
void registerPoolOps(OpTable &table);
void registerReductionOps(OpTable &table);
void registerShapeOps(OpTable &table);

/// Every supported op, built once from the family registrations.
const OpTable &onnxOpTable();

} // namespace gpipe::importer

#endif

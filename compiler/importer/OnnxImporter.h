// ONNX model -> nn dialect: one func.func computing the loss of a mini-batch.
#ifndef GPIPE_COMPILER_IMPORTER_ONNXIMPORTER_H
#define GPIPE_COMPILER_IMPORTER_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <optional>
#include <string>
#include <vector>

namespace gpipe {

struct ImportOptions {
  /// Mini-batch size: fixes a symbolic (or different static) batch dimension.
  std::optional<int64_t> batchSize;
  /// Name of the graph output to train; default: the only scalar float output.
  std::string lossName;
  /// Opset of the default domain the model is converted to (ONNX's converter,
  /// upwards); the importer reads this opset's forms.
  int targetOpset = 23;
  /// Parameters whose whole name matches this regular expression (POSIX
  /// extended, as llvm::Regex) are frozen: read, not trained. Empty: none.
  std::string freeze;
  /// Seed of the counter-based random numbers (Dropout's masks).
  uint64_t seed = 0;
};

/// A parameter: an ONNX floating-point initializer, trained, or with `state`
/// updated by the forward (BatchNorm's running statistics).
struct ImportedParam {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data; // empty when `externalFile` holds it
  // A float32 initializer stored as external data: its bytes are at
  // `externalOffset` of `externalFile` and were never read (gpipe-compile
  // copies them into the weight file a piece at a time).
  std::string externalFile;
  int64_t externalOffset = 0;
  bool state = false;
  bool frozen = false; // --freeze: not trained, saved unchanged
};

/// A graph input the runtime feeds per mini-batch (first dimension = batch).
struct ImportedInput {
  std::string name;
  bool isFloat; // float32, else int64
  std::vector<int64_t> shape;
};

struct ImportedModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::vector<ImportedParam> params;
  std::vector<ImportedInput> inputs;
  /// The model as read (binary protobuf, before any conversion): what
  /// --save-onnx starts from, also for .onnxtext inputs.
  std::string originalModel;
  int64_t batchSize = 0;
  std::string lossName;
  /// Things the importer changed that a user should know (opset conversion,
  /// rewritten Reshape targets), one line each.
  std::vector<std::string> notes;
};

/// Imports `path`. Every problem is reported through the context's diagnostic
/// engine, located at the ONNX node (NameLoc) or the file, and yields failure.
mlir::FailureOr<ImportedModel> importOnnxModel(mlir::MLIRContext &ctx,
                                               const std::string &path,
                                               const ImportOptions &options);

/// The ONNX op types the importer supports (its op table's, sorted), for docs
/// and messages.
const std::vector<std::string> &supportedOnnxOps();

} // namespace gpipe

#endif

// The import pipeline over one model: ONNX protobuf checks and rewrites, then
// the graph, node by node, through the op table.
#ifndef GPIPE_COMPILER_IMPORTER_IMPORTER_H
#define GPIPE_COMPILER_IMPORTER_IMPORTER_H

#include "compiler/importer/ImportContext.h"

#include <set>

namespace gpipe::importer {

/// Annotates `m` with what ONNX shape inference finds (value infos), not
/// throwing for node-level errors.
void annotateShapes(onnx::ModelProto &m);

/// Constant nodes written with value_int(s) or value_float(s) (torch >= 2.9's
/// exporter writes its shapes so) get the equivalent `value` tensor, the one
/// form the checks, the folding and the batch rewriting read.
void canonicalizeConstants(onnx::GraphProto &graph);

class Importer : public ImportContext {
public:
  Importer(mlir::MLIRContext &ctx, const std::string &path,
           const ImportOptions &options)
      : ImportContext(ctx, path), options(options) {
    seed = options.seed;
  }

  mlir::FailureOr<ImportedModel> run();

private:
  // Importer.cpp: reading, checking, converting, importing.
  mlir::LogicalResult parse();
  mlir::LogicalResult checkSupportedOps();
  /// Conv and pool windows ONNX shape inference can compute with.
  mlir::LogicalResult checkWindowAttributes();
  /// SplitToSequence splits ONNX shape inference can compute with.
  mlir::LogicalResult checkSequenceSplits();
  mlir::LogicalResult checkAndConvert();
  mlir::LogicalResult fixBatch();
  mlir::LogicalResult loadInitializers();
  /// For a float32 initializer of 4096 elements or more in external data:
  /// declares it (shape, file, offset) without reading its values, or fails
  /// naming the tensor; nullopt for any other initializer.
  std::optional<mlir::LogicalResult>
  declareExternal(const onnx::TensorProto &init);
  mlir::LogicalResult importGraph();
  mlir::LogicalResult importNode(const onnx::NodeProto &node);
  mlir::LogicalResult checkInferredShape(const onnx::NodeProto &node,
                                         mlir::Value v,
                                         const std::string &name);

  // ShapeFolding.cpp: shape inference and rewrites of the protobuf.
  mlir::LogicalResult foldShapeComputations();
  mlir::LogicalResult rewriteBatchReshapes();
  /// foldShapeComputations and rewriteBatchReshapes, in turn until no target
  /// is rewritten.
  mlir::LogicalResult foldShapesAndBatch();
  size_t foldedNodes = 0, batchRewrites = 0;
  /// The first output of each node whose target rewriteBatchReshapes rewrote.
  std::set<std::string> batchRewritten;
  mlir::LogicalResult inferShapes();
  /// Float initializers the outputs do not depend on differentiably (masks
  /// and other buffers, reached only through comparisons or shapes) become
  /// constants, as torch never changes them: fills `untrained`.
  mlir::LogicalResult findUntrainedInitializers();
  /// The running mean and variance of every BatchNormalization in training
  /// mode: float initializers no other node (or graph output) reads.
  mlir::LogicalResult findRunningStatistics();
  /// torch >= 2.9's exporter names every parameter, buffer and constant
  /// tensor of the module in the graph's metadata
  /// (`pkg.torch.export.ExportedProgram.graph_signature`); read before
  /// conversion (which drops graph metadata) into `signature`.
  void readGraphSignature();
  /// A signature parameter or buffer that is no initializer was folded away
  /// by the exporter (optimize=True, BatchNorm in eval form): refused,
  /// naming a few, with the export call that keeps them.
  mlir::LogicalResult checkSignatureKept();
  /// The trained parameters whose whole name matches options.freeze: fills
  /// `frozenParams`; an invalid expression, or one that matches none, is an
  /// error.
  mlir::LogicalResult findFrozenParameters();

  bool isText() const { return llvm::StringRef(path).ends_with(".onnxtext"); }

  /// One input of the exported program's graph signature: its kind
  /// (PARAMETER, BUFFER, CONSTANT_TENSOR, USER_INPUT, ...) and torch name.
  struct SignatureInput {
    std::string kind, target;
  };
  std::vector<SignatureInput> signature;

  ImportOptions options;
  onnx::ModelProto model;
  std::map<std::string, std::vector<int64_t>> inferredShapes;
  ImportedModel result;
};

} // namespace gpipe::importer

#endif

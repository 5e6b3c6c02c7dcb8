// What an ONNX op handler sees of the importer: values and compile-time
// constants by name, located diagnostics, and the builder.
#ifndef GPIPE_COMPILER_IMPORTER_IMPORTCONTEXT_H
#define GPIPE_COMPILER_IMPORTER_IMPORTCONTEXT_H

#include "compiler/importer/OnnxImporter.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringSet.h"

#include <onnx/onnx_pb.h>

#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace gpipe::importer {

/// A compile-time tensor: initializers and Constant outputs, kept as data so
/// that shape operands (Reshape targets, axes) are read at import time.
struct ConstTensor {
  std::vector<int64_t> shape;
  bool isFloat = false;
  std::vector<float> f;
  std::vector<int64_t> i;
  // A large float32 initializer stored as external data, not read yet:
  // `f` is empty until constOf needs its values; a parameter's never are.
  const onnx::TensorProto *external = nullptr;
  std::string externalFile;
  int64_t externalOffset = 0;
  int64_t numElements() const {
    return std::accumulate(shape.begin(), shape.end(), int64_t(1),
                           std::multiplies<int64_t>());
  }
};

/// Element `k` of a constant as a double (ints, bools and floats alike).
double elementAt(const ConstTensor &c, int64_t k);
/// The flat index into a tensor of shape `in` that broadcasts (numpy rules)
/// to element `flat` of shape `out`.
int64_t broadcastIndex(llvm::ArrayRef<int64_t> out, llvm::ArrayRef<int64_t> in,
                       int64_t flat);

/// "[2, 3]", as shapes appear in diagnostics.
std::string shapeStr(llvm::ArrayRef<int64_t> shape);
/// The ONNX name of a TensorProto element type ("DOUBLE").
const char *dtypeName(int32_t t);
/// The node's name, or its first output's name when unnamed.
std::string nodeName(const onnx::NodeProto &node);

/// The node's first attribute named `name`, or null.
const onnx::AttributeProto *findAttr(const onnx::NodeProto &node,
                                     llvm::StringRef name);
int64_t intAttr(const onnx::NodeProto &node, llvm::StringRef name,
                int64_t dflt);
float floatAttr(const onnx::NodeProto &node, llvm::StringRef name, float dflt);

/// The static shape of a ranked tensor value.
llvm::ArrayRef<int64_t> shapeOf(mlir::Value v);
/// `in` as an nn.reshape to `shape` (same element type).
mlir::Value createReshape(mlir::OpBuilder &builder, mlir::Location loc,
                          mlir::Value in, llvm::ArrayRef<int64_t> shape);

/// The state of one graph import that op handlers read and extend: MLIR
/// values and compile-time constants by ONNX name. The Importer derives from
/// it and fills it (graph inputs, initializers, the batch).
class ImportContext {
public:
  ImportContext(mlir::MLIRContext &ctx, const std::string &path)
      : ctx(ctx), path(path), builder(&ctx),
        fileLoc(mlir::FileLineColLoc::get(&ctx, path, 0, 0)) {}

  mlir::OpBuilder &getBuilder() { return builder; }
  /// The location of everything a node creates: NameLoc of its name.
  mlir::Location nodeLoc(const onnx::NodeProto &node);
  /// An error located at the model file; ends a failed import.
  mlir::InFlightDiagnostic fileError() { return mlir::emitError(fileLoc); }
  /// A file error that starts by naming the node.
  mlir::InFlightDiagnostic nodeError(const onnx::NodeProto &node);

  mlir::RankedTensorType f32(llvm::ArrayRef<int64_t> shape) {
    return mlir::RankedTensorType::get(shape, builder.getF32Type());
  }
  /// An nn.constant float32 scalar (tensor<f32>) at `loc`.
  mlir::Value f32Scalar(float value, mlir::Location loc);

  /// The MLIR value of input #`index` of `node`.
  mlir::FailureOr<mlir::Value> valueOf(const onnx::NodeProto &node, int index);
  /// valueOf, also requiring a float32 element type.
  mlir::FailureOr<mlir::Value> floatValueOf(const onnx::NodeProto &node,
                                            int index);
  /// floatValueOf for an optional input: a null Value when the node leaves
  /// it out (absent or named "").
  mlir::FailureOr<mlir::Value> optionalFloatValueOf(const onnx::NodeProto &node,
                                                    int index);
  /// Input #`index` as compile-time int64 values (a shape operand); `what`
  /// names it in diagnostics.
  mlir::FailureOr<std::vector<int64_t>>
  intsOperand(const onnx::NodeProto &node, int index, const char *what);
  /// The node's `axis` attribute (default `dflt`; negative counts from the
  /// end) as one of `rank` axes, or `axis A is out of range for rank R`.
  mlir::FailureOr<int64_t> axisAttr(const onnx::NodeProto &node, int64_t dflt,
                                    int64_t rank);
  /// Input #`index` of `node` as a compile-time constant that is not a
  /// trained parameter (a Constant, an untrained buffer, folded shape
  /// arithmetic), or null.
  const ConstTensor *constantOf(const onnx::NodeProto &node, int index) const {
    if (index >= node.input_size() || node.input(index).empty() ||
        isParameter(node.input(index)))
      return nullptr;
    return constOf(node.input(index));
  }
  /// Marks `axes` (negative ones count from the end) among `rank`
  /// dimensions; an axis out of range or given twice is an error naming the
  /// node.
  mlir::FailureOr<llvm::SmallVector<bool>>
  markAxes(const onnx::NodeProto &node, llvm::ArrayRef<int64_t> axes,
           int64_t rank);
  /// Output #`index` of `node` is `v`.
  void define(const onnx::NodeProto &node, int index, mlir::Value v) {
    values[node.output(index)] = v;
  }

  /// The compile-time value named `name` (its values read now if they
  /// were left in external data), or null.
  const ConstTensor *constOf(const std::string &name) const;
  /// The same without reading external data: the shape and kind only.
  const ConstTensor *declaredOf(const std::string &name) const {
    auto it = consts.find(name);
    return it == consts.end() ? nullptr : &it->second;
  }
  void defineConst(const std::string &name, ConstTensor c) {
    consts[name] = std::move(c);
  }
  /// The values of a sequence (SplitToSequence's output), or null.
  const std::vector<mlir::Value> *sequenceOf(const std::string &name) const {
    auto it = sequences.find(name);
    return it == sequences.end() ? nullptr : &it->second;
  }
  void defineSequence(const std::string &name, std::vector<mlir::Value> vs) {
    sequences[name] = std::move(vs);
  }
  bool isInitializer(const std::string &name) const {
    return initializerNames.contains(name);
  }
  /// A float initializer that is trained (not one of the untrained buffers).
  bool isParameter(const std::string &name) const {
    const ConstTensor *c = declaredOf(name);
    return c && c->isFloat && initializerNames.contains(name) &&
           !untrained.contains(name);
  }
  /// Reads a TensorProto (raw, typed or external data) as a ConstTensor;
  /// DOUBLE data only with `doubleAsFloat`, rounded to float32 (Constant
  /// nodes: torch exports clamp's bounds as double constants cast to float).
  mlir::FailureOr<ConstTensor> readTensor(const onnx::TensorProto &t,
                                          bool doubleAsFloat = false);

  /// The mini-batch size imported, and the model's own static batch (0 if it
  /// was symbolic).
  int64_t getBatch() const { return batch; }
  /// The --seed of counter-based random numbers.
  uint64_t getSeed() const { return seed; }
  int64_t getExportedBatch() const { return exportedBatch; }

protected:
  mlir::MLIRContext &ctx;
  std::string path;
  mlir::OpBuilder builder;
  mlir::Location fileLoc;
  int64_t exportedBatch = 0;
  uint64_t seed = 0;
  int64_t batch = 0;
  // Mutable: constOf reads external data on first use.
  mutable std::map<std::string, ConstTensor> consts;
  std::map<std::string, mlir::Value> values;
  /// Sequence values (SplitToSequence), read by SequenceAt.
  std::map<std::string, std::vector<mlir::Value>> sequences;
  llvm::StringSet<> initializerNames;
  /// Float initializers imported as constants (findUntrainedInitializers).
  llvm::StringSet<> untrained;
  /// Float initializers that are BatchNormalization running statistics:
  /// `state` parameters (findRunningStatistics).
  llvm::StringSet<> runningStats;
  /// Parameters --freeze names: declared `frozen`.
  llvm::StringSet<> frozenParams;
  /// Float initializers, in the order they are first used.
  std::vector<ImportedParam> params;
};

} // namespace gpipe::importer

#endif

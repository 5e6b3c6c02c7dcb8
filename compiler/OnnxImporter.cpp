// ONNX model -> nn dialect (checker, opset conversion, shape inference,
// import).
//
// Built with -fexceptions: libonnx's checker, converter and shape inference
// report problems by throwing; every throw is caught here and turned into one
// located diagnostic.
#include "compiler/importer/OnnxImporter.h"

#include "compiler/ExternalData.h"

#include "dialects/nn/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <onnx/checker.h>
#include <onnx/defs/parser.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

using namespace mlir;
using namespace gpipe;

const std::vector<std::string> &gpipe::supportedOnnxOps() {
  static const std::vector<std::string> ops = {
      "Add",      "Concat",  "Constant", "Div",
      "Erf",      "Flatten", "Gather",   "Gemm",
      "Identity", "MatMul",  "Mul",      "Relu",
      "Reshape",  "Shape",   "Sigmoid",  "SoftmaxCrossEntropyLoss",
      "Squeeze",  "Sub",     "Tanh",     "Transpose",
      "Unsqueeze"};
  return ops;
}

namespace {

/// A compile-time tensor: initializers and Constant outputs, kept as data so
/// that shape operands (Reshape targets, axes) are read at import time.
struct ConstTensor {
  std::vector<int64_t> shape;
  bool isFloat = false;
  std::vector<float> f;
  std::vector<int64_t> i;
  int64_t numElements() const {
    return std::accumulate(shape.begin(), shape.end(), int64_t(1),
                           std::multiplies<int64_t>());
  }
};

std::string shapeStr(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k)
    s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

const char *dtypeName(int32_t t) {
  return onnx::TensorProto_DataType_Name(
             static_cast<onnx::TensorProto_DataType>(t))
      .c_str();
}

class Importer {
public:
  Importer(MLIRContext &ctx, const std::string &path,
           const ImportOptions &options)
      : ctx(ctx), path(path), options(options), builder(&ctx),
        fileLoc(FileLineColLoc::get(&ctx, path, 0, 0)) {}

  FailureOr<ImportedModel> run();

private:
  LogicalResult parse();
  LogicalResult checkSupportedOps();
  LogicalResult checkAndConvert();
  LogicalResult fixBatch();
  LogicalResult foldShapeComputations();
  LogicalResult rewriteBatchReshapes();
  LogicalResult inferShapes();
  LogicalResult loadInitializers();
  LogicalResult importGraph();
  LogicalResult importNode(const onnx::NodeProto &node);

  // Helpers.
  bool isText() const { return llvm::StringRef(path).ends_with(".onnxtext"); }
  InFlightDiagnostic fileError() { return emitError(fileLoc); }
  Location nodeLoc(const onnx::NodeProto &node);
  InFlightDiagnostic nodeError(const onnx::NodeProto &node) {
    InFlightDiagnostic diag = emitError(fileLoc);
    if (node.name().empty())
      diag << "unnamed " << node.op_type() << " node producing '"
           << (node.output_size() ? node.output(0) : "") << "': ";
    else
      diag << "node '" << node.name() << "' (" << node.op_type() << "): ";
    return diag;
  }
  std::string nodeName(const onnx::NodeProto &node) {
    if (!node.name().empty())
      return node.name();
    return node.output_size() ? node.output(0) : std::string("?");
  }
  FailureOr<ConstTensor> readTensor(const onnx::TensorProto &t);
  FailureOr<Value> valueOf(const onnx::NodeProto &node, int index);
  const ConstTensor *constOf(const std::string &name) {
    auto it = consts.find(name);
    return it == consts.end() ? nullptr : &it->second;
  }
  FailureOr<std::vector<int64_t>> intsOperand(const onnx::NodeProto &node,
                                              int index, const char *what);
  void define(const onnx::NodeProto &node, int index, Value v) {
    values[node.output(index)] = v;
  }
  RankedTensorType f32(llvm::ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, builder.getF32Type());
  }
  LogicalResult checkInferredShape(const onnx::NodeProto &node, Value v,
                                   const std::string &name);

  MLIRContext &ctx;
  std::string path;
  ImportOptions options;
  OpBuilder builder;
  Location fileLoc;
  onnx::ModelProto model;
  int64_t exportedBatch = 0; // the model's own static batch, 0 if symbolic
  int64_t batch = 0;
  std::map<std::string, ConstTensor> consts;
  std::map<std::string, Value> values;
  std::map<std::string, std::vector<int64_t>> inferredShapes;
  llvm::StringSet<> initializerNames;
  ImportedModel result;
};

} // namespace

Location Importer::nodeLoc(const onnx::NodeProto &node) {
  return NameLoc::get(StringAttr::get(&ctx, nodeName(node)), fileLoc);
}

//===----------------------------------------------------------------------===//
// Reading, checking, converting
//===----------------------------------------------------------------------===//

LogicalResult Importer::parse() {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false);
  if (!buffer)
    return fileError() << "cannot read the model: "
                       << buffer.getError().message();
  llvm::StringRef bytes = (*buffer)->getBuffer();
  if (bytes.empty())
    return fileError() << "the model file is empty";
  if (isText()) {
    // ONNX's textual syntax (onnx/defs/parser.h), used by the lit tests.
    std::string text = bytes.str();
    onnx::OnnxParser parser(text.c_str());
    auto status = parser.Parse(model);
    if (!status.IsOK())
      return fileError() << "cannot parse the ONNX text: "
                         << status.ErrorMessage();
  } else if (!model.ParseFromArray(bytes.data(),
                                   static_cast<int>(bytes.size()))) {
    return fileError() << "not a valid ONNX model (the protobuf does not "
                          "parse: truncated or not an .onnx file)";
  }
  model.SerializeToString(&result.originalModel);
  if (!model.has_graph() || model.graph().node_size() == 0)
    return fileError() << "the model has no graph nodes (truncated or not an "
                          ".onnx file?)";
  return success();
}

LogicalResult Importer::checkSupportedOps() {
  llvm::StringSet<> supported;
  for (const std::string &op : supportedOnnxOps())
    supported.insert(op);
  std::vector<const onnx::NodeProto *> bad;
  for (const onnx::NodeProto &node : model.graph().node()) {
    bool defaultDomain = node.domain().empty() || node.domain() == "ai.onnx";
    if (!defaultDomain || !supported.contains(node.op_type()))
      bad.push_back(&node);
  }
  if (bad.empty())
    return success();
  // All unsupported nodes at once, so a user sees the whole list in one run.
  InFlightDiagnostic diag = fileError();
  diag << bad.size()
       << (bad.size() == 1 ? " node uses an unsupported ONNX op:"
                           : " nodes use unsupported ONNX ops:");
  for (const onnx::NodeProto *node : bad) {
    diag << "\n  "
         << (node->name().empty() ? "unnamed node producing '" : "node '")
         << nodeName(*node)
         << "': " << (node->domain().empty() ? "" : node->domain() + ".")
         << node->op_type();
  }
  diag << "\nsupported ops: " << llvm::join(supportedOnnxOps(), ", ");
  return failure();
}

LogicalResult Importer::checkAndConvert() {
  int64_t opset = -1;
  for (const auto &imp : model.opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx")
      opset = imp.version();
  if (opset < 0)
    return fileError() << "the model imports no version of the default ONNX "
                          "opset (ai.onnx)";
  // 13..17 is the tested range; older opsets go through the same converter.
  if (opset < 7 || opset > options.targetOpset)
    return fileError() << "opset " << opset << " is not supported: models of "
                       << "opset 7 to " << options.targetOpset
                       << " are accepted (12 to " << options.targetOpset
                       << " are tested)";
  try {
    // The path form also checks external data next to the model file.
    if (isText())
      onnx::checker::check_model(model);
    else
      onnx::checker::check_model(path);
  } catch (const std::exception &e) {
    return fileError() << "the ONNX checker rejects the model: " << e.what();
  }
  if (opset != options.targetOpset) {
    try {
      model =
          onnx::version_conversion::ConvertVersion(model, options.targetOpset);
    } catch (const std::exception &e) {
      return fileError() << "cannot convert opset " << opset << " to "
                         << options.targetOpset << ": " << e.what();
    }
    result.notes.push_back("converted the model from opset " +
                           std::to_string(opset) + " to " +
                           std::to_string(options.targetOpset));
  }
  return success();
}

LogicalResult Importer::fixBatch() {
  for (const auto &init : model.graph().initializer())
    initializerNames.insert(init.name());
  for (auto &input : *model.mutable_graph()->mutable_input()) {
    if (initializerNames.contains(input.name()))
      continue;
    if (!input.type().has_tensor_type())
      return fileError() << "graph input '" << input.name()
                         << "' is not a tensor";
    auto *tt = input.mutable_type()->mutable_tensor_type();
    int32_t et = tt->elem_type();
    if (et != onnx::TensorProto::FLOAT && et != onnx::TensorProto::INT64)
      return fileError() << "graph input '" << input.name()
                         << "' has element type " << dtypeName(et)
                         << "; supported: FLOAT (float32) and INT64";
    if (!tt->has_shape() || tt->shape().dim_size() == 0)
      return fileError() << "graph input '" << input.name()
                         << "' must have a shape whose first dimension is the "
                            "batch";
    auto *dim0 = tt->mutable_shape()->mutable_dim(0);
    if (dim0->has_dim_value() && dim0->dim_value() > 0) {
      if (exportedBatch && exportedBatch != dim0->dim_value())
        return fileError() << "graph inputs disagree on the batch size ("
                           << exportedBatch << " vs " << dim0->dim_value()
                           << " for '" << input.name() << "')";
      exportedBatch = dim0->dim_value();
    }
    for (int d = 1; d < tt->shape().dim_size(); ++d) {
      const auto &dim = tt->shape().dim(d);
      if (!dim.has_dim_value() || dim.dim_value() <= 0)
        return fileError()
               << "graph input '" << input.name() << "' has a dynamic "
               << "dimension " << d
               << (dim.has_dim_param() ? " ('" + dim.dim_param() + "')" : "")
               << "; only the first (batch) dimension may be symbolic: "
                  "re-export with static shapes";
    }
  }
  if (options.batchSize) {
    if (*options.batchSize <= 0)
      return fileError() << "--batch-size must be positive, got "
                         << *options.batchSize;
    batch = *options.batchSize;
  } else if (exportedBatch) {
    batch = exportedBatch;
  } else {
    return fileError() << "the batch dimension of the graph inputs is "
                          "symbolic; pass --batch-size";
  }
  for (auto &input : *model.mutable_graph()->mutable_input()) {
    if (initializerNames.contains(input.name()))
      continue;
    auto *dim0 = input.mutable_type()
                     ->mutable_tensor_type()
                     ->mutable_shape()
                     ->mutable_dim(0);
    dim0->clear_dim_param();
    dim0->set_dim_value(batch);
  }
  // Outputs keep no stale batch: shape inference recomputes them.
  for (auto &output : *model.mutable_graph()->mutable_output())
    if (output.type().has_tensor_type())
      output.mutable_type()->mutable_tensor_type()->clear_shape();
  model.mutable_graph()->clear_value_info();
  return success();
}

/// Records the fully static shapes of `graph`'s inputs, value_info and
/// outputs into `shapes`.
static void
collectStaticShapes(const onnx::GraphProto &graph,
                    std::map<std::string, std::vector<int64_t>> &shapes) {
  auto record = [&](const onnx::ValueInfoProto &vi) {
    if (!vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape())
      return;
    std::vector<int64_t> shape;
    for (const auto &d : vi.type().tensor_type().shape().dim()) {
      if (!d.has_dim_value())
        return;
      shape.push_back(d.dim_value());
    }
    shapes[vi.name()] = shape;
  };
  for (const auto &vi : graph.input())
    record(vi);
  for (const auto &vi : graph.value_info())
    record(vi);
  for (const auto &vi : graph.output())
    record(vi);
}

/// Runs ONNX shape inference on `m` without throwing for node-level errors.
static void runShapeInference(onnx::ModelProto &m) {
  // Node-level inference errors are not thrown: the importer checks every
  // node itself with a message naming it, and cross-checks each output
  // against whatever ONNX did infer.
  onnx::ShapeInferenceOptions opts{/*check_type=*/true, /*error_mode=*/0,
                                   /*enable_data_propagation=*/false};
  onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(),
                                     opts);
}

/// Static shapes ONNX shape inference finds for `m` (a copy is inferred, so
/// `m` itself is not annotated); names whose shape is unknown are absent.
static std::map<std::string, std::vector<int64_t>>
inferStaticShapes(const onnx::ModelProto &m) {
  std::map<std::string, std::vector<int64_t>> shapes;
  onnx::ModelProto copy = m;
  try {
    runShapeInference(copy);
  } catch (const std::exception &) {
    return shapes;
  }
  collectStaticShapes(copy.graph(), shapes);
  return shapes;
}

/// Evaluates one int64 shape-arithmetic node on constant inputs. Returns
/// nullopt when the node is not foldable (the importer reports it later).
static std::optional<ConstTensor>
foldIntNode(const onnx::NodeProto &node,
            const std::vector<const ConstTensor *> &in,
            const std::vector<int64_t> *inputShape) {
  const std::string &op = node.op_type();
  auto attrInt = [&](llvm::StringRef name, int64_t dflt) {
    for (const auto &a : node.attribute())
      if (a.name() == name)
        return a.i();
    return dflt;
  };
  auto allInts = [&](size_t n) {
    if (in.size() < n)
      return false;
    for (size_t k = 0; k < n; ++k)
      if (!in[k] || in[k]->isFloat)
        return false;
    return true;
  };
  ConstTensor out;
  if (op == "Shape") {
    if (!inputShape)
      return std::nullopt;
    int64_t rank = inputShape->size();
    int64_t start = attrInt("start", 0), end = attrInt("end", rank);
    start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
    end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
    for (int64_t d = start; d < end; ++d)
      out.i.push_back((*inputShape)[d]);
    out.shape = {static_cast<int64_t>(out.i.size())};
    return out;
  }
  if (op == "Identity" && allInts(1))
    return *in[0];
  if ((op == "Unsqueeze" || op == "Squeeze" || op == "Reshape") && allInts(1)) {
    out = *in[0];
    int64_t rank = out.shape.size();
    if (op == "Reshape") {
      if (!allInts(2))
        return std::nullopt;
      std::vector<int64_t> target = in[1]->i;
      int64_t known = 1, at = -1;
      for (size_t d = 0; d < target.size(); ++d) {
        if (target[d] == 0 && static_cast<int64_t>(d) < rank)
          target[d] = out.shape[d];
        if (target[d] == -1)
          at = d;
        else
          known *= target[d];
      }
      if (at >= 0 && known)
        target[at] = out.numElements() / known;
      out.shape = target;
      return out.numElements() == in[0]->numElements()
                 ? std::optional<ConstTensor>(out)
                 : std::nullopt;
    }
    std::vector<int64_t> axes;
    if (in.size() > 1 && in[1] && !in[1]->isFloat)
      axes = in[1]->i;
    if (op == "Unsqueeze") {
      int64_t outRank = rank + axes.size();
      std::vector<bool> mark(outRank, false);
      for (int64_t a : axes) {
        a = a < 0 ? a + outRank : a;
        if (a < 0 || a >= outRank)
          return std::nullopt;
        mark[a] = true;
      }
      std::vector<int64_t> shape;
      for (int64_t d = 0, k = 0; d < outRank; ++d)
        shape.push_back(mark[d] ? 1 : out.shape[k++]);
      out.shape = shape;
      return out;
    }
    std::vector<int64_t> shape;
    for (int64_t d = 0; d < rank; ++d) {
      bool drop = axes.empty() ? out.shape[d] == 1
                               : llvm::is_contained(axes, d) ||
                                     llvm::is_contained(axes, d - rank);
      if (!drop)
        shape.push_back(out.shape[d]);
    }
    out.shape = shape;
    return out;
  }
  if (op == "Concat" && !in.empty() && allInts(in.size())) {
    int64_t rank = in[0]->shape.size();
    int64_t axis = attrInt("axis", 0);
    axis = axis < 0 ? axis + rank : axis;
    if (axis < 0 || axis >= rank)
      return std::nullopt;
    out.shape = in[0]->shape;
    out.shape[axis] = 0;
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d)
      outer *= out.shape[d];
    for (const ConstTensor *t : in) {
      if (static_cast<int64_t>(t->shape.size()) != rank)
        return std::nullopt;
      out.shape[axis] += t->shape[axis];
    }
    for (int64_t o = 0; o < outer; ++o)
      for (const ConstTensor *t : in) {
        int64_t chunk = t->numElements() / std::max<int64_t>(outer, 1);
        out.i.insert(out.i.end(), t->i.begin() + o * chunk,
                     t->i.begin() + (o + 1) * chunk);
      }
    return out;
  }
  if (op == "Gather" && allInts(2)) {
    const ConstTensor &data = *in[0], &idx = *in[1];
    int64_t rank = data.shape.size();
    int64_t axis = attrInt("axis", 0);
    axis = axis < 0 ? axis + rank : axis;
    if (axis < 0 || axis >= rank)
      return std::nullopt;
    int64_t outer = 1, inner = 1, n = data.shape[axis];
    for (int64_t d = 0; d < axis; ++d)
      outer *= data.shape[d];
    for (int64_t d = axis + 1; d < rank; ++d)
      inner *= data.shape[d];
    out.shape.assign(data.shape.begin(), data.shape.begin() + axis);
    out.shape.insert(out.shape.end(), idx.shape.begin(), idx.shape.end());
    out.shape.insert(out.shape.end(), data.shape.begin() + axis + 1,
                     data.shape.end());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j : idx.i) {
        j = j < 0 ? j + n : j;
        if (j < 0 || j >= n)
          return std::nullopt;
        auto first = data.i.begin() + (o * n + j) * inner;
        out.i.insert(out.i.end(), first, first + inner);
      }
    return out;
  }
  if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div") &&
      allInts(2)) {
    // Shape arithmetic: equal shapes, or one side a single value.
    const ConstTensor &a = *in[0], &b = *in[1];
    bool aOne = a.numElements() == 1, bOne = b.numElements() == 1;
    if (a.shape != b.shape && !aOne && !bOne)
      return std::nullopt;
    out.shape = aOne && !bOne ? b.shape : a.shape;
    int64_t n = std::max(a.numElements(), b.numElements());
    for (int64_t k = 0; k < n; ++k) {
      int64_t x = a.i[aOne ? 0 : k], y = b.i[bOne ? 0 : k];
      if (op == "Div" && y == 0)
        return std::nullopt;
      out.i.push_back(op == "Add"   ? x + y
                      : op == "Sub" ? x - y
                      : op == "Mul" ? x * y
                                    : x / y);
    }
    return out;
  }
  return std::nullopt;
}

LogicalResult Importer::foldShapeComputations() {
  // Shape arithmetic (x.size(0), view targets) is int64 math on static
  // shapes: evaluate it now and turn each such node into a Constant, so
  // Reshape targets are constants the importer (and batch rewriting) can read.
  // Shapes are re-inferred after each round: a Shape that reads the result
  // of a Reshape folded in this round becomes foldable in the next.
  int total = 0;
  for (;;) {
    std::map<std::string, std::vector<int64_t>> shapes =
        inferStaticShapes(model);
    std::map<std::string, ConstTensor> known;
    for (const auto &init : model.graph().initializer())
      if (init.data_type() == onnx::TensorProto::INT64 ||
          init.data_type() == onnx::TensorProto::INT32) {
        FailureOr<ConstTensor> c = readTensor(init);
        if (failed(c))
          return failure();
        known[init.name()] = std::move(*c);
      }
    static const llvm::StringSet<> foldable = {
        "Shape",  "Gather", "Identity", "Unsqueeze", "Squeeze", "Reshape",
        "Concat", "Add",    "Sub",      "Mul",       "Div"};
    int folded = 0;
    for (onnx::NodeProto &node : *model.mutable_graph()->mutable_node()) {
      if (node.op_type() == "Constant") {
        for (const auto &a : node.attribute())
          if (a.name() == "value" &&
              (a.t().data_type() == onnx::TensorProto::INT64 ||
               a.t().data_type() == onnx::TensorProto::INT32)) {
            FailureOr<ConstTensor> c = readTensor(a.t());
            if (succeeded(c))
              known[node.output(0)] = std::move(*c);
          }
        continue;
      }
      if (!foldable.contains(node.op_type()) || node.output_size() != 1)
        continue;
      std::vector<const ConstTensor *> in;
      for (const std::string &name : node.input()) {
        auto it = known.find(name);
        in.push_back(it == known.end() ? nullptr : &it->second);
      }
      const std::vector<int64_t> *inputShape = nullptr;
      if (node.op_type() == "Shape" && node.input_size() == 1)
        if (auto it = shapes.find(node.input(0)); it != shapes.end())
          inputShape = &it->second;
      std::optional<ConstTensor> value = foldIntNode(node, in, inputShape);
      if (!value)
        continue;
      onnx::TensorProto t;
      t.set_data_type(onnx::TensorProto::INT64);
      for (int64_t d : value->shape)
        t.add_dims(d);
      for (int64_t v : value->i)
        t.add_int64_data(v);
      node.clear_input();
      node.clear_attribute();
      node.set_op_type("Constant");
      node.set_domain("");
      auto *attr = node.add_attribute();
      attr->set_name("value");
      attr->set_type(onnx::AttributeProto::TENSOR);
      *attr->mutable_t() = t;
      known[node.output(0)] = std::move(*value);
      ++folded;
    }
    total += folded;
    if (!folded)
      break;
  }
  if (total)
    result.notes.push_back("folded " + std::to_string(total) +
                           " shape-arithmetic node" + (total == 1 ? "" : "s") +
                           " into constants");
  return success();
}

/// Element count of `target` (ONNX Reshape semantics, allowzero = 0) applied
/// to an input of shape `in`, or -1 if it does not resolve.
static int64_t reshapeCount(llvm::ArrayRef<int64_t> target,
                            llvm::ArrayRef<int64_t> in) {
  int64_t count = 1, known = 1;
  for (int64_t d : in)
    count *= d;
  bool infer = false;
  for (size_t k = 0; k < target.size(); ++k) {
    int64_t t = target[k] == 0 && k < in.size() ? in[k] : target[k];
    if (t == -1)
      infer = true;
    else if (t < 0)
      return -1;
    else
      known *= t;
  }
  if (infer)
    return known != 0 && count % known == 0 ? count : -1;
  return known;
}

LogicalResult Importer::rewriteBatchReshapes() {
  if (!exportedBatch || exportedBatch == batch)
    return success();
  // A Reshape target whose first entry spells out the exported batch freezes
  // the old batch size. It is rewritten when its input really carries the
  // batch first and the new target fits the input; otherwise the Reshape is
  // left alone (and the importer reports it if its count no longer matches).
  // Shapes are re-inferred after each rewrite, so chained Reshapes see the
  // corrected shapes of the ones before them.
  std::set<const onnx::NodeProto *> done;
  for (;;) {
    std::map<std::string, std::vector<int64_t>> shapes =
        inferStaticShapes(model);
    std::map<std::string, const onnx::TensorProto *> inits;
    for (const auto &init : model.graph().initializer())
      inits[init.name()] = &init;
    for (const auto &node : model.graph().node())
      if (node.op_type() == "Constant" && node.attribute_size() == 1 &&
          node.attribute(0).name() == "value")
        inits[node.output(0)] = &node.attribute(0).t();
    onnx::NodeProto *candidate = nullptr;
    std::vector<int64_t> target;
    for (auto &node : *model.mutable_graph()->mutable_node()) {
      if (node.op_type() != "Reshape" || node.input_size() < 2 ||
          done.count(&node))
        continue;
      auto init = inits.find(node.input(1));
      auto in = shapes.find(node.input(0));
      if (init == inits.end() ||
          init->second->data_type() != onnx::TensorProto::INT64 ||
          in == shapes.end() || in->second.empty() || in->second[0] != batch)
        continue;
      FailureOr<ConstTensor> t = readTensor(*init->second);
      if (failed(t) || t->i.empty() || t->i[0] != exportedBatch)
        continue;
      std::vector<int64_t> rewritten = t->i;
      rewritten[0] = batch;
      int64_t count = 1;
      for (int64_t d : in->second)
        count *= d;
      if (reshapeCount(rewritten, in->second) != count)
        continue;
      candidate = &node;
      target = t->i;
      break;
    }
    if (!candidate)
      return success();
    done.insert(candidate);
    onnx::TensorProto copy;
    copy.set_name(candidate->input(1) + "__gpipe_batch" +
                  std::to_string(batch) + "_" + std::to_string(done.size()));
    copy.set_data_type(onnx::TensorProto::INT64);
    copy.add_dims(static_cast<int64_t>(target.size()));
    for (size_t k = 0; k < target.size(); ++k)
      copy.add_int64_data(k == 0 ? batch : target[k]);
    candidate->set_input(1, copy.name());
    result.notes.push_back("Reshape node producing '" + candidate->output(0) +
                           "': target " + shapeStr(target) +
                           " spells out the exported batch " +
                           std::to_string(exportedBatch) + "; rewritten to " +
                           std::to_string(batch));
    *model.mutable_graph()->add_initializer() = std::move(copy);
  }
}

LogicalResult Importer::inferShapes() {
  try {
    runShapeInference(model);
  } catch (const std::exception &e) {
    return fileError() << "ONNX shape inference failed: " << e.what();
  }
  collectStaticShapes(model.graph(), inferredShapes);
  return success();
}

//===----------------------------------------------------------------------===//
// Tensors and initializers
//===----------------------------------------------------------------------===//

FailureOr<ConstTensor> Importer::readTensor(const onnx::TensorProto &t) {
  ConstTensor c;
  for (int64_t d : t.dims())
    c.shape.push_back(d);
  int64_t n = c.numElements();
  std::string raw;
  bool haveRaw = false;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string err;
    if (!readExternalData(t, llvm::sys::path::parent_path(path).str(), raw,
                          err))
      return fileError() << err;
    haveRaw = true;
  } else if (t.has_raw_data()) {
    raw = t.raw_data();
    haveRaw = true;
  }
  auto sizeError = [&](int64_t have) {
    return fileError() << "tensor '" << t.name() << "' has " << have
                       << " values for its shape " << shapeStr(c.shape);
  };
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT:
    c.isFloat = true;
    if (haveRaw) {
      if (static_cast<int64_t>(raw.size()) != n * 4)
        return sizeError(raw.size() / 4);
      c.f.resize(n);
      std::memcpy(c.f.data(), raw.data(), n * 4);
    } else {
      c.f.assign(t.float_data().begin(), t.float_data().end());
    }
    if (static_cast<int64_t>(c.f.size()) != n)
      return sizeError(c.f.size());
    return c;
  case onnx::TensorProto::INT64:
  case onnx::TensorProto::INT32:
    if (haveRaw) {
      int width = t.data_type() == onnx::TensorProto::INT64 ? 8 : 4;
      if (static_cast<int64_t>(raw.size()) != n * width)
        return sizeError(raw.size() / width);
      c.i.resize(n);
      for (int64_t k = 0; k < n; ++k) {
        if (width == 8) {
          std::memcpy(&c.i[k], raw.data() + 8 * k, 8);
        } else {
          int32_t v;
          std::memcpy(&v, raw.data() + 4 * k, 4);
          c.i[k] = v;
        }
      }
    } else if (t.data_type() == onnx::TensorProto::INT64) {
      c.i.assign(t.int64_data().begin(), t.int64_data().end());
    } else {
      c.i.assign(t.int32_data().begin(), t.int32_data().end());
    }
    if (static_cast<int64_t>(c.i.size()) != n)
      return sizeError(c.i.size());
    return c;
  default:
    return fileError() << "tensor '" << t.name() << "' has element type "
                       << dtypeName(t.data_type())
                       << "; supported: FLOAT (float32), INT64, INT32";
  }
}

LogicalResult Importer::loadInitializers() {
  for (const auto &init : model.graph().initializer()) {
    FailureOr<ConstTensor> c = readTensor(init);
    if (failed(c))
      return failure();
    consts[init.name()] = std::move(*c);
  }
  return success();
}

/// The MLIR value of a node input: graph inputs and computed values directly;
/// float initializers become parameters, other constants nn.constant, on
/// first use.
FailureOr<Value> Importer::valueOf(const onnx::NodeProto &node, int index) {
  if (index >= node.input_size() || node.input(index).empty())
    return nodeError(node) << "missing input #" << index, failure();
  const std::string &name = node.input(index);
  if (auto it = values.find(name); it != values.end())
    return it->second;
  const ConstTensor *c = constOf(name);
  if (!c)
    return nodeError(node) << "input '" << name << "' is never defined",
           failure();
  Value v;
  Location loc = NameLoc::get(StringAttr::get(&ctx, name), fileLoc);
  if (c->isFloat && initializerNames.contains(name)) {
    v = nn::ParamOp::create(builder, loc, f32(c->shape), name);
    result.params.push_back({name, c->shape, c->f});
  } else if (c->isFloat) {
    auto type = f32(c->shape);
    v = nn::ConstantOp::create(
        builder, loc,
        DenseElementsAttr::get(type, llvm::ArrayRef<float>(c->f)));
  } else {
    auto type = RankedTensorType::get(c->shape, builder.getI64Type());
    v = nn::ConstantOp::create(
        builder, loc,
        DenseElementsAttr::get(type, llvm::ArrayRef<int64_t>(c->i)));
  }
  values[name] = v;
  return v;
}

FailureOr<std::vector<int64_t>>
Importer::intsOperand(const onnx::NodeProto &node, int index,
                      const char *what) {
  if (index >= node.input_size() || node.input(index).empty())
    return nodeError(node) << "missing " << what, failure();
  const ConstTensor *c = constOf(node.input(index));
  if (!c || c->isFloat)
    return nodeError(node) << what << " ('" << node.input(index)
                           << "') must be a constant int64 tensor (an "
                              "initializer or Constant); computed shapes are "
                              "not supported",
           failure();
  return c->i;
}

//===----------------------------------------------------------------------===//
// Nodes
//===----------------------------------------------------------------------===//

static const onnx::AttributeProto *findAttr(const onnx::NodeProto &node,
                                            llvm::StringRef name) {
  for (const auto &a : node.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

static int64_t intAttr(const onnx::NodeProto &node, llvm::StringRef name,
                       int64_t dflt) {
  const auto *a = findAttr(node, name);
  return a ? a->i() : dflt;
}

static float floatAttr(const onnx::NodeProto &node, llvm::StringRef name,
                       float dflt) {
  const auto *a = findAttr(node, name);
  return a ? a->f() : dflt;
}

static llvm::ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

LogicalResult Importer::checkInferredShape(const onnx::NodeProto &node, Value v,
                                           const std::string &name) {
  auto it = inferredShapes.find(name);
  if (it == inferredShapes.end())
    return success();
  if (llvm::ArrayRef<int64_t>(it->second) != shapeOf(v))
    return nodeError(node) << "output '" << name << "' has shape "
                           << shapeStr(shapeOf(v))
                           << " but ONNX shape inference says "
                           << shapeStr(it->second);
  return success();
}

LogicalResult Importer::importNode(const onnx::NodeProto &node) {
  const std::string &op = node.op_type();
  Location loc = nodeLoc(node);
  auto requireFloat = [&](Value v, int index) -> LogicalResult {
    if (!cast<RankedTensorType>(v.getType()).getElementType().isF32())
      return nodeError(node)
             << "input #" << index << " ('" << node.input(index)
             << "') must be float32, got "
             << cast<RankedTensorType>(v.getType()).getElementType();
    return success();
  };
  auto operand = [&](int index, bool mustBeFloat) -> FailureOr<Value> {
    FailureOr<Value> v = valueOf(node, index);
    if (failed(v) || (mustBeFloat && failed(requireFloat(*v, index))))
      return failure();
    return *v;
  };
  auto reshapeTo = [&](Value in, llvm::ArrayRef<int64_t> shape) -> Value {
    auto type = RankedTensorType::get(
        shape, cast<RankedTensorType>(in.getType()).getElementType());
    return nn::ReshapeOp::create(builder, loc, type, in);
  };

  if (op == "Constant") {
    ConstTensor c;
    if (const auto *a = findAttr(node, "value")) {
      FailureOr<ConstTensor> t = readTensor(a->t());
      if (failed(t))
        return failure();
      c = std::move(*t);
    } else if (const auto *a = findAttr(node, "value_float")) {
      c.isFloat = true;
      c.f = {a->f()};
    } else if (const auto *a = findAttr(node, "value_floats")) {
      c.isFloat = true;
      c.f.assign(a->floats().begin(), a->floats().end());
      c.shape = {static_cast<int64_t>(c.f.size())};
    } else if (const auto *a = findAttr(node, "value_int")) {
      c.i = {a->i()};
    } else if (const auto *a = findAttr(node, "value_ints")) {
      c.i.assign(a->ints().begin(), a->ints().end());
      c.shape = {static_cast<int64_t>(c.i.size())};
    } else {
      return nodeError(node) << "only tensor, float(s) and int(s) constants "
                                "are supported";
    }
    consts[node.output(0)] = std::move(c);
    return success();
  }

  if (op == "Identity") {
    if (const ConstTensor *c = constOf(node.input(0))) {
      consts[node.output(0)] = *c;
      if (!initializerNames.contains(node.input(0)))
        return success();
    }
    FailureOr<Value> x = operand(0, false);
    if (failed(x))
      return failure();
    define(node, 0, *x);
    return success();
  }

  if (op == "Gemm" || op == "MatMul") {
    FailureOr<Value> a = operand(0, true), b = operand(1, true);
    if (failed(a) || failed(b))
      return failure();
    auto as = shapeOf(*a), bs = shapeOf(*b);
    if (op == "MatMul") {
      if (as.size() < 2 || bs.size() != 2)
        return nodeError(node)
               << "MatMul of shapes " << shapeStr(as) << " x " << shapeStr(bs)
               << " is not supported: the left operand must "
                  "have rank >= 2 and the right rank 2";
      if (as.back() != bs[0])
        return nodeError(node)
               << "MatMul inner dimensions differ: " << shapeStr(as) << " x "
               << shapeStr(bs);
      // [..., K] x [K, N]: flatten the leading dims into one GEMM.
      int64_t rows = 1;
      for (size_t d = 0; d + 1 < as.size(); ++d)
        rows *= as[d];
      Value a2 = as.size() == 2 ? *a : reshapeTo(*a, {rows, as.back()});
      // x @ W^T (torch's Linear without bias): a GEMM with transB instead of
      // a transpose, which is dropped if nothing else reads it.
      Value bOperand = *b;
      bool transB = false;
      if (auto t = bOperand.getDefiningOp<nn::TransposeOp>()) {
        if (t.getPermutation() == llvm::ArrayRef<int64_t>{1, 0}) {
          bOperand = t.getInput();
          transB = true;
        }
      }
      Value y = nn::GemmOp::create(
          builder, loc, f32({rows, bs[1]}), a2, bOperand, Value(),
          builder.getBoolAttr(false), builder.getBoolAttr(transB),
          builder.getF32FloatAttr(1.0f), builder.getF32FloatAttr(1.0f));
      if (as.size() != 2) {
        llvm::SmallVector<int64_t> out(as.begin(), as.end());
        out.back() = bs[1];
        y = reshapeTo(y, out);
      }
      define(node, 0, y);
      return success();
    }
    bool ta = intAttr(node, "transA", 0), tb = intAttr(node, "transB", 0);
    if (as.size() != 2 || bs.size() != 2)
      return nodeError(node) << "Gemm operands must be rank 2, got "
                             << shapeStr(as) << " and " << shapeStr(bs);
    int64_t m = ta ? as[1] : as[0], k = ta ? as[0] : as[1];
    int64_t kb = tb ? bs[1] : bs[0], n = tb ? bs[0] : bs[1];
    if (k != kb)
      return nodeError(node) << "inner dimensions differ: op(A) is " << m << "x"
                             << k << ", op(B) is " << kb << "x" << n;
    Value c;
    if (node.input_size() > 2 && !node.input(2).empty()) {
      FailureOr<Value> cv = operand(2, true);
      if (failed(cv))
        return failure();
      c = *cv;
      if (failed(nn::broadcastShapes(shapeOf(c), {m, n})) ||
          shapeOf(c).size() > 2)
        return nodeError(node)
               << "C of shape " << shapeStr(shapeOf(c))
               << " does not broadcast to [" << m << ", " << n << "]";
    }
    Value y = nn::GemmOp::create(
        builder, loc, f32({m, n}), *a, *b, c, builder.getBoolAttr(ta),
        builder.getBoolAttr(tb),
        builder.getF32FloatAttr(floatAttr(node, "alpha", 1.0f)),
        builder.getF32FloatAttr(floatAttr(node, "beta", 1.0f)));
    define(node, 0, y);
    return success();
  }

  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    FailureOr<Value> l = operand(0, true), r = operand(1, true);
    if (failed(l) || failed(r))
      return failure();
    FailureOr<llvm::SmallVector<int64_t>> shape =
        nn::broadcastShapes(shapeOf(*l), shapeOf(*r));
    if (failed(shape))
      return nodeError(node) << "shapes " << shapeStr(shapeOf(*l)) << " and "
                             << shapeStr(shapeOf(*r)) << " do not broadcast";
    auto type = f32(*shape);
    Value y;
    if (op == "Add")
      y = nn::AddOp::create(builder, loc, type, *l, *r);
    else if (op == "Sub")
      y = nn::SubOp::create(builder, loc, type, *l, *r);
    else if (op == "Mul")
      y = nn::MulOp::create(builder, loc, type, *l, *r);
    else
      y = nn::DivOp::create(builder, loc, type, *l, *r);
    define(node, 0, y);
    return success();
  }

  if (op == "Relu" || op == "Tanh" || op == "Sigmoid" || op == "Erf") {
    FailureOr<Value> x = operand(0, true);
    if (failed(x))
      return failure();
    Value y;
    if (op == "Relu")
      y = nn::ReluOp::create(builder, loc, *x);
    else if (op == "Tanh")
      y = nn::TanhOp::create(builder, loc, *x);
    else if (op == "Sigmoid")
      y = nn::SigmoidOp::create(builder, loc, *x);
    else
      y = nn::ErfOp::create(builder, loc, *x);
    define(node, 0, y);
    return success();
  }

  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" ||
      op == "Unsqueeze") {
    FailureOr<Value> x = operand(0, false);
    if (failed(x))
      return failure();
    llvm::SmallVector<int64_t> in(shapeOf(*x));
    int64_t count = 1;
    for (int64_t d : in)
      count *= d;
    int64_t rank = in.size();
    llvm::SmallVector<int64_t> out;
    if (op == "Reshape") {
      FailureOr<std::vector<int64_t>> target =
          intsOperand(node, 1, "the target shape");
      if (failed(target))
        return failure();
      bool allowZero = intAttr(node, "allowzero", 0);
      int64_t known = 1, inferAt = -1;
      for (size_t d = 0; d < target->size(); ++d) {
        int64_t t = (*target)[d];
        if (t == 0 && !allowZero) {
          if (static_cast<int64_t>(d) >= rank)
            return nodeError(node)
                   << "target " << shapeStr(*target) << " copies dimension "
                   << d << " of a rank-" << rank << " input";
          t = in[d];
        }
        if (t == -1) {
          if (inferAt >= 0)
            return nodeError(node)
                   << "target " << shapeStr(*target) << " has more than one -1";
          inferAt = d;
        } else if (t < 0) {
          return nodeError(node) << "target " << shapeStr(*target)
                                 << " has a negative dimension";
        } else {
          known *= t;
        }
        out.push_back(t);
      }
      if (inferAt >= 0) {
        if (known == 0 || count % known)
          return nodeError(node)
                 << "cannot infer the -1 in target " << shapeStr(*target)
                 << " for an input of " << shapeStr(in);
        out[inferAt] = count / known;
      }
      int64_t outCount = 1;
      for (int64_t d : out)
        outCount *= d;
      if (outCount != count) {
        InFlightDiagnostic diag = nodeError(node);
        diag << "target " << shapeStr(*target) << " has " << outCount
             << " elements but the input " << shapeStr(in) << " has " << count;
        if (batch != exportedBatch && exportedBatch)
          diag << "; the target seems to encode the exported batch size "
               << exportedBatch << " (now " << batch
               << "): export it with -1 for the batch dimension";
        return failure();
      }
    } else if (op == "Flatten") {
      int64_t axis = intAttr(node, "axis", 1);
      if (axis < 0)
        axis += rank;
      if (axis < 0 || axis > rank)
        return nodeError(node) << "axis " << intAttr(node, "axis", 1)
                               << " is out of range for rank " << rank;
      int64_t outer = 1;
      for (int64_t d = 0; d < axis; ++d)
        outer *= in[d];
      out = {outer, count / std::max<int64_t>(outer, 1)};
    } else {
      std::vector<int64_t> axes;
      if (node.input_size() > 1 && !node.input(1).empty()) {
        FailureOr<std::vector<int64_t>> a = intsOperand(node, 1, "axes");
        if (failed(a))
          return failure();
        axes = *a;
      } else if (op == "Unsqueeze") {
        return nodeError(node) << "missing axes";
      }
      int64_t outRank = op == "Unsqueeze" ? rank + axes.size() : rank;
      llvm::SmallVector<bool> marked(outRank, false);
      for (int64_t a : axes) {
        int64_t norm = a < 0 ? a + outRank : a;
        if (norm < 0 || norm >= outRank || marked[norm])
          return nodeError(node) << "axis " << a << " is out of range or "
                                 << "repeated (rank " << outRank << ")";
        marked[norm] = true;
      }
      if (op == "Unsqueeze") {
        for (int64_t d = 0, k = 0; d < outRank; ++d)
          out.push_back(marked[d] ? 1 : in[k++]);
      } else {
        for (int64_t d = 0; d < rank; ++d) {
          bool drop = axes.empty() ? in[d] == 1 : marked[d];
          if (drop && in[d] != 1)
            return nodeError(node)
                   << "cannot squeeze dimension " << d << " of size " << in[d];
          if (!drop)
            out.push_back(in[d]);
        }
      }
    }
    define(node, 0, reshapeTo(*x, out));
    return success();
  }

  if (op == "Shape" || op == "Gather")
    return nodeError(node) << "only supported on static shapes and constant "
                              "int64 values (folded at import); this one "
                              "reads a computed tensor";

  if (op == "Transpose") {
    FailureOr<Value> x = operand(0, false);
    if (failed(x))
      return failure();
    auto in = shapeOf(*x);
    int64_t rank = in.size();
    llvm::SmallVector<int64_t> perm;
    if (const auto *a = findAttr(node, "perm"))
      perm.assign(a->ints().begin(), a->ints().end());
    else
      for (int64_t d = rank - 1; d >= 0; --d)
        perm.push_back(d);
    llvm::SmallVector<bool> seen(rank, false);
    if (static_cast<int64_t>(perm.size()) != rank)
      return nodeError(node) << "perm has " << perm.size()
                             << " entries for a rank-" << rank << " input";
    llvm::SmallVector<int64_t> out;
    for (int64_t p : perm) {
      if (p < 0 || p >= rank || seen[p])
        return nodeError(node)
               << "perm " << shapeStr(perm) << " is not a permutation of [0, "
               << rank << ")";
      seen[p] = true;
      out.push_back(in[p]);
    }
    auto type = RankedTensorType::get(
        out, cast<RankedTensorType>((*x).getType()).getElementType());
    define(node, 0, nn::TransposeOp::create(builder, loc, type, *x, perm));
    return success();
  }

  if (op == "Concat") {
    llvm::SmallVector<Value> inputs;
    for (int k = 0; k < node.input_size(); ++k) {
      FailureOr<Value> v = operand(k, false);
      if (failed(v))
        return failure();
      inputs.push_back(*v);
    }
    auto first = cast<RankedTensorType>(inputs[0].getType());
    int64_t rank = first.getRank();
    int64_t axis = intAttr(node, "axis", 0);
    if (axis < 0)
      axis += rank;
    if (axis < 0 || axis >= rank)
      return nodeError(node) << "axis " << intAttr(node, "axis", 0)
                             << " is out of range for rank " << rank;
    llvm::SmallVector<int64_t> out(first.getShape());
    out[axis] = 0;
    for (auto [k, v] : llvm::enumerate(inputs)) {
      auto t = cast<RankedTensorType>(v.getType());
      bool same =
          t.getRank() == rank && t.getElementType() == first.getElementType();
      for (int64_t d = 0; same && d < rank; ++d)
        same = d == axis || t.getDimSize(d) == first.getDimSize(d);
      if (!same)
        return nodeError(node)
               << "input #" << k << " of shape " << shapeStr(t.getShape())
               << " does not concatenate with " << shapeStr(first.getShape())
               << " on axis " << axis;
      out[axis] += t.getDimSize(axis);
    }
    auto type = RankedTensorType::get(out, first.getElementType());
    define(node, 0,
           nn::ConcatOp::create(builder, loc, type, inputs,
                                builder.getI64IntegerAttr(axis)));
    return success();
  }

  if (op == "SoftmaxCrossEntropyLoss") {
    FailureOr<Value> scores = operand(0, true), labels = operand(1, false);
    if (failed(scores) || failed(labels))
      return failure();
    if (node.input_size() > 2 && !node.input(2).empty())
      return nodeError(node) << "class weights are not supported";
    const auto *red = findAttr(node, "reduction");
    std::string reduction = red ? red->s() : "mean";
    if (reduction != "mean")
      return nodeError(node) << "reduction '" << reduction
                             << "' is not supported (only 'mean')";
    if (node.output_size() > 1 && !node.output(1).empty())
      return nodeError(node) << "the log_prob output is not supported";
    auto st = shapeOf(*scores), lt = shapeOf(*labels);
    if (st.size() != 2)
      return nodeError(node) << "scores must be [N, C], got " << shapeStr(st);
    auto labelType = cast<RankedTensorType>((*labels).getType());
    if (!labelType.getElementType().isInteger(64))
      return nodeError(node)
             << "labels must be int64, got " << labelType.getElementType();
    if (lt.size() != 1 || lt[0] != st[0])
      return nodeError(node)
             << "labels must be [" << st[0] << "], got " << shapeStr(lt);
    IntegerAttr ignore;
    if (const auto *a = findAttr(node, "ignore_index"))
      ignore = builder.getI64IntegerAttr(a->i());
    define(node, 0,
           nn::SoftmaxCrossEntropyOp::create(builder, loc, *scores, *labels,
                                             ignore, IntegerAttr()));
    return success();
  }

  return nodeError(node) << "unsupported op";
}

LogicalResult Importer::importGraph() {
  const onnx::GraphProto &graph = model.graph();
  llvm::SmallVector<Type> argTypes;
  llvm::SmallVector<const onnx::ValueInfoProto *> inputs;
  for (const auto &input : graph.input()) {
    if (initializerNames.contains(input.name()))
      continue;
    const auto &tt = input.type().tensor_type();
    std::vector<int64_t> shape;
    for (const auto &d : tt.shape().dim())
      shape.push_back(d.dim_value());
    bool isFloat = tt.elem_type() == onnx::TensorProto::FLOAT;
    argTypes.push_back(
        RankedTensorType::get(shape, isFloat ? Type(builder.getF32Type())
                                             : Type(builder.getI64Type())));
    inputs.push_back(&input);
    result.inputs.push_back({input.name(), isFloat, shape});
  }
  if (graph.output_size() == 0)
    return fileError() << "the graph has no outputs";

  auto module = ModuleOp::create(fileLoc);
  result.module = module;
  builder.setInsertionPointToEnd(module.getBody());
  // Result types are known only after import: create with none, fix below.
  auto func = func::FuncOp::create(builder, fileLoc, "train_step",
                                   builder.getFunctionType(argTypes, {}));
  Block *body = func.addEntryBlock();
  for (auto [k, input] : llvm::enumerate(inputs)) {
    func.setArgAttr(k, "nn.input", builder.getStringAttr(input->name()));
    values[input->name()] = body->getArgument(k);
  }
  builder.setInsertionPointToStart(body);

  for (const onnx::NodeProto &node : graph.node()) {
    if (failed(importNode(node)))
      return failure();
    for (int k = 0; k < node.output_size(); ++k) {
      auto it = values.find(node.output(k));
      if (it != values.end() &&
          failed(checkInferredShape(node, it->second, node.output(k))))
        return failure();
    }
  }

  // Outputs: the loss is the named one, or the only scalar float output.
  llvm::SmallVector<Value> outs;
  int lossIndex = -1;
  for (const auto &output : graph.output()) {
    auto it = values.find(output.name());
    if (it == values.end())
      return fileError() << "graph output '" << output.name()
                         << "' is not computed by any supported node";
    auto t = cast<RankedTensorType>(it->second.getType());
    bool scalarFloat = t.getRank() == 0 && t.getElementType().isF32();
    if (options.lossName.empty() ? scalarFloat
                                 : output.name() == options.lossName) {
      if (lossIndex >= 0)
        return fileError() << "several graph outputs are scalar losses ('"
                           << graph.output(lossIndex).name() << "', '"
                           << output.name() << "'): choose one with --loss";
      if (!scalarFloat)
        return fileError() << "the loss '" << output.name()
                           << "' must be a float32 scalar, got " << t;
      lossIndex = outs.size();
    }
    outs.push_back(it->second);
  }
  if (lossIndex < 0)
    return fileError() << (options.lossName.empty()
                               ? "no graph output is a float32 scalar loss"
                               : "no graph output is named '" +
                                     options.lossName + "'");
  result.lossName = graph.output(lossIndex).name();
  func::ReturnOp::create(builder, fileLoc, outs);
  // Ops the importer made redundant (a transpose folded into a GEMM).
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*body)))
    if (isa<nn::TransposeOp>(op) && op.use_empty())
      op.erase();
  func.setFunctionType(builder.getFunctionType(
      argTypes, llvm::to_vector(ValueRange(outs).getTypes())));
  for (auto [k, output] : llvm::enumerate(graph.output()))
    func.setResultAttr(k, "nn.output", builder.getStringAttr(output.name()));
  func.setResultAttr(lossIndex, "nn.loss", builder.getUnitAttr());
  if (result.params.empty())
    return fileError() << "the model has no float32 initializers: nothing "
                          "to train";
  return success();
}

FailureOr<ImportedModel> Importer::run() {
  ctx.loadDialect<nn::NNDialect, func::FuncDialect>();
  if (failed(parse()) || failed(checkSupportedOps()) ||
      failed(checkAndConvert()) || failed(fixBatch()) ||
      failed(foldShapeComputations()) || failed(rewriteBatchReshapes()) ||
      failed(loadInitializers()) || failed(inferShapes()) ||
      failed(importGraph()))
    return failure();
  result.batchSize = batch;
  return std::move(result);
}

FailureOr<ImportedModel> gpipe::importOnnxModel(MLIRContext &ctx,
                                                const std::string &path,
                                                const ImportOptions &options) {
  // libonnx may throw from places not wrapped above; never let it escape.
  try {
    Importer importer(ctx, path, options);
    return importer.run();
  } catch (const std::exception &e) {
    emitError(FileLineColLoc::get(&ctx, path, 0, 0))
        << "cannot import the model: " << e.what();
    return failure();
  }
}

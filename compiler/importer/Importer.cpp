// ONNX model -> nn dialect: reading, checking, opset conversion, fixing the
// batch, and the graph import, each node through the op table (OpTable.h).
//
// Built with -fexceptions: libonnx's checker, converter and shape inference
// report problems by throwing; every throw is caught here (or in
// ShapeFolding.cpp) and turned into one located diagnostic.
#include "compiler/importer/Importer.h"
#include "compiler/ExternalData.h"
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Regex.h"

#include <map>
#include <set>

#include <onnx/checker.h>
#include <onnx/defs/parser.h>
#include <onnx/version_converter/convert.h>

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

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

void Importer::readGraphSignature() {
  // Lines "p_l1_weight: PARAMETER target='l1.weight'" under "# inputs".
  for (const auto &prop : model.graph().metadata_props()) {
    if (prop.key() != "pkg.torch.export.ExportedProgram.graph_signature")
      continue;
    llvm::SmallVector<llvm::StringRef> lines;
    llvm::StringRef(prop.value()).split(lines, '\n');
    bool inputs = false;
    for (llvm::StringRef line : lines) {
      line = line.trim();
      if (line.starts_with("#")) {
        inputs = line == "# inputs";
        continue;
      }
      auto [name, rest] = line.split(": ");
      if (!inputs || rest.empty())
        continue;
      auto [kind, tail] = rest.trim().split(' ');
      llvm::StringRef target;
      size_t at = tail.find("target='");
      if (at != llvm::StringRef::npos)
        target = tail.drop_front(at + 8).take_until(
            [](char c) { return c == '\''; });
      signature.push_back({kind.str(), target.str()});
    }
  }
}

LogicalResult Importer::checkSignatureKept() {
  std::set<std::string> inits, targets;
  for (const auto &init : model.graph().initializer())
    inits.insert(init.name());
  std::vector<std::string> missing;
  size_t stateful = 0;
  for (const SignatureInput &in : signature) {
    targets.insert(in.target);
    if (in.kind != "PARAMETER" && in.kind != "BUFFER")
      continue;
    ++stateful;
    if (!in.target.empty() && !inits.count(in.target))
      missing.push_back(in.target);
  }
  if (missing.empty())
    return success();
  // A parameter tied to another (an LM head sharing the token embedding) is
  // listed under both names and written once, under one: a missing name is
  // no loss while every float tensor of the model is named in the signature.
  // A folded parameter lives on in a tensor the exporter made up
  // (`val_112`, `embedding_1`): a float initializer of more than one element
  // that the signature does not name.
  std::vector<std::string> madeUp;
  for (const auto &init : model.graph().initializer()) {
    int64_t n = 1;
    for (int64_t d : init.dims())
      n *= d;
    if (init.data_type() == onnx::TensorProto::FLOAT && n > 1 &&
        !targets.count(init.name()))
      madeUp.push_back(init.name());
  }
  if (madeUp.empty())
    return success();
  InFlightDiagnostic diag = fileError();
  diag << missing.size() << " of the exported module's " << stateful
       << " parameters and buffers " << (missing.size() == 1 ? "is" : "are")
       << " not initializers of the model (";
  for (size_t k = 0; k < missing.size() && k < 4; ++k)
    diag << (k ? ", " : "") << "'" << missing[k] << "'";
  if (missing.size() > 4)
    diag << ", ...";
  diag << "), and " << madeUp.size() << " initializer"
       << (madeUp.size() == 1 ? "" : "s") << " the exporter made up ('"
       << madeUp.front() << "'"
       << (madeUp.size() > 1 ? ", ..." : "")
       << ") hold what it folded them into: such a model cannot be trained. "
          "Export with torch.onnx.export(..., dynamo=True, optimize=False) "
          "(torch >= 2.9), which keeps every parameter under its name; a "
          "model with BatchNorm needs the legacy exporter (dynamo=False, "
          "training=torch.onnx.TrainingMode.TRAINING, "
          "do_constant_folding=False), as the default one writes it in eval "
          "form";
  return failure();
}

LogicalResult Importer::checkSupportedOps() {
  std::vector<const onnx::NodeProto *> bad;
  for (const onnx::NodeProto &node : model.graph().node()) {
    bool defaultDomain = node.domain().empty() || node.domain() == "ai.onnx";
    if (!defaultDomain || !onnxOpTable().lookup(node.op_type()))
      bad.push_back(&node);
  }
  if (bad.empty())
    return failure(failed(checkWindowAttributes()) ||
                   failed(checkSequenceSplits()));
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

LogicalResult Importer::checkSequenceSplits() {
  // ONNX's SplitToSequence inference divides by a scalar `split` unchecked
  // (SIGFPE for 0): a constant one must be positive. Constants are in their
  // `value` form already (canonicalizeConstants).
  std::map<std::string, const onnx::TensorProto *> tensors;
  for (const onnx::TensorProto &init : model.graph().initializer())
    tensors[init.name()] = &init;
  for (const onnx::NodeProto &node : model.graph().node())
    if (const onnx::AttributeProto *a = findAttr(node, "value");
        a && node.op_type() == "Constant" && node.output_size() == 1)
      tensors[node.output(0)] = &a->t();
  for (const onnx::NodeProto &node : model.graph().node()) {
    if (node.op_type() != "SplitToSequence" || node.input_size() < 2)
      continue;
    auto it = tensors.find(node.input(1));
    // (External data is not read before its location is checked.)
    if (it == tensors.end() || it->second->dims_size() != 0 ||
        it->second->data_location() == onnx::TensorProto::EXTERNAL)
      continue;
    FailureOr<ConstTensor> t = readTensor(*it->second);
    if (succeeded(t) && !t->isFloat && t->i.size() == 1 && t->i[0] <= 0)
      return nodeError(node) << "split " << t->i[0] << " must be positive";
  }
  return success();
}

LogicalResult Importer::checkWindowAttributes() {
  // ONNX's shape inference (1.12's, at least) for Conv and the pools divides
  // by strides (and multiplies by dilations) unchecked: a stride of 0 is a
  // SIGFPE in libonnx. Refuse such windows before any shape inference runs.
  // It also sizes its arrays by the input's rank but reads a Conv's kernel
  // from the weight's: a weight of another rank read out of bounds
  // (SIGSEGV). With kernel_shape spelled out from a weight of known shape,
  // ONNX compares its size with the input's rank instead.
  std::map<std::string, std::vector<int64_t>> weightShapes;
  for (const onnx::TensorProto &init : model.graph().initializer())
    weightShapes[init.name()].assign(init.dims().begin(), init.dims().end());
  for (onnx::NodeProto &node : *model.mutable_graph()->mutable_node()) {
    const std::string &op = node.op_type();
    if (op != "Conv" && op != "MaxPool" && op != "AveragePool")
      continue;
    if (op == "Conv" && node.input_size() >= 2 &&
        !findAttr(node, "kernel_shape")) {
      auto it = weightShapes.find(node.input(1));
      if (it != weightShapes.end()) {
        onnx::AttributeProto *a = node.add_attribute();
        a->set_name("kernel_shape");
        a->set_type(onnx::AttributeProto::INTS);
        for (size_t d = 2; d < it->second.size(); ++d)
          a->add_ints(it->second[d]);
      }
    }
    for (const char *name : {"kernel_shape", "strides", "dilations"})
      if (const onnx::AttributeProto *a = findAttr(node, name))
        for (int64_t v : a->ints())
          if (v < 1)
            return nodeError(node)
                   << name << " " << v
                   << " is invalid: kernel_shape, strides and dilations must "
                      "be >= 1";
  }
  return success();
}

LogicalResult Importer::checkAndConvert() {
  int64_t opset = -1;
  for (const auto &imp : model.opset_import())
    if (imp.domain().empty() || imp.domain() == "ai.onnx")
      opset = imp.version();
  if (opset < 0)
    return fileError() << "the model imports no version of the default ONNX "
                          "opset (ai.onnx)";
  // Every model is converted up to targetOpset (23) by ONNX's version
  // converter, whose upgrade adapters cover every step, and imported in that
  // opset's forms only. 12..17 are tested end to end (torch 1.13's exporter),
  // 18..23's own forms by the importer's lit tests.
  if (opset < 7 || opset > options.targetOpset)
    return fileError() << "opset " << opset << " is not supported: models of "
                       << "opset 7 to " << options.targetOpset
                       << " are accepted";
  // External data stays inside the model's directory, checked before the
  // ONNX checker (which opens the files) or anything else reads them.
  for (const onnx::TensorProto &init : model.graph().initializer()) {
    std::string err;
    if (init.data_location() == onnx::TensorProto::EXTERNAL &&
        !checkExternalDataLocation(
            init, llvm::sys::path::parent_path(path).str(), err))
      return fileError() << err;
  }
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
    // ONNX 1.12's converter dereferenced a null value for a graph output
    // nothing computes (SIGSEGV in graphProtoToGraph), and its checker let
    // such a model through (1.19's refuses it): kept as a guard.
    std::set<std::string> defined;
    for (const auto &input : model.graph().input())
      defined.insert(input.name());
    for (const auto &init : model.graph().initializer())
      defined.insert(init.name());
    for (const onnx::NodeProto &node : model.graph().node())
      defined.insert(node.output().begin(), node.output().end());
    for (const auto &output : model.graph().output())
      if (!defined.count(output.name()))
        return fileError() << "graph output '" << output.name()
                           << "' is not computed by any node";
    // Some adapters need the ranks of their inputs (Softmax and LogSoftmax
    // 12 -> 13 on a middle axis); fixBatch drops these value infos again. A
    // model ONNX cannot infer is reported by inferShapes, after conversion.
    try {
      annotateShapes(model);
    } catch (const std::exception &) {
    }
    // Opset 9-13's BatchNormalization in training mode has five outputs (torch
    // 1.13 writes them at opset 13); ONNX's 13 -> 14 adapter asserts on the
    // last two (saved mean and variance), which opset 14 dropped. Unread, they
    // are dropped here (and training_mode = 1 set, which the outputs meant);
    // read, the model is refused.
    if (opset < 14) {
      std::set<std::string> read;
      for (const onnx::NodeProto &node : model.graph().node())
        read.insert(node.input().begin(), node.input().end());
      for (const auto &output : model.graph().output())
        read.insert(output.name());
      for (onnx::NodeProto &node : *model.mutable_graph()->mutable_node()) {
        if (node.op_type() != "BatchNormalization" || node.output_size() <= 3)
          continue;
        for (int k = 3; k < node.output_size(); ++k)
          if (!node.output(k).empty() && read.count(node.output(k)))
            return nodeError(node)
                   << "output #" << k << " ('" << node.output(k)
                   << "', the saved mean or variance of opsets 9-13) is read: "
                      "not supported (opset 14 has no such output)";
        while (node.output_size() > 3)
          node.mutable_output()->RemoveLast();
        // Opset 14 says training mode with an attribute; before, the running
        // statistics outputs said it (the adapter does not carry it over).
        if (!findAttr(node, "training_mode")) {
          onnx::AttributeProto *a = node.add_attribute();
          a->set_name("training_mode");
          a->set_type(onnx::AttributeProto::INT);
          a->set_i(1);
        }
      }
    }
    // ONNX's converter (1.12's, at least) rebuilds the initializers from its
    // graph IR, which has no external data: a tensor stored outside the model
    // comes back with no values. Put its external_data back (same name, shape
    // and type, and still without values of its own).
    std::map<std::string, onnx::TensorProto> external;
    for (const onnx::TensorProto &init : model.graph().initializer())
      if (init.data_location() == onnx::TensorProto::EXTERNAL)
        external.emplace(init.name(), init);
    try {
      model =
          onnx::version_conversion::ConvertVersion(model, options.targetOpset);
    } catch (const std::exception &e) {
      return fileError() << "cannot convert opset " << opset << " to "
                         << options.targetOpset << ": " << e.what();
    }
    for (onnx::TensorProto &init :
         *model.mutable_graph()->mutable_initializer()) {
      auto it = external.find(init.name());
      if (it == external.end() ||
          init.data_location() == onnx::TensorProto::EXTERNAL ||
          init.has_raw_data() || init.float_data_size() ||
          init.int32_data_size() || init.int64_data_size() ||
          init.double_data_size() ||
          init.data_type() != it->second.data_type() ||
          !std::equal(init.dims().begin(), init.dims().end(),
                      it->second.dims().begin(), it->second.dims().end()))
        continue;
      init.set_data_location(onnx::TensorProto::EXTERNAL);
      *init.mutable_external_data() = it->second.external_data();
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

//===----------------------------------------------------------------------===//
// Initializers and nodes
//===----------------------------------------------------------------------===//

std::optional<LogicalResult>
Importer::declareExternal(const onnx::TensorProto &init) {
  if (init.data_location() != onnx::TensorProto::EXTERNAL ||
      init.data_type() != onnx::TensorProto::FLOAT)
    return std::nullopt;
  ConstTensor c;
  c.isFloat = true;
  for (int64_t d : init.dims())
    c.shape.push_back(d);
  if (c.numElements() < 4096)
    return std::nullopt;
  std::string file, err;
  int64_t offset = 0, length = 0;
  if (!locateExternalData(init, llvm::sys::path::parent_path(path).str(), file,
                          offset, length, err))
    return LogicalResult(fileError() << err);
  if (length != c.numElements() * 4)
    return LogicalResult(fileError()
                         << "tensor '" << init.name() << "' has "
                         << length / 4 << " values for its shape "
                         << shapeStr(c.shape));
  llvm::SmallString<256> abs(file);
  llvm::sys::fs::make_absolute(abs);
  c.external = &init;
  c.externalFile = abs.str().str();
  c.externalOffset = offset;
  consts[init.name()] = std::move(c);
  return success();
}

LogicalResult Importer::loadInitializers() {
  for (const auto &init : model.graph().initializer()) {
    // A large float32 tensor in external data is only declared here: a
    // parameter's values go from that file to its weight file, a piece at a
    // time, never all in memory (constOf reads a constant's when needed).
    if (auto lazy = declareExternal(init)) {
      if (failed(*lazy))
        return failure();
      continue;
    }
    FailureOr<ConstTensor> c = readTensor(init);
    if (failed(c))
      return failure();
    consts[init.name()] = std::move(*c);
  }
  return success();
}

LogicalResult Importer::findRunningStatistics() {
  const onnx::GraphProto &graph = model.graph();
  // Each running statistic, with the node that owns it.
  std::map<std::string, const onnx::NodeProto *> owner;
  for (const onnx::NodeProto &node : graph.node()) {
    if (node.op_type() != "BatchNormalization" ||
        intAttr(node, "training_mode", 0) != 1)
      continue;
    for (int k : {3, 4}) {
      const char *what = k == 3 ? "input_mean" : "input_var";
      if (node.input_size() <= k || node.input(k).empty())
        return nodeError(node) << "missing input #" << k << " (" << what << ")";
      const std::string &name = node.input(k);
      const ConstTensor *c = constOf(name);
      if (!c || !c->isFloat || !isInitializer(name))
        return nodeError(node)
               << what << " '" << name
               << "' must be a float32 initializer (the running statistic "
                  "the trainer updates and saves)";
      auto [it, inserted] = owner.try_emplace(name, &node);
      if (!inserted)
        return nodeError(node) << what << " '" << name
                               << "' is also the running statistic of node '"
                               << nodeName(*it->second)
                               << "': each BatchNormalization needs its own";
      runningStats.insert(name);
      untrained.erase(name);
    }
  }
  // Nothing else may read them: they change with every forward.
  for (const onnx::NodeProto &node : graph.node())
    for (int k = 0; k < node.input_size(); ++k) {
      auto it = owner.find(node.input(k));
      if (it != owner.end() && !(it->second == &node && (k == 3 || k == 4)))
        return nodeError(node)
               << "reads '" << node.input(k)
               << "', the running statistic of BatchNormalization node '"
               << nodeName(*it->second)
               << "', which the forward updates: only that node may read it";
    }
  for (const auto &out : graph.output())
    if (owner.count(out.name()))
      return fileError() << "graph output '" << out.name()
                         << "' is a BatchNormalization running statistic; "
                            "the trained model holds it as an initializer";
  return success();
}

LogicalResult Importer::findFrozenParameters() {
  if (options.freeze.empty())
    return success();
  llvm::Regex re("^(" + options.freeze + ")$");
  std::string error;
  if (!re.isValid(error))
    return fileError() << "--freeze '" << options.freeze
                       << "' is not a valid regular expression: " << error;
  std::vector<std::string> names;
  for (const auto &init : model.graph().initializer()) {
    const std::string &name = init.name();
    if (!isParameter(name) || runningStats.contains(name))
      continue;
    names.push_back(name);
    if (re.match(name))
      frozenParams.insert(name);
  }
  if (frozenParams.empty()) {
    std::string list;
    for (size_t k = 0; k < names.size() && k < 8; ++k)
      list += (k ? ", " : "") + names[k];
    if (names.size() > 8)
      list += ", ... (" + std::to_string(names.size()) + " in all)";
    return fileError() << "--freeze '" << options.freeze
                       << "' matches no trained parameter (the whole name "
                          "must match; parameters: "
                       << list << ")";
  }
  return success();
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
  const OpHandler *handler = onnxOpTable().lookup(node.op_type());
  if (!handler)
    return nodeError(node) << "unsupported op";
  return handler->import(*this, node);
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
  // Parameters are symbols of the module too (nn.parameter, named after
  // their initializers): the training step takes a name none of them has.
  std::string stepName = "train_step";
  for (int k = 1; initializerNames.contains(stepName); ++k)
    stepName = "train_step_" + std::to_string(k);
  auto func = func::FuncOp::create(builder, fileLoc, stepName,
                                   builder.getFunctionType(argTypes, {}));
  Block *body = func.addEntryBlock();
  for (auto [k, input] : llvm::enumerate(inputs)) {
    nn::setInputName(func, k, builder.getStringAttr(input->name()));
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
    nn::setOutputName(func, k, builder.getStringAttr(output.name()));
  nn::setLoss(func, lossIndex);
  if (params.empty())
    return fileError() << "the model has no float32 initializers: nothing "
                          "to train";
  return success();
}

FailureOr<ImportedModel> Importer::run() {
  ctx.loadDialect<nn::NNDialect, func::FuncDialect>();
  if (failed(parse()))
    return failure();
  canonicalizeConstants(*model.mutable_graph());
  readGraphSignature();
  if (failed(checkSignatureKept()) || failed(checkSupportedOps()) ||
      failed(checkAndConvert()) || failed(fixBatch()) ||
      failed(foldShapesAndBatch()) ||
      failed(loadInitializers()) || failed(inferShapes()) ||
      failed(findUntrainedInitializers()) || failed(findRunningStatistics()) ||
      failed(findFrozenParameters()) || failed(importGraph()))
    return failure();
  if (!options.freeze.empty() &&
      llvm::all_of(params, [](const ImportedParam &p) {
        return p.frozen || p.state;
      }))
    return fileError() << "--freeze '" << options.freeze
                       << "' freezes every parameter: nothing to train",
           failure();
  result.params = std::move(params);
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

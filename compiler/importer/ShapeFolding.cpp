// ONNX shape inference and the rewrites of the protobuf before import:
// folding int64 shape arithmetic into Constants (each op's folder is in the op
// table), and Reshape targets that spell out the exported batch.
//
// Built with -fexceptions: ONNX shape inference reports problems by throwing.
#include "compiler/importer/Importer.h"
#include "compiler/importer/OpTable.h"
#include "llvm/Support/MathExtras.h"

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include <set>

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

/// Calls `fn` on every ValueInfoProto of `graph`: inputs, value_info (what
/// shape inference added) and outputs.
template <typename Fn>
static void forEachValueInfo(const onnx::GraphProto &graph, Fn fn) {
  for (const auto &vi : graph.input())
    fn(vi);
  for (const auto &vi : graph.value_info())
    fn(vi);
  for (const auto &vi : graph.output())
    fn(vi);
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
  forEachValueInfo(graph, record);
}

void gpipe::importer::annotateShapes(onnx::ModelProto &m) {
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
    annotateShapes(copy);
  } catch (const std::exception &) {
    return shapes;
  }
  collectStaticShapes(copy.graph(), shapes);
  return shapes;
}

/// Whether `t`'s shape has non-negative dimensions whose product is the
/// number of its int64 elements.
static bool describesData(const ConstTensor &t) {
  int64_t n = 1;
  for (int64_t d : t.shape)
    if (d < 0 || llvm::MulOverflow(n, d, n))
      return false;
  return !t.isFloat && static_cast<size_t>(n) == t.i.size();
}

/// Constant nodes written with value_int(s) or value_float(s) (torch >= 2.9's
/// exporter writes its shapes so) get the equivalent `value` tensor, the one
/// form the folding and batch rewriting below read.
static void canonicalizeConstants(onnx::GraphProto &graph) {
  for (onnx::NodeProto &node : *graph.mutable_node()) {
    if (node.op_type() != "Constant" || node.attribute_size() != 1)
      continue;
    const onnx::AttributeProto &a = node.attribute(0);
    onnx::TensorProto t;
    if (a.name() == "value_int" || a.name() == "value_ints") {
      t.set_data_type(onnx::TensorProto::INT64);
      if (a.name() == "value_int")
        t.add_int64_data(a.i());
      else {
        t.add_dims(a.ints_size());
        for (int64_t v : a.ints())
          t.add_int64_data(v);
      }
    } else if (a.name() == "value_float" || a.name() == "value_floats") {
      t.set_data_type(onnx::TensorProto::FLOAT);
      if (a.name() == "value_float")
        t.add_float_data(a.f());
      else {
        t.add_dims(a.floats_size());
        for (float v : a.floats())
          t.add_float_data(v);
      }
    } else {
      continue;
    }
    node.clear_attribute();
    onnx::AttributeProto *value = node.add_attribute();
    value->set_name("value");
    value->set_type(onnx::AttributeProto::TENSOR);
    *value->mutable_t() = std::move(t);
  }
}

LogicalResult Importer::foldShapeComputations() {
  canonicalizeConstants(*model.mutable_graph());
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
    int folded = 0;
    for (onnx::NodeProto &node : *model.mutable_graph()->mutable_node()) {
      if (node.op_type() == "Constant") {
        for (const auto &a : node.attribute())
          if (a.name() == "value" &&
              (a.t().data_type() == onnx::TensorProto::INT64 ||
               a.t().data_type() == onnx::TensorProto::INT32 ||
               a.t().data_type() == onnx::TensorProto::FLOAT)) {
            FailureOr<ConstTensor> c = readTensor(a.t());
            if (succeeded(c))
              known[node.output(0)] = std::move(*c);
          }
        continue;
      }
      const OpHandler *handler = onnxOpTable().lookup(node.op_type());
      if (!handler || !handler->fold || node.output_size() != 1)
        continue;
      FoldOperands in{{}, {}, shapes};
      for (const std::string &name : node.input()) {
        auto it = known.find(name);
        const ConstTensor *c = it == known.end() ? nullptr : &it->second;
        in.values.push_back(c && !c->isFloat ? c : nullptr);
        in.floatValues.push_back(c && c->isFloat ? c : nullptr);
      }
      std::optional<ConstTensor> value = handler->fold(node, in);
      // A result whose shape does not describe its data (negative or
      // overflowing dimensions) is not folded: the node's import reports it.
      if (!value || !describesData(*value))
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
  // A product that overflows (a hostile model) does not resolve.
  for (int64_t d : in)
    if (d < 0 || llvm::MulOverflow(count, d, count))
      return -1;
  bool infer = false;
  for (size_t k = 0; k < target.size(); ++k) {
    int64_t t = target[k] == 0 && k < in.size() ? in[k] : target[k];
    if (t == -1)
      infer = true;
    else if (t < 0 || llvm::MulOverflow(known, t, known))
      return -1;
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
      bool overflow = false;
      for (int64_t d : in->second)
        overflow |= llvm::MulOverflow(count, d, count);
      if (overflow || reshapeCount(rewritten, in->second) != count)
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
    annotateShapes(model);
  } catch (const std::exception &e) {
    return fileError() << "ONNX shape inference failed: " << e.what();
  }
  collectStaticShapes(model.graph(), inferredShapes);
  return success();
}

LogicalResult Importer::findUntrainedInitializers() {
  // Element types of every value ONNX typed (inferShapes, which runs first,
  // annotated the model).
  const onnx::GraphProto &graph = model.graph();
  std::map<std::string, int32_t> types;
  forEachValueInfo(graph, [&](const onnx::ValueInfoProto &vi) {
    if (vi.type().has_tensor_type())
      types[vi.name()] = vi.type().tensor_type().elem_type();
  });
  for (const auto &init : graph.initializer())
    types[init.name()] = init.data_type();
  // A value of unknown type counts as float: only a known non-float type
  // cuts the path, so nothing trainable is ever frozen by a gap in ONNX's
  // type inference.
  auto isFloat = [&](const std::string &name) {
    auto it = types.find(name);
    return it == types.end() || it->second == onnx::TensorProto::FLOAT;
  };
  // Backwards from the outputs through float values only: a comparison's
  // bool result, a shape's int64 cut the path, as they cut gradients.
  std::set<std::string> reached;
  for (const auto &out : graph.output())
    if (isFloat(out.name()))
      reached.insert(out.name());
  const auto &nodes = graph.node();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    bool live = llvm::any_of(it->output(), [&](const std::string &o) {
      return reached.count(o) && isFloat(o);
    });
    if (!live)
      continue;
    for (const std::string &in : it->input())
      if (!in.empty() && isFloat(in))
        reached.insert(in);
  }
  int count = 0;
  for (const auto &init : graph.initializer())
    if (init.data_type() == onnx::TensorProto::FLOAT &&
        !reached.count(init.name())) {
      untrained.insert(init.name());
      ++count;
    }
  // The exporter's graph signature names buffers and constant tensors: they
  // are not trained even where the loss depends on them (a fixed positional
  // encoding). BatchNormalization's running statistics among them become
  // state (findRunningStatistics, next).
  int buffers = 0;
  for (const SignatureInput &in : signature)
    if ((in.kind == "BUFFER" || in.kind == "CONSTANT_TENSOR") &&
        reached.count(in.target) && initializerNames.contains(in.target) &&
        untrained.insert(in.target).second)
      ++buffers;
  if (buffers)
    result.notes.push_back(std::to_string(buffers) + " float initializer" +
                           (buffers == 1 ? " is a buffer" : "s are buffers") +
                           " of the module (the exporter's graph signature "
                           "says so): kept constant");
  if (count)
    result.notes.push_back(
        std::to_string(count) + " float initializer" +
        (count == 1 ? " does" : "s do") +
        " not reach an output through differentiable ops (a buffer such as "
        "a mask): kept constant");
  return success();
}

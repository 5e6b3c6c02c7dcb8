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
/// `m` itself is not annotated), and the initializers' own (torch >= 2.9
/// writes Shape of a weight: a Conv's out-channels for its bias); names whose
/// shape is unknown are absent.
static std::map<std::string, std::vector<int64_t>>
inferStaticShapes(const onnx::ModelProto &m) {
  std::map<std::string, std::vector<int64_t>> shapes;
  onnx::ModelProto copy = m;
  try {
    annotateShapes(copy);
    collectStaticShapes(copy.graph(), shapes);
  } catch (const std::exception &) {
  }
  for (const auto &init : m.graph().initializer())
    shapes.try_emplace(init.name(), init.dims().begin(), init.dims().end());
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

void gpipe::importer::canonicalizeConstants(onnx::GraphProto &graph) {
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
  foldedNodes += total;
  return success();
}

LogicalResult Importer::foldShapesAndBatch() {
  // A rewritten target lets shape inference see past it, so more shape
  // arithmetic folds, which may expose more targets (a Shape read after a
  // Reshape that spelled out the exported batch).
  for (int round = 0;; ++round) {
    if (failed(foldShapeComputations()))
      return failure();
    size_t rewrites = batchRewrites;
    if (failed(rewriteBatchReshapes()))
      return failure();
    if (batchRewrites == rewrites || round == 16)
      break;
  }
  if (foldedNodes)
    result.notes.push_back("folded " + std::to_string(foldedNodes) +
                           " shape-arithmetic node" +
                           (foldedNodes == 1 ? "" : "s") + " into constants");
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

/// The axis `k` of a Reshape target that does not fit its input (or has a
/// -1) and spells
/// out the exported batch, alone or times dimensions merged with it, where
/// the input holds the new batch: with the new batch there, the target fits,
/// and axis k covers whole axes of the input, one of them a multiple of the
/// new batch, or starts at such an axis and merges part of the next or
/// splits part of it off ([B, T, d] -> [B, T, h, d / h]; torch's attention:
/// [T, B, 3 * d] -> [T, B, 3, d], [T, B, d] -> [T, B * h, d / h],
/// [B * h, T, e] -> [B, h, T, e], [T, B, h, e] -> [T * B, h * e]). -1 if
/// there is none.
static int64_t reshapeBatchAxis(llvm::ArrayRef<int64_t> target,
                                llvm::ArrayRef<int64_t> in,
                                int64_t exportedBatch, int64_t batch) {
  int64_t count = 1;
  for (int64_t d : in)
    if (d <= 0 || llvm::MulOverflow(count, d, count))
      return -1;
  // A target of known dimensions that fits as it is means what it says; one
  // with a -1 (or 0) always fits, and only the axes before it are read.
  if (llvm::all_of(target, [](int64_t t) { return t > 0; }) &&
      reshapeCount(target, in) == count)
    return -1;
  int64_t before = 1; // elements per index of target axis k
  for (size_t k = 0; k < target.size(); ++k) {
    int64_t t = target[k];
    if (t > 0 && t % exportedBatch == 0) {
      std::vector<int64_t> rewritten(target.begin(), target.end());
      rewritten[k] = t / exportedBatch * batch;
      // Input axes [lo, hi) span exactly the elements of the new axis k.
      int64_t prefix = 1;
      size_t lo = 0;
      while (lo < in.size() && prefix < before)
        prefix *= in[lo++];
      int64_t span = 1;
      size_t hi = lo;
      bool holdsBatch = false;
      while (hi < in.size() && span < rewritten[k]) {
        holdsBatch |= in[hi] % batch == 0;
        span *= in[hi++];
      }
      // Or it starts inside an input axis, or at one, whose rest holds the
      // batch, and merges part of what follows or splits part of it off
      // ([T, B, d] -> [T, B * h, d / h], [B * h, T, e] -> [B, h, T, e],
      // [T * B, d] -> [T, B, d]).
      int64_t at = 1;
      size_t j = 0;
      while (j < in.size() && at * in[j] <= before && before % (at * in[j]) == 0)
        at *= in[j++];
      bool partial = false;
      if (j < in.size() && before % at == 0 && in[j] % (before / at) == 0) {
        int64_t rest = in[j] / (before / at);
        partial = rest % batch == 0 &&
                  (rewritten[k] % rest == 0 || rest % rewritten[k] == 0);
      }
      if (((prefix == before && span == rewritten[k] && holdsBatch) ||
           partial) &&
          reshapeCount(rewritten, in) == count)
        return k;
    }
    if (t <= 0 || llvm::MulOverflow(before, t, before))
      return -1;
  }
  return -1;
}

LogicalResult Importer::rewriteBatchReshapes() {
  if (!exportedBatch || exportedBatch == batch)
    return success();
  // A Reshape or Expand target that spells out the exported batch freezes the
  // old batch size. It is rewritten where the batch can be followed:
  // - Reshape: its input holds the new batch at that axis, with the same
  //   dimensions before it, and the new target fits the input;
  // - Expand: its input has size 1 there (a tensor without the batch, such
  //   as a class token, expanded to every sample), and a node that reads the
  //   result also reads a tensor holding the new batch at that axis.
  // Anything else is left alone (and the importer reports a count or shape
  // that no longer matches). Shapes are re-inferred after each rewrite, so
  // the nodes after it see the corrected shapes.
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
    // Whether some node reading `name` also reads a tensor with the new
    // batch at axis `k` of a rank-`rank` result (numpy alignment).
    auto meetsBatch = [&](const std::string &name, int64_t k, int64_t rank) {
      for (const auto &reader : model.graph().node()) {
        if (!llvm::is_contained(reader.input(), name))
          continue;
        for (const std::string &other : reader.input()) {
          auto it = shapes.find(other);
          if (other == name || it == shapes.end())
            continue;
          int64_t at = k - (rank - static_cast<int64_t>(it->second.size()));
          if (at >= 0 && it->second[at] == batch)
            return true;
        }
      }
      return false;
    };
    onnx::NodeProto *candidate = nullptr;
    std::vector<int64_t> target;
    int64_t axis = -1;
    for (auto &node : *model.mutable_graph()->mutable_node()) {
      bool reshape = node.op_type() == "Reshape",
           expand = node.op_type() == "Expand";
      if ((!reshape && !expand) || node.input_size() < 2 ||
          node.output_size() < 1 || batchRewritten.count(node.output(0)))
        continue;
      auto init = inits.find(node.input(1));
      auto in = shapes.find(node.input(0));
      if (init == inits.end() ||
          init->second->data_type() != onnx::TensorProto::INT64 ||
          in == shapes.end())
        continue;
      FailureOr<ConstTensor> t = readTensor(*init->second);
      if (failed(t) || t->i.empty())
        continue;
      int64_t k = -1;
      if (reshape) {
        k = reshapeBatchAxis(t->i, in->second, exportedBatch, batch);
      } else {
        int64_t rank = t->i.size(), inRank = in->second.size();
        for (int64_t j = 0; j < rank && k < 0; ++j) {
          int64_t at = j - (rank - inRank);
          if (t->i[j] == exportedBatch && (at < 0 || in->second[at] == 1) &&
              meetsBatch(node.output(0), j, std::max(rank, inRank)))
            k = j;
        }
      }
      if (k < 0)
        continue;
      candidate = &node;
      target = t->i;
      axis = k;
      break;
    }
    if (!candidate)
      return success();
    // Each node once (across the rounds of foldShapesAndBatch): a target
    // that now holds the new batch could otherwise be read as a merge.
    batchRewritten.insert(candidate->output(0));
    ++batchRewrites;
    onnx::TensorProto copy;
    copy.set_name(candidate->input(1) + "__gpipe_batch" +
                  std::to_string(batch) + "_" +
                  std::to_string(batchRewritten.size()));
    copy.set_data_type(onnx::TensorProto::INT64);
    copy.add_dims(static_cast<int64_t>(target.size()));
    for (size_t k = 0; k < target.size(); ++k)
      copy.add_int64_data(static_cast<int64_t>(k) == axis
                              ? target[k] / exportedBatch * batch
                              : target[k]);
    candidate->set_input(1, copy.name());
    result.notes.push_back(candidate->op_type() + " node producing '" +
                           candidate->output(0) + "': target " +
                           shapeStr(target) + " spells out the exported batch " +
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

// Pooling ONNX ops: MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool
// (1-D and 2-D windows on [N, C, spatial..]) and Pad (mode constant).
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"
#include "dialects/nn/PoolShape.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

/// The ints attribute `name`, or `dflt` when the node has none.
static std::vector<int64_t> intsAttr(const onnx::NodeProto &node,
                                     llvm::StringRef name,
                                     std::vector<int64_t> dflt) {
  if (const auto *a = findAttr(node, name))
    return std::vector<int64_t>(a->ints().begin(), a->ints().end());
  return dflt;
}

/// A pool's window read from the node: kernel_shape, strides, pads,
/// dilations and ceil_mode, checked against the input's spatial axes.
struct Window {
  std::vector<int64_t> kernel, strides, pads, dilations;
  bool ceil = false;
};

/// The float32 input of a pool, [N, C, W] or [N, C, H, W].
static FailureOr<Value> poolInput(ImportContext &cx,
                                  const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0);
  if (failed(x))
    return failure();
  int64_t rank = shapeOf(*x).size();
  if (rank != 3 && rank != 4)
    return cx.nodeError(node)
           << "input " << shapeStr(shapeOf(*x))
           << " is not [N, C, W] or [N, C, H, W]: only 1-D and 2-D pooling "
              "is supported";
  return x;
}

/// The output shape of `w` over `in`; a located error when a window does
/// not fit.
static FailureOr<SmallVector<int64_t>> poolShape(ImportContext &cx,
                                                 const onnx::NodeProto &node,
                                                 ArrayRef<int64_t> in,
                                                 const Window &w) {
  size_t s = in.size() - 2;
  SmallVector<int64_t> out(in.begin(), in.begin() + 2);
  for (size_t d = 0; d < s; ++d) {
    int64_t extent = w.dilations[d] * (w.kernel[d] - 1) + 1;
    if (w.kernel[d] < 1 || w.strides[d] < 1 || w.dilations[d] < 1)
      return cx.nodeError(node) << "kernel_shape, strides and dilations must "
                                   "be >= 1";
    for (int64_t p : {w.pads[d], w.pads[s + d]})
      if (p < 0 || p >= extent)
        return cx.nodeError(node)
               << "pad " << p << " of spatial axis " << d
               << " is not supported: pads must be >= 0 and smaller than "
                  "the window's extent "
               << extent;
    int64_t o =
        nn::poolOutputSize(in[2 + d], w.kernel[d], w.strides[d], w.pads[d],
                           w.pads[s + d], w.dilations[d], w.ceil);
    if (o < 1)
      return cx.nodeError(node)
             << "the window does not fit the input " << shapeStr(in);
    out.push_back(o);
  }
  return out;
}

/// The window attributes shared by MaxPool and AveragePool, with the
/// attributes they cannot import refused by name.
static FailureOr<Window> readWindow(ImportContext &cx,
                                    const onnx::NodeProto &node, size_t s) {
  if (const auto *a = findAttr(node, "auto_pad"))
    if (a->s() != "NOTSET")
      return cx.nodeError(node) << "auto_pad " << a->s()
                                << " is not supported (only NOTSET, with "
                                   "explicit pads)";
  Window w;
  w.kernel = intsAttr(node, "kernel_shape", {});
  if (w.kernel.size() != s)
    return cx.nodeError(node)
           << "kernel_shape must have " << s << " values, one per spatial axis";
  w.strides = intsAttr(node, "strides", std::vector<int64_t>(s, 1));
  w.dilations = intsAttr(node, "dilations", std::vector<int64_t>(s, 1));
  w.pads = intsAttr(node, "pads", std::vector<int64_t>(2 * s, 0));
  if (w.strides.size() != s || w.dilations.size() != s ||
      w.pads.size() != 2 * s)
    return cx.nodeError(node) << "strides and dilations must have " << s
                              << " values and pads " << 2 * s;
  w.ceil = intAttr(node, "ceil_mode", 0) != 0;
  return w;
}

static LogicalResult importMaxPool(ImportContext &cx,
                                   const onnx::NodeProto &node) {
  FailureOr<Value> x = poolInput(cx, node);
  if (failed(x))
    return failure();
  if (node.output_size() > 1 && !node.output(1).empty())
    return cx.nodeError(node) << "the Indices output is not supported (the "
                                 "gradient keeps its own)";
  if (intAttr(node, "storage_order", 0) != 0)
    return cx.nodeError(node) << "storage_order 1 (column major) is not "
                                 "supported";
  ArrayRef<int64_t> in = shapeOf(*x);
  FailureOr<Window> w = readWindow(cx, node, in.size() - 2);
  if (failed(w))
    return failure();
  FailureOr<SmallVector<int64_t>> out = poolShape(cx, node, in, *w);
  if (failed(out))
    return failure();
  auto op = nn::MaxPoolOp::create(cx.getBuilder(), cx.nodeLoc(node), *x,
                                  cx.f32(*out), w->kernel, w->strides, w->pads,
                                  w->dilations, w->ceil);
  cx.define(node, 0, op.getOutput());
  return success();
}

static LogicalResult importAveragePool(ImportContext &cx,
                                       const onnx::NodeProto &node) {
  FailureOr<Value> x = poolInput(cx, node);
  if (failed(x))
    return failure();
  ArrayRef<int64_t> in = shapeOf(*x);
  FailureOr<Window> w = readWindow(cx, node, in.size() - 2);
  if (failed(w))
    return failure();
  if (llvm::any_of(w->dilations, [](int64_t d) { return d != 1; }))
    return cx.nodeError(node) << "dilations other than 1 are not supported "
                                 "for AveragePool";
  FailureOr<SmallVector<int64_t>> out = poolShape(cx, node, in, *w);
  if (failed(out))
    return failure();
  OpBuilder &b = cx.getBuilder();
  cx.define(node, 0,
            nn::AvgPoolOp::create(b, cx.nodeLoc(node), cx.f32(*out), *x,
                                  w->kernel, w->strides, w->pads, w->dilations,
                                  w->ceil,
                                  intAttr(node, "count_include_pad", 0) != 0));
  return success();
}

/// GlobalAveragePool and GlobalMaxPool: one window over every spatial axis.
template <bool isMax>
static LogicalResult importGlobalPool(ImportContext &cx,
                                      const onnx::NodeProto &node) {
  FailureOr<Value> x = poolInput(cx, node);
  if (failed(x))
    return failure();
  ArrayRef<int64_t> in = shapeOf(*x);
  size_t s = in.size() - 2;
  std::vector<int64_t> kernel(in.begin() + 2, in.end()), ones(s, 1),
      zeros(2 * s, 0);
  SmallVector<int64_t> out(in.begin(), in.begin() + 2);
  out.append(s, 1);
  OpBuilder &b = cx.getBuilder();
  if constexpr (isMax)
    cx.define(node, 0,
              nn::MaxPoolOp::create(b, cx.nodeLoc(node), *x, cx.f32(out),
                                    kernel, ones, zeros, ones, false)
                  .getOutput());
  else
    cx.define(node, 0,
              nn::AvgPoolOp::create(b, cx.nodeLoc(node), cx.f32(out), *x,
                                    kernel, ones, zeros, ones, false, false));
  return success();
}

/// Pad, mode constant: pads (an input from opset 11, before that an
/// attribute) and the value compile-time constants; no `axes` input.
static LogicalResult importPad(ImportContext &cx, const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0);
  if (failed(x))
    return failure();
  if (const auto *a = findAttr(node, "mode"))
    if (a->s() != "constant")
      return cx.nodeError(node)
             << "mode " << a->s() << " is not supported (only constant)";
  if (node.input_size() > 3 && !node.input(3).empty())
    return cx.nodeError(node) << "the axes input is not supported";
  std::vector<int64_t> pads;
  float value = floatAttr(node, "value", 0.0f);
  if (findAttr(node, "pads")) {
    pads = intsAttr(node, "pads", {});
  } else {
    FailureOr<std::vector<int64_t>> p = cx.intsOperand(node, 1, "pads");
    if (failed(p))
      return failure();
    pads = std::move(*p);
    if (node.input_size() > 2 && !node.input(2).empty()) {
      const ConstTensor *c = cx.constantOf(node, 2);
      if (!c || !c->isFloat || c->numElements() != 1)
        return cx.nodeError(node) << "constant_value must be a compile-time "
                                     "float32 scalar";
      value = c->f[0];
    }
  }
  ArrayRef<int64_t> in = shapeOf(*x);
  int64_t rank = in.size();
  if (static_cast<int64_t>(pads.size()) != 2 * rank)
    return cx.nodeError(node)
           << "pads has " << pads.size() << " values; expected " << 2 * rank
           << " for rank " << rank;
  SmallVector<int64_t> out(in);
  for (int64_t d = 0; d < rank; ++d) {
    if (pads[d] < 0 || pads[rank + d] < 0)
      return cx.nodeError(node)
             << "negative pads (cropping) are not "
                "supported: axis "
             << d << " has pads " << pads[d] << ", " << pads[rank + d];
    out[d] += pads[d] + pads[rank + d];
  }
  OpBuilder &b = cx.getBuilder();
  cx.define(node, 0,
            nn::PadOp::create(b, cx.nodeLoc(node), cx.f32(out), *x,
                              b.getDenseI64ArrayAttr(pads),
                              b.getF32FloatAttr(value)));
  return success();
}

void gpipe::importer::registerPoolOps(OpTable &table) {
  table.add("MaxPool", importMaxPool);
  table.add("AveragePool", importAveragePool);
  table.add("GlobalAveragePool", importGlobalPool<false>);
  table.add("GlobalMaxPool", importGlobalPool<true>);
  table.add("Pad", importPad);
}

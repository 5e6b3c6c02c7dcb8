// Convolution ONNX ops: Conv with 1 or 2 spatial dims (strides, explicit or
// auto_pad padding, dilations, group; kernel_shape inferred from the weight).
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

/// The ints attribute `name`, or `count` copies of `dflt` when absent.
static SmallVector<int64_t> intsAttr(const onnx::NodeProto &node,
                                     StringRef name, int64_t count,
                                     int64_t dflt) {
  if (const onnx::AttributeProto *a = findAttr(node, name))
    return SmallVector<int64_t>(a->ints().begin(), a->ints().end());
  return SmallVector<int64_t>(count, dflt);
}

static LogicalResult importConv(ImportContext &cx,
                                const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.floatValueOf(node, 0), w = cx.floatValueOf(node, 1);
  if (failed(x) || failed(w))
    return failure();
  FailureOr<Value> bias = cx.optionalFloatValueOf(node, 2);
  if (failed(bias))
    return failure();
  auto xs = shapeOf(*x), ws = shapeOf(*w);
  int64_t rank = xs.size();
  if (rank != 3 && rank != 4)
    return cx.nodeError(node)
           << "Conv supports 1-D and 2-D convolutions (input rank 3 or 4), "
              "got input "
           << shapeStr(xs);
  int64_t s = rank - 2;
  if (static_cast<int64_t>(ws.size()) != rank)
    return cx.nodeError(node) << "Conv weight " << shapeStr(ws)
                              << " must have the input's rank " << rank;
  ArrayRef<int64_t> kernel = ws.drop_front(2);
  if (findAttr(node, "kernel_shape") &&
      intsAttr(node, "kernel_shape", s, 0) != SmallVector<int64_t>(kernel))
    return cx.nodeError(node)
           << "Conv kernel_shape does not match the weight " << shapeStr(ws);
  SmallVector<int64_t> strides = intsAttr(node, "strides", s, 1);
  SmallVector<int64_t> dilations = intsAttr(node, "dilations", s, 1);
  SmallVector<int64_t> pads = intsAttr(node, "pads", 2 * s, 0);
  if (static_cast<int64_t>(strides.size()) != s ||
      static_cast<int64_t>(dilations.size()) != s ||
      static_cast<int64_t>(pads.size()) != 2 * s)
    return cx.nodeError(node) << "Conv needs " << s << " strides, " << s
                              << " dilations and " << 2 * s << " pads";
  for (int64_t i = 0; i < s; ++i)
    if (strides[i] < 1 || dilations[i] < 1 || pads[i] < 0 || pads[s + i] < 0)
      return cx.nodeError(node) << "Conv strides and dilations must be >= 1 "
                                   "and pads >= 0";
  std::string autoPad = "NOTSET";
  if (const onnx::AttributeProto *a = findAttr(node, "auto_pad"))
    autoPad = a->s();
  if (autoPad != "NOTSET") {
    if (findAttr(node, "pads"))
      return cx.nodeError(node)
             << "Conv has both auto_pad " << autoPad << " and pads";
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      // Output ceil(in / stride); the odd unit of padding at the end
      // (SAME_UPPER) or the beginning (SAME_LOWER).
      for (int64_t i = 0; i < s; ++i) {
        int64_t in = xs[2 + i], out = (in + strides[i] - 1) / strides[i];
        int64_t span = dilations[i] * (kernel[i] - 1) + 1;
        int64_t total =
            std::max<int64_t>(0, (out - 1) * strides[i] + span - in);
        int64_t small = total / 2;
        pads[i] = autoPad == "SAME_UPPER" ? small : total - small;
        pads[s + i] = total - pads[i];
      }
    } else if (autoPad != "VALID") {
      return cx.nodeError(node) << "Conv auto_pad '" << autoPad
                                << "' is not one of NOTSET, VALID, "
                                   "SAME_UPPER, SAME_LOWER";
    }
  }
  int64_t group = intAttr(node, "group", 1);
  int64_t c = xs[1], f = ws[0];
  if (group < 1 || c % group != 0 || f % group != 0 || ws[1] != c / group)
    return cx.nodeError(node)
           << "Conv group " << group << " does not fit input " << shapeStr(xs)
           << " and weight " << shapeStr(ws);
  if (*bias && shapeOf(*bias) != ArrayRef<int64_t>{f})
    return cx.nodeError(node) << "Conv bias " << shapeStr(shapeOf(*bias))
                              << " must be [" << f << "]";
  SmallVector<int64_t> out = {xs[0], f};
  for (int64_t i = 0; i < s; ++i) {
    int64_t span = dilations[i] * (kernel[i] - 1) + 1;
    int64_t padded = xs[2 + i] + pads[i] + pads[s + i];
    if (padded < span)
      return cx.nodeError(node)
             << "Conv kernel extent " << span << " exceeds the padded input ("
             << padded << ") on spatial dim " << i;
    out.push_back((padded - span) / strides[i] + 1);
  }
  OpBuilder &b = cx.getBuilder();
  cx.define(node, 0,
            nn::ConvOp::create(
                b, cx.nodeLoc(node), cx.f32(out), *x, *w, *bias,
                b.getDenseI64ArrayAttr(strides), b.getDenseI64ArrayAttr(pads),
                b.getDenseI64ArrayAttr(dilations), b.getI64IntegerAttr(group)));
  return success();
}

void gpipe::importer::registerConvOps(OpTable &table) {
  table.add("Conv", importConv);
}

// ONNX Attention (opset 23; torch >= 2.9 exports F.scaled_dot_product_attention
// as one at opset_version=23) onto the fused nn.attention: Q, K, V as
// [B, heads, T, head] or [B, T, heads * head] (q_num_heads/kv_num_heads),
// is_causal, a constant mask (bool: true takes part; float: 0 or -inf
// added), the scale. Not supported, each with its own error: past key/value
// (a KV cache is inference), the present and qk outputs, fewer key/value
// heads than query heads (grouped-query attention), softcap.
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"

#include <cmath>

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

namespace {

/// [B, T, heads * head] as [B, heads, T, head].
Value splitHeads(ImportContext &cx, const onnx::NodeProto &node, Value x,
                 int64_t heads) {
  llvm::ArrayRef<int64_t> s = shapeOf(x);
  OpBuilder &b = cx.getBuilder();
  Location loc = cx.nodeLoc(node);
  Value v = createReshape(b, loc, x, {s[0], s[1], heads, s[2] / heads});
  return nn::TransposeOp::create(b, loc, cx.f32({s[0], heads, s[1], s[2] / heads}),
                                 v, llvm::ArrayRef<int64_t>{0, 2, 1, 3});
}

/// The [Tq, Tk] mask of nn.attention (non-zero: masked) from the constant
/// `attn_mask` (input 3) and `is_causal`; a null Value when nothing is
/// masked by either.
FailureOr<Value> maskOf(ImportContext &cx, const onnx::NodeProto &node,
                        int64_t tq, int64_t tk) {
  std::vector<float> masked(tq * tk, 0.0f);
  bool any = false;
  if (intAttr(node, "is_causal", 0)) {
    // ONNX: the upper-left aligned lower triangle takes part.
    for (int64_t i = 0; i < tq; ++i)
      for (int64_t j = i + 1; j < tk; ++j)
        masked[i * tk + j] = 1.0f, any = true;
  }
  if (node.input_size() > 3 && !node.input(3).empty()) {
    const ConstTensor *m = cx.constantOf(node, 3);
    if (!m)
      return cx.nodeError(node)
                 << "attn_mask ('" << node.input(3)
                 << "') must be a constant (a causal or padding pattern "
                    "computed from no input); masks computed per sample are "
                    "not supported",
             failure();
    llvm::ArrayRef<int64_t> ms(m->shape);
    if (ms.size() < 2 || ms.take_back(2) != llvm::ArrayRef<int64_t>{tq, tk} ||
        llvm::any_of(ms.drop_back(2), [](int64_t d) { return d != 1; }))
      return cx.nodeError(node)
                 << "attn_mask of shape " << shapeStr(ms)
                 << " is not one [" << tq << ", " << tk
                 << "] matrix shared by every sample and head",
             failure();
    for (int64_t k = 0; k < tq * tk; ++k) {
      double v = elementAt(*m, k);
      bool off;
      if (!m->isFloat)
        off = v == 0.0; // bool: true takes part
      else if (v == 0.0)
        off = false;
      else if (std::isinf(v) && v < 0)
        off = true;
      else
        return cx.nodeError(node)
                   << "attn_mask: a float mask may only hold 0 and -inf "
                      "(it masks, it does not bias), got "
                   << v,
               failure();
      if (off)
        masked[k] = 1.0f, any = true;
    }
  }
  if (!any)
    return Value();
  return Value(nn::ConstantOp::create(
      cx.getBuilder(), cx.nodeLoc(node),
      DenseElementsAttr::get(cx.f32({tq, tk}), llvm::ArrayRef<float>(masked))));
}

LogicalResult importAttention(ImportContext &cx, const onnx::NodeProto &node) {
  for (int k = 4; k < node.input_size(); ++k)
    if (!node.input(k).empty())
      return cx.nodeError(node)
             << "past_key/past_value (a KV cache) are not supported: training "
                "graphs have none";
  for (int k = 1; k < node.output_size(); ++k)
    if (!node.output(k).empty())
      return cx.nodeError(node)
             << "only output 0 (Y) is supported; output " << k << " ('"
             << node.output(k) << "') is used";
  if (floatAttr(node, "softcap", 0.0f) != 0.0f)
    return cx.nodeError(node) << "softcap is not supported";
  FailureOr<Value> q = cx.floatValueOf(node, 0), k = cx.floatValueOf(node, 1),
                   v = cx.floatValueOf(node, 2);
  if (failed(q) || failed(k) || failed(v))
    return failure();
  int64_t rank = shapeOf(*q).size();
  if (rank != 3 && rank != 4)
    return cx.nodeError(node) << "Q must be rank 3 or 4, got "
                              << shapeStr(shapeOf(*q));
  if (shapeOf(*k).size() != static_cast<size_t>(rank) ||
      shapeOf(*v).size() != static_cast<size_t>(rank))
    return cx.nodeError(node) << "Q, K and V must have one rank, got "
                              << shapeStr(shapeOf(*q)) << ", "
                              << shapeStr(shapeOf(*k)) << " and "
                              << shapeStr(shapeOf(*v));
  Value qh = *q, kh = *k, vh = *v;
  if (rank == 3) {
    int64_t qn = intAttr(node, "q_num_heads", 0),
            kvn = intAttr(node, "kv_num_heads", 0);
    if (qn <= 0 || kvn <= 0)
      return cx.nodeError(node) << "rank-3 Q, K, V need q_num_heads and "
                                   "kv_num_heads";
    if (qn != kvn)
      return cx.nodeError(node)
             << "q_num_heads " << qn << " and kv_num_heads " << kvn
             << " differ (grouped-query attention is not supported)";
    for (Value x : {*q, *k, *v})
      if (shapeOf(x)[2] % qn != 0)
        return cx.nodeError(node)
               << "hidden size " << shapeOf(x)[2] << " of "
               << shapeStr(shapeOf(x)) << " is not a multiple of "
               << qn << " heads";
    qh = splitHeads(cx, node, *q, qn);
    kh = splitHeads(cx, node, *k, qn);
    vh = splitHeads(cx, node, *v, qn);
  }
  auto qs = shapeOf(qh), ks = shapeOf(kh), vs = shapeOf(vh);
  if (qs[0] != ks[0] || qs[0] != vs[0] || ks[2] != vs[2] || qs[3] != ks[3])
    return cx.nodeError(node) << "Q " << shapeStr(qs) << ", K " << shapeStr(ks)
                              << " and V " << shapeStr(vs)
                              << " do not fit [B, heads, T, head]";
  if (qs[1] != ks[1] || qs[1] != vs[1])
    return cx.nodeError(node)
           << qs[1] << " query heads and " << ks[1]
           << " key/value heads differ (grouped-query attention is not "
              "supported)";
  float scale = floatAttr(node, "scale", 0.0f);
  if (!findAttr(node, "scale"))
    scale = 1.0f / std::sqrt(static_cast<float>(qs[3]));
  FailureOr<Value> mask = maskOf(cx, node, qs[2], ks[2]);
  if (failed(mask))
    return failure();
  OpBuilder &b = cx.getBuilder();
  Location loc = cx.nodeLoc(node);
  llvm::SmallVector<int64_t> outShape{qs[0], qs[1], qs[2], vs[3]};
  auto att = nn::AttentionOp::create(b, loc, cx.f32(outShape),
                                     cx.f32({qs[0], qs[1], qs[2]}), qh, kh, vh,
                                     *mask, b.getF32FloatAttr(scale));
  Value y = att.getOutput();
  if (rank == 3) {
    y = nn::TransposeOp::create(b, loc,
                                cx.f32({qs[0], qs[2], qs[1], vs[3]}), y,
                                llvm::ArrayRef<int64_t>{0, 2, 1, 3});
    y = createReshape(b, loc, y, {qs[0], qs[2], qs[1] * vs[3]});
  }
  cx.define(node, 0, y);
  return success();
}

} // namespace

void gpipe::importer::registerAttentionOps(OpTable &table) {
  table.add("Attention", importAttention);
}

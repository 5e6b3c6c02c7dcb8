// gpipe-fuse-layer-norm: the layer normalization torch exports decomposed
// below opset 17 becomes one nn.layer_norm.
#include "passes/FusionUtils.h"
#include "passes/Passes.h"

namespace gpipe {
#define GEN_PASS_DEF_FUSELAYERNORM
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

/// A ReduceMean as the importer writes it, `nn.div(nn.reduce_to(in), N)`
/// with `N` the count of summed elements: its input, if the reduction sums
/// exactly the trailing axes from some axis (`axis`), keeping them as 1s,
/// and the reduction is read by the division alone. `ops` gets the two ops.
Value trailingMeanOf(Value mean, int64_t &axis,
                     SmallVectorImpl<Operation *> &ops) {
  auto div = mean.getDefiningOp<nn::DivOp>();
  if (!div)
    return {};
  auto sum = div.getLhs().getDefiningOp<nn::ReduceToOp>();
  if (!sum || !sum.getOutput().hasOneUse())
    return {};
  ArrayRef<int64_t> in = shapeOf(sum.getInput()), out = shapeOf(sum);
  if (in.size() != out.size())
    return {};
  // The first summed axis; every axis after it must be kept as a 1.
  axis = -1;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] != out[d] && axis < 0)
      axis = d;
    if (axis >= 0 && out[d] != 1)
      return {};
  }
  if (axis < 0)
    return {};
  int64_t count = 1;
  for (int64_t size : in.drop_front(axis))
    count *= size;
  std::optional<float> n = scalarOperand(div, div.getRhs(), div.getLhs());
  if (!n || *n != static_cast<float>(count))
    return {};
  ops.append({sum, div});
  return sum.getInput();
}

/// The operand of `op` (a binary op) other than `v`, when `op` reads `v`
/// once.
Value otherOperand(Operation *op, Value v) {
  Value l = op->getOperand(0), r = op->getOperand(1);
  if (l == v && r != v)
    return r;
  if (r == v && l != v)
    return l;
  return {};
}

/// One decomposed layer normalization:
/// `(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) [* scale [+ bias]]`.
struct Match {
  Value input, scale, bias;
  int64_t axis = 0;
  float epsilon = 0;
  /// The ops replaced, in program order; the last defines the result.
  SmallVector<Operation *> ops;
};

/// Matches the pattern whose normalizing division is `norm`. Every value
/// computed inside it is read only inside it; shapes, axes and constants
/// are exactly those of a layer normalization, or nothing matches.
std::optional<Match> matchLayerNorm(nn::DivOp norm) {
  Match m;
  SmallVector<Operation *> &ops = m.ops;
  // norm = centered / sqrt(variance + eps)
  auto sqrt = norm.getRhs().getDefiningOp<nn::SqrtOp>();
  auto centered = norm.getLhs().getDefiningOp<nn::SubOp>();
  if (!sqrt || !sqrt.getOutput().hasOneUse() || !centered)
    return std::nullopt;
  auto epsAdd = sqrt.getInput().getDefiningOp<nn::AddOp>();
  if (!epsAdd || !epsAdd.getOutput().hasOneUse())
    return std::nullopt;
  Value variance;
  std::optional<float> eps;
  for (auto [v, c] : {std::pair(epsAdd.getLhs(), epsAdd.getRhs()),
                      std::pair(epsAdd.getRhs(), epsAdd.getLhs())})
    if (!eps && (eps = scalarOperand(epsAdd, c, v)))
      variance = v;
  if (!eps || !variance.hasOneUse())
    return std::nullopt;
  m.epsilon = *eps;
  // centered = x - mean(x), read by the square and the normalization only.
  int64_t meanAxis;
  m.input = centered.getLhs();
  Value x = m.input;
  if (!centered.getRhs().hasOneUse() ||
      trailingMeanOf(centered.getRhs(), meanAxis, ops) != x)
    return std::nullopt;
  Type type = x.getType();
  if (centered.getType() != type || norm.getType() != type)
    return std::nullopt;
  ops.push_back(centered);
  // variance = mean(centered^2) over the same axes.
  if (!llvm::hasNItems(centered->getUses(), 2))
    return std::nullopt;
  Operation *other = *centered->getUsers().begin();
  if (other == norm)
    other = *std::next(centered->getUsers().begin());
  auto square = dyn_cast<nn::PowOp>(other);
  if (!square || square.getLhs() != centered ||
      !square.getOutput().hasOneUse() ||
      scalarOperand(square, square.getRhs(), centered) != 2.0f)
    return std::nullopt;
  ops.push_back(square);
  int64_t varianceAxis;
  if (trailingMeanOf(variance, varianceAxis, ops) != square.getOutput() ||
      varianceAxis != meanAxis ||
      variance.getType() != centered.getRhs().getType())
    return std::nullopt;
  ops.append({epsAdd, sqrt, norm});
  m.axis = meanAxis;
  // Then optionally `* scale` and `+ bias`, each of the normalized shape
  // (from an earlier axis when the axes between are 1s, as for torch's
  // normalized_shape (1, n)).
  ArrayRef<int64_t> shape = shapeOf(x);
  auto affine = [&](Value out, auto opTag) -> Value {
    using OpTy = decltype(opTag);
    if (!out.hasOneUse())
      return {};
    auto op = dyn_cast<OpTy>(*out.getUsers().begin());
    Value p = op ? otherOperand(op, out) : Value();
    if (!p || op.getType() != type)
      return {};
    int64_t axis = static_cast<int64_t>(shape.size()) -
                   static_cast<int64_t>(shapeOf(p).size());
    if (axis < 0 || axis > m.axis || shapeOf(p) != shape.drop_front(axis) ||
        llvm::any_of(shape.slice(axis, m.axis - axis),
                     [](int64_t d) { return d != 1; }))
      return {};
    if (m.scale && axis != m.axis)
      return {};
    m.axis = axis;
    ops.push_back(op);
    return p;
  };
  if ((m.scale = affine(norm.getOutput(), nn::MulOp())))
    m.bias = affine(ops.back()->getResult(0), nn::AddOp());
  if (!orderPattern(ops, norm))
    return std::nullopt;
  return m;
}

/// Replaces the matched ops by one nn.layer_norm (a scale of ones when the
/// pattern has none), at the last of them, located at the first (the mean's
/// reduction: the node where the user's normalization starts).
void rewrite(const Match &m) {
  Operation *last = m.ops.back();
  OpBuilder b(last);
  Location loc = m.ops.front()->getLoc();
  ArrayRef<int64_t> shape = shapeOf(m.input);
  Type f32 = b.getF32Type();
  Value scale = m.scale;
  if (!scale) {
    auto type = RankedTensorType::get(shape.drop_front(m.axis), f32);
    scale = nn::ConstantOp::create(b, loc, DenseElementsAttr::get(type, 1.0f));
  }
  auto stats = RankedTensorType::get(shape.take_front(m.axis), f32);
  auto ln = nn::LayerNormOp::create(
      b, loc, m.input.getType(), stats, stats, m.input, scale, m.bias,
      b.getI64IntegerAttr(m.axis), b.getF32FloatAttr(m.epsilon));
  ln->setDiscardableAttrs(last->getDiscardableAttrDictionary());
  last->getResult(0).replaceAllUsesWith(ln.getOutput());
  erasePattern(m.ops);
}

struct FuseLayerNormPass : gpipe::impl::FuseLayerNormBase<FuseLayerNormPass> {
  void runOnOperation() override {
    SmallVector<nn::DivOp> candidates;
    getOperation().walk([&](nn::DivOp div) {
      if (div.getRhs().getDefiningOp<nn::SqrtOp>())
        candidates.push_back(div);
    });
    // A rewrite erases only its own pattern's ops, never another candidate
    // (a candidate's division is no other pattern's op).
    for (nn::DivOp div : candidates)
      if (std::optional<Match> m = matchLayerNorm(div))
        rewrite(*m);
  }
};

} // namespace

// gpipe-fuse-attention: scaled dot-product attention exported as a chain of
// batched products, a scale, a mask and a softmax becomes one nn.attention.
#include "passes/FusionUtils.h"
#include "passes/Passes.h"

namespace gpipe {
#define GEN_PASS_DEF_FUSEATTENTION
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

/// Whether `v` is computed from constants and parameters only (no graph
/// input: it carries no batch), through ops without regions.
bool isGraphConstant(Value v) {
  SmallVector<Value> work{v};
  llvm::SmallPtrSet<Operation *, 8> seen;
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || def->getNumRegions() != 0)
      return false;
    if (!seen.insert(def).second)
      continue;
    llvm::append_range(work, def->getOperands());
  }
  return true;
}

/// Whether a mask of shape `mask` applies to scores of shape `scores` as one
/// [Tq, Tk] matrix: [1.., Tq, Tk], no wider than the scores.
bool isMatrixMask(ArrayRef<int64_t> mask, ArrayRef<int64_t> scores) {
  return mask.size() >= 2 && mask.size() <= scores.size() &&
         mask.take_back(2) == scores.take_back(2) &&
         llvm::all_of(mask.drop_back(2), [](int64_t d) { return d == 1; });
}

/// The values of an additive float mask that only masks: a constant (or a
/// constant times a splat 1, as torch's `baddbmm` exports it) whose
/// entries are all 0 or -inf. `ops` gets the multiplication when only the
/// mask reads it.
DenseElementsAttr additiveMask(Value v, SmallVectorImpl<Operation *> &ops) {
  auto constant = [](Value c) {
    auto op = c.getDefiningOp<nn::ConstantOp>();
    return op ? dyn_cast<DenseElementsAttr>(op.getValue()) : nullptr;
  };
  DenseElementsAttr values = constant(v);
  auto mul = v.getDefiningOp<nn::MulOp>();
  if (mul)
    for (auto [c, one] : {std::pair(mul.getLhs(), mul.getRhs()),
                          std::pair(mul.getRhs(), mul.getLhs())})
      if (!values && scalarOperand(mul, one, c) == 1.0f)
        values = constant(c);
  if (!values || !values.getElementType().isF32() ||
      !llvm::all_of(values.getValues<float>(), [](float x) {
        return x == 0.0f || (std::isinf(x) && x < 0);
      }))
    return nullptr;
  if (mul && v.hasOneUse())
    ops.push_back(mul);
  return values;
}

/// A splat scale of `x`, `x / c` or `x * c` (either side), read only by the
/// pattern: the scaled value, with `scale` multiplied by 1/c or c.
Value unscaled(Value x, float &scale, SmallVectorImpl<Operation *> &ops) {
  if (!x.hasOneUse())
    return {};
  if (auto div = x.getDefiningOp<nn::DivOp>()) {
    std::optional<float> c = scalarOperand(div, div.getRhs(), div.getLhs());
    if (!c || *c == 0.0f)
      return {};
    scale /= *c;
    ops.push_back(div);
    return div.getLhs();
  }
  if (auto mul = x.getDefiningOp<nn::MulOp>()) {
    for (auto [v, c] : {std::pair(mul.getLhs(), mul.getRhs()),
                        std::pair(mul.getRhs(), mul.getLhs())})
      if (std::optional<float> f = scalarOperand(mul, c, v)) {
        scale *= *f;
        ops.push_back(mul);
        return v;
      }
  }
  return {};
}

/// One attention: `softmax(mask(s * scale), -1) @ v` with `s = q @ k^T`,
/// the mask `where(mask, -inf, .)` or `. + additive`.
struct Match {
  explicit Match(Location loc) : loc(loc) {}
  Value q, k, v, mask;
  /// An additive mask's values (0 or -inf), which become a 0/1 mask.
  DenseElementsAttr additive;
  /// Without transB, the product's stored right operand k^T [*, d, Tk]
  /// (torch composes `k.transpose(1, 2).transpose(-2, -1)` into one
  /// Transpose that the importer does not fold); k is then made from it.
  Value kT;
  float scale = 1.0f;
  /// The Q K^T product's location, where the user's attention starts.
  Location loc;
  /// The ops replaced, in program order; the last defines the result.
  SmallVector<Operation *> ops;
};

/// Matches the attention whose second product (P V) is `pv`. Every value
/// computed inside it is read only inside it, or nothing matches.
std::optional<Match> matchAttention(nn::BatchMatMulOp pv) {
  Match m(pv.getLoc());
  if (pv.getTransA() || pv.getTransB())
    return std::nullopt;
  auto softmax = pv.getA().getDefiningOp<nn::SoftmaxOp>();
  if (!softmax || !softmax.getOutput().hasOneUse())
    return std::nullopt;
  Type scoreType = softmax.getType();
  int64_t rank = shapeOf(softmax.getOutput()).size();
  if (static_cast<int64_t>(softmax.getAxis()) != rank - 1)
    return std::nullopt;
  SmallVector<Operation *> &ops = m.ops;
  ops.append({softmax, pv});
  Value x = softmax.getInput();
  // Optional mask: where(cond, -inf, x), cond without a batch and
  // broadcasting to the scores from [1.., Tq, Tk]; or x + additive, a
  // constant of 0s and -infs of that shape (torch's nn.MultiheadAttention).
  if (auto where = x.getDefiningOp<nn::WhereOp>()) {
    std::optional<float> fill = nn::splatValue(where.getLhs());
    if (!x.hasOneUse() || !fill || !std::isinf(*fill) || *fill > 0 ||
        where.getType() != scoreType || where.getRhs().getType() != scoreType ||
        !isMatrixMask(shapeOf(where.getCondition()), shapeOf(x)) ||
        !isGraphConstant(where.getCondition()))
      return std::nullopt;
    m.mask = where.getCondition();
    ops.push_back(where);
    x = where.getRhs();
  } else if (auto add = x.getDefiningOp<nn::AddOp>()) {
    if (!x.hasOneUse() || add.getType() != scoreType)
      return std::nullopt;
    for (auto [s, mk] : {std::pair(add.getLhs(), add.getRhs()),
                         std::pair(add.getRhs(), add.getLhs())})
      if (!m.additive && s.getType() == scoreType &&
          isMatrixMask(shapeOf(mk), shapeOf(x)) &&
          (m.additive = additiveMask(mk, ops)))
        x = s;
    if (!m.additive)
      return std::nullopt;
    ops.push_back(add);
  }
  // Optional scale of the scores: s / c or s * c (either side), c a splat
  // constant (torch's nn.MultiheadAttention: * 1).
  if (x.getDefiningOp<nn::DivOp>() || x.getDefiningOp<nn::MulOp>())
    if (!(x = unscaled(x, m.scale, ops)))
      return std::nullopt;
  auto qk = x.getDefiningOp<nn::BatchMatMulOp>();
  if (!qk || !x.hasOneUse() || qk.getTransA() || qk.getType() != scoreType)
    return std::nullopt;
  ops.push_back(qk);
  m.loc = qk.getLoc();
  m.q = qk.getA();
  // Optional scale of the queries (torch's nn.MultiheadAttention: q /
  // sqrt(dh) before the product).
  if (m.q.getDefiningOp<nn::DivOp>() || m.q.getDefiningOp<nn::MulOp>())
    if (Value q = unscaled(m.q, m.scale, ops))
      m.q = q;
  m.v = pv.getB();
  SmallVector<int64_t> k(shapeOf(qk.getB()));
  if (qk.getTransB()) {
    m.k = qk.getB();
  } else {
    m.kT = qk.getB();
    if (k.size() >= 2)
      std::swap(k[k.size() - 2], k[k.size() - 1]);
  }
  // q, k and v: the same leading (batch, head) axes, no broadcasting.
  ArrayRef<int64_t> q = shapeOf(m.q), v = shapeOf(m.v);
  if (q.size() != static_cast<size_t>(rank) || k.size() != q.size() ||
      v.size() != q.size() || ArrayRef(k).drop_back(2) != q.drop_back(2) ||
      v.drop_back(2) != q.drop_back(2) || v[rank - 2] != k[rank - 2])
    return std::nullopt;
  if (!orderPattern(ops, pv))
    return std::nullopt;
  return m;
}

/// Replaces the matched ops by one nn.attention at the last of them (P V),
/// located at the Q K^T product (where the user's attention starts). A mask
/// of shape [1.., Tq, Tk] is reshaped to [Tq, Tk]; a constant one becomes a
/// constant of that shape, an additive one a 0/1 constant.
void rewrite(const Match &m) {
  Operation *last = m.ops.back();
  OpBuilder b(last);
  Location loc = m.loc;
  Value mask = m.mask;
  if (m.additive) {
    // -inf -> 1 (masked), 0 -> 0, as a [Tq, Tk] constant.
    auto type = RankedTensorType::get(
        m.additive.getType().getShape().take_back(2), b.getF32Type());
    SmallVector<float> flags;
    for (float x : m.additive.getValues<float>())
      flags.push_back(x == 0.0f ? 0.0f : 1.0f);
    mask = nn::ConstantOp::create(
        b, loc, DenseElementsAttr::get(type, ArrayRef<float>(flags)));
  } else if (mask && shapeOf(mask).size() != 2) {
    auto type =
        RankedTensorType::get(shapeOf(mask).take_back(2), b.getF32Type());
    auto c = mask.getDefiningOp<nn::ConstantOp>();
    auto dense = c ? dyn_cast<DenseElementsAttr>(c.getValue()) : nullptr;
    b.setInsertionPointAfterValue(mask);
    mask = dense ? Value(nn::ConstantOp::create(b, loc, dense.reshape(type)))
                 : Value(nn::ReshapeOp::create(b, loc, type, mask));
    b.setInsertionPoint(last);
  }
  ArrayRef<int64_t> q = shapeOf(m.q);
  Value k = m.k;
  nn::TransposeOp oldTranspose;
  if (m.kT) {
    // k = k^T with its last two axes swapped, composed with the transpose
    // that made k^T (none at all when the two cancel).
    int64_t rank = q.size();
    SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
    std::swap(perm[rank - 2], perm[rank - 1]);
    Value src = m.kT;
    if ((oldTranspose = src.getDefiningOp<nn::TransposeOp>())) {
      ArrayRef<int64_t> inner = oldTranspose.getPermutation();
      for (int64_t &p : perm)
        p = inner[p];
      src = oldTranspose.getInput();
    }
    SmallVector<int64_t> shape(shapeOf(m.kT));
    std::swap(shape[rank - 2], shape[rank - 1]);
    k = llvm::equal(perm, llvm::seq<int64_t>(0, rank))
            ? src
            : nn::TransposeOp::create(
                  b, oldTranspose ? oldTranspose.getLoc() : loc,
                  RankedTensorType::get(shape, b.getF32Type()), src, perm);
  }
  auto lse = RankedTensorType::get(q.drop_back(), b.getF32Type());
  auto att =
      nn::AttentionOp::create(b, loc, last->getResult(0).getType(), lse, m.q, k,
                              m.v, mask, b.getF32FloatAttr(m.scale));
  att->setDiscardableAttrs(last->getDiscardableAttrDictionary());
  last->getResult(0).replaceAllUsesWith(att.getOutput());
  // The pattern's constants go too once nothing else reads them (a constant
  // mask among them: its [Tq, Tk] copy replaced it).
  erasePattern(m.ops);
  if (oldTranspose && oldTranspose->use_empty())
    oldTranspose->erase();
}

struct FuseAttentionPass : gpipe::impl::FuseAttentionBase<FuseAttentionPass> {
  void runOnOperation() override {
    SmallVector<nn::BatchMatMulOp> candidates;
    getOperation().walk([&](nn::BatchMatMulOp pv) {
      if (pv.getA().getDefiningOp<nn::SoftmaxOp>())
        candidates.push_back(pv);
    });
    // In program order: a pattern's ops all come before its P V product,
    // so a rewrite never erases a candidate still to be matched (a later
    // pattern's Q K^T may be an earlier candidate, already done).
    for (nn::BatchMatMulOp pv : candidates)
      if (std::optional<Match> m = matchAttention(pv))
        rewrite(*m);
  }
};

} // namespace

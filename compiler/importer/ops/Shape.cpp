// Shape and data-movement ONNX ops: Reshape Flatten Squeeze Unsqueeze (as
// nn.reshape, shape operands constant), Transpose, Concat, Expand (float32,
// as nn.broadcast_to), Slice, Split, Identity, Constant,
// SplitToSequence/SequenceAt (a list of values at import), Trilu of constants,
// Gather on float32 data (embeddings: nn.gather on axis 0, other axes
// through transposes), and Shape/Range/Gather, which fold (with Reshape,
// Squeeze, Unsqueeze, Identity and Concat) as int64 shape arithmetic on
// static shapes.
#include "compiler/importer/OpTable.h"

#include "dialects/nn/NNOps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <cstring>

using namespace mlir;
using namespace gpipe;
using namespace gpipe::importer;

//===----------------------------------------------------------------------===//
// Views: Reshape, Flatten, Squeeze, Unsqueeze
//===----------------------------------------------------------------------===//

/// The output shape of a view op for an input of shape `in` with `count`
/// elements; failure is reported.
using ViewShapeFn = FailureOr<llvm::SmallVector<int64_t>> (*)(
    ImportContext &cx, const onnx::NodeProto &node, llvm::ArrayRef<int64_t> in,
    int64_t count);

template <ViewShapeFn OutShape>
static LogicalResult importView(ImportContext &cx,
                                const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.valueOf(node, 0);
  if (failed(x))
    return failure();
  llvm::SmallVector<int64_t> in(shapeOf(*x));
  int64_t count = 1;
  for (int64_t d : in)
    count *= d;
  FailureOr<llvm::SmallVector<int64_t>> out = OutShape(cx, node, in, count);
  if (failed(out))
    return failure();
  cx.define(node, 0,
            createReshape(cx.getBuilder(), cx.nodeLoc(node), *x, *out));
  return success();
}

/// Reshape (allowzero honoured): the target is a constant int64 tensor.
static FailureOr<llvm::SmallVector<int64_t>>
reshapeShape(ImportContext &cx, const onnx::NodeProto &node,
             llvm::ArrayRef<int64_t> in, int64_t count) {
  int64_t rank = in.size();
  FailureOr<std::vector<int64_t>> target =
      cx.intsOperand(node, 1, "the target shape");
  if (failed(target))
    return failure();
  bool allowZero = intAttr(node, "allowzero", 0);
  llvm::SmallVector<int64_t> out;
  int64_t known = 1, inferAt = -1;
  for (size_t d = 0; d < target->size(); ++d) {
    int64_t t = (*target)[d];
    if (t == 0 && !allowZero) {
      if (static_cast<int64_t>(d) >= rank)
        return cx.nodeError(node)
                   << "target " << shapeStr(*target) << " copies dimension "
                   << d << " of a rank-" << rank << " input",
               failure();
      t = in[d];
    }
    if (t == -1) {
      if (inferAt >= 0)
        return cx.nodeError(node)
                   << "target " << shapeStr(*target) << " has more than one -1",
               failure();
      inferAt = d;
    } else if (t < 0) {
      return cx.nodeError(node) << "target " << shapeStr(*target)
                                << " has a negative dimension",
             failure();
    } else if (llvm::MulOverflow(known, t, known)) {
      return cx.nodeError(node) << "target " << shapeStr(*target)
                                << " has more than 2^63 elements",
             failure();
    }
    out.push_back(t);
  }
  if (inferAt >= 0) {
    if (known == 0 || count % known)
      return cx.nodeError(node)
                 << "cannot infer the -1 in target " << shapeStr(*target)
                 << " for an input of " << shapeStr(in),
             failure();
    out[inferAt] = count / known;
  }
  int64_t outCount = 1;
  for (int64_t d : out)
    outCount *= d;
  if (outCount != count) {
    InFlightDiagnostic diag = cx.nodeError(node);
    diag << "target " << shapeStr(*target) << " has " << outCount
         << " elements but the input " << shapeStr(in) << " has " << count;
    int64_t batch = cx.getBatch(), exportedBatch = cx.getExportedBatch();
    if (batch != exportedBatch && exportedBatch)
      diag << "; the target seems to encode the exported batch size "
           << exportedBatch << " (now " << batch
           << "): export it with -1 for the batch dimension";
    return failure();
  }
  return out;
}

static FailureOr<llvm::SmallVector<int64_t>>
flattenShape(ImportContext &cx, const onnx::NodeProto &node,
             llvm::ArrayRef<int64_t> in, int64_t count) {
  int64_t rank = in.size();
  int64_t axis = intAttr(node, "axis", 1);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis > rank)
    return cx.nodeError(node) << "axis " << intAttr(node, "axis", 1)
                              << " is out of range for rank " << rank,
           failure();
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= in[d];
  return llvm::SmallVector<int64_t>{outer, count / std::max<int64_t>(outer, 1)};
}

/// Squeeze (axes optional: every size-1 dimension) and Unsqueeze (axes
/// required); axes are a constant int64 input (opset 13+).
template <bool Unsqueeze>
static FailureOr<llvm::SmallVector<int64_t>>
squeezeShape(ImportContext &cx, const onnx::NodeProto &node,
             llvm::ArrayRef<int64_t> in, int64_t) {
  int64_t rank = in.size();
  std::vector<int64_t> axes;
  if (node.input_size() > 1 && !node.input(1).empty()) {
    FailureOr<std::vector<int64_t>> a = cx.intsOperand(node, 1, "axes");
    if (failed(a))
      return failure();
    axes = *a;
  } else if (Unsqueeze) {
    return cx.nodeError(node) << "missing axes", failure();
  }
  int64_t outRank = Unsqueeze ? rank + axes.size() : rank;
  FailureOr<llvm::SmallVector<bool>> markedOr =
      cx.markAxes(node, axes, outRank);
  if (failed(markedOr))
    return failure();
  llvm::SmallVector<bool> &marked = *markedOr;
  llvm::SmallVector<int64_t> out;
  if (Unsqueeze) {
    for (int64_t d = 0, k = 0; d < outRank; ++d)
      out.push_back(marked[d] ? 1 : in[k++]);
    return out;
  }
  for (int64_t d = 0; d < rank; ++d) {
    bool drop = axes.empty() ? in[d] == 1 : marked[d];
    if (drop && in[d] != 1)
      return cx.nodeError(node)
                 << "cannot squeeze dimension " << d << " of size " << in[d],
             failure();
    if (!drop)
      out.push_back(in[d]);
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Transpose, Concat
//===----------------------------------------------------------------------===//

static LogicalResult importTranspose(ImportContext &cx,
                                     const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.valueOf(node, 0);
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
    return cx.nodeError(node) << "perm has " << perm.size()
                              << " entries for a rank-" << rank << " input";
  llvm::SmallVector<int64_t> out;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return cx.nodeError(node)
             << "perm " << shapeStr(perm) << " is not a permutation of [0, "
             << rank << ")";
    seen[p] = true;
    out.push_back(in[p]);
  }
  auto type = RankedTensorType::get(
      out, cast<RankedTensorType>((*x).getType()).getElementType());
  cx.define(node, 0,
            nn::TransposeOp::create(cx.getBuilder(), cx.nodeLoc(node), type, *x,
                                    perm));
  return success();
}

static LogicalResult importConcat(ImportContext &cx,
                                  const onnx::NodeProto &node) {
  llvm::SmallVector<Value> inputs;
  for (int k = 0; k < node.input_size(); ++k) {
    FailureOr<Value> v = cx.valueOf(node, k);
    if (failed(v))
      return failure();
    inputs.push_back(*v);
  }
  auto first = cast<RankedTensorType>(inputs[0].getType());
  int64_t rank = first.getRank();
  FailureOr<int64_t> axisOr = cx.axisAttr(node, 0, rank);
  if (failed(axisOr))
    return failure();
  int64_t axis = *axisOr;
  llvm::SmallVector<int64_t> out(first.getShape());
  out[axis] = 0;
  for (auto [k, v] : llvm::enumerate(inputs)) {
    auto t = cast<RankedTensorType>(v.getType());
    bool same =
        t.getRank() == rank && t.getElementType() == first.getElementType();
    for (int64_t d = 0; same && d < rank; ++d)
      same = d == axis || t.getDimSize(d) == first.getDimSize(d);
    if (!same)
      return cx.nodeError(node)
             << "input #" << k << " of shape " << shapeStr(t.getShape())
             << " does not concatenate with " << shapeStr(first.getShape())
             << " on axis " << axis;
    out[axis] += t.getDimSize(axis);
  }
  OpBuilder &builder = cx.getBuilder();
  auto type = RankedTensorType::get(out, first.getElementType());
  cx.define(node, 0,
            nn::ConcatOp::create(builder, cx.nodeLoc(node), type, inputs,
                                 builder.getI64IntegerAttr(axis)));
  return success();
}

//===----------------------------------------------------------------------===//
// Expand, Slice, Split
//===----------------------------------------------------------------------===//

/// Expand: numpy broadcasting of the input and a constant shape (either
/// side may be larger); nn.broadcast_to, or the input itself when it already
/// has the broadcast shape.
static LogicalResult importExpand(ImportContext &cx,
                                  const onnx::NodeProto &node) {
  // A constant (not a trained parameter) expands at import: torch's
  // `torch.ones(T, T)` of a mask is Expand(1.0, [T, T]).
  if (const ConstTensor *c = cx.constantOf(node, 0)) {
    FailureOr<std::vector<int64_t>> target =
        cx.intsOperand(node, 1, "the shape");
    if (failed(target))
      return failure();
    FailureOr<llvm::SmallVector<int64_t>> out =
        nn::broadcastShapes(c->shape, *target);
    if (failed(out))
      return cx.nodeError(node)
             << "the input " << shapeStr(c->shape) << " and the shape "
             << shapeStr(*target) << " do not broadcast";
    ConstTensor e;
    e.isFloat = c->isFloat;
    e.shape.assign(out->begin(), out->end());
    for (int64_t k = 0, n = e.numElements(); k < n; ++k) {
      int64_t from = broadcastIndex(*out, c->shape, k);
      if (e.isFloat)
        e.f.push_back(c->f[from]);
      else
        e.i.push_back(c->i[from]);
    }
    cx.defineConst(node.output(0), std::move(e));
    return success();
  }
  FailureOr<Value> x = cx.floatValueOf(node, 0);
  if (failed(x))
    return failure();
  FailureOr<std::vector<int64_t>> target = cx.intsOperand(node, 1, "the shape");
  if (failed(target))
    return failure();
  FailureOr<llvm::SmallVector<int64_t>> out =
      nn::broadcastShapes(shapeOf(*x), *target);
  if (failed(out))
    return cx.nodeError(node)
           << "the input " << shapeStr(shapeOf(*x)) << " and the shape "
           << shapeStr(*target) << " do not broadcast";
  Value v = *x;
  if (llvm::ArrayRef<int64_t>(*out) != shapeOf(v))
    v = nn::BroadcastToOp::create(cx.getBuilder(), cx.nodeLoc(node),
                                  cx.f32(*out), v);
  cx.define(node, 0, v);
  return success();
}

/// Slice (opset 10+: starts, ends, optional axes and steps as constant
/// int64 inputs), with ONNX's clamping of out-of-range bounds. Constants
/// (not trained parameters) of any element type are sliced at import with
/// any steps; computed values with step 1, as one nn.slice per sliced axis.
static LogicalResult importSlice(ImportContext &cx,
                                 const onnx::NodeProto &node) {
  FailureOr<std::vector<int64_t>> starts = cx.intsOperand(node, 1, "starts"),
                                  ends = cx.intsOperand(node, 2, "ends");
  if (failed(starts) || failed(ends))
    return failure();
  std::vector<int64_t> axes, steps(starts->size(), 1);
  for (size_t k = 0; k < starts->size(); ++k)
    axes.push_back(k);
  if (node.input_size() > 3 && !node.input(3).empty()) {
    FailureOr<std::vector<int64_t>> a = cx.intsOperand(node, 3, "axes");
    if (failed(a))
      return failure();
    axes = *a;
  }
  if (node.input_size() > 4 && !node.input(4).empty()) {
    FailureOr<std::vector<int64_t>> s = cx.intsOperand(node, 4, "steps");
    if (failed(s))
      return failure();
    steps = *s;
  }
  if (ends->size() != starts->size() || axes.size() != starts->size() ||
      steps.size() != starts->size())
    return cx.nodeError(node) << "starts, ends, axes and steps must have one "
                                 "length, got "
                              << starts->size() << ", " << ends->size() << ", "
                              << axes.size() << ", " << steps.size();
  const ConstTensor *constant = cx.constantOf(node, 0);
  llvm::SmallVector<int64_t> in;
  Value data;
  if (constant) {
    in.assign(constant->shape.begin(), constant->shape.end());
  } else {
    FailureOr<Value> v = cx.valueOf(node, 0);
    if (failed(v))
      return failure();
    data = *v;
    in.assign(shapeOf(data).begin(), shapeOf(data).end());
  }
  int64_t rank = in.size();
  FailureOr<llvm::SmallVector<bool>> marked = cx.markAxes(node, axes, rank);
  if (failed(marked))
    return failure();
  // Per dimension: first index, step, count.
  llvm::SmallVector<int64_t> first(rank, 0), step(rank, 1), count(in);
  for (size_t k = 0; k < axes.size(); ++k) {
    int64_t d = axes[k] < 0 ? axes[k] + rank : axes[k], dim = in[d];
    int64_t s = steps[k], b = (*starts)[k], e = (*ends)[k];
    if (s == 0)
      return cx.nodeError(node) << "step 0 on axis " << axes[k];
    if (b < 0)
      b += dim;
    if (e < 0)
      e += dim;
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      count[d] = e > b ? (e - b + s - 1) / s : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      count[d] = b > e ? (b - e - s - 1) / -s : 0;
    }
    if (count[d] == 0)
      return cx.nodeError(node) << "the slice of axis " << axes[k]
                                << " is empty (empty tensors are not "
                                   "supported)";
    first[d] = b;
    step[d] = s;
  }
  if (constant) {
    ConstTensor out;
    out.shape.assign(count.begin(), count.end());
    out.isFloat = constant->isFloat;
    for (int64_t k = 0, n = out.numElements(); k < n; ++k) {
      int64_t rest = k, src = 0, stride = 1;
      for (int64_t d = rank - 1; d >= 0; --d) {
        int64_t coord = rest % count[d];
        rest /= count[d];
        src += (first[d] + coord * step[d]) * stride;
        stride *= in[d];
      }
      if (out.isFloat)
        out.f.push_back(constant->f[src]);
      else
        out.i.push_back(constant->i[src]);
    }
    cx.defineConst(node.output(0), std::move(out));
    return success();
  }
  Value v = data;
  llvm::SmallVector<int64_t> shape(in);
  for (int64_t d = 0; d < rank; ++d) {
    if (count[d] == in[d])
      continue;
    if (step[d] != 1)
      return cx.nodeError(node)
             << "step " << step[d] << " on axis " << d
             << " of a computed value is not supported (only step 1)";
    shape[d] = count[d];
    auto type = RankedTensorType::get(
        shape, cast<RankedTensorType>(v.getType()).getElementType());
    v = nn::SliceOp::create(cx.getBuilder(), cx.nodeLoc(node), type, v, d,
                            first[d]);
  }
  cx.define(node, 0, v);
  return success();
}

/// Split (opset 13+: the sizes an optional constant int64 input; without
/// it, equal parts, one per output): one nn.slice per output along `axis`.
/// Slices `x` along `axis` into parts of `sizes` (checked: positive, summing
/// to the axis); the parts, in order.
static FailureOr<llvm::SmallVector<Value>>
splitInto(ImportContext &cx, const onnx::NodeProto &node, Value x, int64_t axis,
          llvm::ArrayRef<int64_t> sizes) {
  llvm::SmallVector<int64_t> shape(shapeOf(x));
  int64_t dim = shape[axis], total = 0;
  for (int64_t n : sizes)
    total += n > 0 ? n : 0;
  if (sizes.empty() || total != dim ||
      llvm::any_of(sizes, [](int64_t n) { return n <= 0; }))
    return cx.nodeError(node)
               << "split sizes " << shapeStr(sizes) << " do not cut axis "
               << axis << " of size " << dim << " into " << sizes.size()
               << " non-empty parts",
           failure();
  llvm::SmallVector<Value> parts;
  int64_t start = 0;
  for (int64_t n : sizes) {
    shape[axis] = n;
    auto type = RankedTensorType::get(
        shape, cast<RankedTensorType>(x.getType()).getElementType());
    parts.push_back(n == dim ? x
                             : Value(nn::SliceOp::create(cx.getBuilder(),
                                                         cx.nodeLoc(node), type,
                                                         x, axis, start)));
    start += n;
  }
  return parts;
}

/// Split (opset 18 forms: a `split` input or `num_outputs`, else equal parts).
static LogicalResult importSplit(ImportContext &cx,
                                 const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.valueOf(node, 0);
  if (failed(x))
    return failure();
  int64_t rank = shapeOf(*x).size();
  FailureOr<int64_t> axisOr = cx.axisAttr(node, 0, rank);
  if (failed(axisOr))
    return failure();
  int64_t axis = *axisOr;
  int64_t parts = node.output_size(), dim = shapeOf(*x)[axis];
  std::vector<int64_t> sizes;
  if (node.input_size() > 1 && !node.input(1).empty()) {
    FailureOr<std::vector<int64_t>> s = cx.intsOperand(node, 1, "split");
    if (failed(s))
      return failure();
    sizes = *s;
    if (static_cast<int64_t>(sizes.size()) != parts)
      return cx.nodeError(node) << "split sizes " << shapeStr(sizes)
                                << " for " << parts << " outputs";
  } else if (const onnx::AttributeProto *n = findAttr(node, "num_outputs")) {
    // Opset 18: ceil(dim / n) each, the last part what remains.
    if (n->i() != parts)
      return cx.nodeError(node) << "num_outputs " << n->i() << " but the node has "
                                << parts << " outputs";
    int64_t each = parts > 0 ? (dim + parts - 1) / parts : 0;
    if (parts > 0 && dim - (parts - 1) * each <= 0)
      return cx.nodeError(node)
             << "axis " << axis << " of size " << dim << " does not split into "
             << parts << " non-empty parts of at most " << each
             << " (num_outputs)";
    for (int64_t k = 0; k < parts; ++k)
      sizes.push_back(std::min(each, dim - k * each));
  } else {
    if (parts == 0 || dim % parts != 0)
      return cx.nodeError(node)
             << "axis " << axis << " of size " << dim << " does not split into "
             << parts << " equal parts";
    sizes.assign(parts, dim / parts);
  }
  FailureOr<llvm::SmallVector<Value>> values =
      splitInto(cx, node, *x, axis, sizes);
  if (failed(values))
    return failure();
  for (auto [k, v] : llvm::enumerate(*values))
    cx.define(node, k, v);
  return success();
}

/// SplitToSequence (torch >= 2.9's exporter writes `x.split(n, dim)` so with
/// optimize=False): the sequence is a list of values at import, read by
/// SequenceAt at constant positions. `split` a scalar: parts of that size,
/// the last what remains; 1-D: the sizes; absent: parts of 1, the axis
/// squeezed unless keepdims.
static LogicalResult importSplitToSequence(ImportContext &cx,
                                           const onnx::NodeProto &node) {
  FailureOr<Value> x = cx.valueOf(node, 0);
  if (failed(x))
    return failure();
  llvm::SmallVector<int64_t> shape(shapeOf(*x));
  FailureOr<int64_t> axisOr = cx.axisAttr(node, 0, shape.size());
  if (failed(axisOr))
    return failure();
  int64_t axis = *axisOr, dim = shape[axis];
  std::vector<int64_t> sizes;
  bool squeeze = false;
  if (node.input_size() > 1 && !node.input(1).empty()) {
    const ConstTensor *c = cx.constOf(node.input(1));
    FailureOr<std::vector<int64_t>> s = cx.intsOperand(node, 1, "split");
    if (failed(s))
      return failure();
    if (c->shape.empty()) { // a scalar: parts of that size
      int64_t each = s->empty() ? 0 : (*s)[0];
      if (each <= 0)
        return cx.nodeError(node) << "split " << each << " must be positive";
      for (int64_t at = 0; at < dim; at += each)
        sizes.push_back(std::min(each, dim - at));
    } else {
      sizes = *s;
    }
  } else {
    sizes.assign(dim, 1);
    squeeze = intAttr(node, "keepdims", 1) == 0;
  }
  FailureOr<llvm::SmallVector<Value>> parts =
      splitInto(cx, node, *x, axis, sizes);
  if (failed(parts))
    return failure();
  if (squeeze) {
    shape.erase(shape.begin() + axis);
    for (Value &v : *parts)
      v = createReshape(cx.getBuilder(), cx.nodeLoc(node), v, shape);
  }
  cx.defineSequence(node.output(0), std::vector<Value>(parts->begin(), parts->end()));
  return success();
}

/// SequenceAt(sequence, position): position a constant (negative counts from
/// the end).
static LogicalResult importSequenceAt(ImportContext &cx,
                                      const onnx::NodeProto &node) {
  const std::vector<Value> *seq =
      node.input_size() > 0 ? cx.sequenceOf(node.input(0)) : nullptr;
  if (!seq)
    return cx.nodeError(node)
           << "the sequence '" << (node.input_size() ? node.input(0) : "")
           << "' is not the output of a SplitToSequence (the only sequences "
              "supported)";
  FailureOr<std::vector<int64_t>> pos = cx.intsOperand(node, 1, "position");
  if (failed(pos))
    return failure();
  int64_t n = seq->size(), p = pos->size() == 1 ? (*pos)[0] : n;
  if (p < -n || p >= n)
    return cx.nodeError(node) << "position " << shapeStr(*pos)
                              << " is out of range for a sequence of " << n;
  cx.define(node, 0, (*seq)[p < 0 ? p + n : p]);
  return success();
}

//===----------------------------------------------------------------------===//
// Identity, Constant, Shape, Gather
//===----------------------------------------------------------------------===//

/// A constant stays compile-time data (a shape operand can read it); an
/// initializer or a computed value passes through.
static LogicalResult importIdentity(ImportContext &cx,
                                    const onnx::NodeProto &node) {
  if (const ConstTensor *c = cx.constOf(node.input(0))) {
    cx.defineConst(node.output(0), *c);
    if (!cx.isInitializer(node.input(0)))
      return success();
  }
  FailureOr<Value> x = cx.valueOf(node, 0);
  if (failed(x))
    return failure();
  cx.define(node, 0, *x);
  return success();
}

/// Compile-time data (becomes nn.constant where used as data): value,
/// value_float(s), value_int(s); not sparse or string values.
static LogicalResult importConstant(ImportContext &cx,
                                    const onnx::NodeProto &node) {
  ConstTensor c;
  if (const auto *a = findAttr(node, "value")) {
    FailureOr<ConstTensor> t = cx.readTensor(a->t(), /*doubleAsFloat=*/true);
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
    return cx.nodeError(node) << "only tensor, float(s) and int(s) constants "
                                 "are supported";
  }
  cx.defineConst(node.output(0), std::move(c));
  return success();
}

/// Shape and Range are imported only as folded constants (Gather too, on
/// integer data).
static LogicalResult importUnfolded(ImportContext &cx,
                                    const onnx::NodeProto &node) {
  return cx.nodeError(node) << "only supported on static shapes and constant "
                               "int64 values (folded at import); this one "
                               "reads a computed tensor";
}

/// Gather of float32 data (an embedding table, any float value) at int64
/// indices, computed (token ids) or constant (positions): nn.gather on axis
/// 0; on another axis, the axis is transposed to the front and the result's
/// dimensions back to ONNX's order. Integer data is shape arithmetic, which
/// only folds.
static LogicalResult importGather(ImportContext &cx,
                                  const onnx::NodeProto &node) {
  FailureOr<Value> data = cx.valueOf(node, 0);
  if (failed(data))
    return failure();
  auto dataType = cast<RankedTensorType>(data->getType());
  if (!dataType.getElementType().isF32())
    return importUnfolded(cx, node);
  FailureOr<Value> indices = cx.valueOf(node, 1);
  if (failed(indices))
    return failure();
  auto idxType = cast<RankedTensorType>(indices->getType());
  if (!idxType.getElementType().isInteger(64))
    return cx.nodeError(node)
           << "the indices ('" << node.input(1)
           << "') must be int64 or int32, got " << idxType.getElementType();
  int64_t rank = dataType.getRank();
  FailureOr<int64_t> axisOr = cx.axisAttr(node, 0, rank);
  if (failed(axisOr))
    return failure();
  int64_t axis = *axisOr;
  int64_t n = dataType.getDimSize(axis);
  if (const ConstTensor *c = cx.constOf(node.input(1)))
    for (int64_t j : c->i)
      if (j < -n || j >= n)
        return cx.nodeError(node) << "index " << j << " is outside [" << -n
                                  << ", " << n << ") (axis " << axis << " of "
                                  << shapeStr(dataType.getShape()) << ")";
  OpBuilder &builder = cx.getBuilder();
  Location loc = cx.nodeLoc(node);
  auto permuted = [&](Value v, llvm::ArrayRef<int64_t> perm) -> Value {
    llvm::SmallVector<int64_t> shape;
    for (int64_t p : perm)
      shape.push_back(shapeOf(v)[p]);
    return nn::TransposeOp::create(builder, loc, cx.f32(shape), v, perm);
  };
  Value table = *data;
  if (axis != 0) {
    llvm::SmallVector<int64_t> perm{axis};
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis)
        perm.push_back(d);
    table = permuted(table, perm);
  }
  llvm::SmallVector<int64_t> shape(idxType.getShape());
  shape.append(shapeOf(table).begin() + 1, shapeOf(table).end());
  Value out =
      nn::GatherOp::create(builder, loc, cx.f32(shape), table, *indices);
  if (axis != 0) {
    // [indices..., data dims before axis, after it] -> ONNX's order.
    int64_t k = idxType.getRank();
    llvm::SmallVector<int64_t> perm;
    for (int64_t d = 0; d < axis; ++d)
      perm.push_back(k + d);
    for (int64_t d = 0; d < k; ++d)
      perm.push_back(d);
    for (int64_t d = axis + 1; d < rank; ++d)
      perm.push_back(k + d - 1);
    // The identity when the indices are a scalar and the axis the second.
    if (!llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
      out = permuted(out, perm);
  }
  cx.define(node, 0, out);
  return success();
}

//===----------------------------------------------------------------------===//
// Folding int64 shape arithmetic
//===----------------------------------------------------------------------===//

static std::optional<ConstTensor> foldShape(const onnx::NodeProto &node,
                                            const FoldOperands &in) {
  if (node.input_size() != 1)
    return std::nullopt;
  auto it = in.staticShapes.find(node.input(0));
  if (it == in.staticShapes.end())
    return std::nullopt;
  const std::vector<int64_t> &inputShape = it->second;
  ConstTensor out;
  int64_t rank = inputShape.size();
  int64_t start = intAttr(node, "start", 0), end = intAttr(node, "end", rank);
  start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
  end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
  for (int64_t d = start; d < end; ++d)
    out.i.push_back(inputShape[d]);
  out.shape = {static_cast<int64_t>(out.i.size())};
  return out;
}

static std::optional<ConstTensor> foldIdentity(const onnx::NodeProto &,
                                               const FoldOperands &in) {
  if (!in.allInts(1))
    return std::nullopt;
  return *in.values[0];
}

static std::optional<ConstTensor> foldReshape(const onnx::NodeProto &,
                                              const FoldOperands &in) {
  if (!in.allInts(2))
    return std::nullopt;
  ConstTensor out = *in.values[0];
  int64_t rank = out.shape.size();
  std::vector<int64_t> target = in.values[1]->i;
  int64_t known = 1, at = -1;
  for (size_t d = 0; d < target.size(); ++d) {
    if (target[d] == 0 && static_cast<int64_t>(d) < rank)
      target[d] = out.shape[d];
    if (target[d] == -1)
      at = d;
    else if (target[d] < 0 || llvm::MulOverflow(known, target[d], known))
      return std::nullopt; // left to importReshape's located error
  }
  if (at >= 0 && known)
    target[at] = out.numElements() / known;
  out.shape = target;
  return out.numElements() == in.values[0]->numElements()
             ? std::optional<ConstTensor>(out)
             : std::nullopt;
}

/// Squeeze and Unsqueeze with constant axes (absent: Squeeze drops every
/// size-1 dimension).
template <bool Unsqueeze>
static std::optional<ConstTensor> foldSqueeze(const onnx::NodeProto &,
                                              const FoldOperands &in) {
  if (!in.allInts(1))
    return std::nullopt;
  ConstTensor out = *in.values[0];
  std::vector<int64_t> axes;
  if (in.values.size() > 1 && in.values[1] && !in.values[1]->isFloat)
    axes = in.values[1]->i;
  int64_t rank = out.shape.size();
  std::vector<int64_t> shape;
  if (Unsqueeze) {
    int64_t outRank = rank + axes.size();
    std::vector<bool> mark(outRank, false);
    for (int64_t a : axes) {
      a = a < 0 ? a + outRank : a;
      if (a < 0 || a >= outRank || mark[a])
        return std::nullopt;
      mark[a] = true;
    }
    for (int64_t d = 0, k = 0; d < outRank; ++d)
      shape.push_back(mark[d] ? 1 : out.shape[k++]);
  } else {
    for (int64_t d = 0; d < rank; ++d) {
      bool drop = axes.empty() ? out.shape[d] == 1
                               : llvm::is_contained(axes, d) ||
                                     llvm::is_contained(axes, d - rank);
      if (drop && out.shape[d] != 1)
        return std::nullopt; // not a size-1 axis: importSqueeze's error
      if (!drop)
        shape.push_back(out.shape[d]);
    }
  }
  out.shape = shape;
  return out;
}

/// Transpose of int64 shape data (torch's Pad exports its pads through one).
static std::optional<ConstTensor> foldTranspose(const onnx::NodeProto &node,
                                                const FoldOperands &in) {
  if (!in.allInts(1))
    return std::nullopt;
  const ConstTensor &x = *in.values[0];
  int64_t rank = x.shape.size();
  std::vector<int64_t> perm(rank);
  for (int64_t d = 0; d < rank; ++d)
    perm[d] = rank - 1 - d;
  if (const auto *a = findAttr(node, "perm"))
    perm.assign(a->ints().begin(), a->ints().end());
  if (static_cast<int64_t>(perm.size()) != rank)
    return std::nullopt;
  // Not a permutation of the axes: left to importTranspose's located error.
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return std::nullopt;
    seen[p] = true;
  }
  ConstTensor out;
  std::vector<int64_t> stride(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    stride[d] = stride[d + 1] * x.shape[d + 1];
  for (int64_t d = 0; d < rank; ++d)
    out.shape.push_back(x.shape[perm[d]]);
  std::vector<int64_t> at(rank, 0);
  for (int64_t k = 0, n = x.numElements(); k < n; ++k) {
    int64_t src = 0;
    for (int64_t d = 0; d < rank; ++d)
      src += at[d] * stride[perm[d]];
    out.i.push_back(x.i[src]);
    for (int64_t d = rank - 1; d >= 0 && ++at[d] == out.shape[d]; --d)
      at[d] = 0;
  }
  return out;
}

/// Slice of int64 shape data along one axis, any step (torch's Pad reverses
/// its pads with step -1).
static std::optional<ConstTensor> foldSlice(const onnx::NodeProto &,
                                            const FoldOperands &in) {
  if (!in.allInts(3) || in.values[1]->i.size() != 1 ||
      in.values[2]->i.size() != 1)
    return std::nullopt;
  const ConstTensor &x = *in.values[0];
  int64_t rank = x.shape.size(), axis = 0, step = 1;
  if (in.values.size() > 3 && in.values[3] && in.values[3]->i.size() == 1)
    axis = in.values[3]->i[0];
  if (in.values.size() > 4 && in.values[4] && in.values[4]->i.size() == 1)
    step = in.values[4]->i[0];
  axis = axis < 0 ? axis + rank : axis;
  if (axis < 0 || axis >= rank || step == 0)
    return std::nullopt;
  int64_t dim = x.shape[axis];
  auto clampTo = [&](int64_t v, int64_t lo, int64_t hi) {
    v = v < 0 ? v + dim : v;
    return std::clamp(v, lo, hi);
  };
  int64_t start = in.values[1]->i[0], end = in.values[2]->i[0];
  start = step > 0 ? clampTo(start, 0, dim) : clampTo(start, 0, dim - 1);
  end = step > 0 ? clampTo(end, 0, dim) : clampTo(end, -1, dim - 1);
  std::vector<int64_t> picked;
  for (int64_t k = start; step > 0 ? k < end : k > end; k += step)
    picked.push_back(k);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= x.shape[d];
  ConstTensor out;
  out.shape = x.shape;
  out.shape[axis] = picked.size();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k : picked)
      for (int64_t j = 0; j < inner; ++j)
        out.i.push_back(x.i[(o * dim + k) * inner + j]);
  return out;
}

static std::optional<ConstTensor> foldConcat(const onnx::NodeProto &node,
                                             const FoldOperands &in) {
  if (in.values.empty() || !in.allInts(in.values.size()))
    return std::nullopt;
  int64_t rank = in.values[0]->shape.size();
  int64_t axis = intAttr(node, "axis", 0);
  axis = axis < 0 ? axis + rank : axis;
  if (axis < 0 || axis >= rank)
    return std::nullopt;
  ConstTensor out;
  out.shape = in.values[0]->shape;
  out.shape[axis] = 0;
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= out.shape[d];
  for (const ConstTensor *t : in.values) {
    if (static_cast<int64_t>(t->shape.size()) != rank)
      return std::nullopt;
    out.shape[axis] += t->shape[axis];
  }
  for (int64_t o = 0; o < outer; ++o)
    for (const ConstTensor *t : in.values) {
      int64_t chunk = t->numElements() / std::max<int64_t>(outer, 1);
      out.i.insert(out.i.end(), t->i.begin() + o * chunk,
                   t->i.begin() + (o + 1) * chunk);
    }
  return out;
}

static std::optional<ConstTensor> foldGather(const onnx::NodeProto &node,
                                             const FoldOperands &in) {
  if (!in.allInts(2))
    return std::nullopt;
  const ConstTensor &data = *in.values[0], &idx = *in.values[1];
  int64_t rank = data.shape.size();
  int64_t axis = intAttr(node, "axis", 0);
  axis = axis < 0 ? axis + rank : axis;
  if (axis < 0 || axis >= rank)
    return std::nullopt;
  ConstTensor out;
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

/// Range (torch.arange) of constant int64 scalars.
/// ConstantOfShape's fill value (attribute `value`, a one-element tensor;
/// default float 0) and whether it is a float.
static std::optional<std::pair<double, bool>>
constantOfShapeValue(const onnx::NodeProto &node) {
  const onnx::AttributeProto *a = findAttr(node, "value");
  if (!a)
    return std::make_pair(0.0, true);
  const onnx::TensorProto &t = a->t();
  std::string raw = t.raw_data();
  switch (t.data_type()) {
  case onnx::TensorProto::FLOAT: {
    float f = t.float_data_size() ? t.float_data(0) : 0.0f;
    if (raw.size() == 4)
      std::memcpy(&f, raw.data(), 4);
    return std::make_pair(static_cast<double>(f), true);
  }
  case onnx::TensorProto::INT64: {
    int64_t i = t.int64_data_size() ? t.int64_data(0) : 0;
    if (raw.size() == 8)
      std::memcpy(&i, raw.data(), 8);
    return std::make_pair(static_cast<double>(i), false);
  }
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::BOOL: {
    int64_t i = t.int32_data_size() ? t.int32_data(0) : 0;
    if (raw.size() == 4) {
      int32_t v;
      std::memcpy(&v, raw.data(), 4);
      i = v;
    } else if (raw.size() == 1) {
      i = raw[0] != 0;
    }
    return std::make_pair(static_cast<double>(i), false);
  }
  default:
    return std::nullopt;
  }
}

/// ConstantOfShape of a constant shape: a compile-time constant.
static std::optional<ConstTensor>
evalConstantOfShape(const onnx::NodeProto &node, const ConstTensor &shape) {
  std::optional<std::pair<double, bool>> v = constantOfShapeValue(node);
  if (!v || shape.isFloat)
    return std::nullopt;
  ConstTensor out;
  out.shape = shape.i;
  out.isFloat = v->second;
  for (int64_t k = 0, n = out.numElements(); k < n; ++k) {
    if (out.isFloat)
      out.f.push_back(static_cast<float>(v->first));
    else
      out.i.push_back(static_cast<int64_t>(v->first));
  }
  return out;
}

static std::optional<ConstTensor>
foldConstantOfShape(const onnx::NodeProto &node, const FoldOperands &in) {
  if (!in.allInts(1))
    return std::nullopt;
  std::optional<ConstTensor> c = evalConstantOfShape(node, *in.values[0]);
  if (!c || c->isFloat) // the protobuf rewrite writes int64 constants only
    return std::nullopt;
  return c;
}

static LogicalResult importConstantOfShape(ImportContext &cx,
                                           const onnx::NodeProto &node) {
  const ConstTensor *shape =
      node.input_size() > 0 ? cx.constOf(node.input(0)) : nullptr;
  std::optional<ConstTensor> c =
      shape ? evalConstantOfShape(node, *shape) : std::nullopt;
  if (!c)
    return cx.nodeError(node)
           << "only a constant int64 shape and a float32, int64, int32 or "
              "bool value are supported";
  cx.defineConst(node.output(0), std::move(*c));
  return success();
}

static std::optional<ConstTensor> foldRange(const onnx::NodeProto &,
                                            const FoldOperands &in) {
  if (!in.allInts(3))
    return std::nullopt;
  for (int k = 0; k < 3; ++k)
    if (in.values[k]->i.size() != 1)
      return std::nullopt;
  int64_t start = in.values[0]->i[0], limit = in.values[1]->i[0],
          delta = in.values[2]->i[0];
  if (delta == 0)
    return std::nullopt;
  ConstTensor out;
  for (int64_t v = start; delta > 0 ? v < limit : v > limit; v += delta)
    out.i.push_back(v);
  out.shape = {static_cast<int64_t>(out.i.size())};
  return out;
}

/// Trilu of a constant (torch's triu/tril of a mask it builds): evaluated
/// at import; a computed input is not supported.
static LogicalResult importTrilu(ImportContext &cx,
                                 const onnx::NodeProto &node) {
  const ConstTensor *x = cx.constantOf(node, 0);
  if (!x)
    return cx.nodeError(node)
           << "only the Trilu of a constant (a mask) is supported; this one "
              "reads a computed tensor or a trained parameter";
  int64_t k = 0;
  if (node.input_size() > 1 && !node.input(1).empty()) {
    FailureOr<std::vector<int64_t>> kv = cx.intsOperand(node, 1, "k");
    if (failed(kv))
      return failure();
    if (kv->size() != 1)
      return cx.nodeError(node) << "k must be a scalar, got " << kv->size()
                                << " values";
    k = (*kv)[0];
  }
  if (x->shape.size() < 2)
    return cx.nodeError(node) << "the input must have rank >= 2, got "
                              << shapeStr(x->shape);
  bool upper = intAttr(node, "upper", 1) != 0;
  ConstTensor out = *x;
  int64_t rows = x->shape[x->shape.size() - 2], cols = x->shape.back();
  int64_t n = x->numElements();
  for (int64_t e = 0; e < n; ++e) {
    int64_t i = (e / cols) % rows, j = e % cols;
    bool keep = upper ? j - i >= k : j - i <= k;
    if (keep)
      continue;
    if (out.isFloat)
      out.f[e] = 0.0f;
    else
      out.i[e] = 0;
  }
  cx.defineConst(node.output(0), std::move(out));
  return success();
}

void gpipe::importer::registerShapeOps(OpTable &table) {
  table.add("Reshape", importView<reshapeShape>, foldReshape);
  table.add("Flatten", importView<flattenShape>);
  table.add("Squeeze", importView<squeezeShape<false>>, foldSqueeze<false>);
  table.add("Unsqueeze", importView<squeezeShape<true>>, foldSqueeze<true>);
  table.add("Transpose", importTranspose, foldTranspose);
  table.add("Concat", importConcat, foldConcat);
  table.add("Identity", importIdentity, foldIdentity);
  table.add("Expand", importExpand);
  table.add("Slice", importSlice, foldSlice);
  table.add("Split", importSplit);
  table.add("SplitToSequence", importSplitToSequence);
  table.add("SequenceAt", importSequenceAt);
  table.add("Trilu", importTrilu);
  table.add("Constant", importConstant);
  table.add("Shape", importUnfolded, foldShape);
  table.add("Gather", importGather, foldGather);
  table.add("Range", importUnfolded, foldRange);
  table.add("ConstantOfShape", importConstantOfShape, foldConstantOfShape);
}

// The nn dialect's data movement ops (reshape, transpose, concat, slice,
// reduce_to, broadcast_to): verifiers, cost, gradients, micro-batch rules.
#include "dialects/nn/ops/Common.h"

using namespace mlir;
using namespace gpipe::nn;

LogicalResult ReshapeOp::verify() {
  auto in = tensorType(getInput()), out = tensorType(getOutput());
  if (in.getElementType() != out.getElementType())
    return emitOpError("element type changes from ")
           << in.getElementType() << " to " << out.getElementType();
  if (in.getNumElements() != out.getNumElements())
    return emitOpError("element count changes from ")
           << in.getNumElements() << " (" << in << ") to "
           << out.getNumElements() << " (" << out << ")";
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getOutput().getType())
    return getInput();
  return {};
}

int64_t ReshapeOp::getFlops() { return 0; }
int64_t ReshapeOp::getBytesAccessed() { return 0; }

LogicalResult ReshapeOp::buildGradients(OpBuilder &b,
                                        ArrayRef<Value> resultGrads,
                                        SmallVectorImpl<Value> &operandGrads) {
  if (!tensorType(getInput()).getElementType().isF32()) {
    operandGrads.push_back(Value());
    return success();
  }
  operandGrads.push_back(
      ReshapeOp::create(b, getLoc(), getInput().getType(), resultGrads[0]));
  return success();
}

LogicalResult TransposeOp::verify() {
  auto in = tensorType(getInput()), out = tensorType(getOutput());
  ArrayRef<int64_t> perm = getPermutation();
  if (static_cast<int64_t>(perm.size()) != in.getRank())
    return emitOpError("permutation has ")
           << perm.size() << " entries for a rank-" << in.getRank() << " input";
  llvm::SmallVector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= in.getRank() || seen[p])
      return emitOpError("permutation is not a permutation of [0, ")
             << in.getRank() << ")";
    seen[p] = true;
  }
  if (in.getElementType() != out.getElementType() ||
      out.getRank() != in.getRank())
    return emitOpError("result ") << out << " does not match the input " << in;
  for (size_t i = 0; i < perm.size(); ++i)
    if (out.getDimSize(i) != in.getDimSize(perm[i]))
      return emitOpError("result dimension ")
             << i << " is " << out.getDimSize(i) << ", expected "
             << in.getDimSize(perm[i]) << " (input dimension " << perm[i]
             << ")";
  return success();
}

int64_t TransposeOp::getFlops() { return 0; }

LogicalResult
TransposeOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                            SmallVectorImpl<Value> &operandGrads) {
  if (!tensorType(getInput()).getElementType().isF32()) {
    operandGrads.push_back(Value());
    return success();
  }
  ArrayRef<int64_t> perm = getPermutation();
  llvm::SmallVector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[perm[i]] = i;
  operandGrads.push_back(TransposeOp::create(b, getLoc(), getInput().getType(),
                                             resultGrads[0], inverse));
  return success();
}

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one input");
  auto out = tensorType(getOutput());
  int64_t rank = out.getRank();
  int64_t axis = getAxis();
  if (axis < 0 || axis >= rank)
    return emitOpError("axis ") << axis << " is out of range for rank " << rank;
  int64_t total = 0;
  for (auto [i, v] : llvm::enumerate(getInputs())) {
    auto t = tensorType(v);
    if (t.getRank() != rank || t.getElementType() != out.getElementType())
      return emitOpError("input #")
             << i << " of type " << t << " does not match the result " << out;
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis && t.getDimSize(d) != out.getDimSize(d))
        return emitOpError("input #")
               << i << " differs from the result in dimension " << d;
    total += t.getDimSize(axis);
  }
  if (total != out.getDimSize(axis))
    return emitOpError("inputs add up to ")
           << total << " along axis " << axis << ", the result has "
           << out.getDimSize(axis);
  return success();
}

int64_t ConcatOp::getFlops() { return 0; }

LogicalResult ConcatOp::buildGradients(OpBuilder &b,
                                       ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  int64_t start = 0;
  for (Value in : getInputs()) {
    auto t = tensorType(in);
    if (!t.getElementType().isF32())
      operandGrads.push_back(Value());
    else
      operandGrads.push_back(
          SliceOp::create(b, getLoc(), t, resultGrads[0], getAxis(), start));
    start += t.getDimSize(getAxis());
  }
  return success();
}

LogicalResult SliceOp::verify() {
  auto in = tensorType(getInput()), out = tensorType(getOutput());
  int64_t axis = getAxis();
  if (in.getRank() != out.getRank() ||
      in.getElementType() != out.getElementType())
    return emitOpError("result ") << out << " must have the rank and element "
                                  << "type of the input " << in;
  if (axis < 0 || axis >= in.getRank())
    return emitOpError("axis ")
           << axis << " is out of range for rank " << in.getRank();
  for (int64_t d = 0; d < in.getRank(); ++d)
    if (d != axis && in.getDimSize(d) != out.getDimSize(d))
      return emitOpError("result differs from the input in dimension ") << d;
  int64_t start = getStart(), size = out.getDimSize(axis);
  int64_t dim = in.getDimSize(axis);
  // Not `start + size > dim`: that overflows (and passes) for a huge start.
  if (start < 0 || start > dim - size) {
    InFlightDiagnostic diag = emitOpError("range [") << start << ", ";
    if (start < 0)
      diag << start + size;
    else
      diag << uint64_t(start) + uint64_t(size);
    return diag << ") is outside dimension " << axis << " of size " << dim;
  }
  return success();
}

int64_t SliceOp::getFlops() { return 0; }

// The slice's gradient is dy back in place, zeros around it: a concat of
// zeros, dy and zeros along the axis.
LogicalResult SliceOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                                      SmallVectorImpl<Value> &operandGrads) {
  auto in = tensorType(getInput());
  if (!in.getElementType().isF32()) {
    operandGrads.push_back(Value());
    return success();
  }
  Location loc = getLoc();
  int64_t axis = getAxis(), start = getStart();
  int64_t size = tensorType(getOutput()).getDimSize(axis);
  SmallVector<Value> parts;
  auto zeros = [&](int64_t n) {
    SmallVector<int64_t> shape(in.getShape());
    shape[axis] = n;
    auto type = RankedTensorType::get(shape, in.getElementType());
    parts.push_back(
        ConstantOp::create(b, loc, DenseElementsAttr::get(type, 0.0f)));
  };
  if (start > 0)
    zeros(start);
  parts.push_back(resultGrads[0]);
  if (int64_t after = in.getDimSize(axis) - start - size; after > 0)
    zeros(after);
  operandGrads.push_back(
      parts.size() == 1 ? parts[0] : ConcatOp::create(b, loc, in, parts, axis));
  return success();
}

/// A reduction's result (nn.reduce_to, nn.reduce_max) broadcasts to its
/// input.
static LogicalResult verifyReduction(Operation *op, Value input, Value output) {
  auto in = tensorType(input), out = tensorType(output);
  if (!broadcastsTo(out.getShape(), in.getShape()))
    return op->emitOpError("result ")
           << out << " does not broadcast to the input " << in;
  return success();
}

LogicalResult ReduceToOp::verify() {
  return verifyReduction(*this, getInput(), getOutput());
}

int64_t ReduceToOp::getFlops() { return numElements(getInput()); }

// Every summed element receives the result's gradient: broadcast it back.
LogicalResult ReduceToOp::buildGradients(OpBuilder &b,
                                         ArrayRef<Value> resultGrads,
                                         SmallVectorImpl<Value> &operandGrads) {
  Value dy = resultGrads[0];
  if (dy.getType() == getInput().getType())
    operandGrads.push_back(dy);
  else
    operandGrads.push_back(
        BroadcastToOp::create(b, getLoc(), getInput().getType(), dy));
  return success();
}

LogicalResult ReduceMaxOp::verify() {
  return verifyReduction(*this, getInput(), getOutput());
}

int64_t ReduceMaxOp::getFlops() { return numElements(getInput()); }

// torch's amax gradient: dy split evenly among the elements equal to the
// maximum, (dy / count) * mask with mask = (x == max) and count its sum over
// the reduced dimensions. A NaN maximum matches nothing: 0 * (dy / 0), NaN
// as in torch.
LogicalResult
ReduceMaxOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                            SmallVectorImpl<Value> &operandGrads) {
  Location loc = getLoc();
  Type inType = getInput().getType(), outType = getOutput().getType();
  Value mask = EqualOp::create(b, loc, inType, getInput(), getOutput());
  Value count = ReduceToOp::create(b, loc, outType, mask);
  Value share = DivOp::create(b, loc, outType, resultGrads[0], count);
  operandGrads.push_back(MulOp::create(b, loc, inType, share, mask));
  return success();
}

LogicalResult BroadcastToOp::verify() {
  auto in = tensorType(getInput()), out = tensorType(getOutput());
  if (!broadcastsTo(in.getShape(), out.getShape()))
    return emitOpError("input ") << in << " does not broadcast to " << out;
  return success();
}

int64_t BroadcastToOp::getFlops() { return 0; }

LogicalResult
BroadcastToOp::buildGradients(OpBuilder &b, ArrayRef<Value> resultGrads,
                              SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(
      reduceToType(b, getLoc(), resultGrads[0], tensorType(getInput())));
  return success();
}

//===----------------------------------------------------------------------===//
// Micro-batch rules
//===----------------------------------------------------------------------===//

// A micro-batch is one of M equal slices of the batch's block within its
// axis. In the flat (row-major) order, the block and everything after the
// axis span P elements, of which each micro-batch's slice is a contiguous
// run of P / M, and the runs of all P-spans make up the micro-batch. The
// result keeps this structure on the axis whose trailing elements (T per
// index) divide P / M and whose dimension holds whole P-spans; its block is
// P / T. (torch's attention reshapes [T, B, d] to [T, B * heads, d / heads],
// block B * heads, and to [T * B, d], block B.)
std::optional<std::pair<int64_t, int64_t>>
gpipe::nn::reshapeBatchAxis(ArrayRef<int64_t> in, int64_t axis, int64_t block,
                            ArrayRef<int64_t> out, int64_t microbatches) {
  int64_t span = block;
  for (int64_t d : in.drop_front(axis + 1))
    span *= d;
  int64_t trailing = 1;
  for (int64_t a = static_cast<int64_t>(out.size()) - 1; a >= 0; --a) {
    if (trailing * out[a] < span) {
      trailing *= out[a];
      continue;
    }
    if (span % trailing != 0 || (span / trailing) % microbatches != 0 ||
        out[a] % (span / trailing) != 0)
      return std::nullopt;
    return std::make_pair(a, span / trailing);
  }
  return std::nullopt;
}

LogicalResult
TransposeOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                        SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  ArrayRef<int64_t> perm = getPermutation();
  resultAxes.push_back(std::nullopt);
  for (int64_t j = 0, e = perm.size(); j < e; ++j)
    if (perm[j] == *operandAxes[0])
      resultAxes.back() = j;
  return success();
}

LogicalResult
ConcatOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                     SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  std::optional<int64_t> axis;
  for (std::optional<int64_t> a : operandAxes) {
    if (!a || (axis && *axis != *a))
      return emitBatchSplitError(*this, "concat of tensors that do not all "
                                        "carry the batch on one axis");
    axis = a;
  }
  if (*axis == static_cast<int64_t>(getAxis()))
    return emitBatchSplitError(*this, "concat along the batch axis");
  resultAxes.push_back(axis);
  return success();
}

LogicalResult
SliceOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                    SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  int64_t a = *operandAxes[0];
  if (a == static_cast<int64_t>(getAxis()) &&
      tensorType(getOutput()).getDimSize(a) !=
          tensorType(getInput()).getDimSize(a))
    return emitBatchSplitError(*this, "a slice along the batch axis");
  resultAxes.push_back(a);
  return success();
}

/// The batch axis of a reduction's result (nn.reduce_to, nn.reduce_max) of
/// `in`, whose batch is on `axis`: the same axis less the dropped leading
/// dimensions, or nullopt when the batch axis is reduced.
static std::optional<int64_t> keptBatchAxis(Value in, Value out, int64_t axis) {
  int64_t lead = tensorType(in).getRank() - tensorType(out).getRank();
  if (axis < lead || tensorType(out).getDimSize(axis - lead) !=
                         tensorType(in).getDimSize(axis))
    return std::nullopt;
  return axis - lead;
}

// A sum over other axes keeps the batch (on its axis, less the dropped
// leading dimensions); a sum over the batch axis is a micro-batch's share of
// the mini-batch's sum (kBatchSum), which only a loss may be.
LogicalResult
ReduceToOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                       SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  resultAxes.push_back(keptBatchAxis(getInput(), getOutput(), *operandAxes[0])
                           .value_or(kBatchSum));
  return success();
}

// A maximum over other axes keeps the batch; over the batch axis, each
// micro-batch would only see the maximum of its own samples.
LogicalResult
ReduceMaxOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                        SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  std::optional<int64_t> axis =
      keptBatchAxis(getInput(), getOutput(), *operandAxes[0]);
  if (!axis)
    return emitBatchSplitError(*this, "a maximum over the batch axis");
  resultAxes.push_back(*axis);
  return success();
}

// The batch keeps its axis, moved by the added leading dimensions (the
// input's batch axis has B > 1 samples, so it is never the one broadcast).
LogicalResult
BroadcastToOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                          SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  resultAxes.push_back(*operandAxes[0] + tensorType(getOutput()).getRank() -
                       tensorType(getInput()).getRank());
  return success();
}

//===----------------------------------------------------------------------===//
// Gather (embeddings) and its gradient, scatter_add
//===----------------------------------------------------------------------===//

/// `rows` (the gathered shape, indices.shape + table.shape[1:]) against the
/// table and the indices; `what` names `rows` in the message.
static LogicalResult verifyGatherShapes(Operation *op, RankedTensorType table,
                                        RankedTensorType indices,
                                        RankedTensorType rows, StringRef what) {
  if (table.getRank() < 1)
    return op->emitOpError("the table must have rank >= 1, got ") << table;
  llvm::SmallVector<int64_t> expected(indices.getShape());
  expected.append(table.getShape().begin() + 1, table.getShape().end());
  if (rows.getShape() != ArrayRef<int64_t>(expected))
    return op->emitOpError()
           << what << " " << rows << " must have the indices' shape followed "
           << "by the table's dimensions after the first: expected "
           << RankedTensorType::get(expected, table.getElementType());
  return success();
}

LogicalResult GatherOp::verify() {
  return verifyGatherShapes(*this, tensorType(getTable()),
                            tensorType(getIndices()), tensorType(getOutput()),
                            "the result");
}

LogicalResult ScatterAddOp::verify() {
  return verifyGatherShapes(*this, tensorType(getOutput()),
                            tensorType(getIndices()), tensorType(getGrad()),
                            "the gradient");
}

int64_t GatherOp::getFlops() { return 0; }
int64_t ScatterAddOp::getFlops() {
  return numElements(getGrad()) + numElements(getOutput());
}

// d(table) is dY's rows added to the rows they were read from; the indices
// get no gradient.
LogicalResult GatherOp::buildGradients(OpBuilder &b,
                                       ArrayRef<Value> resultGrads,
                                       SmallVectorImpl<Value> &operandGrads) {
  operandGrads.push_back(ScatterAddOp::create(b, getLoc(), getTable().getType(),
                                              resultGrads[0], getIndices()));
  operandGrads.push_back(Value());
  return success();
}

// Indices carrying the batch (token ids of the data) give rows carrying it
// on the same axis. A table carrying the batch on an axis after the first
// (a Gather on another axis, transposed by the importer) keeps it, moved
// after the indices' dimensions; a table split along its rows cannot be
// indexed.
LogicalResult
GatherOp::splitBatch(ArrayRef<std::optional<int64_t>> operandAxes, int64_t,
                     SmallVectorImpl<std::optional<int64_t>> &resultAxes) {
  std::optional<int64_t> table = operandAxes[0], indices = operandAxes[1];
  if (table && indices)
    return emitBatchSplitError(*this, "a gather whose table and indices both "
                                      "carry the batch");
  if (table && *table == 0)
    return emitBatchSplitError(*this, "a gather from a table whose rows are "
                                      "the batch");
  if (indices)
    resultAxes.push_back(indices);
  else
    resultAxes.push_back(*table - 1 + tensorType(getIndices()).getRank());
  return success();
}

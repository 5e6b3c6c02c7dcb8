// gpipe-microbatch: the batch dimension B becomes B/M on a forward graph.
#include "passes/Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

namespace gpipe {
#define GEN_PASS_DEF_MICROBATCH
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

struct MicrobatchPass : gpipe::impl::MicrobatchBase<MicrobatchPass> {
  using MicrobatchBase::MicrobatchBase;
  void runOnOperation() override;

  /// The batch axis of each value that carries the batch.
  llvm::DenseMap<Value, int64_t> batchAxis;

  /// Values whose batch axis also holds dimensions that came before the
  /// batch (torch's attention flattens [T, B, d] to [T * B, d] for its
  /// GEMMs): the size of the inner block of the axis that holds the batch
  /// and what was merged after it (B here). A micro-batch is one of M equal
  /// slices of each block. Absent: the block is the whole axis.
  llvm::DenseMap<Value, int64_t> batchBlock;

  /// Values that sum over the batch (nn::kBatchSum): each micro-batch
  /// computes its share of the mini-batch's value.
  llvm::DenseSet<Value> batchSums;

  /// Finds the batch axis of `op`'s results from its operands'; fails with a
  /// diagnostic on `op` when the batch cannot be split through it.
  LogicalResult propagate(Operation *op);
  /// The rule for ops that read a sum over the batch: the M shares add up to
  /// the mini-batch's value only through ops linear in them.
  LogicalResult propagateBatchSum(Operation *op);
  /// The rule for a reshape (nn::reshapeBatchAxis), which may merge
  /// dimensions before the batch into its axis or split them out again.
  LogicalResult propagateReshape(nn::ReshapeOp op);
  /// The rule for ops with an operand whose batch shares its axis with
  /// dimensions before it: only ops that treat that axis's indices
  /// independently (elementwise ops, transposes, a GEMM's rows) take it.
  LogicalResult propagateMerged(Operation *op,
                                ArrayRef<std::optional<int64_t>> operandAxes,
                                int64_t block);
  /// Gives the operands of `op` that have the batch's size on the batch
  /// axis without carrying the batch a copy of their own that does, each
  /// micro-batch then computing the same value at its own size:
  /// - an elementwise op's splat constants (torch's zeros_like of a
  ///   batch-shaped tensor, folded at import);
  /// - an elementwise op's or a concat's broadcasts of a tensor without the
  ///   batch, from size 1 on that axis (a ViT's class token expanded to every
  ///   sample); the gradients of the M copies add up.
  void splitBatchFreeOperands(
      Operation *op, MutableArrayRef<std::optional<int64_t>> operandAxes);
};

} // namespace

// Linear in the shares: a reshape, a negation, a sum of shares, a share
// scaled by (or divided by) a value that does not carry the batch, a sum of
// a share over other axes. Anything else would see one micro-batch's part
// where the model means the whole mini-batch's value.
LogicalResult MicrobatchPass::propagateBatchSum(Operation *op) {
  auto isSum = [&](Value v) { return batchSums.contains(v); };
  auto isBatchFree = [&](Value v) {
    return !batchSums.contains(v) && !batchAxis.contains(v);
  };
  bool linear = llvm::TypeSwitch<Operation *, bool>(op)
                    .Case<nn::ReshapeOp, nn::NegOp, nn::ReduceToOp>(
                        [](Operation *) { return true; })
                    .Case<nn::AddOp, nn::SubOp>([&](Operation *o) {
                      return isSum(o->getOperand(0)) && isSum(o->getOperand(1));
                    })
                    .Case([&](nn::MulOp o) {
                      return (isSum(o.getLhs()) && isBatchFree(o.getRhs())) ||
                             (isBatchFree(o.getLhs()) && isSum(o.getRhs()));
                    })
                    .Case([&](nn::DivOp o) {
                      return isSum(o.getLhs()) && isBatchFree(o.getRhs());
                    })
                    .Default([](Operation *) { return false; });
  if (!linear) {
    if (isa<nn::AddOp, nn::SubOp>(op) &&
        llvm::any_of(op->getOperands(), isBatchFree))
      return nn::emitBatchSplitError(
          op, "a sum over the batch (each micro-batch computes its share) "
              "is added to a term that is not: that term would be counted "
              "once per micro-batch");
    return nn::emitBatchSplitError(
        op, "'" + op->getName().getStringRef() +
                "' reads a sum or mean over the batch, of which each "
                "micro-batch computes only its share (only a loss may sum "
                "over the batch, through sums and constant factors)");
  }
  batchSums.insert(op->getResult(0));
  return success();
}

LogicalResult MicrobatchPass::propagateReshape(nn::ReshapeOp op) {
  Value in = op.getInput();
  int64_t axis = batchAxis.lookup(in);
  auto inType = tensorType(in), outType = tensorType(op.getOutput());
  int64_t block = batchBlock.lookup_or(in, inType.getDimSize(axis));
  auto result = nn::reshapeBatchAxis(inType.getShape(), axis, block,
                                     outType.getShape(), microbatches);
  if (!result)
    return nn::emitBatchSplitError(op, "a reshape whose result does not hold "
                                       "each micro-batch as a slice of one "
                                       "dimension");
  batchAxis[op.getOutput()] = result->first;
  if (result->second != outType.getDimSize(result->first))
    batchBlock[op.getOutput()] = result->second;
  return success();
}

LogicalResult
MicrobatchPass::propagateMerged(Operation *op,
                                ArrayRef<std::optional<int64_t>> operandAxes,
                                int64_t block) {
  bool rowwise =
      llvm::TypeSwitch<Operation *, bool>(op)
          .Case<nn::TransposeOp>([](Operation *) { return true; })
          .Case([&](nn::GemmOp gemm) {
            // Only A's rows (the batch on them) may be merged.
            return !gemm.getTransA() && !operandAxes[1] &&
                   !(gemm.getC() && operandAxes[2]);
          })
          .Default([](Operation *o) { return o->hasTrait<nn::Fusible>(); });
  auto fail = [&]() {
    return nn::emitBatchSplitError(
        op, "'" + op->getName().getStringRef() +
                "' takes a tensor whose batch axis also holds dimensions "
                "that came before the batch (a reshape such as [T, B, d] -> "
                "[T * B, d]); only elementwise ops, transposes and a GEMM's "
                "rows can take it");
  };
  if (!rowwise)
    return fail();
  // Every batch-carrying operand must have the same blocks on the axis.
  for (auto [v, a] : llvm::zip_equal(op->getOperands(), operandAxes))
    if (a && batchBlock.lookup_or(v, tensorType(v).getDimSize(*a)) != block)
      return nn::emitBatchSplitError(
          op, "its operands hold the batch in different blocks of its axis");
  auto rule = cast<nn::BatchSplittableOpInterface>(op);
  SmallVector<std::optional<int64_t>> resultAxes;
  if (failed(rule.splitBatch(operandAxes, microbatches, resultAxes)))
    return failure();
  for (auto [result, axis] : llvm::zip_equal(op->getResults(), resultAxes)) {
    if (!axis)
      continue;
    if (*axis == nn::kBatchSum)
      return fail();
    batchAxis[result] = *axis;
    batchBlock[result] = block;
  }
  return success();
}

void MicrobatchPass::splitBatchFreeOperands(
    Operation *op, MutableArrayRef<std::optional<int64_t>> operandAxes) {
  int64_t rank = tensorType(op->getResult(0)).getRank();
  std::optional<int64_t> axis, size, block;
  for (auto [v, a] : llvm::zip_equal(op->getOperands(), operandAxes)) {
    if (!a)
      continue;
    axis = *a + rank - tensorType(v).getRank();
    size = tensorType(v).getDimSize(*a);
    if (auto it = batchBlock.find(v); it != batchBlock.end())
      block = it->second;
    break;
  }
  if (!axis)
    return;
  bool elementwise = op->hasTrait<nn::Fusible>();
  auto broadcastFromOne = [&](Value v, int64_t at) {
    auto bcast = v.getDefiningOp<nn::BroadcastToOp>();
    if (!bcast || tensorType(v).getDimSize(at) != *size)
      return false;
    auto in = tensorType(bcast.getInput());
    int64_t inAt = at - (tensorType(v).getRank() - in.getRank());
    return inAt < 0 || in.getDimSize(inAt) == 1;
  };
  for (OpOperand &use : op->getOpOperands()) {
    std::optional<int64_t> &operandAxis = operandAxes[use.getOperandNumber()];
    auto t = tensorType(use.get());
    int64_t at = *axis - (rank - t.getRank());
    if (operandAxis || at < 0)
      continue;
    bool splat = elementwise && t.getDimSize(at) != 1 &&
                 nn::splatValue(use.get());
    if (!splat && !broadcastFromOne(use.get(), at))
      continue;
    OpBuilder b(op);
    Value copy = b.clone(*use.get().getDefiningOp())->getResult(0);
    use.set(copy);
    operandAxis = at;
    batchAxis[copy] = at;
    if (block)
      batchBlock[copy] = *block;
  }
}

// Each op's rule is its BatchSplittableOpInterface (in its family's file in
// dialects/nn/ops/).
LogicalResult MicrobatchPass::propagate(Operation *op) {
  if (llvm::any_of(op->getOperands(),
                   [&](Value v) { return batchSums.contains(v); }))
    return propagateBatchSum(op);
  if (auto reshape = dyn_cast<nn::ReshapeOp>(op))
    return batchAxis.contains(reshape.getInput()) ? propagateReshape(reshape)
                                                  : success();
  SmallVector<std::optional<int64_t>> operandAxes;
  for (Value v : op->getOperands()) {
    auto it = batchAxis.find(v);
    operandAxes.push_back(it == batchAxis.end()
                              ? std::nullopt
                              : std::optional<int64_t>(it->second));
  }
  if (llvm::none_of(operandAxes, [](auto a) { return a.has_value(); }))
    return success();
  if (op->hasTrait<nn::Fusible>() || isa<nn::ConcatOp>(op))
    splitBatchFreeOperands(op, operandAxes);
  for (Value v : op->getOperands())
    if (auto it = batchBlock.find(v); it != batchBlock.end())
      return propagateMerged(op, operandAxes, it->second);
  auto rule = dyn_cast<nn::BatchSplittableOpInterface>(op);
  if (!rule)
    return nn::emitBatchSplitError(op, "'" + op->getName().getStringRef() +
                                           "' is not supported on "
                                           "batch-carrying tensors");
  SmallVector<std::optional<int64_t>> resultAxes;
  if (failed(rule.splitBatch(operandAxes, microbatches, resultAxes)))
    return failure();
  for (auto [result, axis] : llvm::zip_equal(op->getResults(), resultAxes)) {
    if (axis == nn::kBatchSum)
      batchSums.insert(result);
    else if (axis)
      batchAxis[result] = *axis;
  }
  return success();
}

void MicrobatchPass::runOnOperation() {
  func::FuncOp func = getOperation();
  batchAxis.clear();
  batchBlock.clear();
  batchSums.clear();
  if (func.isExternal())
    return;
  if (microbatches < 1) {
    func.emitError("microbatches must be >= 1, got ")
        << static_cast<int64_t>(microbatches);
    return signalPassFailure();
  }
  Block &block = func.getBody().front();
  // The graph inputs' first axis is the batch; they must agree on it.
  int64_t batch = -1;
  for (BlockArgument arg : block.getArguments()) {
    auto t = tensorType(arg);
    if (t.getRank() == 0)
      continue;
    if (batch >= 0 && t.getDimSize(0) != batch) {
      func.emitError("graph inputs disagree on the batch size: ")
          << batch << " and " << t.getDimSize(0) << " (argument #"
          << arg.getArgNumber() << ")";
      return signalPassFailure();
    }
    batch = t.getDimSize(0);
    batchAxis[arg] = 0;
  }
  if (batchnorm != "microbatch" && batchnorm != "deferred") {
    func.emitError("unknown batchnorm mode '")
        << batchnorm << "' (expected microbatch or deferred)";
    return signalPassFailure();
  }
  pipeline::setNumMicrobatches(func, microbatches);
  if (batch >= 0)
    pipeline::setBatchSize(func, batch);
  if (microbatches == 1)
    return;
  if (batch < 0) {
    func.emitError("no graph input carries a batch to split");
    return signalPassFailure();
  }
  if (batch % microbatches != 0) {
    func.emitError("the batch size ")
        << batch << " is not divisible by the number of micro-batches "
        << static_cast<int64_t>(microbatches);
    return signalPassFailure();
  }
  for (Operation &op : block.without_terminator())
    if (failed(propagate(&op)))
      return signalPassFailure();
  // Only a mean or sum over the batch can be split into shares; a loss that
  // does not depend on the batch would be counted M times.
  Operation *ret = block.getTerminator();
  for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
    if (!nn::isLoss(func, i) || batchSums.contains(ret->getOperand(i)))
      continue;
    Operation *def = ret->getOperand(i).getDefiningOp();
    (def ? def->emitError() : func.emitError())
        << "cannot split the batch into micro-batches: the loss must be a "
           "mean or sum over the batch (a softmax cross-entropy or negative "
           "log-likelihood, or a ReduceMean/ReduceSum over the batch axis), "
           "not '"
        << (def ? def->getName().getStringRef() : StringRef("an argument"))
        << "'";
    return signalPassFailure();
  }

  // Rewrite every batch-carrying type: its batch axis shrinks M-fold.
  auto shrink = [&](Value v) {
    auto t = tensorType(v);
    SmallVector<int64_t> shape(t.getShape());
    shape[batchAxis.lookup(v)] /= microbatches;
    auto shrunk = RankedTensorType::get(shape, t.getElementType());
    v.setType(shrunk);
    if (auto c = v.getDefiningOp<nn::ConstantOp>()) // A splat (above).
      c.setValueAttr(cast<DenseElementsAttr>(c.getValue()).resizeSplat(shrunk));
  };
  for (auto [v, axis] : batchAxis) {
    if (tensorType(v).getDimSize(axis) % microbatches != 0) {
      Operation *where = v.getDefiningOp();
      (where ? where->emitError() : func.emitError())
          << "cannot split the batch into micro-batches: the batch axis has "
             "size "
          << tensorType(v).getDimSize(axis) << ", not divisible by "
          << static_cast<int64_t>(microbatches);
      return signalPassFailure();
    }
  }
  for (auto [v, axis] : batchAxis)
    shrink(v);
  // Each micro-batch's statistics count its share of the elements; deferred
  // ones are combined over the step's M micro-batches.
  WalkResult walk = func.walk([&](nn::UpdateRunningStatsOp update) {
    auto bn = update.getMean().getDefiningOp<nn::BatchNormOp>();
    if (!bn || !batchAxis.contains(bn.getInput()))
      return WalkResult::advance();
    int64_t count = update.getCount() / microbatches;
    if (count < 2) {
      update.emitError("cannot split the batch into micro-batches: a "
                       "micro-batch's batch normalization would see ")
          << count << " value per channel (at least 2 are needed)";
      return WalkResult::interrupt();
    }
    update.setCount(count);
    if (batchnorm == "deferred")
      update.setMicrobatches(microbatches);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return signalPassFailure();
  func.setType(FunctionType::get(func.getContext(), block.getArgumentTypes(),
                                 block.getTerminator()->getOperandTypes()));
}

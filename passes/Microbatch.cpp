// gpipe-microbatch: the batch dimension B becomes B/M on a forward graph.
#include "passes/Passes.h"

#include "llvm/ADT/DenseMap.h"

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

  /// Finds the batch axis of `op`'s results from its operands'; fails with a
  /// diagnostic on `op` when the batch cannot be split through it.
  LogicalResult propagate(Operation *op);
};

} // namespace

// Each op's rule is its BatchSplittableOpInterface (in its family's file in
// dialects/nn/ops/).
LogicalResult MicrobatchPass::propagate(Operation *op) {
  SmallVector<std::optional<int64_t>> operandAxes;
  for (Value v : op->getOperands()) {
    auto it = batchAxis.find(v);
    operandAxes.push_back(it == batchAxis.end()
                              ? std::nullopt
                              : std::optional<int64_t>(it->second));
  }
  if (llvm::none_of(operandAxes, [](auto a) { return a.has_value(); }))
    return success();
  auto rule = dyn_cast<nn::BatchSplittableOpInterface>(op);
  if (!rule)
    return nn::emitBatchSplitError(op, "'" + op->getName().getStringRef() +
                                           "' is not supported on "
                                           "batch-carrying tensors");
  SmallVector<std::optional<int64_t>> resultAxes;
  if (failed(rule.splitBatch(operandAxes, microbatches, resultAxes)))
    return failure();
  for (auto [result, axis] : llvm::zip_equal(op->getResults(), resultAxes))
    if (axis)
      batchAxis[result] = *axis;
  return success();
}

void MicrobatchPass::runOnOperation() {
  func::FuncOp func = getOperation();
  batchAxis.clear();
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
  // Only a mean over the batch can be split into shares; another term (a
  // regularizer of the parameters, say) would be counted M times.
  Operation *ret = block.getTerminator();
  for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
    if (!nn::isLoss(func, i))
      continue;
    Operation *def = ret->getOperand(i).getDefiningOp();
    if (!isa_and_nonnull<nn::SoftmaxCrossEntropyOp>(def)) {
      (def ? def->emitError() : func.emitError())
          << "cannot split the batch into micro-batches: the loss must be a "
             "softmax cross-entropy (a mean over the batch), not '"
          << (def ? def->getName().getStringRef() : StringRef("an argument"))
          << "'";
      return signalPassFailure();
    }
  }

  // Rewrite every batch-carrying type: its batch axis shrinks M-fold.
  auto shrink = [&](Value v) {
    auto t = tensorType(v);
    SmallVector<int64_t> shape(t.getShape());
    shape[batchAxis.lookup(v)] /= microbatches;
    v.setType(RankedTensorType::get(shape, t.getElementType()));
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
  func.setType(FunctionType::get(func.getContext(), block.getArgumentTypes(),
                                 block.getTerminator()->getOperandTypes()));
}

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

LogicalResult MicrobatchPass::propagate(Operation *op) {
  auto axisOf = [&](Value v) -> std::optional<int64_t> {
    auto it = batchAxis.find(v);
    if (it == batchAxis.end())
      return std::nullopt;
    return it->second;
  };
  bool any = llvm::any_of(op->getOperands(),
                          [&](Value v) { return batchAxis.count(v); });
  if (!any)
    return success();
  auto fail = [&](const Twine &why) {
    return op->emitError("cannot split the batch into micro-batches: ") << why;
  };

  if (isa<nn::AddOp, nn::SubOp, nn::MulOp, nn::DivOp, nn::NegOp, nn::ReluOp,
          nn::TanhOp, nn::SigmoidOp, nn::ErfOp>(op)) {
    auto out = tensorType(op->getResult(0));
    int64_t r = out.getRank();
    std::optional<int64_t> axis;
    for (Value v : op->getOperands()) {
      auto t = tensorType(v);
      int64_t lead = r - t.getRank();
      if (auto a = axisOf(v)) {
        if (axis && *axis != *a + lead)
          return fail("its operands carry the batch on different axes");
        axis = *a + lead;
      }
    }
    // An operand without the batch must broadcast along it.
    for (Value v : op->getOperands()) {
      auto t = tensorType(v);
      int64_t at = *axis - (r - t.getRank());
      if (!batchAxis.count(v) && at >= 0 && t.getDimSize(at) != 1)
        return fail("an operand that does not depend on the graph inputs has "
                    "the batch size on the batch axis");
    }
    batchAxis[op->getResult(0)] = *axis;
    return success();
  }
  if (auto gemm = dyn_cast<nn::GemmOp>(op)) {
    if (axisOf(gemm.getA()) && axisOf(gemm.getB()))
      return fail("both GEMM operands carry the batch");
    if (auto a = axisOf(gemm.getA())) {
      if (*a != (gemm.getTransA() ? 1 : 0))
        return fail("the GEMM contracts over the batch axis");
      batchAxis[gemm.getOutput()] = 0;
    } else if (auto b = axisOf(gemm.getB())) {
      if (*b != (gemm.getTransB() ? 0 : 1))
        return fail("the GEMM contracts over the batch axis");
      batchAxis[gemm.getOutput()] = 1;
    }
    if (Value c = gemm.getC()) {
      auto ct = tensorType(c);
      int64_t outAxis = batchAxis.count(gemm.getOutput())
                            ? batchAxis.lookup(gemm.getOutput())
                            : -1;
      int64_t lead = 2 - ct.getRank();
      if (auto ca = axisOf(c)) {
        if (outAxis < 0)
          return fail("the GEMM's C operand carries the batch but neither A "
                      "nor B does");
        if (*ca + lead != outAxis)
          return fail("the GEMM's C operand carries the batch on another axis");
      } else if (outAxis >= 0 && outAxis - lead >= 0 &&
                 ct.getDimSize(outAxis - lead) != 1) {
        return fail("the GEMM's C operand has the batch size on the batch "
                    "axis but does not depend on the graph inputs");
      }
    }
    return success();
  }
  if (auto reshape = dyn_cast<nn::ReshapeOp>(op)) {
    // The batch is outermost, so each micro-batch is a contiguous 1/M of the
    // buffer: any target whose first dimension M divides keeps it so.
    if (*axisOf(reshape.getInput()) != 0)
      return fail("a reshape of a tensor whose batch axis is not the first");
    auto out = tensorType(reshape.getOutput());
    if (out.getRank() == 0 || out.getDimSize(0) % microbatches != 0)
      return fail("the reshape target's first dimension is not divisible by "
                  "the number of micro-batches");
    batchAxis[reshape.getOutput()] = 0;
    return success();
  }
  if (auto t = dyn_cast<nn::TransposeOp>(op)) {
    int64_t a = *axisOf(t.getInput());
    auto perm = t.getPermutation();
    for (int64_t j = 0, e = perm.size(); j < e; ++j)
      if (perm[j] == a)
        batchAxis[t.getOutput()] = j;
    return success();
  }
  if (auto c = dyn_cast<nn::ConcatOp>(op)) {
    std::optional<int64_t> axis;
    for (Value v : c.getInputs()) {
      auto a = axisOf(v);
      if (!a || (axis && *axis != *a))
        return fail("concat of tensors that do not all carry the batch on "
                    "one axis");
      axis = a;
    }
    if (*axis == static_cast<int64_t>(c.getAxis()))
      return fail("concat along the batch axis");
    batchAxis[c.getOutput()] = *axis;
    return success();
  }
  if (auto s = dyn_cast<nn::SliceOp>(op)) {
    int64_t a = *axisOf(s.getInput());
    if (a == static_cast<int64_t>(s.getAxis()) &&
        tensorType(s.getOutput()).getDimSize(a) !=
            tensorType(s.getInput()).getDimSize(a))
      return fail("a slice along the batch axis");
    batchAxis[s.getOutput()] = a;
    return success();
  }
  if (auto x = dyn_cast<nn::SoftmaxCrossEntropyOp>(op)) {
    if (axisOf(x.getLogits()) != 0 || axisOf(x.getLabels()) != 0)
      return fail("the loss's logits and labels must both carry the batch "
                  "on their first axis");
    if (microbatches > 1)
      x.setMicrobatchesAttr(IntegerAttr::get(
          IntegerType::get(op->getContext(), 64), microbatches));
    return success(); // the loss is a scalar
  }
  return fail("'" + op->getName().getStringRef() +
              "' is not supported on batch-carrying tensors");
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
  OpBuilder b(func.getContext());
  auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
  func->setAttr("pipe.microbatches", i64(microbatches));
  if (batch >= 0)
    func->setAttr("pipe.batch_size", i64(batch));
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
    if (!func.getResultAttr(i, "nn.loss"))
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

// gpipe-autodiff: reverse-mode differentiation of the loss w.r.t. parameters.
#include "passes/Passes.h"

#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringMap.h"

namespace gpipe {
#define GEN_PASS_DEF_AUTODIFF
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {
struct AutodiffPass : gpipe::impl::AutodiffBase<AutodiffPass> {
  void runOnOperation() override;
};
} // namespace

/// Index of the result marked `nn.loss`, or failure with a diagnostic.
static FailureOr<unsigned> findLoss(func::FuncOp func) {
  std::optional<unsigned> loss;
  for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
    if (!nn::isLoss(func, i))
      continue;
    if (loss) {
      func.emitError("more than one result is marked 'nn.loss'");
      return failure();
    }
    loss = i;
  }
  if (!loss) {
    func.emitError("no result is marked 'nn.loss'; nothing to differentiate");
    return failure();
  }
  auto type = dyn_cast<RankedTensorType>(func.getResultTypes()[*loss]);
  if (!type || type.getRank() != 0 || !type.getElementType().isF32()) {
    func.emitError("the loss (result #")
        << *loss << ") must be a tensor<f32> scalar, got "
        << func.getResultTypes()[*loss];
    return failure();
  }
  return *loss;
}

void AutodiffPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  if (!func.getBody().hasOneBlock()) {
    func.emitError("the training step must be a single block");
    return signalPassFailure();
  }
  FailureOr<unsigned> lossIndex = findLoss(func);
  if (failed(lossIndex))
    return signalPassFailure();

  Block &block = func.getBody().front();
  Operation *ret = block.getTerminator();
  Value loss = ret->getOperand(*lossIndex);
  OpBuilder b(ret);

  // Accumulated gradient of every value that influences the loss.
  llvm::DenseMap<Value, Value> grads;
  auto accumulate = [&](Value v, Value g, Location loc) {
    auto [it, inserted] = grads.try_emplace(v, g);
    if (!inserted)
      it->second = nn::AddOp::create(b, loc, g.getType(), it->second, g);
  };
  // In a partitioned graph, every op built here goes to the stage of the
  // forward op it differentiates and is marked `nn.backward`, for
  // gpipe-outline-stages.
  auto mark = [&](Operation *last, Operation *forwardOp) {
    std::optional<int64_t> stage =
        forwardOp ? pipeline::getStage(forwardOp) : std::nullopt;
    if (!stage)
      return;
    for (Operation *op = last ? last->getNextNode() : &block.front();
         op && op != ret; op = op->getNextNode()) {
      nn::setBackward(op);
      pipeline::setStage(op, *stage);
    }
  };
  auto lossType = cast<RankedTensorType>(loss.getType());
  Operation *beforeSeed = ret->getPrevNode();
  accumulate(loss,
             nn::ConstantOp::create(b, ret->getLoc(),
                                    DenseElementsAttr::get(lossType, 1.0f)),
             ret->getLoc());
  mark(beforeSeed, loss.getDefiningOp());

  // Ops created below go before the return: iterate over the forward ops only.
  // A value is active when it depends on a parameter: only those need
  // gradients (not the data inputs, labels or constants).
  SmallVector<Operation *> forward;
  llvm::DenseSet<Value> active;
  llvm::StringMap<nn::ParamOp> paramNames;
  for (Operation &op : block.without_terminator()) {
    forward.push_back(&op);
    if (auto param = dyn_cast<nn::ParamOp>(op)) {
      auto [it, inserted] = paramNames.try_emplace(param.getName(), param);
      if (!inserted) {
        InFlightDiagnostic diag = param.emitError("parameter '")
                                  << param.getName() << "' is declared twice";
        diag.attachNote(it->second.getLoc()) << "first declared here";
        return signalPassFailure();
      }
    }
    // A frozen parameter (or a running statistic) is read, not trained: no
    // gradient with respect to it.
    bool trainedParam = false;
    if (auto param = dyn_cast<nn::ParamOp>(op)) {
      auto decl = SymbolTable::lookupNearestSymbolFrom<nn::ParameterOp>(
          param, param.getNameAttr());
      trainedParam = !decl || (!decl.getFrozen() && !decl.getState());
    }
    bool isActive = trainedParam ||
                    llvm::any_of(op.getOperands(),
                                 [&](Value v) { return active.contains(v); });
    if (isActive)
      active.insert(op.getResults().begin(), op.getResults().end());
  }

  for (Operation *op : llvm::reverse(forward)) {
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value r : op->getResults()) {
      Value g = grads.lookup(r);
      resultGrads.push_back(g);
      any |= bool(g);
    }
    // Leaves (parameters, constants) have nothing to propagate to, and an op
    // that depends on no parameter needs no gradient at all.
    bool activeOp = llvm::any_of(op->getResults(),
                                 [&](Value r) { return active.contains(r); });
    if (!any || !activeOp || op->getNumOperands() == 0)
      continue;
    auto diff = dyn_cast<nn::DifferentiableOpInterface>(op);
    if (!diff) {
      op->emitError("cannot differentiate '")
          << op->getName() << "': it has no gradient rule";
      return signalPassFailure();
    }
    // A multi-result op whose other results don't reach the loss gets zeros.
    for (unsigned i = 0, e = resultGrads.size(); i < e; ++i) {
      if (resultGrads[i])
        continue;
      // (Integer results, such as a max pool's indices, get integer zeros.)
      auto t = cast<RankedTensorType>(op->getResult(i).getType());
      auto zero = t.getElementType().isF32()
                      ? DenseElementsAttr::get(t, 0.0f)
                      : DenseElementsAttr::get(t, static_cast<int64_t>(0));
      resultGrads[i] = nn::ConstantOp::create(b, op->getLoc(), zero);
    }
    SmallVector<Value> operandGrads;
    Operation *last = ret->getPrevNode();
    auto markOnExit = llvm::make_scope_exit([&] { mark(last, op); });
    if (failed(diff.buildGradients(b, resultGrads, operandGrads)))
      return signalPassFailure();
    if (operandGrads.size() != op->getNumOperands()) {
      op->emitError("gradient rule returned ")
          << operandGrads.size() << " gradients for " << op->getNumOperands()
          << " operands";
      return signalPassFailure();
    }
    for (auto [operand, g] : llvm::zip(op->getOperands(), operandGrads))
      if (g && active.contains(operand))
        accumulate(operand, g, op->getLoc());
  }

  for (Operation *op : forward) {
    auto param = dyn_cast<nn::ParamOp>(op);
    if (!param)
      continue;
    if (Value g = grads.lookup(param.getOutput())) {
      auto pg =
          nn::ParamGradOp::create(b, param.getLoc(), param.getOutput(), g);
      if (std::optional<int64_t> stage = pipeline::getStage(param))
        pipeline::setStage(pg, *stage);
    }
  }

  // Gradient rules also build the gradients of inactive operands: drop them.
  Operation *firstNew =
      forward.empty() ? &block.front() : forward.back()->getNextNode();
  SmallVector<Operation *> created;
  for (Operation *op = firstNew; op && op != ret; op = op->getNextNode())
    created.push_back(op);
  for (Operation *op : llvm::reverse(created))
    if (isOpTriviallyDead(op))
      op->erase();
}

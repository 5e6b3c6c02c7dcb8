// gpipe-remat: each stage's backward recomputes its forward from the stage's
// boundary inputs (GPipe's rematerialization).
#include "passes/Passes.h"
#include "passes/Utils.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace gpipe {
#define GEN_PASS_DEF_REMAT
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

struct RematPass : gpipe::impl::RematBase<RematPass> {
  using RematBase::RematBase;
  void runOnOperation() override;
};

/// Rewrites one stage: its forward returns its boundary inputs only, and its
/// backward rebuilds the old stash in a pipe.remat region.
LogicalResult rematerialize(func::FuncOp forward, func::FuncOp backward) {
  Block &fwd = forward.getBody().front();
  auto ret = cast<func::ReturnOp>(fwd.getTerminator());
  SmallVector<Value> oldStash(ret.getOperands());
  // Boundary inputs: the graph inputs the stage reads, the tensors it
  // receives.
  llvm::SetVector<Value> boundary;
  for (BlockArgument a : fwd.getArguments())
    boundary.insert(a);
  for (Operation &op : fwd)
    if (auto recv = dyn_cast<pipeline::RecvOp>(op))
      boundary.insert(recv.getValue());

  // The forward ops that recompute the stash from the boundary.
  llvm::SetVector<Operation *> slice;
  llvm::SetVector<Value> used;
  SmallVector<Value> work(oldStash.begin(), oldStash.end());
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (boundary.contains(v)) {
      used.insert(v);
      continue;
    }
    Operation *def = v.getDefiningOp();
    if (!def || slice.contains(def))
      continue;
    if (!(isPure(def) || isa<nn::ParamOp>(def)) ||
        !isa<nn::NNDialect>(def->getDialect()))
      return def->emitError("cannot rematerialize '")
             << def->getName() << "': it is not a pure nn op";
    slice.insert(def);
    work.append(def->operand_begin(), def->operand_end());
  }
  // Everything kept is a boundary input already: nothing to recompute.
  if (slice.empty())
    return success();
  SmallVector<Value> newStash;
  for (Value v : boundary)
    if (used.contains(v))
      newStash.push_back(v);

  // Backward: new arguments for the boundary inputs, the region in front.
  Block &bwd = backward.getBody().front();
  unsigned oldCount = bwd.getNumArguments();
  SmallVector<Value> newArgs;
  for (Value v : newStash)
    newArgs.push_back(bwd.addArgument(v.getType(), v.getLoc()));
  OpBuilder b = OpBuilder::atBlockBegin(&bwd);
  SmallVector<Type> stashTypes(
      llvm::map_range(oldStash, [](Value v) { return v.getType(); }));
  auto remat =
      pipeline::RematOp::create(b, forward.getLoc(), stashTypes, newArgs);
  Block *body = b.createBlock(&remat.getBody());
  IRMapping map;
  for (auto [v, arg] : llvm::zip(newStash, newArgs))
    map.map(v, body->addArgument(arg.getType(), v.getLoc()));
  OpBuilder rb = OpBuilder::atBlockEnd(body);
  for (Operation &op : fwd)
    if (slice.contains(&op))
      rb.clone(op, map);
  SmallVector<Value> yielded;
  for (Value v : oldStash)
    yielded.push_back(map.lookup(v));
  pipeline::YieldOp::create(rb, forward.getLoc(), yielded);
  for (unsigned i = 0; i < oldCount; ++i)
    bwd.getArgument(i).replaceAllUsesWith(remat.getResult(i));
  llvm::BitVector erase(bwd.getNumArguments());
  erase.set(0, oldCount);
  if (failed(backward.eraseArguments(erase)))
    return failure();
  backward.setType(
      FunctionType::get(backward.getContext(), bwd.getArgumentTypes(), {}));

  // Forward: return the boundary inputs.
  ret.getOperandsMutable().assign(newStash);
  forward.setType(FunctionType::get(
      forward.getContext(), fwd.getArgumentTypes(), ret.getOperandTypes()));
  eraseDeadOps(forward);
  eraseDeadOps(backward);
  return success();
}

} // namespace

void RematPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (mode != "stage" && mode != "none") {
    module.emitError("remat mode must be stage or none, got '") << mode << "'";
    return signalPassFailure();
  }
  if (mode == "none")
    return;
  int64_t k = pipeline::getNumStages(module);
  if (k < 1) {
    module.emitError("pipe.stages must be >= 1, got ") << k;
    return signalPassFailure();
  }
  for (int64_t s : stages)
    if (s < 0 || s >= k) {
      module.emitError("remat stage ") << s << " is out of range: the model has "
                                       << k << " piece(s)";
      return signalPassFailure();
    }
  for (int64_t s = 0; s < k; ++s) {
    if (!stages.empty() && !llvm::is_contained(stages, s))
      continue;
    func::FuncOp forward = findStageFunc(module, s, pipeline::Phase::Forward);
    func::FuncOp backward = findStageFunc(module, s, pipeline::Phase::Backward);
    if (!forward || !backward) {
      module.emitError("stage ") << s
                                 << " has no forward or backward function; "
                                    "run gpipe-outline-stages first";
      return signalPassFailure();
    }
    if (forward.getNumResults() == 0)
      continue; // nothing kept, nothing to recompute
    if (failed(rematerialize(forward, backward)))
      return signalPassFailure();
  }
  pipeline::setRemat(module, mode);
}

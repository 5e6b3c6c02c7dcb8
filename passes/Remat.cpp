// gpipe-remat: each stage's backward recomputes its forward from the stage's
// boundary inputs (GPipe's rematerialization), or (mode=segments) recomputes
// only the values a per-stage stash budget cannot keep.
#include "dialects/nn/CostModel.h"
#include "passes/CostTable.h"
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

/// The boundary inputs of a stage's forward: the graph inputs it reads, the
/// tensors it receives.
llvm::SetVector<Value> boundaryInputs(Block &fwd) {
  llvm::SetVector<Value> boundary;
  for (BlockArgument a : fwd.getArguments())
    boundary.insert(a);
  for (Operation &op : fwd)
    if (auto recv = dyn_cast<pipeline::RecvOp>(op))
      boundary.insert(recv.getValue());
  return boundary;
}

/// What recomputing the values of `stash` not in `keep` from the boundary
/// inputs and the kept values takes: the forward ops (`slice`), the stash
/// that replaces the old one (the kept values, then the boundary inputs the
/// slice reads), its bytes per micro-batch and the slice's estimated
/// seconds. Fails (with `bad` set) on an op that cannot be recomputed.
struct RematSlice {
  llvm::SetVector<Operation *> slice;
  SmallVector<Value> newStash;
  int64_t bytes = 0;
  double seconds = 0;
  Operation *bad = nullptr;
};

/// Seconds to recompute one op (the analytic model's, or a cost table's).
using SecondsOf = llvm::function_ref<double(Operation *)>;

RematSlice sliceFor(ArrayRef<Value> stash, ArrayRef<bool> keep,
                    const llvm::SetVector<Value> &inputs, SecondsOf secondsOf) {
  RematSlice r;
  llvm::SetVector<Value> boundary(inputs.begin(), inputs.end());
  llvm::SetVector<Value> kept, used;
  for (auto [v, k] : llvm::zip(stash, keep))
    if (k && !inputs.contains(v))
      kept.insert(v);
  boundary.insert(kept.begin(), kept.end());
  SmallVector<Value> work;
  for (auto [v, k] : llvm::zip(stash, keep))
    if (!k || inputs.contains(v))
      work.push_back(v);
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (boundary.contains(v)) {
      used.insert(v);
      continue;
    }
    Operation *def = v.getDefiningOp();
    if (!def || r.slice.contains(def))
      continue;
    if (!(isPure(def) || isa<nn::ParamOp>(def)) ||
        !isa<nn::NNDialect>(def->getDialect())) {
      r.bad = def;
      return r;
    }
    r.slice.insert(def);
    r.seconds += secondsOf(def);
    work.append(def->operand_begin(), def->operand_end());
  }
  for (Value v : kept)
    r.newStash.push_back(v);
  for (Value v : inputs)
    if (used.contains(v) && !kept.contains(v))
      r.newStash.push_back(v);
  for (Value v : r.newStash)
    r.bytes += bytesOf(v);
  return r;
}

/// mode=segments: which stash values to keep so that the new stash fits
/// `budget` bytes per micro-batch with the least recomputation. Greedy: from
/// keeping everything, drops the value that saves the most bytes per second
/// of recomputation added, until the stash fits; keeps nothing (the whole
/// forward recomputed) when that never fits.
SmallVector<bool> chooseKept(ArrayRef<Value> stash,
                             const llvm::SetVector<Value> &inputs,
                             int64_t budget, SecondsOf secondsOf) {
  SmallVector<bool> keep(stash.size(), true);
  RematSlice cur = sliceFor(stash, keep, inputs, secondsOf);
  while (cur.bytes > budget && !cur.bad) {
    int best = -1;
    double bestRatio = -1;
    RematSlice bestSlice;
    for (size_t i = 0; i < stash.size(); ++i) {
      if (!keep[i] || inputs.contains(stash[i]))
        continue;
      keep[i] = false;
      RematSlice t = sliceFor(stash, keep, inputs, secondsOf);
      keep[i] = true;
      if (t.bad || t.bytes >= cur.bytes)
        continue;
      double ratio = double(cur.bytes - t.bytes) /
                     std::max(t.seconds - cur.seconds, 1e-12);
      if (ratio > bestRatio) {
        bestRatio = ratio;
        best = static_cast<int>(i);
        bestSlice = std::move(t);
      }
    }
    if (best < 0)
      break;
    keep[best] = false;
    cur = std::move(bestSlice);
  }
  if (cur.bytes > budget)
    keep.assign(stash.size(), false);
  return keep;
}

/// Rewrites one stage: its forward returns the kept stash values (`keep`;
/// empty: none) and the boundary inputs the recomputation needs, and its
/// backward rebuilds the old stash in a pipe.remat region.
LogicalResult rematerialize(func::FuncOp forward, func::FuncOp backward,
                            ArrayRef<bool> keep = {}) {
  Block &fwd = forward.getBody().front();
  auto ret = cast<func::ReturnOp>(fwd.getTerminator());
  SmallVector<Value> oldStash(ret.getOperands());
  llvm::SetVector<Value> inputs = boundaryInputs(fwd);
  SmallVector<bool> keepAll(oldStash.size(), false);
  if (!keep.empty())
    keepAll.assign(keep.begin(), keep.end());
  // (Only the slice matters here, not its cost.)
  RematSlice r =
      sliceFor(oldStash, keepAll, inputs, [](Operation *) { return 0.0; });
  if (r.bad)
    return r.bad->emitError("cannot rematerialize '")
           << r.bad->getName() << "': it is not a pure nn op";
  // Everything kept is a boundary input or kept: nothing to recompute.
  if (r.slice.empty())
    return success();
  const llvm::SetVector<Operation *> &slice = r.slice;
  SmallVector<Value> newStash = r.newStash;

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

/// Piece `s`'s forward and backward functions, or an error.
LogicalResult stageFunctions(ModuleOp module, int64_t s, func::FuncOp &forward,
                             func::FuncOp &backward) {
  forward = findStageFunc(module, s, pipeline::Phase::Forward);
  backward = findStageFunc(module, s, pipeline::Phase::Backward);
  if (forward && backward)
    return success();
  return module.emitError("stage ")
         << s
         << " has no forward or backward function; run gpipe-outline-stages "
            "first";
}

} // namespace

void RematPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (mode != "stage" && mode != "none" && mode != "segments") {
    module.emitError("remat mode must be stage, segments or none, got '")
        << mode << "'";
    return signalPassFailure();
  }
  if (mode == "none")
    return;
  int64_t k = pipeline::getNumStages(module);
  if (k < 1) {
    module.emitError("pipe.stages must be >= 1, got ") << k;
    return signalPassFailure();
  }
  if (mode == "segments") {
    if (!stages.empty()) {
      module.emitError("remat stages= goes with mode=stage; mode=segments "
                       "takes stash-bytes= (one per piece)");
      return signalPassFailure();
    }
    if (static_cast<int64_t>(stashBytes.size()) != k) {
      module.emitError("remat mode=segments needs stash-bytes= with one "
                       "entry per piece (")
          << k << "), got " << stashBytes.size();
      return signalPassFailure();
    }
    // costs=: each op's measured forward seconds per step (the table's
    // node, else the mean of its signature, else the analytic estimate on
    // the table's scale); else the analytic model.
    std::optional<CostTable> table;
    const int64_t m =
        std::max<int64_t>(1, pipeline::getNumMicrobatches(module));
    if (!costs.empty()) {
      std::string err;
      table = loadCostTable(costs, err);
      if (!table) {
        module.emitError("cost table: ") << err;
        return signalPassFailure();
      }
    }
    auto secondsOf = [&](Operation *op) {
      if (!table)
        return nn::analyticSeconds(op);
      if (std::optional<NodeCost> c = table->lookup(op, m))
        return c->forward;
      return nn::analyticSeconds(op) * double(m) * table->scale;
    };
    bool any = false;
    for (int64_t s = 0; s < k; ++s) {
      if (stashBytes[s] < 0)
        continue; // keeps its whole stash
      func::FuncOp forward, backward;
      if (failed(stageFunctions(module, s, forward, backward)))
        return signalPassFailure();
      if (forward.getNumResults() == 0)
        continue;
      Block &fwd = forward.getBody().front();
      SmallVector<Value> stash(fwd.getTerminator()->getOperands());
      SmallVector<bool> keep =
          chooseKept(stash, boundaryInputs(fwd), stashBytes[s], secondsOf);
      if (llvm::all_of(keep, [](bool b) { return b; }))
        continue; // fits as it is
      any = true;
      if (failed(rematerialize(forward, backward, keep)))
        return signalPassFailure();
    }
    if (any)
      pipeline::setRemat(module, "stage");
    return;
  }
  for (int64_t s : stages)
    if (s < 0 || s >= k) {
      module.emitError("remat stage ")
          << s << " is out of range: the model has " << k << " piece(s)";
      return signalPassFailure();
    }
  for (int64_t s = 0; s < k; ++s) {
    if (!stages.empty() && !llvm::is_contained(stages, s))
      continue;
    func::FuncOp forward, backward;
    if (failed(stageFunctions(module, s, forward, backward)))
      return signalPassFailure();
    if (forward.getNumResults() == 0)
      continue; // nothing kept, nothing to recompute
    if (failed(rematerialize(forward, backward)))
      return signalPassFailure();
  }
  pipeline::setRemat(module, mode);
}

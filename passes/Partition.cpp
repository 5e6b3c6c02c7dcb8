// gpipe-partition: cuts the forward graph into K cost-balanced stages.
#include "passes/PartitionCuts.h"
#include "passes/Passes.h"

#include "llvm/ADT/DenseMap.h"

#include <algorithm>
#include <limits>

namespace gpipe {
#define GEN_PASS_DEF_PARTITION
#include "passes/Passes.h.inc"
} // namespace gpipe

using namespace mlir;
using namespace gpipe;

namespace {

// A first cost model: a 100 GFLOP/s core, 20 GB/s of memory bandwidth, and
// a backward that costs one forward per operand that needs a gradient (one
// that depends on a parameter): a GEMM on the data input skips its dX.
constexpr double kFlopsPerSecond = 100e9;
constexpr double kBytesPerSecond = 20e9;

struct PartitionPass : gpipe::impl::PartitionBase<PartitionPass> {
  using PartitionBase::PartitionBase;
  void runOnOperation() override;

private:
  /// The first unit of each stage from `cuts` (split points by hand), or a
  /// located error naming the split point.
  LogicalResult handCuts(func::FuncOp func,
                         ArrayRef<SmallVector<Operation *>> units,
                         SmallVector<size_t> &starts);
};

/// The ONNX node an op was imported from (its NameLoc), or "".
StringRef nodeName(Operation *op) {
  if (auto name = dyn_cast<NameLoc>(op->getLoc()))
    return name.getName().getValue();
  return "";
}

} // namespace

/// Estimated seconds of one op's forward and backward; `active` holds the
/// values that depend on a parameter.
static double estimateCost(Operation *op, const llvm::DenseSet<Value> &active) {
  auto cost = dyn_cast<nn::CostOpInterface>(op);
  if (!cost)
    return 0.0;
  double t = std::max(cost.getFlops() / kFlopsPerSecond,
                      cost.getBytesAccessed() / kBytesPerSecond);
  int64_t gradients = llvm::count_if(
      op->getOperands(), [&](Value v) { return active.contains(v); });
  return t * (1 + gradients);
}

/// The value whose storage `v` is a view of (through nn.reshape), or `v`.
static Value viewRootOf(Value v) {
  while (auto r = v.getDefiningOp<nn::ReshapeOp>())
    v = r.getInput();
  return v;
}

LogicalResult PartitionPass::handCuts(func::FuncOp func,
                                      ArrayRef<SmallVector<Operation *>> units,
                                      SmallVector<size_t> &starts) {
  const size_t want = static_cast<size_t>(stages) - 1;
  if (cuts.size() != want)
    return func.emitError("the split points name ")
           << cuts.size() << " node(s), but " << static_cast<int64_t>(stages)
           << " stages need " << want;
  starts.assign(1, 0);
  std::string previous;
  for (const std::string &cut : cuts) {
    // The node itself, else the first node under the module path.
    std::string under = (cut.front() == '/' ? "" : "/") + cut + "/";
    std::optional<size_t> at;
    Operation *found = nullptr;
    for (int exact = 1; exact >= 0 && !at; --exact)
      for (auto [u, unit] : llvm::enumerate(units)) {
        for (Operation *op : unit) {
          StringRef name = nodeName(op);
          if (exact ? name == cut : name.starts_with(under)) {
            at = u;
            found = op;
            break;
          }
        }
        if (at)
          break;
      }
    if (!at)
      return func.emitError("split point '")
             << cut << "': no node of that name, and none under '" << under
             << "'";
    if (found != units[*at].front())
      return found->emitError("split point '")
             << cut
             << "' computes nothing (a view goes with the op before it): "
                "split at a node that computes";
    if (*at <= starts.back())
      return found->emitError("split point '")
             << cut << "' is not after "
             << (previous.empty() ? std::string("the first op of the graph")
                                  : "split point '" + previous + "'")
             << ": split points go in program order, and every stage needs "
                "at least one op";
    starts.push_back(*at);
    previous = cut;
  }
  return success();
}

void PartitionPass::runOnOperation() {
  func::FuncOp func = getOperation();
  if (func.isExternal())
    return;
  if (stages < 1) {
    func.emitError("stages must be >= 1, got ") << static_cast<int64_t>(stages);
    return signalPassFailure();
  }
  Block &block = func.getBody().front();
  SmallVector<Operation *> compute;
  for (Operation &op : block.without_terminator())
    if (!isa<nn::ParamOp, nn::ConstantOp>(op))
      compute.push_back(&op);
  // The loss goes last, so it lands on the last stage (nothing reads it: any
  // op after it in the block is independent of it).
  Operation *ret = block.getTerminator();
  for (unsigned i = 0, e = func.getNumResults(); i < e; ++i)
    if (nn::isLoss(func, i))
      if (Operation *loss = ret->getOperand(i).getDefiningOp()) {
        auto it = llvm::find(compute, loss);
        if (it != compute.end() && loss->hasOneUse()) {
          compute.erase(it);
          compute.push_back(loss);
        }
      }
  // Reshapes are views that compute nothing: each rides with the op before
  // it (or after it, at the start), so every stage does real work.
  SmallVector<SmallVector<Operation *>> units;
  bool onlyViews = false;
  for (Operation *op : compute) {
    bool view = isa<nn::ReshapeOp, nn::UpdateRunningStatsOp>(op);
    if (units.empty() || (!view && !onlyViews)) {
      units.push_back({op});
      onlyViews = view;
      continue;
    }
    units.back().push_back(op);
    onlyViews &= view;
  }
  if (static_cast<int64_t>(units.size()) < stages) {
    func.emitError("cannot split ")
        << units.size() << " compute ops into " << static_cast<int64_t>(stages)
        << " stages: every stage needs at least one op (reshapes do not count)";
    return signalPassFailure();
  }
  llvm::DenseSet<Value> active;
  for (Operation &op : block.without_terminator())
    if (isa<nn::ParamOp>(op) || llvm::any_of(op.getOperands(), [&](Value v) {
          return active.contains(v);
        }))
      active.insert(op.getResults().begin(), op.getResults().end());
  SmallVector<double> cost;
  for (auto &unit : units) {
    cost.push_back(0.0);
    for (Operation *op : unit)
      cost.back() += estimateCost(op, active);
  }
  SmallVector<size_t> starts;
  if (cuts.empty()) {
    // Enough units for `stages` groups was checked above: a cut exists.
    starts = *balancedCuts(cost, stages);
  } else if (failed(handCuts(func, units, starts))) {
    return signalPassFailure();
  }

  int64_t stage = 0;
  for (auto [i, unit] : llvm::enumerate(units)) {
    while (stage + 1 < stages && i >= starts[stage + 1])
      ++stage;
    for (Operation *op : unit)
      pipeline::setStage(op, stage);
  }
  // A view of a graph input computes nothing and reads nothing another stage
  // computed: it goes with its first user (a loss's labels then stay a graph
  // input of the loss's stage, which counts them for an ignore_index), not
  // with the op before it. Users first: walk backwards.
  for (Operation &op : llvm::reverse(block)) {
    auto view = dyn_cast<nn::ReshapeOp>(op);
    if (!view || !isa<BlockArgument>(viewRootOf(view.getInput())))
      continue;
    std::optional<int64_t> first;
    for (Operation *user : view->getUsers())
      if (std::optional<int64_t> s = pipeline::getStage(user))
        first = first ? std::min(*first, *s) : *s;
    if (first)
      pipeline::setStage(view, *first);
  }
  // Parameters live on the stage of their users; a parameter used on
  // several stages (tied weights) is owned by the first, which sends its
  // value to the others and receives their gradients (gpipe-outline-stages).
  for (Operation &op : block) {
    auto param = dyn_cast<nn::ParamOp>(op);
    if (!param)
      continue;
    std::optional<int64_t> at;
    for (Operation *user : param->getUsers())
      if (std::optional<int64_t> s = pipeline::getStage(user))
        at = at ? std::min(*at, *s) : *s;
    if (at)
      pipeline::setStage(param, *at);
  }
  pipeline::setNumStages(func, stages);
}
